//! How director processes sharing one database tell the living from the dead: each is a
//! runner with a lease it renews, as BOSH's director renews its deployment locks. A
//! runner whose lease ran out is gone; its tasks are errored and its locks released by
//! whoever notices first.

/// A span of time a runner or a lock is held for, in Unix milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Unix milliseconds, by the caller's clock: what the store stamps a task created
    /// with this lease with, and compares expiries against.
    pub now: u64,
    pub until: u64,
}

impl Lease {
    /// A lease that never runs out: for a store only one process uses, where a restart
    /// recovers everything the previous process left.
    pub fn forever(now: u64) -> Lease {
        Lease {
            now,
            until: i64::MAX as u64,
        }
    }

    /// `until` as the databases keep it.
    pub(crate) fn until_stored(&self) -> i64 {
        i64::try_from(self.until).unwrap_or(i64::MAX)
    }

    pub(crate) fn now_stored(&self) -> i64 {
        i64::try_from(self.now).unwrap_or(i64::MAX)
    }
}

/// What a renewal found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Renewal {
    /// This runner's tasks that another process asked to cancel.
    pub cancelling: Vec<u64>,
    /// The runner had been given up for dead and registered anew: its tasks were errored
    /// and its locks released meanwhile, so what it still runs holds nothing.
    pub was_lost: bool,
}

/// Whether a store handle's runner has been registered: a renewal that has to register
/// it again tells that it was given up for dead meanwhile.
#[derive(Debug, Default)]
pub(crate) struct Registration(std::sync::atomic::AtomicBool);

impl Registration {
    /// What a renewal found, given whether it had to insert the runner's row.
    pub(crate) fn renewed(&self, inserted: bool, cancelling: Vec<u64>) -> Renewal {
        let was_registered = self.0.swap(true, std::sync::atomic::Ordering::SeqCst);
        Renewal {
            cancelling,
            was_lost: inserted && was_registered,
        }
    }
}

/// Whose tasks a recovery ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Every other runner's: this process holds the store alone (a state directory's
    /// lock), so nobody else runs anything.
    AllOthers,
    /// Only those of runners whose lease ran out.
    Expired,
}

/// A fresh runner id: random, so that a restarted process is never taken for the one
/// that died.
pub fn new_runner_id() -> String {
    uuid::Uuid::new_v4().to_string()
}
