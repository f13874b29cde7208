//! Slows password guessing per client address and user name without locking anyone out:
//! after a few failed logins as a user from an address, each request with credentials for
//! that user from it waits its turn, one at a time, spaced by a delay that doubles with
//! every further failure up to a cap. A success as that user from the address clears its
//! record; other users and addresses are not slowed. Requests are spaced before their
//! credentials are checked, so firing many guesses at once gains nothing, and a turn is
//! never reserved further ahead than the cap, so the queue cannot grow into a lock-out.
//! IPv6 addresses count by their /64, which one client usually holds whole.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Failures an address may have before its requests are spaced.
const FREE_FAILURES: u32 = 3;
const FIRST_DELAY: Duration = Duration::from_millis(250);
const MAX_DELAY: Duration = Duration::from_secs(4);
/// An address that failed nothing for this long is forgotten.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);
/// Above this many remembered clients, the forgotten ones are swept, once a minute at most.
const SWEEP_ABOVE: usize = 4096;
/// Never more remembered than this: the least failed go first.
const MAX_RECORDS: usize = 65_536;

/// Who is throttled: an address (IPv6 by its /64) and the user name it tried.
pub(crate) type Key = (IpAddr, String);

pub(crate) fn key(ip: IpAddr, user: &str) -> Key {
    let ip = match ip {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    };
    (ip, user.chars().take(64).collect())
}

#[derive(Debug, Clone, Copy)]
struct Record {
    failures: u32,
    /// When the next request with credentials from the address may be checked.
    next: Instant,
    last_failure: Instant,
}

#[derive(Default)]
pub struct LoginThrottle {
    records: Mutex<Records>,
}

#[derive(Default)]
struct Records {
    by_client: HashMap<Key, Record>,
    swept: Option<Instant>,
}

fn delay(failures: u32) -> Duration {
    fleet_clock::Doubling {
        first: FIRST_DELAY,
        max: MAX_DELAY,
    }
    .after(failures.saturating_sub(FREE_FAILURES) + 1)
}

impl LoginThrottle {
    /// How long a request with credentials from `ip` arriving at `now` waits before they
    /// are checked; reserves its turn.
    pub fn wait(&self, ip: IpAddr, user: &str, now: Instant) -> Duration {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let Some(record) = records.by_client.get_mut(&key(ip, user)) else {
            return Duration::ZERO;
        };
        if record.failures < FREE_FAILURES {
            return Duration::ZERO;
        }
        // Requests that gave up (timed out, closed) keep their turns; the queue is never
        // let grow past one delay ahead, so the right user waits at most that.
        let turn = record.next.max(now).min(now + MAX_DELAY);
        record.next = turn + delay(record.failures);
        turn - now
    }

    /// The failures of `ip` as `user` so far.
    pub fn failures(&self, ip: IpAddr, user: &str) -> u32 {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records
            .by_client
            .get(&key(ip, user))
            .map_or(0, |r| r.failures)
    }

    /// Raises the failures of `ip` as `user` to `failures` (those other `serve` processes
    /// on the database counted, [`crate::shared_throttle`]), as if the ones not seen here
    /// had failed here at `now`; fewer change nothing.
    pub fn adopt(&self, ip: IpAddr, user: &str, failures: u32, now: Instant) {
        if failures == 0 {
            return;
        }
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.by_client.len() >= MAX_RECORDS {
            return;
        }
        let record = records.by_client.entry(key(ip, user)).or_insert(Record {
            failures: 0,
            next: now,
            last_failure: now,
        });
        if failures > record.failures {
            // Spaced as if the failures it did not see had been here, just now.
            record.failures = failures;
            record.last_failure = now;
            if failures >= FREE_FAILURES {
                record.next = record.next.max(now + delay(failures));
            }
        }
    }

    /// Records the outcome of a check; the failures from the address so far.
    pub fn record(&self, ip: IpAddr, user: &str, admitted: bool, now: Instant) -> u32 {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let key = key(ip, user);
        if admitted {
            records.by_client.remove(&key);
            return 0;
        }
        let due = records
            .swept
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(60));
        if records.by_client.len() > SWEEP_ABOVE && due {
            records.swept = Some(now);
            records
                .by_client
                .retain(|_, r| now.duration_since(r.last_failure) < FORGET_AFTER);
        }
        if records.by_client.len() >= MAX_RECORDS {
            // The least failed are forgotten first: a guesser keeps its delay.
            records.by_client.retain(|_, r| r.failures > FREE_FAILURES);
        }
        let record = records.by_client.entry(key).or_insert(Record {
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
            assert_eq!(throttle.wait(attacker, "admin", now), Duration::ZERO);
            throttle.record(attacker, "admin", false, now);
        }
        // Fired at once, the next guesses queue one behind the other.
        let waits: Vec<Duration> = (0..4)
            .map(|_| throttle.wait(attacker, "admin", now))
            .collect();
        assert_eq!(waits[0], Duration::ZERO);
        assert!(waits.windows(2).all(|w| w[1] > w[0]), "{waits:?}");
        assert_eq!(waits[1], FIRST_DELAY);
        // The delay doubles with each failure, up to the cap.
        for _ in 0..20 {
            throttle.record(attacker, "admin", false, now);
        }
        let later = now + Duration::from_secs(600);
        throttle.wait(attacker, "admin", later);
        assert_eq!(throttle.wait(attacker, "admin", later), MAX_DELAY);
        // However many requests queued and gave up, a turn is never further than the cap.
        for _ in 0..100 {
            throttle.wait(attacker, "admin", later);
        }
        assert!(throttle.wait(attacker, "admin", later) <= MAX_DELAY);
        // Another address, and another user from the same address, are not slowed.
        assert_eq!(throttle.wait(operator, "admin", later), Duration::ZERO);
        assert_eq!(throttle.wait(attacker, "ops", later), Duration::ZERO);
        // Another user's success does not clear the guessed user's record.
        throttle.record(attacker, "ops", true, later);
        assert!(throttle.wait(attacker, "admin", later) > Duration::ZERO);
        // The right password for the user from the attacker's address clears it.
        throttle.record(attacker, "admin", true, later);
        assert_eq!(throttle.wait(attacker, "admin", later), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_quiet_long_enough_starts_over() {
        let throttle = LoginThrottle::default();
        let ip: IpAddr = "192.0.2.9".parse().unwrap();
        let now = Instant::now();
        for _ in 0..10 {
            throttle.record(ip, "admin", false, now);
        }
        assert_eq!(throttle.record(ip, "admin", false, now + FORGET_AFTER), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_ipv6_client_counts_by_its_64() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        for i in 0..FREE_FAILURES + 1 {
            let ip: IpAddr = format!("2001:db8:1:2::{i:x}").parse().unwrap();
            throttle.record(ip, "admin", false, now);
        }
        let other: IpAddr = "2001:db8:1:2::ffff".parse().unwrap();
        throttle.wait(other, "admin", now);
        assert!(throttle.wait(other, "admin", now) > Duration::ZERO);
    }
}
