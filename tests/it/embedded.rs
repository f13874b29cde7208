//! The embedded default fleet through the binary, each test on its own state directory.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command as Process, Stdio};

use predicates::prelude::*;
use serde_json::Value;

use crate::support::{Workspace, fleet_updater, ids_with};

fn run(state: &Path, args: &[&str]) -> (i32, Value, String) {
    let output = fleet_updater()
        .arg("run")
        .arg("--state-dir")
        .arg(state)
        .args(["--format", "json"])
        .args(args)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (
        output.status.code().unwrap(),
        report,
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// The director's tasks as (id, state, deployment, description).
pub(super) fn director_tasks(state: &Path) -> Vec<(u64, String, String, String)> {
    let output = fleet_updater()
        .args(["director", "--state-dir"])
        .arg(state)
        .args(["tasks", "--limit", "100000"])
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            (
                cells[0].parse().unwrap(),
                cells[1].to_string(),
                cells[3].to_string(),
                format!("{} {}", cells[4], cells[5]),
            )
        })
        .collect()
}

#[test]
fn the_demo_updates_all_but_the_blocked_and_a_second_run_finds_nothing() {
    let ws = Workspace::new();
    let state = ws.path("state");
    let (code, report, stderr) = run(&state, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("30 service instances on older versions"),
        "{stderr}"
    );
    let counts = &report["counts"];
    assert_eq!(counts["selected"], 30);
    assert_eq!(counts["updated"], 28);
    assert_eq!(counts["skipped_blocked"], 2);
    assert_eq!(counts["failed"], 0);
    assert_eq!(
        ids_with(&report, "skipped_blocked"),
        BTreeSet::from(["pg-05".into(), "rmq-04".into()])
    );
    // The busy instance is found busy and tried again after the others.
    assert!(stderr.contains("[rmq-01] busy (attempt 1)"), "{stderr}");
    let rmq01 = report["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "rmq-01")
        .unwrap();
    assert_eq!(
        (&rmq01["outcome"], &rmq01["attempts"]),
        (&"updated".into(), &2.into())
    );

    let (code, report, stderr) = run(&state, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("nothing to update"), "{stderr}");
    assert_eq!(report["counts"]["updated"], 0);
    assert_eq!(report["counts"]["selected"], 2);

    fleet_updater()
        .args(["fleet", "--state-dir"])
        .arg(&state)
        .assert()
        .success()
        .stdout(
            predicate::str::is_match(r"pg-01\s+postgres-single\s+provisioned\s+postgres/16\.4, ubuntu-jammy/1\.612\s+no\s+no")
                .unwrap(),
        )
        .stdout(predicate::str::is_match(r"pg-05 .*postgres/15\.8, ubuntu-jammy/1\.500\s+yes\s+yes").unwrap());
}

#[test]
fn a_first_use_killed_while_provisioning_is_finished_by_the_next_run() {
    let ws = Workspace::new();
    let state = ws.path("state");
    let mut child = Process::new(env!("CARGO_BIN_EXE_fleet-updater"))
        .args(["run", "--state-dir"])
        .arg(&state)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("(first use)") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no first use");
    }
    std::thread::sleep(std::time::Duration::from_millis(1200));
    child.kill().unwrap();
    child.wait().unwrap();
    let cut_short = director_tasks(&state)
        .iter()
        .any(|(_, s, _, description)| s != "done" && description == "create deployment");
    assert!(cut_short, "the kill came after provisioning ended");

    let (code, report, stderr) = run(&state, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("(first use)"), "{stderr}");
    assert!(stderr.contains("cut short before"), "{stderr}");
    assert!(!stderr.contains("could not be made busy"), "{stderr}");
    let counts = &report["counts"];
    assert_eq!(
        (
            &counts["updated"],
            &counts["skipped_blocked"],
            &counts["failed"]
        ),
        (&28.into(), &2.into(), &0.into()),
        "{report}"
    );
    fleet_updater()
        .args(["fleet", "--state-dir"])
        .arg(&state)
        .assert()
        .success()
        .stdout(
            predicate::str::is_match(
                r"pg-05 .*provisioned\s+postgres/15\.8, ubuntu-jammy/1\.500\s+yes\s+yes",
            )
            .unwrap(),
        )
        .stdout(predicate::str::contains("failed").not());
}

