//! Where the store's time goes, statement by statement, for benchmarks that must find what
//! grows with the state before they fix it (the task pruning that once made a
//! 10,000-instance run three quarters pruning showed here first). Off unless a benchmark
//! turns it on: the store is opened deep inside the fleet it measures, so the switch and
//! the tally are the process's, not a store's. SQLite's statements are timed by SQLite
//! itself; PostgreSQL's as the client waits for them (the round trip included), with
//! `BEGIN` and `COMMIT` counted as the statements they are.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::trace::{TraceEvent, TraceEventCodes};

/// One statement's share of the time since the tally was last taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementTime {
    /// The statement's text, its whitespace folded.
    pub sql: String,
    pub runs: u64,
    /// SQLite's own measure of the runs' time; for PostgreSQL, the client's.
    pub total: Duration,
}

static ON: AtomicBool = AtomicBool::new(false);
static TALLY: LazyLock<Mutex<HashMap<String, (u64, Duration)>>> = LazyLock::new(Default::default);

/// Times every statement of the SQLite stores opened from now on.
pub fn record() {
    ON.store(true, Ordering::SeqCst);
}

/// The statements run since the last call (or since [`record`]), the longest first; the
/// tally starts again.
pub fn take() -> Vec<StatementTime> {
    let tally = std::mem::take(&mut *TALLY.lock().unwrap_or_else(|p| p.into_inner()));
    let mut times: Vec<StatementTime> = tally
        .into_iter()
        .map(|(sql, (runs, total))| StatementTime { sql, runs, total })
        .collect();
    times.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.sql.cmp(&b.sql)));
    times
}

/// Whether statements are being timed.
pub(crate) fn recording() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Adds a run of `sql` that took `took` to the tally.
pub(crate) fn note(sql: &str, took: Duration) {
    let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut tally = TALLY.lock().unwrap_or_else(|p| p.into_inner());
    let entry = tally.entry(sql).or_default();
    entry.0 += 1;
    entry.1 += took;
}

/// Has `connection` report each statement's time to the tally, when [`record`] was called.
pub(crate) fn attach(connection: &mut Connection) -> rusqlite::Result<()> {
    if !ON.load(Ordering::SeqCst) {
        return Ok(());
    }
    connection.trace_v2(
        TraceEventCodes::SQLITE_TRACE_PROFILE,
        Some(|event: TraceEvent<'_>| {
            if let TraceEvent::Profile(statement, took) = event {
                note(&statement.sql(), took);
            }
        }),
    )
}
