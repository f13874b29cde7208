use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};

use super::commits::{self, Commits, Db, Flusher, Outcome};
use super::ip_steps::{IpStep, ip_steps};
use super::lease::Registration;
use super::task::named;
use super::task::task_from;
use super::{Collection, IpClaim, IpHolder, IpRecord, IpRelease, Store, StoreError, Write};
use super::{Lease, Recovery, Renewal};
use super::{Task, TaskEvent, TaskFilter, TaskKindSpec, TaskState};
use fleet_ipset::IpSet;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS documents (
    collection TEXT NOT NULL,
    key TEXT NOT NULL,
    scope TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (collection, key)
);
CREATE INDEX IF NOT EXISTS documents_by_scope ON documents (collection, scope, key);
CREATE TABLE IF NOT EXISTS tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    state TEXT NOT NULL,
    deployment TEXT,
    body TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT '',
    changes INTEGER NOT NULL DEFAULT 1,
    runner TEXT NOT NULL DEFAULT '',
    newest_change INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS task_events (
    task_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);
CREATE TABLE IF NOT EXISTS ip_addresses (
    address INTEGER PRIMARY KEY,
    network TEXT NOT NULL,
    deployment TEXT NOT NULL,
    instance TEXT NOT NULL,
    static INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ip_addresses_by_deployment ON ip_addresses (deployment, address);
CREATE TABLE IF NOT EXISTS locks (
    name TEXT PRIMARY KEY,
    task_id INTEGER NOT NULL,
    runner TEXT NOT NULL DEFAULT '',
    expires_at INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS runners (
    id TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS blobs (
    id TEXT PRIMARY KEY,
    bytes BLOB NOT NULL
);
";

/// How many prepared statements a connection keeps: more than the store has.
const STATEMENTS: usize = 64;

/// SQLite in WAL mode: one file, safe against crashes, readable while a run writes.
pub struct SqliteStore {
    db: Arc<Mutex<Db>>,
    /// Commits grouped calls now and then; `None` when each call commits.
    flusher: Option<Flusher>,
    /// Every claimed address, loaded once and kept current by `apply_ips` and `release_ip`:
    /// one process changes a state directory at a time.
    /// Shared with the plans that read it, and copied only when it changes while one does.
    claimed: Mutex<Arc<IpSet>>,
    /// [`Store::defer`]red writes, in order, applied when the connection is next taken.
    deferred: Mutex<Vec<Write>>,
    runner: String,
    registration: Registration,
}

impl SqliteStore {
    /// Opens (creating when needed) the database `fleet.db` in `dir`.
    ///
    /// # Errors
    /// When the folder cannot be created or the database cannot be opened.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, Commits::EachCall)
    }

    /// [`SqliteStore::open`], committing as `commits` says.
    ///
    /// # Errors
    /// When the folder cannot be created or the database cannot be opened.
    pub fn open_with(dir: &Path, commits: Commits) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Open {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join("fleet.db");
        let connection = Connection::open(&path)?;
        Self::with_connection(connection, commits, &path)
    }

    /// Opens `fleet.db` in `dir` to read only: nothing is created, migrated or written, so
    /// that listings work on a state directory this process may not write (a copy taken
    /// for inspection, a directory of another user). A database in WAL mode whose side
    /// files cannot be made there is read as it is on disk.
    ///
    /// # Errors
    /// When the database cannot be read, or is of a newer schema than this program's.
    pub fn open_read_only(dir: &Path) -> Result<Self, StoreError> {
        use rusqlite::OpenFlags;
        let path = dir.join("fleet.db");
        let shared = OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let version = |c: &Connection| c.query_row("PRAGMA user_version", [], |r| r.get(0));
        // Where this process may write, the database is opened as any reader of a WAL
        // database is (seeing what a running writer committed) and refuses writes itself;
        // where it may not, SQLite's read-only mode; where even WAL's side files cannot
        // be made, the file as it is on disk (which ignores a writer's log). Any other
        // failure is reported as it is.
        let cannot_share = |e: &rusqlite::Error| {
            matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
            )
        };
        let attempt = |flags: OpenFlags| -> Result<Connection, rusqlite::Error> {
            let c = Connection::open_with_flags(&path, flags | shared)?;
            c.busy_timeout(commits::BUSY_TIMEOUT)?;
            c.pragma_update(None, "query_only", true)?;
            version(&c)?;
            Ok(c)
        };
        let connection = match attempt(OpenFlags::SQLITE_OPEN_READ_WRITE) {
            Ok(c) => c,
            Err(e) if cannot_share(&e) && path.exists() => {
                match attempt(OpenFlags::SQLITE_OPEN_READ_ONLY) {
                    Ok(c) => c,
                    Err(e) if cannot_share(&e) => {
                        immutable(&path, OpenFlags::SQLITE_OPEN_READ_ONLY | shared)?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        let found: i64 = version(&connection)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                found,
                known: SCHEMA_VERSION,
            });
        }
        let claimed = claimed_in(&connection)?;
        Ok(SqliteStore {
            db: Arc::new(Mutex::new(Db::new(connection, Commits::EachCall))),
            flusher: None,
            claimed: Mutex::new(Arc::new(claimed)),
            deferred: Mutex::new(Vec::new()),
            runner: crate::new_runner_id(),
            registration: Registration::default(),
        })
    }

    /// A private database in memory, for tests and benchmarks.
    ///
    /// # Errors
    /// When SQLite cannot start.
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::with_connection(
            Connection::open_in_memory()?,
            Commits::EachCall,
            Path::new(":memory:"),
        )
    }

    fn with_connection(
        connection: Connection,
        commits: Commits,
        path: &Path,
    ) -> Result<Self, StoreError> {
        connection.busy_timeout(commits::BUSY_TIMEOUT)?;
        // Every statement is prepared once and kept: a bound value must not make SQLite
        // plan a statement again (measured: a tenth of a large fleet's time went to
        // preparing the event insert anew per event), and all the store's statements fit.
        connection.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        connection.set_prepared_statement_cache_capacity(STATEMENTS);
        let mut connection = connection;
        crate::statement_times::attach(&mut connection)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        // Grouped commits leave checkpoints to the thread that commits them, off the
        // callers' way.
        let autocheckpoint = match commits {
            Commits::EachCall => commits::EACH_CALL_CHECKPOINT_FRAMES,
            Commits::Grouped { .. } => 0,
        };
        connection.pragma_update(None, "wal_autocheckpoint", autocheckpoint)?;
        connection.pragma_update(None, "journal_size_limit", commits::LOG_KEPT_BYTES)?;
        // A large fleet's hot pages (the recent tasks, the indexes, the deployments being
        // changed) outgrow SQLite's 2 MiB default: 64 MiB at most, taken as the state grows.
        connection.pragma_update(None, "cache_size", -65_536)?;
        connection.execute_batch(SCHEMA)?;
        migrate(&connection)?;
        // A database from before kinds has their columns only once migrated, so these
        // come after.
        connection.execute_batch(NEWEST_CHANGES)?;
        connection.execute_batch(
            "CREATE INDEX IF NOT EXISTS tasks_running ON tasks (runner)
                 WHERE state IN ('queued', 'processing', 'cancelling');",
        )?;
        let claimed = claimed_in(&connection)?;
        let db = Arc::new(Mutex::new(Db::new(connection, commits)));
        let flusher = match commits {
            Commits::EachCall => None,
            Commits::Grouped { every } => match Flusher::start(Arc::clone(&db), path, every) {
                Ok(flusher) => Some(flusher),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot commit grouped writes apart: each call commits");
                    let mut db = commits::lock(&db);
                    db.each_call();
                    let frames = commits::EACH_CALL_CHECKPOINT_FRAMES;
                    db.pragma_update(None, "wal_autocheckpoint", frames)?;
                    None
                }
            },
        };
        Ok(SqliteStore {
            db,
            flusher,
            claimed: Mutex::new(Arc::new(claimed)),
            deferred: Mutex::new(Vec::new()),
            runner: crate::new_runner_id(),
            registration: Registration::default(),
        })
    }

    /// The connection, with every deferred write applied.
    fn lock(&self) -> Result<MutexGuard<'_, Db>, StoreError> {
        let mut db = self.connection();
        db.answering()?;
        self.apply_deferred(&mut db, Vec::new())?;
        Ok(db)
    }

    /// The connection for a call that only reads. Deferred writes that cannot be applied
    /// now (a full disk) stay deferred, and the read answers from what is stored: reads
    /// keep working while nothing can be written, and the writes go with the first call
    /// that can.
    fn read(&self) -> Result<MutexGuard<'_, Db>, StoreError> {
        let mut db = self.connection();
        db.answering()?;
        if let Err(e) = self.apply_deferred(&mut db, Vec::new()) {
            tracing::debug!(error = %e, "deferred records cannot be written yet; reading without them");
        }
        Ok(db)
    }

    /// The connection as it is.
    fn connection(&self) -> MutexGuard<'_, Db> {
        commits::lock(&self.db)
    }

    fn take_deferred(&self) -> Vec<Write> {
        std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Applies the deferred writes, then `batch`, in one transaction. When it fails, the
    /// deferred writes are kept, before any deferred since, for the next call.
    fn apply_deferred(&self, db: &mut Db, batch: Vec<Write>) -> Result<(), StoreError> {
        let deferred = self.take_deferred();
        if deferred.is_empty() && batch.is_empty() {
            return Ok(());
        }
        db.unit(|tx| {
            for write in deferred.iter().chain(&batch) {
                apply(tx, write)?;
            }
            Ok(Outcome::Keep(()))
        })
        .inspect_err(|_| {
            let mut kept = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
            let since = std::mem::replace(&mut *kept, deferred);
            kept.extend(since);
        })
    }
}

