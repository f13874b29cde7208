//! Canaries verified before the rest, through the binary on the embedded fleet: a
//! smoke-test errand of the canary's deployment runs once its update succeeded, and the
//! rest waits for it; a failing one stops the run.

use serde_json::Value;

use crate::support::{Workspace, fleet_updater, ids_with};

/// The demo fleet with a `smoke-tests` errand group in the PostgreSQL plan; `faults` as
/// the simulation's faults.
fn definition(faults: &str) -> String {
    let demo = fleet_updater::fleet::DEMO
        .replace(
            "    jobs: [{name: postgres, packages: ",
            "    jobs: [{name: smoke-tests}, {name: postgres, packages: ",
        )
        .replace(
            "        networks: [{name: default}]\n  - id: rabbitmq-cluster",
            "        networks: [{name: default}]\n      - name: smoke-tests\n        lifecycle: errand\n        instances: 1\n        azs: [z1]\n        jobs: [{name: smoke-tests, release: postgres}]\n        vm_type: small\n        stemcell: default\n        networks: [{name: default}]\n  - id: rabbitmq-cluster",
        )
        .replace("faults: []", &format!("faults: {faults}"))
        // A small fleet, fast: 4 PostgreSQL and 2 RabbitMQ instances, no latency.
        .replace("cpi_latency: 60ms-180ms", "cpi_latency: 0ms-0ms")
        .replace("agent_latency: 10ms-50ms", "agent_latency: 0ms-0ms")
        .replace("count: 18", "count: 4")
        .replace("count: 12", "count: 2");
    assert!(
        demo.contains("smoke-tests\n        lifecycle: errand"),
        "the demo changed"
    );
    demo
}

fn run(w: &Workspace, faults: &str) -> (i32, Value, String) {
    run_with(w, faults, "{errand: smoke-tests, timeout: 5m}")
}

