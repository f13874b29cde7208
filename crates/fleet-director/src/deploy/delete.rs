//! `bosh delete-deployment`: every instance deleted (its jobs drained and stopped when its
//! agent answers, its VM deleted, its disk orphaned), then what the deployment still holds
//! (compilation VMs, addresses, rendered templates) and its record. Each instance's
//! deletion is decided, with whether its agent answered, before anything goes.

use std::collections::BTreeSet;

use super::bind::bind;
use super::decide::Deletion;
use crate::agent::Intent;
use crate::compilation;
use crate::model::InstanceRecord;
use crate::networking;
use crate::ports::DeployPorts;
use crate::records::change;
use crate::task::{JobError, TaskLog};
use crate::templates;
use crate::update::delete_instance;

/// Every instance goes, ignored ones too: the deployment itself goes. Their addresses go
/// with the deployment's others once every VM is gone. Pure.
pub fn decide(existing: Vec<InstanceRecord>, unresponsive: &BTreeSet<String>) -> Vec<Deletion> {
    existing
        .into_iter()
        .map(|record| Deletion {
            responsive: !unresponsive.contains(&record.id),
            addresses: Vec::new(),
            record,
        })
        .collect()
}

/// Deletes every instance of the deployment and the deployment itself.
pub async fn delete(
    deploy_ports: DeployPorts,
    log: TaskLog,
    name: String,
) -> Result<String, JobError> {
    let ports = &deploy_ports.ports;
    let existing: Vec<InstanceRecord> = ports.records.instances(&name).await?;
    let unresponsive = bind(&ports.agents, &log, &existing, true)
        .await?
        .unresponsive;
    let deletions = decide(existing, &unresponsive);
    let stage = log.stage("Deleting instances", Vec::new(), deletions.len() as u32);
    let count = deletions.len();
    for deletion in deletions {
        log.check()?;
        let step = stage.start(deletion.record.name());
        let intent = Intent::DeleteDeployment;
        let gone = delete_instance(ports, deletion.record, deletion.responsive, false, intent);
        step.end(gone.await)?;
    }
    // What a crash of an earlier task of this deployment left, deleted under its lock.
    crate::unsettled::settle(&*ports.cpi, &ports.records, Some(&name)).await?;
    compilation::delete_leftovers(ports, &log, &name).await?;
    // Every address the deployment held, static or dynamic, returns to its network.
    networking::release_where(&ports.addresses, &name, |_| true).await?;
    templates::forget_unused(&ports.records, &*deploy_ports.renderer, &name).await?;
    ports
        .records
        .write(vec![
            change::deployment_gone(&name),
            change::deployment_teams_gone(&name),
        ])
        .await?;
    Ok(format!(
        "deployment `{name}` deleted with {count} instances"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_instance_goes_and_only_the_unanswered_skip_their_drain() {
        let record = |id: &str, ignore: bool| InstanceRecord {
            ignore,
            ..InstanceRecord::on_vm("web", 0, id)
        };
        let deletions = decide(
            vec![record("a", false), record("b", true)],
            &BTreeSet::from(["a".to_string()]),
        );
        let decided: Vec<(&str, bool)> = deletions
            .iter()
            .map(|d| (d.record.id.as_str(), d.responsive))
            .collect();
        assert_eq!(decided, [("a", false), ("b", true)]);
    }
}
