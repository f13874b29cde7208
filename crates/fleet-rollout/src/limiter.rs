//! One rate limiter for every inventory request of a run.
//!
//! governor's own waiting sleeps on a real-time clock, which would make virtual-time tests
//! wait for real; this limiter gives governor tokio's clock and sleeps with tokio.

// governor's clock speaks `std::time::Instant`; every value of it here comes from tokio's
// clock, so virtual time still holds.
#![allow(clippy::disallowed_types)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use crate::settings::Rate;

/// governor's view of tokio's (possibly paused) clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    type Instant = std::time::Instant;

    fn now(&self) -> Self::Instant {
        tokio::time::Instant::now().into_std()
    }
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<std::time::Instant>>;

/// Spreads requests evenly: with a rate of N per second, no second holds more than N.
///
/// Clones share one budget, so that an inventory which sends several requests for one
/// call (a token, a manifest, a task) takes a token for each, from the run's one limiter.
#[derive(Clone)]
pub struct RequestLimiter {
    /// `None`: unlimited, for benchmarks and tests whose subject is not the rate.
    limiter: Option<Arc<Limiter>>,
    taken: Arc<AtomicU64>,
}

impl RequestLimiter {
    pub fn new(rate: Rate) -> Self {
        let limiter = rate.get().map(|requests_per_second| {
            let period =
                Duration::from_secs_f64(1.0 / requests_per_second).max(Duration::from_nanos(1));
            let quota = Quota::with_period(period).expect("the period is positive");
            Arc::new(RateLimiter::direct_with_clock(quota, TokioClock))
        });
        RequestLimiter {
            limiter,
            taken: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn unlimited() -> Self {
        RequestLimiter::new(Rate::UNLIMITED)
    }

    /// Tokens handed out so far, by this limiter and its clones.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// Waits until the next request may go out.
    pub async fn acquire(&self) {
        self.taken.fetch_add(1, Ordering::Relaxed);
        let Some(limiter) = &self.limiter else {
            return;
        };
        while let Err(not_until) = limiter.check() {
            tokio::time::sleep(not_until.wait_time_from(TokioClock.now())).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn requests_are_spaced_in_virtual_time() {
        let limiter = RequestLimiter::new(Rate::per_second(4.0).unwrap());
        let start = Instant::now();
        for _ in 0..9 {
            limiter.acquire().await;
        }
        assert_eq!(Instant::now() - start, Duration::from_secs(2));
    }
}
