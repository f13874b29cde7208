//! Desired against actual: which instances a deploy creates, changes, leaves alone or
//! deletes, and why. Pure: manifest and records in, a plan out.

use std::collections::{BTreeMap, BTreeSet};

use super::cloud_properties::CloudProperties;
use super::disk_plan::{DiskChange, disk_change};
use super::manifest::{InstanceGroup, Manifest, UpdatePolicy};
use super::model::{DesiredState, DiskRecord, InstanceRecord, InstanceSpec};
use super::target::Target;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// The instance does not exist yet.
    New,
    /// It exists but its last update did not finish.
    Unapplied,
    /// It has no VM (a deploy stopped between deleting the old VM and creating the new).
    MissingVm,
    Stemcell,
    Releases,
    Jobs,
    Properties,
    VmType,
    /// What the VM was made with from its AZ, VM type or extensions changed.
    CloudProperties,
    PersistentDisk,
    Networks,
    /// What its jobs consume through links changed: a provider's instances, addresses or
    /// properties.
    Links,
    /// Recreation was asked for (`recreate`).
    Recreate,
    /// Its agent did not answer and `fix` was given: the VM is replaced.
    Unresponsive,
    /// It is stopped or detached and `start` asks for it to run.
    Start,
    /// `restart` asks for its jobs to be stopped and started again, in place.
    Restart,
}

