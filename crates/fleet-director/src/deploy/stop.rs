//! `bosh stop`: the targeted instances' jobs stopped, canaries aside; with `hard` their
//! VMs deleted too, keeping disks and addresses for when they are started again. Which
//! instances it stops, and whether their agents answered, is decided before anything
//! stops.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::bind::bind;
use crate::Core;
use crate::model::{DesiredState, InstanceRecord};
use crate::target::Target;
use crate::task::{JobError, TaskLog};
use crate::update::stop_instance;

/// An instance a stop acts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Stopping {
    pub record: InstanceRecord,
    /// Its agent answered: its jobs are drained and stopped; otherwise only its VM goes
    /// (`hard`) and its record changes.
    pub responsive: bool,
}

/// The instances `target` names that a stop changes: running ones, and with `hard`
/// stopped ones too (their VMs go); ignored instances are left as they are. Pure.
pub fn decide(
    existing: Vec<InstanceRecord>,
    target: &Target,
    hard: bool,
    unresponsive: &BTreeSet<String>,
) -> Vec<Stopping> {
    existing
        .into_iter()
        .filter(|i| target.matches(&i.group, i.index, &i.id) && !i.ignore)
        .filter(|i| i.state == DesiredState::Started || (hard && i.state == DesiredState::Stopped))
        .map(|record| Stopping {
            responsive: !unresponsive.contains(&record.id),
            record,
        })
        .collect()
}

/// Stops every instance's jobs; `hard` deletes the VMs too (`stop --hard`).
pub async fn stop(
    core: Arc<Core>,
    log: TaskLog,
    name: String,
    hard: bool,
    target: Target,
    skip_drain: bool,
) -> Result<String, JobError> {
    let existing: Vec<InstanceRecord> = core
        .records
        .instances(&name)
        .await?
        .into_iter()
        .filter(|i: &InstanceRecord| target.matches(&i.group, i.index, &i.id) && !i.ignore)
        .collect();
    let unresponsive = bind(&core, &log, &existing, true).await?.unresponsive;
    let stopping = decide(existing, &target, hard, &unresponsive);
    let stage = log.stage("Stopping instances", Vec::new(), stopping.len() as u32);
    let count = stopping.len();
    for Stopping {
        mut record,
        responsive,
    } in stopping
    {
        log.check()?;
        let step = stage.start(record.name());
        step.end(stop_instance(&core, &mut record, hard, responsive, skip_drain).await)?;
    }
    let what = if hard { "detached" } else { "stopped" };
    Ok(format!("deployment `{name}`: {count} instances {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(group: &str, index: u32, state: DesiredState) -> InstanceRecord {
        InstanceRecord {
            id: format!("{group}-{index}"),
            deployment: "d".into(),
            group: group.into(),
            index,
            az: None,
            vm_cid: Some(format!("vm-{group}-{index}")),
            agent_id: Some(format!("agent-{group}-{index}")),
            vm_stemcell: None,
            vm_type: None,
            vm_networks: Vec::new(),
            disk_cid: None,
            applied: None,
            state,
            ignore: false,
        }
    }

    fn names(stopping: &[Stopping]) -> Vec<(String, bool)> {
        stopping
            .iter()
            .map(|s| (s.record.id.clone(), s.responsive))
            .collect()
    }

    #[test]
    fn a_stop_takes_the_running_instances_of_its_target_and_leaves_ignored_ones() {
        let mut ignored = record("web", 2, DesiredState::Started);
        ignored.ignore = true;
        let existing = vec![
            record("web", 0, DesiredState::Started),
            record("web", 1, DesiredState::Stopped),
            ignored,
            record("db", 0, DesiredState::Started),
        ];
        let unresponsive = BTreeSet::from(["web-0".to_string()]);
        let soft = decide(
            existing.clone(),
            &Target::group("web"),
            false,
            &unresponsive,
        );
        assert_eq!(names(&soft), [("web-0".to_string(), false)]);
        let hard = decide(existing, &Target::group("web"), true, &unresponsive);
        assert_eq!(
            names(&hard),
            [("web-0".to_string(), false), ("web-1".to_string(), true)],
            "a hard stop deletes the stopped instances' VMs too"
        );
    }

    #[test]
    fn a_detached_instance_is_left_alone_even_by_a_hard_stop() {
        let existing = vec![record("web", 0, DesiredState::Detached)];
        assert!(decide(existing, &Target::default(), true, &BTreeSet::new()).is_empty());
    }
}
