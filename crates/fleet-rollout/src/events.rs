//! What happens during a run, as it happens. The engine emits these; the output layer
//! turns them into errand lines and logs.

use std::time::{Duration, SystemTime};

use super::report::Outcome;
use crate::inventory::InstanceId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Canaries,
    Main,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Started {
        strategy: &'static str,
        selected: usize,
        eligible: usize,
        canaries: usize,
        max_in_parallel: usize,
    },
    PhaseStarted {
        phase: Phase,
        instances: usize,
    },
    /// A retry round for busy instances begins.
    RoundStarted {
        phase: Phase,
        round: u32,
        instances: usize,
    },
    Triggering {
        id: InstanceId,
        canary: bool,
        attempt: u32,
        max_attempts: u32,
        /// The instance's place among those started, for "n of m".
        position: usize,
        total: usize,
    },
    Accepted {
        id: InstanceId,
        operation: String,
    },
    /// A canary's operation succeeded; its check runs before it counts.
    Checking {
        id: InstanceId,
        check: String,
    },
    Succeeded {
        id: InstanceId,
        after: Duration,
    },
    Failed {
        id: InstanceId,
        canary: bool,
        reason: String,
    },
    /// Skipped, deleted or orphaned: nothing to do, and no failure.
    Settled {
        id: InstanceId,
        outcome: Outcome,
        reason: String,
    },
    Busy {
        id: InstanceId,
        reason: String,
        attempt: u32,
        will_retry: bool,
    },
    Stopping {
        reason: String,
    },
    Progress {
        in_flight: usize,
        finished: usize,
        pending: usize,
        busy_waiting: usize,
        elapsed: Duration,
    },
}

/// Receives the events of a run with the wall-clock time they happened.
pub trait Observer: Send {
    fn on_event(&mut self, at: SystemTime, event: &Event);
}

/// Keeps every event; for tests and tools that inspect a run afterwards.
#[derive(Debug, Default)]
pub struct Recorder {
    pub events: Vec<(SystemTime, Event)>,
}

impl Observer for Recorder {
    fn on_event(&mut self, at: SystemTime, event: &Event) {
        self.events.push((at, event.clone()));
    }
}

/// Discards events; for benchmarks.
#[derive(Debug, Default)]
pub struct Discard;

impl Observer for Discard {
    fn on_event(&mut self, _: SystemTime, _: &Event) {}
}
