//! Canaries chosen by a selection, as the On-Demand Service Broker's errand chooses them:
//! a second listing with the criteria; a selection that matches nothing fails at once;
//! the canary count is clamped to the matches, and `0` makes every match a canary; only
//! matches may be canaries. In virtual time against the scripted inventory.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use fleet_clock::WallClock;
use fleet_inventory_scripted::{ScriptedInventory, parse_steps};
use fleet_rollout::inventory::{Criteria, Instance, InstanceContext};
use fleet_rollout::*;

/// `(id, space, script)`: instances in org `system`, in the space given.
fn fleet(instances: &[(&str, &str, &str)]) -> ScriptedInventory {
    instances
        .iter()
        .fold(ScriptedInventory::new(), |inv, (id, space, script)| {
            let mut instance = Instance::new(*id, "plan");
            instance.context = Some(Box::new(InstanceContext {
                organization_name: Some("system".into()),
                space_name: Some(space.to_string()),
                ..InstanceContext::default()
            }));
            let steps: Vec<fleet_inventory_scripted::Step> = script
                .split(',')
                .flat_map(|s| parse_steps(s.trim()).unwrap())
                .collect();
            inv.with(instance, steps)
        })
}

fn settings(max_in_parallel: usize, canaries: usize, space: &str) -> Settings {
    let canary_selection: Criteria = [
        ("cf_org".to_string(), "system".to_string()),
        ("cf_space".to_string(), space.to_string()),
    ]
    .into();
    Settings {
        max_in_parallel: NonZeroUsize::new(max_in_parallel).unwrap(),
        canaries,
        canary_selection,
        requests_per_second: Rate::UNLIMITED,
        ..Settings::default()
    }
}

fn rollout(inventory: &ScriptedInventory, settings: Settings) -> Rollout<ScriptedInventory> {
    let clock = WallClock::anchored_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    Rollout::new(Arc::new(inventory.clone()), settings, clock)
}

async fn run(inventory: &ScriptedInventory, settings: Settings) -> (Report, Vec<Event>) {
    let rollout = rollout(inventory, settings);
    let plan = rollout.plan().await.expect("planned");
    let mut recorder = Recorder::default();
    let (_signals, interrupts) = watch::channel(0);
    let report = rollout.execute(plan, &mut recorder, interrupts).await;
    (
        report,
        recorder.events.into_iter().map(|(_, e)| e).collect(),
    )
}

fn triggered(inventory: &ScriptedInventory) -> Vec<String> {
    inventory
        .triggers()
        .into_iter()
        .map(|(_, id)| id.0)
        .collect()
}

fn canaries(report: &Report) -> Vec<&str> {
    report
        .instances
        .iter()
        .filter(|i| i.canary)
        .map(|i| i.id.as_str())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn canaries_come_from_the_selection_first_and_the_rest_waits_for_them() {
    let inventory = fleet(&[
        ("a", "prod", "runs 1m"),
        ("b", "canaries", "runs 5m"),
        ("c", "prod", "runs 1m"),
        ("d", "canaries", "runs 1m"),
    ]);
    let (report, _) = run(&inventory, settings(4, 1, "canaries")).await;
    assert!(report.succeeded());
    assert_eq!(canaries(&report), ["b"]);
    assert_eq!(
        triggered(&inventory)[0],
        "b",
        "the selection's first match goes first"
    );
    let b_done = inventory.triggers_of("b")[0] + Duration::from_secs(300);
    for other in ["a", "c", "d"] {
        assert!(inventory.triggers_of(other)[0] >= b_done, "{other} waited");
    }
}

#[tokio::test(start_paused = true)]
async fn the_count_is_clamped_to_the_matches_and_zero_makes_every_match_a_canary() {
    let inventory = fleet(&[
        ("a", "prod", "runs 1m"),
        ("b", "canaries", "runs 1m"),
        ("c", "canaries", "runs 1m"),
        ("d", "prod", "runs 1m"),
    ]);
    let (clamped, _) = run(&inventory, settings(4, 5, "canaries")).await;
    assert!(clamped.succeeded());
    assert_eq!(canaries(&clamped), ["b", "c"], "5 asked, 2 match");

    let inventory = fleet(&[
        ("a", "prod", "runs 1m"),
        ("b", "canaries", "runs 1m"),
        ("c", "canaries", "runs 1m"),
    ]);
    let (every, _) = run(&inventory, settings(1, 0, "canaries")).await;
    assert!(every.succeeded());
    assert_eq!(
        canaries(&every),
        ["b", "c"],
        "0 with a selection: every match"
    );
    assert_eq!(triggered(&inventory), ["b", "c", "a"]);
}

#[tokio::test(start_paused = true)]
async fn a_selection_that_matches_nothing_fails_before_anything_starts() {
    let inventory = fleet(&[("a", "prod", "runs 1m"), ("b", "prod", "runs 1m")]);
    let e = rollout(&inventory, settings(2, 1, "canaries"))
        .plan()
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "no instance matches the canary selection (cf_org: system, cf_space: canaries) while \
         2 instances exist: make `canary_selection` match one or more of them, or remove it"
    );
    assert!(inventory.triggers().is_empty());
    // Instances exist even when none needs work: ODB's errand fails then too.
    let mut current = Instance::new("c", "plan");
    current.update_available = false;
    let up_to_date = ScriptedInventory::new().with(current, Vec::new());
    let e = rollout(&up_to_date, settings(2, 1, "canaries"))
        .plan()
        .await
        .unwrap_err();
    assert!(e.to_string().contains("while 1 instances exist"), "{e}");
    // An empty fleet is no failure: there is nothing to protect.
    let empty = ScriptedInventory::new();
    assert!(
        rollout(&empty, settings(2, 1, "canaries"))
            .plan()
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn only_matches_may_be_canaries_and_a_failed_one_stops_the_run() {
    // b needs nothing: the next match, not the next instance, takes its place.
    let inventory = fleet(&[
        ("a", "prod", "runs 1m"),
        ("b", "canaries", "up_to_date"),
        ("c", "prod", "runs 1m"),
        ("d", "canaries", "runs 1m, failed"),
    ]);
    let (report, events) = run(&inventory, settings(2, 1, "canaries")).await;
    assert_eq!(report.status, Status::Failed);
    assert_eq!(canaries(&report), ["d"]);
    assert_eq!(
        triggered(&inventory),
        ["b", "d"],
        "no other instance started"
    );
    assert!(
        events.iter().any(
            |e| matches!(e, Event::Stopping { reason } if reason.starts_with("canary d failed"))
        )
    );
}

#[tokio::test(start_paused = true)]
async fn canaries_that_stay_busy_leave_the_rest_untouched() {
    let inventory = fleet(&[
        ("a", "prod", "runs 1m"),
        ("b", "canaries", "busy, busy, busy, busy, busy"),
    ]);
    let mut settings = settings(2, 1, "canaries");
    settings.busy_attempts = 2;
    let (report, events) = run(&inventory, settings).await;
    assert_eq!(report.status, Status::Failed);
    assert!(
        triggered(&inventory).iter().all(|id| id == "b"),
        "a never started"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Stopping { reason } if reason.contains("stayed busy")))
    );
}
