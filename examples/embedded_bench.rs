//! Prints the embedded fleet's figures; run with `cargo run --release --example embedded_bench`
//! (followed by `a`, `b` or `c` for some of them).
//!
//! Both rollouts run the real director, broker and SQLite store in a temporary state
//! directory, with every simulated latency at zero. Waits that are policy, not work (watch
//! times, poll and retry intervals) elapse in virtual time, so the wall time measured is
//! what the embedded fleet itself costs.
//! (a) the demo fleet (30 instances): provisioning and the update run; target under 1 s.
//! (b) 1,000 instances (600 single-VM, 400 three-node clusters): target under 10 s.
//! (c) 10,000 instances (6,000 single-VM, 4,000 three-node clusters, 18,000 VMs on a /12):
//!     target under 40 s, and at most 12 times (b): the cost grows with the fleet, not
//!     with the fleet times its task history.

// Wall time is what this measures, so it reads the real clock.
#![allow(clippy::disallowed_types)]

#[path = "shared/fleet_run.rs"]
mod fleet_run;

use fleet_updater::fleet::{DEMO, Definition};
use fleet_updater::store::StoreLocation;

fn measure(label: &str, definition: Definition) -> f64 {
    let timed = fleet_run::run(&definition, &StoreLocation::Sqlite);
    println!(
        "{label}: {} instances, {} updated: provisioning {:.2}s + update run {:.2}s = {:.2}s wall time",
        timed.counts.selected,
        timed.counts.updated,
        timed.provisioning.as_secs_f64(),
        (timed.total - timed.provisioning).as_secs_f64(),
        timed.total.as_secs_f64()
    );
    timed.total.as_secs_f64()
}

fn main() {
    // `embedded_bench b` measures (b) alone; without arguments, every figure.
    let only: Vec<String> = std::env::args().skip(1).collect();
    let wanted = |figure: &str| only.is_empty() || only.iter().any(|o| o == figure);
    let demo = Definition::parse(DEMO)
        .expect("the demo fleet is valid")
        .without_latency();
    if wanted("a") {
        measure("(a) demo fleet, zero latency (target < 1 s)", demo.clone());
    }
    let mut large = demo.clone();
    large.provision[0].count = 600;
    large.provision[1].count = 400;
    // (b) is short enough for the machine's noise to swing it by a sixth: the ratio
    // divides by the median of three.
    let thousand = wanted("b").then(|| {
        let mut times: Vec<f64> = (0..3)
            .map(|_| {
                measure(
                    "(b) 1,000 instances, zero latency (target < 10 s)",
                    large.clone(),
                )
            })
            .collect();
        times.sort_by(f64::total_cmp);
        times[1]
    });
    if !wanted("c") {
        return;
    }

    let mut huge = demo;
    huge.provision[0].count = 6_000;
    huge.provision[1].count = 4_000;
    // 18,000 VMs do not fit the demo's /20.
    huge.cloud_config = huge
        .cloud_config
        .map(|c| c.replace("10.244.0.0/20", "10.240.0.0/12"));
    let ten_thousand = measure("(c) 10,000 instances, zero latency (target < 40 s)", huge);
    if let Some(thousand) = thousand {
        println!(
            "(c)/(b): {:.1} times the (b) median for 10 times the instances (target at most 12)",
            ten_thousand / thousand
        );
    }
}
