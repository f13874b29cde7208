//! IP address management (seed 001): networks and subnets, their validation, where
//! reservations live (per deployment in memory, or globally in the store), and the
//! reservation flow of a deploy. The allocation logic does no I/O of its own; the
//! store-backed repository is handed a store.

mod error;
mod model;
mod parse;
mod provider;
mod repo;
mod settings;

pub use error::NetworkError;
pub use fleet_ipset::{IpSet, to_ip, to_u32};
pub use model::{Network, NetworkKind, Subnet};
pub use parse::{AddressError, cidr, entry, networks};
pub use provider::{Assignment, Desired, Held, InstanceNetworks, IpProvider, named_addresses};
pub use repo::{Claim, InMemoryIpRepo, IpRepo, Owner, PlannedIpRepo, Release};
pub use settings::vm_networks;

#[cfg(test)]
mod tests;
