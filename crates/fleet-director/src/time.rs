//! The wall clock in Unix seconds, as tasks and events are stamped; the bottom of the
//! director, so that tracing and tasks read it without reading each other.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
