//! Wall-clock time derived from tokio's clock.
//!
//! Reports carry wall-clock timestamps, but engine logic must run in virtual time under
//! test. A `WallClock` anchors tokio's monotonic clock to the system time once, so that
//! timestamps advance with virtual time in tests and with real time in production.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    anchor_system: SystemTime,
    anchor_instant: Instant,
}

impl WallClock {
    pub fn new() -> Self {
        Self::anchored_at(SystemTime::now())
    }

    /// A clock that reads `at` now; tests use it for reproducible timestamps.
    pub fn anchored_at(at: SystemTime) -> Self {
        WallClock {
            anchor_system: at,
            anchor_instant: Instant::now(),
        }
    }

    pub fn now(&self) -> SystemTime {
        self.at(Instant::now())
    }

    pub fn at(&self, instant: Instant) -> SystemTime {
        self.anchor_system + instant.saturating_duration_since(self.anchor_instant)
    }

    /// Now in Unix seconds, as records keep time.
    pub fn unix_secs(&self) -> u64 {
        self.since_epoch().as_secs()
    }

    /// Now in Unix milliseconds, as leases keep time.
    pub fn unix_millis(&self) -> u64 {
        u64::try_from(self.since_epoch().as_millis()).unwrap_or(u64::MAX)
    }

    fn since_epoch(&self) -> Duration {
        self.now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
    }
}

impl Default for WallClock {
    fn default() -> Self {
        Self::new()
    }
}

/// RFC 3339 in UTC with whole seconds, the form reports and log lines use.
pub fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// [`rfc3339`] of a time kept as Unix seconds, as records keep them.
pub fn rfc3339_unix(secs: u64) -> String {
    rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// `1h2m3s`-style text for elapsed times in output lines.
pub fn short(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s:02}s"),
        _ => format!("{h}h{m:02}m{s:02}s"),
    }
}

/// Waits that double from `first` up to `max`: how the project spaces every retry of a
/// request or a store write, every restart of a failing process and every throttled login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doubling {
    pub first: Duration,
    pub max: Duration,
}

impl Doubling {
    /// The wait after `failures` failures in a row (the first failure waits `first`),
    /// never over `max`, and never overflowing however many failures there were.
    pub fn after(self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.first.saturating_mul(factor).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_wall_clock_follows_virtual_time() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let clock = WallClock::anchored_at(start);
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(clock.now(), start + Duration::from_secs(90));
        assert_eq!(rfc3339(clock.now()), "2027-01-15T08:01:30Z");
    }

    #[test]
    fn waits_double_up_to_their_cap_and_never_overflow() {
        let d = Doubling {
            first: Duration::from_millis(250),
            max: Duration::from_secs(4),
        };
        let waits: Vec<u128> = (0..8).map(|n| d.after(n).as_millis()).collect();
        assert_eq!(waits, [250, 250, 500, 1000, 2000, 4000, 4000, 4000]);
        assert_eq!(d.after(u32::MAX), Duration::from_secs(4));
        let unbounded = Doubling {
            first: Duration::from_secs(1),
            max: Duration::MAX,
        };
        assert_eq!(
            unbounded.after(40),
            Duration::from_secs(u64::from(u32::MAX))
        );
    }

    #[test]
    fn short_durations_read_naturally() {
        assert_eq!(short(Duration::from_millis(250)), "250ms");
        assert_eq!(short(Duration::from_secs(42)), "42s");
        assert_eq!(short(Duration::from_secs(125)), "2m05s");
        assert_eq!(short(Duration::from_secs(7384)), "2h03m04s");
    }
}
