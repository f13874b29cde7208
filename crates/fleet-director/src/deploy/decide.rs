//! What a deploy will do, decided whole before it does anything: which instances it
//! creates, changes, leaves alone and deletes, their ids, addresses and disks, what the
//! store's addresses become, the packages compiled, and the order instances are updated in
//! with their canaries. Pure: the snapshot, what binding observed and the store's
//! addresses in, the plan out; a dry run shows this plan and a deploy applies it
//! ([`super::apply`]).

use std::collections::{BTreeSet, HashMap};

use super::options::DeployOptions;
use crate::addresses::{self, AddressChanges, AddressView, Networking};
use crate::compilation::{self, CompilationPlan, Uncompiled};
use crate::error::StepError;
use crate::links::{self, Foreign, Links};
use crate::model::{DiskRecord, InstanceRecord};
use crate::network::Held;
use crate::plan::{DeploymentPlan, PlanOptions, plan};
use crate::snapshot::Snapshot;
use crate::update_order::{UpdateOrder, update_order};

/// What a deploy learned before deciding: the deployment's instances and what their
/// agents said.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub existing: Vec<InstanceRecord>,
    /// Instances whose agents did not answer.
    pub unresponsive: BTreeSet<String>,
    /// The addresses each answering agent reported, by instance id.
    pub reported: HashMap<String, Vec<(String, u32)>>,
    /// The deployment's persistent disks, orphaned ones included.
    pub disks: Vec<DiskRecord>,
    /// The packages it needs that are not compiled yet.
    pub uncompiled: Uncompiled,
    /// The providers of the other deployments its consumers name.
    pub foreign: Foreign,
}

/// An instance the manifest no longer wants.
#[derive(Debug, Clone, PartialEq)]
pub struct Deletion {
    pub record: InstanceRecord,
    /// Its agent answered: its jobs are drained and stopped before its VM goes.
    pub responsive: bool,
    /// What it holds in the store, released once its VM is gone.
    pub addresses: Vec<Held>,
}

#[derive(Debug, Clone)]
pub struct DeployPlan {
    /// The wanted instances, group by group, each with its id, addresses and changes.
    pub instances: DeploymentPlan,
    /// Claimed and released in the store before any VM changes.
    pub addresses: AddressChanges,
    pub deletions: Vec<Deletion>,
    /// Compiled before any VM of an instance changes.
    pub compilation: CompilationPlan,
    pub order: UpdateOrder,
    /// Its links: the providers and consumers kept with the deployment.
    pub links: Links,
}

/// Decides the deploy of `snapshot` on the networks it takes its addresses from
/// (`snapshot.networking()`); `ids` names new instances.
///
/// # Errors
/// A manifest that would delete an ignored instance; a network that cannot give an
/// instance what it asks for.
pub fn decide(
    snapshot: &Snapshot,
    networking: &Networking,
    observed: &Observed,
    options: &DeployOptions,
    view: &AddressView,
    ids: &mut dyn FnMut() -> String,
) -> Result<DeployPlan, StepError> {
    let manifest = &snapshot.manifest;
    let mut instances = plan(
        manifest,
        observed.existing.clone(),
        &snapshot.cloud_properties(),
        &PlanOptions {
            recreate: options.recreate,
            unresponsive: observed.unresponsive.clone(),
            start: options.start,
            restart: options.restart,
            target: options.target.clone(),
        },
    );
    let ignored: Vec<String> = instances
        .obsolete
        .iter()
        .filter(|i| i.ignore)
        .map(InstanceRecord::name)
        .collect();
    if !ignored.is_empty() {
        return Err(StepError::Failed(format!(
            "the manifest deletes {}, which the operator set aside with `bosh ignore`; unignore \
             them first, or keep them in the manifest",
            ignored.join(", ")
        )));
    }
    for group in &mut instances.groups {
        for instance in &mut group.instances {
            if instance.id.is_empty() {
                instance.id = ids();
            }
        }
    }
    let addresses = addresses::decide(
        networking,
        manifest,
        &mut instances,
        &observed.reported,
        view,
    )?;
    let links = links::attach(
        &manifest.name,
        manifest,
        &snapshot.releases,
        &mut instances,
        &observed.foreign,
        &snapshot.az_ids(),
    )
    .map_err(StepError::Failed)?;
    // Errand groups' instances are recorded with their addresses and no VM, as BOSH binds
    // them; their VMs come when the errand runs. A deploy changes nothing else of them.
    for group in instances.groups.iter_mut().filter(|g| g.errand) {
        for instance in &mut group.instances {
            instance.changes.clear();
        }
    }
    instances.decide_disks(&observed.disks);
    let deletions = std::mem::take(&mut instances.obsolete)
        .into_iter()
        .map(|record| Deletion {
            responsive: !observed.unresponsive.contains(&record.id),
            addresses: view.held_by(&record.id),
            record,
        })
        .collect();
    let order = update_order(&instances.groups, options.canaries, options.max_in_flight);
    Ok(DeployPlan {
        instances,
        addresses,
        deletions,
        compilation: compilation::decide(snapshot, &observed.uncompiled)?,
        order,
        links,
    })
}
