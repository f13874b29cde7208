//! The store on PostgreSQL, for director processes that share one database. What must be
//! unique is kept so by the database, not by the process: a lock is a row with a primary
//! key, an address a row keyed by the address, a task id an identity column. Every call
//! that writes is one transaction.

mod batch;
mod blobs;
mod error;
mod schema;
mod session;
mod tls;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use fleet_ipset::IpSet;

use crate::commits::Outcome;
use crate::ip_steps::{IpStep, ip_steps};
use crate::lease::Registration;
use crate::task::{named, task_from};
use crate::{Collection, IpClaim, IpHolder, IpRecord, IpRelease, Store, StoreError, Write};
use crate::{Lease, PostgresLocation, Recovery, Renewal};
use crate::{Task, TaskEvent, TaskFilter, TaskKindSpec};
pub(crate) use error::describe;
use session::{Connection, Session};
pub(crate) use tls::MakeRustls;

/// How long the claimed addresses read from the database are used before they are read
/// again: other processes claim and release too, and the database refuses a plan that
/// lost an address to one of them (which reads them again at once).
const CLAIMED_FOR: Duration = Duration::from_secs(1);

/// Connections each process holds: calls made at once (a hundred deploys in flight) wait on
/// the server side by side rather than in one line; two processes of eight stay far below
/// PostgreSQL's default hundred.
const CONNECTIONS: usize = 8;

pub struct PgStore {
    /// The first is opened with the store, the others at their first call.
    connections: Vec<Connection>,
    runner: String,
    registration: Registration,
    /// Every claimed address as last read, and when.
    claimed: Mutex<Option<(Arc<IpSet>, Instant)>>,
    /// Writes deferred ([`Store::defer`]), applied by the next call of any kind before
    /// it runs: a run of the simulated cloud's records then costs one statement.
    deferred: Mutex<Vec<Write>>,
    /// Held while deferred writes are applied: every call passes it, so that a call made
    /// after a deferral waits for it to be stored, whichever connection took it.
    applying: Mutex<()>,
}

impl PgStore {
    /// Connects to the database and brings its schema up to date.
    ///
    /// # Errors
    /// When the server cannot be reached or refuses the login, or the schema is newer
    /// than this build's.
    pub fn connect(location: &PostgresLocation) -> Result<Self, StoreError> {
        // Every failure to open names the database, whatever step it came from.
        let lost = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let first = Connection::open(location.clone(), Arc::clone(&lost)).map_err(|e| match e {
            StoreError::Unreachable { reason, .. } => StoreError::Unreachable {
                location: location.url().to_string(),
                reason,
            },
            other => other,
        })?;
        let mut connections = vec![first];
        for _ in 1..CONNECTIONS {
            connections.push(Connection::start(location.clone(), Arc::clone(&lost))?);
        }
        Ok(PgStore {
            connections,
            runner: crate::new_runner_id(),
            registration: Registration::default(),
            claimed: Mutex::new(None),
            deferred: Mutex::new(Vec::new()),
            applying: Mutex::new(()),
        })
    }

    fn call<T, F>(&self, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Session) -> Result<T, StoreError> + Send + 'static,
    {
        self.apply_deferred()?;
        self.connection().call(job)
    }

    /// A call that only reads: deferred writes that cannot be stored now stay deferred,
    /// and the read answers from what is stored, as on SQLite, so that reads (and the
    /// lease's renewal) keep working while nothing can be written.
    fn read<T, F>(&self, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Session) -> Result<T, StoreError> + Send + 'static,
    {
        if let Err(e) = self.apply_deferred() {
            tracing::debug!(error = %e, "deferred records cannot be written yet; reading without them");
        }
        self.connection().call(job)
    }

    /// The connection with the fewest calls waiting: any serves, since each call is a
    /// transaction of its own, committed before it answers.
    fn connection(&self) -> &Connection {
        self.connections
            .iter()
            .min_by_key(|c| c.waiting())
            .expect("a store has connections")
    }

    /// Stores what was deferred so far, before anything else is stored.
    fn apply_deferred(&self) -> Result<(), StoreError> {
        self.write_after_deferred(Vec::new())
    }

