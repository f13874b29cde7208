//! Cloud check (`bosh cck`): a scan finds the instances whose VM is gone from the cloud
//! or whose agent does not answer and keeps them as problems; resolving applies what the
//! operator chose for each, recreating VMs through the deploy's own update.

use std::collections::BTreeSet;

pub use super::problem::{Problem, ProblemKind, Resolution};

use super::cpi::Cpi;
use super::deploy::{self, DeployOptions};
use super::error::CallContext;
use super::error::StepError;
use super::limits::InstanceLimits;
use super::model::InstanceRecord;
use super::ports::{Agents, DeployPorts, Ports};
use super::records::change;
use super::target::Target;
use super::task::{JobError, TaskLog};
use super::update::forget_vm;

/// What the scan saw of an instance's VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// The cloud does not have the VM.
    Missing,
    /// The VM is there; its agent did not answer.
    Unresponsive,
    Fine,
}

/// Asks the cloud for the VM and, when it has it, the agent for its state; `None` for an
/// instance the scan leaves alone (no VM, or ignored).
async fn observe(
    cpi: &dyn Cpi,
    agents: &Agents,
    instance: &InstanceRecord,
) -> Result<Option<Health>, StepError> {
    let (Some(vm_cid), Some(agent_id)) = (&instance.vm_cid, &instance.agent_id) else {
        return Ok(None);
    };
    if instance.ignore {
        return Ok(None);
    }
    let name = format!("{}/{} ({})", instance.group, instance.id, instance.index);
    if !cpi.has_vm(vm_cid).await.for_subject("has_vm", &name)? {
        return Ok(Some(Health::Missing));
    }
    let answered = agents
        .call(agent_id, "get_state", agents.agent.get_state(agent_id))
        .await
        .is_ok();
    Ok(Some(if answered {
        Health::Fine
    } else {
        Health::Unresponsive
    }))
}

/// The problem an instance's health makes, worded as BOSH words it (not yet numbered).
/// Pure.
pub fn problem(instance: &InstanceRecord, health: Health) -> Option<Problem> {
    let kind = match health {
        Health::Fine => return None,
        Health::Missing => ProblemKind::MissingVm,
        Health::Unresponsive => ProblemKind::UnresponsiveAgent,
    };
    let vm_cid = instance.vm_cid.clone().unwrap_or_default();
    let name = format!("{}/{} ({})", instance.group, instance.id, instance.index);
    let description = match kind {
        ProblemKind::MissingVm => format!("VM for '{name}' with cloud ID '{vm_cid}' missing."),
        ProblemKind::UnresponsiveAgent => {
            format!("VM for '{name}' with cloud ID '{vm_cid}' is not responding.")
        }
    };
    Some(Problem {
        id: 0,
        kind,
        deployment: instance.deployment.clone(),
        group: instance.group.clone(),
        instance_id: instance.id.clone(),
        index: instance.index,
        vm_cid,
        description,
    })
}

/// Scans every instance of the deployment; what it finds replaces what the last scan
/// found.
pub async fn scan(ports: Ports, log: TaskLog, name: String) -> Result<String, JobError> {
    let mut instances = ports.records.instances(&name).await?;
    instances.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
    let with_vm = instances.iter().filter(|i| i.vm_cid.is_some()).count();
    let stage = log.stage("Scanning VMs", Vec::new(), 1);
    let step = stage.start(format!("Checking VM states of {with_vm} VMs"));
    let mut found = Vec::new();
    for instance in &instances {
        log.check()?;
        if let Some(problem) = observe(&*ports.cpi, &ports.agents, instance)
            .await?
            .and_then(|health| problem(instance, health))
        {
            found.push(problem);
        }
    }
    step.finish();
    let mut writes: Vec<fleet_store::Write> = ports
        .records
        .problems(&name)
        .await?
        .iter()
        .map(change::problem_gone)
        .collect();
    for (n, problem) in found.iter_mut().enumerate() {
        problem.id = n as u64 + 1;
        writes.push(change::problem(problem));
    }
    ports.records.write(writes).await?;
    let missing = found
        .iter()
        .filter(|p| p.kind == ProblemKind::MissingVm)
        .count();
    Ok(format!(
        "scanned {with_vm} VMs: {} OK, {} unresponsive, {missing} missing",
        with_vm - found.len(),
        found.len() - missing
    ))
}