fn run_with(w: &Workspace, faults: &str, check: &str) -> (i32, Value, String) {
    let fleet = w.write("fleet.yml", &definition(faults));
    let config = w.write(
        "config.yml",
        &format!(
            "embedded: {{fleet: {}}}\nstrategy: {{update: {{canaries: 1, max_in_parallel: 2}}}}\ncanary_check: {check}\nselection: {{include: {{plans: [postgres-single]}}}}\n",
            fleet.display()
        ),
    );
    let output = fleet_updater()
        .args(["run", "--format", "json", "--state-dir"])
        .arg(w.path("state"))
        .arg("-c")
        .arg(&config)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "no report ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (
        output.status.code().unwrap(),
        report,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn canary(report: &Value) -> &Value {
    report["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["canary"] == true)
        .expect("a canary")
}

#[test]
fn a_smoke_test_errand_proves_the_canary_before_the_rest_is_updated() {
    let w = Workspace::new();
    let (code, report, stderr) = run(&w, "[]");
    assert_eq!(code, 0, "{stderr}");
    let check = canary(&report)["check"].as_str().unwrap();
    assert!(
        check.starts_with("errand smoke-tests passed: task ") && check.contains("exit code 0"),
        "{check}"
    );
    assert!(stderr.contains("canary operation succeeded; checking it: errand smoke-tests"));
    let updated = ids_with(&report, "updated");
    assert!(
        updated.len() > 1 && updated.iter().all(|id| id.starts_with("pg-")),
        "{updated:?}"
    );
    assert!(
        !report["excluded"].as_array().unwrap().is_empty(),
        "RabbitMQ left out"
    );
}

#[test]
fn a_failing_smoke_test_fails_the_canary_and_nothing_else_starts() {
    let w = Workspace::new();
    let (code, report, stderr) = run(&w, "[{kind: errand, deployment: pg-01, probability: 1.0}]");
    assert_eq!(code, 1, "{stderr}");
    let canary = canary(&report);
    assert_eq!(canary["id"], "pg-01");
    assert_eq!(canary["outcome"], "failed");
    assert!(
        canary["reason"]
            .as_str()
            .unwrap()
            .starts_with("the canary check (errand smoke-tests) failed: task "),
        "{canary}"
    );
    assert!(ids_with(&report, "updated").is_empty(), "nothing else ran");
    assert!(!ids_with(&report, "not_started").is_empty());
}

#[test]
fn a_command_check_gets_the_canary_with_its_deployment_and_addresses() {
    let w = Workspace::new();
    let seen = w.path("seen");
    let script = w.write(
        "smoke",
        &format!(
            "#!/bin/sh\necho \"$FLEET_INSTANCE_ID $FLEET_DEPLOYMENT $FLEET_ADDRESSES\" > {}\necho all good\n",
            seen.display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, report, stderr) = run_with(&w, "[]", "{command: [./smoke]}");
    assert_eq!(code, 0, "{stderr}");
    let seen = std::fs::read_to_string(&seen).unwrap();
    let words: Vec<&str> = seen.split_whitespace().collect();
    assert_eq!(words[..2], ["pg-01", "service-instance_pg-01"], "{seen}");
    assert!(
        words[2..].iter().any(|a| a.starts_with("10.244.")),
        "its VMs' addresses: {seen}"
    );
    let check = canary(&report)["check"].as_str().unwrap();
    assert!(check.ends_with("passed: exit code 0: all good"), "{check}");
}

#[test]
fn a_smoke_test_past_its_time_limit_fails_the_canary_and_its_errand_is_cancelled() {
    let w = Workspace::new();
    let (code, report, stderr) = run_with(&w, "[]", "{errand: smoke-tests, timeout: 1ms}");
    assert_eq!(code, 1, "{stderr}");
    let canary = canary(&report);
    assert!(
        canary["reason"]
            .as_str()
            .unwrap()
            .ends_with("errand smoke-tests did not finish within 1ms"),
        "{canary}"
    );
    let errands: Vec<String> = crate::embedded::director_tasks(&w.path("state"))
        .into_iter()
        .filter(|(_, _, _, description)| description.starts_with("run errand"))
        .map(|(_, state, _, _)| state)
        .collect();
    // Asked to stop and its end awaited before the run ends: `cancelled`; on a loaded
    // machine a quick errand may have ended (`done`) before the cancellation reached it.
    // Never left to the next process (which would end it in error).
    assert_eq!(errands.len(), 1, "{errands:?}");
    assert!(
        ["cancelled", "done"].contains(&errands[0].as_str()),
        "the errand is cancelled rather than left running: {errands:?}"
    );
}

/// Through a director's API: a smoke test that passes proves the canary; one past its
/// time limit fails it, and its errand task is cancelled and ended before the run ends
/// (not left running on the director).
#[tokio::test(flavor = "multi_thread")]
async fn through_a_director_a_smoke_test_proves_the_canary_and_one_past_its_limit_is_cancelled() {
    use crate::over_http::{ca, director_config, run};
    use crate::served::Served;

    let definition = fleet_updater::fleet::Definition::parse(&definition("[]")).unwrap();
    let s = Served::start_fleet(
        tempfile::tempdir().unwrap(),
        &definition,
        fleet_updater::config::ServeLimits::default(),
    )
    .await;
    let config = |check: &str| {
        director_config(&s, &ca(&s), "update")
            .replace("service-instance_*", "service-instance_pg-*")
            + &format!("canary_check: {check}\n")
    };
    let w = Workspace::new();
    let (code, report, stdout, stderr) =
        run(&w, &config("{errand: smoke-tests, timeout: 5m}")).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let check = canary(&report)["check"].as_str().unwrap();
    assert!(
        check.starts_with("errand smoke-tests passed: task ") && check.contains("exit code 0"),
        "{check}"
    );

    // Recreated, so that there is work again.
    let (code, report, stdout, stderr) = run(
        &w,
        &config("{errand: smoke-tests, timeout: 1ms}").replace("type: update", "type: recreate"),
    )
    .await;
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let reason = canary(&report)["reason"].as_str().unwrap();
    assert!(
        reason.ends_with("errand smoke-tests did not finish within 1ms"),
        "{reason}"
    );
    let mut errands: Vec<(u64, String)> = crate::over_http::tasks(&s)
        .await
        .into_iter()
        .filter(|t| t.description.starts_with("run errand"))
        .map(|t| (t.id, t.state.as_str().to_string()))
        .collect();
    errands.sort();
    assert_eq!(errands.len(), 2, "{errands:?}");
    assert!(
        ["cancelled", "done"].contains(&errands[1].1.as_str()),
        "the errand is cancelled and ended rather than left running: {errands:?}"
    );
}
