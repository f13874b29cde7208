//! IP management's I/O in a deploy: reading the store's addresses a deploy decides from,
//! applying what it decided (see [`crate::addresses`]) in one transaction, and releasing
//! addresses as instances go.

use std::sync::Arc;

use super::addresses::{AddressChanges, AddressView, Networking, static_addresses};
use super::error::StepError;
use super::manifest::Manifest;
use super::network::{Held, NetworkError, Owner, PlannedIpRepo, to_ip};
use fleet_store::{AsyncStore, IpClaim, IpHolder, IpRecord, IpRelease};

/// The store's addresses as deploys reach them: claims and releases in the store, and one
/// planning at a time in this process.
#[derive(Clone)]
pub struct Addresses {
    store: AsyncStore,
    /// Held from reading the claimed addresses to applying a plan's claims: deploys of
    /// this process then never lose a plan to one another, however many start at once
    /// (the store still refuses a plan that lost to another process).
    planning: Arc<tokio::sync::Mutex<()>>,
}

impl Addresses {
    pub fn new(store: AsyncStore) -> Self {
        Addresses {
            store,
            planning: Arc::default(),
        }
    }
}

/// The store's addresses a deploy of `manifest` decides from, read in one go; empty
/// without a cloud config.
///
/// # Errors
/// A store failure.
pub async fn observe(
    addresses: &Addresses,
    networking: &Networking,
    manifest: &Manifest,
) -> Result<AddressView, StepError> {
    if !networking.global() {
        return Ok(AddressView::default());
    }
    let deployment = manifest.name.clone();
    let statics = static_addresses(manifest);
    Ok(addresses
        .store
        .run(move |s| {
            let own = s.ips_of(&deployment)?;
            let mut named = statics;
            named.extend(own.iter().map(|r| r.address));
            Ok(AddressView {
                holders: s.ip_holders(&named)?,
                claimed: s.claimed()?,
                deployment: own,
            })
        })
        .await?)
}

/// Decides against the store's addresses as they are now and applies the decision's
/// address changes in one transaction, so that what the plan says is what the store
/// holds. A deploy planning at the same time that took an address first makes this one
/// look and decide again; two deploys of one director plan one at a time.
///
/// # Errors
/// `decide`'s own; a store failure, or a decision that lost a race every time.
pub async fn decide_and_claim<T>(
    addresses: &Addresses,
    networking: &Networking,
    manifest: &Manifest,
    mut decide: impl FnMut(&AddressView) -> Result<T, StepError>,
    changes: impl Fn(&T) -> &AddressChanges,
) -> Result<T, StepError> {
    if !networking.global() {
        return decide(&AddressView::default());
    }
    let _planning = addresses.planning.lock().await;
    for _ in 0..PLAN_ATTEMPTS {
        let view = observe(addresses, networking, manifest).await?;
        let decided = decide(&view)?;
        let AddressChanges { claims, releases } = changes(&decided).clone();
        if apply(&addresses.store, claims, releases).await? {
            return Ok(decided);
        }
    }
    Err(lost_every_time())
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
    addresses: &Addresses,
    named: &[u32],
    mut plan: impl FnMut(PlannedIpRepo) -> Result<(T, PlannedIpRepo), E>,
) -> Result<T, E> {
    let _planning = addresses.planning.lock().await;
    let store = &addresses.store;
    let store_error = |e: fleet_store::StoreError| E::from(NetworkError::Store(e.to_string()));
    for _ in 0..PLAN_ATTEMPTS {
        let (out, repo) = plan_once(store, named, &mut plan).await?;
        let (claims, releases) = repo.into_changes();
        let claims = claims.into_iter().map(IpClaim::from).collect();
        let releases = releases.into_iter().map(IpRelease::from).collect();
        if apply(store, claims, releases).await.map_err(store_error)? {
            return Ok(out);
        }
    }
    Err(lost_every_time())
}

/// Applies a decision's claims and releases in one transaction; `false`, with nothing
/// applied, when a deploy planning at the same time took an address first.
///
/// # Errors
/// A store failure.
async fn apply(
    store: &AsyncStore,
    claims: Vec<IpClaim>,
    releases: Vec<IpRelease>,
) -> Result<bool, fleet_store::StoreError> {
    match store.apply_ips(claims, releases).await? {
        Ok(()) => Ok(true),
        Err(held) => {
            tracing::debug!(
                address = %to_ip(held.address),
                holder = %Owner::from(held.owner),
                "an address was taken while planning; planning again"
            );
            Ok(false)
        }
    }
}

/// What a decision that lost an address [`PLAN_ATTEMPTS`] times in a row ends with.
fn lost_every_time<E: From<NetworkError>>() -> E {
    E::from(NetworkError::Store(format!(
        "other deploys took the planned addresses {PLAN_ATTEMPTS} times in a row; deploy again"
    )))
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
    let named = named.to_vec();
    let (holders, claimed) = store
        .run(move |s| Ok((s.ip_holders(&named)?, s.claimed()?)))
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
    addresses: &Addresses,
    deployment: &str,
    goes: impl Fn(&str) -> bool,
) -> Result<(Vec<IpRecord>, Vec<IpRecord>), StepError> {
    Ok(addresses
        .store
        .ips_of(deployment)
        .await?
        .into_iter()
        .partition(|record| goes(&record.owner.instance)))
}

/// Releases the store's addresses of `deployment` whose owning instance `goes`, and
/// returns the ones kept.
pub async fn release_where(
    addresses: &Addresses,
    deployment: &str,
    goes: impl Fn(&str) -> bool,
) -> Result<Vec<IpRecord>, StepError> {
    let (gone, kept) = ips_where(addresses, deployment, goes).await?;
    release_records(&addresses.store, gone).await?;
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

/// Releases `owner`'s addresses in the store (with a cloud config; without one nothing
/// persists).
pub async fn release(
    addresses: &Addresses,
    global: bool,
    owner: &Owner,
    held: &[Held],
) -> Result<(), StepError> {
    if !global {
        return Ok(());
    }
    let holder = IpHolder::from(owner);
    let gone = held
        .iter()
        .map(|held| (held.ip, held.network.clone(), holder.clone()))
        .collect();
    Ok(release_all(&addresses.store, gone).await?)
}
