//! The director's JSON shapes: tasks, event log lines, diffs, and the checks a manifest
//! body passes before a task is created.

use axum::http::{HeaderMap, StatusCode, header};
use serde_json::{Value, json};

use super::error::{ApiError, code};
use fleet_director::model::{EventState, Task, TaskEvent, TaskKind, TaskState};
use fleet_director::trace::{Channel, TraceLine};
use fleet_yaml::{self as yaml, Limits, Node};

/// A task's result as the director shows it: on one line, and whole. BOSH cuts it at
/// 128 characters, which leaves a client (the ODB's last operation, our own report) with
/// "the manifest is invalid:" and nothing of why; every problem is kept here, joined.
pub fn result_shown(result: &str) -> String {
    result.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn task(task: &Task) -> Value {
    let result = task.result.as_deref().map(result_shown);
    json!({
        "id": task.id,
        "state": task.state.as_str(),
        "description": task.description,
        // The director's `timestamp` is when the task ended; none while it runs.
        "timestamp": if task.state.is_running() { None } else { task.finished_at },
        "started_at": task.started_at,
        "result": result,
        "user": task.user.as_deref().unwrap_or_default(),
        "deployment": task.deployment,
        "context_id": task.context_id.as_deref().unwrap_or_default(),
    })
}

/// The director's name for what a task does, as `bosh cancel-tasks --type` names it:
/// every change of a deployment's instances is an `update_deployment`. A task no kind of
/// this director names has its stored name.
pub fn task_type(task: &Task) -> &str {
    let Some(kind) = TaskKind::of(task) else {
        return &task.kind;
    };
    match kind {
        TaskKind::CreateDeployment
        | TaskKind::UpdateDeployment
        | TaskKind::RecreateDeployment
        | TaskKind::StopDeployment
        | TaskKind::StartDeployment
        | TaskKind::RestartDeployment => "update_deployment",
        TaskKind::DeleteDeployment => "delete_deployment",
        TaskKind::InstanceDetails => "vms",
        TaskKind::ScanProblems => "cck_scan_and_fix",
        TaskKind::ResolveProblems => "cck_apply",
        TaskKind::ScanAndFix => "cck_scan_and_fix",
        TaskKind::CleanUp => "delete_artifacts",
        TaskKind::DeleteOrphanDisk => "delete_orphan_disk",
        TaskKind::UpdateRelease => "update_release",
        TaskKind::DeleteRelease => "delete_release",
        TaskKind::RunErrand => "run_errand",
        TaskKind::FetchLogs => "fetch_logs",
        TaskKind::ExportRelease => "export_release",
        TaskKind::Ssh => "ssh",
    }
}

/// One event in the director's event log format.
pub fn event_line(event: &TaskEvent) -> Value {
    let state = match event.state {
        EventState::Started => "started",
        EventState::Finished => "finished",
        EventState::Failed => "failed",
    };
    let mut line = json!({
        "time": event.time,
        "stage": event.stage,
        "tags": event.tags,
        "total": event.total,
        "task": event.task,
        "index": event.index,
        "state": state,
        "progress": event.progress,
    });
    if let Some(error) = &event.error {
        line["data"] = json!({ "error": error });
    }
    line
}

/// The task's event log, ending with the task's own error when it failed.
pub fn event_log(task: &Task, events: &[TaskEvent]) -> String {
    let mut out = String::new();
    for event in events {
        out.push_str(&event_line(event).to_string());
        out.push('\n');
    }
    if matches!(task.state, TaskState::Error | TaskState::Cancelled) {
        let error = json!({
            "time": task.finished_at.unwrap_or_default(),
            "error": { "code": code::GENERIC, "message": task.result.clone().unwrap_or_default() },
        });
        out.push_str(&error.to_string());
        out.push('\n');
    }
    out
}

/// A readable log of the same events, for `type=debug`.
pub fn debug_log(task: &Task, events: &[TaskEvent], trace: &[TraceLine]) -> String {
    let mut out = format!("task {}: {}\n", task.id, task.description);
    // Events and trace lines in the order they happened.
    let mut lines: Vec<(u64, String)> = events
        .iter()
        .map(|e| {
            let line = format!(
                "[{}] {} > {}: {:?}{}",
                fleet_clock::rfc3339_unix(e.time),
                e.stage,
                e.task,
                e.state,
                e.error
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            );
            (e.time, line)
        })
        .collect();
    lines.extend(trace.iter().map(|t| {
        let source = match t.channel {
            Channel::Debug => "DirectorJobRunner",
            Channel::Cpi => "CPI",
        };
        (
            t.time,
            format!(
                "[{}] {source}: {}",
                fleet_clock::rfc3339_unix(t.time),
                t.text
            ),
        )
    }));
    // Stable: what happened in the same second keeps its recorded order.
    lines.sort_by_key(|(time, _)| *time);
    for (_, line) in lines {
        out.push_str(&line);
        out.push('\n');
    }
    if !task.state.is_running() {
        out.push_str(&format!(
            "task {} {}: {}\n",
            task.id,
            task.state.as_str(),
            task.result.as_deref().unwrap_or("")
        ));
    }
    out
}

/// The requests to the cloud and their answers (`bosh task --cpi`).
pub fn cpi_log(trace: &[TraceLine]) -> String {
    trace
        .iter()
        .filter(|t| t.channel == Channel::Cpi)
        .map(|t| format!("[{}] {}\n", fleet_clock::rfc3339_unix(t.time), t.text))
        .collect()
}

/// What `old` and `new` mean, as the director's diff: `[line, "added"|"removed"|null]`.
/// Both are written out canonically first (the old one in the new one's key order), so
/// that layout, comments, quoting and key order show no change; text that is not YAML is
/// compared as it is.
pub fn diff(old: &str, new: &str) -> Vec<Value> {
    let read = |text: &str| yaml::load_as_director(text, yaml_limits(MAX_YAML_BYTES)).ok();
    let (old, new) = match (read(old), read(new)) {
        (_, Some(new_doc)) if old.trim().is_empty() => {
            (String::new(), yaml::render(&new_doc, None))
        }
        (Some(old_doc), Some(new_doc)) => (
            yaml::render(&old_doc, Some(&new_doc)),
            yaml::render(&new_doc, None),
        ),
        _ => (old.to_string(), new.to_string()),
    };
    // A deadline bounds the work a hostile pair of bodies can ask for; past it the diff
    // is coarser, not wrong.
    similar::TextDiff::configure()
        .timeout(std::time::Duration::from_secs(1))
        .diff_lines(&old, &new)
        .iter_all_changes()
        .map(|change| {
            let status = match change.tag() {
                similar::ChangeTag::Insert => json!("added"),
                similar::ChangeTag::Delete => json!("removed"),
                similar::ChangeTag::Equal => Value::Null,
            };
            json!([change.value().trim_end_matches('\n'), status])
        })
        .collect()
}

/// The limits a YAML body is read under: an alias bomb or a deep nesting is refused
/// while reading, before it can take memory.
pub fn yaml_limits(max_bytes: usize) -> Limits {
    Limits::document(max_bytes)
}

/// Most bodies hold manifests or cloud configs, far below this.
pub const MAX_YAML_BYTES: usize = 4 * 1024 * 1024;

/// The director's synchronous checks of a manifest body; returns the deployment name.
///
/// # Errors
/// An empty body, YAML that cannot be read, a top level that is not a mapping, or no
/// `name`.
pub fn check_manifest(body: &str) -> Result<(Node, String), ApiError> {
    if body.trim().is_empty() {
        return Err(ApiError::bad_request(
            code::BAD_MANIFEST,
            "Manifest should not be empty",
        ));
    }
    let root = yaml::load(body, yaml_limits(MAX_YAML_BYTES)).map_err(|e| {
        ApiError::bad_request(
            code::BAD_MANIFEST,
            format!(
                "Incorrect YAML structure of the uploaded manifest: line {} column {}: {}",
                e.at.line, e.at.column, e.message
            ),
        )
    })?;
    if root.as_map().is_none() {
        return Err(ApiError::bad_request(
            code::BAD_MANIFEST,
            "Manifest should be a hash",
        ));
    }
    let name = root
        .get("name")
        .and_then(Node::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .ok_or_else(|| {
            ApiError::bad_request(
                code::VALIDATION_MISSING_FIELD,
                "Deployment manifest must have a 'name' key",
            )
        })?;
    Ok((root, name))
}

/// Bodies that carry YAML must say so, as the director's routes require.
///
/// # Errors
/// 415 naming the type that was sent.
pub fn require_yaml(headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = given.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("text/yaml") {
        return Ok(());
    }
    Err(ApiError {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        code: code::GENERIC,
        description: format!(
            "Content-Type must be text/yaml, got '{}'",
            if given.is_empty() { "nothing" } else { given }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_result_keeps_the_whole_reason_on_one_line() {
        let reason =
            "the manifest is invalid:\n  releases.postgres: version `99.0` is not uploaded";
        assert_eq!(
            result_shown(reason),
            "the manifest is invalid: releases.postgres: version `99.0` is not uploaded"
        );
        let long = format!("{} tail", "word ".repeat(40));
        let shown = result_shown(&long);
        assert!(shown.ends_with("word tail"), "{shown}");
        assert_eq!(shown.len(), long.len() - 1);
    }

    #[test]
    fn a_manifest_body_is_checked_as_the_director_does_before_any_task() {
        assert_eq!(check_manifest("").unwrap_err().code, code::BAD_MANIFEST);
        assert_eq!(check_manifest("a: [").unwrap_err().code, code::BAD_MANIFEST);
        assert!(
            check_manifest("- 1")
                .unwrap_err()
                .description
                .contains("hash")
        );
        assert_eq!(
            check_manifest("releases: []").unwrap_err().code,
            code::VALIDATION_MISSING_FIELD
        );
        assert_eq!(check_manifest("name: d").unwrap().1, "d");
    }

    #[test]
    fn an_alias_bomb_is_refused_while_reading() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..9 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("b{}", i - 1)
            };
            bomb.push_str(&format!(
                "b{i}: &b{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        bomb.push_str("name: boom\n");
        let e = check_manifest(&bomb).unwrap_err();
        assert_eq!(e.code, code::BAD_MANIFEST);
    }

    #[test]
    fn a_diff_marks_what_changed_in_meaning_and_nothing_else() {
        let old = "name: d\n# a comment\nx: 1\nlist: [a, b]\nflag: yes\n";
        let new = "list:\n  - a\n  - b\nname: 'd'\nflag: true\nx: 2\n";
        let d = diff(old, new);
        let changed: Vec<&Value> = d.iter().filter(|l| !l[1].is_null()).collect();
        assert_eq!(
            changed,
            [&json!(["x: 1", "removed"]), &json!(["x: 2", "added"])],
            "{d:?}"
        );
        let unchanged = diff(old, "flag: on\nlist: [a, b]\nx: 1\nname: d\n");
        assert!(
            !unchanged.is_empty() && unchanged.iter().all(|l| l[1].is_null()),
            "{unchanged:?}"
        );
        // Nothing before: every line is added.
        assert!(diff("", new).iter().all(|l| l[1] == "added"));
        // Not YAML: compared as text.
        let text = diff("a: [\n", "b: [\n");
        assert!(text.contains(&json!(["a: [", "removed"])));
    }
}
