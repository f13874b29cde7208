//! Persistence shared by the embedded director and the embedded broker.
//!
//! The store keeps JSON documents in collections, plus the few things that need real
//! transactions and ordering: tasks with their event logs, and locks. Every state change
//! is written before the external step that depends on it, so after a crash the next start
//! finds a consistent state and converges. Two backends keep it: SQLite, one process's,
//! and PostgreSQL, which several director processes share (each a runner with a lease,
//! [`Lease`]); async code reaches either through [`AsyncStore`].

mod commits;
mod handle;
mod ip_steps;
mod lease;
mod location;
mod postgres;
mod records;
mod sqlite;
pub mod statement_times;
mod task;
pub mod testing;

#[cfg(test)]
mod contract_tests;

pub use commits::Commits;
pub use handle::AsyncStore;
pub use lease::{Lease, Recovery, Renewal, new_runner_id};
pub use location::{LocationError, PostgresLocation, StoreLocation};
pub use postgres::PgStore;
pub use records::{Collection, get, list, put, remove};
pub use sqlite::SqliteStore;
pub use task::{EventState, Task, TaskEvent, TaskFilter, TaskKindSpec, TaskState};

/// A database's own error, from whichever backend answered.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("{}", postgres::describe(.0))]
    Postgres(#[from] ::postgres::Error),
}

/// What went wrong in the store, kept apart by what a caller can do about it: a busy
/// database may answer on the next try, a refused constraint or a corrupt record will not.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another connection or process holds the database, or a concurrent transaction
    /// won (PostgreSQL's serialization failures and deadlocks).
    #[error("the state store is busy: {0}")]
    Busy(#[source] DbError),
    /// A uniqueness or other constraint refused the write; nothing of it was applied.
    #[error("the state store refused a write: {0}")]
    Constraint(#[source] DbError),
    #[error("the state store holds a corrupt record: {0}")]
    Corrupt(#[source] serde_json::Error),
    #[error("cannot create the state store's folder {}: {source}", path.display())]
    Open {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the state store failed: {0}")]
    Database(#[source] DbError),
    /// The database server cannot be reached, or the connection to it broke; the next
    /// call connects again.
    #[error("cannot reach the state store's database at {location}: {reason}")]
    Unreachable { location: String, reason: String },
    #[error(
        "the state store has schema version {found}, newer than the {known} this fleet-updater \
         knows: use the fleet-updater that wrote it, or a newer one"
    )]
    NewerSchema { found: i64, known: i64 },
    /// A commit of grouped calls failed after those calls had answered: what they were
    /// told no longer holds, so the store answers nothing more until it is opened again.
    #[error(
        "the state store lost its last writes when committing them failed; open it again \
         (the next start recovers)"
    )]
    Lost,
    /// The runtime shut down (or the store's thread ended) before a call to the store,
    /// or its opening, finished.
    #[error("the state store stopped answering before the call finished (shutting down)")]
    Stopped,
    /// A file to keep as a blob could not be read.
    #[error("cannot read {} into the state store: {source}", path.display())]
    Source {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// Whether the same call may succeed later, unchanged.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Busy(_) | StoreError::Unreachable { .. })
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy(e.into()),
            Some(ErrorCode::ConstraintViolation) => StoreError::Constraint(e.into()),
            _ => StoreError::Database(e.into()),
        }
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Corrupt(e)
    }
}

/// Who holds an IP address, as the store keys its reservations: a deployment and one of
/// its instances (or compilation VMs). What an owner means is the network model's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IpHolder {
    pub deployment: String,
    pub instance: String,
}

/// An address a plan claims for `owner`: a new one, or its own again with another
/// network or static flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpClaim {
    pub address: u32,
    pub network: String,
    pub owner: IpHolder,
    pub is_static: bool,
}

/// An address a plan gives back; released only while `owner` holds it on `network`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpRelease {
    pub address: u32,
    pub network: String,
    pub owner: IpHolder,
}

/// An IP reservation as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpRecord {
    pub address: u32,
    pub network: String,
    pub owner: IpHolder,
    pub is_static: bool,
}

/// One change of a batch that is applied atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Put {
        collection: Collection,
        key: String,
        /// What the document belongs to (a deployment), for listing by scope.
        scope: String,
        body: String,
    },
    Delete {
        collection: Collection,
        key: String,
    },
}

