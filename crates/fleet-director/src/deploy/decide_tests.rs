//! Deploys decided from a manifest, records and the store's addresses alone: no director,
//! no simulated cloud, no store.

use std::collections::BTreeSet;
use std::sync::Arc;

use fleet_ipset::IpSet;
use fleet_store::{IpHolder, IpRecord};

use super::decide::{DeployPlan, Observed, decide};
use super::options::DeployOptions;
use crate::addresses::AddressView;
use crate::compilation::Uncompiled;
use crate::disk_plan::DiskChange;
use crate::dry_run;
use crate::error::StepError;
use crate::manifest::Count;
use crate::model::{
    CloudConfig, DesiredState, DiskRecord, InstanceRecord, Package, Release, ReleaseJob, Stemcell,
};
use crate::network::{to_ip, to_u32};
use crate::plan::Change;
use crate::records::Uploads;
use crate::snapshot::Snapshot;
use crate::target::Target;
use crate::tests::addresses::{CLOUD, on};

/// The test manifest of deployment `web`: `instances` instances on `default`.
fn manifest(instances: u32, statics: &[&str]) -> String {
    on("web", instances, "default", statics)
}

fn snapshot(text: &str) -> Snapshot {
    Snapshot::of(
        text.to_string(),
        Uploads {
            cloud_config: Some(CloudConfig {
                version: 1,
                text: CLOUD.to_string(),
                created_at: None,
            }),
            releases: vec![Release {
                name: "nginx".into(),
                version: "1".into(),
                jobs: vec![ReleaseJob {
                    name: "nginx".into(),
                    packages: vec!["nginx".into()],
                    ..Default::default()
                }],
                packages: vec![
                    Package {
                        name: "nginx".into(),
                        dependencies: vec!["pcre".into()],
                        archive: None,
                        compiled_for: Vec::new(),
                    },
                    Package {
                        name: "pcre".into(),
                        dependencies: Vec::new(),
                        archive: None,
                        compiled_for: Vec::new(),
                    },
                ],
                ..Default::default()
            }],
            stemcells: ["1.0", "1.1"]
                .map(|version| Stemcell {
                    name: "ubuntu-jammy".into(),
                    os: "jammy".into(),
                    version: version.into(),
                    cid: None,
                })
                .into(),
            runtime_configs: Vec::new(),
        },
    )
    .expect("a valid snapshot")
}

/// Names new instances `i1`, `i2`, ... in the order the plan asks.
fn counter() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("i{n}")
    }
}

fn ip(text: &str) -> u32 {
    to_u32(text.parse().unwrap())
}

fn holder(instance: &str) -> IpHolder {
    IpHolder {
        deployment: "web".into(),
        instance: instance.into(),
    }
}

/// The store's addresses with `held` claimed by this deployment's instances and
/// `elsewhere` by other deployments.
fn view(held: &[(&str, &str)], elsewhere: &[&str]) -> AddressView {
    let mut claimed = IpSet::new();
    let deployment: Vec<IpRecord> = held
        .iter()
        .map(|(instance, address)| IpRecord {
            address: ip(address),
            network: "default".into(),
            owner: holder(instance),
            is_static: false,
        })
        .collect();
    for record in &deployment {
        claimed.insert(record.address);
    }
    for address in elsewhere {
        claimed.insert(ip(address));
    }
    AddressView {
        holders: deployment.clone(),
        deployment,
        claimed: Arc::new(claimed),
    }
}

/// The deploy of `text` decided, as a deploy decides it, new instances named `i1`, ...
fn try_decide(
    text: &str,
    observed: &Observed,
    options: &DeployOptions,
    view: &AddressView,
) -> Result<DeployPlan, StepError> {
    let snapshot = snapshot(text);
    let networking = snapshot.networking();
    decide(
        &snapshot,
        &networking,
        observed,
        options,
        view,
        &mut counter(),
    )
}