    /// Stores what was deferred so far and then `batch`, in one statement. Deferred
    /// writes that could not be stored stay deferred, ahead of later ones.
    fn write_after_deferred(&self, batch: Vec<Write>) -> Result<(), StoreError> {
        let one_at_a_time = self.applying.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        if all.is_empty() {
            drop(one_at_a_time);
            return match batch.is_empty() {
                true => Ok(()),
                false => self.connection().call(|s| batch::apply(s, &batch)),
            };
        }
        let deferred = all.len();
        all.extend(batch);
        let applied = self.connection().call(|s| batch::apply(s, &all));
        let Err(e) = applied else {
            return Ok(());
        };
        let batch = all.split_off(deferred);
        if e.is_transient() {
            self.keep_deferred(all);
            return Err(e);
        }
        // Refused for good, by the deferred writes or by the batch: the deferred ones
        // alone tell which. Refused themselves, they are lost, as a crash loses the last
        // call made to the world they record; the batch is the caller's to hear about.
        let refused = match batch.is_empty() {
            true => Err(e),
            false => self.connection().call(|s| batch::apply(s, &all)),
        };
        if let Err(e) = refused {
            if e.is_transient() {
                self.keep_deferred(all);
                return Err(e);
            }
            tracing::error!(error = %e, writes = all.len(), "deferred records refused by the database are dropped");
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.connection().call(|s| batch::apply(s, &batch))
    }

    /// Puts `writes` back in front of what was deferred since they were taken: tried
    /// again with the next call.
    fn keep_deferred(&self, mut writes: Vec<Write>) {
        let mut later = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
        writes.append(&mut later);
        *later = writes;
    }

    /// Reads the claimed addresses again at the next plan.
    fn forget_claimed(&self) {
        *self.claimed.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl Drop for PgStore {
    /// Nothing deferred is left behind when the store closes.
    fn drop(&mut self) {
        if let Err(e) = self.apply_deferred() {
            tracing::warn!(error = %e, "cannot write the last deferred records");
        }
    }
}

fn id(task: u64) -> i64 {
    i64::try_from(task).unwrap_or(i64::MAX)
}

fn bodies(rows: Vec<postgres::Row>) -> Result<Vec<Task>, StoreError> {
    rows.iter().map(|r| task_from(r.get(0))).collect()
}

fn record(row: &postgres::Row) -> IpRecord {
    IpRecord {
        address: row.get::<_, i64>(0) as u32,
        network: row.get(1),
        owner: IpHolder {
            deployment: row.get(2),
            instance: row.get(3),
        },
        is_static: row.get(4),
    }
}

/// Ends `task` in error with `reason`.
fn end_in_error(s: &mut Session, body: &str, reason: &str, now: u64) -> Result<u64, StoreError> {
    let task = task_from(body)?.errored(reason, now);
    s.execute(
        "UPDATE tasks SET state = 'error', body = $1 WHERE id = $2",
        &[&serde_json::to_string(&task)?, &id(task.id)],
    )?;
    Ok(task.id)
}

impl Store for PgStore {
    fn get(&self, collection: Collection, key: &str) -> Result<Option<String>, StoreError> {
        let key = key.to_string();
        self.read(move |s| {
            Ok(s.row(
                "SELECT body FROM documents WHERE collection = $1 AND key = $2",
                &[&collection.name(), &key],
            )?
            .map(|r| r.get(0)))
        })
    }

    fn list(&self, collection: Collection, scope: Option<&str>) -> Result<Vec<String>, StoreError> {
        let scope = scope.map(str::to_string);
        self.read(move |s| {
            let rows = match &scope {
                Some(scope) => s.rows(
                    "SELECT body FROM documents WHERE collection = $1 AND scope = $2
                     ORDER BY key",
                    &[&collection.name(), scope],
                )?,
                None => s.rows(
                    "SELECT body FROM documents WHERE collection = $1 ORDER BY key",
                    &[&collection.name()],
                )?,
            };
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn keys(&self, collection: Collection) -> Result<Vec<String>, StoreError> {
        self.read(move |s| {
            let rows = s.rows(
                "SELECT key FROM documents WHERE collection = $1 ORDER BY key",
                &[&collection.name()],
            )?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn defer(&self, batch: Vec<Write>) -> Result<(), StoreError> {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(batch);
        Ok(())
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.apply_deferred()
    }

    fn write(&self, batch: Vec<Write>) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.write_after_deferred(batch)
    }

    fn insert(
        &self,
        collection: Collection,
        key: &str,
        scope: &str,
        body: &str,
    ) -> Result<bool, StoreError> {
        let (key, scope, body) = (key.to_string(), scope.to_string(), body.to_string());
        self.call(move |s| {
            let inserted = s.execute(
                "INSERT INTO documents (collection, key, scope, body) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (collection, key) DO NOTHING",
                &[&collection.name(), &key, &scope, &body],
            )?;
            Ok(inserted > 0)
        })
    }

    fn create_task(
        &self,
        kind: TaskKindSpec,
        deployment: Option<&str>,
        lock: Option<&str>,
        user: Option<&str>,
        lease: Lease,
    ) -> Result<Result<Task, u64>, StoreError> {
        let deployment = deployment.map(str::to_string);
        let lock = lock.map(str::to_string);
        let user = user.map(str::to_string);
        let runner = self.runner.clone();
        self.call(move |s| {
            // The task's id first, so that its row, its body and its lock's row go in one
            // statement.
            let task_id: i64 = s
                .row("SELECT nextval(pg_get_serial_sequence('tasks', 'id'))", &[])?
                .expect("nextval returns a row")
                .get(0);
            let task = Task::queued(
                task_id as u64,
                kind,
                deployment.as_deref(),
                user.as_deref(),
                lease.now / 1000,
            );
            let body = serde_json::to_string(&task)?;
            // The lock, when there is one, is taken when free or expired; a live
            // holder's row is left alone (and named), and a process taking it at the same
            // time waits for this one to end. The task is inserted only with the lock.
            let row = s.row(
                "WITH taken AS (
                         INSERT INTO locks (name, task_id, runner, expires_at)
                         SELECT $7, $1, $6, $8 WHERE $7::TEXT IS NOT NULL
                         ON CONFLICT (name) DO UPDATE
                             SET task_id = $1, runner = $6, expires_at = $8
                             WHERE locks.expires_at < $9
                         RETURNING name
                     ),
                     inserted AS (
                         INSERT INTO tasks (id, state, deployment, body, kind, changes, runner)
                         SELECT $1, 'queued', $2, $3, $4, $5, $6
                         WHERE $7::TEXT IS NULL OR EXISTS (SELECT 1 FROM taken)
                         RETURNING id
                     )
                     SELECT id FROM inserted",
                &[
                    &task_id,
                    &deployment,
                    &body,
                    &kind.name,
                    &kind.changes_deployment,
                    &runner,
                    &lock,
                    &lease.until_stored(),
                    &lease.now_stored(),
                ],
            )?;
            if row.is_some() {
                return Ok(Ok(task));
            }
            // Held: by whom is read anew, since the statement's snapshot may predate a
            // holder that took the lock while it waited.
            let holder: Option<i64> = s
                .row("SELECT task_id FROM locks WHERE name = $1", &[&lock])?
                .map(|r| r.get(0));
            Ok(Err(holder.unwrap_or_default() as u64))
        })
    }

    fn put_task(&self, task: &Task) -> Result<(), StoreError> {
        // What the write records over each state the stored task may be in, decided by
        // the database on the row as it locks it: one statement, no transaction around
        // a read and a write.
        let written = crate::task::written_over("processing", task.clone())
            .expect("a running task's state is written over");
        let cancelling = crate::task::written_over("cancelling", task.clone())
            .expect("a cancelling task's state is written over");
        let bodies = (
            serde_json::to_string(&written)?,
            serde_json::to_string(&cancelling)?,
        );
        let (task, state, kept) = (id(task.id), written.state, cancelling.state);
        self.call(move |s| {
            s.execute(
                "UPDATE tasks SET
                     state = CASE WHEN state = 'cancelling' THEN $3 ELSE $2 END,
                     body = CASE WHEN state = 'cancelling' THEN $5 ELSE $4 END
                 WHERE id = $1
                   AND (state NOT IN ('done', 'error', 'cancelled') OR state = $2)",
                &[&task, &state.as_str(), &kept.as_str(), &bodies.0, &bodies.1],
            )?;
            Ok(())
        })
    }

    fn request_cancel(&self, task: u64) -> Result<Option<Task>, StoreError> {
        self.call(move |s| {
            s.unit(|s| {
                let body: Option<String> = s
                    .row(
                        "SELECT body FROM tasks WHERE id = $1 FOR UPDATE",
                        &[&id(task)],
                    )?
                    .map(|r| r.get(0));
                let Some(body) = body else {
                    return Ok(Outcome::Keep(None));
                };
                let mut found = task_from(&body)?;
                if found.ask_to_cancel() {
                    s.execute(
                        "UPDATE tasks SET state = 'cancelling', body = $1 WHERE id = $2",
                        &[&serde_json::to_string(&found)?, &id(task)],
                    )?;
                }
                Ok(Outcome::Keep(Some(found)))
            })
        })
    }

    fn runner(&self) -> &str {
        &self.runner
    }

    fn shared(&self) -> bool {
        true
    }

    fn leads(&self, now: u64) -> Result<bool, StoreError> {
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        let runner = self.runner.clone();
        self.read(move |s| {
            let first: Option<String> = s
                .row(
                    "SELECT id FROM runners WHERE expires_at >= $1 ORDER BY id LIMIT 1",
                    &[&now],
                )?
                .map(|r| r.get(0));
            Ok(first.as_deref() == Some(runner.as_str()))
        })
    }

    fn renew(&self, lease: Lease) -> Result<Renewal, StoreError> {
        let runner = self.runner.clone();
        let renewal = self.call(move |s| {
            s.unit(|s| {
                let renewed = s.execute(
                    "UPDATE runners SET expires_at = $2 WHERE id = $1",
                    &[&runner, &lease.until_stored()],
                )?;
                if renewed == 0 {
                    s.execute(
                        "INSERT INTO runners (id, expires_at) VALUES ($1, $2)",
                        &[&runner, &lease.until_stored()],
                    )?;
                }
                s.execute(
                    "UPDATE locks SET expires_at = $2 WHERE runner = $1",
                    &[&runner, &lease.until_stored()],
                )?;
                let cancelling = s
                    .rows(
                        "SELECT id FROM tasks WHERE runner = $1 AND state = 'cancelling'",
                        &[&runner],
                    )?
                    .iter()
                    .map(|r| r.get::<_, i64>(0) as u64)
                    .collect();
                Ok(Outcome::Keep((renewed == 0, cancelling)))
            })
        })?;
        let (inserted, cancelling) = renewal;
        // Other processes' claims and releases are read again with the lease.
        self.forget_claimed();
        Ok(self.registration.renewed(inserted, cancelling))
    }

    fn task(&self, task: u64) -> Result<Option<Task>, StoreError> {
        self.read(move |s| {
            s.row("SELECT body FROM tasks WHERE id = $1", &[&id(task)])?
                .map(|r| task_from(r.get(0)))
                .transpose()
        })
    }

    fn tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError> {
        let filter = filter.clone();
        self.read(move |s| {
            let states: Option<Vec<String>> = filter
                .states
                .as_ref()
                .map(|states| states.iter().map(|st| st.as_str().to_string()).collect());
            let limit = filter.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
            let rows = s.rows(
                "SELECT body FROM tasks
                 WHERE ($1::TEXT IS NULL OR deployment = $1)
                   AND ($2 OR changes)
                   AND ($3::TEXT[] IS NULL OR state = ANY($3))
                   AND ($5::TEXT IS NULL OR (body::jsonb) ->> 'context_id' = $5)
                 ORDER BY id DESC LIMIT $4",
                &[
                    &filter.deployment,
                    &filter.read_only,
                    &states,
                    &limit,
                    &filter.context_id,
                ],
            )?;
            bodies(rows)
        })
    }

    fn last_change(&self, deployment: &str) -> Result<Option<Task>, StoreError> {
        let deployment = deployment.to_string();
        self.read(move |s| {
            s.row(
                "SELECT body FROM tasks WHERE deployment = $1 AND changes
                 ORDER BY id DESC LIMIT 1",
                &[&deployment],
            )?
            .map(|r| task_from(r.get(0)))
            .transpose()
        })
    }

    fn last_changes(&self) -> Result<Vec<Task>, StoreError> {
        self.read(|s| {
            let rows = s.rows(
                "SELECT tasks.body FROM tasks JOIN (
                     SELECT MAX(id) AS id FROM tasks
                     WHERE deployment IS NOT NULL AND changes GROUP BY deployment
                 ) AS latest ON tasks.id = latest.id",
                &[],
            )?;
            bodies(rows)
        })
    }

    fn append_events(&self, task: u64, events: &[TaskEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let bodies = events
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()?;
        self.call(move |s| {
            // One statement for the whole batch, a transaction of its own: a large fleet
            // writes events by the hundred thousand, and each statement is a round trip.
            s.execute(
                "INSERT INTO task_events (task_id, seq, body)
                 SELECT $1, last.seq + e.n, e.body
                 FROM (SELECT COALESCE(MAX(seq), 0) AS seq FROM task_events
                       WHERE task_id = $1) AS last,
                      unnest($2::TEXT[]) WITH ORDINALITY AS e(body, n)",
                &[&id(task), &bodies],
            )?;
            Ok(())
        })
    }

    fn events(&self, task: u64) -> Result<Vec<TaskEvent>, StoreError> {
        self.read(move |s| {
            s.rows(
                "SELECT body FROM task_events WHERE task_id = $1 ORDER BY seq",
                &[&id(task)],
            )?
            .iter()
            .map(|r| serde_json::from_str(r.get(0)).map_err(StoreError::from))
            .collect()
        })
    }

    fn lock_holder(&self, lock: &str) -> Result<Option<u64>, StoreError> {
        let lock = lock.to_string();
        self.read(move |s| {
            Ok(
                s.row("SELECT task_id FROM locks WHERE name = $1", &[&lock])?
                    .map(|r| r.get::<_, i64>(0) as u64),
            )
        })
    }

    fn release_lock(&self, lock: &str, task: u64) -> Result<(), StoreError> {
        let lock = lock.to_string();
        self.call(move |s| {
            s.execute(
                "DELETE FROM locks WHERE name = $1 AND task_id = $2",
                &[&lock, &id(task)],
            )?;
            Ok(())
        })
    }

    fn locks(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|s| {
            Ok(
                s.rows("SELECT name, task_id FROM locks ORDER BY name", &[])?
                    .iter()
                    .map(|r| (r.get(0), r.get::<_, i64>(1) as u64))
                    .collect(),
            )
        })
    }

    fn release_ip(&self, address: u32, network: &str, owner: &IpHolder) -> Result<(), StoreError> {
        let (network, owner) = (network.to_string(), owner.clone());
        self.call(move |s| {
            s.execute(
                "DELETE FROM ip_addresses
                 WHERE address = $1 AND network = $2 AND deployment = $3 AND instance = $4",
                &[
                    &i64::from(address),
                    &network,
                    &owner.deployment,
                    &owner.instance,
                ],
            )?;
            Ok(())
        })?;
        if let Some((set, _)) = &mut *self.claimed.lock().unwrap_or_else(|p| p.into_inner()) {
            Arc::make_mut(set).remove(address);
        }
        Ok(())
    }

    fn claimed(&self) -> Result<Arc<IpSet>, StoreError> {
        if let Some((set, read)) = &*self.claimed.lock().unwrap_or_else(|p| p.into_inner())
            && read.elapsed() < CLAIMED_FOR
        {
            return Ok(Arc::clone(set));
        }
        let addresses = self.read(|s| {
            Ok(s.rows("SELECT address FROM ip_addresses", &[])?
                .iter()
                .map(|r| r.get::<_, i64>(0) as u32)
                .collect::<Vec<u32>>())
        })?;
        let mut set = IpSet::new();
        for address in addresses {
            set.insert(address);
        }
        let set = Arc::new(set);
        *self.claimed.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Arc::clone(&set), Instant::now()));
        Ok(set)
    }

    fn ip_holders(&self, addresses: &[u32]) -> Result<Vec<IpRecord>, StoreError> {
        if addresses.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: Vec<i64> = addresses.iter().map(|&a| i64::from(a)).collect();
        self.read(move |s| {
            Ok(s.rows(
                "SELECT address, network, deployment, instance, static FROM ip_addresses
                 WHERE address = ANY($1) ORDER BY address",
                &[&wanted],
            )?
            .iter()
            .map(record)
            .collect())
        })
    }

    fn apply_ips(
        &self,
        claims: &[IpClaim],
        releases: &[IpRelease],
    ) -> Result<Result<(), IpRecord>, StoreError> {
        let claims = claims.to_vec();
        let releases = releases.to_vec();
        let applied = self.call(move |s| {
            s.unit(|s| {
                let mut released = Vec::new();
                for step in ip_steps(&claims, &releases) {
                    match step {
                        IpStep::Release(release) => {
                            let deleted = s.execute(
                                "DELETE FROM ip_addresses WHERE address = $1 AND network = $2
                                     AND deployment = $3 AND instance = $4",
                                &[
                                    &i64::from(release.address),
                                    &release.network,
                                    &release.owner.deployment,
                                    &release.owner.instance,
                                ],
                            )?;
                            if deleted > 0 {
                                released.push(release.address);
                            }
                        }
                        IpStep::Claim(claim) => {
                            let taken = s.row(
                                "INSERT INTO ip_addresses
                                     (address, network, deployment, instance, static)
                                 VALUES ($1, $2, $3, $4, $5)
                                 ON CONFLICT (address) DO UPDATE SET network = $2, static = $5
                                     WHERE ip_addresses.deployment = $3
                                       AND ip_addresses.instance = $4
                                 RETURNING address",
                                &[
                                    &i64::from(claim.address),
                                    &claim.network,
                                    &claim.owner.deployment,
                                    &claim.owner.instance,
                                    &claim.is_static,
                                ],
                            )?;
                            if taken.is_none() {
                                let held = s
                                    .row(
                                        "SELECT address, network, deployment, instance, static
                                         FROM ip_addresses WHERE address = $1",
                                        &[&i64::from(claim.address)],
                                    )?
                                    .map(|r| record(&r));
                                if let Some(held) = held {
                                    return Ok(Outcome::Undo(Err(held)));
                                }
                            }
                        }
                    }
                }
                Ok(Outcome::Keep(Ok((claims, released))))
            })
        })?;
        let mut cache = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        match applied {
            Ok((claims, released)) => {
                if let Some((set, _)) = &mut *cache {
                    let set = Arc::make_mut(set);
                    // Released first: an address handed over stays claimed.
                    for address in released {
                        set.remove(address);
                    }
                    for claim in claims {
                        set.insert(claim.address);
                    }
                }
                Ok(Ok(()))
            }
            Err(held) => {
                // Another process claimed it: the next plan reads every claim again.
                *cache = None;
                Ok(Err(held))
            }
        }
    }

    fn ips_in(&self, lo: u32, hi: u32) -> Result<Vec<u32>, StoreError> {
        self.read(move |s| {
            Ok(s.rows(
                "SELECT address FROM ip_addresses WHERE address BETWEEN $1 AND $2
                 ORDER BY address",
                &[&i64::from(lo), &i64::from(hi)],
            )?
            .iter()
            .map(|r| r.get::<_, i64>(0) as u32)
            .collect())
        })
    }

    fn ips_of(&self, deployment: &str) -> Result<Vec<IpRecord>, StoreError> {
        let deployment = deployment.to_string();
        self.read(move |s| {
            Ok(s.rows(
                "SELECT address, network, deployment, instance, static FROM ip_addresses
                 WHERE deployment = $1 ORDER BY address",
                &[&deployment],
            )?
            .iter()
            .map(record)
            .collect())
        })
    }

    fn put_blob(&self, blob: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let (blob, bytes) = (blob.to_string(), bytes.to_vec());
        // Bytes in memory are read without failing.
        self.call(move |s| blobs::put(s, &blob, &bytes[..], std::path::Path::new("memory")))
    }

    /// Read and written a piece at a time: memory holds one piece, not the file.
    fn put_blob_file(&self, blob: &str, path: &std::path::Path) -> Result<(), StoreError> {
        let file = std::fs::File::open(path).map_err(|source| StoreError::Source {
            path: path.to_path_buf(),
            source,
        })?;
        let (blob, path) = (blob.to_string(), path.to_path_buf());
        self.call(move |s| blobs::put(s, &blob, file, &path))
    }

    fn blob(&self, blob: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let blob = blob.to_string();
        self.read(move |s| blobs::get(s, &blob))
    }

    fn blob_ids(&self) -> Result<Vec<String>, StoreError> {
        self.read(blobs::ids)
    }

    fn delete_blob(&self, blob: &str) -> Result<(), StoreError> {
        let blob = blob.to_string();
        self.call(move |s| blobs::delete(s, &blob))
    }

    fn recover(&self, reason: &str, now: u64, recovery: Recovery) -> Result<Vec<u64>, StoreError> {
        let reason = reason.to_string();
        let runner = self.runner.clone();
        let now_ms = i64::try_from(now).unwrap_or(i64::MAX);
        let ended_at = now / 1000;
        let everyone_else = recovery == Recovery::AllOthers;
        self.call(move |s| {
            s.unit(|s| {
                // The gone: every other runner, or those whose lease ran out. Tasks of a
                // runner nobody knows (written before runners were) are as good as gone.
                let gone = s.rows(
                    "SELECT id FROM runners WHERE id <> $1 AND ($2 OR expires_at < $3)
                     FOR UPDATE",
                    &[&runner, &everyone_else, &now_ms],
                )?;
                let gone: Vec<String> = gone.iter().map(|r| r.get(0)).collect();
                let stale = s.rows(
                    "SELECT body FROM tasks
                     WHERE state IN ('queued', 'processing', 'cancelling') AND runner <> $1
                       AND ($2 OR runner = ANY($3)
                            OR runner NOT IN (SELECT id FROM runners))
                     ORDER BY id FOR UPDATE",
                    &[&runner, &everyone_else, &gone],
                )?;
                let mut ended = Vec::new();
                for row in stale {
                    ended.push(end_in_error(s, row.get(0), &reason, ended_at)?);
                }
                s.execute(
                    "DELETE FROM locks WHERE runner <> $1
                       AND ($2 OR runner = ANY($3) OR expires_at < $4
                            OR runner NOT IN (SELECT id FROM runners))",
                    &[&runner, &everyone_else, &gone, &now_ms],
                )?;
                s.execute("DELETE FROM runners WHERE id = ANY($1)", &[&gone])?;
                Ok(Outcome::Keep(ended))
            })
        })
    }

    fn prune_tasks(
        &self,
        kind: TaskKindSpec,
        keep: usize,
        attached: &[Collection],
    ) -> Result<Vec<u64>, StoreError> {
        let kind = kind.name;
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        let attached = attached.to_vec();
        self.call(move |s| {
            // Found outside a transaction: most task ends find nothing to prune, and a
            // task found here that another process prunes first is deleted twice, which
            // is nothing.
            let doomed: Vec<i64> = s
                .rows(
                    // Beyond the newest finished tasks kept, those that are no
                    // deployment's newest change (see the schema's version 2).
                    "SELECT id FROM tasks
                     WHERE kind = $1 AND state IN ('done', 'error', 'cancelled')
                       AND NOT newest_change
                       AND id <= (SELECT id FROM tasks
                                  WHERE kind = $1
                                    AND state IN ('done', 'error', 'cancelled')
                                  ORDER BY id DESC OFFSET $2 LIMIT 1)
                     ORDER BY id DESC LIMIT 500",
                    &[&kind, &keep],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect();
            if doomed.is_empty() {
                return Ok(Vec::new());
            }
            s.unit(|s| {
                let keys: Vec<String> = doomed.iter().map(i64::to_string).collect();
                s.execute(
                    "DELETE FROM task_events WHERE task_id = ANY($1)",
                    &[&doomed],
                )?;
                for kept in &attached {
                    s.execute(
                        "DELETE FROM documents WHERE collection = $1 AND key = ANY($2)",
                        &[&kept.name(), &keys],
                    )?;
                }
                s.execute("DELETE FROM tasks WHERE id = ANY($1)", &[&doomed])?;
                Ok(Outcome::Keep(
                    doomed.into_iter().map(|i| i as u64).collect(),
                ))
            })
        })
    }

    fn name_unnamed_tasks(
        &self,
        kinds: &[TaskKindSpec],
        fallback: TaskKindSpec,
    ) -> Result<usize, StoreError> {
        let kinds = kinds.to_vec();
        self.call(move |s| {
            s.unit(|s| {
                let old: Vec<(i64, String)> = s
                    .rows("SELECT id, body FROM tasks WHERE kind = ''", &[])?
                    .iter()
                    .map(|r| (r.get(0), r.get(1)))
                    .collect();
                for (id, body) in &old {
                    let (kind, body) = named(body, &kinds, fallback)?;
                    s.execute(
                        "UPDATE tasks SET kind = $1, changes = $2, body = $3 WHERE id = $4",
                        &[&kind.name, &kind.changes_deployment, &body, id],
                    )?;
                }
                if !old.is_empty() {
                    s.execute(schema::MARK_NEWEST_CHANGES, &[])?;
                }
                Ok(Outcome::Keep(old.len()))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::testing;

    /// Holds an exclusive lock on `table` in a transaction of its own until told to
    /// commit: calls that touch the table wait, as behind a long transaction.
    fn hold_lock(at: &PostgresLocation, table: &'static str) -> mpsc::Sender<()> {
        let (release, released) = mpsc::channel::<()>();
        let (locked, is_locked) = mpsc::channel::<()>();
        let config = at.config();
        std::thread::spawn(move || {
            let mut client = config.connect(::postgres::NoTls).unwrap();
            let mut tx = client.transaction().unwrap();
            tx.batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
                .unwrap();
            locked.send(()).unwrap();
            let _ = released.recv();
            tx.commit().unwrap();
        });
        is_locked.recv().unwrap();
        release
    }

    /// A store whose document `k` holds 1, with its documents' table locked until the
    /// sender is told; `None` where no PostgreSQL database is named, or it is reached
    /// over TLS (the lock's holder connects without; the server's Unix socket serves it).
    fn store_behind_a_lock() -> Option<(Arc<dyn Store>, mpsc::Sender<()>)> {
        let Some(database) = testing::postgres() else {
            eprintln!(
                "skipped: {} names no PostgreSQL database",
                testing::POSTGRES_VARIABLE
            );
            return None;
        };
        if database.ca_file().is_some() {
            return None;
        }
        let at = testing::fresh_schema(&database);
        let store: Arc<dyn Store> = Arc::new(PgStore::connect(&at).unwrap());
        store
            .write(vec![crate::put(testing::FLEET, "k", "", &1)])
            .unwrap();
        Some((store, hold_lock(&at, "documents")))
    }

    #[test]
    fn a_call_waiting_on_the_database_does_not_hold_up_the_others() {
        let Some((store, release)) = store_behind_a_lock() else {
            return;
        };
        let (answered, answer) = mpsc::channel();
        let waiting = Arc::clone(&store);
        std::thread::spawn(move || {
            let got = crate::get::<u32>(&*waiting, testing::FLEET, "k");
            answered.send(got.map_err(|e| e.to_string())).unwrap();
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(answer.try_recv().is_err(), "the read waits for the lock");
        // Another call, on another table, answers meanwhile: it does not queue behind
        // the waiting one on one connection.
        let (other_answered, other_answer) = mpsc::channel();
        let other = Arc::clone(&store);
        std::thread::spawn(move || {
            let locks = other.locks().map_err(|e| e.to_string());
            other_answered.send(locks).unwrap();
        });
        let other = other_answer.recv_timeout(Duration::from_secs(5));
        release.send(()).unwrap();
        assert_eq!(other, Ok(Ok(Vec::new())), "the other call answered at once");
        assert_eq!(
            answer.recv_timeout(Duration::from_secs(10)).unwrap(),
            Ok(Some(1))
        );
    }

    #[test]
    fn a_call_waiting_on_the_database_frees_its_worker_on_either_kind_of_runtime() {
        for multi_threaded in [false, true] {
            let Some((store, release)) = store_behind_a_lock() else {
                return;
            };
            let store = crate::AsyncStore::new(store);
            // One worker: the waiting call would hold it, and nothing else would run (not
            // even the runtime's timers: the test watches from a thread of its own).
            let (ran, other_ran) = mpsc::channel();
            let waiter = store.clone();
            let runtime = std::thread::spawn(move || {
                let runtime = if multi_threaded {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(1)
                        .enable_all()
                        .build()
                } else {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                }
                .unwrap();
                runtime.block_on(async move {
                    let waiting =
                        tokio::spawn(async move { waiter.get::<u32>(testing::FLEET, "k").await });
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let other = tokio::spawn(async move { store.task(1).await })
                        .await
                        .unwrap();
                    ran.send(other.map_err(|e| e.to_string())).unwrap();
                    waiting.await.unwrap().map_err(|e| e.to_string())
                })
            });
            let other = other_ran.recv_timeout(Duration::from_secs(10));
            release.send(()).unwrap();
            assert_eq!(
                other,
                Ok(Ok(None)),
                "another task ran while a call waited (multi-threaded: {multi_threaded})"
            );
            assert_eq!(runtime.join().unwrap(), Ok(Some(1)));
        }
    }

    #[test]
    fn a_blob_is_written_a_piece_at_a_time_and_a_source_that_fails_leaves_the_old_one() {
        let Some(database) = testing::postgres() else {
            return;
        };
        let store = PgStore::connect(&testing::fresh_schema(&database)).unwrap();
        let bytes = vec![7u8; blobs::PIECE * 3 + 10];
        store.put_blob("b", &bytes).unwrap();
        let pieces = |store: &PgStore| {
            store
                .call(|s| {
                    Ok(s.rows(
                        "SELECT length(bytes) FROM blob_pieces WHERE id = 'b' ORDER BY seq",
                        &[],
                    )?
                    .iter()
                    .map(|r| r.get::<_, i32>(0) as usize)
                    .collect::<Vec<_>>())
                })
                .unwrap()
        };
        assert_eq!(
            pieces(&store),
            [blobs::PIECE, blobs::PIECE, blobs::PIECE, 10]
        );
        // A source that fails halfway: nothing of it is kept.
        struct Failing(usize);
        impl std::io::Read for Failing {
            fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("the disk went away"));
                }
                let n = buffer.len().min(self.0);
                self.0 -= n;
                Ok(n)
            }
        }
        let failed = store.call(|s| {
            blobs::put(
                s,
                "b",
                Failing(blobs::PIECE * 2),
                std::path::Path::new("failing"),
            )
        });
        assert!(
            matches!(failed, Err(StoreError::Source { .. })),
            "{failed:?}"
        );
        assert_eq!(store.blob("b").unwrap(), Some(bytes));
    }

    #[test]
    fn two_writers_of_one_blob_at_once_both_succeed_and_one_of_them_is_kept_whole() {
        let Some(database) = testing::postgres() else {
            return;
        };
        let store = Arc::new(PgStore::connect(&testing::fresh_schema(&database)).unwrap());
        let writers: Vec<_> = [1u8, 2]
            .into_iter()
            .map(|byte| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        store
                            .put_blob("shared", &vec![byte; blobs::PIECE + 1])
                            .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let kept = store.blob("shared").unwrap().unwrap();
        assert_eq!(kept.len(), blobs::PIECE + 1);
        assert!(kept.iter().all(|b| *b == kept[0]), "pieces of both writers");
    }

    #[test]
    fn deferred_writes_the_database_refuses_for_good_are_dropped_and_the_store_goes_on() {
        let Some(database) = testing::postgres() else {
            return;
        };
        let store = PgStore::connect(&testing::fresh_schema(&database)).unwrap();
        // A key past what an index entry can hold, even compressed: refused, whenever it
        // is tried.
        let mut state = 0x2545_f491u32;
        let huge: String = (0..20_000)
            .map(|_| {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                char::from(b'a' + ((state >> 16) % 26) as u8)
            })
            .collect();
        store
            .defer(vec![crate::put(testing::FLEET, &huge, "", &1)])
            .unwrap();
        store
            .write(vec![crate::put(testing::FLEET, "mine", "", &2)])
            .unwrap();
        assert_eq!(
            crate::get::<u32>(&store, testing::FLEET, "mine").unwrap(),
            Some(2)
        );
        assert_eq!(
            crate::get::<u32>(&store, testing::FLEET, &huge).unwrap(),
            None
        );
        // Refused in the caller's own batch, the caller hears of it; what was deferred
        // before it is kept.
        store
            .defer(vec![crate::put(testing::FLEET, "cloud", "", &3)])
            .unwrap();
        assert!(
            store
                .write(vec![crate::put(testing::FLEET, &huge, "", &4)])
                .is_err()
        );
        assert_eq!(
            crate::get::<u32>(&store, testing::FLEET, "cloud").unwrap(),
            Some(3)
        );
    }

    #[test]
    fn the_blobs_of_a_version_3_database_are_kept_as_pieces() {
        let Some(database) = testing::postgres() else {
            return;
        };
        let at = testing::fresh_schema(&database);
        drop(PgStore::connect(&at).unwrap());
        // Back to version 3's blobs, one of them kept.
        testing::run(
            &at,
            "DROP TABLE blob_pieces;
             CREATE TABLE blobs (id TEXT COLLATE \"C\" PRIMARY KEY, bytes BYTEA NOT NULL);
             INSERT INTO blobs VALUES ('old', 'kept bytes');
             DELETE FROM fleet_schema_versions WHERE version = 4"
                .into(),
        );
        let store = PgStore::connect(&at).unwrap();
        assert_eq!(
            store.blob("old").unwrap().as_deref(),
            Some(&b"kept bytes"[..])
        );
        assert_eq!(store.blob_ids().unwrap(), ["old"]);
    }

    #[test]
    fn deferred_writes_the_database_refused_stay_deferred_until_it_is_back() {
        let Some(server) = testing::postgres() else {
            return;
        };
        let (at, outage) = testing::fresh_database(&server);
        let store = PgStore::connect(&at).unwrap();
        store
            .defer(vec![crate::put(testing::FLEET, "first", "", &1)])
            .unwrap();
        outage.begin();
        assert!(store.locks().is_err(), "the database is down");
        store
            .defer(vec![crate::put(testing::FLEET, "first", "", &2)])
            .unwrap();
        assert!(store.sync().is_err(), "still down");
        outage.end();
        store.locks().unwrap();
        let elsewhere = PgStore::connect(&at).unwrap();
        assert_eq!(
            crate::get::<u32>(&elsewhere, testing::FLEET, "first").unwrap(),
            Some(2),
            "both kept, in order"
        );
    }
}
