//! A simulated IaaS and its agents, with state in the store (and in memory beside it), per-call latency drawn from a
//! configured range, and faults by configuration. Every draw is derived from the seed and
//! the call's subject, not from call order, so a run is reproducible however its
//! concurrent operations interleave.

mod cloud;
mod mirror;
mod settings;
mod vitals;

pub use cloud::SimulatedCloud;
pub use settings::{Fault, FaultKind, Latency, SimulationSettings};

/// A number in [0, 1) determined by the seed and a key (SplitMix64 over FNV-1a).
pub fn draw(seed: u64, key: &str) -> f64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = seed ^ hash;
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// The simulated IaaS's VMs and disks as the cloud sees them, and its agents' state.
pub const CLOUD_VMS: fleet_store::Collection = fleet_store::Collection::new("cloud_vms");
pub const CLOUD_DISKS: fleet_store::Collection = fleet_store::Collection::new("cloud_disks");
pub const AGENTS: fleet_store::Collection = fleet_store::Collection::new("agents");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_reproducible_and_spread() {
        assert_eq!(draw(7, "create_vm/a"), draw(7, "create_vm/a"));
        assert_ne!(draw(7, "create_vm/a"), draw(8, "create_vm/a"));
        let mean = (0..1000).map(|i| draw(1, &i.to_string())).sum::<f64>() / 1000.0;
        assert!((0.45..0.55).contains(&mean), "{mean}");
    }
}