impl Drop for SqliteStore {
    /// Nothing deferred or grouped is left behind when the store closes.
    fn drop(&mut self) {
        drop(self.flusher.take());
        let mut db = self.connection();
        if db.answering().is_err() {
            return;
        }
        if let Err(e) = self.apply_deferred(&mut db, Vec::new()) {
            tracing::warn!(error = %e, "cannot write the last deferred records");
        }
        if let Err(e) = db.commit() {
            tracing::error!(error = %e, "cannot commit the state store's last writes");
        }
    }
}

/// One document write, in a transaction.
fn apply(tx: &Connection, write: &Write) -> rusqlite::Result<()> {
    match write {
        Write::Put {
            collection,
            key,
            scope,
            body,
        } => {
            // Most puts change a document's body alone: setting only the body leaves the
            // indexes untouched, so that a commit writes one page instead of three.
            let updated = tx
                .prepare_cached(
                    "UPDATE documents SET body = ?4
                     WHERE collection = ?1 AND key = ?2 AND scope = ?3",
                )?
                .execute(params![collection.name(), key, scope, body])?;
            if updated == 0 {
                tx.prepare_cached(
                    "INSERT INTO documents (collection, key, scope, body) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (collection, key) DO UPDATE SET scope = ?3, body = ?4",
                )?
                .execute(params![collection.name(), key, scope, body])?;
            }
        }
        Write::Delete { collection, key } => {
            tx.prepare_cached("DELETE FROM documents WHERE collection = ?1 AND key = ?2")?
                .execute(params![collection.name(), key])?;
        }
    }
    Ok(())
}

/// Every address the database holds claimed.
fn claimed_in(connection: &Connection) -> Result<IpSet, StoreError> {
    let mut claimed = IpSet::new();
    let mut stmt = connection.prepare_cached("SELECT address FROM ip_addresses")?;
    for address in stmt.query_map([], |row| row.get::<_, i64>(0))? {
        claimed.insert(address? as u32);
    }
    Ok(claimed)
}

/// The schema this build writes. Version 2 gives tasks their kind and whether they change
/// their deployment, so that the latest operation of a deployment is one indexed query;
/// version 3 their runner, and locks their runner and expiry (director processes that
/// share a database tell the living from the dead by them); version 4 marks each
/// deployment's newest change, which pruning keeps ([`NEWEST_CHANGES`]).
pub const SCHEMA_VERSION: i64 = 4;

/// Pruning runs at the end of every task, so it must cost the same on a store of ten
/// thousand deployments as on one of ten: finding each deployment's newest change by
/// grouping every task (as it once did) made a 10,000-instance fleet's run three quarters
/// pruning. The database marks that task as it is inserted (a trigger, so that nothing
/// written by any path leaves it wrong), and pruning walks two partial indexes: the
/// kind's finished tasks, to find the newest beyond those kept, and the finished tasks
/// that are no deployment's newest change, to take the older ones.
const NEWEST_CHANGES: &str = "
DROP INDEX IF EXISTS tasks_by_kind;
CREATE INDEX IF NOT EXISTS tasks_finished ON tasks (kind, id)
    WHERE state IN ('done', 'error', 'cancelled');
CREATE INDEX IF NOT EXISTS tasks_prunable ON tasks (kind, id)
    WHERE state IN ('done', 'error', 'cancelled') AND newest_change = 0;
CREATE TRIGGER IF NOT EXISTS tasks_newest_change AFTER INSERT ON tasks
    WHEN NEW.deployment IS NOT NULL AND NEW.changes = 1
BEGIN
    UPDATE tasks SET newest_change = 0
        WHERE deployment = NEW.deployment AND changes = 1 AND newest_change = 1
          AND id < NEW.id;
    UPDATE tasks SET newest_change = 1 WHERE id = NEW.id;
END;
";

/// Marks every deployment's newest change anew, for tasks written before the mark or
/// whose kind (and so whether they change their deployment) was named since.
const MARK_NEWEST_CHANGES: &str = "
UPDATE tasks SET newest_change = (id IN (SELECT MAX(id) FROM tasks
                                         WHERE deployment IS NOT NULL AND changes = 1
                                         GROUP BY deployment))";

