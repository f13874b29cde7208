//! Where a plan's reservations are kept while it is made. Without a cloud config every
//! deploy rebuilds an in-memory repo from its agents, and IP space is per deployment;
//! with one, the plan works on the addresses the store had taken when it began, and the
//! deploy applies what it claimed and released in one transaction.

use std::collections::HashMap;

pub use super::model::Owner;
use super::model::Subnet;
use fleet_ipset::IpSet;

pub trait IpRepo {
    /// Claims `ip` on `network` for `owner`; `Err(holder)` when someone else has it.
    fn add(&mut self, network: &str, ip: u32, owner: &Owner, is_static: bool) -> Result<(), Owner>;

    /// Claims the lowest address of `subnet` that is neither `blocked` nor taken.
    fn allocate(
        &mut self,
        network: &str,
        subnet: &Subnet,
        blocked: &IpSet,
        owner: &Owner,
    ) -> Option<u32>;

    /// Releases `ip` if `owner` holds it on `network`.
    fn release(&mut self, network: &str, ip: u32, owner: &Owner);
}

/// Per deployment, rebuilt from the agents at each deploy. Claiming an address twice is
/// refused, whoever asks.
#[derive(Debug, Default)]
pub struct InMemoryIpRepo {
    owners: HashMap<(String, u32), Owner>,
    taken: HashMap<String, IpSet>,
}

impl InMemoryIpRepo {
    pub fn new() -> Self {
        Self::default()
    }
}

impl IpRepo for InMemoryIpRepo {
    fn add(
        &mut self,
        network: &str,
        ip: u32,
        owner: &Owner,
        _is_static: bool,
    ) -> Result<(), Owner> {
        let key = (network.to_string(), ip);
        if let Some(holder) = self.owners.get(&key) {
            return Err(holder.clone());
        }
        self.owners.insert(key, owner.clone());
        self.taken
            .entry(network.to_string())
            .or_default()
            .insert(ip);
        Ok(())
    }

    fn allocate(
        &mut self,
        network: &str,
        subnet: &Subnet,
        blocked: &IpSet,
        owner: &Owner,
    ) -> Option<u32> {
        let taken = self.taken.entry(network.to_string()).or_default();
        let ip = taken.lowest_free_with(blocked, subnet.first, subnet.last)?;
        taken.insert(ip);
        self.owners.insert((network.to_string(), ip), owner.clone());
        Some(ip)
    }

    fn release(&mut self, network: &str, ip: u32, owner: &Owner) {
        let key = (network.to_string(), ip);
        if self.owners.get(&key) == Some(owner) {
            self.owners.remove(&key);
            if let Some(taken) = self.taken.get_mut(network) {
                taken.remove(ip);
            }
        }
    }
}

/// An address a plan claims, to be applied with the others in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub network: String,
    pub ip: u32,
    pub owner: Owner,
    pub is_static: bool,
}

impl From<Claim> for fleet_store::IpClaim {
    fn from(claim: Claim) -> Self {
        fleet_store::IpClaim {
            address: claim.ip,
            network: claim.network,
            owner: (&claim.owner).into(),
            is_static: claim.is_static,
        }
    }
}

/// An address a plan gives back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub network: String,
    pub ip: u32,
    pub owner: Owner,
}

impl From<Release> for fleet_store::IpRelease {
    fn from(release: Release) -> Self {
        fleet_store::IpRelease {
            address: release.ip,
            network: release.network,
            owner: (&release.owner).into(),
        }
    }
}

/// Plans against the addresses that were taken when planning began (unique across every
/// network and deployment) and records what the plan claims and releases. It does no I/O:
/// the caller applies the changes in one transaction and plans again when another deploy
/// took an address meanwhile.
#[derive(Debug, Default)]
pub struct PlannedIpRepo {
    claimed: IpSet,
    /// Who holds the addresses the plan may claim by name: the instances' own, and the
    /// static ones the manifest asks for.
    holders: HashMap<u32, (String, Owner)>,
    claims: Vec<Claim>,
    releases: Vec<Release>,
}

impl PlannedIpRepo {
    pub fn new(claimed: IpSet, holders: impl IntoIterator<Item = (u32, String, Owner)>) -> Self {
        PlannedIpRepo {
            claimed,
            holders: holders
                .into_iter()
                .map(|(ip, network, owner)| (ip, (network, owner)))
                .collect(),
            claims: Vec::new(),
            releases: Vec::new(),
        }
    }

    /// What the plan claimed and released, in order.
    pub fn into_changes(self) -> (Vec<Claim>, Vec<Release>) {
        (self.claims, self.releases)
    }
}

impl IpRepo for PlannedIpRepo {
    fn add(&mut self, network: &str, ip: u32, owner: &Owner, is_static: bool) -> Result<(), Owner> {
        if let Some((_, holder)) = self.holders.get(&ip)
            && holder != owner
        {
            return Err(holder.clone());
        }
        self.holders
            .insert(ip, (network.to_string(), owner.clone()));
        self.claimed.insert(ip);
        self.claims.push(Claim {
            network: network.to_string(),
            ip,
            owner: owner.clone(),
            is_static,
        });
        Ok(())
    }

    fn allocate(
        &mut self,
        network: &str,
        subnet: &Subnet,
        blocked: &IpSet,
        owner: &Owner,
    ) -> Option<u32> {
        let ip = self
            .claimed
            .lowest_free_with(blocked, subnet.first, subnet.last)?;
        self.add(network, ip, owner, false)
            .expect("a free address has no holder");
        Some(ip)
    }

    fn release(&mut self, network: &str, ip: u32, owner: &Owner) {
        if self
            .holders
            .get(&ip)
            .is_some_and(|(n, o)| n == network && o == owner)
        {
            self.holders.remove(&ip);
            self.claimed.remove(ip);
            self.releases.push(Release {
                network: network.to_string(),
                ip,
                owner: owner.clone(),
            });
        }
    }
}
