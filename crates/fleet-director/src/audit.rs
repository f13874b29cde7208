//! The director's event log (`bosh events`): who did what to which deployment and
//! instance, and when, read from the task history and the tasks' own event logs. Every
//! task that acts on a deployment makes an event when it starts and one when it ends,
//! whose parent is the first and which carries the error when it failed; every instance
//! it created, updated, recreated, stopped, started or deleted makes such a pair too,
//! whose first has the task's start as parent. Task `n`'s events are numbered from
//! `n << 20`: its start, its instances' events in the order they happened, its end at the
//! top of its range; so ids grow with time and page with `before_id` as the director's do.
//! The lowest ids of each range are the health monitor's alerts raised before the task
//! started (after the one before it), so alerts sort among the tasks' events by when they
//! were raised.

use super::model::{EventState, Task, TaskEvent, TaskKind, TaskState};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    pub id: u64,
    pub parent_id: Option<u64>,
    /// Unix seconds.
    pub timestamp: u64,
    pub user: String,
    pub action: &'static str,
    pub object_type: &'static str,
    pub object_name: String,
    pub task: u64,
    pub deployment: String,
    /// `group/id` of the instance an instance event is about; empty otherwise.
    pub instance: String,
    pub error: Option<String>,
    /// What an alert said; `None` for a task's events.
    pub message: Option<String>,
}

/// Which events a listing wants; every field narrows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub before_id: Option<u64>,
    pub before_time: Option<u64>,
    pub after_time: Option<u64>,
    pub deployment: Option<String>,
    pub task: Option<u64>,
    /// `group/id`.
    pub instance: Option<String>,
    pub user: Option<String>,
    pub action: Option<String>,
    pub object_type: Option<String>,
    pub object_name: Option<String>,
}

/// The most events one listing returns; older ones are paged with `before_id`.
pub const PAGE: usize = 200;

/// How many ids each task's events have: far more than a task's instances make.
const SHIFT: u32 = 20;

/// How many alerts may be raised between two tasks' starts: the lowest ids of a task's
/// range.
const ALERT_SLOTS: u64 = 1 << 12;

/// The id of task `task`'s event at `seq`: 0 for its start, `END` for its end.
fn id(task: u64, seq: u64) -> u64 {
    if seq == END {
        (task << SHIFT) | END
    } else {
        (task << SHIFT) | (ALERT_SLOTS + seq)
    }
}

const END: u64 = (1 << SHIFT) - 1;

/// The most events a task's instances make in its range.
const INSTANCE_EVENTS: u64 = END - ALERT_SLOTS;

/// The id of the `seq`th alert raised while `newest_task` was the newest task (before
/// the next one started); `None` when so many were raised that no id is left.
pub fn alert_id(newest_task: u64, seq: u64) -> Option<u64> {
    (seq < ALERT_SLOTS).then(|| ((newest_task + 1) << SHIFT) | seq)
}

/// The newest task when an alert was raised.
pub fn alert_task(alert_id: u64) -> u64 {
    (alert_id >> SHIFT) - 1
}

/// What a task of `kind` does to its deployment, as the director names the action.
fn action(kind: TaskKind) -> Option<&'static str> {
    Some(match kind {
        TaskKind::CreateDeployment => "create",
        TaskKind::UpdateDeployment | TaskKind::ResolveProblems | TaskKind::ScanAndFix => "update",
        TaskKind::RecreateDeployment => "recreate",
        TaskKind::StopDeployment => "stop",
        TaskKind::StartDeployment => "start",
        TaskKind::RestartDeployment => "restart",
        TaskKind::DeleteDeployment => "delete",
        // Reads, and work on no deployment, leave no event of a deployment.
        TaskKind::InstanceDetails
        | TaskKind::ScanProblems
        | TaskKind::CleanUp
        | TaskKind::DeleteOrphanDisk
        | TaskKind::UpdateRelease
        | TaskKind::DeleteRelease
        | TaskKind::RunErrand
        | TaskKind::FetchLogs
        | TaskKind::ExportRelease
        | TaskKind::Ssh => return None,
    })
}

/// What a step of `stage` does to its instance, in a task of `kind`.
fn instance_action(stage: &str, kind: TaskKind) -> Option<&'static str> {
    match stage {
        "Updating instance" => Some(match kind {
            TaskKind::CreateDeployment => "create",
            TaskKind::RecreateDeployment | TaskKind::ScanAndFix => "recreate",
            TaskKind::StopDeployment => "stop",
            TaskKind::StartDeployment => "start",
            TaskKind::RestartDeployment => "restart",
            _ => "update",
        }),
        "Deleting unneeded instances" | "Deleting instances" => Some("delete"),
        "Stopping instances" => Some("stop"),
        _ => None,
    }
}

/// Whether `task` has events at all, and may have some `filter` admits: the caller reads
/// its event log only then.
pub fn may_admit(task: &Task, filter: &AuditFilter) -> bool {
    TaskKind::of(task).and_then(action).is_some()
        && filter
            .before_id
            .is_none_or(|before| id(task.id, 0) < before)
}

