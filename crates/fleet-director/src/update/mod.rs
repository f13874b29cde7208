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
    core: &Core,
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
        jobs::stop_jobs(core, &agent, &record.name(), skip_drain, drain).await?;
    }
    if hard {
        vm::delete_vm(core, record, responsive).await?;
        record.state = DesiredState::Detached;
    } else {
        record.state = DesiredState::Stopped;
    }
    records::persist(core, record).await
}

use super::Core;
use super::error::StepError;
use super::manifest::WatchTime;
use super::plan::{GroupPlan, InstancePlan};
use super::task::{JobError, Stage, TaskLog};

/// How one batch of a group runs: canaries, or the rest.
#[derive(Debug, Clone, Copy)]
struct Batch {
    /// Instances in flight at once.
    limit: usize,
    watch_time: WatchTime,
    canary: bool,
}

/// Raised by the first failure anywhere in a deploy, so groups updating side by side
/// (`serial: false`) stop starting instances too, not only the group that failed.
pub type Halt = Arc<AtomicBool>;

/// Runs `instances` at most `batch.limit` at a time; after the first error (here or in a
/// group running alongside) nothing new starts.
async fn run_window(
    core: &Arc<Core>,
    stage: &Stage,
    deployment: &str,
    instances: Vec<InstancePlan>,
    batch: Batch,
    options: &UpdateOptions,
    halt: &Halt,
) -> Result<(), JobError> {
    let mut running = JoinSet::new();
    let mut first_error: Option<StepError> = None;
    let mut pending = instances.into_iter();
    loop {
        while first_error.is_none()
            && !halt.load(Ordering::SeqCst)
            && !stage.cancelled()
            && running.len() < batch.limit.max(1)
        {
            let Some(plan) = pending.next() else { break };
            let core = Arc::clone(core);
            let stage = stage.clone();
            let deployment = deployment.to_string();
            let options = options.clone();
            running.spawn(crate::trace::within(async move {
                update_instance(
                    &core,
                    &stage,
                    &deployment,
                    plan,
                    batch.watch_time,
                    batch.canary,
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
    first_error.map_or(Ok(()), |e| Err(JobError::Failed(e)))
}

/// The changed instances of a group in the director's order, batched by AZ: the
/// bootstrap instance's AZ (the lowest index) first, then instances without an AZ, then the
/// other AZs alphabetically; by index inside an AZ.
pub fn az_batches(instances: &[InstancePlan]) -> Vec<Vec<InstancePlan>> {
    let mut changed: Vec<&InstancePlan> = instances.iter().filter(|i| i.changed()).collect();
    changed.sort_by_key(|i| i.index);
    let Some(bootstrap) = changed.first() else {
        return Vec::new();
    };
    let first_az = bootstrap.az.clone();
    let mut order: Vec<Option<String>> = vec![first_az.clone()];
    if first_az.is_some() {
        order.push(None);
    }
    let mut others: Vec<String> = changed
        .iter()
        .filter_map(|i| i.az.clone())
        .filter(|az| Some(az) != first_az.as_ref())
        .collect();
    others.sort();
    others.dedup();
    order.extend(others.into_iter().map(Some));
    order
        .into_iter()
        .map(|az| {
            changed
                .iter()
                .filter(|i| i.az == az)
                .map(|i| (*i).clone())
                .collect::<Vec<_>>()
        })
        .filter(|batch| !batch.is_empty())
        .collect()
}

/// One group: AZ by AZ, each finished before the next starts. Canaries come only from the
/// first AZ; `canaries` and `max_in_flight` are computed from each AZ's changed instances.
pub async fn update_group(
    core: &Arc<Core>,
    log: &TaskLog,
    deployment: &str,
    group: &GroupPlan,
    options: &UpdateOptions,
    halt: &Halt,
) -> Result<(), JobError> {
    let batches = az_batches(&group.instances);
    let n: usize = batches.iter().map(Vec::len).sum();
    if n == 0 {
        return Ok(());
    }
    let stage = log.stage("Updating instance", vec![group.name.clone()], n as u32);
    for (position, mut batch) in batches.into_iter().enumerate() {
        let size = batch.len();
        let max_in_flight = options
            .max_in_flight
            .unwrap_or(group.update.max_in_flight)
            .of(size)
            .max(1);
        let canaries = if position == 0 {
            options
                .canaries
                .unwrap_or(group.update.canaries)
                .of(size)
                .min(size)
        } else {
            0
        };
        let canary_plans: Vec<InstancePlan> = batch.drain(..canaries).collect();
        let canary_batch = Batch {
            limit: canaries.min(max_in_flight),
            watch_time: group.update.canary_watch_time,
            canary: true,
        };
        run_window(
            core,
            &stage,
            deployment,
            canary_plans,
            canary_batch,
            options,
            halt,
        )
        .await?;
        let rest_batch = Batch {
            limit: max_in_flight,
            watch_time: group.update.update_watch_time,
            canary: false,
        };
        run_window(core, &stage, deployment, batch, rest_batch, options, halt).await?;
    }
    Ok(())
}

/// Groups in order: a `serial` group runs alone after the ones before it; neighbouring
/// groups with `serial: false` run together.
pub async fn update_groups(
    core: &Arc<Core>,
    log: &TaskLog,
    deployment: &str,
    groups: &[GroupPlan],
    options: &UpdateOptions,
) -> Result<(), JobError> {
    let halt: Halt = Arc::default();
    let mut i = 0;
    while i < groups.len() {
        if groups[i].update.serial {
            update_group(core, log, deployment, &groups[i], options, &halt).await?;
            i += 1;
            continue;
        }
        let batch_end = (i..groups.len())
            .find(|&j| groups[j].update.serial)
            .unwrap_or(groups.len());
        let mut set = JoinSet::new();
        for group in &groups[i..batch_end] {
            let (core, log, deployment, group, options, halt) = (
                Arc::clone(core),
                log.clone(),
                deployment.to_string(),
                group.clone(),
                options.clone(),
                Arc::clone(&halt),
            );
            set.spawn(crate::trace::within(async move {
                update_group(&core, &log, &deployment, &group, &options, &halt).await
            }));
        }
        // Only a group that failed returns an error; those it halted end quietly.
        let mut first_error = None;
        while let Some(joined) = set.join_next().await {
            if let Err(e) =
                joined.unwrap_or_else(|e| Err(JobError::from(format!("internal error: {e}"))))
            {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        i = batch_end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::InstanceSpec;
    use crate::plan::Change;

    fn plan(index: u32, az: Option<&str>, changed: bool) -> InstancePlan {
        InstancePlan {
            id: format!("i{index}"),
            group: "g".into(),
            index,
            az: az.map(str::to_string),
            existing: None,
            desired: InstanceSpec::default(),
            changes: if changed {
                [Change::New].into()
            } else {
                Default::default()
            },
            addresses: Vec::new(),
            obsolete_addresses: Vec::new(),
            network_settings: serde_json::Value::Null,
        }
    }

    #[test]
    fn the_bootstrap_az_comes_first_then_no_az_then_the_others_alphabetically() {
        let plans = vec![
            plan(0, Some("z2"), true),
            plan(1, Some("z1"), true),
            plan(2, None, true),
            plan(3, Some("z2"), true),
            plan(4, Some("z3"), false),
            plan(5, Some("z0"), true),
        ];
        let order: Vec<Vec<u32>> = az_batches(&plans)
            .iter()
            .map(|b| b.iter().map(|p| p.index).collect())
            .collect();
        assert_eq!(order, vec![vec![0, 3], vec![2], vec![5], vec![1]]);
    }
}
