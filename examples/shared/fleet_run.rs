//! One run of the embedded fleet as the embedded benchmarks time it: opened (provisioned
//! on first use) in a temporary state directory on `store`, then updated, in a paused
//! runtime so that policy waits elapse in virtual time and the wall time measured is the
//! fleet's own work.

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
use tokio::sync::watch;

/// What one run took.
pub struct Timed {
    pub provisioning: Duration,
    /// Everything, closing the store (its last commit and checkpoint) included.
    pub total: Duration,
    pub counts: Counts,
}

/// Provisions `definition` and runs the demo's update over it.
///
/// # Panics
/// When the fleet cannot be opened or listed, or the update does not succeed.
pub fn run(definition: &Definition, store: &StoreLocation) -> Timed {
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
    let (provisioning, report) = runtime.block_on(async {
        let fleet = fleet::open(dir.path(), definition, Access::RUN, store, &mut |_| {})
            .await
            .expect("the fleet opens");
        let provisioning = started.elapsed();
        let inventory = Arc::new(EmbeddedInventory::new(Arc::clone(&fleet.broker)));
        let rollout = Rollout::new(inventory, settings, WallClock::new());
        let plan = rollout.plan().await.expect("listing succeeds");
        let (_signals, interrupts) = watch::channel(0);
        let report = rollout
            .execute(plan, &mut TextOutput::new(io::sink()), interrupts)
            .await;
        (provisioning, report)
    });
    drop(runtime);
    let total = started.elapsed();
    assert!(report.succeeded(), "{:?}", report.counts);
    Timed {
        provisioning,
        total,
        counts: report.counts,
    }
}
