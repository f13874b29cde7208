//! IP management in a deploy: which networks apply (the cloud config's, else the
//! manifest's), where reservations live (the store with a cloud config, else memory rebuilt
//! from the agents), and the reservation flow's result written into the plan.

use std::collections::{BTreeSet, HashMap};

use super::Core;
use super::error::StepError;
use super::ids::new_id;
use super::manifest::Manifest;
use super::model::DesiredState;
use super::network::{
    Desired, Held, InMemoryIpRepo, InstanceNetworks, IpProvider, IpRepo, IpSet, Network,
    NetworkError, Owner, PlannedIpRepo, named_addresses, to_ip, to_u32,
};
use super::plan::{Change, DeploymentPlan};
use fleet_store::{AsyncStore, IpClaim, IpHolder, IpRecord, IpRelease};

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

/// Whether a reservation changes the store or only decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserving {
    /// Claims and releases are written, as a deploy needs them.
    Apply,
    /// Every address is decided as [`Reserving::Apply`] would, against the same store,
    /// and nothing is written: what a dry run shows.
    DryRun,
}

/// Names new instances, reserves every instance's addresses, and records in the plan the
/// addresses, which instances change network (and so need a new VM), and which old
/// addresses go once they run. With the store, existing reservations come from it;
/// without, from what the agents reported (`reported`), or, for instances whose agents
/// did not answer or that have no VM, from what was recorded when their VM was made.
/// With [`Reserving::DryRun`], an unchanged instance's unused addresses stay in
/// `obsolete_addresses`, where a deploy releases them at once.
pub async fn reserve(
    core: &Core,
    networking: &Networking,
    manifest: &Manifest,
    plan: &mut DeploymentPlan,
    reported: &HashMap<String, Vec<(String, u32)>>,
    reserving: Reserving,
) -> Result<(), StepError> {
    let dry_run = reserving == Reserving::DryRun;
    let deployment = manifest.name.as_str();
    for group in &mut plan.groups {
        for instance in &mut group.instances {
            if instance.id.is_empty() {
                instance.id = new_id("instance");
            }
        }
    }
    let mut held: HashMap<String, Vec<Held>> = HashMap::new();
    // Addresses held by no instance of the plan, released before planning.
    let mut unowned: Vec<IpRecord> = Vec::new();
    if networking.global() {
        let live: BTreeSet<&str> = plan
            .instances()
            .map(|i| i.id.as_str())
            .chain(plan.obsolete.iter().map(|i| i.id.as_str()))
            .collect();
        // Held by no instance (a deploy stopped before recording a new instance): nobody
        // can bind it, so it goes.
        let (gone, kept) = ips_where(core, deployment, |owner| !live.contains(owner)).await?;
        if dry_run {
            unowned = gone;
        } else {
            release_records(&core.store, gone).await?;
        }
        for record in kept {
            held.entry(record.owner.instance).or_default().push(Held {
                network: record.network,
                ip: record.address,
            });
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
                    deployment: deployment.to_string(),
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
    let assignments = match networking {
        Networking::Global(nets) => {
            let decide = |mut repo: PlannedIpRepo| {
                for record in &unowned {
                    repo.release(
                        &record.network,
                        record.address,
                        &Owner::from(record.owner.clone()),
                    );
                }
                let mut provider = IpProvider::new(nets, IpSet::new(), repo);
                let assignments = provider.plan(&wanted)?;
                Ok::<_, StepError>((assignments, provider.into_repo()))
            };
            if dry_run {
                let mut named = named_addresses(&wanted);
                named.extend(unowned.iter().map(|r| r.address));
                plan_once(&core.store, &named, decide).await?.0
            } else {
                let _planning = core.ip_planning.lock().await;
                plan_global(&core.store, &named_addresses(&wanted), decide).await?
            }
        }
        Networking::Local(nets) => run(
            IpProvider::new(nets, IpSet::new(), InMemoryIpRepo::new()),
            &wanted,
        )?,
    };
    let mut assignments = assignments.into_iter();
    for group in &mut plan.groups {
        for instance in &mut group.instances {
            let assignment = assignments.next().expect("one assignment per instance");
            instance.addresses = assignment.ips.clone();
            instance.network_settings =
                crate::network::vm_networks(networking.nets(), &assignment.ips);
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
            if !instance.changed() && !dry_run {
                // The VM keeps running on the addresses it was bound to; the others are
                // in no use and go now.
                let owner = Owner {
                    deployment: deployment.to_string(),
                    instance: instance.id.clone(),
                };
                release(
                    core,
                    networking.global(),
                    &owner,
                    &instance.obsolete_addresses,
                )
                .await?;
                instance.obsolete_addresses.clear();
            }
        }
    }
    Ok(())
}

/// Plans made again when another deploy took an address first.
const PLAN_ATTEMPTS: usize = 5;

/// Plans against the store's addresses without changing the store, then applies what the
/// plan claimed and released in one transaction; a plan that lost an address to a deploy
/// planning at the same time is made again. `named` are the addresses the plan may claim
/// by name (held ones, static ones): their holders are read first.
///
/// # Errors
/// The plan's own errors; a store failure, or a plan that lost a race every time, as
/// [`NetworkError::Store`].
pub async fn plan_global<T, E: From<NetworkError>>(
    store: &AsyncStore,
    named: &[u32],
    mut plan: impl FnMut(PlannedIpRepo) -> Result<(T, PlannedIpRepo), E>,
) -> Result<T, E> {
    let store_error = |e: fleet_store::StoreError| E::from(NetworkError::Store(e.to_string()));
    for _ in 0..PLAN_ATTEMPTS {
        let (out, repo) = plan_once(store, named, &mut plan).await?;
        let (claims, releases) = repo.into_changes();
        let claims: Vec<IpClaim> = claims.into_iter().map(IpClaim::from).collect();
        let releases: Vec<IpRelease> = releases.into_iter().map(IpRelease::from).collect();
        match store
            .apply_ips(claims, releases)
            .await
            .map_err(store_error)?
        {
            Ok(()) => return Ok(out),
            Err(held) => tracing::debug!(
                address = %to_ip(held.address),
                holder = %Owner::from(held.owner),
                "an address was taken while planning; planning again"
            ),
        }
    }
    Err(E::from(NetworkError::Store(format!(
        "other deploys took the planned addresses {PLAN_ATTEMPTS} times in a row; deploy again"
    ))))
}

/// One plan against the store's addresses as they are now, changing nothing: the plan's
/// result and what it would claim and release. `named` are the addresses the plan may
/// claim or release by name, whose holders are read first.
///
/// # Errors
/// The plan's own errors; a store failure as [`NetworkError::Store`].
pub async fn plan_once<T, E: From<NetworkError>>(
    store: &AsyncStore,
    named: &[u32],
    mut plan: impl FnMut(PlannedIpRepo) -> Result<(T, PlannedIpRepo), E>,
) -> Result<(T, PlannedIpRepo), E> {
    let (holders, claimed) = store
        .run(|s| Ok((s.ip_holders(named)?, s.claimed()?)))
        .await
        .map_err(|e| E::from(NetworkError::Store(e.to_string())))?;
    let repo = PlannedIpRepo::new(
        claimed,
        holders
            .into_iter()
            .map(|r| (r.address, r.network, Owner::from(r.owner))),
    );
    plan(repo)
}

/// The store's addresses of `deployment`: those whose owning instance `goes`, then the
/// others.
async fn ips_where(
    core: &Core,
    deployment: &str,
    goes: impl Fn(&str) -> bool,
) -> Result<(Vec<IpRecord>, Vec<IpRecord>), StepError> {
    Ok(core
        .store
        .ips_of(deployment)
        .await?
        .into_iter()
        .partition(|record| goes(&record.owner.instance)))
}

/// Releases the store's addresses of `deployment` whose owning instance `goes`, and
/// returns the ones kept.
pub async fn release_where(
    core: &Core,
    deployment: &str,
    goes: impl Fn(&str) -> bool,
) -> Result<Vec<IpRecord>, StepError> {
    let (gone, kept) = ips_where(core, deployment, goes).await?;
    release_records(&core.store, gone).await?;
    Ok(kept)
}

/// Releases every one of `records` in one hand-over to the store.
async fn release_records(
    store: &AsyncStore,
    records: Vec<IpRecord>,
) -> Result<(), fleet_store::StoreError> {
    let gone = records
        .into_iter()
        .map(|r| (r.address, r.network, r.owner))
        .collect();
    release_all(store, gone).await
}

/// Releases each `(address, network, holder)` in one hand-over to the store.
async fn release_all(
    store: &AsyncStore,
    addresses: Vec<(u32, String, IpHolder)>,
) -> Result<(), fleet_store::StoreError> {
    if addresses.is_empty() {
        return Ok(());
    }
    store
        .run(move |s| {
            addresses
                .iter()
                .try_for_each(|(address, network, owner)| s.release_ip(*address, network, owner))
        })
        .await
}

fn run<R: IpRepo>(
    mut provider: IpProvider<'_, R>,
    wanted: &[InstanceNetworks],
) -> Result<Vec<super::network::Assignment>, StepError> {
    provider.plan(wanted).map_err(StepError::from)
}

/// Releases `owner`'s addresses in the store (with a cloud config; without one nothing
/// persists).
pub async fn release(
    core: &Core,
    global: bool,
    owner: &Owner,
    addresses: &[Held],
) -> Result<(), StepError> {
    if !global {
        return Ok(());
    }
    let holder = IpHolder::from(owner);
    let addresses = addresses
        .iter()
        .map(|held| (held.ip, held.network.clone(), holder.clone()))
        .collect();
    Ok(release_all(&core.store, addresses).await?)
}

/// Every address an instance holds in the store.
pub async fn held_by(
    core: &Core,
    deployment: &str,
    instance: &str,
) -> Result<Vec<Held>, StepError> {
    Ok(core
        .store
        .ips_of(deployment)
        .await?
        .into_iter()
        .filter(|r| r.owner.instance == instance)
        .map(|r| Held {
            network: r.network,
            ip: r.address,
        })
        .collect())
}