pub trait Store: Send + Sync {
    fn get(&self, collection: Collection, key: &str) -> Result<Option<String>, StoreError>;

    /// Documents of a collection in key order, all or those of one scope.
    fn list(&self, collection: Collection, scope: Option<&str>) -> Result<Vec<String>, StoreError>;

    /// The keys of a collection's documents, in order, without their bodies: what a
    /// caller that only needs names (a monitor's pass over every deployment) reads.
    fn keys(&self, collection: Collection) -> Result<Vec<String>, StoreError>;

    /// Applies every write of the batch, or none.
    fn write(&self, batch: Vec<Write>) -> Result<(), StoreError>;

    /// Creates the document unless one has its key, and tells whether it did: what makes
    /// something (a service instance) created once when two processes try at once.
    fn insert(
        &self,
        collection: Collection,
        key: &str,
        scope: &str,
        body: &str,
    ) -> Result<bool, StoreError>;

    /// Writes that need no commit of their own: records of a world outside the director
    /// (the simulated cloud's VMs, disks and agents), which a crash may lose as it would
    /// lose the last call made to that world. A store that can keeps them until its next
    /// call of any kind and applies them first, in that call's transaction when it
    /// writes documents, so that nothing stored after them is ever stored without them.
    /// Others write them at once.
    ///
    /// # Errors
    /// Those of writing at once.
    fn defer(&self, batch: Vec<Write>) -> Result<(), StoreError> {
        self.write(batch)
    }

    /// Makes every call answered so far durable: with grouped commits, the open group is
    /// committed now. What a caller is about to tell the world is done (an operation a
    /// run reports as succeeded) is synced first, so that a crash cannot take it back.
    ///
    /// # Errors
    /// When the commit fails.
    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Creates a queued task for `user`, run by this handle's runner. With `lock`, the
    /// lock is taken for the task in the same transaction, held until `lease.until` unless
    /// renewed; when another task holds it unexpired, nothing is written and its id is
    /// returned. A lock whose lease ran out (its process died) is taken over.
    fn create_task(
        &self,
        kind: TaskKindSpec,
        deployment: Option<&str>,
        lock: Option<&str>,
        user: Option<&str>,
        lease: Lease,
    ) -> Result<Result<Task, u64>, StoreError>;

    /// Records the task as it is now. A task asked to cancel stays `cancelling` while it
    /// runs (another process may have asked), and a task that has ended is not brought
    /// back to running.
    fn put_task(&self, task: &Task) -> Result<(), StoreError>;

    /// Marks a queued or processing task `cancelling`, whoever runs it: its runner sees
    /// the mark at its next renewal. `None` when the task is unknown; the task as it is
    /// (unchanged) when it is not running.
    fn request_cancel(&self, id: u64) -> Result<Option<Task>, StoreError>;

    /// The runner (one per director process) that tasks created through this handle
    /// belong to.
    fn runner(&self) -> &str;

    /// Whether other processes may run tasks on this database at the same time: then
    /// each renews its lease, and only an expired one's tasks are recovered.
    fn shared(&self) -> bool;

    /// Whether this handle's runner leads the director processes sharing the database at
    /// `now` (Unix milliseconds): the living runner (its lease runs past `now`) whose id
    /// sorts first. Work that one process must do for all of them (watching agents and
    /// resurrecting their VMs) is done by the leader alone; when it dies, its lease runs
    /// out and the next takes over, with no election to hold. One process's store: always.
    ///
    /// # Errors
    /// A store failure.
    fn leads(&self, now: u64) -> Result<bool, StoreError>;

    /// Registers this handle's runner, or renews its lease and its locks' until
    /// `lease.until`. Tells which of its tasks another process asked to cancel, and
    /// whether it had been given up for dead (its tasks errored, its locks released).
    fn renew(&self, lease: Lease) -> Result<Renewal, StoreError>;

    fn task(&self, id: u64) -> Result<Option<Task>, StoreError>;

    /// The tasks the filter admits, newest first.
    fn tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError>;

    /// The newest task that changed `deployment` (read-only tasks are nobody's last
    /// operation).
    fn last_change(&self, deployment: &str) -> Result<Option<Task>, StoreError>;

    /// [`Store::last_change`] of every deployment that has one.
    fn last_changes(&self) -> Result<Vec<Task>, StoreError>;

    /// Appends events to a task's log in order, all or none.
    fn append_events(&self, task: u64, events: &[TaskEvent]) -> Result<(), StoreError>;

