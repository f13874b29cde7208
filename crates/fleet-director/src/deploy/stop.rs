//! `bosh stop`: the targeted instances' jobs stopped, canaries aside; with `hard` their
//! VMs deleted too, keeping disks and addresses for when they are started again. Which
//! instances it stops, and whether their agents answered, is decided before anything
//! stops.

use std::collections::BTreeSet;

use super::bind::bind;
use crate::model::{DesiredState, InstanceRecord};
use crate::ports::Ports;
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

/// The instances `target` names, ignored ones left out: those a stop binds. Pure.
pub fn targeted(existing: Vec<InstanceRecord>, target: &Target) -> Vec<InstanceRecord> {
    existing
        .into_iter()
        .filter(|i| target.matches(&i.group, i.index, &i.id) && !i.ignore)
        .collect()
}

/// Of the `targeted` instances, those a stop changes: running ones, and with `hard`
/// stopped ones too (their VMs go). Pure.
pub fn decide(
    targeted: Vec<InstanceRecord>,
    hard: bool,
    unresponsive: &BTreeSet<String>,
) -> Vec<Stopping> {
    targeted
        .into_iter()
        .filter(|i| i.state == DesiredState::Started || (hard && i.state == DesiredState::Stopped))
        .map(|record| Stopping {
            responsive: !unresponsive.contains(&record.id),
            record,
        })
        .collect()
}

/// Stops every instance's jobs; `hard` deletes the VMs too (`stop --hard`).
pub async fn stop(
    ports: Ports,
    log: TaskLog,
    name: String,
    hard: bool,
    target: Target,
    skip_drain: bool,
) -> Result<String, JobError> {
    let targeted = targeted(ports.records.instances(&name).await?, &target);
    let unresponsive = bind(&ports.agents, &log, &targeted, true)
        .await?
        .unresponsive;
    let stopping = decide(targeted, hard, &unresponsive);
    let stage = log.stage("Stopping instances", Vec::new(), stopping.len() as u32);
    let count = stopping.len();
    for Stopping {
        mut record,
        responsive,
    } in stopping
    {
        log.check()?;
        let step = stage.start(record.name());
        step.end(stop_instance(&ports, &mut record, hard, responsive, skip_drain).await)?;
    }
    let what = if hard { "detached" } else { "stopped" };
    Ok(format!("deployment `{name}`: {count} instances {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(group: &str, index: u32, state: DesiredState) -> InstanceRecord {
        InstanceRecord {
            state,
            ..InstanceRecord::on_vm(group, index, &format!("{group}-{index}"))
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
        let web = targeted(existing, &Target::group("web"));
        let soft = decide(web.clone(), false, &unresponsive);
        assert_eq!(names(&soft), [("web-0".to_string(), false)]);
        let hard = decide(web, true, &unresponsive);
        assert_eq!(
            names(&hard),
            [("web-0".to_string(), false), ("web-1".to_string(), true)],
            "a hard stop deletes the stopped instances' VMs too"
        );
    }

    #[test]
    fn a_detached_instance_is_left_alone_even_by_a_hard_stop() {
        let existing = vec![record("web", 0, DesiredState::Detached)];
        let all = targeted(existing, &Target::default());
        assert!(decide(all, true, &BTreeSet::new()).is_empty());
    }
}
