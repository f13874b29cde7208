//! The embedded default fleet run in this process, as `fleet-updater run` runs it, in
//! virtual time: the demo's watch times, polling and retry intervals elapse at once, so a
//! run takes only the fleet's own work. What the binary adds (exit codes, the report's
//! printing, kills halfway) is in `embedded.rs`.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use fleet_updater::clock::WallClock;
use fleet_updater::config::{Config, Overrides, StrategyKind};
use fleet_updater::fleet::{self, Access, DEMO, DEMO_CONFIG, Definition};
use fleet_updater::inventory::embedded::EmbeddedInventory;
use fleet_updater::output::TextOutput;
use fleet_updater::rollout::Rollout;
use fleet_updater::store::StoreLocation;
use serde_json::Value;
use tokio::sync::watch;

use super::embedded::director_tasks;
use crate::support::{Workspace, ids_with};

/// Runs the demo fleet kept in `state` with the run configuration at `config` (the
/// built-in demo's without one), and returns its report as the binary writes it.
fn run(state: &Path, config: Option<&Path>, strategy: Option<StrategyKind>) -> Value {
    let (text, base) = match config {
        Some(path) => (
            std::fs::read_to_string(path).unwrap(),
            path.parent().unwrap().to_path_buf(),
        ),
        None => (DEMO_CONFIG.to_string(), Path::new(".").to_path_buf()),
    };
    let mut config = Config::parse(&text, "config", &base).unwrap();
    config.apply(&Overrides {
        strategy,
        ..Overrides::default()
    });
    let mut definition = Definition::parse_in(DEMO, Path::new(".")).unwrap();
    definition
        .simulation
        .faults
        .extend(config.faults.iter().cloned());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let report = runtime.block_on(async {
        let fleet = fleet::open(
            state,
            &definition,
            Access::RUN,
            &StoreLocation::Sqlite,
            &mut |_| {},
        )
        .await
        .unwrap();
        let inventory = Arc::new(EmbeddedInventory::new(Arc::clone(&fleet.broker)));
        let rollout = Rollout::new(inventory, config.settings(), WallClock::new());
        let plan = rollout.plan().await.unwrap();
        let (_signals, interrupts) = watch::channel(0);
        rollout
            .execute(plan, &mut TextOutput::new(std::io::sink()), interrupts)
            .await
    });
    drop(runtime);
    serde_json::to_value(&report).unwrap()
}
#[test]
fn recreate_touches_every_instance() {
    let ws = Workspace::new();
    let state = ws.path("state");
    let report = run(&state, None, Some(StrategyKind::Recreate));
    assert_eq!(report["status"], "succeeded", "{report}");
    assert_eq!(report["counts"]["selected"], 30);
    assert_eq!(report["counts"]["updated"], 30);
    let recreated: BTreeSet<String> = director_tasks(&state)
        .into_iter()
        .filter(|(_, state, _, description)| {
            state == "done" && description == "recreate deployment"
        })
        .map(|(_, _, deployment, _)| deployment)
        .collect();
    assert_eq!(recreated.len(), 30);
}

#[test]
fn a_fault_fails_the_run_after_in_flight_work_finished_and_nothing_started_later() {
    let ws = Workspace::new();
    let state = ws.path("state");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo-faults.yml");
    let report = run(&state, Some(&config), None);
    assert_eq!(report["status"], "failed", "{report}");
    assert_eq!(
        ids_with(&report, "failed"),
        BTreeSet::from(["pg-09".to_string()])
    );
    let instances = report["instances"].as_array().unwrap();
    let failed_at = instances.iter().find(|i| i["id"] == "pg-09").unwrap()["finished_at"]
        .as_str()
        .unwrap()
        .to_string();
    for i in instances {
        if let Some(started) = i["started_at"].as_str() {
            assert!(
                started <= failed_at.as_str(),
                "{} started after the failure",
                i["id"]
            );
            assert!(i["finished_at"].is_string(), "{} did not finish", i["id"]);
        }
    }
    assert_eq!(report["counts"]["unfinished"], 0);
    assert!(report["counts"]["not_started"].as_u64().unwrap() > 0);
    // The director agrees: every task ended, and no update began after pg-09's.
    let tasks = director_tasks(&state);
    assert!(
        tasks.iter().all(|(_, s, _, _)| s == "done" || s == "error"),
        "{tasks:?}"
    );
    let failing = tasks
        .iter()
        .filter(|(_, s, d, desc)| {
            s == "error" && d == "service-instance_pg-09" && desc == "update deployment"
        })
        .map(|(id, ..)| *id)
        .max()
        .expect("pg-09's update task failed");
    let later: Vec<_> = tasks
        .iter()
        .filter(|(id, _, _, desc)| *id > failing && desc == "update deployment")
        .collect();
    // Updates already in flight when pg-09 failed were triggered before it failed, so any
    // later task id belongs to one of them; none may belong to an instance started after.
    for (_, _, deployment, _) in later {
        let id = deployment.trim_start_matches("service-instance_");
        let entry = instances.iter().find(|i| i["id"] == id).unwrap();
        assert!(entry["started_at"].as_str().unwrap() <= failed_at.as_str());
    }
}
