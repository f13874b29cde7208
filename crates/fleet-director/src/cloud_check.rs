//! Cloud check (`bosh cck`): a scan finds the instances whose VM is gone from the cloud
//! or whose agent does not answer and keeps them as problems; resolving applies what the
//! operator chose for each, recreating VMs through the deploy's own update.

use std::collections::BTreeSet;
use std::sync::Arc;

pub use super::problem::{Problem, ProblemKind, Resolution};

use super::Core;
use super::deploy::{self, DeployOptions};
use super::error::StepError;
use super::model::InstanceRecord;
use super::records::change;
use super::target::Target;
use super::task::{JobError, TaskLog};
use super::update::forget_vm;

/// What the scan makes of one instance: nothing, or its problem (not yet numbered).
async fn examine(core: &Core, instance: &InstanceRecord) -> Result<Option<Problem>, StepError> {
    let (Some(vm_cid), Some(agent_id)) = (&instance.vm_cid, &instance.agent_id) else {
        return Ok(None);
    };
    if instance.ignore {
        return Ok(None);
    }
    let name = format!("{}/{} ({})", instance.group, instance.id, instance.index);
    let kind = if !core
        .cpi
        .has_vm(vm_cid)
        .await
        .map_err(|e| StepError::Failed(format!("has_vm for {name}: {e}")))?
    {
        ProblemKind::MissingVm
    } else if core
        .agent_call(agent_id, "get_state", core.agent.get_state(agent_id))
        .await
        .is_err()
    {
        ProblemKind::UnresponsiveAgent
    } else {
        return Ok(None);
    };
    let description = match kind {
        ProblemKind::MissingVm => format!("VM for '{name}' with cloud ID '{vm_cid}' missing."),
        ProblemKind::UnresponsiveAgent => {
            format!("VM for '{name}' with cloud ID '{vm_cid}' is not responding.")
        }
    };
    Ok(Some(Problem {
        id: 0,
        kind,
        deployment: instance.deployment.clone(),
        group: instance.group.clone(),
        instance_id: instance.id.clone(),
        index: instance.index,
        vm_cid: vm_cid.clone(),
        description,
    }))
}

/// Scans every instance of the deployment; what it finds replaces what the last scan
/// found.
pub async fn scan(core: Arc<Core>, log: TaskLog, name: String) -> Result<String, JobError> {
    let mut instances = core.records.instances(&name).await?;
    instances.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
    let with_vm = instances.iter().filter(|i| i.vm_cid.is_some()).count();
    let stage = log.stage("Scanning VMs", Vec::new(), 1);
    let step = stage.start(format!("Checking VM states of {with_vm} VMs"));
    let mut found = Vec::new();
    for instance in &instances {
        log.check()?;
        if let Some(problem) = examine(&core, instance).await? {
            found.push(problem);
        }
    }
    step.finish();
    let mut writes: Vec<fleet_store::Write> = core
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
    core.records.write(writes).await?;
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
    core: Arc<Core>,
    log: TaskLog,
    name: String,
    chosen: Vec<(Problem, Resolution)>,
) -> Result<String, JobError> {
    let stage = log.stage(
        "Applying problem resolutions",
        Vec::new(),
        chosen.len() as u32,
    );
    let instances = core.records.instances(&name).await?;
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
                Resolution::DeleteVmReference => forget_vm(&core, record).await?,
                Resolution::RebootVm => core
                    .cpi
                    .reboot_vm(&problem.vm_cid)
                    .await
                    .map_err(|e| StepError::Failed(format!("reboot_vm: {e}")))?,
                Resolution::RecreateVm => {
                    if problem.kind == ProblemKind::MissingVm {
                        forget_vm(&core, record).await?;
                    }
                    recreate.insert(record.id.clone());
                }
            }
            core.records
                .write(vec![change::problem_gone(problem)])
                .await
                .map_err(StepError::from)
        }
        .await;
        step.end(applied)?;
    }
    let recreated = recreate.len();
    if !recreate.is_empty() {
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
                only: Some(recreate),
                ..Target::default()
            },
        };
        deploy::recreate_or_start(Arc::clone(&core), log, name.clone(), options).await?;
    }
    Ok(format!(
        "deployment `{name}`: {} problems resolved, {recreated} VMs recreated",
        chosen.len()
    ))
}
