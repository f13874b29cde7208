//! The updater against `serve` over real HTTPS: both strategies through both HTTP
//! inventories, end to end, and a CA that does not fit.

use std::collections::BTreeSet;

use fleet_updater::config::ServeLimits;
use serde_json::Value;

use crate::served::Served;
use crate::support::{Workspace, fleet_updater, ids_with, json};

/// PEM indented for a YAML block scalar.
fn block(pem: &str) -> String {
    pem.lines().map(|l| format!("    {l}\n")).collect()
}

const TUNING: &str = "busy_retry:\n  interval: 200ms\npolling:\n  interval: 100ms\nrate_limit:\n  requests_per_second: 1000\n";

fn broker_config(s: &Served, ca: &str, strategy: &str) -> String {
    format!(
        "service_broker:\n  api_endpoint: https://{}\n  username: admin\n  password: {}\n  ca: |\n{}strategy:\n  type: {strategy}\n  update: {{canaries: 1, max_in_parallel: 3}}\n  recreate: {{canaries: 1, max_in_parallel: 3}}\n{TUNING}",
        s.serving.broker,
        s.password,
        block(ca)
    )
}

pub(super) fn director_config(s: &Served, ca: &str, strategy: &str) -> String {
    format!(
        "director:\n  url: https://{}\n  username: admin\n  password: {}\n  deployments: service-instance_*\n  ca: |\n{}strategy:\n  type: {strategy}\n  update: {{canaries: 1, max_in_parallel: 3}}\n  recreate: {{canaries: 1, max_in_parallel: 3}}\n{TUNING}",
        s.serving.director,
        s.password,
        block(ca)
    )
}

