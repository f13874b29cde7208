//! Maintenance windows, resumed runs and the metrics file through the binary: a run
//! outside its window does nothing and says so, a run that stopped is continued by the
//! next without touching again what it did (a kill -9 included), `--fresh` starts over,
//! and every run leaves its figures in Prometheus text format.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command as Process, Stdio};

use predicates::prelude::*;

use crate::support::{Workspace, fleet_updater, ids_with, json};

/// A window of two hours starting `from_now_h` hours from now, in UTC, as `HH:MM-HH:MM`.
fn window_from_now(from_now_h: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let minute = |secs: i64| {
        let m = secs.rem_euclid(86_400) / 60;
        format!("{:02}:{:02}", m / 60, m % 60)
    };
    let start = now + from_now_h * 3600;
    format!("{}-{}", minute(start), minute(start + 2 * 3600))
}

fn metrics(path: &std::path::Path) -> prometheus_parse::Scrape {
    let text = std::fs::read_to_string(path).unwrap();
    let lines = text.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines).unwrap()
}

fn gauge(scrape: &prometheus_parse::Scrape, name: &str, label: (&str, &str)) -> f64 {
    let sample = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && s.labels.get(label.0) == Some(label.1))
        .unwrap_or_else(|| panic!("no {name}{{{}={}}}", label.0, label.1));
    match sample.value {
        prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("{name} is {other:?}"),
    }
}

const FLEET: &str = "instances:
  - {id: a-1, plan_id: a, script: [runs 50ms]}
  - {id: a-2, plan_id: a, script: [runs 50ms]}
  - {id: a-3, plan_id: a, script: [failed]}
  - {id: b-1, plan_id: b, script: [runs 50ms]}
";

#[test]
fn outside_its_window_a_run_does_nothing_and_says_so_with_exit_0() {
    let ws = Workspace::new();
    let config = ws.scripted(
        "list: [error]\ninstances: []\n",
        &format!("schedule:\n  window: {}\n", window_from_now(3)),
    );
    let prom = ws.path("fleet.prom");
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .arg("--metrics-file")
        .arg(&prom)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("outside the maintenance window"))
        .stdout(predicate::str::contains(
            "nothing is done; it opens next at",
        ));
    let scrape = metrics(&prom);
    let outside = ("strategy", "update");
    assert_eq!(
        gauge(&scrape, "fleet_updater_last_check_outside_window", outside),
        1.0
    );
    assert!(
        !scrape
            .samples
            .iter()
            .any(|s| s.metric.starts_with("fleet_updater_last_run_"))
    );

    // A failed run's series stay as they were through later starts outside the window.
    std::fs::write(
        &prom,
        "# HELP fleet_updater_last_run_exit_code The exit code of the last run.\n\
         # TYPE fleet_updater_last_run_exit_code gauge\n\
         fleet_updater_last_run_exit_code{strategy=\"update\"} 1\n",
    )
    .unwrap();
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .arg("--metrics-file")
        .arg(&prom)
        .assert()
        .code(0);
    let scrape = metrics(&prom);
    assert_eq!(
        gauge(&scrape, "fleet_updater_last_run_exit_code", outside),
        1.0
    );
    assert_eq!(
        gauge(&scrape, "fleet_updater_last_check_outside_window", outside),
        1.0
    );
}

#[test]
fn a_run_whose_listing_fails_still_leaves_its_metrics() {
    let ws = Workspace::new();
    let config = ws.scripted("list: [error]\ninstances: []\n", "");
    let prom = ws.path("fleet.prom");
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .arg("--metrics-file")
        .arg(&prom)
        .assert()
        .code(3);
    let scrape = metrics(&prom);
    let update = ("strategy", "update");
    assert_eq!(
        gauge(&scrape, "fleet_updater_last_run_exit_code", update),
        3.0
    );
    assert_eq!(
        gauge(
            &scrape,
            "fleet_updater_last_run_status",
            ("status", "failed")
        ),
        1.0
    );
    assert_eq!(
        gauge(&scrape, "fleet_updater_last_check_outside_window", update),
        0.0
    );
}

