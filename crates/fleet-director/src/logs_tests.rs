//! Fetching logs against the simulated cloud, in virtual time: one instance's bundle is
//! the agent's, several are packed together by group and id, an unknown instance is
//! refused before any task, an unresponsive agent fails the task, and bundles go after
//! ten days.

use crate::model::{Task, TaskKind};
use std::time::Duration;

use super::logs::{KEPT_FOR_MS, LogRequest};
use super::model::TaskState;
use super::tests::{deploy, failed, fixture, manifest};
use super::*;

/// Fetches to the end: the task, and the bundle its result names.
async fn fetch(director: &Director, group: &str, id: &str) -> (Task, Vec<u8>) {
    let task = director
        .fetch_logs("d", Some(group), Some(id), LogRequest::default())
        .await
        .unwrap();
    let task = director.wait(task.id).await.unwrap();
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let id = task.result.clone().unwrap();
    let bundle = director.log_bundle(&id).await.unwrap().unwrap();
    (task, bundle)
}

fn paths(tgz: &[u8]) -> Vec<String> {
    fleet_release::tgz_paths(tgz, 1 << 20).unwrap()
}

#[tokio::test(start_paused = true)]
async fn one_instance_gives_the_agents_bundle_and_several_are_packed_by_group_and_id() {
    let f = fixture(vec![]).await;
    assert_eq!(
        deploy(&f.director, &manifest("d", 3, "1.0", 0)).await.state,
        TaskState::Done
    );
    let instances = f.director.instances("d").await.unwrap();
    // By index or by id: the simulated agent's bundle, an archive with no files.
    let (task, one) = fetch(&f.director, "web", "1").await;
    assert_eq!(TaskKind::of(&task), Some(TaskKind::FetchLogs));
    assert!(paths(&one).is_empty());
    let by_id = &instances.iter().find(|i| i.index == 2).unwrap().id;
    fetch(&f.director, "web", by_id).await;
    // Every instance: one bundle each, named by group and id.
    let (_, all) = fetch(&f.director, "*", "*").await;
    let mut inner = paths(&all);
    inner.sort();
    assert_eq!(inner.len(), 3, "{inner:?}");
    for instance in &instances {
        assert!(
            inner
                .iter()
                .any(|p| p.starts_with(&format!("web.{}.", instance.id)) && p.ends_with(".tgz")),
            "{inner:?}"
        );
    }
    for file in fleet_release::tgz_files(&all, 1 << 20).unwrap() {
        assert!(paths(&file.bytes).is_empty(), "each is the agent's bundle");
    }
    // Reads only: the deployment's last operation is still its deploy.
    let last = f.director.last_change("d").await.unwrap().unwrap();
    assert_eq!(TaskKind::of(&last), Some(TaskKind::CreateDeployment));
}

#[tokio::test(start_paused = true)]
async fn no_instance_chosen_is_refused_and_an_unresponsive_agent_fails_the_fetch() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 2, "1.0", 0)).await;
    for (group, id) in [("db", "*"), ("web", "7"), ("web", "no-such-id")] {
        let refused = f
            .director
            .fetch_logs("d", Some(group), Some(id), LogRequest::default())
            .await
            .unwrap_err();
        assert!(
            matches!(refused, DirectorError::NotFound { .. }) && refused.to_string().contains(id),
            "{refused}"
        );
    }
    assert!(matches!(
        f.director
            .fetch_logs("nope", None, None, LogRequest::default())
            .await,
        Err(DirectorError::NotFound { .. })
    ));
    let stuck = f.director.instances("d").await.unwrap()[0]
        .agent_id
        .clone()
        .unwrap();
    f.cloud.set_responsive(&stuck, false).await.unwrap();
    let task = f
        .director
        .fetch_logs("d", None, None, LogRequest::default())
        .await
        .unwrap();
    let task = f.director.wait(task.id).await.unwrap();
    assert!(failed(&task).contains("fetch_logs"), "{:?}", task.result);
}

#[tokio::test(start_paused = true)]
async fn bundles_are_kept_ten_days_and_clean_up_leaves_kept_ones() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 1, "1.0", 0)).await;
    let (old, _) = fetch(&f.director, "web", "0").await;
    let old = old.result.unwrap();
    let cleaned = f
        .director
        .clean_up(cleanup::CleanUpOptions::default())
        .await
        .unwrap();
    assert_eq!(
        f.director.wait(cleaned.id).await.unwrap().state,
        TaskState::Done
    );
    assert!(f.director.log_bundle(&old).await.unwrap().is_some());
    tokio::time::advance(Duration::from_millis(KEPT_FOR_MS - 60_000)).await;
    let (_, _) = fetch(&f.director, "web", "0").await;
    assert!(
        f.director.log_bundle(&old).await.unwrap().is_some(),
        "not ten days old yet"
    );
    tokio::time::advance(Duration::from_secs(120)).await;
    let (newest, _) = fetch(&f.director, "web", "0").await;
    assert!(f.director.log_bundle(&old).await.unwrap().is_none());
    let blobs = f.director.store().run(|s| s.blob_ids()).await.unwrap();
    assert!(!blobs.contains(&old), "its blob is deleted too");
    assert!(blobs.contains(&newest.result.unwrap()));
    // Only kept bundles are handed out: not another blob, nor one named like a bundle
    // that no record keeps.
    for other in ["sha1-of-a-release-job", "logs-not-kept"] {
        f.director
            .store()
            .run(move |s| s.put_blob(other, b"x"))
            .await
            .unwrap();
        assert!(f.director.log_bundle(other).await.unwrap().is_none());
    }
}