#[test]
fn a_run_killed_halfway_is_completed_by_the_next_without_updating_anything_twice() {
    let ws = Workspace::new();
    let state = ws.path("state");
    let mut child = Process::new(env!("CARGO_BIN_EXE_fleet-updater"))
        .arg("run")
        .arg("--state-dir")
        .arg(&state)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut succeeded = BTreeSet::new();
    let mut note = |line: &str| {
        if let Some(rest) = line
            .split("] succeeded")
            .next()
            .filter(|_| line.contains("] succeeded"))
        {
            succeeded.insert(rest.rsplit('[').next().unwrap().to_string());
        }
    };
    let mut seen = 0;
    while seen < 10 {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the run ended early"
        );
        if line.contains("] succeeded") {
            seen += 1;
        }
        note(&line);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // What the run printed before it died: instances that succeeded while the kill was
    // on its way are done too.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    rest.lines().for_each(&mut note);

    let (code, report, stderr) = run(&state, &[]);
    assert_eq!(code, 0, "{stderr}");
    let updated = ids_with(&report, "updated");
    assert!(
        updated.is_disjoint(&succeeded),
        "updated twice: {:?}",
        updated.intersection(&succeeded).collect::<Vec<_>>()
    );
    // An operation that ended after the kill was sent but before the run saw it is done
    // without a line: the director's tasks below count every instance exactly.
    assert!(
        updated.len() + succeeded.len() <= 28,
        "{}\nupdated {updated:?}\nsucceeded {succeeded:?}",
        report["counts"]
    );

    let tasks = director_tasks(&state);
    let mut done: BTreeMap<String, usize> = BTreeMap::new();
    for (_, s, deployment, description) in &tasks {
        if s == "done" && description == "update deployment" {
            *done.entry(deployment.clone()).or_default() += 1;
        }
    }
    // On failure, every task of a deployment updated twice, and what the second run said:
    // enough to tell a no-op redeploy from a trigger sent twice.
    let twice: Vec<_> = tasks
        .iter()
        .filter(|(_, _, deployment, _)| done.get(deployment).is_some_and(|n| *n > 1))
        .collect();
    assert_eq!(done.len(), 28, "{done:?}\n{stderr}");
    assert!(twice.is_empty(), "{twice:?}\n{stderr}");

    let (code, report, _) = run(&state, &[]);
    assert_eq!(code, 0);
    assert_eq!(report["counts"]["updated"], 0);
}

#[test]
fn a_running_fleet_can_be_watched_but_not_run_twice() {
    let ws = Workspace::new();
    let state = ws.path("state");
    fleet_updater()
        .args(["director", "--state-dir"])
        .arg(&state)
        .arg("tasks")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("there is no embedded fleet"));

    let mut child = Process::new(env!("CARGO_BIN_EXE_fleet-updater"))
        .args(["run", "--format", "json", "--state-dir"])
        .arg(&state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("] accepted") {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the run ended early: {seen}"
        );
        seen.push_str(&line);
    }
    // Watching does not disturb the running tasks. A simulated deploy ends within
    // milliseconds while the run polls every second, so the listing is read again until
    // it catches one running; the run must still be going then.
    let mut caught = false;
    for _ in 0..100 {
        let listed = fleet_updater()
            .args(["director", "--state-dir"])
            .arg(&state)
            .arg("tasks")
            .output()
            .unwrap();
        assert!(listed.status.success());
        if String::from_utf8_lossy(&listed.stdout).contains("processing") {
            caught = true;
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the run ended unseen");
    }
    assert!(caught, "no listing showed a running task");
    // A second run is refused.
    fleet_updater()
        .args(["run", "--state-dir"])
        .arg(&state)
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "in use by another fleet-updater process",
        ));

    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["counts"]["updated"], 28);

    // A listing cut short says so; a deployment that is not there is not an empty one.
    fleet_updater()
        .args(["director", "--state-dir"])
        .arg(&state)
        .args(["tasks", "--limit", "2"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "the newest 2 tasks; there are more",
        ));
    fleet_updater()
        .args(["director", "--state-dir"])
        .arg(&state)
        .args(["instances", "NOSUCH"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("there is no deployment `NOSUCH`"));
    // A state directory that is a file is named as such, for reading and for a run.
    let file = ws.write("not-a-dir", "");
    for command in [&["fleet"][..], &["run"][..]] {
        fleet_updater()
            .args(command)
            .arg("--state-dir")
            .arg(&file)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("is a file, not a directory"));
    }
}
