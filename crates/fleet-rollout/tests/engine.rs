//! Engine behaviour in virtual time against the scripted inventory.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use fleet_clock::WallClock;
use fleet_inventory_scripted::{CallKind, ListStep, ScriptedInventory, Step, parse_steps};
use fleet_rollout::inventory::{Instance, Selection};
use fleet_rollout::*;

const MIN: Duration = Duration::from_secs(60);

fn script(text: &str) -> Vec<Step> {
    text.split(',')
        .flat_map(|s| parse_steps(s.trim()).unwrap())
        .collect()
}

fn fleet(scripts: &[(&str, &str)]) -> ScriptedInventory {
    scripts
        .iter()
        .fold(ScriptedInventory::new(), |inv, (id, s)| {
            inv.with(Instance::new(*id, "plan"), script(s))
        })
}

fn settings(max_in_parallel: usize, canaries: usize) -> Settings {
    Settings {
        max_in_parallel: NonZeroUsize::new(max_in_parallel).expect("tests run at least one"),
        canaries,
        requests_per_second: Rate::UNLIMITED,
        ..Settings::default()
    }
}

struct Run {
    report: Report,
    events: Vec<Event>,
}

impl Run {
    fn outcome(&self, id: &str) -> Outcome {
        self.instance(id).outcome
    }

    fn instance(&self, id: &str) -> &InstanceReport {
        self.report
            .instances
            .iter()
            .find(|i| i.id == id)
            .unwrap_or_else(|| panic!("{id} is not in the report"))
    }

    fn position(&self, wanted: impl Fn(&Event) -> bool) -> Option<usize> {
        self.events.iter().position(wanted)
    }
}

async fn run(inventory: &ScriptedInventory, settings: Settings) -> Run {
    let (_signals, interrupts) = watch::channel(0);
    run_with(inventory, settings, interrupts).await
}

async fn run_with(
    inventory: &ScriptedInventory,
    settings: Settings,
    interrupts: Interrupts,
) -> Run {
    let clock = WallClock::anchored_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let rollout = Rollout::new(Arc::new(inventory.clone()), settings, clock);
    let plan = rollout.plan().await.expect("listing succeeds");
    let mut recorder = Recorder::default();
    let report = rollout.execute(plan, &mut recorder, interrupts).await;
    Run {
        report,
        events: recorder.events.into_iter().map(|(_, e)| e).collect(),
    }
}

fn succeeded_at(run: &Run, id: &str) -> Option<usize> {
    run.position(|e| matches!(e, Event::Succeeded { id: i, .. } if i.0 == id))
}

#[tokio::test(start_paused = true)]
async fn canaries_run_first_and_alone() {
    let inventory = fleet(&[
        ("a", "runs 5m"),
        ("b", "runs 7m"),
        ("c", "runs 1m"),
        ("d", "runs 1m"),
        ("e", "runs 1m"),
    ]);
    let start = Instant::now();
    let run = run(&inventory, settings(4, 2)).await;

    assert!(run.report.succeeded());
    let triggers = inventory.triggers();
    let first_two: Vec<_> = triggers[..2].iter().map(|(_, id)| id.0.as_str()).collect();
    assert_eq!(first_two, ["a", "b"]);
    assert!(triggers[..2].iter().all(|(at, _)| *at == start));
    // Nothing else starts until the slower canary has succeeded.
    for (at, id) in &triggers[2..] {
        assert!(
            *at >= start + 7 * MIN,
            "{id} started during the canary phase"
        );
    }
    assert!(run.instance("a").canary && run.instance("b").canary);
    assert!(!run.instance("c").canary);
    let last_canary = succeeded_at(&run, "b").unwrap();
    let first_main = run
        .position(|e| matches!(e, Event::Triggering { canary: false, .. }))
        .unwrap();
    assert!(first_main > last_canary);
}

