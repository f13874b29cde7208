//! Canaries checked before the rest: a check runs after each canary's operation
//! succeeded, its time is a canary's time, and a failed or overlong check is a failed
//! canary that stops the run once the work in flight is done. In virtual time.

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use fleet_clock::WallClock;
use fleet_inventory_scripted::{ScriptedInventory, Step, parse_steps};
use fleet_rollout::check::{CanaryCheck, CheckResult};
use fleet_rollout::inventory::Instance;
use fleet_rollout::*;

const MIN: Duration = Duration::from_secs(60);

/// Which instances were checked, and when.
type Checked = Arc<Mutex<Vec<(String, Instant)>>>;

/// A smoke test that takes two minutes and fails for the instances named.
struct SmokeTest {
    failing: Vec<&'static str>,
    takes: Duration,
    checked: Checked,
}

impl CanaryCheck for SmokeTest {
    fn check(
        &self,
        instance: Instance,
        _deadline: Instant,
    ) -> Pin<Box<dyn Future<Output = CheckResult> + Send>> {
        let fails = self.failing.contains(&instance.id.0.as_str());
        let (takes, checked) = (self.takes, Arc::clone(&self.checked));
        Box::pin(async move {
            checked
                .lock()
                .unwrap()
                .push((instance.id.0.clone(), Instant::now()));
            tokio::time::sleep(takes).await;
            if fails {
                Err("exit code 1: connection refused".into())
            } else {
                Ok("exit code 0: 3 tests passed".into())
            }
        })
    }

    fn time_limit(&self) -> Duration {
        5 * MIN
    }

    fn describe(&self) -> String {
        "errand smoke-tests".into()
    }
}

fn fleet(ids: &[&str]) -> ScriptedInventory {
    ids.iter().fold(ScriptedInventory::new(), |inv, id| {
        let steps: Vec<Step> = parse_steps("runs 1m").unwrap();
        inv.with(Instance::new(*id, "plan"), steps)
    })
}

async fn run(
    inventory: &ScriptedInventory,
    canaries: usize,
    check: SmokeTest,
) -> (Report, Vec<Event>) {
    let settings = Settings {
        max_in_parallel: NonZeroUsize::new(2).unwrap(),
        canaries,
        requests_per_second: Rate::UNLIMITED,
        ..Settings::default()
    };
    let clock = WallClock::anchored_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let rollout = Rollout::new(Arc::new(inventory.clone()), settings, clock)
        .with_canary_check(Arc::new(check));
    let plan = rollout.plan().await.unwrap();
    let mut recorder = Recorder::default();
    let (_signals, interrupts) = watch::channel(0);
    let report = rollout.execute(plan, &mut recorder, interrupts).await;
    (
        report,
        recorder.events.into_iter().map(|(_, e)| e).collect(),
    )
}

fn smoke(failing: Vec<&'static str>, takes: Duration) -> (SmokeTest, Checked) {
    let checked = Arc::new(Mutex::new(Vec::new()));
    (
        SmokeTest {
            failing,
            takes,
            checked: Arc::clone(&checked),
        },
        checked,
    )
}

#[tokio::test(start_paused = true)]
async fn a_passing_check_lets_the_rest_go_on_after_it_and_only_canaries_are_checked() {
    let inventory = fleet(&["a", "b", "c"]);
    let start = Instant::now();
    let (check, checked) = smoke(Vec::new(), 2 * MIN);
    let (report, events) = run(&inventory, 1, check).await;
    assert!(report.succeeded());
    let checked = checked.lock().unwrap().clone();
    assert_eq!(checked.len(), 1, "only the canary: {checked:?}");
    assert_eq!(checked[0].0, "a");
    assert!(
        checked[0].1 >= start + MIN && checked[0].1 < start + 2 * MIN,
        "once its operation is seen to succeed"
    );
    for other in ["b", "c"] {
        assert!(
            inventory.triggers_of(other)[0] >= checked[0].1 + 2 * MIN,
            "{other} waited for the check"
        );
    }
    let a = report.instances.iter().find(|i| i.id == "a").unwrap();
    assert_eq!(
        a.check.as_deref(),
        Some("errand smoke-tests passed: exit code 0: 3 tests passed")
    );
    assert!(events.iter().any(|e| matches!(e, Event::Checking { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_failed_check_fails_the_canary_and_stops_the_run_with_work_in_flight_finished() {
    let inventory = fleet(&["a", "b", "c", "d"]);
    let (check, _) = smoke(vec!["a"], 2 * MIN);
    let (report, events) = run(&inventory, 2, check).await;
    assert_eq!(report.status, Status::Failed);
    let outcome = |id: &str| report.instances.iter().find(|i| i.id == id).unwrap();
    assert_eq!(outcome("a").outcome, Outcome::Failed);
    assert_eq!(
        outcome("a").reason.as_deref(),
        Some("the canary check (errand smoke-tests) failed: exit code 1: connection refused")
    );
    assert_eq!(
        outcome("b").outcome,
        Outcome::Updated,
        "the other canary finished"
    );
    assert_eq!(outcome("c").outcome, Outcome::NotStarted);
    assert_eq!(outcome("d").outcome, Outcome::NotStarted);
    assert!(
        events.iter().any(
            |e| matches!(e, Event::Stopping { reason } if reason.starts_with("canary a failed"))
        )
    );
}

#[tokio::test(start_paused = true)]
async fn a_check_past_its_time_limit_has_failed() {
    let inventory = fleet(&["a", "b"]);
    let (check, _) = smoke(Vec::new(), 10 * MIN);
    let (report, _) = run(&inventory, 1, check).await;
    assert_eq!(report.status, Status::Failed);
    let a = report.instances.iter().find(|i| i.id == "a").unwrap();
    assert_eq!(
        a.reason.as_deref(),
        Some(
            "the canary check (errand smoke-tests) failed: errand smoke-tests did not finish within 5m00s"
        )
    );
    assert!(inventory.triggers_of("b").is_empty());
}