fn decided(
    text: &str,
    observed: &Observed,
    options: &DeployOptions,
    view: &AddressView,
) -> DeployPlan {
    try_decide(text, observed, options, view).expect("a plan")
}

/// The plan of a first deploy of `instances` instances on an empty network.
fn first_deploy(instances: u32) -> DeployPlan {
    decided(
        &manifest(instances, &[]),
        &Observed::default(),
        &DeployOptions::default(),
        &view(&[], &[]),
    )
}

/// The records a deploy of `plan` leaves: every instance running what it was planned to.
fn deployed(plan: &DeployPlan) -> Vec<InstanceRecord> {
    plan.instances
        .instances()
        .map(|i| InstanceRecord {
            id: i.id.clone(),
            deployment: "web".into(),
            group: i.group.clone(),
            index: i.index,
            az: i.az.clone(),
            vm_cid: Some(format!("vm-{}", i.id)),
            agent_id: Some(format!("agent-{}", i.id)),
            vm_stemcell: Some(i.desired.stemcell.clone()),
            vm_type: i.desired.vm_type.clone(),
            vm_networks: i.desired.networks.clone(),
            disk_cid: None,
            applied: Some(i.desired.clone()),
            state: DesiredState::Started,
            ignore: false,
        })
        .collect()
}

/// Each instance's `id network/address` entries, in plan order.
fn addresses(plan: &DeployPlan) -> Vec<String> {
    plan.instances
        .instances()
        .map(|i| format!("{} {}", i.id, i.desired.networks.join(",")))
        .collect()
}

fn claims(plan: &DeployPlan) -> Vec<(String, String)> {
    plan.addresses
        .claims
        .iter()
        .map(|c| (c.owner.instance.clone(), to_ip(c.address).to_string()))
        .collect()
}

fn releases(plan: &DeployPlan) -> Vec<(String, String)> {
    plan.addresses
        .releases
        .iter()
        .map(|r| (r.owner.instance.clone(), to_ip(r.address).to_string()))
        .collect()
}

#[test]
fn a_first_deploy_names_its_instances_and_claims_free_addresses_around_other_deployments() {
    let plan = decided(
        &manifest(3, &[]),
        &Observed::default(),
        &DeployOptions::default(),
        &view(&[], &["10.10.0.2", "10.10.0.3"]),
    );
    assert_eq!(
        addresses(&plan),
        [
            "i1 default/10.10.0.4",
            "i2 default/10.10.0.5",
            "i3 default/10.10.0.6"
        ]
    );
    assert_eq!(
        claims(&plan),
        [
            ("i1".to_string(), "10.10.0.4".to_string()),
            ("i2".into(), "10.10.0.5".into()),
            ("i3".into(), "10.10.0.6".into()),
        ]
    );
    assert!(plan.addresses.releases.is_empty());
    assert!(
        plan.instances
            .instances()
            .all(|i| i.changes == BTreeSet::from([Change::New]))
    );
    assert!(plan.deletions.is_empty());
}

#[test]
fn a_dry_run_shows_the_planned_addresses_and_counts_them() {
    let plan = decided(
        &manifest(2, &["10.10.0.200", "10.10.0.201"]),
        &Observed::default(),
        &DeployOptions::default(),
        &view(&[], &[]),
    );
    let lines: Vec<String> = plan
        .instances
        .instances()
        .map(dry_run::instance_line)
        .collect();
    assert_eq!(
        lines,
        [
            "web/i1 (0): changes: new; default 10.10.0.200",
            "web/i2 (1): changes: new; default 10.10.0.201"
        ]
    );
    assert!(plan.addresses.claims.iter().all(|c| c.is_static));
    assert_eq!(
        dry_run::summary(&plan),
        "dry run: 2 instances would be updated and 0 deleted, 2 addresses claimed and 0 \
         released, 0 disks created and 0 orphaned, 0 packages compiled; nothing was changed"
    );
}