/// Whether the events `filter` admits may be of instances: when not, no task's event log
/// needs reading.
pub fn wants_instances(filter: &AuditFilter) -> bool {
    filter
        .object_type
        .as_deref()
        .is_none_or(|t| t == "instance")
}

/// The events of one task, with its event log (the steps it logged), newest first.
pub fn of(task: &Task, log: &[TaskEvent]) -> Vec<AuditEvent> {
    let (Some(action), Some(deployment)) = (TaskKind::of(task).and_then(action), &task.deployment)
    else {
        return Vec::new();
    };
    let start = AuditEvent {
        id: id(task.id, 0),
        parent_id: None,
        timestamp: task.started_at.unwrap_or_default(),
        user: task.user.clone().unwrap_or_default(),
        action,
        object_type: "deployment",
        object_name: deployment.clone(),
        task: task.id,
        deployment: deployment.clone(),
        instance: String::new(),
        error: None,
        message: None,
    };
    let mut out = vec![start.clone()];
    // A step's start, by stage, tags and index: its end names it as parent.
    let mut started: std::collections::HashMap<(&str, &[String], u32), u64> = Default::default();
    for step in log {
        let Some(action) = TaskKind::of(task).and_then(|kind| instance_action(&step.stage, kind))
        else {
            continue;
        };
        let seq = out.len() as u64;
        if seq >= INSTANCE_EVENTS {
            break;
        }
        // `group/id (index)`, with ` (canary)` for a canary.
        let instance = step.task.split(" (").next().unwrap_or_default().to_string();
        let key = (step.stage.as_str(), step.tags.as_slice(), step.index);
        let parent_id = match step.state {
            EventState::Started => {
                started.insert(key, id(task.id, seq));
                Some(start.id)
            }
            EventState::Finished | EventState::Failed => started.get(&key).copied(),
        };
        out.push(AuditEvent {
            id: id(task.id, seq),
            parent_id,
            timestamp: step.time,
            action,
            object_type: "instance",
            object_name: instance.clone(),
            instance,
            error: step.error.clone(),
            ..start.clone()
        });
    }
    if let Some(finished) = task.finished_at.filter(|_| !task.state.is_running()) {
        out.push(AuditEvent {
            id: id(task.id, END),
            parent_id: Some(start.id),
            timestamp: finished,
            error: (task.state == TaskState::Error)
                .then(|| task.result.clone().unwrap_or_default()),
            ..start
        });
    }
    out.reverse();
    out
}