/// Applies each chosen resolution; the VMs to recreate are recreated together at the
/// end, with the deployment's last manifest, as `recreate --fix` of those instances.
pub async fn resolve(
    deploy_ports: DeployPorts,
    limits: InstanceLimits,
    log: TaskLog,
    name: String,
    chosen: Vec<(Problem, Resolution)>,
) -> Result<String, JobError> {
    let ports = &deploy_ports.ports;
    let stage = log.stage(
        "Applying problem resolutions",
        Vec::new(),
        chosen.len() as u32,
    );
    let instances = ports.records.instances(&name).await?;
    let mut recreate = BTreeSet::new();
    for (problem, resolution) in &chosen {
        log.check()?;
        let step = stage.start(format!(
            "{}: {} ({})",
            problem.kind.name(),
            problem.description,
            resolution.plan()
        ));
        let mut record = instances
            .iter()
            .find(|i| i.id == problem.instance_id)
            .cloned();
        let applied: Result<(), StepError> = async {
            let Some(record) = record.as_mut() else {
                // The instance went away since the scan: nothing is left to resolve.
                return Ok(());
            };
            match resolution {
                Resolution::Ignore => {}
                Resolution::DeleteVmReference => forget_vm(&ports.records, record).await?,
                Resolution::RebootVm => ports
                    .cpi
                    .reboot_vm(&problem.vm_cid)
                    .await
                    .for_subject("reboot_vm", &problem.vm_cid)?,
                Resolution::RecreateVm => {
                    if problem.kind == ProblemKind::MissingVm {
                        forget_vm(&ports.records, record).await?;
                    }
                    recreate.insert(record.id.clone());
                }
            }
            ports
                .records
                .write(vec![change::problem_gone(problem)])
                .await
                .map_err(StepError::from)
        }
        .await;
        step.end(applied)?;
    }
    let recreated = recreate.len();
    recreate_fixing(&deploy_ports, limits, log, &name, recreate).await?;
    Ok(format!(
        "deployment `{name}`: {} problems resolved, {recreated} VMs recreated",
        chosen.len()
    ))
}

/// Recreates the instances' VMs together, with the deployment's last manifest, as
/// `recreate --fix` of those instances.
async fn recreate_fixing(
    deploy_ports: &DeployPorts,
    limits: InstanceLimits,
    log: TaskLog,
    name: &str,
    instances: BTreeSet<String>,
) -> Result<(), JobError> {
    if instances.is_empty() {
        return Ok(());
    }
    let options = DeployOptions {
        recreate: true,
        fix: true,
        skip_drain: false,
        canaries: None,
        max_in_flight: None,
        dry_run: false,
        start: false,
        restart: false,
        target: Target {
            only: Some(instances),
            ..Target::default()
        },
        teams: Vec::new(),
    };
    deploy::recreate_or_start(deploy_ports.clone(), limits, log, name.to_string(), options).await?;
    Ok(())
}

/// The resurrector's repair (`scan and fix`): of the instances named, those whose agent
/// does not answer or whose VM is gone get new VMs. Instances with a persistent disk are
/// left to an operator unless `fix_stateful` (the director's
/// `auto_fix_stateful_nodes`): recreating the VM of a database that only looks down can
/// cost more than it saves. Nothing is kept as a problem of `bosh cck`.
pub async fn scan_and_fix(
    deploy_ports: DeployPorts,
    limits: InstanceLimits,
    log: TaskLog,
    name: String,
    named: BTreeSet<String>,
    fix_stateful: bool,
) -> Result<String, JobError> {
    let ports = &deploy_ports.ports;
    let mut instances = ports.records.instances(&name).await?;
    instances.retain(|i| named.contains(&i.id));
    instances.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
    let stage = log.stage("Scanning VMs", Vec::new(), 1);
    let step = stage.start(format!("Checking VM states of {} VMs", instances.len()));
    let mut broken = BTreeSet::new();
    let mut stateful = Vec::new();
    for instance in &instances {
        log.check()?;
        let Some(health) = observe(&*ports.cpi, &ports.agents, instance).await? else {
            continue;
        };
        if health == Health::Fine {
            continue;
        }
        if instance.disk_cid.is_some() && !fix_stateful {
            stateful.push(instance.name());
            continue;
        }
        if health == Health::Missing {
            let mut record = instance.clone();
            forget_vm(&ports.records, &mut record).await?;
        }
        broken.insert(instance.id.clone());
    }
    step.finish();
    let fixed = broken.len();
    recreate_fixing(&deploy_ports, limits, log, &name, broken).await?;
    let mut result = format!("scan and fix complete: {fixed} VMs recreated");
    if !stateful.is_empty() {
        result.push_str(&format!(
            "; left alone, having persistent disks: {}",
            stateful.join(", ")
        ));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance() -> InstanceRecord {
        InstanceRecord {
            vm_cid: Some("vm-1".into()),
            ..InstanceRecord::on_vm("web", 1, "abc")
        }
    }

    #[test]
    fn a_missing_vm_and_a_silent_agent_are_problems_worded_as_bosh_words_them() {
        assert_eq!(problem(&instance(), Health::Fine), None);
        let missing = problem(&instance(), Health::Missing).unwrap();
        assert_eq!(missing.kind, ProblemKind::MissingVm);
        assert_eq!(
            missing.description,
            "VM for 'web/abc (1)' with cloud ID 'vm-1' missing."
        );
        let silent = problem(&instance(), Health::Unresponsive).unwrap();
        assert_eq!(silent.kind, ProblemKind::UnresponsiveAgent);
        assert_eq!(
            silent.description,
            "VM for 'web/abc (1)' with cloud ID 'vm-1' is not responding."
        );
    }
}
