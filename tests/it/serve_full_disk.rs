//! `serve` on a disk that fills up and frees again (a small tmpfs holding the state
//! directory, filled to the last byte; as root): reads keep answering, `/ready` says what
//! is wrong, and once there is room the director records what it could not, releases
//! the locks and takes new work, by itself.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use fleet_updater::config::ServeLimits;
use reqwest::Method;
use serde_json::Value;

use fleet_updater::director::sim::Latency;

use crate::served::{Served, small_fleet};

const RMQ: &str = "service-instance_rmq-01";

/// A tmpfs of `megabytes` mounted for the test, unmounted when it ends.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(megabytes: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap().keep();
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={megabytes}m"),
                "fleet-full",
            ])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("not run: a tmpfs cannot be mounted here (needs root)");
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(SmallDisk(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

async fn ready(s: &Served) -> (u16, Value) {
    let response = s.send(Method::GET, "/ready").await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_keeps_reads_answering_and_the_director_heals_when_room_returns() {
    let Some(disk) = SmallDisk::mount(64) else {
        return;
    };
    // One RabbitMQ cluster whose agents take a while to answer: a restart runs for
    // seconds, long enough to fill the disk under it.
    let mut definition = small_fleet();
    definition.provision[0].count = 0;
    definition.provision[1].count = 1;
    definition.simulation.agent_latency = Latency {
        min: Duration::from_millis(300),
        max: Duration::from_millis(400),
    };
    let s = Served::start_fleet(
        tempfile::tempdir_in(&disk.0).unwrap(),
        &definition,
        ServeLimits::default(),
    )
    .await;
    assert_eq!(ready(&s).await.0, 200);
    let running = s
        .put(&format!("/deployments/{RMQ}/jobs/rabbitmq?state=restart"))
        .await;
    let mut asked = vec![Served::task_of(&running)];
    let filler = disk.0.join("filler");
    crate::chaos::fill(&filler);

    // Work asked for now cannot be recorded at all (an error now), or is refused as the
    // deployment is locked.
    for _ in 0..3 {
        let response = s
            .put(&format!("/deployments/{RMQ}/jobs/rabbitmq?state=restart"))
            .await;
        match response.status().as_u16() {
            302 => asked.push(Served::task_of(&response)),
            status => assert!(
                [409, 500].contains(&status),
                "refused plainly, not hung: {status}"
            ),
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deployments = s.send(Method::GET, "/deployments").await;
    assert_eq!(deployments.status(), 200, "reads answer on a full disk");
    let tasks = s.send(Method::GET, "/tasks").await;
    assert_eq!(tasks.status(), 200);
    let (status, said) = ready(&s).await;
    assert_eq!(status, 503, "{said}");
    assert_eq!(said["ready"], false);
    // The restart under way cannot record its end: it waits for room, and says so.
    let mut waited = Duration::ZERO;
    loop {
        let (_, said) = ready(&s).await;
        if said["tasks_awaiting_store"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(asked[0]))
        {
            break;
        }
        assert!(waited < Duration::from_secs(60), "{said}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        waited += Duration::from_millis(500);
    }
    let stuck = s.get_json(&format!("/tasks/{}", asked[0])).await;
    assert_eq!(stuck["state"], "processing", "{stuck}");

    std::fs::remove_file(&filler).unwrap();
    let mut waited = Duration::ZERO;
    loop {
        let (status, said) = ready(&s).await;
        let locks = s.get_json("/locks").await;
        if status == 200 && locks.as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            waited < Duration::from_secs(60),
            "healed by itself: {said} {locks}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        waited += Duration::from_millis(500);
    }
    for id in asked {
        let task = s.wait_task(id).await;
        assert_ne!(task["state"], "processing", "{task}");
    }
    let running = s
        .get_json("/tasks?state=queued,processing,cancelling&verbose=2")
        .await;
    assert_eq!(running.as_array().unwrap().len(), 0, "{running}");
    let again = s
        .put(&format!("/deployments/{RMQ}/jobs/rabbitmq?state=restart"))
        .await;
    let task = s.wait_task(Served::task_of(&again)).await;
    assert_eq!(task["state"], "done", "{task}");
    drop(s);
    drop(disk);
}

/// The state store's write-ahead log needs less of the disk than a small state directory
/// has: a store that rewrites its documents for long (more than three times the disk in
/// all) keeps taking writes on a 40 MiB disk, where a log checkpointed only at 64 MiB
/// filled it; and a store whose disk filled to the last byte takes writes again once
/// room returns.
#[test]
fn the_state_stores_log_fits_a_small_disk_and_writes_resume_when_room_returns() {
    use fleet_store::{Collection, SqliteStore, Store, put};
    const DOCUMENTS: Collection = Collection::new("documents");
    let Some(disk) = SmallDisk::mount(40) else {
        return;
    };
    let dir = disk.0.join("state");
    let store = SqliteStore::open(&dir).unwrap();
    let body = "x".repeat(32 * 1024);
    let log_size = || std::fs::metadata(dir.join("fleet.db-wal")).map_or(0, |m| m.len());
    let mut largest = 0;
    for round in 0..4_000 {
        let key = format!("doc-{}", round % 32);
        // Every page of the body changes: SQLite writes only the pages that do.
        let changed = format!("{round:08}").repeat(4 * 1024);
        store
            .write(vec![put(DOCUMENTS, &key, "", &changed)])
            .unwrap_or_else(|e| panic!("write {round} on a 40 MiB disk: {e}"));
        largest = largest.max(log_size());
    }
    assert!(
        largest <= 20 * 1024 * 1024,
        "the log grew to {largest} bytes"
    );

    let filler = disk.0.join("filler");
    crate::chaos::fill(&filler);
    let mut refused = false;
    for round in 0..2_000 {
        // New documents (more than the disk holds): the database itself must grow.
        let key = format!("new-{round}");
        if store.write(vec![put(DOCUMENTS, &key, "", &body)]).is_err() {
            refused = true;
            break;
        }
    }
    assert!(refused, "the full disk refused a write");
    std::fs::remove_file(&filler).unwrap();
    store
        .write(vec![put(DOCUMENTS, "after", "", &body)])
        .expect("room returned: the store writes again");
    let read: Option<String> = fleet_store::get(&store, DOCUMENTS, "after").unwrap();
    assert_eq!(read.as_deref(), Some(body.as_str()));
}