impl Change {
    pub fn describe(self) -> &'static str {
        match self {
            Change::New => "new",
            Change::Unapplied => "unfinished update",
            Change::MissingVm => "missing VM",
            Change::Stemcell => "stemcell",
            Change::Releases => "releases",
            Change::Jobs => "jobs",
            Change::Properties => "properties",
            Change::VmType => "vm_type",
            Change::CloudProperties => "cloud_properties",
            Change::PersistentDisk => "persistent disk",
            Change::Networks => "networks",
            Change::Links => "links",
            Change::Recreate => "recreate requested",
            Change::Unresponsive => "unresponsive agent",
            Change::Start => "start requested",
            Change::Restart => "restart requested",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct InstancePlan {
    /// The existing instance's id; for a new instance, empty until the deploy names it.
    pub id: String,
    pub group: String,
    pub index: u32,
    pub az: Option<String>,
    pub existing: Option<InstanceRecord>,
    pub desired: InstanceSpec,
    pub changes: BTreeSet<Change>,
    /// Address per network, in the group's order; `None` where the IaaS assigns.
    pub addresses: Vec<(String, Option<u32>)>,
    /// Addresses the instance holds but will not keep: released once its new VM runs.
    pub obsolete_addresses: Vec<super::network::Held>,
    /// Its networks as `create_vm` takes them (with their subnets' settings), once its
    /// addresses are reserved.
    pub network_settings: serde_json::Value,
    /// What happens to its persistent disk, once decided ([`DeploymentPlan::decide_disks`],
    /// which needs the disks' records); a step that gives it a disk records it here.
    pub disk: DiskChange,
    /// The links its jobs consume, job by job, once resolved: what their templates see.
    pub links: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
}

impl InstancePlan {
    /// The instance got its VM (and its disk, as planned) ahead of its update: the update
    /// finds them in place.
    pub fn created(&mut self, record: InstanceRecord) {
        self.disk = DiskChange::held(record.disk_cid.as_deref());
        self.existing = Some(record);
    }

    pub fn changed(&self) -> bool {
        !self.changes.is_empty()
    }

    /// A new VM is needed: the old one cannot be reconfigured in place.
    pub fn needs_new_vm(&self) -> bool {
        self.changes.iter().any(|c| {
            matches!(
                c,
                Change::Stemcell
                    | Change::MissingVm
                    | Change::VmType
                    | Change::CloudProperties
                    | Change::Networks
                    | Change::Recreate
                    | Change::Unresponsive
            )
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GroupPlan {
    pub name: String,
    /// A `lifecycle: errand` group: deploys record its instances, with no VMs.
    pub errand: bool,
    pub update: UpdatePolicy,
    pub instances: Vec<InstancePlan>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentPlan {
    pub groups: Vec<GroupPlan>,
    /// Instances whose group is gone or that are beyond the group's new size.
    pub obsolete: Vec<InstanceRecord>,
}

impl DeploymentPlan {
    /// Every wanted instance, group by group.
    pub fn instances(&self) -> impl Iterator<Item = &InstancePlan> {
        self.groups.iter().flat_map(|g| &g.instances)
    }

    pub fn changed_instances(&self) -> usize {
        self.instances().filter(|i| i.changed()).count()
    }

    pub fn is_noop(&self) -> bool {
        self.obsolete.is_empty() && self.changed_instances() == 0
    }

    /// Fills in every instance's disk change from the deployment's disk records. An
    /// instance the deploy leaves alone keeps what it has, whatever its plan would want.
    pub fn decide_disks(&mut self, disks: &[DiskRecord]) {
        for instance in self.groups.iter_mut().flat_map(|g| &mut g.instances) {
            let current = instance
                .existing
                .as_ref()
                .and_then(|r| r.disk_cid.as_deref())
                .and_then(|cid| disks.iter().find(|d| d.cid == cid));
            instance.disk = if instance.changed() {
                disk_change(
                    &instance.id,
                    current,
                    disks,
                    instance.desired.persistent_disk,
                    &instance.desired.disk_cloud_properties,
                    instance.changes.contains(&Change::Unapplied),
                )
            } else {
                DiskChange::held(current.map(|d| d.cid.as_str()))
            };
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Recreate every instance's VM.
    pub recreate: bool,
    /// Instance ids whose agents did not answer (only with `fix`).
    pub unresponsive: BTreeSet<String>,
    /// Start stopped and detached instances (`start`); otherwise they are left as they are.
    pub start: bool,
    /// Restart the running instances in place, and start the stopped ones (`restart`).
    pub restart: bool,
    /// The instances `recreate` and `start` apply to; other instances still converge.
    pub target: Target,
}

/// What an instance of `group` should run under `manifest`.
pub fn desired_spec(manifest: &Manifest, group: &InstanceGroup) -> InstanceSpec {
    let stemcell = manifest
        .stemcell(&group.stemcell)
        .map(|s| format!("{}/{}", s.os, s.version))
        .unwrap_or_default();
    let mut releases = BTreeMap::new();
    let mut properties = serde_json::Map::new();
    for job in &group.jobs {
        if let Some(r) = manifest.release(&job.release) {
            releases.insert(r.name.clone(), r.version.clone());
        }
        properties.insert(job.name.clone(), job.properties.clone());
    }
    InstanceSpec {
        stemcell,
        releases,
        jobs: group.jobs.iter().map(|j| j.name.clone()).collect(),
        vm_type: group.vm_type.clone(),
        cloud_properties: serde_json::Map::new(),
        persistent_disk: group.persistent_disk,
        disk_cloud_properties: serde_json::Map::new(),
        networks: group.networks.iter().map(|n| n.name.clone()).collect(),
        properties: serde_json::Value::Object(properties),
        rendered: None,
        links: None,
    }
}

/// Networks without their addresses (`default/10.0.0.5` is on `default`): which
/// addresses an instance gets is decided when they are reserved, after planning.
fn network_names(networks: &[String]) -> Vec<&str> {
    networks
        .iter()
        .map(|n| n.split_once('/').map_or(n.as_str(), |(name, _)| name))
        .collect()
}

fn differences(applied: &InstanceSpec, desired: &InstanceSpec) -> BTreeSet<Change> {
    let mut changes = BTreeSet::new();
    let pairs = [
        (applied.stemcell != desired.stemcell, Change::Stemcell),
        (applied.releases != desired.releases, Change::Releases),
        (applied.jobs != desired.jobs, Change::Jobs),
        (applied.properties != desired.properties, Change::Properties),
        (applied.vm_type != desired.vm_type, Change::VmType),
        (
            applied.cloud_properties != desired.cloud_properties,
            Change::CloudProperties,
        ),
        (
            applied.persistent_disk != desired.persistent_disk
                || applied.disk_cloud_properties != desired.disk_cloud_properties,
            Change::PersistentDisk,
        ),
        (
            network_names(&applied.networks) != network_names(&desired.networks),
            Change::Networks,
        ),
    ];
    for (differs, change) in pairs {
        if differs {
            changes.insert(change);
        }
    }
    changes
}

/// `cloud`: the cloud config's cloud properties, which each instance's VM and disk are
/// made with (empty without a cloud config).
pub fn plan(
    manifest: &Manifest,
    existing: Vec<InstanceRecord>,
    cloud: &CloudProperties,
    options: &PlanOptions,
) -> DeploymentPlan {
    let mut by_group: BTreeMap<String, BTreeMap<u32, InstanceRecord>> = BTreeMap::new();
    for instance in existing {
        by_group
            .entry(instance.group.clone())
            .or_default()
            .insert(instance.index, instance);
    }
    let mut groups = Vec::new();
    for group in &manifest.instance_groups {
        let mut desired = desired_spec(manifest, group);
        desired.disk_cloud_properties = cloud.for_disk(group.persistent_disk_type.as_deref());
        let mut current = by_group.remove(&group.name).unwrap_or_default();
        let instances = (0..group.instances)
            .map(|index| {
                let existing = current.remove(&index);
                // An instance keeps its AZ; a new one takes the next in turn.
                let az = existing.as_ref().and_then(|e| e.az.clone()).or_else(|| {
                    (!group.azs.is_empty())
                        .then(|| group.azs[index as usize % group.azs.len()].clone())
                });
                let mut desired = desired.clone();
                desired.cloud_properties = cloud.for_vm(
                    az.as_deref(),
                    group.vm_type.as_deref(),
                    &group.vm_extensions,
                );
                let mut changes = match existing.as_ref().and_then(|e| e.applied.as_ref()) {
                    None if existing.is_none() => BTreeSet::from([Change::New]),
                    None => BTreeSet::from([Change::Unapplied]),
                    Some(applied) => differences(applied, &desired),
                };
                if let Some(e) = &existing {
                    let targeted = options.target.matches(&group.name, index, &e.id);
                    if e.vm_cid.is_none() {
                        changes.insert(Change::MissingVm);
                    } else if e
                        .vm_stemcell
                        .as_deref()
                        .is_some_and(|s| s != desired.stemcell)
                    {
                        changes.insert(Change::Stemcell);
                    } else if e.applied.is_none() && e.vm_type != desired.vm_type {
                        changes.insert(Change::VmType);
                    }
                    if options.recreate && targeted {
                        changes.insert(Change::Recreate);
                    }
                    if options.unresponsive.contains(&e.id) {
                        changes.insert(Change::Unresponsive);
                    }
                    if options.restart && targeted && e.state == DesiredState::Started {
                        changes.insert(Change::Restart);
                    }
                    // An errand group's instances get VMs when their errand runs, which
                    // names the group: starting the whole deployment leaves them be.
                    let startable = !group.is_errand()
                        || options.target.group.as_deref() == Some(group.name.as_str());
                    match (
                        e.state,
                        (options.start || options.restart) && targeted && startable,
                    ) {
                        (DesiredState::Started, _) => {}
                        (_, true) => {
                            changes.insert(Change::Start);
                        }
                        // A stopped or detached instance stays so until it is started.
                        (_, false) => changes.clear(),
                    }
                    if e.ignore {
                        changes.clear();
                    }
                }
                InstancePlan {
                    id: existing.as_ref().map(|e| e.id.clone()).unwrap_or_default(),
                    group: group.name.clone(),
                    index,
                    az,
                    existing,
                    desired,
                    changes,
                    addresses: Vec::new(),
                    obsolete_addresses: Vec::new(),
                    network_settings: serde_json::Value::Null,
                    disk: DiskChange::None,
                    links: BTreeMap::new(),
                }
            })
            .collect();
        // Indexes beyond the new size are scaled down.
        by_group.insert(group.name.clone(), current);
        groups.push(GroupPlan {
            name: group.name.clone(),
            errand: group.is_errand(),
            update: group.update,
            instances,
        });
    }
    let obsolete = by_group
        .into_values()
        .flat_map(BTreeMap::into_values)
        .collect();
    DeploymentPlan { groups, obsolete }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse;

    fn manifest(instances: u32, stemcell: &str) -> Manifest {
        parse(&format!(
            "name: d
releases: [{{name: r, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '{stemcell}'}}]
update: {{canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}}
instance_groups:
- name: web
  instances: {instances}
  jobs: [{{name: nginx, release: r}}]
  stemcell: default
  networks: [{{name: default}}]
"
        ))
        .unwrap()
    }

    fn none() -> CloudProperties {
        CloudProperties::default()
    }

    fn record(m: &Manifest, index: u32) -> InstanceRecord {
        InstanceRecord {
            id: format!("id-{index}"),
            deployment: "d".into(),
            group: "web".into(),
            index,
            az: None,
            vm_cid: Some(format!("vm-{index}")),
            agent_id: Some(format!("agent-{index}")),
            vm_stemcell: Some("jammy/1.0".into()),
            vm_type: None,
            vm_networks: Vec::new(),
            disk_cid: None,
            applied: Some(desired_spec(m, &m.instance_groups[0])),
            state: DesiredState::Started,
            ignore: false,
        }
    }

    #[test]
    fn an_ignored_instance_is_left_as_it_is_whatever_changed() {
        let old = manifest(2, "1.0");
        let mut ignored = record(&old, 0);
        ignored.ignore = true;
        let options = PlanOptions {
            recreate: true,
            ..PlanOptions::default()
        };
        let p = plan(
            &manifest(2, "2.0"),
            vec![ignored, record(&old, 1)],
            &none(),
            &options,
        );
        let changed: Vec<bool> = p.instances().map(InstancePlan::changed).collect();
        assert_eq!(changed, [false, true]);
    }

    #[test]
    fn an_unchanged_deployment_plans_nothing() {
        let m = manifest(2, "1.0");
        let plan = plan(
            &m,
            vec![record(&m, 0), record(&m, 1)],
            &none(),
            &PlanOptions::default(),
        );
        assert!(plan.is_noop());
    }

    #[test]
    fn a_new_stemcell_changes_every_instance_and_needs_new_vms() {
        let old = manifest(2, "1.0");
        let new = manifest(2, "2.0");
        let plan = plan(
            &new,
            vec![record(&old, 0), record(&old, 1)],
            &none(),
            &PlanOptions::default(),
        );
        assert_eq!(plan.changed_instances(), 2);
        assert!(plan.groups[0].instances.iter().all(|i| i.needs_new_vm()));
        assert!(
            plan.groups[0].instances[0]
                .changes
                .contains(&Change::Stemcell)
        );
    }

    #[test]
    fn scaling_creates_and_deletes_by_index() {
        let m = manifest(3, "1.0");
        let grown = plan(&m, vec![record(&m, 0)], &none(), &PlanOptions::default());
        let news: Vec<u32> = grown.groups[0]
            .instances
            .iter()
            .filter(|i| i.changes.contains(&Change::New))
            .map(|i| i.index)
            .collect();
        assert_eq!(news, [1, 2]);
        let small = manifest(1, "1.0");
        let shrunk = plan(
            &small,
            vec![record(&m, 0), record(&m, 1), record(&m, 2)],
            &none(),
            &PlanOptions::default(),
        );
        let gone: Vec<u32> = shrunk.obsolete.iter().map(|i| i.index).collect();
        assert_eq!(gone, [1, 2]);
    }

    #[test]
    fn an_unfinished_update_is_redone_and_a_lost_or_outdated_vm_replaced() {
        let old = manifest(2, "1.0");
        let new = manifest(2, "2.0");
        let mut unfinished = record(&old, 0);
        unfinished.applied = None;
        let mut vmless = record(&new, 1);
        vmless.vm_cid = None;
        let plan = plan(
            &new,
            vec![unfinished, vmless],
            &none(),
            &PlanOptions::default(),
        );
        let first = &plan.groups[0].instances[0].changes;
        assert!(first.contains(&Change::Unapplied) && first.contains(&Change::Stemcell));
        assert!(
            plan.groups[0].instances[1]
                .changes
                .contains(&Change::MissingVm)
        );
        assert!(
            plan.groups[0]
                .instances
                .iter()
                .all(InstancePlan::needs_new_vm)
        );
    }

    #[test]
    fn an_unfinished_update_still_replaces_a_vm_of_the_old_vm_type() {
        let m = manifest(2, "1.0");
        let mut stale = record(&m, 0);
        stale.applied = None;
        stale.vm_type = Some("large".into());
        let mut current = record(&m, 1);
        current.applied = None;
        let plan = plan(&m, vec![stale, current], &none(), &PlanOptions::default());
        let [stale, current] = &plan.groups[0].instances[..] else {
            panic!("two instances planned")
        };
        assert!(stale.changes.contains(&Change::VmType) && stale.needs_new_vm());
        assert!(!current.changes.contains(&Change::VmType) && !current.needs_new_vm());
    }

    #[test]
    fn recreate_and_unresponsive_agents_need_new_vms() {
        let m = manifest(2, "1.0");
        let options = PlanOptions {
            unresponsive: BTreeSet::from(["id-1".to_string()]),
            ..PlanOptions::default()
        };
        let plan = plan(&m, vec![record(&m, 0), record(&m, 1)], &none(), &options);
        assert!(!plan.groups[0].instances[0].changed());
        assert!(plan.groups[0].instances[1].needs_new_vm());
    }

    #[test]
    fn changed_cloud_properties_need_a_new_vm_and_a_changed_disk_type_a_new_disk() {
        let m = manifest(2, "1.0");
        let mut zonal = record(&m, 0);
        zonal.az = Some("z1".into());
        let mut cloud = none();
        cloud.azs.insert(
            "z1".into(),
            serde_json::json!({"zone": "a"})
                .as_object()
                .unwrap()
                .clone(),
        );
        let zoned = plan(
            &m,
            vec![zonal, record(&m, 1)],
            &cloud,
            &PlanOptions::default(),
        );
        let [zonal, other] = &zoned.groups[0].instances[..] else {
            panic!("two instances planned")
        };
        assert_eq!(zonal.changes, BTreeSet::from([Change::CloudProperties]));
        assert!(zonal.needs_new_vm());
        assert_eq!(zonal.desired.cloud_properties["zone"], "a");
        assert!(!other.changed(), "{:?}", other.changes);

        let mut typed = m.clone();
        typed.instance_groups[0].persistent_disk_type = Some("fast".into());
        cloud.disk_types.insert(
            "fast".into(),
            serde_json::json!({"type": "gp3"})
                .as_object()
                .unwrap()
                .clone(),
        );
        let untyped = plan(
            &typed,
            vec![record(&m, 1)],
            &none(),
            &PlanOptions::default(),
        );
        assert!(
            !untyped.groups[0].instances[1].changed(),
            "a type without properties: {:?}",
            untyped.groups[0].instances[1].changes
        );
        let retyped = plan(&typed, vec![record(&m, 1)], &cloud, &PlanOptions::default());
        let changes = &retyped.groups[0].instances[1].changes;
        assert!(changes.contains(&Change::PersistentDisk), "{changes:?}");
    }
}
