//! Where reservations live. Without a cloud config every deploy rebuilds an in-memory
//! repo from its agents, and IP space is per deployment; with one, reservations live in
//! the store, unique across all deployments.

use std::collections::HashMap;

use super::ipset::IpSet;
use super::model::Subnet;
use crate::store::{IpOwner, Store, StoreError};

/// Who holds an address.
pub type Owner = IpOwner;

pub trait IpRepo {
    /// Claims `ip` on `network` for `owner`; `Ok(Err(holder))` when someone else has it.
    fn add(
        &mut self,
        network: &str,
        ip: u32,
        owner: &Owner,
        is_static: bool,
    ) -> Result<Result<(), Owner>, StoreError>;

    /// Claims the lowest address of `subnet` that is neither `blocked` nor taken.
    fn allocate(
        &mut self,
        network: &str,
        subnet: &Subnet,
        blocked: &IpSet,
        owner: &Owner,
    ) -> Result<Option<u32>, StoreError>;

    /// Releases `ip` if `owner` holds it on `network`.
    fn release(&mut self, network: &str, ip: u32, owner: &Owner) -> Result<(), StoreError>;
}

/// The lowest address of `[lo, hi]` in neither set.
pub fn lowest_free(taken: &IpSet, blocked: &IpSet, lo: u32, hi: u32) -> Option<u32> {
    let mut candidate = lo;
    loop {
        let a = taken.lowest_free(candidate, hi)?;
        let b = blocked.lowest_free(a, hi)?;
        if a == b {
            return Some(a);
        }
        candidate = b;
    }
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
    ) -> Result<Result<(), Owner>, StoreError> {
        let key = (network.to_string(), ip);
        if let Some(holder) = self.owners.get(&key) {
            return Ok(Err(holder.clone()));
        }
        self.owners.insert(key, owner.clone());
        self.taken
            .entry(network.to_string())
            .or_default()
            .insert(ip);
        Ok(Ok(()))
    }

    fn allocate(
        &mut self,
        network: &str,
        subnet: &Subnet,
        blocked: &IpSet,
        owner: &Owner,
    ) -> Result<Option<u32>, StoreError> {
        let taken = self.taken.entry(network.to_string()).or_default();
        let Some(ip) = lowest_free(taken, blocked, subnet.first, subnet.last) else {
            return Ok(None);
        };
        taken.insert(ip);
        self.owners.insert((network.to_string(), ip), owner.clone());
        Ok(Some(ip))
    }

    fn release(&mut self, network: &str, ip: u32, owner: &Owner) -> Result<(), StoreError> {
        let key = (network.to_string(), ip);
        if self.owners.get(&key) == Some(owner) {
            self.owners.remove(&key);
            if let Some(taken) = self.taken.get_mut(network) {
                taken.remove(ip);
            }
        }
        Ok(())
    }
}

/// Reservations in the store: an address is unique across every network and deployment
/// (a unique key), and only its owner may claim it again. Each subnet's taken addresses
/// are read once and then kept current, so an allocation costs O(log n); a claim that
/// loses a race with another deploy marks that address taken and tries the next.
pub struct DatabaseIpRepo<'s> {
    store: &'s dyn Store,
    cache: HashMap<(u32, u32), IpSet>,
}

impl<'s> DatabaseIpRepo<'s> {
    pub fn new(store: &'s dyn Store) -> Self {
        DatabaseIpRepo {
            store,
            cache: HashMap::new(),
        }
    }

    fn taken(&mut self, first: u32, last: u32) -> Result<&mut IpSet, StoreError> {
        if !self.cache.contains_key(&(first, last)) {
            let mut set = IpSet::new();
            for ip in self.store.ips_in(first, last)? {
                set.insert(ip);
            }
            self.cache.insert((first, last), set);
        }
        Ok(self.cache.get_mut(&(first, last)).expect("just inserted"))
    }

    fn mark(&mut self, ip: u32, taken: bool) {
        for ((first, last), set) in &mut self.cache {
            if (*first..=*last).contains(&ip) {
                if taken {
                    set.insert(ip);
                } else {
                    set.remove(ip);
                }
            }
        }
    }
}

impl IpRepo for DatabaseIpRepo<'_> {
    fn add(
        &mut self,
        network: &str,
        ip: u32,
        owner: &Owner,
        is_static: bool,
    ) -> Result<Result<(), Owner>, StoreError> {
        let claimed = self.store.claim_ip(ip, network, owner, is_static)?;
        self.mark(ip, true);
        Ok(claimed)
    }

    fn allocate(
        &mut self,
        network: &str,
        subnet: &Subnet,
        blocked: &IpSet,
        owner: &Owner,
    ) -> Result<Option<u32>, StoreError> {
        loop {
            let taken = self.taken(subnet.first, subnet.last)?;
            let Some(ip) = lowest_free(taken, blocked, subnet.first, subnet.last) else {
                return Ok(None);
            };
            taken.insert(ip);
            match self.store.claim_ip(ip, network, owner, false)? {
                Ok(()) => return Ok(Some(ip)),
                // Another deploy took it since the cache was read: try the next one.
                Err(_) => continue,
            }
        }
    }

    fn release(&mut self, network: &str, ip: u32, owner: &Owner) -> Result<(), StoreError> {
        self.store.release_ip(ip, network, owner)?;
        // Whether or not it was ours, the store decides; read it again when next needed.
        if self.store.ips_in(ip, ip)?.is_empty() {
            self.mark(ip, false);
        }
        Ok(())
    }
}
