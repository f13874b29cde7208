use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

use crate::inventory::{Action, Selection};

/// What the rollout does to the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Redeploy the instances of `instance_type`; blocked instances only with `force`.
    Update {
        instance_type: Selection,
        force: bool,
    },
    /// Recreate every instance that is not deleted; blocked instances only with `force`
    /// (a NATS certificate rotation needs it: a VM left out becomes unreachable).
    Recreate { fix: bool, force: bool },
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Update { .. } => "update",
            Strategy::Recreate { .. } => "recreate",
        }
    }

    pub fn action(self) -> Action {
        match self {
            Strategy::Update { .. } => Action::Update,
            Strategy::Recreate { fix, .. } => Action::Recreate { fix },
        }
    }

    /// Whether instances whose owner blocked updates are triggered anyway.
    pub fn force(self) -> bool {
        match self {
            Strategy::Update { force, .. } | Strategy::Recreate { force, .. } => force,
        }
    }

    /// What to ask the inventory for.
    pub fn selection(self) -> Selection {
        match self {
            Strategy::Update { instance_type, .. } => instance_type,
            Strategy::Recreate { .. } => Selection::All,
        }
    }
}

/// Retries of requests that failed without effect (connection refused, 5xx on a read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Tries in all, the first included.
    pub attempts: u32,
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            attempts: 5,
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
        }
    }
}

/// Inventory requests per second over a whole run: a positive, finite number, or no limit.
/// A rate of zero would stall the limiter and a NaN would poison it, so neither can be made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate(Option<f64>);

#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("a rate must be a positive, finite number of requests per second, got {0}")]
pub struct InvalidRate(pub f64);

impl Rate {
    /// No limit, for benchmarks and tests whose subject is not the rate.
    pub const UNLIMITED: Rate = Rate(None);

    /// # Errors
    /// When `requests` is zero, negative, infinite or NaN.
    pub fn per_second(requests: f64) -> Result<Rate, InvalidRate> {
        if requests.is_finite() && requests > 0.0 {
            Ok(Rate(Some(requests)))
        } else {
            Err(InvalidRate(requests))
        }
    }

    /// Requests per second; `None` without a limit.
    pub fn get(self) -> Option<f64> {
        self.0
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(rate) => write!(f, "{rate}"),
            None => f.write_str("unlimited"),
        }
    }
}

/// Everything the engine needs to know, already validated; the configuration file and the
/// CLI flags are resolved into this before the engine starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub strategy: Strategy,
    pub max_in_parallel: NonZeroUsize,
    pub canaries: usize,
    /// Listing criteria the canaries are chosen among (ODB's `canary_selection_params`):
    /// empty, any instance may be a canary.
    pub canary_selection: crate::inventory::Criteria,
    /// Which listed instances the run may touch, and which go right after the canaries.
    pub filter: crate::filter::InstanceFilter,
    /// Triggers per instance while it answers busy, the first included.
    pub busy_attempts: u32,
    /// Time between the end of one busy-retry round and the start of the next.
    pub busy_interval: Duration,
    pub poll_interval: Duration,
    /// From acceptance to a final state; past it the operation counts as failed.
    pub operation_timeout: Duration,
    /// Inventory requests over the whole run, spread evenly.
    pub requests_per_second: Rate,
    pub backoff: Backoff,
    /// How often a progress line is printed while the run waits.
    pub progress_interval: Duration,
    /// After SIGINT/SIGTERM, how long in-flight operations are still watched.
    pub grace_period: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            strategy: Strategy::Update {
                instance_type: Selection::Outdated,
                force: false,
            },
            max_in_parallel: NonZeroUsize::MIN,
            canaries: 0,
            canary_selection: Default::default(),
            filter: Default::default(),
            busy_attempts: 5,
            busy_interval: Duration::from_secs(60),
            poll_interval: Duration::from_secs(10),
            operation_timeout: Duration::from_secs(2 * 3600),
            requests_per_second: Rate(Some(10.0)),
            backoff: Backoff::default(),
            progress_interval: Duration::from_secs(30),
            grace_period: Duration::from_secs(300),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_positive_and_finite() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Rate::per_second(bad).is_err(), "{bad}");
        }
        assert_eq!(Rate::per_second(2.5).unwrap().get(), Some(2.5));
        assert_eq!(Rate::UNLIMITED.get(), None);
    }
}