    fn events(&self, task: u64) -> Result<Vec<TaskEvent>, StoreError>;

    fn lock_holder(&self, lock: &str) -> Result<Option<u64>, StoreError>;

    fn release_lock(&self, lock: &str, task: u64) -> Result<(), StoreError>;

    fn locks(&self) -> Result<Vec<(String, u64)>, StoreError>;

    /// Releases `address` if `owner` holds it on `network`; an address that moved to
    /// another network or owner since is left alone.
    fn release_ip(&self, address: u32, network: &str, owner: &IpHolder) -> Result<(), StoreError>;

    /// Every claimed address: what a plan allocates around. Shared, not copied: a large
    /// fleet holds tens of thousands, and every deploy plans.
    fn claimed(&self) -> Result<std::sync::Arc<fleet_ipset::IpSet>, StoreError>;

    /// The reservations of those of `addresses` that are claimed.
    fn ip_holders(&self, addresses: &[u32]) -> Result<Vec<IpRecord>, StoreError>;

    /// Applies a plan's claims and releases in one transaction, an address's release before
    /// its claim (a plan may hand an address from one owner to another). When a claim finds
    /// its address held by another owner (a deploy that planned at the same time won),
    /// nothing is applied and that reservation is returned, so that the plan is made again.
    fn apply_ips(
        &self,
        claims: &[IpClaim],
        releases: &[IpRelease],
    ) -> Result<Result<(), IpRecord>, StoreError>;

    /// Claimed addresses in `[lo, hi]`, ascending.
    fn ips_in(&self, lo: u32, hi: u32) -> Result<Vec<u32>, StoreError>;

    fn ips_of(&self, deployment: &str) -> Result<Vec<IpRecord>, StoreError>;

    /// Keeps `bytes` under `id`, the digest that names them; a blob kept already is
    /// written again (what repairs a damaged one, `upload-release --fix`). Release archives live here, beside the records that name them, so that
    /// the state directory is the whole director.
    fn put_blob(&self, id: &str, bytes: &[u8]) -> Result<(), StoreError>;

    /// [`Store::put_blob`] of the file at `path`. A store that can copies it piece by
    /// piece, so that a package of gigabytes is never in memory whole; this one reads it
    /// whole.
    ///
    /// # Errors
    /// [`StoreError::Source`] when the file cannot be read, else as `put_blob`.
    fn put_blob_file(&self, id: &str, path: &std::path::Path) -> Result<(), StoreError> {
        let bytes = std::fs::read(path).map_err(|source| StoreError::Source {
            path: path.to_path_buf(),
            source,
        })?;
        self.put_blob(id, &bytes)
    }

    fn blob(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Every blob's id, ascending.
    fn blob_ids(&self) -> Result<Vec<String>, StoreError>;

    fn delete_blob(&self, id: &str) -> Result<(), StoreError>;

    /// After a crash: the running tasks of runners that `recovery` counts as gone end in
    /// error with `reason`, their locks (and every expired lock) are released, and those
    /// runners are forgotten. Never this handle's own. `now` is in Unix milliseconds.
    /// Returns the ids of the tasks it ended.
    fn recover(&self, reason: &str, now: u64, recovery: Recovery) -> Result<Vec<u64>, StoreError>;

    /// Deletes finished tasks of `kind` beyond the newest `keep`, with their events and
    /// traces, as BOSH keeps the last tasks of each type. Never a running task, and never
    /// a deployment's newest change, which says how its last operation ended (the broker
    /// reads it). At most a few hundred per call: a backlog is caught up over later
    /// calls. Returns the ids deleted.
    /// `attached` are the kinds of documents kept per task, keyed by its id: they go with
    /// it, in the same transaction.
    fn prune_tasks(
        &self,
        kind: TaskKindSpec,
        keep: usize,
        attached: &[Collection],
    ) -> Result<Vec<u64>, StoreError>;

    /// Names the tasks written without a kind (before kinds were stored, or since by an
    /// older fleet-updater on the same state) by their description, as one of `kinds`
    /// describes itself; one no kind describes becomes `fallback`. The layer that knows
    /// the kinds calls it when it opens the store. Returns how many it named.
    ///
    /// # Errors
    /// A store failure.
    fn name_unnamed_tasks(
        &self,
        kinds: &[TaskKindSpec],
        fallback: TaskKindSpec,
    ) -> Result<usize, StoreError>;
}
