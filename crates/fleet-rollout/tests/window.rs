//! Maintenance windows and resumed runs in virtual time: a window closing mid-run stops
//! launching, lets in-flight work finish within its grace, and defers the rest; a resumed
//! run leaves what an earlier one did alone and tries no canaries again once they passed.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use fleet_clock::WallClock;
use fleet_inventory_scripted::{ScriptedInventory, parse_steps};
use fleet_rollout::inventory::{Instance, Selection};
use fleet_rollout::*;

fn fleet(n: usize, step: &str) -> ScriptedInventory {
    (1..=n).fold(ScriptedInventory::new(), |inv, i| {
        inv.with(
            Instance::new(format!("i-{i:02}").as_str(), "plan"),
            parse_steps(step).unwrap(),
        )
    })
}

fn settings(strategy: Strategy) -> Settings {
    Settings {
        strategy,
        max_in_parallel: NonZeroUsize::new(2).unwrap(),
        canaries: 1,
        requests_per_second: Rate::UNLIMITED,
        ..Settings::default()
    }
}

async fn run(
    inventory: &ScriptedInventory,
    settings: Settings,
    done: &BTreeSet<String>,
    canaries_passed: bool,
    window: Option<WindowClose>,
) -> (Report, Vec<Event>) {
    let clock = WallClock::anchored_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let rollout = Rollout::new(Arc::new(inventory.clone()), settings, clock);
    let plan = rollout
        .plan()
        .await
        .unwrap()
        .without_done(done, canaries_passed);
    let mut recorder = Recorder::default();
    let (_signals, interrupts) = watch::channel(0);
    let report = rollout
        .execute_within(plan, &mut recorder, interrupts, window)
        .await;
    (
        report,
        recorder.events.into_iter().map(|(_, e)| e).collect(),
    )
}

fn ids(report: &Report, outcome: Outcome) -> BTreeSet<String> {
    report
        .ids_with(outcome)
        .into_iter()
        .map(String::from)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_window_closing_mid_run_lets_in_flight_work_finish_and_defers_the_rest() {
    let inventory = fleet(10, "runs 10m");
    let update = Strategy::Update {
        instance_type: Selection::All,
        force: false,
    };
    let window = WindowClose {
        at: Instant::now() + Duration::from_secs(25 * 60),
        grace: Duration::from_secs(30 * 60),
    };
    let (report, events) = run(
        &inventory,
        settings(update),
        &BTreeSet::new(),
        false,
        Some(window),
    )
    .await;
    // Canary 0-10 min, then pairs at 10-20 and 20-30: the pair started before the close
    // finishes within the grace; nothing starts after it.
    assert_eq!(report.status, Status::Deferred);
    assert_eq!(report.counts.updated, 5);
    assert_eq!(report.counts.deferred, 5);
    assert_eq!(report.counts.failed + report.counts.unfinished, 0);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Stopping { reason } if reason.contains("window closed")))
    );
    assert_eq!(inventory.triggers().len(), 5);
}

#[tokio::test(start_paused = true)]
async fn in_flight_work_past_the_grace_is_unfinished_and_fails_the_run() {
    let inventory = fleet(2, "runs 2h");
    let update = Strategy::Update {
        instance_type: Selection::All,
        force: false,
    };
    let window = WindowClose {
        at: Instant::now() + Duration::from_secs(60),
        grace: Duration::from_secs(60),
    };
    let (report, _) = run(
        &inventory,
        settings(update),
        &BTreeSet::new(),
        false,
        Some(window),
    )
    .await;
    assert_eq!(report.status, Status::Failed);
    assert_eq!((report.counts.unfinished, report.counts.deferred), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_recreate_rotation_over_three_windows_touches_each_instance_once() {
    let inventory = fleet(9, "runs 10m");
    let recreate = Strategy::Recreate {
        fix: true,
        force: true,
    };
    let mut done = BTreeSet::new();
    let mut canaries_passed = false;
    let mut canaries = Vec::new();
    for night in 0..3 {
        let window = WindowClose {
            at: Instant::now() + Duration::from_secs(15 * 60),
            grace: Duration::from_secs(60 * 60),
        };
        let (report, events) = run(
            &inventory,
            settings(recreate),
            &done,
            canaries_passed,
            Some(window),
        )
        .await;
        let updated = ids(&report, Outcome::Updated);
        assert!(
            updated.is_disjoint(&done),
            "night {night} touched again: {updated:?}"
        );
        assert_eq!(ids(&report, Outcome::DoneEarlier), done);
        canaries.extend(
            report
                .instances
                .iter()
                .filter(|i| i.canary)
                .map(|i| i.id.clone()),
        );
        canaries_passed |= events.iter().any(|e| {
            matches!(
                e,
                Event::PhaseStarted {
                    phase: Phase::Main,
                    ..
                }
            )
        });
        done.extend(updated);
        if night < 2 {
            assert_eq!(report.status, Status::Deferred, "night {night}");
        }
    }
    assert_eq!(done.len(), 9);
    assert_eq!(
        inventory.triggers().len(),
        9,
        "each instance recreated exactly once"
    );
    assert_eq!(
        canaries,
        ["i-01"],
        "the canary passed on the first night, and only then"
    );
}

#[tokio::test(start_paused = true)]
async fn a_signal_in_a_closed_windows_grace_still_waits_for_operations_in_flight() {
    let inventory = fleet(2, "runs 4m");
    let update = Strategy::Update {
        instance_type: Selection::All,
        force: false,
    };
    let window = WindowClose {
        at: Instant::now() + Duration::from_secs(60),
        grace: Duration::from_secs(60 * 60),
    };
    let clock = WallClock::anchored_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let rollout = Rollout::new(Arc::new(inventory.clone()), settings(update), clock);
    let plan = rollout.plan().await.unwrap();
    let (signals, interrupts) = watch::channel(0);
    tokio::spawn(async move {
        // After the window closed, within its grace.
        tokio::time::sleep(Duration::from_secs(120)).await;
        signals.send_modify(|n| *n += 1);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(signals);
    });
    let mut recorder = Recorder::default();
    let report = rollout
        .execute_within(plan, &mut recorder, interrupts, Some(window))
        .await;
    // The canary in flight got the interrupt's grace (5 min by default) and finished.
    assert_eq!(report.counts.updated, 1, "{:?}", report.counts);
    assert_eq!(report.counts.unfinished, 0);
    assert!(report.interrupted);
    assert_eq!(report.status, Status::Failed);
}
