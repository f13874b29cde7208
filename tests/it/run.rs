use std::io::{BufRead, BufReader};
use std::process::{Command as Process, Stdio};

use predicates::prelude::*;

use crate::support::{Workspace, fleet_updater, json};

const FLEET: &str = "instances:
  - {id: a-1, plan_id: a, script: [runs 100ms]}
  - {id: a-2, plan_id: a, script: [busy, runs 100ms]}
  - {id: a-3, plan_id: a, maintenance_updates_blocked: true, script: [runs 100ms]}
  - {id: b-1, plan_id: b, script: [up_to_date]}
  - {id: b-2, plan_id: b, script: [deleted]}
  - {id: b-3, plan_id: b, update_available: false, script: [runs 100ms]}
";

#[test]
fn a_successful_run_prints_events_and_a_summary_and_exits_0() {
    let ws = Workspace::new();
    let config = ws.scripted(
        FLEET,
        "strategy:\n  update:\n    canaries: 1\n    max_in_parallel: 2\n",
    );
    let report = ws.path("report.json");
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .arg("--report")
        .arg(&report)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "starting update: 5 instances selected, 4 to process, 1 canary, at most 2 in parallel",
        ))
        .stdout(predicate::str::contains("[a-1] starting (canary, instance 1 of 4)"))
        .stdout(predicate::str::contains("[a-3] skipped: the owner blocked maintenance updates"))
        .stdout(predicate::str::contains("[a-2] busy (attempt 1)"))
        .stdout(predicate::str::contains("[a-2] starting again (attempt 2/5)"))
        .stdout(predicate::str::contains("finished update: SUCCEEDED"))
        .stdout(predicate::str::contains(
            "selected 5: updated 2, skipped blocked 1, skipped up to date 1, deleted 1, orphaned 0, busy left 0, failed 0",
        ));
    let report = json(&report);
    assert_eq!(report["schema"], 1);
    assert_eq!(report["status"], "succeeded");
    assert_eq!(report["strategy"], "update");
    let counts = &report["counts"];
    assert_eq!(counts["selected"], 5);
    assert_eq!(counts["updated"], 2);
    assert_eq!(counts["skipped_blocked"], 1);
    assert_eq!(counts["skipped_up_to_date"], 1);
    assert_eq!(counts["deleted"], 1);
    assert_eq!(counts["failed"], 0);
    let a1 = report["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "a-1")
        .unwrap();
    assert_eq!(a1["canary"], true);
    assert_eq!(a1["outcome"], "updated");
    assert_eq!(a1["attempts"], 1);
    assert!(a1["started_at"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn json_format_puts_the_report_alone_on_stdout() {
    let ws = Workspace::new();
    let config = ws.scripted(FLEET, "");
    let output = fleet_updater()
        .args(["run", "--format", "json", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["counts"]["updated"], 2);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("finished update: SUCCEEDED"), "{stderr}");
}

#[test]
fn a_failed_instance_fails_the_run_with_exit_1_and_names_it() {
    let ws = Workspace::new();
    let config = ws.scripted(
        "instances:\n  - {id: a, script: [runs 100ms, failed]}\n  - {id: b, script: [runs 300ms]}\n  - {id: c, script: [runs 100ms]}\n",
        "strategy:\n  update:\n    max_in_parallel: 2\n",
    );
    let report = ws.path("report.json");
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .arg("--report")
        .arg(&report)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("[a] FAILED: bosh task failed"))
        .stdout(predicate::str::contains("stopping: instance a failed"))
        .stdout(predicate::str::contains("[b] succeeded"))
        .stdout(predicate::str::contains("[c] starting").not())
        .stdout(predicate::str::contains("finished update: FAILED"))
        .stdout(predicate::str::contains("  failed: a\n"));
    let report = json(&report);
    assert_eq!(report["status"], "failed");
    assert_eq!(report["counts"]["failed"], 1);
    assert_eq!(report["counts"]["updated"], 1);
    assert_eq!(report["counts"]["not_started"], 1);
}

#[test]
fn instances_still_busy_after_the_last_attempt_fail_the_run() {
    let ws = Workspace::new();
    let config = ws.scripted(
        "instances:\n  - {id: a, script: [busy x3]}\n  - {id: b, script: [runs 50ms]}\n",
        "busy_retry:\n  attempts: 2\n  interval: 100ms\n",
    );
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("[a] busy (attempt 2)"))
        .stdout(predicate::str::contains("no attempts left"))
        .stdout(predicate::str::contains("busy left 1"))
        .stdout(predicate::str::contains("  busy left: a\n"));
}

#[test]
fn an_inventory_that_cannot_be_listed_exits_3_and_triggers_nothing() {
    let ws = Workspace::new();
    let config = ws.scripted(
        "list: [error]\ninstances:\n  - {id: a, script: [error]}\n",
        "",
    );
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .assert()
        .code(3)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains(
            "the inventory could not be listed",
        ))
        .stderr(predicate::str::contains("nothing was triggered"));
}

