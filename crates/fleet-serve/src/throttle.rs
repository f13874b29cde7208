//! Slows password guessing per client address without locking anyone out: after a few
//! failed logins from an address, each request with credentials from it waits its turn,
//! one at a time, spaced by a delay that doubles with every further failure up to a cap.
//! A success from the address clears its record; other addresses are not slowed at all.
//! Requests are spaced before their credentials are checked, so firing many guesses at
//! once gains nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Failures an address may have before its requests are spaced.
const FREE_FAILURES: u32 = 3;
const FIRST_DELAY: Duration = Duration::from_millis(250);
const MAX_DELAY: Duration = Duration::from_secs(4);
/// An address that failed nothing for this long is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);
/// Above this many remembered addresses, the forgotten ones are swept.
const SWEEP_ABOVE: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Record {
    failures: u32,
    /// When the next request with credentials from the address may be checked.
    next: Instant,
    last_failure: Instant,
}

#[derive(Default)]
pub struct LoginThrottle {
    records: Mutex<HashMap<IpAddr, Record>>,
}

fn delay(failures: u32) -> Duration {
    let over = failures.saturating_sub(FREE_FAILURES).min(16);
    FIRST_DELAY.saturating_mul(1 << over).min(MAX_DELAY)
}

impl LoginThrottle {
    /// How long a request with credentials from `ip` arriving at `now` waits before they
    /// are checked; reserves its turn.
    pub fn wait(&self, ip: IpAddr, now: Instant) -> Duration {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let Some(record) = records.get_mut(&ip) else {
            return Duration::ZERO;
        };
        if record.failures < FREE_FAILURES {
            return Duration::ZERO;
        }
        let turn = record.next.max(now);
        record.next = turn + delay(record.failures);
        turn - now
    }

    /// Records the outcome of a check; the failures from the address so far.
    pub fn record(&self, ip: IpAddr, admitted: bool, now: Instant) -> u32 {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if admitted {
            records.remove(&ip);
            return 0;
        }
        if records.len() > SWEEP_ABOVE {
            records.retain(|_, r| now.duration_since(r.last_failure) < FORGET_AFTER);
        }
        let record = records.entry(ip).or_insert(Record {
            failures: 0,
            next: now,
            last_failure: now,
        });
        if now.duration_since(record.last_failure) >= FORGET_AFTER {
            record.failures = 0;
        }
        record.failures += 1;
        record.last_failure = now;
        record.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn guesses_are_spaced_per_address_and_a_success_clears_them() {
        let throttle = LoginThrottle::default();
        let attacker: IpAddr = "192.0.2.7".parse().unwrap();
        let operator: IpAddr = "192.0.2.8".parse().unwrap();
        let now = Instant::now();
        for _ in 0..FREE_FAILURES {
            assert_eq!(throttle.wait(attacker, now), Duration::ZERO);
            throttle.record(attacker, false, now);
        }
        // Fired at once, the next guesses queue one behind the other.
        let waits: Vec<Duration> = (0..4).map(|_| throttle.wait(attacker, now)).collect();
        assert_eq!(waits[0], Duration::ZERO);
        assert!(waits.windows(2).all(|w| w[1] > w[0]), "{waits:?}");
        assert_eq!(waits[1], FIRST_DELAY);
        // The delay doubles with each failure, up to the cap.
        for _ in 0..20 {
            throttle.record(attacker, false, now);
        }
        let later = now + Duration::from_secs(600);
        throttle.wait(attacker, later);
        assert_eq!(throttle.wait(attacker, later), MAX_DELAY);
        // Another address is not slowed.
        assert_eq!(throttle.wait(operator, later), Duration::ZERO);
        // The right password from the attacker's address still gets in, then clears it.
        throttle.record(attacker, true, later);
        assert_eq!(throttle.wait(attacker, later), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_quiet_long_enough_starts_over() {
        let throttle = LoginThrottle::default();
        let ip: IpAddr = "192.0.2.9".parse().unwrap();
        let now = Instant::now();
        for _ in 0..10 {
            throttle.record(ip, false, now);
        }
        assert_eq!(throttle.record(ip, false, now + FORGET_AFTER), 1);
    }
}
