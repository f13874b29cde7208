//! Prints the rollout engine's figures; run with `cargo run --release --example rollout_bench`.
//!
//! (a) Scheduling quality: 1,000 instances with random operation lengths, 5 canaries and
//!     `max_in_parallel` 20, in virtual time. The ideal makespan is the longest canary plus
//!     the larger of (the rest's total work / 20) and the rest's longest operation; the
//!     figure is ideal / actual (target: at least 0.98).
//! (b) Overhead: 100,000 instances whose operations finish at the first poll, in virtual
//!     time so that only the engine's own work is measured (targets: under 2 s of wall time
//!     and under 300 MB peak memory, read from VmHWM).

// Wall time is what (b) measures, so this one place reads the real clock.
#![allow(clippy::disallowed_types)]

use std::io;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use fleet_updater::clock::WallClock;
use fleet_updater::inventory::Instance;
use fleet_updater::inventory::scripted::{ScriptedInventory, Step};
use fleet_updater::output::TextOutput;
use fleet_updater::rollout::{Rate, Rollout, Settings};
use tokio::sync::watch;
use tokio::time::Instant;

/// xorshift64*: reproducible operation lengths without a dependency.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

fn id(i: usize) -> String {
    format!("si-{i:06}")
}

fn makespan_efficiency() {
    const N: usize = 1_000;
    const CANARIES: usize = 5;
    const PARALLEL: usize = 20;
    let mut random = Random(0x0005_EEDF_1EE7);
    let lengths: Vec<Duration> = (0..N)
        .map(|_| Duration::from_secs(random.between(5 * 60, 30 * 60)))
        .collect();
    let inventory = lengths
        .iter()
        .enumerate()
        .fold(ScriptedInventory::new().quiet(), |inv, (i, d)| {
            inv.with(Instance::new(id(i), "plan"), [Step::Runs(*d)])
        });
    // One plan and zero-padded ids: processing order is index order, canaries come first.
    let canary_ideal = lengths[..CANARIES]
        .iter()
        .max()
        .copied()
        .unwrap_or_default();
    let rest = &lengths[CANARIES..];
    let total: Duration = rest.iter().sum();
    let main_ideal = (total / PARALLEL as u32).max(rest.iter().max().copied().unwrap_or_default());
    let ideal = canary_ideal + main_ideal;

    let settings = Settings {
        max_in_parallel: NonZeroUsize::new(PARALLEL).expect("PARALLEL is positive"),
        canaries: CANARIES,
        ..Settings::default()
    };
    let makespan = paused_runtime().block_on(async {
        let rollout = Rollout::new(Arc::new(inventory.clone()), settings, WallClock::new());
        let start = Instant::now();
        let plan = rollout.plan().await.expect("listing succeeds");
        let (_signals, interrupts) = watch::channel(0);
        let report = rollout
            .execute(plan, &mut TextOutput::new(io::sink()), interrupts)
            .await;
        assert!(report.succeeded(), "{:?}", report.counts);
        assert_eq!(report.counts.updated, N);
        Instant::now() - start
    });
    println!(
        "(a) {N} instances, {CANARIES} canaries, max_in_parallel {PARALLEL}, poll every 10s, 10 requests/s: \
         makespan {:.0}s, ideal {:.0}s, efficiency {:.4} (target >= 0.98), peak in flight {}",
        makespan.as_secs_f64(),
        ideal.as_secs_f64(),
        ideal.as_secs_f64() / makespan.as_secs_f64(),
        inventory.peak_running()
    );
}

fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn overhead_at_scale() {
    const N: usize = 100_000;
    let wall = std::time::Instant::now();
    let inventory = (0..N).fold(ScriptedInventory::new().quiet(), |inv, i| {
        inv.with(
            Instance::new(id(i), format!("plan-{}", i % 4)),
            [Step::Accepted],
        )
    });
    let settings = Settings {
        max_in_parallel: NonZeroUsize::new(500).expect("500 is positive"),
        canaries: 5,
        requests_per_second: Rate::UNLIMITED,
        ..Settings::default()
    };
    let updated = paused_runtime().block_on(async {
        let rollout = Rollout::new(Arc::new(inventory), settings, WallClock::new());
        let plan = rollout.plan().await.expect("listing succeeds");
        let (_signals, interrupts) = watch::channel(0);
        let report = rollout
            .execute(plan, &mut TextOutput::new(io::sink()), interrupts)
            .await;
        serde_json::to_writer_pretty(io::sink(), &report).expect("the report serializes");
        report.counts.updated
    });
    let elapsed = wall.elapsed();
    assert_eq!(updated, N);
    println!(
        "(b) {N} instances with instant operations, max_in_parallel 500, events formatted, report serialized: \
         wall time {:.2}s (target < 2s), peak memory {} (target < 300 MB)",
        elapsed.as_secs_f64(),
        peak_memory_mib().map_or("unknown".into(), |m| format!("{m:.0} MiB"))
    );
}

fn main() {
    makespan_efficiency();
    overhead_at_scale();
}
