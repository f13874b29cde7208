//! Which networks a deploy's addresses come from, and which addresses its instances get,
//! decided from what the store held when the
//! deploy looked (or, without a cloud config, from what the agents reported), without
//! changing anything: the addresses written into the plan, which instances change
//! network (and so need a new VM), which old addresses go once they run, and the claims
//! and releases the store must take in one transaction. Pure: a view in, a decision out;
//! [`crate::networking`] reads the view and applies the decision.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use fleet_ipset::IpSet;
use fleet_store::{IpClaim, IpRecord, IpRelease};

use super::error::StepError;
use super::manifest::Manifest;
use super::model::DesiredState;
use super::network::{
    Desired, Held, InMemoryIpRepo, InstanceNetworks, IpProvider, IpRepo, Network, Owner,
    PlannedIpRepo, to_ip, to_u32, vm_networks,
};
use super::plan::{Change, DeploymentPlan};

/// Where this deploy's networks come from.
pub enum Networking {
    /// A cloud config: reservations live in the store, unique across deployments.
    Global(Vec<Network>),
    /// The manifest's own networks: per deployment, rebuilt from the agents.
    Local(Vec<Network>),
}

impl Networking {
    pub fn global(&self) -> bool {
        matches!(self, Networking::Global(_))
    }

    /// The networks addresses come from.
    pub fn nets(&self) -> &[Network] {
        match self {
            Networking::Global(nets) | Networking::Local(nets) => nets,
        }
    }
}

/// The store's addresses as a deploy found them; empty without a cloud config, whose
/// addresses live in no store.
#[derive(Debug, Clone, Default)]
pub struct AddressView {
    /// The deployment's reservations.
    pub deployment: Vec<IpRecord>,
    /// Who holds the addresses the plan may claim by name: the deployment's own and the
    /// static ones its manifest asks for.
    pub holders: Vec<IpRecord>,
    /// Every claimed address, of every deployment.
    pub claimed: Arc<IpSet>,
}

impl AddressView {
    /// The addresses `instance` holds in the store.
    pub fn held_by(&self, instance: &str) -> Vec<Held> {
        self.deployment
            .iter()
            .filter(|r| r.owner.instance == instance)
            .map(|r| Held {
                network: r.network.clone(),
                ip: r.address,
            })
            .collect()
    }
}

/// What the store must change before any VM does: one transaction, an address's release
/// before its claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressChanges {
    pub claims: Vec<IpClaim>,
    pub releases: Vec<IpRelease>,
}

/// Parses `network/address` entries of a recorded spec.
fn recorded(networks: &[String]) -> Vec<Held> {
    networks
        .iter()
        .filter_map(|n| {
            let (network, ip) = n.split_once('/')?;
            let ip: std::net::Ipv4Addr = ip.parse().ok()?;
            Some(Held {
                network: network.to_string(),
                ip: to_u32(ip),
            })
        })
        .collect()
}