/// Brings an older database up to [`SCHEMA_VERSION`] in one transaction (and gives tasks
/// written without a kind theirs), and refuses a newer one rather than misread it.
/// The database read as it is on disk, for a directory where WAL's side files cannot be
/// made: nothing another process has in its log is seen.
fn immutable(path: &Path, flags: rusqlite::OpenFlags) -> Result<Connection, StoreError> {
    tracing::info!(
        path = %path.display(),
        "the state directory cannot hold SQLite's side files: reading the database as it is on disk"
    );
    let uri = format!("file:{}?immutable=1", uri_path(path));
    Ok(Connection::open_with_flags(uri, flags)?)
}

/// A path as an SQLite URI's path: the characters a URI gives meaning to, escaped.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '%' | '?' | '#' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn migrate(connection: &Connection) -> Result<(), StoreError> {
    let found: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found,
            known: SCHEMA_VERSION,
        });
    }
    // Most opens find nothing to do; they take no write lock.
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    connection.execute_batch("BEGIN IMMEDIATE")?;
    let applied = (|| -> Result<(), StoreError> {
        let columns: Vec<String> = connection
            .prepare("SELECT name FROM pragma_table_info('tasks')")?
            .query_map([], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        if !columns.iter().any(|c| c == "kind") {
            connection.execute_batch(
                "ALTER TABLE tasks ADD COLUMN kind TEXT NOT NULL DEFAULT '';
                 ALTER TABLE tasks ADD COLUMN changes INTEGER NOT NULL DEFAULT 1;",
            )?;
        }
        add_column(connection, "tasks", "runner", "TEXT NOT NULL DEFAULT ''")?;
        add_column(connection, "locks", "runner", "TEXT NOT NULL DEFAULT ''")?;
        add_column(
            connection,
            "locks",
            "expires_at",
            "INTEGER NOT NULL DEFAULT 0",
        )?;
        if found < 4 {
            add_column(
                connection,
                "tasks",
                "newest_change",
                "INTEGER NOT NULL DEFAULT 0",
            )?;
            connection.execute_batch(MARK_NEWEST_CHANGES)?;
        }
        connection.execute_batch(
            "CREATE INDEX IF NOT EXISTS tasks_by_deployment ON tasks (deployment, changes, id);",
        )?;
        if found < SCHEMA_VERSION {
            connection.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        Ok(())
    })();
    match applied {
        Ok(()) => connection.execute_batch("COMMIT")?,
        Err(e) => {
            // The migration's own error says what went wrong; a failed rollback ends
            // with the connection anyway.
            let _ = connection.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    Ok(())
}

/// Adds `column` to `table` unless it has it (a table made by an older schema lacks it).
fn add_column(
    connection: &Connection,
    table: &str,
    column: &str,
    declaration: &str,
) -> Result<(), StoreError> {
    let has: bool = connection.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)",
        [table, column],
        |row| row.get(0),
    )?;
    if !has {
        connection.execute_batch(&format!(
            "ALTER TABLE {table} ADD COLUMN {column} {declaration}"
        ))?;
    }
    Ok(())
}

/// `,queued,processing,` for a state filter, matched with `instr`, so that every state
/// filter is one cached statement.
fn state_list(states: Option<&[TaskState]>) -> Option<String> {
    states.map(|states| {
        let mut list = String::from(",");
        for state in states {
            list.push_str(state.as_str());
            list.push(',');
        }
        list
    })
}

/// The reservation of `address` from a row of `network, deployment, instance, static`.
fn reservation(address: u32, row: &rusqlite::Row<'_>) -> rusqlite::Result<IpRecord> {
    Ok(IpRecord {
        address,
        network: row.get(0)?,
        owner: IpHolder {
            deployment: row.get(1)?,
            instance: row.get(2)?,
        },
        is_static: row.get(3)?,
    })
}

impl Store for SqliteStore {
    fn get(&self, collection: Collection, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .read()?
            .prepare_cached("SELECT body FROM documents WHERE collection = ?1 AND key = ?2")?
            .query_row(params![collection.name(), key], |row| row.get(0))
            .optional()?)
    }

    fn list(&self, collection: Collection, scope: Option<&str>) -> Result<Vec<String>, StoreError> {
        let connection = self.read()?;
        let rows = match scope {
            Some(scope) => {
                let mut stmt = connection.prepare_cached(
                    "SELECT body FROM documents WHERE collection = ?1 AND scope = ?2 ORDER BY key",
                )?;
                stmt.query_map(params![collection.name(), scope], |row| row.get(0))?
                    .collect::<Result<Vec<String>, _>>()?
            }
            None => {
                let mut stmt = connection.prepare_cached(
                    "SELECT body FROM documents WHERE collection = ?1 ORDER BY key",
                )?;
                stmt.query_map(params![collection.name()], |row| row.get(0))?
                    .collect::<Result<Vec<String>, _>>()?
            }
        };
        Ok(rows)
    }

    fn keys(&self, collection: Collection) -> Result<Vec<String>, StoreError> {
        let connection = self.read()?;
        let mut stmt = connection
            .prepare_cached("SELECT key FROM documents WHERE collection = ?1 ORDER BY key")?;
        let keys = stmt
            .query_map(params![collection.name()], |row| row.get(0))?
            .collect::<Result<Vec<String>, _>>()?;
        Ok(keys)
    }

    fn write(&self, batch: Vec<Write>) -> Result<(), StoreError> {
        let mut db = self.connection();
        db.answering()?;
        self.apply_deferred(&mut db, batch)
    }

    fn insert(
        &self,
        collection: Collection,
        key: &str,
        scope: &str,
        body: &str,
    ) -> Result<bool, StoreError> {
        self.lock()?.unit(|tx| {
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO documents (collection, key, scope, body) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (collection, key) DO NOTHING",
                )?
                .execute(params![collection.name(), key, scope, body])?;
            Ok(Outcome::Keep(inserted > 0))
        })
    }

    fn defer(&self, batch: Vec<Write>) -> Result<(), StoreError> {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(batch);
        Ok(())
    }

    fn create_task(
        &self,
        kind: TaskKindSpec,
        deployment: Option<&str>,
        lock: Option<&str>,
        user: Option<&str>,
        lease: Lease,
    ) -> Result<Result<Task, u64>, StoreError> {
        self.lock()?.unit(|tx| {
            if let Some(lock) = lock {
                let holder: Option<(i64, i64)> = tx
                    .prepare_cached("SELECT task_id, expires_at FROM locks WHERE name = ?1")?
                    .query_row([lock], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()?;
                match holder {
                    Some((holder, expires)) if expires >= lease.now_stored() => {
                        return Ok(Outcome::Undo(Err(holder as u64)));
                    }
                    Some(_) => {
                        tx.prepare_cached("DELETE FROM locks WHERE name = ?1")?
                            .execute([lock])?;
                    }
                    None => {}
                }
            }
            tx.prepare_cached(
                "INSERT INTO tasks (state, deployment, body, kind, changes, runner)
                 VALUES ('queued', ?1, '{}', ?2, ?3, ?4)",
            )?
            .execute(params![
                deployment,
                kind.name,
                kind.changes_deployment,
                self.runner
            ])?;
            let id = tx.last_insert_rowid() as u64;
            let task = Task::queued(id, kind, deployment, user, lease.now / 1000);
            tx.prepare_cached("UPDATE tasks SET body = ?1 WHERE id = ?2")?
                .execute(params![serde_json::to_string(&task)?, id as i64])?;
            if let Some(lock) = lock {
                tx.prepare_cached(
                    "INSERT INTO locks (name, task_id, runner, expires_at) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![
                    lock,
                    id as i64,
                    self.runner,
                    lease.until_stored()
                ])?;
            }
            Ok(Outcome::Keep(Ok(task)))
        })
    }

    fn put_task(&self, task: &Task) -> Result<(), StoreError> {
        self.lock()?.unit(|tx| {
            let stored: Option<String> = tx
                .prepare_cached("SELECT state FROM tasks WHERE id = ?1")?
                .query_row([task.id as i64], |row| row.get(0))
                .optional()?;
            let Some(written) = stored.and_then(|s| crate::task::written_over(&s, task.clone()))
            else {
                return Ok(Outcome::Keep(()));
            };
            tx.prepare_cached("UPDATE tasks SET state = ?1, body = ?2 WHERE id = ?3")?
                .execute(params![
                    written.state.as_str(),
                    serde_json::to_string(&written)?,
                    written.id as i64
                ])?;
            Ok(Outcome::Keep(()))
        })
    }

    fn request_cancel(&self, id: u64) -> Result<Option<Task>, StoreError> {
        self.lock()?.unit(|tx| {
            let body: Option<String> = tx
                .prepare_cached("SELECT body FROM tasks WHERE id = ?1")?
                .query_row([id as i64], |row| row.get(0))
                .optional()?;
            let Some(body) = body else {
                return Ok(Outcome::Keep(None));
            };
            let mut found = task_from(&body)?;
            if found.ask_to_cancel() {
                tx.prepare_cached(
                    "UPDATE tasks SET state = 'cancelling', body = ?1 WHERE id = ?2",
                )?
                .execute(params![serde_json::to_string(&found)?, id as i64])?;
            }
            Ok(Outcome::Keep(Some(found)))
        })
    }

    fn runner(&self) -> &str {
        &self.runner
    }

    fn shared(&self) -> bool {
        false
    }

    fn leads(&self, _now: u64) -> Result<bool, StoreError> {
        Ok(true)
    }

    fn renew(&self, lease: Lease) -> Result<Renewal, StoreError> {
        let (inserted, cancelling) = self.lock()?.unit(|tx| {
            let renewed = tx
                .prepare_cached("UPDATE runners SET expires_at = ?2 WHERE id = ?1")?
                .execute(params![self.runner, lease.until_stored()])?;
            if renewed == 0 {
                tx.prepare_cached("INSERT INTO runners (id, expires_at) VALUES (?1, ?2)")?
                    .execute(params![self.runner, lease.until_stored()])?;
            }
            tx.prepare_cached("UPDATE locks SET expires_at = ?2 WHERE runner = ?1")?
                .execute(params![self.runner, lease.until_stored()])?;
            let cancelling: Vec<u64> = tx
                .prepare_cached("SELECT id FROM tasks WHERE runner = ?1 AND state = 'cancelling'")?
                .query_map([&self.runner], |row| row.get::<_, i64>(0))?
                .map(|id| id.map(|id| id as u64))
                .collect::<Result<_, _>>()?;
            Ok(Outcome::Keep((renewed == 0, cancelling)))
        })?;
        Ok(self.registration.renewed(inserted, cancelling))
    }

    fn task(&self, id: u64) -> Result<Option<Task>, StoreError> {
        let body: Option<String> = self
            .read()?
            .prepare_cached("SELECT body FROM tasks WHERE id = ?1")?
            .query_row([id as i64], |row| row.get(0))
            .optional()?;
        body.map(|b| task_from(&b)).transpose()
    }

    fn tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError> {
        let connection = self.read()?;
        let mut stmt = connection.prepare_cached(
            "SELECT body FROM tasks
             WHERE (?1 IS NULL OR deployment = ?1)
               AND (?2 OR changes = 1)
               AND (?3 IS NULL OR instr(?3, ',' || state || ',') > 0)
               AND (?5 IS NULL OR json_extract(body, '$.context_id') = ?5)
             ORDER BY id DESC LIMIT ?4",
        )?;
        let limit = filter
            .limit
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let bodies = stmt
            .query_map(
                params![
                    filter.deployment,
                    filter.read_only,
                    state_list(filter.states.as_deref()),
                    limit,
                    filter.context_id
                ],
                |row| row.get::<_, String>(0),
            )?
            .collect::<Result<Vec<_>, _>>()?;
        bodies.iter().map(|b| task_from(b)).collect()
    }

    fn last_change(&self, deployment: &str) -> Result<Option<Task>, StoreError> {
        let body: Option<String> = self
            .read()?
            .prepare_cached(
                "SELECT body FROM tasks WHERE deployment = ?1 AND changes = 1
                 ORDER BY id DESC LIMIT 1",
            )?
            .query_row([deployment], |row| row.get(0))
            .optional()?;
        body.map(|b| task_from(&b)).transpose()
    }

    fn last_changes(&self) -> Result<Vec<Task>, StoreError> {
        let connection = self.read()?;
        let mut stmt = connection.prepare_cached(
            "SELECT tasks.body FROM tasks JOIN (
                 SELECT MAX(id) AS id FROM tasks
                 WHERE deployment IS NOT NULL AND changes = 1 GROUP BY deployment
             ) AS latest ON tasks.id = latest.id",
        )?;
        let bodies = stmt
            .query_map([], |row| row.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        bodies.iter().map(|b| task_from(b)).collect()
    }

    fn append_events(&self, task: u64, events: &[TaskEvent]) -> Result<(), StoreError> {
        let bodies = events
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()?;
        self.lock()?.unit(|tx| {
            let last: i64 = tx
                .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM task_events WHERE task_id = ?1")?
                .query_row([task as i64], |row| row.get(0))?;
            let mut insert = tx.prepare_cached(
                "INSERT INTO task_events (task_id, seq, body) VALUES (?1, ?2, ?3)",
            )?;
            for (seq, body) in (last + 1..).zip(bodies) {
                insert.execute(params![task as i64, seq, body])?;
            }
            Ok(Outcome::Keep(()))
        })
    }

    fn events(&self, task: u64) -> Result<Vec<TaskEvent>, StoreError> {
        let connection = self.read()?;
        let mut stmt = connection
            .prepare_cached("SELECT body FROM task_events WHERE task_id = ?1 ORDER BY seq")?;
        let bodies = stmt
            .query_map([task as i64], |row| row.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        bodies
            .iter()
            .map(|b| serde_json::from_str(b).map_err(StoreError::from))
            .collect()
    }

    fn lock_holder(&self, lock: &str) -> Result<Option<u64>, StoreError> {
        let holder: Option<i64> = self
            .read()?
            .prepare_cached("SELECT task_id FROM locks WHERE name = ?1")?
            .query_row([lock], |row| row.get(0))
            .optional()?;
        Ok(holder.map(|h| h as u64))
    }

    fn release_lock(&self, lock: &str, task: u64) -> Result<(), StoreError> {
        self.lock()?.unit(|tx| {
            tx.prepare_cached("DELETE FROM locks WHERE name = ?1 AND task_id = ?2")?
                .execute(params![lock, task as i64])?;
            Ok(Outcome::Keep(()))
        })
    }

    fn put_blob(&self, id: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.lock()?.unit(|tx| {
            tx.prepare_cached("INSERT OR REPLACE INTO blobs (id, bytes) VALUES (?1, ?2)")?
                .execute(params![id, bytes])?;
            Ok(Outcome::Keep(()))
        })
    }

    /// Copied in pieces into a blob of the file's size made first: SQLite writes it page
    /// by page, and memory holds one piece.
    fn put_blob_file(&self, id: &str, path: &std::path::Path) -> Result<(), StoreError> {
        let source = |source| StoreError::Source {
            path: path.to_path_buf(),
            source,
        };
        let mut file = std::fs::File::open(path).map_err(source)?;
        let len = file.metadata().map_err(source)?.len();
        let len = i64::try_from(len).map_err(|_| source(std::io::Error::other("too large")))?;
        self.lock()?.unit(|tx| {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO blobs (id, bytes) VALUES (?1, zeroblob(?2))",
            )?
            .execute(params![id, len])?;
            let row = tx.last_insert_rowid();
            let mut blob = tx.blob_open(rusqlite::MAIN_DB, "blobs", "bytes", row, false)?;
            std::io::copy(&mut file, &mut blob).map_err(source)?;
            Ok(Outcome::Keep(()))
        })
    }

    fn blob(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let connection = self.read()?;
        Ok(connection
            .prepare_cached("SELECT bytes FROM blobs WHERE id = ?1")?
            .query_row([id], |row| row.get(0))
            .optional()?)
    }

    fn blob_ids(&self) -> Result<Vec<String>, StoreError> {
        let connection = self.read()?;
        let mut stmt = connection.prepare_cached("SELECT id FROM blobs ORDER BY id")?;
        let ids = stmt
            .query_map([], |row| row.get(0))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ids)
    }

    fn delete_blob(&self, id: &str) -> Result<(), StoreError> {
        self.lock()?.unit(|tx| {
            tx.prepare_cached("DELETE FROM blobs WHERE id = ?1")?
                .execute([id])?;
            Ok(Outcome::Keep(()))
        })
    }

    fn locks(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let connection = self.read()?;
        let mut stmt =
            connection.prepare_cached("SELECT name, task_id FROM locks ORDER BY name")?;
        let rows = stmt
            .query_map([], |row| Ok((row.get(0)?, row.get::<_, i64>(1)? as u64)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn claimed(&self) -> Result<Arc<IpSet>, StoreError> {
        Ok(Arc::clone(
            &self.claimed.lock().unwrap_or_else(|p| p.into_inner()),
        ))
    }

    fn ip_holders(&self, addresses: &[u32]) -> Result<Vec<IpRecord>, StoreError> {
        let connection = self.read()?;
        let mut stmt = connection.prepare_cached(
            "SELECT network, deployment, instance, static FROM ip_addresses WHERE address = ?1",
        )?;
        let mut found = Vec::new();
        for &address in addresses {
            let record = stmt
                .query_row([i64::from(address)], |row| reservation(address, row))
                .optional()?;
            found.extend(record);
        }
        Ok(found)
    }

    fn apply_ips(
        &self,
        claims: &[IpClaim],
        releases: &[IpRelease],
    ) -> Result<Result<(), IpRecord>, StoreError> {
        let applied = self.lock()?.unit(|tx| {
            let mut released = Vec::new();
            for step in ip_steps(claims, releases) {
                match step {
                    IpStep::Release(release) => {
                        let deleted = tx
                            .prepare_cached(
                                "DELETE FROM ip_addresses
                                 WHERE address = ?1 AND network = ?2 AND deployment = ?3
                                   AND instance = ?4",
                            )?
                            .execute(params![
                                i64::from(release.address),
                                release.network,
                                release.owner.deployment,
                                release.owner.instance
                            ])?;
                        if deleted > 0 {
                            released.push(release.address);
                        }
                    }
                    IpStep::Claim(claim) => {
                        let held = tx
                            .prepare_cached(
                                "SELECT network, deployment, instance, static FROM ip_addresses
                                 WHERE address = ?1",
                            )?
                            .query_row([i64::from(claim.address)], |row| {
                                reservation(claim.address, row)
                            })
                            .optional()?;
                        if let Some(held) = held
                            && held.owner != claim.owner
                        {
                            // Undone whole: a refused plan writes nothing.
                            return Ok(Outcome::Undo(Err(held)));
                        }
                        tx.prepare_cached(
                            "INSERT INTO ip_addresses (address, network, deployment, instance, static)
                             VALUES (?1, ?2, ?3, ?4, ?5)
                             ON CONFLICT (address) DO UPDATE SET network = ?2, static = ?5",
                        )?
                        .execute(params![
                            i64::from(claim.address),
                            claim.network,
                            claim.owner.deployment,
                            claim.owner.instance,
                            claim.is_static
                        ])?;
                    }
                }
            }
            Ok(Outcome::Keep(Ok(released)))
        })?;
        let released = match applied {
            Ok(released) => released,
            Err(held) => return Ok(Err(held)),
        };
        let mut shared = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        let set = Arc::make_mut(&mut shared);
        // Released first: an address handed over stays claimed.
        for address in released {
            set.remove(address);
        }
        for claim in claims {
            set.insert(claim.address);
        }
        Ok(Ok(()))
    }

    fn release_ip(&self, address: u32, network: &str, owner: &IpHolder) -> Result<(), StoreError> {
        let deleted = self.lock()?.unit(|tx| {
            let deleted = tx
                .prepare_cached(
                    "DELETE FROM ip_addresses
                     WHERE address = ?1 AND network = ?2 AND deployment = ?3 AND instance = ?4",
                )?
                .execute(params![
                    i64::from(address),
                    network,
                    owner.deployment,
                    owner.instance
                ])?;
            Ok(Outcome::Keep(deleted))
        })?;
        if deleted > 0 {
            let mut shared = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
            Arc::make_mut(&mut shared).remove(address);
        }
        Ok(())
    }

    fn ips_in(&self, lo: u32, hi: u32) -> Result<Vec<u32>, StoreError> {
        let connection = self.read()?;
        let mut stmt = connection.prepare_cached(
            "SELECT address FROM ip_addresses WHERE address BETWEEN ?1 AND ?2 ORDER BY address",
        )?;
        let rows = stmt
            .query_map([i64::from(lo), i64::from(hi)], |row| row.get::<_, i64>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows.into_iter().map(|a| a as u32).collect())
    }

    fn ips_of(&self, deployment: &str) -> Result<Vec<IpRecord>, StoreError> {
        let connection = self.read()?;
        let mut stmt = connection.prepare_cached(
            "SELECT address, network, instance, static FROM ip_addresses
             WHERE deployment = ?1 ORDER BY address",
        )?;
        let rows = stmt
            .query_map([deployment], |row| {
                Ok(IpRecord {
                    address: row.get::<_, i64>(0)? as u32,
                    network: row.get(1)?,
                    owner: IpHolder {
                        deployment: deployment.to_string(),
                        instance: row.get(2)?,
                    },
                    is_static: row.get(3)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn recover(&self, reason: &str, now: u64, recovery: Recovery) -> Result<Vec<u64>, StoreError> {
        let now_ms = i64::try_from(now).unwrap_or(i64::MAX);
        let everyone_else = recovery == Recovery::AllOthers;
        self.lock()?.unit(|tx| {
            // The gone: every other runner, or those whose lease ran out. Tasks of a
            // runner nobody knows (written before runners were) are as good as gone.
            tx.execute(
                "CREATE TEMP TABLE IF NOT EXISTS gone_runners (id TEXT PRIMARY KEY)",
                [],
            )?;
            tx.execute("DELETE FROM gone_runners", [])?;
            tx.execute(
                "INSERT INTO gone_runners SELECT id FROM runners
                 WHERE id <> ?1 AND (?2 OR expires_at < ?3)",
                params![self.runner, everyone_else, now_ms],
            )?;
            let stale: Vec<String> = tx
                .prepare(
                    "SELECT body FROM tasks
                     WHERE state IN ('queued', 'processing', 'cancelling') AND runner <> ?1
                       AND (?2 OR runner IN (SELECT id FROM gone_runners)
                            OR runner NOT IN (SELECT id FROM runners))
                     ORDER BY id",
                )?
                .query_map(params![self.runner, everyone_else], |row| row.get(0))?
                .collect::<Result<Vec<_>, _>>()?;
            let mut ended = Vec::new();
            for body in stale {
                let task = task_from(&body)?.errored(reason, now / 1000);
                tx.execute(
                    "UPDATE tasks SET state = 'error', body = ?1 WHERE id = ?2",
                    params![serde_json::to_string(&task)?, task.id as i64],
                )?;
                ended.push(task.id);
            }
            tx.execute(
                "DELETE FROM locks WHERE runner <> ?1
                   AND (?2 OR runner IN (SELECT id FROM gone_runners) OR expires_at < ?3
                        OR runner NOT IN (SELECT id FROM runners))",
                params![self.runner, everyone_else, now_ms],
            )?;
            tx.execute(
                "DELETE FROM runners WHERE id IN (SELECT id FROM gone_runners)",
                [],
            )?;
            tx.execute("DELETE FROM gone_runners", [])?;
            Ok(Outcome::Keep(ended))
        })
    }

    fn prune_tasks(
        &self,
        kind: TaskKindSpec,
        keep: usize,
        attached: &[Collection],
    ) -> Result<Vec<u64>, StoreError> {
        let kind = kind.name;
        self.lock()?.unit(|tx| {
            // Finding the newest task beyond those kept walks `keep` of them: a kind with
            // nothing to prune (every finished task some deployment's newest change) is
            // told apart first, by one seek.
            let oldest_prunable: Option<i64> = tx
                .prepare_cached(
                    "SELECT MIN(id) FROM tasks
                     WHERE kind = ?1 AND state IN ('done', 'error', 'cancelled')
                       AND newest_change = 0",
                )?
                .query_row([kind], |row| row.get(0))?;
            if oldest_prunable.is_none() {
                return Ok(Outcome::Keep(Vec::new()));
            }
            let Some(newest_pruned) = tx
                .prepare_cached(
                    "SELECT id FROM tasks
                     WHERE kind = ?1 AND state IN ('done', 'error', 'cancelled')
                     ORDER BY id DESC LIMIT 1 OFFSET ?2",
                )?
                .query_row(params![kind, keep as i64], |row| row.get::<_, i64>(0))
                .optional()?
            else {
                return Ok(Outcome::Keep(Vec::new()));
            };
            let doomed: Vec<i64> = tx
                .prepare_cached(
                    "SELECT id FROM tasks
                     WHERE kind = ?1 AND state IN ('done', 'error', 'cancelled')
                       AND newest_change = 0 AND id <= ?2
                     ORDER BY id DESC LIMIT 500",
                )?
                .query_map(params![kind, newest_pruned], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            for id in &doomed {
                tx.prepare_cached("DELETE FROM task_events WHERE task_id = ?1")?
                    .execute([id])?;
                for kept in attached {
                    tx.prepare_cached("DELETE FROM documents WHERE collection = ?1 AND key = ?2")?
                        .execute(params![kept.name(), id.to_string()])?;
                }
                tx.prepare_cached("DELETE FROM tasks WHERE id = ?1")?
                    .execute([id])?;
            }
            Ok(Outcome::Keep(
                doomed.into_iter().map(|i| i as u64).collect(),
            ))
        })
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.lock()?.commit()
    }

    fn name_unnamed_tasks(
        &self,
        kinds: &[TaskKindSpec],
        fallback: TaskKindSpec,
    ) -> Result<usize, StoreError> {
        let mut db = self.lock()?;
        // Most opens find none; they take no write lock.
        let unnamed: bool = db.query_row(
            "SELECT EXISTS (SELECT 1 FROM tasks WHERE kind = '')",
            [],
            |row| row.get(0),
        )?;
        if !unnamed {
            return Ok(0);
        }
        db.unit(|tx| {
            let old: Vec<(i64, String)> = tx
                .prepare("SELECT id, body FROM tasks WHERE kind = ''")?
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?;
            for (id, body) in &old {
                let (kind, body) = named(body, kinds, fallback)?;
                tx.prepare_cached(
                    "UPDATE tasks SET kind = ?1, changes = ?2, body = ?3 WHERE id = ?4",
                )?
                .execute(params![kind.name, kind.changes_deployment, body, id])?;
            }
            tx.execute_batch(MARK_NEWEST_CHANGES)?;
            Ok(Outcome::Keep(old.len()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{get, put};

    #[test]
    fn blobs_are_kept_by_id_and_outlive_the_connection() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        store.put_blob("b", b"second").unwrap();
        store.put_blob("a", b"first").unwrap();
        store.put_blob("a", b"again").unwrap();
        assert_eq!(store.blob("a").unwrap().as_deref(), Some(&b"again"[..]));
        assert_eq!(store.blob("c").unwrap(), None);
        assert_eq!(store.blob_ids().unwrap(), ["a", "b"]);
        store.delete_blob("a").unwrap();
        drop(store);
        let again = SqliteStore::open(dir.path()).unwrap();
        assert_eq!(again.blob_ids().unwrap(), ["b"]);
        assert_eq!(again.blob("b").unwrap().as_deref(), Some(&b"second"[..]));
    }

    fn grouped(dir: &Path, every: std::time::Duration) -> SqliteStore {
        SqliteStore::open_with(dir, Commits::Grouped { every }).unwrap()
    }

    const AN_HOUR: std::time::Duration = std::time::Duration::from_secs(3_600);

    #[test]
    fn grouped_calls_reach_the_file_together_when_the_store_closes() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = SqliteStore::open(dir.path()).unwrap();
        let stored = |key: &str| get::<u32>(&elsewhere, crate::testing::FLEET, key).unwrap();
        let store = grouped(dir.path(), AN_HOUR);
        store
            .write(vec![put(crate::testing::FLEET, "a", "", &1)])
            .unwrap();
        assert_eq!(
            get::<u32>(&store, crate::testing::FLEET, "a").unwrap(),
            Some(1)
        );
        assert_eq!(stored("a"), None, "not committed yet");
        let task = store
            .create_task(
                crate::testing::kinds::CREATE,
                Some("d"),
                Some("d"),
                None,
                crate::Lease::forever(0),
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            store
                .create_task(
                    crate::testing::kinds::CREATE,
                    Some("d"),
                    Some("d"),
                    None,
                    crate::Lease::forever(0)
                )
                .unwrap(),
            Err(task.id),
            "a call undone in a group answers as it would alone"
        );
        store
            .write(vec![put(crate::testing::FLEET, "b", "", &2)])
            .unwrap();
        store.sync().unwrap();
        assert_eq!(
            (stored("a"), stored("b")),
            (Some(1), Some(2)),
            "a sync commits the open group"
        );
        store
            .write(vec![put(crate::testing::FLEET, "c", "", &3)])
            .unwrap();
        assert_eq!(stored("c"), None, "a new group");
        drop(store);
        assert_eq!(stored("c"), Some(3));
        assert_eq!(elsewhere.lock_holder("d").unwrap(), Some(task.id));
        assert_eq!(elsewhere.tasks(&TaskFilter::default()).unwrap().len(), 1);
    }

    #[test]
    fn an_idle_group_is_committed_without_waiting_for_the_next_call() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = SqliteStore::open(dir.path()).unwrap();
        let store = grouped(dir.path(), std::time::Duration::from_millis(10));
        store
            .write(vec![put(crate::testing::FLEET, "a", "", &1)])
            .unwrap();
        let committed = (0..1_000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            get::<u32>(&elsewhere, crate::testing::FLEET, "a").unwrap() == Some(1)
        });
        assert!(committed, "another process never saw the write");
        drop(store);
    }

    /// Lets the database grow no further, so that a call needing a new page fails halfway.
    fn full(store: &SqliteStore) {
        let db = store.connection();
        let pages: i64 = db
            .query_row("PRAGMA page_count", [], |row| row.get(0))
            .unwrap();
        db.pragma_update(None, "max_page_count", pages).unwrap();
    }

    /// A full disk: writes fail, reads answer (without the deferred writes, which stay
    /// deferred), and once there is room the deferred writes go with the next write.
    #[test]
    fn reads_answer_on_a_full_disk_and_deferred_writes_wait_for_room() {
        let store = SqliteStore::in_memory().unwrap();
        store
            .write(vec![put(crate::testing::FLEET, "a", "", &1)])
            .unwrap();
        full(&store);
        store
            .defer(vec![put(
                crate::testing::FLEET,
                "big",
                "",
                &"x".repeat(1 << 20),
            )])
            .unwrap();
        assert_eq!(
            get::<u32>(&store, crate::testing::FLEET, "a").unwrap(),
            Some(1)
        );
        assert_eq!(
            crate::list::<serde_json::Value>(&store, crate::testing::FLEET, None)
                .unwrap()
                .len(),
            1,
            "read without the deferred write"
        );
        assert!(store.tasks(&TaskFilter::default()).unwrap().is_empty());
        assert!(
            store
                .write(vec![put(crate::testing::FLEET, "b", "", &2)])
                .is_err(),
            "a write needs the room the deferred one lacks"
        );
        store
            .connection()
            .pragma_update(None, "max_page_count", 1_000_000)
            .unwrap();
        store
            .write(vec![put(crate::testing::FLEET, "b", "", &2)])
            .unwrap();
        assert!(
            get::<String>(&store, crate::testing::FLEET, "big")
                .unwrap()
                .is_some(),
            "the deferred write went first"
        );
        assert_eq!(
            get::<u32>(&store, crate::testing::FLEET, "b").unwrap(),
            Some(2)
        );
    }

    fn halfway(store: &SqliteStore) -> Result<(), StoreError> {
        store.write(vec![
            put(crate::testing::FLEET, "b", "", &2),
            put(crate::testing::FLEET, "c", "", &"x".repeat(1 << 20)),
        ])
    }

    /// A call that writes `key` and panics before it ends.
    fn panic_halfway(store: &SqliteStore, key: &str) {
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store
                .connection()
                .unit(|tx| -> Result<Outcome<()>, StoreError> {
                    apply(tx, &put(crate::testing::FLEET, key, "", &0))?;
                    panic!("a call that panics halfway")
                })
        }));
        assert!(panicked.is_err());
    }

    #[test]
    fn a_call_that_panicked_halfway_leaves_nothing_behind_and_the_store_answers() {
        let store = SqliteStore::in_memory().unwrap();
        panic_halfway(&store, "a");
        store
            .write(vec![put(crate::testing::FLEET, "b", "", &2)])
            .unwrap();
        let stored = |key: &str| get::<u32>(&store, crate::testing::FLEET, key).unwrap();
        assert_eq!((stored("a"), stored("b")), (None, Some(2)));
    }

    #[test]
    fn a_call_that_panicked_halfway_in_a_group_takes_the_group_down() {
        let dir = tempfile::tempdir().unwrap();
        let store = grouped(dir.path(), AN_HOUR);
        store
            .write(vec![put(crate::testing::FLEET, "a", "", &1)])
            .unwrap();
        panic_halfway(&store, "b");
        assert!(matches!(
            store.write(vec![put(crate::testing::FLEET, "c", "", &3)]),
            Err(StoreError::Lost)
        ));
        drop(store);
        let reopened = SqliteStore::open(dir.path()).unwrap();
        let stored = |key: &str| get::<u32>(&reopened, crate::testing::FLEET, key).unwrap();
        assert_eq!((stored("a"), stored("b"), stored("c")), (None, None, None));
    }

    #[test]
    fn a_store_opened_to_read_only_reads_and_changes_nothing_even_where_it_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        store
            .write(vec![put(crate::testing::FLEET, "a", "", &1)])
            .unwrap();
        drop(store);
        let db = dir.path().join("fleet.db");
        let before = std::fs::read(&db).unwrap();
        let reader = SqliteStore::open_read_only(dir.path()).unwrap();
        assert_eq!(
            get::<u32>(&reader, crate::testing::FLEET, "a").unwrap(),
            Some(1)
        );
        assert!(
            reader
                .write(vec![put(crate::testing::FLEET, "b", "", &2)])
                .is_err()
        );
        drop(reader);
        assert_eq!(std::fs::read(&db).unwrap(), before);
        // Where WAL's side files cannot be made (a read-only directory; here a folder in
        // the way, which stops even root), the database is read as it is on disk.
        let copy = tempfile::tempdir().unwrap();
        std::fs::copy(&db, copy.path().join("fleet.db")).unwrap();
        std::fs::create_dir(copy.path().join("fleet.db-shm")).unwrap();
        std::fs::create_dir(copy.path().join("fleet.db-wal")).unwrap();
        let reader = SqliteStore::open_read_only(copy.path()).unwrap();
        assert_eq!(
            get::<u32>(&reader, crate::testing::FLEET, "a").unwrap(),
            Some(1)
        );
        assert!(SqliteStore::open_read_only(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_call_failing_halfway_is_undone_whole_when_each_call_commits() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        store
            .write(vec![put(crate::testing::FLEET, "a", "", &1)])
            .unwrap();
        full(&store);
        assert!(halfway(&store).is_err());
        let stored = |key: &str| get::<u32>(&store, crate::testing::FLEET, key).unwrap();
        assert_eq!((stored("a"), stored("b")), (Some(1), None));
    }

    #[test]
    fn a_call_failing_halfway_in_a_group_takes_the_group_and_the_store_down() {
        let dir = tempfile::tempdir().unwrap();
        let store = grouped(dir.path(), AN_HOUR);
        store
            .write(vec![put(crate::testing::FLEET, "a", "", &1)])
            .unwrap();
        full(&store);
        assert!(halfway(&store).is_err());
        assert!(matches!(
            get::<u32>(&store, crate::testing::FLEET, "a"),
            Err(StoreError::Lost)
        ));
        assert!(matches!(store.locks(), Err(StoreError::Lost)));
        drop(store);
        let reopened = SqliteStore::open(dir.path()).unwrap();
        let stored = |key: &str| get::<u32>(&reopened, crate::testing::FLEET, key).unwrap();
        assert_eq!(
            (stored("a"), stored("b")),
            (None, None),
            "the whole group is gone, the call's half with it"
        );
    }

    #[test]
    fn a_version_1_database_gets_task_kinds_from_their_descriptions() {
        let dir = tempfile::tempdir().unwrap();
        {
            let connection = Connection::open(dir.path().join("fleet.db")).unwrap();
            connection
                .execute_batch(
                    "CREATE TABLE tasks (id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT NOT NULL,
                         deployment TEXT, body TEXT NOT NULL);
                     INSERT INTO tasks (state, deployment, body) VALUES ('done', 'd',
                         '{\"id\":1,\"state\":\"done\",\"description\":\"create deployment\",\"deployment\":\"d\",\"result\":null,\"started_at\":1,\"finished_at\":2}');
                     INSERT INTO tasks (state, deployment, body) VALUES ('done', 'd',
                         '{\"id\":2,\"state\":\"done\",\"description\":\"retrieve vm-stats\",\"deployment\":\"d\",\"result\":null,\"started_at\":3,\"finished_at\":4}');",
                )
                .unwrap();
        }
        let store = SqliteStore::open(dir.path()).unwrap();
        let kinds = crate::testing::kinds::ALL;
        assert_eq!(
            store
                .name_unnamed_tasks(kinds, crate::testing::kinds::UPDATE)
                .unwrap(),
            2
        );
        assert_eq!(
            store.task(1).unwrap().unwrap().kind,
            crate::testing::kinds::CREATE.name
        );
        assert_eq!(
            store.task(2).unwrap().unwrap().kind,
            crate::testing::kinds::DETAILS.name
        );
        assert_eq!(store.last_change("d").unwrap().map(|t| t.id), Some(1));
        // The migration marked task 2 as d's newest change, as every task changed its
        // deployment then; named a details task, it is not, and pruning keeps 1 instead.
        let (create, details) = (
            crate::testing::kinds::CREATE,
            crate::testing::kinds::DETAILS,
        );
        let no_traces: &[Collection] = &[];
        assert!(store.prune_tasks(create, 0, no_traces).unwrap().is_empty());
        assert_eq!(store.prune_tasks(details, 0, no_traces).unwrap(), [2]);
    }

    #[test]
    fn a_version_3_database_marks_each_deployments_newest_change_which_pruning_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let update = crate::testing::kinds::UPDATE;
        let lease = Lease {
            now: 0,
            until: i64::MAX as u64,
        };
        {
            let store = SqliteStore::open(dir.path()).unwrap();
            for deployment in ["d", "d", "e"] {
                let mut task = store
                    .create_task(update, Some(deployment), None, None, lease)
                    .unwrap()
                    .unwrap();
                task.state = TaskState::Done;
                store.put_task(&task).unwrap();
            }
        }
        // As version 3 left it: no marks, no trigger.
        Connection::open(dir.path().join("fleet.db"))
            .unwrap()
            .execute_batch(
                "DROP TRIGGER tasks_newest_change; UPDATE tasks SET newest_change = 0;
                 PRAGMA user_version = 3;",
            )
            .unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        assert_eq!(store.prune_tasks(update, 0, &[]).unwrap(), [1]);
        // The trigger is back: a new change of e makes task 3 prunable.
        let mut task = store
            .create_task(update, Some("e"), None, None, lease)
            .unwrap()
            .unwrap();
        task.state = TaskState::Done;
        store.put_task(&task).unwrap();
        assert_eq!(store.prune_tasks(update, 0, &[]).unwrap(), [3]);
    }

    #[test]
    fn a_task_written_without_a_kind_after_the_migration_is_named_by_its_description() {
        let dir = tempfile::tempdir().unwrap();
        drop(SqliteStore::open(dir.path()).unwrap());
        // As an older fleet-updater would write it: no kind, the column's default.
        Connection::open(dir.path().join("fleet.db"))
            .unwrap()
            .execute(
                "INSERT INTO tasks (state, deployment, body) VALUES ('done', 'd', ?1)",
                [r#"{"id":1,"state":"done","description":"recreate deployment","deployment":"d","result":null,"started_at":1,"finished_at":2}"#],
            )
            .unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let kinds = crate::testing::kinds::ALL;
        let fallback = crate::testing::kinds::UPDATE;
        assert_eq!(store.name_unnamed_tasks(kinds, fallback).unwrap(), 1);
        assert_eq!(
            store.task(1).unwrap().unwrap().kind,
            crate::testing::kinds::RECREATE.name
        );
        assert_eq!(
            store.name_unnamed_tasks(kinds, fallback).unwrap(),
            0,
            "named once"
        );
        assert_eq!(store.tasks(&TaskFilter::default()).unwrap().len(), 1);
    }

    #[test]
    fn a_database_of_a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(SqliteStore::open(dir.path()).unwrap());
        Connection::open(dir.path().join("fleet.db"))
            .unwrap()
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let Err(e) = SqliteStore::open(dir.path()) else {
            panic!("a newer schema was opened");
        };
        assert!(
            matches!(e, StoreError::NewerSchema { found: 5, known: 4 }),
            "{e}"
        );
    }
}
