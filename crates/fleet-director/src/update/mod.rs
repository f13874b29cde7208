//! Updating instance groups: canaries first, then the rest with `max_in_flight`, serial
//! groups one after another. The first failure stops new instances from starting; those
//! in flight finish; the task ends in error.

mod disk;
mod instance;
mod jobs;
mod options;
mod records;
mod vm;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::task::JoinSet;

pub use instance::update_instance;
pub use options::UpdateOptions;
pub use records::persist;
pub use vm::{create_missing_vm, delete_instance, forget_vm, new_record};

use super::agent::{Drain, Intent};
use super::model::{DesiredState, InstanceRecord};

/// Stops an instance's jobs (when its agent answers) and, with `hard`, deletes its VM; the
/// instance keeps its persistent disk and addresses.
pub async fn stop_instance(
    ports: &Ports,
    record: &mut InstanceRecord,
    hard: bool,
    responsive: bool,
    skip_drain: bool,
) -> Result<(), StepError> {
    if responsive && let (Some(agent), Some(_)) = (record.agent_id.clone(), &record.vm_cid) {
        let intent = if hard {
            Intent::DeleteVm
        } else {
            Intent::KeepVm
        };
        let drain = Drain::Shutdown(intent);
        jobs::stop_jobs(&ports.agents, &agent, &record.name(), skip_drain, drain).await?;
    }
    if hard {
        vm::delete_vm(ports, record, responsive).await?;
        record.state = DesiredState::Detached;
    } else {
        record.state = DesiredState::Stopped;
    }
    records::persist(&ports.records, record).await
}

use super::error::StepError;
use super::plan::{GroupPlan, InstancePlan};
use super::task::{JobError, Stage, TaskLog};
use super::update_order::{GroupOrder, UpdateOrder, Window};
use crate::ports::Ports;

/// Raised by the first failure anywhere in a deploy, so groups updating side by side
/// (`serial: false`) stop starting instances too, not only the group that failed.
pub type Halt = Arc<AtomicBool>;

/// Runs one window's `instances` at most `window.limit` at a time; after the first error
/// (here or in a group running alongside) nothing new starts.
async fn run_window(
    ports: &Ports,
    stage: &Stage,
    deployment: &str,
    instances: Vec<InstancePlan>,
    window: &Window,
    options: &UpdateOptions,
    halt: &Halt,
) -> Result<(), JobError> {
    let mut running = JoinSet::new();
    let mut first_error: Option<StepError> = None;
    let mut pending = instances.into_iter();
    let (watch_time, canary) = (window.watch_time, window.canary);
    loop {
        while first_error.is_none()
            && !halt.load(Ordering::SeqCst)
            && !stage.cancelled()
            && running.len() < window.limit.max(1)
        {
            let Some(plan) = pending.next() else { break };
            let ports = ports.clone();
            let stage = stage.clone();
            let deployment = deployment.to_string();
            let options = options.clone();
            running.spawn(crate::trace::within(async move {
                update_instance(
                    &ports,
                    &stage,
                    &deployment,
                    plan,
                    watch_time,
                    canary,
                    &options,
                )
                .await
            }));
        }
        match running.join_next().await {
            None => break,
            Some(Ok(Ok(()))) => {}
            Some(Ok(Err(e))) => {
                halt.store(true, Ordering::SeqCst);
                first_error.get_or_insert(e);
            }
            Some(Err(e)) => {
                halt.store(true, Ordering::SeqCst);
                first_error.get_or_insert(StepError::Failed(format!("internal error: {e}")));
            }
        }
    }
    // A window halted by a neighbouring group has no error of its own: that group reports
    // it, and the halt keeps this group's later windows from starting anything.
    if first_error.is_none() && stage.cancelled() && pending.next().is_some() {
        return Err(JobError::Cancelled);
    }
    first_error.map_or(Ok(()), |e| Err(e.into()))
}

/// One group's windows, each finished before the next starts.
async fn update_group(
    ports: &Ports,
    log: &TaskLog,
    deployment: &str,
    group: &GroupPlan,
    order: &GroupOrder,
    options: &UpdateOptions,
    halt: &Halt,
) -> Result<(), JobError> {
    let stage = log.stage(
        "Updating instance",
        vec![group.name.clone()],
        order.size() as u32,
    );
    for window in &order.windows {
        let instances = window
            .instances
            .iter()
            .filter_map(|index| group.instances.iter().find(|i| i.index == *index))
            .cloned()
            .collect();
        run_window(ports, &stage, deployment, instances, window, options, halt).await?;
    }
    Ok(())
}

/// Runs `order` over `groups`: wave after wave, the groups of a wave side by side.
pub async fn update_groups(
    ports: &Ports,
    log: &TaskLog,
    deployment: &str,
    groups: &[GroupPlan],
    order: &UpdateOrder,
    options: &UpdateOptions,
) -> Result<(), JobError> {
    let halt: Halt = Arc::default();
    for wave in &order.waves {
        let mut set = JoinSet::new();
        for group_order in &wave.groups {
            let (ports, log, deployment, group, group_order, options, halt) = (
                ports.clone(),
                log.clone(),
                deployment.to_string(),
                groups[group_order.group].clone(),
                group_order.clone(),
                options.clone(),
                Arc::clone(&halt),
            );
            set.spawn(crate::trace::within(async move {
                update_group(
                    &ports,
                    &log,
                    &deployment,
                    &group,
                    &group_order,
                    &options,
                    &halt,
                )
                .await
            }));
        }
        // Only a group that failed returns an error; those it halted end quietly.
        let mut first_error = None;
        while let Some(joined) = set.join_next().await {
            if let Err(e) = joined.unwrap_or_else(|e| Err(JobError::from(StepError::from(e)))) {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
    }
    Ok(())
}