/// Decides every instance's addresses; the plan's instances must all be named. With the
/// store (a cloud config), existing reservations come from `view`: addresses held by no
/// instance of the plan (a deploy stopped before recording a new instance) go, and an
/// unchanged instance's unused addresses go with them. Without, existing addresses come
/// from what the agents `reported`, or, for instances whose agents did not answer or that
/// have no VM, from what was recorded when their VM was made; nothing is stored. A changed
/// instance keeps its old addresses in `obsolete_addresses` until its new VM runs.
///
/// # Errors
/// A network that cannot give an instance what it asks for.
pub fn decide(
    networking: &Networking,
    manifest: &Manifest,
    plan: &mut DeploymentPlan,
    reported: &HashMap<String, Vec<(String, u32)>>,
    view: &AddressView,
) -> Result<AddressChanges, StepError> {
    let deployment = manifest.name.as_str();
    let mut held: HashMap<String, Vec<Held>> = HashMap::new();
    // Addresses held by no instance of the plan: nobody can bind them, so they go.
    let mut unowned: Vec<&IpRecord> = Vec::new();
    if networking.global() {
        let live: BTreeSet<&str> = plan
            .instances()
            .map(|i| i.id.as_str())
            .chain(plan.obsolete.iter().map(|i| i.id.as_str()))
            .collect();
        for record in &view.deployment {
            if live.contains(record.owner.instance.as_str()) {
                held.entry(record.owner.instance.clone())
                    .or_default()
                    .push(Held {
                        network: record.network.clone(),
                        ip: record.address,
                    });
            } else {
                unowned.push(record);
            }
        }
    } else {
        let existing = plan
            .instances()
            .filter_map(|i| i.existing.as_ref())
            .chain(plan.obsolete.iter());
        for record in existing {
            let addresses = match reported.get(&record.id) {
                Some(nets) => nets
                    .iter()
                    .map(|(network, ip)| Held {
                        network: network.clone(),
                        ip: *ip,
                    })
                    .collect(),
                None => recorded(record.current_networks()),
            };
            held.insert(record.id.clone(), addresses);
        }
    }
    let wanted = wanted(manifest, plan, &held);
    let (assignments, mut repo) = match networking {
        Networking::Global(nets) => {
            let mut repo = PlannedIpRepo::new(
                Arc::clone(&view.claimed),
                view.holders
                    .iter()
                    .map(|r| (r.address, r.network.clone(), Owner::from(r.owner.clone()))),
            );
            for record in &unowned {
                repo.release(
                    &record.network,
                    record.address,
                    &Owner::from(record.owner.clone()),
                );
            }
            let mut provider = IpProvider::new(nets, IpSet::new(), repo);
            let assignments = provider.plan(&wanted)?;
            (assignments, Some(provider.into_repo()))
        }
        Networking::Local(nets) => {
            let mut provider = IpProvider::new(nets, IpSet::new(), InMemoryIpRepo::new());
            (provider.plan(&wanted)?, None)
        }
    };
    let mut assignments = assignments.into_iter();
    for group in &mut plan.groups {
        for instance in &mut group.instances {
            let assignment = assignments.next().expect("one assignment per instance");
            instance.addresses = assignment.ips.clone();
            instance.network_settings = vm_networks(networking.nets(), &assignment.ips);
            instance.desired.networks = assignment
                .ips
                .iter()
                .map(|(network, ip)| {
                    ip.map_or_else(|| network.clone(), |ip| format!("{network}/{}", to_ip(ip)))
                })
                .collect();
            instance.obsolete_addresses = assignment.obsolete;
            let Some(existing) = &instance.existing else {
                continue;
            };
            // A stopped or detached instance is left alone (unless started): it keeps
            // every address it holds until then.
            let idle = existing.state != DesiredState::Started && instance.changes.is_empty();
            if idle {
                instance.obsolete_addresses.clear();
                continue;
            }
            if existing.vm_cid.is_some() && existing.current_networks() != instance.desired.networks
            {
                instance.changes.insert(Change::Networks);
            }
            if !instance.changed()
                && let Some(repo) = &mut repo
            {
                // The VM keeps running on the addresses it was bound to; the others are
                // in no use and go with the plan's other changes. The plan still shows
                // them, as what this instance gives up.
                let owner = Owner {
                    deployment: deployment.to_string(),
                    instance: instance.id.clone(),
                };
                for old in &instance.obsolete_addresses {
                    repo.release(&old.network, old.ip, &owner);
                }
            }
        }
    }
    let Some(repo) = repo else {
        return Ok(AddressChanges::default());
    };
    let (claims, releases) = repo.into_changes();
    Ok(AddressChanges {
        claims: claims.into_iter().map(IpClaim::from).collect(),
        releases: releases.into_iter().map(IpRelease::from).collect(),
    })
}

/// What each planned instance asks of its group's networks, with what it holds.
fn wanted(
    manifest: &Manifest,
    plan: &DeploymentPlan,
    held: &HashMap<String, Vec<Held>>,
) -> Vec<InstanceNetworks> {
    let mut wanted = Vec::new();
    for group_plan in &plan.groups {
        let group = manifest
            .instance_groups
            .iter()
            .find(|g| g.name == group_plan.name)
            .expect("the plan follows the manifest");
        for instance in &group_plan.instances {
            wanted.push(InstanceNetworks {
                owner: Owner {
                    deployment: manifest.name.clone(),
                    instance: instance.id.clone(),
                },
                az: instance.az.clone(),
                desired: group
                    .networks
                    .iter()
                    .map(|n| Desired {
                        network: n.name.clone(),
                        static_ip: n.static_ips.get(instance.index as usize).copied(),
                    })
                    .collect(),
                existing: held.get(&instance.id).cloned().unwrap_or_default(),
            });
        }
    }
    wanted
}

/// The addresses a deploy of `manifest` may claim or release by name, beside the
/// deployment's own: the static ones its groups ask for.
pub fn static_addresses(manifest: &Manifest) -> Vec<u32> {
    manifest
        .instance_groups
        .iter()
        .flat_map(|g| &g.networks)
        .flat_map(|n| n.static_ips.iter().copied())
        .collect()
}
