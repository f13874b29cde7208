//! Invariants of the engine over random fleets, scripts and settings.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tokio::sync::watch;

use fleet_clock::WallClock;
use fleet_inventory_scripted::{ScriptedInventory, Step};
use fleet_rollout::inventory::Instance;
use fleet_rollout::{Event, Outcome, Rate, Recorder, Rollout, Settings, Status};

fn trigger_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => Just(Step::Accepted),
        2 => Just(Step::Busy),
        1 => Just(Step::UpToDate),
        1 => Just(Step::Deleted),
        1 => Just(Step::Orphaned),
        1 => Just(Step::Unavailable),
        1 => Just(Step::Lost),
    ]
}

fn ending() -> impl Strategy<Value = Vec<Step>> {
    prop_oneof![
        12 => Just(vec![]),
        1 => Just(vec![Step::Failed]),
        1 => Just(vec![Step::Error]),
        1 => Just(vec![Step::Gone]),
    ]
}

/// Some trigger answers, then an operation of random length, then how it ends.
fn script() -> impl Strategy<Value = Vec<Step>> {
    (
        prop::collection::vec(trigger_step(), 0..4),
        1u64..600,
        ending(),
    )
        .prop_map(|(mut steps, seconds, end)| {
            steps.push(Step::Runs(Duration::from_secs(seconds)));
            steps.extend(end);
            steps
        })
}

fn fleet() -> impl Strategy<Value = Vec<(String, bool, Vec<Step>)>> {
    prop::collection::vec((any::<bool>(), prop::bool::weighted(0.1), script()), 1..30).prop_map(
        |entries| {
            entries
                .into_iter()
                .enumerate()
                .map(|(i, (big, blocked, steps))| {
                    (
                        format!("{}-{i:02}", if big { "big" } else { "small" }),
                        blocked,
                        steps,
                    )
                })
                .collect()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_engine_keeps_its_promises(
        fleet in fleet(),
        max_in_parallel in 1usize..6,
        canaries in 0usize..4,
        busy_attempts in 1u32..4,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let mut inventory = ScriptedInventory::new();
        for (id, blocked, steps) in &fleet {
            let plan = if id.starts_with("big") { "big" } else { "small" };
            let mut instance = Instance::new(id.clone(), plan);
            instance.maintenance_updates_blocked = *blocked;
            inventory = inventory.with(instance, steps.clone());
        }
        let settings = Settings {
            max_in_parallel: NonZeroUsize::new(max_in_parallel).expect("the strategy draws from 1"),
            canaries,
            busy_attempts,
            requests_per_second: Rate::per_second(50.0).unwrap(),
            ..Settings::default()
        };
        let (report, events) = runtime.block_on(async {
            let rollout = Rollout::new(Arc::new(inventory.clone()), settings, WallClock::new());
            let plan = rollout.plan().await.unwrap();
            let mut recorder = Recorder::default();
            let (_signals, interrupts) = watch::channel(0);
            let report = rollout.execute(plan, &mut recorder, interrupts).await;
            (report, recorder.events.into_iter().map(|(_, e)| e).collect::<Vec<_>>())
        });

        // Never more in flight than allowed, as the inventory saw it.
        prop_assert!(inventory.peak_running() <= max_in_parallel);

        // Every instance appears once, and the counts add up.
        prop_assert_eq!(report.instances.len(), fleet.len());
        let c = &report.counts;
        prop_assert_eq!(c.selected, fleet.len());
        prop_assert_eq!(
            c.updated + c.skipped_blocked + c.skipped_up_to_date + c.deleted + c.orphaned
                + c.busy + c.failed + c.not_started + c.unfinished,
            c.selected
        );

        // Blocked instances are never triggered; busy ones at most `busy_attempts` times.
        let mut triggers: HashMap<String, usize> = HashMap::new();
        for (_, id) in inventory.triggers() {
            *triggers.entry(id.0).or_default() += 1;
        }
        for (id, blocked, _) in &fleet {
            let n = triggers.get(id).copied().unwrap_or(0);
            if *blocked {
                prop_assert_eq!(n, 0, "{} is blocked but was triggered", id);
            }
            // Transient faults are retried inside one attempt, so count attempts instead.
            let attempts = report.instances.iter().find(|i| &i.id == id).unwrap().attempts;
            prop_assert!(attempts <= busy_attempts);
        }

        // Nothing starts after the first failure is known.
        if let Some(failed_at) = events.iter().position(|e| matches!(e, Event::Failed { .. })) {
            let late = events[failed_at..].iter().any(|e| matches!(e, Event::Triggering { .. }));
            prop_assert!(!late, "an instance was started after a failure");
            prop_assert_eq!(report.status, Status::Failed);
        }

        // The main phase starts only after every canary has succeeded.
        let canary_done = events.iter().rposition(|e| match e {
            Event::Succeeded { id, .. } => report.instances.iter().any(|i| i.id == id.0 && i.canary),
            _ => false,
        });
        let first_main = events.iter().position(|e| matches!(e, Event::Triggering { canary: false, .. }));
        if let (Some(done), Some(main)) = (canary_done, first_main) {
            prop_assert!(main > done, "a non-canary started before the canaries were done");
        }
        // A canary that vanished mid-operation proved nothing and is replaced, so only the
        // successful ones are bounded by the setting.
        let canaries_succeeded = report
            .instances
            .iter()
            .filter(|i| i.canary && i.outcome == Outcome::Updated)
            .count();
        prop_assert!(canaries_succeeded <= canaries);

        // The status says exactly whether anything went wrong.
        let clean = c.failed == 0 && c.busy == 0 && c.not_started == 0 && c.unfinished == 0;
        prop_assert_eq!(report.succeeded(), clean);
    }
}
