//! One run of the embedded fleet as the embedded benchmarks time it: opened (provisioned
//! on first use) in a temporary state directory on `store`, then updated, in a paused
//! runtime so that policy waits elapse in virtual time and the wall time measured is the
//! fleet's own work; then, for each edit, opened again on the same state with the edited
//! definition and updated again, on top of the first run's history.

// Each benchmark that includes this reads the part of a run it reports.
#![allow(dead_code)]

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet_updater::clock::WallClock;
use fleet_updater::config::Config;
use fleet_updater::fleet::{self, Access, DEMO_CONFIG, Definition};
use fleet_updater::inventory::embedded::EmbeddedInventory;
use fleet_updater::output::TextOutput;
use fleet_updater::rollout::{Counts, Rollout};
use fleet_updater::store::StoreLocation;
use fleet_updater::store::statement_times::{self, StatementTime};
use tokio::sync::watch;

/// What one run took.
pub struct Timed {
    pub provisioning: Duration,
    /// Everything, closing the store (its last commit and checkpoint) included.
    pub total: Duration,
    /// As [`Again::update_cpu`], for the first update run.
    pub update_cpu: Duration,
    pub counts: Counts,
    /// As [`Again::statements`], for provisioning and the first update run.
    pub statements: Vec<StatementTime>,
    /// Each later run: opening the fleet with its edit, and that and updating it.
    pub again: Vec<Again>,
}

/// A run on the state an earlier one left.
pub struct Again {
    pub opening: Duration,
    pub total: Duration,
    /// The CPU time the update run took (all of this process's threads): the machine's
    /// noise, which swings wall times by a fifth, moves it less.
    pub update_cpu: Duration,
    pub counts: Counts,
    /// What SQLite's statements took in this run, when the benchmark records them
    /// ([`statement_times::record`]).
    pub statements: Vec<StatementTime>,
}

/// Provisions `definition` and runs the demo's update over it, then over each of `edits`
/// in turn.
///
/// # Panics
/// When the fleet cannot be opened or listed, or an update does not succeed.
pub fn run(definition: &Definition, store: &StoreLocation, edits: &[Definition]) -> Timed {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let settings = Config::parse(DEMO_CONFIG, "demo", std::path::Path::new("."))
        .expect("the demo configuration is valid")
        .settings();
    // A runtime of its own for each run: what a run left running (the director's
    // background tasks) ends with it, the store closing (its last commit and checkpoint)
    // within the run's time.
    let update = |definition: &Definition, opened: &mut dyn FnMut()| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let fleet = fleet::open(dir.path(), definition, Access::RUN, store, &mut |_| {})
                .await
                .expect("the fleet opens");
            opened();
            let inventory = Arc::new(EmbeddedInventory::new(Arc::clone(&fleet.broker)));
            let rollout = Rollout::new(inventory, settings.clone(), WallClock::new());
            let plan = rollout.plan().await.expect("listing succeeds");
            let (_signals, interrupts) = watch::channel(0);
            let report = rollout
                .execute(plan, &mut TextOutput::new(io::sink()), interrupts)
                .await;
            assert!(report.succeeded(), "{:?}", report.counts);
            report.counts
        })
    };
    let started = Instant::now();
    let mut provisioning = Duration::ZERO;
    let mut cpu = Duration::ZERO;
    let counts = update(definition, &mut || {
        provisioning = started.elapsed();
        cpu = cpu_time();
    });
    let update_cpu = cpu_time().saturating_sub(cpu);
    let statements = statement_times::take();
    let total = started.elapsed();
    let again = edits
        .iter()
        .map(|edited| {
            let started = Instant::now();
            let (mut opening, mut cpu) = (Duration::ZERO, Duration::ZERO);
            let counts = update(edited, &mut || {
                opening = started.elapsed();
                cpu = cpu_time();
            });
            Again {
                opening,
                total: started.elapsed(),
                update_cpu: cpu_time().saturating_sub(cpu),
                counts,
                statements: statement_times::take(),
            }
        })
        .collect();
    Timed {
        provisioning,
        total,
        update_cpu,
        counts,
        statements,
        again,
    }
}

/// The CPU time this process has taken so far, user and system, from `/proc/self/stat`
/// (its 14th and 15th fields, in the kernel's ticks of 10 ms); zero where there is none.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's name, which may hold spaces, start with the 3rd.
    let after_name = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |field: usize| {
        fields
            .get(field - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(14) + ticks(15)) * 10)
}
