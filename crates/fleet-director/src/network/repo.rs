//! Where a plan's reservations are kept while it is made. Without a cloud config every
//! deploy rebuilds an in-memory repo from its agents, and IP space is per deployment;
//! with one, the plan works on the addresses the store had taken when it began, and the
//! deploy applies what it claimed and released in one transaction.

use std::collections::HashMap;
use std::sync::Arc;

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
    /// The store's addresses, shared: a plan changes a few, and copying tens of
    /// thousands per deploy made a large fleet's deploys grow with the fleet.
    claimed: Arc<IpSet>,
    /// What the plan claimed, and what of `claimed` it released.
    added: IpSet,
    removed: IpSet,
    /// Who holds the addresses the plan may claim by name: the instances' own, and the
    /// static ones the manifest asks for.
    holders: HashMap<u32, (String, Owner)>,
    /// The holders as the store had them: what a release must name to free an address.
    stored: HashMap<u32, (String, Owner)>,
    /// Claims and releases in the order the plan made them.
    steps: Vec<Step>,
}

#[derive(Debug)]
enum Step {
    Claim(Claim),
    Release(Release),
}

impl PlannedIpRepo {
    pub fn new(
        claimed: Arc<IpSet>,
        holders: impl IntoIterator<Item = (u32, String, Owner)>,
    ) -> Self {
        let holders: HashMap<u32, (String, Owner)> = holders
            .into_iter()
            .map(|(ip, network, owner)| (ip, (network, owner)))
            .collect();
        PlannedIpRepo {
            claimed,
            added: IpSet::new(),
            removed: IpSet::new(),
            stored: holders.clone(),
            holders,
            steps: Vec::new(),
        }
    }

    /// The lowest address of `[lo, hi]` neither `blocked` nor taken, as the plan has
    /// left the store's addresses so far.
    fn lowest_free(&self, blocked: &IpSet, lo: u32, hi: u32) -> Option<u32> {
        let mut from = lo;
        let fresh = loop {
            match self.claimed.lowest_free_with(blocked, from, hi) {
                // Past the whole run this plan claimed, not one address at a time: a plan
                // that fills a subnet would otherwise walk its own claims at every
                // allocation.
                Some(ip) if self.added.contains(ip) => match self.added.lowest_free(ip, hi) {
                    Some(next) => from = next,
                    None => break None,
                },
                found => break found,
            }
        };
        // Released addresses are few: each is looked at.
        let reused = self
            .removed
            .ranges()
            .flat_map(|(s, e)| s.max(lo)..=e.min(hi))
            .find(|&ip| !blocked.contains(ip) && !self.added.contains(ip));
        fresh.into_iter().chain(reused).min()
    }

    /// What the plan changes in the store, netted address by address: the stored holding
    /// it gave up, and the claim it ended with. An address the plan claimed and gave back
    /// again is not there; one handed from its stored holder to another owner is in both
    /// (the store frees an address before claiming it).
    pub fn into_changes(self) -> (Vec<Claim>, Vec<Release>) {
        let mut last: HashMap<u32, Option<Claim>> = HashMap::new();
        let mut order = Vec::new();
        let mut releases: Vec<Release> = Vec::new();
        for step in self.steps {
            match step {
                Step::Claim(claim) => {
                    if !last.contains_key(&claim.ip) {
                        order.push(claim.ip);
                    }
                    last.insert(claim.ip, Some(claim));
                }
                Step::Release(release) => {
                    let stored = self
                        .stored
                        .get(&release.ip)
                        .is_some_and(|(n, o)| *n == release.network && *o == release.owner);
                    if stored && !releases.iter().any(|r| r.ip == release.ip) {
                        releases.push(release.clone());
                    }
                    if !last.contains_key(&release.ip) {
                        order.push(release.ip);
                    }
                    last.insert(release.ip, None);
                }
            }
        }
        let claims = order
            .into_iter()
            .filter_map(|ip| last.remove(&ip).flatten())
            .collect();
        (claims, releases)
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
        self.added.insert(ip);
        self.removed.remove(ip);
        self.steps.push(Step::Claim(Claim {
            network: network.to_string(),
            ip,
            owner: owner.clone(),
            is_static,
        }));
        Ok(())
    }

    fn allocate(
        &mut self,
        network: &str,
        subnet: &Subnet,
        blocked: &IpSet,
        owner: &Owner,
    ) -> Option<u32> {
        let ip = self.lowest_free(blocked, subnet.first, subnet.last)?;
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
            self.added.remove(ip);
            if self.claimed.contains(ip) {
                self.removed.insert(ip);
            }
            self.steps.push(Step::Release(Release {
                network: network.to_string(),
                ip,
                owner: owner.clone(),
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(instance: &str) -> Owner {
        Owner {
            deployment: "d".into(),
            instance: instance.into(),
        }
    }

    #[test]
    fn a_plan_sees_its_own_claims_and_releases_and_leaves_the_shared_set_alone() {
        let mut taken = IpSet::new();
        for ip in [10, 11, 13] {
            taken.insert(ip);
        }
        let shared = Arc::new(taken);
        let mut repo = PlannedIpRepo::new(Arc::clone(&shared), [(11, "n".into(), owner("a"))]);
        let none = IpSet::new();
        assert_eq!(repo.lowest_free(&none, 10, 20), Some(12));
        repo.release("n", 11, &owner("a"));
        assert_eq!(
            repo.lowest_free(&none, 10, 20),
            Some(11),
            "released, free again"
        );
        let mut blocked = IpSet::new();
        blocked.insert(11);
        assert_eq!(repo.lowest_free(&blocked, 10, 20), Some(12));
        repo.add("n", 11, &owner("b"), false).unwrap();
        repo.add("n", 12, &owner("b"), false).unwrap();
        assert_eq!(
            repo.lowest_free(&none, 10, 20),
            Some(14),
            "its claims are taken"
        );
        assert_eq!(repo.lowest_free(&none, 10, 13), None);
        repo.release("n", 12, &owner("b"));
        assert_eq!(repo.lowest_free(&none, 10, 20), Some(12));
        assert_eq!(
            (shared.contains(11), shared.contains(12)),
            (true, false),
            "the store's set is unchanged"
        );
        let (claims, releases) = repo.into_changes();
        let claimed: Vec<(u32, &str)> = claims
            .iter()
            .map(|c| (c.ip, c.owner.instance.as_str()))
            .collect();
        let released: Vec<(u32, &str)> = releases
            .iter()
            .map(|r| (r.ip, r.owner.instance.as_str()))
            .collect();
        assert_eq!(
            (claimed, released),
            (vec![(11, "b")], vec![(11, "a")]),
            "11 passes from a to b; 12 was claimed and given back, which the store never sees"
        );
    }
}
