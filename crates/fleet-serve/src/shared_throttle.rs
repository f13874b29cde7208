//! The login throttle's failures where every `serve` process on one database sees them: a
//! guesser spreading its guesses over the processes behind a load balancer meets the delay
//! its failures on all of them earned. Each process keeps its own queue of turns
//! ([`crate::throttle`]); what they share is how many times a client failed as a user,
//! read from the store at most once a second per client and user, and written with each
//! failure. Only failures as a user `serve` knows are kept: a name that is no user cannot
//! be logged in as, so its guesses need no memory beyond the process's, and the records
//! stay as few as the clients that tried real names. One process alone on its state
//! directory keeps them in memory only.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use fleet_clock::WallClock;
use fleet_store::{AsyncStore, Collection, StoreError};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::throttle::{FORGET_AFTER, Key, key};

pub const LOGIN_FAILURES: Collection = Collection::new("login_failures");

/// How long a client's shared failures, once read, are taken as they were.
const READ_EVERY: Duration = Duration::from_secs(1);
/// Between two sweeps of the records nobody added to for [`FORGET_AFTER`].
const SWEEP_EVERY: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Failures {
    failures: u32,
    /// Unix milliseconds.
    last_failure: u64,
}

pub struct SharedFailures {
    store: AsyncStore,
    clock: WallClock,
    /// When each client's record was last read.
    read: Mutex<HashMap<Key, Instant>>,
    swept: Mutex<Option<Instant>>,
}

/// The record's key: the address (an IPv6 one by its /64) and the name, apart.
fn record_key(ip: IpAddr, user: &str) -> String {
    let (ip, user) = key(ip, user);
    format!("{ip} {user}")
}

impl SharedFailures {
    pub fn new(store: AsyncStore) -> Self {
        SharedFailures {
            store,
            clock: WallClock::new(),
            read: Mutex::default(),
            swept: Mutex::default(),
        }
    }

    /// The failures the processes counted for `ip` as `user` and not yet forgotten,
    /// unless read less than a second ago (`None`: what was read then holds).
    ///
    /// # Errors
    /// A store error.
    pub async fn recent(&self, ip: IpAddr, user: &str) -> Result<Option<u32>, StoreError> {
        let now = Instant::now();
        {
            let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
            let client = key(ip, user);
            if read
                .get(&client)
                .is_some_and(|at| now.duration_since(*at) < READ_EVERY)
            {
                return Ok(None);
            }
            if read.len() > 4096 {
                read.retain(|_, at| now.duration_since(*at) < READ_EVERY);
            }
            read.insert(client, now);
        }
        let stored: Option<Failures> = self
            .store
            .get(LOGIN_FAILURES, &record_key(ip, user))
            .await?;
        Ok(Some(live(stored, self.clock.unix_millis())))
    }

    /// Counts a failure of `ip` as `user`; the failures counted so far by every process.
    /// Two processes counting at the same moment may count one.
    ///
    /// # Errors
    /// A store error.
    pub async fn failed(&self, ip: IpAddr, user: &str) -> Result<u32, StoreError> {
        let unix_ms = self.clock.unix_millis();
        let record = record_key(ip, user);
        let stored: Option<Failures> = self.store.get(LOGIN_FAILURES, &record).await?;
        let failures = live(stored, unix_ms) + 1;
        let body = Failures {
            failures,
            last_failure: unix_ms,
        };
        self.store
            .write(vec![fleet_store::put(LOGIN_FAILURES, &record, "", &body)])
            .await?;
        self.sweep(unix_ms).await?;
        Ok(failures)
    }

    /// Forgets the failures of `ip` as `user`: it logged in.
    ///
    /// # Errors
    /// A store error.
    pub async fn cleared(&self, ip: IpAddr, user: &str) -> Result<(), StoreError> {
        self.store
            .write(vec![fleet_store::remove(
                LOGIN_FAILURES,
                &record_key(ip, user),
            )])
            .await
    }

    /// Deletes the records nobody added to for [`FORGET_AFTER`], every quarter of an
    /// hour at most.
    async fn sweep(&self, unix_ms: u64) -> Result<(), StoreError> {
        let now = Instant::now();
        {
            let mut swept = self.swept.lock().unwrap_or_else(|p| p.into_inner());
            if swept.is_some_and(|at| now.duration_since(at) < SWEEP_EVERY) {
                return Ok(());
            }
            *swept = Some(now);
        }
        let mut gone = Vec::new();
        for record in self.store.keys(LOGIN_FAILURES).await? {
            let stored: Option<Failures> = self.store.get(LOGIN_FAILURES, &record).await?;
            if live(stored, unix_ms) == 0 {
                gone.push(fleet_store::remove(LOGIN_FAILURES, &record));
            }
        }
        self.store.write(gone).await
    }
}

