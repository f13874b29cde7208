//! Errands against the simulated cloud, in virtual time: errand groups get no VMs at
//! deploy, a run makes one and deletes it again (or keeps it alive), `when-changed` skips
//! an unchanged errand, colocated errands run where their job is placed, and every result
//! is the task's result output.

use super::errand::{ErrandRequest, ErrandResult, InstanceFilter, SKIPPED};
use super::model::{DesiredState, Release, ReleaseJob, TaskState};
use super::sim::{Fault, FaultKind};
use super::tests::{deploy, failed, fixture};
use super::*;
use crate::model::Task;

/// `web` (nginx, plus the `backup` errand job when `colocated`) and the `smoke` errand
/// group, with `smoke`'s property `level`.
fn manifest(level: u32, colocated: bool) -> String {
    let backup = if colocated {
        ", {name: backup, release: tools}"
    } else {
        ""
    };
    format!(
        "name: d
releases: [{{name: nginx, version: '1'}}, {{name: tools, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '1.0'}}]
update: {{canaries: 1, max_in_flight: 2, canary_watch_time: 1000-5000, update_watch_time: 1000-5000}}
networks:
- name: default
  subnets:
  - {{range: 10.0.0.0/24, gateway: 10.0.0.1}}
instance_groups:
- name: web
  instances: 2
  jobs: [{{name: nginx, release: nginx}}{backup}]
  vm_type: small
  stemcell: default
  networks: [{{name: default}}]
- name: smoke
  lifecycle: errand
  instances: 1
  jobs: [{{name: smoke-tests, release: tools, properties: {{level: {level}}}}}]
  vm_type: small
  stemcell: default
  persistent_disk: 512
  networks: [{{name: default}}]
"
    )
}

/// A fixture with the `tools` release: `smoke-tests` and `backup` render a `bin/run`.
async fn errand_fixture(faults: Vec<Fault>) -> tests::Fixture {
    let f = fixture(faults).await;
    let errand_job = |name: &str| ReleaseJob {
        name: name.into(),
        templates: [("run.erb".to_string(), "bin/run".to_string())].into(),
        ..ReleaseJob::default()
    };
    f.director
        .upload_release(&Release {
            name: "tools".into(),
            version: "1".into(),
            jobs: vec![errand_job("smoke-tests"), errand_job("backup")],
            ..Release::default()
        })
        .await
        .unwrap();
    f
}

fn request(name: &str) -> ErrandRequest {
    ErrandRequest {
        name: name.into(),
        ..ErrandRequest::default()
    }
}

/// Runs the errand to its end: the task, and its results as the result output holds them.
async fn run(director: &Director, request: ErrandRequest) -> (Task, Vec<ErrandResult>) {
    let task = director.run_errand("d", request).await.unwrap();
    let task = director.wait(task.id).await.unwrap();
    let output = director.result_output(&task).await.unwrap();
    let results = if task.state == TaskState::Done && output != SKIPPED {
        output
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    } else {
        Vec::new()
    };
    (task, results)
}