#[tokio::test(start_paused = true)]
async fn canaries_run_at_most_max_in_parallel_at_once() {
    let inventory = fleet(&[
        ("a", "runs 5m"),
        ("b", "runs 5m"),
        ("c", "runs 5m"),
        ("d", "runs 5m"),
    ]);
    let start = Instant::now();
    run(&inventory, settings(2, 3)).await;
    let c = inventory.triggers_of("c");
    assert!(
        c[0] >= start + 5 * MIN,
        "the third canary waited for a free slot"
    );
    let d = inventory.triggers_of("d");
    assert!(
        d[0] >= c[0] + 5 * MIN,
        "the main phase waited for every canary"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_canary_stops_everything() {
    let inventory = fleet(&[
        ("a", "runs 1m, failed"),
        ("b", "runs 3m"),
        ("c", "runs 1m"),
        ("d", "runs 1m"),
    ]);
    let run = run(&inventory, settings(2, 2)).await;

    assert_eq!(run.report.status, Status::Failed);
    assert_eq!(run.outcome("a"), Outcome::Failed);
    assert!(run.instance("a").canary);
    assert_eq!(
        run.outcome("b"),
        Outcome::Updated,
        "the canary in flight finished"
    );
    assert_eq!(run.outcome("c"), Outcome::NotStarted);
    assert_eq!(run.outcome("d"), Outcome::NotStarted);
    let triggered: Vec<_> = inventory
        .triggers()
        .into_iter()
        .map(|(_, id)| id.0)
        .collect();
    assert_eq!(triggered, ["a", "b"]);
    assert!(
        run.events.iter().any(
            |e| matches!(e, Event::Stopping { reason } if reason.starts_with("canary a failed"))
        )
    );
}

#[tokio::test(start_paused = true)]
async fn a_canary_that_needs_nothing_is_replaced_by_the_next_instance() {
    let inventory = fleet(&[("a", "up_to_date"), ("b", "runs 2m"), ("c", "runs 1m")]);
    let start = Instant::now();
    let run = run(&inventory, settings(3, 1)).await;
    assert_eq!(run.outcome("a"), Outcome::SkippedUpToDate);
    assert!(!run.instance("a").canary);
    assert!(run.instance("b").canary);
    assert!(inventory.triggers_of("c")[0] >= start + 2 * MIN);
}

#[tokio::test(start_paused = true)]
async fn peak_in_flight_never_exceeds_max_in_parallel() {
    let scripts: Vec<(String, String)> = (0..50)
        .map(|i| (format!("si-{i:02}"), format!("runs {}m", 1 + (i * 7) % 13)))
        .collect();
    let refs: Vec<(&str, &str)> = scripts
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let inventory = fleet(&refs);
    let run = run(&inventory, settings(7, 3)).await;
    assert!(run.report.succeeded());
    assert_eq!(run.report.counts.updated, 50);
    assert_eq!(inventory.peak_running(), 7);
}

#[tokio::test(start_paused = true)]
async fn the_window_is_work_conserving() {
    let mut scripts = vec![("a-slow", "runs 1h")];
    let ids: Vec<String> = (0..10).map(|i| format!("fast-{i}")).collect();
    scripts.extend(ids.iter().map(|id| (id.as_str(), "runs 1m")));
    let inventory = fleet(&scripts);
    let start = Instant::now();
    let run = run(&inventory, settings(3, 0)).await;
    assert!(run.report.succeeded());
    // Two slots stay busy with fast instances while the slow one runs: five rounds of a
    // minute (plus polling granularity), far from waiting for the hour-long operation.
    let last_fast = ids
        .iter()
        .map(|id| *inventory.triggers_of(id).last().unwrap())
        .max()
        .unwrap();
    assert!(
        last_fast < start + 6 * MIN,
        "fast instances were held back: {:?}",
        last_fast - start
    );
    // A freed slot is refilled at the moment it frees: each fast trigger after the first two
    // coincides with a completion (a poll that saw success).
    let polls: Vec<Instant> = inventory
        .calls()
        .into_iter()
        .filter(|c| matches!(c.kind, CallKind::Poll(_)))
        .map(|c| c.at)
        .collect();
    for id in &ids[2..] {
        let at = inventory.triggers_of(id)[0];
        assert!(
            polls.contains(&at),
            "{id} started at {:?}, not when a slot freed",
            at - start
        );
    }
}

#[tokio::test(start_paused = true)]
async fn busy_instances_are_retried_after_the_others() {
    let inventory = fleet(&[("a", "busy, runs 1m"), ("b", "runs 1m"), ("c", "runs 1m")]);
    let run = run(&inventory, settings(1, 0)).await;
    assert!(run.report.succeeded());
    let order: Vec<_> = inventory
        .triggers()
        .into_iter()
        .map(|(_, id)| id.0)
        .collect();
    assert_eq!(order, ["a", "b", "c", "a"]);
    let a = inventory.triggers_of("a");
    let c = inventory.triggers_of("c");
    assert!(
        a[1] >= c[0] + MIN,
        "the round starts a retry interval after the last of the others"
    );
    assert_eq!(run.instance("a").attempts, 2);
    assert_eq!(run.outcome("a"), Outcome::Updated);
    assert!(run.events.iter().any(|e| matches!(
        e,
        Event::RoundStarted {
            round: 2,
            instances: 1,
            ..
        }
    )));
}

#[tokio::test(start_paused = true)]
async fn busy_instances_fail_the_run_after_the_attempt_limit() {
    let inventory = fleet(&[("a", "busy x9"), ("b", "runs 1m")]);
    let mut settings = settings(2, 0);
    settings.busy_attempts = 3;
    let run = run(&inventory, settings).await;
    assert_eq!(run.report.status, Status::Failed);
    assert_eq!(run.outcome("a"), Outcome::Busy);
    assert_eq!(run.outcome("b"), Outcome::Updated);
    assert_eq!(run.report.counts.busy, 1);
    let a = inventory.triggers_of("a");
    assert_eq!(a.len(), 3);
    assert!(a[1] - a[0] >= MIN && a[2] - a[1] >= MIN);
    assert!(
        run.instance("a")
            .reason
            .as_deref()
            .unwrap()
            .contains("still busy after 3 attempts")
    );
}

#[tokio::test(start_paused = true)]
async fn a_failure_stops_new_launches_while_in_flight_ones_finish() {
    let inventory = fleet(&[
        ("a", "runs 5m"),
        ("b", "runs 2m, failed"),
        ("c", "runs 5m"),
        ("d", "runs 1m"),
        ("e", "runs 1m"),
    ]);
    let start = Instant::now();
    let run = run(&inventory, settings(3, 0)).await;
    assert_eq!(run.report.status, Status::Failed);
    assert_eq!(run.outcome("b"), Outcome::Failed);
    assert_eq!(run.outcome("a"), Outcome::Updated);
    assert_eq!(run.outcome("c"), Outcome::Updated);
    assert_eq!(run.outcome("d"), Outcome::NotStarted);
    assert_eq!(run.outcome("e"), Outcome::NotStarted);
    assert!(inventory.triggers().iter().all(|(at, _)| *at == start));
    assert_eq!(run.report.counts.failed, 1);
    assert_eq!(run.report.counts.not_started, 2);
}

#[tokio::test(start_paused = true)]
async fn blocked_instances_are_skipped_without_a_request() {
    let mut blocked = Instance::new("owner-says-no", "plan");
    blocked.maintenance_updates_blocked = true;
    let inventory = fleet(&[("a", "runs 1m")]).with(blocked, script("runs 1m"));
    let run = run(&inventory, settings(2, 0)).await;
    assert!(run.report.succeeded());
    assert_eq!(run.outcome("owner-says-no"), Outcome::SkippedBlocked);
    assert!(inventory.triggers_of("owner-says-no").is_empty());
    assert_eq!(run.report.counts.skipped_blocked, 1);
}

#[tokio::test(start_paused = true)]
async fn blocked_instances_are_updated_with_force() {
    let mut blocked = Instance::new("owner-says-no", "plan");
    blocked.maintenance_updates_blocked = true;
    let inventory = ScriptedInventory::new().with(blocked, script("runs 1m"));
    let mut settings = settings(1, 0);
    settings.strategy = Strategy::Update {
        instance_type: Selection::Outdated,
        force: true,
    };
    let run = run(&inventory, settings).await;
    assert_eq!(run.outcome("owner-says-no"), Outcome::Updated);
    assert!(inventory.calls().iter().any(|c| matches!(
        &c.kind,
        CallKind::Trigger { id, force: true, .. } if id.0 == "owner-says-no"
    )));
}

#[tokio::test(start_paused = true)]
async fn a_block_that_appears_during_the_run_is_a_skip() {
    let inventory = fleet(&[("a", "blocked")]);
    let run = run(&inventory, settings(1, 0)).await;
    assert!(run.report.succeeded());
    assert_eq!(run.outcome("a"), Outcome::SkippedBlocked);
}

#[tokio::test(start_paused = true)]
async fn deleted_and_orphaned_instances_do_not_fail_the_run() {
    let inventory = fleet(&[
        ("a", "deleted"),
        ("b", "orphaned"),
        ("c", "runs 1m, gone"),
        ("d", "up_to_date"),
    ]);
    let run = run(&inventory, settings(4, 0)).await;
    assert!(run.report.succeeded(), "{:?}", run.report.counts);
    let counts = &run.report.counts;
    assert_eq!(
        (counts.deleted, counts.orphaned, counts.skipped_up_to_date),
        (2, 1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn an_operation_past_its_timeout_fails() {
    let inventory = fleet(&[("a", "runs 3h"), ("b", "runs 1m")]);
    let start = Instant::now();
    let run = run(&inventory, settings(1, 0)).await;
    assert_eq!(run.outcome("a"), Outcome::Failed);
    let reason = run.instance("a").reason.clone().unwrap();
    assert!(reason.contains("did not finish within 2h"), "{reason}");
    assert_eq!(run.outcome("b"), Outcome::NotStarted);
    assert!(Instant::now() - start >= Duration::from_secs(7200));
    assert!(Instant::now() - start < Duration::from_secs(7200 + 60));
}

#[tokio::test(start_paused = true)]
async fn the_rate_limit_holds_in_every_virtual_second() {
    let ids: Vec<String> = (0..30).map(|i| format!("si-{i:02}")).collect();
    let scripts: Vec<(&str, &str)> = ids
        .iter()
        .map(|id| (id.as_str(), "in_progress, succeeded"))
        .collect();
    let inventory = fleet(&scripts);
    let mut settings = settings(10, 0);
    settings.requests_per_second = Rate::per_second(2.0).unwrap();
    settings.poll_interval = Duration::from_secs(1);
    let run = run(&inventory, settings).await;
    assert!(run.report.succeeded());
    let times: Vec<Instant> = inventory.calls().into_iter().map(|c| c.at).collect();
    assert_eq!(
        times.len(),
        1 + 30 * 3,
        "a list, then a trigger and two polls per instance"
    );
    for window in times.windows(3) {
        assert!(
            window[2] - window[0] >= Duration::from_secs(1),
            "three requests within a second"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_ambiguous_trigger_is_read_back_not_repeated() {
    // The lost trigger did start a five-minute operation; b must wait for its slot.
    let inventory = fleet(&[("a", "lost, runs 5m, up_to_date"), ("b", "runs 1m")]);
    let start = Instant::now();
    let run = run(&inventory, settings(1, 0)).await;
    assert!(run.report.succeeded(), "{:?}", run.report.counts);
    let a = inventory.triggers_of("a");
    assert_eq!(a.len(), 2, "sent once, then once more in the next round");
    let calls = inventory.calls();
    let first_trigger = calls
        .iter()
        .position(|c| matches!(&c.kind, CallKind::Trigger { id, .. } if id.0 == "a"))
        .unwrap();
    assert!(
        matches!(&calls[first_trigger + 1].kind, CallKind::Read(id) if id.0 == "a"),
        "read back right after the lost answer"
    );
    assert!(
        inventory.triggers_of("b")[0] >= start + 5 * MIN,
        "the slot stayed taken"
    );
    assert_eq!(inventory.peak_running(), 1);
    assert!(
        a[1] >= inventory.triggers_of("b")[0],
        "retried after the others"
    );
    assert!(run.events.iter().any(|e| matches!(
        e,
        Event::Busy { id, reason, .. } if id.0 == "a" && reason.contains("operation in progress has ended")
    )));
    assert_eq!(run.outcome("a"), Outcome::SkippedUpToDate);
}

#[tokio::test(start_paused = true)]
async fn a_lost_trigger_that_started_nothing_is_retried_in_the_next_round() {
    let inventory = fleet(&[("a", "lost, up_to_date")]);
    let run = run(&inventory, settings(1, 0)).await;
    let a = inventory.triggers_of("a");
    assert_eq!(a.len(), 2);
    assert!(a[1] - a[0] >= MIN);
    assert!(run.events.iter().any(|e| matches!(
        e,
        Event::Busy { reason, .. } if reason.contains("no operation is in progress")
    )));
}

#[tokio::test(start_paused = true)]
async fn polling_survives_a_broker_outage_longer_than_the_backoff() {
    let inventory = fleet(&[(
        "a",
        "runs 1m, poll_unavailable x5, poll_unavailable x5, succeeded",
    )]);
    let run = run(&inventory, settings(1, 0)).await;
    assert_eq!(run.outcome("a"), Outcome::Updated);
}

/// Panics when polling one instance, as a buggy adapter might.
#[derive(Clone)]
struct Panicking(ScriptedInventory);

impl fleet_rollout::inventory::Inventory for Panicking {
    async fn list(
        &self,
        selection: Selection,
    ) -> Result<Vec<Instance>, fleet_rollout::inventory::InventoryError> {
        self.0.list(selection).await
    }

    async fn instance(
        &self,
        id: &fleet_rollout::inventory::InstanceId,
    ) -> Result<Option<Instance>, fleet_rollout::inventory::InventoryError> {
        self.0.instance(id).await
    }

    async fn trigger(
        &self,
        instance: &Instance,
        action: fleet_rollout::inventory::Action,
        force: bool,
    ) -> Result<fleet_rollout::inventory::Triggered, fleet_rollout::inventory::InventoryError> {
        self.0.trigger(instance, action, force).await
    }

    async fn poll(
        &self,
        operation: &fleet_rollout::inventory::Operation,
    ) -> Result<fleet_rollout::inventory::OperationState, fleet_rollout::inventory::InventoryError>
    {
        assert_ne!(operation.instance.0, "a-fragile", "adapter bug");
        self.0.poll(operation).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_task_fails_its_instance_instead_of_hanging_the_run() {
    let inventory = Panicking(fleet(&[
        ("a-fragile", "runs 1m"),
        ("b-sturdy", "runs 2m"),
        ("c-later", "runs 1m"),
    ]));
    let rollout = Rollout::new(Arc::new(inventory), settings(2, 0), WallClock::new());
    let plan = rollout.plan().await.unwrap();
    let (_signals, interrupts) = watch::channel(0);
    let report = rollout
        .execute(plan, &mut Recorder::default(), interrupts)
        .await;
    let outcome = |id: &str| report.instances.iter().find(|i| i.id == id).unwrap();
    assert_eq!(outcome("a-fragile").outcome, Outcome::Failed);
    assert!(
        outcome("a-fragile")
            .reason
            .as_deref()
            .unwrap()
            .contains("internal error")
    );
    assert_eq!(outcome("b-sturdy").outcome, Outcome::Updated);
    assert_eq!(outcome("c-later").outcome, Outcome::NotStarted);
}

#[tokio::test(start_paused = true)]
async fn transient_faults_are_retried_with_backoff() {
    let inventory = fleet(&[(
        "a",
        "unavailable, unavailable, runs 1m, poll_unavailable, succeeded",
    )])
    .with_list_script([ListStep::Unavailable, ListStep::Unavailable]);
    let run = run(&inventory, settings(1, 0)).await;
    assert!(run.report.succeeded());
    let a = inventory.triggers_of("a");
    assert_eq!(a.len(), 3);
    assert_eq!(a[1] - a[0], Duration::from_secs(1));
    assert_eq!(a[2] - a[1], Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn listing_that_keeps_failing_is_an_error_and_triggers_nothing() {
    let inventory = fleet(&[("a", "runs 1m")]).with_list_script([ListStep::Unavailable; 5]);
    let rollout = Rollout::new(
        Arc::new(inventory.clone()),
        settings(1, 0),
        WallClock::new(),
    );
    let err = rollout.plan().await.unwrap_err();
    assert!(err.to_string().contains("after 5 attempts"), "{err}");
    assert!(inventory.triggers().is_empty());

    let inventory = fleet(&[("a", "runs 1m")]).with_list_script([ListStep::Error]);
    let rollout = Rollout::new(
        Arc::new(inventory.clone()),
        settings(1, 0),
        WallClock::new(),
    );
    assert!(rollout.plan().await.is_err());
    assert_eq!(
        inventory.calls().len(),
        1,
        "a permanent error is not retried"
    );
}

#[tokio::test(start_paused = true)]
async fn a_trigger_error_fails_the_instance() {
    let inventory = fleet(&[("a", "error"), ("b", "runs 1m")]);
    let run = run(&inventory, settings(1, 0)).await;
    assert_eq!(run.outcome("a"), Outcome::Failed);
    assert!(
        run.instance("a")
            .reason
            .as_deref()
            .unwrap()
            .contains("update request failed")
    );
    assert_eq!(run.outcome("b"), Outcome::NotStarted);
}

/// When each poll of the run was sent, from its start.
fn poll_times(inventory: &ScriptedInventory, start: Instant) -> Vec<Duration> {
    inventory
        .calls()
        .into_iter()
        .filter(|c| matches!(c.kind, CallKind::Poll(_)))
        .map(|c| c.at - start)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_server_retry_after_sets_the_pace_after_a_first_poll_soon_after_the_trigger() {
    let inventory = fleet(&[("a", "retry_after 1m, succeeded")]);
    let start = Instant::now();
    run(&inventory, settings(1, 0)).await;
    assert_eq!(
        poll_times(&inventory, start),
        [Duration::from_secs(1), Duration::from_secs(61)]
    );
}

#[tokio::test(start_paused = true)]
async fn polls_start_a_second_after_the_trigger_and_back_off_to_the_interval() {
    let inventory = fleet(&[("a", "runs 20s")]);
    let start = Instant::now();
    let run = run(&inventory, settings(1, 0)).await;
    assert_eq!(run.outcome("a"), Outcome::Updated);
    let seconds: Vec<u64> = poll_times(&inventory, start)
        .iter()
        .map(Duration::as_secs)
        .collect();
    // 1 s, then waits of 2, 4 and 8 s, then the 10 s interval.
    assert_eq!(seconds, [1, 3, 7, 15, 25]);
}

#[tokio::test(start_paused = true)]
async fn progress_is_reported_at_least_every_thirty_seconds_while_waiting() {
    let inventory = fleet(&[("a", "runs 5m")]);
    let run = run(&inventory, settings(1, 0)).await;
    let progress = run
        .events
        .iter()
        .filter(|e| matches!(e, Event::Progress { .. }))
        .count();
    assert!(
        progress >= 9,
        "only {progress} progress lines in five minutes"
    );
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_stops_launching_and_waits_for_in_flight_work() {
    let inventory = fleet(&[("a", "runs 3m"), ("b", "runs 3m"), ("c", "runs 1m")]);
    let (signals, interrupts) = watch::channel(0);
    tokio::spawn(async move {
        tokio::time::sleep(MIN).await;
        signals.send_replace(1);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(signals);
    });
    let run = run_with(&inventory, settings(2, 0), interrupts).await;
    assert!(run.report.interrupted);
    assert_eq!(run.report.status, Status::Failed);
    assert_eq!(run.outcome("a"), Outcome::Updated);
    assert_eq!(run.outcome("b"), Outcome::Updated);
    assert_eq!(run.outcome("c"), Outcome::NotStarted);
}

#[tokio::test(start_paused = true)]
async fn in_flight_work_beyond_the_grace_period_is_reported_unfinished() {
    let inventory = fleet(&[("a", "runs 1h")]);
    let (signals, interrupts) = watch::channel(0);
    tokio::spawn(async move {
        tokio::time::sleep(MIN).await;
        signals.send_replace(1);
        tokio::time::sleep(Duration::from_secs(7200)).await;
        drop(signals);
    });
    let start = Instant::now();
    let mut settings = settings(1, 0);
    settings.grace_period = 2 * MIN;
    let run = run_with(&inventory, settings, interrupts).await;
    assert_eq!(run.outcome("a"), Outcome::Unfinished);
    assert_eq!(run.report.counts.unfinished, 1);
    assert!(
        run.instance("a")
            .reason
            .as_deref()
            .unwrap()
            .contains("still running")
    );
    assert_eq!(Instant::now() - start, 3 * MIN);
}

#[tokio::test(start_paused = true)]
async fn recreate_touches_every_instance_that_is_not_deleted() {
    let mut current = Instance::new("current", "plan");
    current.update_available = false;
    let inventory = fleet(&[("outdated", "runs 1m")]).with(current, script("runs 1m"));
    let mut settings = settings(2, 0);
    settings.strategy = Strategy::Recreate {
        fix: true,
        force: false,
    };
    let run = run(&inventory, settings).await;
    assert_eq!(run.report.counts.updated, 2);
    assert!(inventory.calls().iter().all(|c| !matches!(
        c.kind,
        CallKind::Trigger {
            action: fleet_rollout::inventory::Action::Update,
            ..
        }
    )));
}

#[tokio::test(start_paused = true)]
async fn the_report_counts_every_selected_instance_once() {
    let inventory = fleet(&[("a", "runs 1m"), ("b", "up_to_date"), ("c", "deleted")]);
    let run = run(&inventory, settings(2, 1)).await;
    let c = &run.report.counts;
    assert_eq!(c.selected, 3);
    assert_eq!(c.updated + c.skipped_up_to_date + c.deleted, 3);
    assert_eq!(run.report.instances.len(), 3);
    let json = serde_json::to_value(&run.report).unwrap();
    assert_eq!(json["started_at"], "2027-01-15T08:00:00Z");
    assert_eq!(json["instances"][0]["started_at"], "2027-01-15T08:00:00Z");
}

#[tokio::test(start_paused = true)]
async fn planning_lists_and_triggers_nothing() {
    let mut blocked = Instance::new("blocked", "plan");
    blocked.maintenance_updates_blocked = true;
    let inventory = fleet(&[("a", "runs 1m"), ("b", "error")]).with(blocked, script("runs 1m"));
    let rollout = Rollout::new(
        Arc::new(inventory.clone()),
        settings(2, 1),
        WallClock::new(),
    );
    let plan = rollout.plan().await.unwrap();
    assert_eq!(plan.canaries, 1);
    assert_eq!(plan.order.len(), 2);
    assert_eq!(plan.skipped.len(), 1);
    let report = PlanReport::new(&plan, 2);
    assert!(report.order[0].canary_candidate && !report.order[1].canary_candidate);
    let calls: Vec<CallKind> = inventory.calls().into_iter().map(|c| c.kind).collect();
    assert_eq!(calls, [CallKind::List]);
}