/// The failures a record holds, none once [`FORGET_AFTER`] passed since its last.
fn live(stored: Option<Failures>, unix_ms: u64) -> u32 {
    let forget = u64::try_from(FORGET_AFTER.as_millis()).unwrap_or(u64::MAX);
    stored
        .filter(|f| unix_ms.saturating_sub(f.last_failure) < forget)
        .map_or(0, |f| f.failures)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fleet_store::{PgStore, SqliteStore, Store, testing};

    use super::*;
    use crate::throttle::LoginThrottle;

    /// Two handles on one database, as two `serve` processes have: PostgreSQL where
    /// `FLEET_TEST_POSTGRES` names one, else one SQLite file.
    fn two_stores() -> (AsyncStore, AsyncStore, Option<tempfile::TempDir>) {
        match testing::postgres() {
            Some(database) => {
                let at = testing::fresh_schema(&database);
                let connect = || -> Arc<dyn Store> { Arc::new(PgStore::connect(&at).unwrap()) };
                (connect().into(), connect().into(), None)
            }
            None => {
                let dir = tempfile::tempdir().unwrap();
                let open =
                    || -> Arc<dyn Store> { Arc::new(SqliteStore::open(dir.path()).unwrap()) };
                (open().into(), open().into(), Some(dir))
            }
        }
    }

    /// One `serve` process's side: its own throttle, the shared failures.
    struct Process {
        throttle: LoginThrottle,
        shared: SharedFailures,
    }

    impl Process {
        /// A request with credentials as `user`: the wait it was given, and whether it
        /// got in, as the gate does it.
        async fn login(&self, ip: IpAddr, user: &str, right: bool) -> Duration {
            if let Some(failures) = self.shared.recent(ip, user).await.unwrap() {
                self.throttle.adopt(ip, user, failures, Instant::now());
            }
            let wait = self.throttle.wait(ip, user, Instant::now());
            tokio::time::sleep(wait).await;
            let before = self.throttle.failures(ip, user);
            self.throttle.record(ip, user, right, Instant::now());
            if right {
                if before > 0 {
                    self.shared.cleared(ip, user).await.unwrap();
                }
            } else {
                let counted = self.shared.failed(ip, user).await.unwrap();
                self.throttle.adopt(ip, user, counted, Instant::now());
            }
            wait
        }
    }

    #[tokio::test(start_paused = true)]
    async fn failures_on_one_process_slow_the_same_guesser_on_another_until_it_logs_in() {
        let (a, b, _dir) = two_stores();
        let process = |store| Process {
            throttle: LoginThrottle::default(),
            shared: SharedFailures::new(store),
        };
        let (a, b) = (process(a), process(b));
        let ip: IpAddr = "203.0.113.7".parse().unwrap();
        for _ in 0..4 {
            a.login(ip, "admin", false).await;
        }
        // b never saw this client fail, yet spaces its guesses as a did.
        let waited = b.login(ip, "admin", false).await;
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        tokio::time::sleep(READ_EVERY).await;
        assert_eq!(a.shared.recent(ip, "admin").await.unwrap(), Some(5));
        // Others are not slowed: another address, another user.
        let elsewhere: IpAddr = "203.0.113.8".parse().unwrap();
        assert_eq!(b.login(elsewhere, "admin", true).await, Duration::ZERO);
        assert_eq!(b.shared.recent(ip, "reader").await.unwrap(), Some(0));
        // The right password through b clears the record for a too.
        b.login(ip, "admin", true).await;
        tokio::time::sleep(READ_EVERY).await;
        assert_eq!(a.shared.recent(ip, "admin").await.unwrap(), Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_nobody_added_to_for_a_quarter_hour_counts_nothing_and_is_swept() {
        let (a, b, _dir) = two_stores();
        let (a, b) = (SharedFailures::new(a), SharedFailures::new(b));
        let ip: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        // The same /64 is the same client.
        let same: IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
        assert_eq!(a.failed(ip, "admin").await.unwrap(), 1);
        assert_eq!(b.failed(same, "admin").await.unwrap(), 2);
        tokio::time::sleep(FORGET_AFTER).await;
        assert_eq!(a.recent(ip, "admin").await.unwrap(), Some(0));
        let other: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(b.failed(other, "admin").await.unwrap(), 1);
        let left = b.store.keys(LOGIN_FAILURES).await.unwrap();
        assert_eq!(left, [record_key(other, "admin")], "the old record swept");
    }
}