#[test]
fn inside_its_window_a_run_runs_and_its_metrics_count_every_outcome() {
    let ws = Workspace::new();
    let config = ws.scripted(
        "instances:\n  - {id: a-1, plan_id: a, script: [runs 50ms]}\n  - {id: a-2, plan_id: a, script: [up_to_date]}\n",
        &format!(
            "schedule:\n  window: {}\n  time_zone: UTC\noutput:\n  metrics_file: fleet.prom\n",
            window_from_now(-1)
        ),
    );
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .current_dir(ws.dir.path())
        .assert()
        .code(0)
        .stdout(predicate::str::contains("finished update: SUCCEEDED"));
    let scrape = metrics(&ws.path("fleet.prom"));
    let outcome = |o| gauge(&scrape, "fleet_updater_last_run_instances", ("outcome", o));
    assert_eq!((outcome("selected"), outcome("updated")), (2.0, 1.0));
    assert_eq!(outcome("skipped_up_to_date"), 1.0);
    assert_eq!(
        gauge(
            &scrape,
            "fleet_updater_last_run_status",
            ("status", "succeeded")
        ),
        1.0
    );
    assert!(
        gauge(
            &scrape,
            "fleet_updater_last_run_timestamp_seconds",
            ("strategy", "update")
        ) > 1.7e9
    );
}

#[test]
fn an_unwritable_metrics_file_stops_the_run_before_it_starts() {
    let ws = Workspace::new();
    let config = ws.scripted(FLEET, "");
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .arg("--metrics-file")
        .arg(ws.path("missing/fleet.prom"))
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("cannot write the metrics"));
}

#[test]
fn a_recreate_that_stopped_is_continued_without_recreating_again_until_it_is_done() {
    let ws = Workspace::new();
    let config = ws.scripted(
        FLEET,
        "strategy:\n  type: recreate\n  recreate:\n    canaries: 1\n",
    );
    let report = ws.path("report.json");
    let run = || {
        fleet_updater()
            .args(["run", "-c"])
            .arg(&config)
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap()
    };
    let first = run();
    assert_eq!(first.status.code(), Some(1));
    let recreated = ids_with(&json(&report), "updated");
    assert!(
        recreated.contains("a-1"),
        "the canary passed: {recreated:?}"
    );
    assert!(!recreated.is_empty());

    // The failed instance is fixed by its owner; the next run continues the rotation.
    ws.write(
        "scenario.yml",
        &FLEET.replace("script: [failed]", "script: [runs 50ms]"),
    );
    let second = run();
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let stdout = String::from_utf8(second.stdout).unwrap();
    assert!(String::from_utf8_lossy(&second.stderr).contains("continuing an earlier recreate"));
    let report2 = json(&report);
    assert_eq!(ids_with(&report2, "done_earlier"), recreated);
    let again = ids_with(&report2, "updated");
    assert!(again.is_disjoint(&recreated), "recreated twice: {again:?}");
    assert_eq!(again.len() + recreated.len(), 4);
    assert!(
        !stdout.contains("canary"),
        "the canary is not tried again: {stdout}"
    );

    // The rotation is complete: the next starts a new one.
    let third = run();
    assert_eq!(third.status.code(), Some(0));
    assert_eq!(ids_with(&json(&report), "updated").len(), 4);
    // `--fresh` forgets a journal.
    ws.write("scenario.yml", FLEET);
    assert_eq!(run().status.code(), Some(1));
    ws.write(
        "scenario.yml",
        &FLEET.replace("script: [failed]", "script: [runs 50ms]"),
    );
    fleet_updater()
        .args(["run", "--fresh", "-c"])
        .arg(&config)
        .arg("--report")
        .arg(&report)
        .assert()
        .code(0);
    assert_eq!(ids_with(&json(&report), "updated").len(), 4);
}

#[test]
fn a_recreate_killed_with_sigkill_is_continued_without_touching_anything_twice() {
    let ws = Workspace::new();
    let scenario: String = std::iter::once("instances:\n".to_string())
        .chain((1..=8).map(|i| format!("  - {{id: i-{i}, plan_id: p, script: [runs 300ms]}}\n")))
        .collect();
    let config = ws.scripted(&scenario, "strategy:\n  type: recreate\n");
    let mut child = Process::new(env!("CARGO_BIN_EXE_fleet-updater"))
        .args(["run", "-c"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut succeeded = BTreeSet::new();
    while succeeded.len() < 3 {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the run ended early"
        );
        if let Some(id) = line
            .split("] succeeded")
            .next()
            .filter(|_| line.contains("] succeeded"))
            .and_then(|l| l.rsplit('[').next())
        {
            succeeded.insert(id.to_string());
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let report = ws.path("report.json");
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .arg("--report")
        .arg(&report)
        .assert()
        .code(0);
    let report = json(&report);
    let earlier = ids_with(&report, "done_earlier");
    assert!(
        succeeded.is_subset(&earlier),
        "{succeeded:?} not in {earlier:?}"
    );
    let now = ids_with(&report, "updated");
    assert!(now.is_disjoint(&earlier));
    assert_eq!(
        now.len() + earlier.len(),
        8,
        "every instance recreated once"
    );
}