async fn smoke(director: &Director) -> model::InstanceRecord {
    director
        .instances("d")
        .await
        .unwrap()
        .into_iter()
        .find(|i| i.group == "smoke")
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_errand_group_is_recorded_without_a_vm_and_a_run_makes_one_and_deletes_it() {
    let f = errand_fixture(vec![]).await;
    let deployed = deploy(&f.director, &manifest(1, false)).await;
    assert_eq!(deployed.state, TaskState::Done, "{:?}", deployed.result);
    let errand = smoke(&f.director).await;
    assert_eq!(
        (errand.state, errand.vm_cid.as_ref()),
        (DesiredState::Detached, None)
    );
    assert_eq!(f.cloud.vms().await.len(), 2, "only web has VMs");
    assert_eq!(
        f.director.errands("d").await.unwrap(),
        ["smoke", "smoke-tests"]
    );

    let (task, results) = run(&f.director, request("smoke")).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    assert_eq!(
        task.result.as_deref(),
        Some("1 succeeded, 0 errored, 0 canceled")
    );
    assert_eq!(results.len(), 1);
    let result = &results[0];
    assert_eq!(
        (result.instance.group.as_str(), result.instance.id.as_str()),
        ("smoke", errand.id.as_str())
    );
    assert_eq!(
        (result.exit_code, result.errand_name.as_str()),
        (0, "smoke")
    );
    assert_eq!(result.stdout, "errand smoke-tests ran on d/smoke/0\n");
    // The instance's job logs are kept, fetched before its VM went.
    let bundle = result.logs.blobstore_id.as_deref().unwrap();
    let bytes = f.director.log_bundle(bundle).await.unwrap().unwrap();
    assert_eq!(
        result.logs.sha1.as_deref(),
        Some(fleet_release::sha1_hex(&bytes).as_str())
    );
    // The VM is gone again; the instance keeps its id and disk for the next run.
    let after = smoke(&f.director).await;
    assert_eq!(
        (after.state, after.vm_cid.as_ref()),
        (DesiredState::Detached, None)
    );
    assert_eq!(after.id, errand.id);
    assert!(
        after.disk_cid.is_some(),
        "the errand's persistent disk is kept"
    );
    assert_eq!(f.cloud.vms().await.len(), 2);
    // Starting the deployment leaves the errand group without a VM.
    let started = f.director.start("d").await.unwrap();
    f.director.wait(started.id).await.unwrap();
    assert_eq!(smoke(&f.director).await.vm_cid, None);
}

#[tokio::test(start_paused = true)]
async fn keep_alive_keeps_the_vm_and_when_changed_skips_until_the_spec_changes() {
    let f = errand_fixture(vec![]).await;
    deploy(&f.director, &manifest(1, false)).await;
    let kept = ErrandRequest {
        keep_alive: true,
        when_changed: true,
        ..request("smoke")
    };
    let (task, results) = run(&f.director, kept.clone()).await;
    assert_eq!((task.state, results.len()), (TaskState::Done, 1));
    let alive = smoke(&f.director).await;
    assert_eq!(alive.state, DesiredState::Started);
    assert!(alive.vm_cid.is_some());
    assert_eq!(f.cloud.vms().await.len(), 3);

    let (again, results) = run(&f.director, kept.clone()).await;
    assert_eq!(again.result.as_deref(), Some(SKIPPED));
    assert!(results.is_empty());
    // A plain run runs whatever changed.
    let (plain, results) = run(&f.director, request("smoke")).await;
    assert_eq!((plain.state, results.len()), (TaskState::Done, 1));
    assert_eq!(
        smoke(&f.director).await.vm_cid,
        None,
        "not kept alive this time"
    );

    deploy(&f.director, &manifest(2, false)).await;
    let (changed, results) = run(&f.director, kept).await;
    assert_eq!(changed.state, TaskState::Done, "{:?}", changed.result);
    assert_eq!(results.len(), 1, "the errand's properties changed: it runs");
    let applied = smoke(&f.director).await.applied.unwrap();
    assert_eq!(applied.properties["smoke-tests"]["level"], 2);
}

#[tokio::test(start_paused = true)]
async fn a_failing_errand_is_reported_with_its_exit_code_and_is_not_skipped_next_time() {
    let fault = Fault {
        kind: FaultKind::Errand,
        deployment: String::new(),
        instance_group: "smoke".into(),
        probability: 1.0,
    };
    let f = errand_fixture(vec![fault]).await;
    deploy(&f.director, &manifest(1, false)).await;
    let when_changed = ErrandRequest {
        when_changed: true,
        ..request("smoke")
    };
    for _ in 0..2 {
        let (task, results) = run(&f.director, when_changed.clone()).await;
        // As with BOSH, the task is done; the exit code tells the errand failed.
        assert_eq!(task.state, TaskState::Done);
        assert_eq!(
            task.result.as_deref(),
            Some("0 succeeded, 1 errored, 0 canceled")
        );
        assert_eq!(results[0].exit_code, 1);
        assert!(
            results[0].stderr.contains("failed on d/smoke/0"),
            "{:?}",
            results[0]
        );
    }
    assert_eq!(
        smoke(&f.director).await.vm_cid,
        None,
        "deleted after a failed run too"
    );
}

#[tokio::test(start_paused = true)]
async fn an_unknown_errand_or_a_service_group_fails_the_task_with_the_directors_words() {
    let f = errand_fixture(vec![]).await;
    deploy(&f.director, &manifest(1, false)).await;
    let (task, _) = run(&f.director, request("nope")).await;
    assert_eq!(failed(&task), "Errand 'nope' doesn't exist");
    let (task, _) = run(&f.director, request("web")).await;
    assert!(failed(&task).starts_with("Instance group 'web' is not an errand."));
    let filtered = ErrandRequest {
        instances: vec![InstanceFilter {
            group: "smoke".into(),
            id: None,
        }],
        ..request("smoke")
    };
    let (task, _) = run(&f.director, filtered).await;
    assert!(failed(&task).starts_with("Filtering by instances is not supported"));
    assert!(matches!(
        f.director.run_errand("absent", request("smoke")).await,
        Err(DirectorError::NotFound { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_colocated_errand_runs_on_the_instances_its_filters_pick() {
    let f = errand_fixture(vec![]).await;
    let deployed = deploy(&f.director, &manifest(1, true)).await;
    assert_eq!(deployed.state, TaskState::Done, "{:?}", deployed.result);
    assert_eq!(
        f.director.errands("d").await.unwrap(),
        ["smoke", "backup", "smoke-tests"]
    );
    let (task, results) = run(&f.director, request("backup")).await;
    assert_eq!(
        task.result.as_deref(),
        Some("2 succeeded, 0 errored, 0 canceled")
    );
    let groups: Vec<&str> = results.iter().map(|r| r.instance.group.as_str()).collect();
    assert_eq!(groups, ["web", "web"]);
    assert!(
        results
            .iter()
            .all(|r| r.stdout.starts_with("errand backup ran on d/web/"))
    );

    let one = ErrandRequest {
        instances: vec![InstanceFilter {
            group: "web".into(),
            id: Some("1".into()),
        }],
        ..request("backup")
    };
    let (_, results) = run(&f.director, one).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].stdout, "errand backup ran on d/web/1\n");
    let none = ErrandRequest {
        instances: vec![InstanceFilter {
            group: "web".into(),
            id: Some("9".into()),
        }],
        ..request("backup")
    };
    let (task, _) = run(&f.director, none).await;
    assert_eq!(
        failed(&task),
        "No instances match selection criteria: [web/9]"
    );
}

#[tokio::test(start_paused = true)]
async fn tasks_started_in_a_context_are_found_by_it() {
    let f = errand_fixture(vec![]).await;
    let client = f.director.in_context(Some("ctx-42"));
    let task = client
        .deploy(&manifest(1, false), DeployOptions::default())
        .await
        .unwrap();
    f.director.wait(task.id).await.unwrap();
    let errand = client.run_errand("d", request("smoke")).await.unwrap();
    f.director.wait(errand.id).await.unwrap();
    let other = f.director.run_errand("d", request("smoke")).await.unwrap();
    f.director.wait(other.id).await.unwrap();
    let found = f
        .director
        .tasks(model::TaskFilter {
            context_id: Some("ctx-42".into()),
            ..model::TaskFilter::default()
        })
        .await
        .unwrap();
    let ids: Vec<u64> = found.iter().map(|t| t.id).collect();
    assert_eq!(
        ids,
        [errand.id, task.id],
        "newest first, the other run left out"
    );
    assert_eq!(found[0].context_id.as_deref(), Some("ctx-42"));
}

#[tokio::test(start_paused = true)]
async fn scaling_an_errand_group_down_deletes_its_instance() {
    let f = errand_fixture(vec![]).await;
    deploy(&f.director, &manifest(1, false)).await;
    let text = manifest(1, false).replace(
        "  lifecycle: errand\n  instances: 1",
        "  lifecycle: errand\n  instances: 0",
    );
    let task = deploy(&f.director, &text).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    assert!(
        f.director
            .instances("d")
            .await
            .unwrap()
            .iter()
            .all(|i| i.group != "smoke")
    );
    let (task, _) = run(&f.director, request("smoke")).await;
    assert_eq!(failed(&task), "Instance 'd/smoke/0' doesn't exist");
}
