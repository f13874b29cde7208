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

use std::io;
use std::sync::Arc;
use std::time::Instant;

use fleet_updater::clock::WallClock;
use fleet_updater::config::Config;
use fleet_updater::fleet::{self, Access, DEMO, DEMO_CONFIG, Definition};
use fleet_updater::inventory::embedded::EmbeddedInventory;
use fleet_updater::output::TextOutput;
use fleet_updater::rollout::Rollout;
use tokio::sync::watch;

fn measure(label: &str, definition: Definition) -> f64 {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let settings = Config::parse(DEMO_CONFIG, "demo", std::path::Path::new("."))
        .expect("the demo configuration is valid")
        .settings();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let started = Instant::now();
    let (provisioned, report) = runtime.block_on(async {
        let fleet = fleet::open(
            dir.path(),
            &definition,
            Access::RUN,
            &fleet_updater::store::StoreLocation::Sqlite,
            &mut |_| {},
        )
        .await
        .expect("the fleet opens");
        let provisioned = started.elapsed();
        let inventory = Arc::new(EmbeddedInventory::new(Arc::clone(&fleet.broker)));
        let rollout = Rollout::new(inventory, settings, WallClock::new());
        let plan = rollout.plan().await.expect("listing succeeds");
        let (_signals, interrupts) = watch::channel(0);
        let report = rollout
            .execute(plan, &mut TextOutput::new(io::sink()), interrupts)
            .await;
        (provisioned, report)
    });
    // Closing the store (its last commit and checkpoint) is part of the cost.
    drop(runtime);
    let total = started.elapsed();
    assert!(report.succeeded(), "{:?}", report.counts);
    println!(
        "{label}: {} instances, {} updated: provisioning {:.2}s + update run {:.2}s = {:.2}s wall time",
        report.counts.selected,
        report.counts.updated,
        provisioned.as_secs_f64(),
        (total - provisioned).as_secs_f64(),
        total.as_secs_f64()
    );
    total.as_secs_f64()
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