#[test]
fn a_dry_run_prints_the_plan_and_triggers_nothing() {
    let ws = Workspace::new();
    // Any trigger would fail this fleet; a dry run must still succeed.
    let config = ws.scripted(
        "instances:\n  - {id: a-1, plan_id: a, script: [error]}\n  - {id: b-1, plan_id: b, script: [error]}\n  - {id: a-2, plan_id: a, maintenance_updates_blocked: true}\n",
        "strategy:\n  update:\n    canaries: 1\n",
    );
    fleet_updater()
        .args(["run", "--dry-run", "-c"])
        .arg(&config)
        .assert()
        .success()
        .stdout(predicate::str::contains("nothing is triggered"))
        .stdout(predicate::str::contains("1. a-1 (plan a) [canary]"))
        .stdout(predicate::str::contains("2. b-1 (plan b)\n"))
        .stdout(predicate::str::contains(
            "a-2: the owner blocked maintenance updates",
        ))
        .stdout(predicate::str::contains("FAILED").not());

    let output = fleet_updater()
        .args(["run", "--dry-run", "--format", "json", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["order"][0]["id"], "a-1");
    assert_eq!(plan["order"][0]["canary_candidate"], true);
    assert_eq!(plan["skipped"][0]["id"], "a-2");
}

#[test]
fn recreate_from_the_command_line_touches_every_instance() {
    let ws = Workspace::new();
    let config = ws.scripted(FLEET, "");
    let report = ws.path("report.json");
    fleet_updater()
        .args(["run", "--strategy", "recreate", "--max-in-parallel", "3"])
        .arg("-c")
        .arg(&config)
        .arg("--report")
        .arg(&report)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "starting recreate: 6 instances selected, 6 to process",
        ))
        .stdout(predicate::str::contains("selected 6: recreated 4, skipped"));
    let report = json(&report);
    assert_eq!(report["strategy"], "recreate");
    // Current and blocked instances are recreated too; only up to date and deleted settle.
    assert_eq!(report["counts"]["updated"], 4);

    let respectful = ws.scripted(FLEET, "strategy:\n  recreate:\n    force: false\n");
    fleet_updater()
        .args(["run", "--strategy", "recreate", "-c"])
        .arg(&respectful)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "6 instances selected, 5 to process",
        ))
        .stdout(predicate::str::contains(
            "[a-3] skipped: the owner blocked maintenance updates",
        ));
}

#[test]
fn a_closed_stdout_neither_crashes_the_run_nor_loses_the_report() {
    let ws = Workspace::new();
    let config = ws.scripted(FLEET, "");
    let report = ws.path("report.json");
    let mut child = Process::new(env!("CARGO_BIN_EXE_fleet-updater"))
        .args(["run", "-c"])
        .arg(&config)
        .arg("--report")
        .arg(&report)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(0));
    assert_eq!(json(&report)["counts"]["updated"], 2);
}

#[test]
fn sigterm_stops_launching_reports_and_exits_1() {
    let ws = Workspace::new();
    let config = ws.scripted(
        "instances:\n  - {id: a, script: [runs 1h]}\n  - {id: b, script: [runs 1h]}\n",
        "shutdown_grace_period: 300ms\n",
    );
    let report = ws.path("report.json");
    let mut child = Process::new(env!("CARGO_BIN_EXE_fleet-updater"))
        .args(["run", "-c"])
        .arg(&config)
        .arg("--report")
        .arg(&report)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("[a] accepted") {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "ended early: {seen}"
        );
        seen.push_str(&line);
    }
    let status = Process::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(1), "{seen}{rest}");
    assert!(rest.contains("stopping: interrupted"), "{rest}");
    assert!(
        rest.contains("finished update: FAILED (interrupted)"),
        "{rest}"
    );
    assert!(rest.contains("  unfinished: a"), "{rest}");
    assert!(!rest.contains("[b] starting"), "{rest}");
    let report = json(&report);
    assert_eq!(report["interrupted"], true);
    assert_eq!(report["counts"]["unfinished"], 1);
    assert_eq!(report["counts"]["not_started"], 1);
}

#[test]
fn an_unwritable_report_is_found_before_anything_is_triggered() {
    let ws = Workspace::new();
    let config = ws.scripted(FLEET, "");
    fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .arg("--report")
        .arg(ws.path("no-such-folder/report.json"))
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("cannot write the report"))
        .stderr(predicate::str::contains("nothing was triggered"));
}

#[test]
fn escape_sequences_in_instance_ids_are_shown_not_sent_to_the_terminal() {
    let ws = Workspace::new();
    let config = ws.scripted(
        "instances:\n  - {id: \"evil\\x1b]0;owned\\x07\", plan_id: a, script: [runs 10ms]}\n",
        "",
    );
    let output = fleet_updater()
        .args(["run", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("[evil\\u{1b}]0;owned\\u{7}]"), "{stdout}");
    assert!(!stdout.contains('\u{1b}'), "{stdout}");
    assert!(!String::from_utf8_lossy(&output.stderr).contains('\u{1b}'));
}

#[test]
fn with_json_logs_every_stderr_line_is_a_json_object() {
    let ws = Workspace::new();
    let config = ws.scripted(FLEET, "");
    for format in ["json", "text"] {
        let output = fleet_updater()
            .args(["--log-format", "json", "--log-level", "info", "run", "-c"])
            .arg(&config)
            .args(["--format", format])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0));
        let stderr = String::from_utf8(output.stderr).unwrap();
        for line in stderr.lines() {
            let parsed: Result<serde_json::Value, _> = serde_json::from_str(line);
            assert!(
                parsed.is_ok_and(|v| v.is_object()),
                "not a JSON line: {line}"
            );
        }
        if format == "json" {
            // The event lines and the summary go to stderr with `--format json`.
            assert!(stderr.contains("finished update: SUCCEEDED"), "{stderr}");
        }
    }
    // A failure's last line too.
    let output = fleet_updater()
        .args(["--log-format", "json", "run", "-c"])
        .arg(ws.path("missing.yml"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    let last: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
    assert_eq!(last["level"], "ERROR");
    assert!(
        last["fields"]["message"]
            .as_str()
            .unwrap()
            .starts_with("error:")
    );
}
