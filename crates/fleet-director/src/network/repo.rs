//! Where reservations live. Without a cloud config every deploy rebuilds an in-memory
//! repo from its agents, and IP space is per deployment; with one, reservations live in
//! the store, unique across all deployments.

use std::collections::HashMap;

use super::model::Subnet;
use fleet_ipset::IpSet;
use fleet_store::{IpOwner, Store, StoreError};

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
        let Some(ip) = taken.lowest_free_with(blocked, subnet.first, subnet.last) else {
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
/// (a unique key), and only its owner may claim it again. The store finds the lowest
/// unclaimed address in O(log n); a claim that loses a race with another deploy moves on
/// to the next address.
pub struct DatabaseIpRepo<'s> {
    store: &'s dyn Store,
}

impl<'s> DatabaseIpRepo<'s> {
    pub fn new(store: &'s dyn Store) -> Self {
        DatabaseIpRepo { store }
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
        self.store.claim_ip(ip, network, owner, is_static)
    }

    fn allocate(
        &mut self,
        network: &str,
        subnet: &Subnet,
        blocked: &IpSet,
        owner: &Owner,
    ) -> Result<Option<u32>, StoreError> {
        loop {
            let Some(ip) = self
                .store
                .lowest_unclaimed(subnet.first, subnet.last, blocked)?
            else {
                return Ok(None);
            };
            match self.store.claim_ip(ip, network, owner, false)? {
                Ok(()) => return Ok(Some(ip)),
                // Taken since it was found (the store now knows): try the next one.
                Err(_) => continue,
            }
        }
    }

    fn release(&mut self, network: &str, ip: u32, owner: &Owner) -> Result<(), StoreError> {
        self.store.release_ip(ip, network, owner)
    }
}