/// Runs the updater with `config`; exit code, JSON report, stdout and stderr.
pub(super) async fn run(workspace: &Workspace, config: &str) -> (i32, Value, String, String) {
    let path = workspace.write("fleet.yml", config);
    let report = workspace.path("report.json");
    let mut cmd = fleet_updater();
    cmd.args(["run", "-c"])
        .arg(&path)
        .arg("--report")
        .arg(&report);
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    let report = if report.exists() {
        json(&report)
    } else {
        Value::Null
    };
    (output.status.code().unwrap(), report, stdout, stderr)
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// Every task of the served director.
pub(super) async fn tasks(s: &Served) -> Vec<fleet_updater::director::model::Task> {
    s.serving
        .fleet()
        .director()
        .tasks(Default::default())
        .await
        .unwrap()
}

/// The director's tasks with a description, by deployment.
async fn deploy_tasks(s: &Served, description: &str) -> BTreeSet<String> {
    tasks(s)
        .await
        .into_iter()
        .filter(|t| t.description == description && t.state.as_str() == "done")
        .filter_map(|t| t.deployment)
        .collect()
}

/// The ids of the report's canaries.
fn canaries(report: &Value) -> Vec<&str> {
    report["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["canary"] == true)
        .map(|i| i["id"].as_str().unwrap())
        .collect()
}

pub(super) fn ca(s: &Served) -> String {
    std::fs::read_to_string(&s.ca).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_update_strategy_through_the_broker_api_updates_all_but_the_blocked() {
    let s = Served::start(ServeLimits::default()).await;
    let w = Workspace::new();
    let (code, report, stdout, stderr) = run(&w, &broker_config(&s, &ca(&s), "update")).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(
        ids_with(&report, "updated"),
        set(&["pg-01", "pg-03", "rmq-01", "rmq-02"])
    );
    assert_eq!(ids_with(&report, "skipped_blocked"), set(&["pg-02"]));
    assert!(!stdout.contains(&s.password) && !stderr.contains(&s.password));
    // Every update is a deploy on the director.
    assert_eq!(
        deploy_tasks(&s, "update deployment").await,
        set(&[
            "service-instance_pg-01",
            "service-instance_pg-03",
            "service-instance_rmq-01",
            "service-instance_rmq-02"
        ])
    );
    // A second run finds nothing to update.
    let (code, report, ..) = run(&w, &broker_config(&s, &ca(&s), "update")).await;
    assert_eq!(code, 0);
    assert!(ids_with(&report, "updated").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_recreate_strategy_through_the_broker_api_recreates_every_instance() {
    let s = Served::start(ServeLimits::default()).await;
    let w = Workspace::new();
    let (code, report, stdout, stderr) = run(&w, &broker_config(&s, &ca(&s), "recreate")).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(
        ids_with(&report, "updated"),
        set(&["pg-01", "pg-02", "pg-03", "rmq-01", "rmq-02"])
    );
    assert_eq!(deploy_tasks(&s, "recreate deployment").await.len(), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_update_strategy_through_the_director_api_redeploys_on_the_newest_versions() {
    let s = Served::start(ServeLimits::default()).await;
    let w = Workspace::new();
    let (code, report, stdout, stderr) = run(&w, &director_config(&s, &ca(&s), "update")).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(ids_with(&report, "updated").len(), 5, "{report}");
    assert_eq!(deploy_tasks(&s, "update deployment").await.len(), 5);
    for deployment in s.serving.fleet().director().deployments().await.unwrap() {
        let manifest = deployment.manifest.unwrap();
        assert!(manifest.contains("1.612"), "{manifest}");
        assert!(
            manifest.contains("16.4") || manifest.contains("3.13.7"),
            "{manifest}"
        );
    }
    let (code, report, ..) = run(&w, &director_config(&s, &ca(&s), "update")).await;
    assert_eq!(code, 0);
    assert!(ids_with(&report, "updated").is_empty(), "{report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_recreate_strategy_through_the_director_api_recreates_with_fix() {
    let s = Served::start(ServeLimits::default()).await;
    let w = Workspace::new();
    let (code, report, stdout, stderr) = run(&w, &director_config(&s, &ca(&s), "recreate")).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(ids_with(&report, "updated").len(), 5, "{report}");
    assert_eq!(deploy_tasks(&s, "recreate deployment").await.len(), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ca_that_did_not_sign_the_server_fails_listing_with_exit_3() {
    let s = Served::start(ServeLimits::default()).await;
    // Another serve's CA: valid PEM, wrong signer.
    let other = tempfile::tempdir().unwrap();
    let other_served = Served::start_in(other, ServeLimits::default()).await;
    let wrong = ca(&other_served);
    let w = Workspace::new();
    for config in [
        broker_config(&s, &wrong, "update"),
        director_config(&s, &wrong, "update"),
    ] {
        let (code, _, stdout, stderr) = run(&w, &config).await;
        assert_eq!(code, 3, "{stdout}\n{stderr}");
        assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");
        assert!(stderr.contains("nothing was triggered"), "{stderr}");
    }
    assert!(deploy_tasks(&s, "update deployment").await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_canary_selection_picks_the_canaries_from_the_brokers_filtered_listing() {
    let s = Served::start(ServeLimits::default()).await;
    let w = Workspace::new();
    let config = broker_config(&s, &ca(&s), "update")
        + "canary_selection: {cf_org: system, cf_space: canaries}\n";
    let (code, report, stdout, stderr) = run(&w, &config).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let canaries = canaries(&report);
    assert_eq!(canaries, ["rmq-01"], "the operator's own instance first");

    // A selection that matches nothing fails before anything is triggered, naming it.
    let w = Workspace::new();
    let config = broker_config(&s, &ca(&s), "recreate")
        + "canary_selection: {cf_org: system, cf_space: nowhere}\n";
    let (code, report, stdout, stderr) = run(&w, &config).await;
    assert_eq!(code, 3, "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "no instance matches the canary selection (cf_org: system, cf_space: nowhere)"
        ),
        "{stderr}"
    );
    assert_eq!(report, Value::Null, "nothing ran");
}

/// The On-Demand Service Broker's `upgrade-all-service-instances` errand's configuration,
/// as its template renders it, pointed at `serve`'s broker.
fn odb_config(s: &Served, ca: &str) -> String {
    format!(
        "broker_api:
  url: https://{}
  authentication:
    basic:
      username: admin
      password: {}
  tls:
    ca_cert: |
{}    disable_ssl_cert_verification: false
polling_interval: 1
attempt_interval: 1
attempt_limit: 5
request_timeout: 120
max_in_flight: 3
canaries: 1
canary_selection_params:
  cf_org: system
  cf_space: canaries
maintenance_info_present: true
",
        s.serving.broker,
        s.password,
        ca.lines()
            .map(|l| format!("      {l}\n"))
            .collect::<String>()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_odb_errands_own_configuration_runs_unchanged_with_its_canary_selection() {
    let s = Served::start(ServeLimits::default()).await;
    let w = Workspace::new();
    let config = odb_config(&s, &ca(&s));
    let path = w.write("odb.yml", &config);
    let shown = fleet_updater()
        .args(["check-config", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(shown.contains("max_in_parallel: 3"), "{shown}");
    assert!(shown.contains(r#"canary_selection: {"cf_org":"system","cf_space":"canaries"}"#));
    assert!(!shown.contains(&s.password), "the password is redacted");

    let (code, report, stdout, stderr) = run(&w, &config).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let canaries = canaries(&report);
    assert_eq!(canaries, ["rmq-01"]);
    assert_eq!(
        ids_with(&report, "updated"),
        set(&["pg-01", "pg-03", "rmq-01", "rmq-02"])
    );
}
