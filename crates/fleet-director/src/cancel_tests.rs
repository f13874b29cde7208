//! A cancelled task stops its long steps at once, not at its next safe point: each test
//! makes every agent call take 40 s (just within the agents' timeout), cancels the task
//! while it waits on one, and looks at how long the task took to end and what it left.

use std::time::Duration;

use super::logs::LogRequest;
use super::model::{Task, TaskState};
use super::sim::{Latency, SimulationSettings};
use super::tests::{Fixture, deploy, fixture_with, manifest};
use super::*;

const SLOW: Duration = Duration::from_secs(40);

/// A fleet whose agents take 40 s to answer anything.
async fn slow_agents() -> Fixture {
    let settings = SimulationSettings {
        agent_latency: Latency {
            min: SLOW,
            max: SLOW,
        },
        ..SimulationSettings::default()
    };
    fixture_with(fleet_store::testing::store(), settings).await
}

/// Waits until the cloud is asked `call`; then cancels `task` and waits for its end.
async fn cancel_during(f: &Fixture, task: u64, call: &str) -> (Task, Duration) {
    let mut calls = Vec::new();
    while !calls.iter().any(|c: &String| c.starts_with(call)) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        calls.extend(f.cloud.take_calls());
    }
    let asked = tokio::time::Instant::now();
    f.director.cancel(task).await.unwrap();
    let ended = f.director.wait(task).await.unwrap();
    (ended, asked.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_deploy_stops_its_compilation_at_once_and_leaves_no_compilation_vm() {
    let f = slow_agents().await;
    let task = f
        .director
        .deploy(&manifest("d", 1, "1.0", 0), DeployOptions::default())
        .await
        .unwrap();
    let (ended, took) = cancel_during(&f, task.id, "compile_package").await;
    assert_eq!(ended.state, TaskState::Cancelled, "{:?}", ended.result);
    assert!(
        took < Duration::from_secs(5),
        "ended {took:?} after its cancellation"
    );
    assert!(f.cloud.vms().await.is_empty(), "{:?}", f.cloud.vms().await);
    assert!(f.director.compilation_vms("d").await.unwrap().is_empty());
    assert!(f.director.locks().await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_log_fetch_stops_at_once() {
    let f = slow_agents().await;
    // Deployed first, the agents answering as slowly as ever.
    let done = deploy(&f.director, &manifest("d", 1, "1.0", 0)).await;
    assert_eq!(done.state, TaskState::Done, "{:?}", done.result);
    let task = f
        .director
        .fetch_logs("d", None, None, LogRequest::default())
        .await
        .unwrap();
    let (ended, took) = cancel_during(&f, task.id, "fetch_logs").await;
    assert_eq!(ended.state, TaskState::Cancelled, "{:?}", ended.result);
    assert!(
        took < Duration::from_secs(5),
        "ended {took:?} after its cancellation"
    );
}
