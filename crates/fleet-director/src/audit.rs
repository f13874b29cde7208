//! The director's event log (`bosh events`): who did what to which deployment and when,
//! read from the task history. Every task that acts on a deployment makes two events:
//! one when it starts, and one when it ends, whose parent is the first and which carries
//! the error when it failed. Event `2n-1` starts task `n` and event `2n` ends it, so ids
//! grow with time and page with `before_id` as the director's do.

use super::model::{Task, TaskKind, TaskState};

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
    pub error: Option<String>,
}

/// Which events a listing wants; every field narrows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub before_id: Option<u64>,
    pub before_time: Option<u64>,
    pub after_time: Option<u64>,
    pub deployment: Option<String>,
    pub task: Option<u64>,
    pub instance: Option<String>,
    pub user: Option<String>,
    pub action: Option<String>,
    pub object_type: Option<String>,
    pub object_name: Option<String>,
}

/// The most events one listing returns; older ones are paged with `before_id`.
pub const PAGE: usize = 200;

/// What a task of `kind` does to its deployment, as the director names the action.
fn action(kind: TaskKind) -> Option<&'static str> {
    Some(match kind {
        TaskKind::CreateDeployment => "create",
        TaskKind::UpdateDeployment | TaskKind::ResolveProblems => "update",
        TaskKind::RecreateDeployment => "recreate",
        TaskKind::StopDeployment => "stop",
        TaskKind::StartDeployment => "start",
        TaskKind::RestartDeployment => "restart",
        TaskKind::DeleteDeployment => "delete",
        // Reads, and work on no deployment, leave no event of a deployment.
        TaskKind::InstanceDetails
        | TaskKind::ScanProblems
        | TaskKind::CleanUp
        | TaskKind::DeleteOrphanDisk => return None,
    })
}

/// The events of one task, newest first.
fn of(task: &Task) -> Vec<AuditEvent> {
    let (Some(action), Some(deployment)) = (action(task.kind), &task.deployment) else {
        return Vec::new();
    };
    let start = AuditEvent {
        id: 2 * task.id - 1,
        parent_id: None,
        timestamp: task.started_at.unwrap_or_default(),
        user: task.user.clone().unwrap_or_default(),
        action,
        object_type: "deployment",
        object_name: deployment.clone(),
        task: task.id,
        deployment: deployment.clone(),
        error: None,
    };
    let Some(finished) = task.finished_at.filter(|_| !task.state.is_running()) else {
        return vec![start];
    };
    let end = AuditEvent {
        id: 2 * task.id,
        parent_id: Some(start.id),
        timestamp: finished,
        error: (task.state == TaskState::Error).then(|| task.result.clone().unwrap_or_default()),
        ..start.clone()
    };
    vec![end, start]
}

fn admits(filter: &AuditFilter, e: &AuditEvent) -> bool {
    let is = |wanted: &Option<String>, value: &str| wanted.as_deref().is_none_or(|w| w == value);
    filter.before_id.is_none_or(|id| e.id < id)
        && filter.before_time.is_none_or(|t| e.timestamp < t)
        && filter.after_time.is_none_or(|t| e.timestamp > t)
        && filter.task.is_none_or(|t| e.task == t)
        // No event here names an instance.
        && filter.instance.is_none()
        && is(&filter.deployment, &e.deployment)
        && is(&filter.user, &e.user)
        && is(&filter.action, e.action)
        && is(&filter.object_type, e.object_type)
        && is(&filter.object_name, &e.object_name)
}

/// The events of `tasks` (newest first) that `filter` admits, newest first, at most
/// [`PAGE`]. Pure.
pub fn events(tasks: &[Task], filter: &AuditFilter) -> Vec<AuditEvent> {
    tasks
        .iter()
        .flat_map(of)
        .filter(|e| admits(filter, e))
        .take(PAGE)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: u64, kind: TaskKind, state: TaskState, user: Option<&str>) -> Task {
        Task {
            id,
            state,
            kind,
            description: kind.description().to_string(),
            deployment: Some(format!("d{}", id % 2)),
            result: (state == TaskState::Error).then(|| "it broke".to_string()),
            started_at: Some(100 * id),
            finished_at: (!state.is_running()).then_some(100 * id + 50),
            user: user.map(str::to_string),
        }
    }

    fn history() -> Vec<Task> {
        vec![
            task(
                4,
                TaskKind::RecreateDeployment,
                TaskState::Processing,
                Some("ops"),
            ),
            task(3, TaskKind::InstanceDetails, TaskState::Done, Some("admin")),
            task(
                2,
                TaskKind::UpdateDeployment,
                TaskState::Error,
                Some("admin"),
            ),
            task(1, TaskKind::CreateDeployment, TaskState::Done, None),
        ]
    }

    #[test]
    fn a_task_makes_a_start_and_an_end_event_and_reads_make_none() {
        let all = events(&history(), &AuditFilter::default());
        let ids: Vec<u64> = all.iter().map(|e| e.id).collect();
        assert_eq!(
            ids,
            [7, 4, 3, 2, 1],
            "task 4 runs: only started; task 3 reads"
        );
        assert_eq!(all[1].parent_id, Some(3));
        assert_eq!(all[1].error.as_deref(), Some("it broke"));
        assert_eq!((all[1].action, all[1].timestamp), ("update", 250));
        assert_eq!(all[0].user, "ops");
        assert_eq!(all[4].user, "", "a task started by no signed-in user");
    }

    #[test]
    fn every_filter_narrows() {
        let h = history();
        let ids = |filter: AuditFilter| -> Vec<u64> {
            events(&h, &filter).iter().map(|e| e.id).collect()
        };
        assert_eq!(
            ids(AuditFilter {
                before_id: Some(4),
                ..Default::default()
            }),
            [3, 2, 1]
        );
        assert_eq!(
            ids(AuditFilter {
                task: Some(2),
                ..Default::default()
            }),
            [4, 3]
        );
        assert_eq!(
            ids(AuditFilter {
                deployment: Some("d1".into()),
                ..Default::default()
            }),
            [2, 1]
        );
        assert_eq!(
            ids(AuditFilter {
                user: Some("ops".into()),
                ..Default::default()
            }),
            [7]
        );
        assert_eq!(
            ids(AuditFilter {
                action: Some("create".into()),
                ..Default::default()
            }),
            [2, 1]
        );
        assert_eq!(
            ids(AuditFilter {
                after_time: Some(200),
                ..Default::default()
            }),
            [7, 4]
        );
        assert_eq!(
            ids(AuditFilter {
                before_time: Some(200),
                ..Default::default()
            }),
            [2, 1]
        );
        assert!(
            ids(AuditFilter {
                instance: Some("web/0".into()),
                ..Default::default()
            })
            .is_empty()
        );
        assert!(
            ids(AuditFilter {
                object_type: Some("disk".into()),
                ..Default::default()
            })
            .is_empty()
        );
    }
}