pub fn admits(filter: &AuditFilter, e: &AuditEvent) -> bool {
    let is = |wanted: &Option<String>, value: &str| wanted.as_deref().is_none_or(|w| w == value);
    filter.before_id.is_none_or(|id| e.id < id)
        && filter.before_time.is_none_or(|t| e.timestamp < t)
        && filter.after_time.is_none_or(|t| e.timestamp > t)
        && filter.task.is_none_or(|t| e.task == t)
        && is(&filter.instance, &e.instance)
        && is(&filter.deployment, &e.deployment)
        && is(&filter.user, &e.user)
        && is(&filter.action, e.action)
        && is(&filter.object_type, e.object_type)
        && is(&filter.object_name, &e.object_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: u64, kind: TaskKind, state: TaskState, user: Option<&str>) -> Task {
        Task {
            id,
            state,
            kind: kind.name().to_string(),
            description: kind.description().to_string(),
            deployment: Some(format!("d{}", id % 2)),
            result: (state == TaskState::Error).then(|| "it broke".to_string()),
            started_at: Some(100 * id),
            finished_at: (!state.is_running()).then_some(100 * id + 50),
            user: user.map(str::to_string),
            context_id: None,
        }
    }

    fn step(stage: &str, name: &str, index: u32, state: EventState, time: u64) -> TaskEvent {
        TaskEvent {
            time,
            stage: stage.into(),
            tags: vec!["web".into()],
            task: name.into(),
            index,
            total: 2,
            state,
            progress: 0,
            error: (state == EventState::Failed).then(|| "no answer".to_string()),
        }
    }

    /// Task 2 updated web/a (the canary) and failed on web/b; task 1 created the
    /// deployment; task 3 read; task 4 still recreates.
    fn history() -> Vec<(Task, Vec<TaskEvent>)> {
        let updating = "Updating instance";
        vec![
            (
                task(
                    4,
                    TaskKind::RecreateDeployment,
                    TaskState::Processing,
                    Some("ops"),
                ),
                vec![],
            ),
            (
                task(3, TaskKind::InstanceDetails, TaskState::Done, Some("admin")),
                vec![],
            ),
            (
                task(
                    2,
                    TaskKind::UpdateDeployment,
                    TaskState::Error,
                    Some("admin"),
                ),
                vec![
                    step("Compiling packages", "pkg/1", 1, EventState::Started, 201),
                    step(updating, "web/a (0) (canary)", 1, EventState::Started, 210),
                    step(updating, "web/a (0) (canary)", 1, EventState::Finished, 220),
                    step(updating, "web/b (1)", 2, EventState::Started, 230),
                    step(updating, "web/b (1)", 2, EventState::Failed, 240),
                ],
            ),
            (
                task(1, TaskKind::CreateDeployment, TaskState::Done, None),
                vec![],
            ),
        ]
    }

    fn events(filter: &AuditFilter) -> Vec<AuditEvent> {
        history()
            .iter()
            .flat_map(|(task, log)| of(task, log))
            .filter(|e| admits(filter, e))
            .collect()
    }

    fn ids(filter: AuditFilter) -> Vec<u64> {
        events(&filter).iter().map(|e| e.id).collect()
    }

    #[test]
    fn a_task_makes_a_start_and_an_end_event_and_so_does_each_instance_it_changes() {
        let all = events(&AuditFilter::default());
        let ids: Vec<u64> = all.iter().map(|e| e.id).collect();
        assert_eq!(
            ids,
            [
                id(4, 0),
                id(2, END),
                id(2, 4),
                id(2, 3),
                id(2, 2),
                id(2, 1),
                id(2, 0),
                id(1, END),
                id(1, 0)
            ],
            "task 4 runs: only started; task 3 reads; compiling is no instance's event"
        );
        assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first");
        let end = &all[1];
        assert_eq!(end.parent_id, Some(id(2, 0)));
        assert_eq!(end.error.as_deref(), Some("it broke"));
        assert_eq!((end.action, end.timestamp), ("update", 250));
        let failed = &all[2];
        assert_eq!(
            (
                failed.object_type,
                failed.object_name.as_str(),
                failed.instance.as_str()
            ),
            ("instance", "web/b", "web/b")
        );
        assert_eq!(failed.parent_id, Some(id(2, 3)), "its start");
        assert_eq!(
            (failed.error.as_deref(), failed.timestamp),
            (Some("no answer"), 240)
        );
        assert_eq!(all[5].object_name, "web/a", "the canary, by name alone");
        assert_eq!(
            all[5].parent_id,
            Some(id(2, 0)),
            "an instance's start: the task's"
        );
        assert_eq!((all[5].user.as_str(), all[5].action), ("admin", "update"));
        assert_eq!(all[0].user, "ops");
        assert_eq!(all[8].user, "", "a task started by no signed-in user");
    }

    #[test]
    fn every_filter_narrows() {
        assert_eq!(
            ids(AuditFilter {
                before_id: Some(id(2, 2)),
                ..Default::default()
            }),
            [id(2, 1), id(2, 0), id(1, END), id(1, 0)]
        );
        assert_eq!(
            ids(AuditFilter {
                task: Some(1),
                ..Default::default()
            }),
            [id(1, END), id(1, 0)]
        );
        assert_eq!(
            ids(AuditFilter {
                deployment: Some("d1".into()),
                ..Default::default()
            }),
            [id(1, END), id(1, 0)]
        );
        assert_eq!(
            ids(AuditFilter {
                user: Some("ops".into()),
                ..Default::default()
            }),
            [id(4, 0)]
        );
        assert_eq!(
            ids(AuditFilter {
                action: Some("create".into()),
                ..Default::default()
            }),
            [id(1, END), id(1, 0)]
        );
        assert_eq!(
            ids(AuditFilter {
                after_time: Some(235),
                ..Default::default()
            }),
            [id(4, 0), id(2, END), id(2, 4)]
        );
        assert_eq!(
            ids(AuditFilter {
                before_time: Some(200),
                ..Default::default()
            }),
            [id(1, END), id(1, 0)]
        );
        assert_eq!(
            ids(AuditFilter {
                instance: Some("web/a".into()),
                ..Default::default()
            }),
            [id(2, 2), id(2, 1)]
        );
        assert_eq!(
            ids(AuditFilter {
                object_type: Some("instance".into()),
                object_name: Some("web/b".into()),
                ..Default::default()
            }),
            [id(2, 4), id(2, 3)]
        );
        assert!(
            ids(AuditFilter {
                object_type: Some("disk".into()),
                ..Default::default()
            })
            .is_empty()
        );
    }

    #[test]
    fn a_listing_reads_no_event_log_it_cannot_use() {
        let (update, _) = &history()[2];
        assert!(may_admit(update, &AuditFilter::default()));
        let older = AuditFilter {
            before_id: Some(id(2, 0)),
            ..Default::default()
        };
        assert!(!may_admit(update, &older), "every event of task 2 is newer");
        let (read, _) = &history()[1];
        assert!(!may_admit(read, &AuditFilter::default()));
        let deployments = AuditFilter {
            object_type: Some("deployment".into()),
            ..Default::default()
        };
        assert!(!wants_instances(&deployments));
        assert!(wants_instances(&AuditFilter::default()));
    }
}
