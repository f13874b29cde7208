use predicates::prelude::*;

use crate::support::{Workspace, fleet_updater};

#[test]
fn check_config_prints_the_resolved_configuration_with_secrets_redacted() {
    let ws = Workspace::new();
    let config = ws.write(
        "fleet.yml",
        "service_broker:\n  api_endpoint: https://broker:3000\n  username: admin\n  password: correct-horse\nstrategy:\n  update:\n    canaries: 2\n",
    );
    fleet_updater()
        .args(["check-config", "-c"])
        .arg(&config)
        .args(["--max-in-parallel", "4"])
        .assert()
        .success()
        .stdout(predicate::str::contains("password: \"<redacted>\""))
        .stdout(predicate::str::contains("max_in_parallel: 4"))
        .stdout(predicate::str::contains("canaries: 2"))
        .stdout(predicate::str::contains("interval: 1m"))
        .stdout(predicate::str::contains("correct-horse").not())
        .stderr(predicate::str::contains("correct-horse").not());
}

#[test]
fn an_invalid_configuration_lists_every_problem_and_exits_2() {
    let ws = Workspace::new();
    let config = ws.write(
        "fleet.yml",
        "strategy:\n  type: update\n  update:\n    max_in_parallel: 0\n    canaris: 2\nservice_broker:\n  api_endpoint: https://broker:3000\n  password: correct-horse\n",
    );
    let shown = config.display().to_string();
    fleet_updater()
        .args(["check-config", "-c"])
        .arg(&config)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("has 3 problems"))
        .stderr(predicate::str::contains(format!(
            "{shown}:4:22: strategy.update.max_in_parallel: must be at least 1, got 0"
        )))
        .stderr(predicate::str::contains(format!(
            "{shown}:5:5: strategy.update.canaris: unknown key; did you mean `canaries`?"
        )))
        .stderr(predicate::str::contains("needs `service_broker.username`"))
        .stderr(predicate::str::contains("correct-horse").not());
}

#[test]
fn a_run_with_an_invalid_configuration_triggers_nothing_and_exits_2() {
    let ws = Workspace::new();
    let config = ws.scripted(
        "instances:\n  - {id: a, script: [error]}\n",
        "operation_timeout: 0s\n",
    );
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("operation_timeout: `0s` is zero"));
}

#[test]
fn bad_arguments_exit_2() {
    fleet_updater()
        .args(["run", "--max-in-parallel", "0"])
        .assert()
        .code(2);
    fleet_updater()
        .args(["run", "--strategy", "sideways"])
        .assert()
        .code(2);
}

#[test]
fn a_missing_configuration_file_exits_2_naming_it() {
    fleet_updater()
        .args(["check-config", "-c", "/nonexistent/fleet.yml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("/nonexistent/fleet.yml"));
}

#[test]
fn every_shipped_configuration_is_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yml") {
            fleet_updater()
                .args(["check-config", "-c"])
                .arg(&path)
                .assert()
                .success()
                .stdout(predicate::str::contains("change-me").not());
            checked += 1;
        }
    }
    assert!(
        checked >= 2,
        "only {checked} configurations found in {}",
        dir.display()
    );
}
