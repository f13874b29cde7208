//! Prints IP management figures; run with `cargo run --release --example ipam_bench`.
//!
//! (a) Every address of a /16 (65,533 instances) allocated dynamically through the
//!     reservation flow, in the in-memory repo (target under 1 s) and, as a deploy with a
//!     cloud config does it, planned against the SQLite store's snapshot and applied in
//!     one transaction.
//! (b) One dynamic allocation in a /24 that is 80% full, averaged over 100,000
//!     allocate-and-release rounds (target under 10 microseconds).

// Wall time is what this measures, so it reads the real clock.
#![allow(clippy::disallowed_types)]

use std::time::Instant;

use fleet_updater::director::network::{
    Desired, InMemoryIpRepo, InstanceNetworks, IpProvider, IpRepo, IpSet, Network, Owner,
    PlannedIpRepo, networks,
};
use fleet_updater::store::{IpClaim, SqliteStore, Store};
use fleet_updater::yaml::{Checker, Limits, load};

fn network(range: &str, gateway: &str) -> Vec<Network> {
    let text = format!(
        "networks:\n- name: default\n  subnets:\n  - {{range: {range}, gateway: {gateway}}}\n"
    );
    let root = load(&text, Limits::default()).expect("valid YAML");
    let mut checker = Checker::new();
    let nets = networks(
        &mut checker,
        root.get("networks").expect("networks"),
        "networks",
        None,
    );
    assert!(checker.is_clean());
    nets
}

fn fill_slash16<R: IpRepo>(label: &str, repo: R) -> R {
    let nets = network("10.0.0.0/16", "10.0.0.1");
    let instances: Vec<InstanceNetworks> = (0..65_533)
        .map(|i| InstanceNetworks {
            owner: Owner {
                deployment: "big".into(),
                instance: format!("i{i}"),
            },
            az: None,
            desired: vec![Desired {
                network: "default".into(),
                static_ip: None,
            }],
            existing: Vec::new(),
        })
        .collect();
    let started = Instant::now();
    let mut provider = IpProvider::new(&nets, IpSet::new(), repo);
    let out = provider.plan(&instances).expect("the /16 holds them all");
    let elapsed = started.elapsed();
    assert_eq!(out.len(), 65_533);
    println!(
        "(a) every address of a /16, {label}: {} instances in {:.3}s",
        out.len(),
        elapsed.as_secs_f64()
    );
    provider.into_repo()
}

fn one_in_slash24() {
    let nets = network("10.1.0.0/24", "10.1.0.1");
    let mut provider = IpProvider::new(&nets, IpSet::new(), InMemoryIpRepo::new());
    for i in 0..203 {
        let owner = Owner {
            deployment: "d".into(),
            instance: format!("held{i}"),
        };
        provider
            .reserve_compilation("default", &owner, None)
            .expect("room");
    }
    let owner = Owner {
        deployment: "d".into(),
        instance: "probe".into(),
    };
    let rounds = 100_000u32;
    let started = Instant::now();
    for _ in 0..rounds {
        let ip = provider
            .reserve_compilation("default", &owner, None)
            .expect("room")
            .expect("an address");
        provider
            .release(
                &owner,
                &fleet_updater::director::network::Held {
                    network: "default".into(),
                    ip,
                },
            )
            .expect("released");
    }
    let per = started.elapsed() / rounds;
    println!(
        "(b) one dynamic allocation (plus its release) in a /24 that is 80% full: {:.2} microseconds (target < 10)",
        per.as_secs_f64() * 1e6
    );
}

fn main() {
    fill_slash16("in-memory repo (target < 1 s)", InMemoryIpRepo::new());
    let store = SqliteStore::in_memory().expect("SQLite");
    let planned = fill_slash16(
        "planned against the SQLite store's snapshot",
        PlannedIpRepo::new(store.claimed().expect("the claimed set"), []),
    );
    let started = Instant::now();
    let (claims, _) = planned.into_changes();
    let claims: Vec<IpClaim> = claims.into_iter().map(IpClaim::from).collect();
    store
        .apply_ips(&claims, &[])
        .expect("SQLite")
        .expect("nobody else claims");
    println!(
        "    and its {} claims applied to SQLite in one transaction in {:.3}s",
        claims.len(),
        started.elapsed().as_secs_f64()
    );
    one_in_slash24();
}