#[test]
fn a_deployed_instance_keeps_its_address_and_nothing_changes() {
    let first = first_deploy(2);
    let observed = Observed {
        existing: deployed(&first),
        ..Observed::default()
    };
    let held = [("i1", "10.10.0.2"), ("i2", "10.10.0.3")];
    let again = decided(
        &manifest(2, &[]),
        &observed,
        &DeployOptions::default(),
        &view(&held, &[]),
    );
    assert_eq!(addresses(&again), addresses(&first));
    assert_eq!(again.instances.changed_instances(), 0);
    assert!(again.order.waves.is_empty(), "nothing to update");
    assert!(again.addresses.releases.is_empty());
}

#[test]
fn an_address_held_by_no_instance_is_released_and_handed_to_a_new_one() {
    let plan = decided(
        &manifest(1, &[]),
        &Observed::default(),
        &DeployOptions::default(),
        &view(&[("gone", "10.10.0.2")], &[]),
    );
    assert_eq!(addresses(&plan), ["i1 default/10.10.0.2"]);
    assert_eq!(
        releases(&plan),
        [("gone".to_string(), "10.10.0.2".to_string())]
    );
    assert_eq!(claims(&plan), [("i1".to_string(), "10.10.0.2".to_string())]);
}

#[test]
fn a_shrunk_group_deletes_its_highest_instances_with_what_they_hold() {
    let first = first_deploy(3);
    let observed = Observed {
        existing: deployed(&first),
        unresponsive: BTreeSet::from(["i3".to_string()]),
        ..Observed::default()
    };
    let held = [
        ("i1", "10.10.0.2"),
        ("i2", "10.10.0.3"),
        ("i3", "10.10.0.4"),
    ];
    let plan = decided(
        &manifest(2, &[]),
        &observed,
        &DeployOptions::default(),
        &view(&held, &[]),
    );
    let deleted: Vec<(String, bool, Vec<String>)> = plan
        .deletions
        .iter()
        .map(|d| {
            (
                d.record.id.clone(),
                d.responsive,
                d.addresses
                    .iter()
                    .map(|h| to_ip(h.ip).to_string())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        deleted,
        [("i3".to_string(), false, vec!["10.10.0.4".to_string()])]
    );
    assert!(
        plan.addresses.releases.is_empty(),
        "released once its VM is gone, not before"
    );
    assert!(dry_run::summary(&plan).contains("0 instances would be updated and 1 deleted"));
}

#[test]
fn a_new_static_address_moves_the_instance_to_a_new_vm_and_the_old_goes_after_it() {
    let first = first_deploy(1);
    let observed = Observed {
        existing: deployed(&first),
        ..Observed::default()
    };
    let plan = decided(
        &manifest(1, &["10.10.0.205"]),
        &observed,
        &DeployOptions::default(),
        &view(&[("i1", "10.10.0.2")], &[]),
    );
    let instance = plan.instances.instances().next().unwrap();
    assert!(instance.changes.contains(&Change::Networks));
    assert!(instance.needs_new_vm());
    assert_eq!(instance.desired.networks, ["default/10.10.0.205"]);
    assert_eq!(
        instance
            .obsolete_addresses
            .iter()
            .map(|h| to_ip(h.ip).to_string())
            .collect::<Vec<_>>(),
        ["10.10.0.2"]
    );
    assert!(
        claims(&plan).contains(&("i1".to_string(), "10.10.0.205".to_string())),
        "{:?}",
        claims(&plan)
    );
    assert!(
        plan.addresses.releases.is_empty(),
        "the old address stays until the new VM runs"
    );
}

#[test]
fn the_update_order_starts_with_one_canary_in_the_first_az_and_honours_overrides() {
    let plan = decided(
        &manifest(4, &[]),
        &Observed::default(),
        &DeployOptions::default(),
        &view(&[], &[]),
    );
    let windows: Vec<(bool, usize, Vec<u32>)> = plan.order.waves[0].groups[0]
        .windows
        .iter()
        .map(|w| (w.canary, w.limit, w.instances.clone()))
        .collect();
    assert_eq!(
        windows,
        [
            (true, 1, vec![0]),
            (false, 2, vec![2]),
            (false, 2, vec![1, 3])
        ]
    );
    let overridden = decided(
        &manifest(4, &[]),
        &Observed::default(),
        &DeployOptions {
            canaries: Some(Count::Fixed(0)),
            max_in_flight: Some(Count::Percent(100)),
            ..DeployOptions::default()
        },
        &view(&[], &[]),
    );
    let windows: Vec<(bool, Vec<u32>)> = overridden.order.waves[0].groups[0]
        .windows
        .iter()
        .map(|w| (w.canary, w.instances.clone()))
        .collect();
    assert_eq!(windows, [(false, vec![0, 2]), (false, vec![1, 3])]);
}

#[test]
fn an_unresponsive_agent_with_fix_gets_its_instance_a_new_vm() {
    let first = first_deploy(2);
    let observed = Observed {
        existing: deployed(&first),
        unresponsive: BTreeSet::from(["i2".to_string()]),
        ..Observed::default()
    };
    let plan = decided(
        &manifest(2, &[]),
        &observed,
        &DeployOptions {
            fix: true,
            ..DeployOptions::default()
        },
        &view(&[("i1", "10.10.0.2"), ("i2", "10.10.0.3")], &[]),
    );
    let changed: Vec<(String, bool)> = plan
        .instances
        .instances()
        .filter(|i| i.changed())
        .map(|i| (i.id.clone(), i.needs_new_vm()))
        .collect();
    assert_eq!(changed, [("i2".to_string(), true)]);
    assert_eq!(
        addresses(&plan)[1],
        "i2 default/10.10.0.3",
        "it keeps its address"
    );
}

#[test]
fn a_manifest_that_deletes_an_ignored_instance_is_refused() {
    let first = first_deploy(2);
    let mut existing = deployed(&first);
    existing[1].ignore = true;
    let observed = Observed {
        existing,
        ..Observed::default()
    };
    let refused = try_decide(
        &manifest(1, &[]),
        &observed,
        &DeployOptions::default(),
        &view(&[("i1", "10.10.0.2"), ("i2", "10.10.0.3")], &[]),
    )
    .unwrap_err();
    assert!(
        refused.to_string().contains("web/i2") && refused.to_string().contains("bosh ignore"),
        "{refused}"
    );
}

/// `manifest(instances)` with a persistent disk of `size` MB on its group.
fn with_disk(instances: u32, size: u64) -> String {
    manifest(instances, &[]).replace(
        "  vm_type: small\n",
        &format!("  vm_type: small\n  persistent_disk: {size}\n"),
    )
}

/// The records and disk records a deploy of `plan` leaves, each instance on its own disk
/// `disk-<id>` of the size it planned.
fn deployed_with_disks(plan: &DeployPlan) -> Observed {
    let mut existing = deployed(plan);
    let mut disks = Vec::new();
    for (record, instance) in existing.iter_mut().zip(plan.instances.instances()) {
        let cid = format!("disk-{}", record.id);
        record.disk_cid = Some(cid.clone());
        disks.push(DiskRecord {
            cid,
            deployment: "web".into(),
            instance_id: Some(record.id.clone()),
            size: instance.desired.persistent_disk,
            cloud_properties: instance.desired.disk_cloud_properties.clone(),
            orphaned: false,
            orphaned_at: None,
            instance_name: None,
            az: record.az.clone(),
        });
    }
    Observed {
        existing,
        disks,
        ..Observed::default()
    }
}

fn disks(plan: &DeployPlan) -> Vec<DiskChange> {
    plan.instances.instances().map(|i| i.disk.clone()).collect()
}

#[test]
fn a_first_deploy_creates_each_instances_disk_and_a_dry_run_says_so() {
    let plan = decided(
        &with_disk(2, 1024),
        &Observed::default(),
        &DeployOptions::default(),
        &view(&[], &[]),
    );
    let created = DiskChange::Replace {
        old: None,
        size: 1024,
        reuse: None,
    };
    assert_eq!(disks(&plan), [created.clone(), created]);
    let lines: Vec<String> = plan
        .instances
        .instances()
        .map(dry_run::instance_line)
        .collect();
    assert!(
        lines.iter().all(|l| l.contains("; creates a 1024 MB disk")),
        "{lines:?}"
    );
    assert_summary_says(&plan, "2 disks created and 0 orphaned");
}

#[test]
fn a_new_disk_size_moves_the_data_and_an_unchanged_deploy_keeps_every_disk() {
    let (observed, held) = two_with_disks();
    let again = decided(
        &with_disk(2, 1024),
        &observed,
        &DeployOptions::default(),
        &held,
    );
    assert_eq!(
        disks(&again),
        [
            DiskChange::Keep {
                cid: "disk-i1".into()
            },
            DiskChange::Keep {
                cid: "disk-i2".into()
            }
        ]
    );

    let bigger = decided(
        &with_disk(2, 2048),
        &observed,
        &DeployOptions::default(),
        &held,
    );
    assert!(
        bigger
            .instances
            .instances()
            .all(|i| i.changes.contains(&Change::PersistentDisk)),
        "{:?}",
        bigger.instances
    );
    assert_eq!(
        disks(&bigger)[0],
        DiskChange::Replace {
            old: Some("disk-i1".into()),
            size: 2048,
            reuse: None
        }
    );
    let line = dry_run::instance_line(bigger.instances.instances().next().unwrap());
    assert!(
        line.contains("moves disk disk-i1 to a new 2048 MB disk"),
        "{line}"
    );
    assert_summary_says(&bigger, "2 disks created and 2 orphaned");
}

#[test]
fn a_disk_no_longer_wanted_or_whose_instance_goes_is_orphaned() {
    let (observed, held) = two_with_disks();
    let without = decided(
        &manifest(2, &[]),
        &observed,
        &DeployOptions::default(),
        &held,
    );
    assert_eq!(
        disks(&without)[1],
        DiskChange::Replace {
            old: Some("disk-i2".into()),
            size: 0,
            reuse: None
        }
    );
    assert_summary_says(&without, "0 disks created and 2 orphaned");

    let shrunk = decided(
        &with_disk(1, 1024),
        &observed,
        &DeployOptions::default(),
        &held,
    );
    assert_eq!(shrunk.deletions.len(), 1);
    assert_summary_says(&shrunk, "0 disks created and 1 orphaned");
}

#[test]
fn packages_are_compiled_only_where_the_cache_lacks_them_and_a_dry_run_counts_them() {
    let everything = Observed {
        uncompiled: Uncompiled(
            ["nginx/1/nginx@jammy/1.0", "nginx/1/pcre@jammy/1.0"]
                .map(String::from)
                .into(),
        ),
        ..Observed::default()
    };
    let first = decided(
        &manifest(1, &[]),
        &everything,
        &DeployOptions::default(),
        &view(&[], &[]),
    );
    assert_eq!(
        first.compilation.describe(),
        ["nginx/1/nginx on jammy/1.0", "nginx/1/pcre on jammy/1.0"]
    );
    assert_summary_says(&first, ", 2 packages compiled;");

    let one = Observed {
        uncompiled: Uncompiled(["nginx/1/nginx@jammy/1.0".to_string()].into()),
        ..Observed::default()
    };
    let plan = decided(
        &manifest(1, &[]),
        &one,
        &DeployOptions::default(),
        &view(&[], &[]),
    );
    assert_eq!(plan.compilation.describe(), ["nginx/1/nginx on jammy/1.0"]);

    let none = decided(
        &manifest(1, &[]),
        &Observed::default(),
        &DeployOptions::default(),
        &view(&[], &[]),
    );
    assert_eq!(none.compilation.packages(), 0);
}

fn assert_summary_says(plan: &DeployPlan, words: &str) {
    let summary = dry_run::summary(plan);
    assert!(summary.contains(words), "{summary}");
}

/// Two instances deployed with 1024 MB disks, as the store and the agents then report them.
fn two_with_disks() -> (Observed, AddressView) {
    let first = decided(
        &with_disk(2, 1024),
        &Observed::default(),
        &DeployOptions::default(),
        &view(&[], &[]),
    );
    (
        deployed_with_disks(&first),
        view(&[("i1", "10.10.0.2"), ("i2", "10.10.0.3")], &[]),
    )
}

/// Each changed instance's id with its changes' names.
fn changed(plan: &DeployPlan) -> Vec<(String, Vec<&'static str>)> {
    plan.instances
        .instances()
        .filter(|i| i.changed())
        .map(|i| {
            (
                i.id.clone(),
                i.changes.iter().map(|c| c.describe()).collect(),
            )
        })
        .collect()
}

#[test]
fn a_new_stemcell_gives_every_instance_a_new_vm_on_its_address_and_keeps_its_disk() {
    let (observed, held) = two_with_disks();
    let plan = decided(
        &with_disk(2, 1024).replace("version: '1.0'", "version: '1.1'"),
        &observed,
        &DeployOptions::default(),
        &held,
    );
    assert_eq!(
        changed(&plan),
        [
            ("i1".to_string(), vec!["stemcell"]),
            ("i2".to_string(), vec!["stemcell"])
        ]
    );
    assert!(plan.instances.instances().all(|i| i.needs_new_vm()));
    assert_eq!(
        disks(&plan),
        [
            DiskChange::Keep {
                cid: "disk-i1".into()
            },
            DiskChange::Keep {
                cid: "disk-i2".into()
            }
        ]
    );
    assert_eq!(
        addresses(&plan),
        ["i1 default/10.10.0.2", "i2 default/10.10.0.3"]
    );
    // Claimed again by the instances that hold them, none released.
    assert_eq!(
        claims(&plan),
        [
            ("i1".to_string(), "10.10.0.2".to_string()),
            ("i2".to_string(), "10.10.0.3".to_string())
        ]
    );
    assert!(plan.addresses.releases.is_empty());
    let line = dry_run::instance_line(plan.instances.instances().next().unwrap());
    assert_eq!(line, "web/i1 (0): changes: stemcell; default 10.10.0.2");
}

#[test]
fn recreate_replaces_the_targeted_vms_only() {
    let (observed, held) = two_with_disks();
    let all = decided(
        &with_disk(2, 1024),
        &observed,
        &DeployOptions {
            recreate: true,
            ..DeployOptions::default()
        },
        &held,
    );
    assert_eq!(
        changed(&all),
        [
            ("i1".to_string(), vec!["recreate requested"]),
            ("i2".to_string(), vec!["recreate requested"])
        ]
    );
    let one = decided(
        &with_disk(2, 1024),
        &observed,
        &DeployOptions {
            recreate: true,
            target: Target::instance("web", "i2"),
            ..DeployOptions::default()
        },
        &held,
    );
    assert_eq!(
        changed(&one),
        [("i2".to_string(), vec!["recreate requested"])]
    );
    assert!(
        one.instances
            .instances()
            .all(|i| !i.disk.orphans() && !i.disk.creates())
    );
}

#[test]
fn an_ignored_or_stopped_instance_is_left_as_it_is_until_started() {
    let (mut observed, held) = two_with_disks();
    observed.existing[0].ignore = true;
    observed.existing[1].state = DesiredState::Stopped;
    let newer = with_disk(2, 1024).replace("version: '1.0'", "version: '1.1'");
    let plan = decided(&newer, &observed, &DeployOptions::default(), &held);
    assert!(changed(&plan).is_empty(), "{:?}", changed(&plan));
    assert!(plan.order.waves.is_empty(), "nothing to update");
    let started = decided(
        &newer,
        &observed,
        &DeployOptions {
            start: true,
            ..DeployOptions::default()
        },
        &held,
    );
    assert_eq!(
        changed(&started),
        [("i2".to_string(), vec!["stemcell", "start requested"])],
        "the ignored instance stays as it is"
    );
}

#[test]
fn an_update_cut_short_is_redone_and_its_disk_kept() {
    let (mut observed, held) = two_with_disks();
    observed.existing[1].applied = None;
    let plan = decided(
        &with_disk(2, 1024),
        &observed,
        &DeployOptions::default(),
        &held,
    );
    assert_eq!(
        changed(&plan),
        [("i2".to_string(), vec!["unfinished update"])]
    );
    assert_eq!(
        disks(&plan)[1],
        DiskChange::Keep {
            cid: "disk-i2".into()
        }
    );
}

#[test]
fn a_new_network_gives_new_vms_new_addresses_and_frees_the_old_ones_after_them() {
    let (observed, held) = two_with_disks();
    let moved =
        with_disk(2, 1024).replace("networks: [{name: default}]", "networks: [{name: other}]");
    let plan = decided(&moved, &observed, &DeployOptions::default(), &held);
    assert_eq!(
        changed(&plan),
        [
            ("i1".to_string(), vec!["networks"]),
            ("i2".to_string(), vec!["networks"])
        ]
    );
    assert!(plan.instances.instances().all(|i| i.needs_new_vm()));
    assert_eq!(
        addresses(&plan),
        ["i1 other/10.20.0.2", "i2 other/10.20.0.3"]
    );
    let freed: Vec<String> = plan
        .instances
        .instances()
        .flat_map(|i| &i.obsolete_addresses)
        .map(|h| format!("{} {}", h.network, to_ip(h.ip)))
        .collect();
    assert_eq!(freed, ["default 10.10.0.2", "default 10.10.0.3"]);
}

#[test]
fn swapping_static_addresses_between_instances_is_refused() {
    let statics = ["10.10.0.200", "10.10.0.201"];
    let first = decided(
        &manifest(2, &statics),
        &Observed::default(),
        &DeployOptions::default(),
        &view(&[], &[]),
    );
    let observed = Observed {
        existing: deployed(&first),
        ..Observed::default()
    };
    let held = view(&[("i1", "10.10.0.200"), ("i2", "10.10.0.201")], &[]);
    let refused = try_decide(
        &manifest(2, &["10.10.0.201", "10.10.0.200"]),
        &observed,
        &DeployOptions::default(),
        &held,
    )
    .expect_err("a swap is refused");
    assert!(
        refused
            .to_string()
            .contains("swapping static IPs between instances is not supported"),
        "{refused}"
    );
}

#[test]
fn latest_is_decided_as_the_newest_upload_and_kept_for_the_record() {
    let text = manifest(1, &[]).replace("version: '1.0'", "version: latest");
    let snapshot = snapshot(&text);
    assert_eq!(snapshot.manifest.stemcells[0].version, "1.1");
    assert_eq!(snapshot.text, text, "the manifest as given is what is kept");
    assert_eq!(snapshot.latest.len(), 1);
    let plan = decided(
        &text,
        &Observed::default(),
        &DeployOptions::default(),
        &view(&[], &[]),
    );
    let stemcells: Vec<&str> = plan
        .instances
        .instances()
        .map(|i| i.desired.stemcell.as_str())
        .collect();
    assert_eq!(stemcells, ["jammy/1.1"]);
}
