//! The operator narrows a run: instances included by plan, id pattern, organization and
//! space, others excluded, some taken right after the canaries. In virtual time against
//! the scripted inventory.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use fleet_clock::WallClock;
use fleet_inventory_scripted::{ScriptedInventory, Step, parse_steps};
use fleet_rollout::filter::{Criteria, InstanceFilter};
use fleet_rollout::inventory::{Instance, InstanceContext};
use fleet_rollout::report::PlanReport;
use fleet_rollout::*;

/// `(id, plan, space)`: each runs a minute.
fn fleet(instances: &[(&str, &str, &str)]) -> ScriptedInventory {
    instances
        .iter()
        .fold(ScriptedInventory::new(), |inv, (id, plan, space)| {
            let mut instance = Instance::new(*id, *plan);
            instance.context = Some(Box::new(InstanceContext {
                space_name: Some(space.to_string()),
                ..InstanceContext::default()
            }));
            let steps: Vec<Step> = parse_steps("runs 1m").unwrap();
            inv.with(instance, steps)
        })
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn settings(canaries: usize, filter: InstanceFilter) -> Settings {
    Settings {
        max_in_parallel: NonZeroUsize::MIN,
        canaries,
        filter,
        requests_per_second: Rate::UNLIMITED,
        ..Settings::default()
    }
}

async fn run(inventory: &ScriptedInventory, settings: Settings) -> (PlanReport, Report) {
    let clock = WallClock::anchored_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    let rollout = Rollout::new(Arc::new(inventory.clone()), settings, clock);
    let plan = rollout.plan().await.unwrap();
    let planned = PlanReport::new(&plan, 1);
    let mut recorder = Recorder::default();
    let (_signals, interrupts) = watch::channel(0);
    let report = rollout.execute(plan, &mut recorder, interrupts).await;
    (planned, report)
}

fn triggered(inventory: &ScriptedInventory) -> Vec<String> {
    inventory
        .triggers()
        .into_iter()
        .map(|(_, id)| id.0)
        .collect()
}

const FLEET: &[(&str, &str, &str)] = &[
    ("pg-01", "small", "prod"),
    ("pg-02", "large", "prod"),
    ("pg-03", "small", "frozen"),
    ("rmq-01", "small", "prod"),
    ("rmq-02", "small", "prod"),
];

#[tokio::test(start_paused = true)]
async fn included_plans_and_ids_narrow_the_run_and_exclusions_leave_instances_alone() {
    let inventory = fleet(FLEET);
    let filter = InstanceFilter {
        include: Criteria {
            plans: names(&["small"]),
            ..Criteria::default()
        },
        exclude: Criteria {
            instances: names(&["rmq-0?"]),
            spaces: names(&["frozen"]),
            ..Criteria::default()
        },
        first: Vec::new(),
    };
    let (planned, report) = run(&inventory, settings(0, filter)).await;
    assert!(report.succeeded());
    assert_eq!(triggered(&inventory), ["pg-01"]);
    let excluded: Vec<(&str, &str)> = report
        .excluded
        .iter()
        .map(|e| (e.id.as_str(), e.reason.as_str()))
        .collect();
    assert_eq!(
        excluded,
        [
            ("pg-02", "its plan is not among those included"),
            ("pg-03", "its space is excluded"),
            ("rmq-01", "its instance id is excluded"),
            ("rmq-02", "its instance id is excluded"),
        ]
    );
    assert_eq!(
        planned.excluded, report.excluded,
        "the dry run shows the same"
    );
    assert_eq!(planned.selected, 1);
}

#[tokio::test(start_paused = true)]
async fn instances_named_first_go_right_after_the_canaries() {
    let inventory = fleet(FLEET);
    let filter = InstanceFilter {
        first: names(&["rmq-02", "pg-03"]),
        ..InstanceFilter::default()
    };
    let (planned, report) = run(&inventory, settings(1, filter)).await;
    assert!(report.succeeded());
    let order: Vec<&str> = planned.order.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(order[..3], ["pg-02", "rmq-02", "pg-03"], "{order:?}");
    assert!(planned.order[0].canary_candidate && !planned.order[1].canary_candidate);
    assert_eq!(triggered(&inventory)[..3], ["pg-02", "rmq-02", "pg-03"]);
}
