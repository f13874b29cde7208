//! How a call's writes reach the database file: each call in a transaction of its own, or
//! calls gathered into one transaction that is committed now and then.
//!
//! A commit is most of what a small write costs (the write-ahead log's locks, page
//! writes and checksums): a large fleet's run made about forty per deployment. When
//! nothing outside the process learns of the store's state call by call (one `run` of the
//! embedded fleet, whose simulated cloud lives in the same store), committing in groups
//! keeps what a crash needs: calls reach the file whole and in order, so a crash loses the
//! last few calls and never one without those before it.

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use super::StoreError;

/// When a call's writes are committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commits {
    /// Before the call returns: what another process, or a client told of a task, may
    /// rely on.
    EachCall,
    /// With the calls around it, at the latest `every` later (and when the store closes).
    /// Another process sees the state of at most `every` ago; a crash loses at most the
    /// calls of the last `every`, whole and from the newest.
    Grouped { every: Duration },
}

/// The most calls a group holds before it is committed whatever its age, so that a busy
/// process does not grow one transaction without bound.
const GROUP_CALLS: usize = 4_096;

/// What a call's writes come to: kept, or none with the call still answering (a lock
/// another task holds, an address another deploy claimed). A call decides on `Undo`
/// before it writes anything.
pub enum Outcome<T> {
    Keep(T),
    Undo(T),
}

/// The connection with what its commits need to know.
pub struct Db {
    connection: Connection,
    commits: Commits,
    /// Calls in the open group.
    grouped: usize,
    /// Set while a call of the group runs: still set at the next call, it tells of a call
    /// that panicked halfway, whose writes cannot be told from the group's.
    in_call: bool,
    /// Set when a group that held answered calls could not be committed: what those
    /// callers were told no longer holds, so the store answers nothing more.
    lost: bool,
}

impl Deref for Db {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.connection
    }
}

impl DerefMut for Db {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.connection
    }
}

/// Runs one of the few fixed statements that steer transactions.
fn steer(connection: &Connection, sql: &str) -> rusqlite::Result<()> {
    connection.prepare_cached(sql)?.execute([])?;
    Ok(())
}

impl Db {
    pub fn new(connection: Connection, commits: Commits) -> Self {
        Db {
            connection,
            commits,
            grouped: 0,
            in_call: false,
            lost: false,
        }
    }

    /// Commits each call from now on: for a store whose groups nothing would commit.
    pub fn each_call(&mut self) {
        self.commits = Commits::EachCall;
    }

    /// Runs `body` as one call's writes: all of them reach the file, in order with the
    /// other calls', or none does. The transaction is taken for writing from the start, so
    /// that a call never finds the database changed under it halfway.
    pub fn unit<T>(
        &mut self,
        body: impl FnOnce(&Connection) -> Result<Outcome<T>, StoreError>,
    ) -> Result<T, StoreError> {
        match self.commits {
            Commits::EachCall => self.own_transaction(body),
            Commits::Grouped { .. } => self.in_group(body),
        }
    }

    fn own_transaction<T>(
        &mut self,
        body: impl FnOnce(&Connection) -> Result<Outcome<T>, StoreError>,
    ) -> Result<T, StoreError> {
        if !self.connection.is_autocommit() {
            // A call that panicked halfway left its transaction open: nothing of it was
            // committed, and nothing of it may be.
            let _ = steer(&self.connection, "ROLLBACK");
        }
        steer(&self.connection, "BEGIN IMMEDIATE")?;
        let done = body(&self.connection).and_then(|outcome| match outcome {
            Outcome::Keep(t) => {
                steer(&self.connection, "COMMIT")?;
                Ok(t)
            }
            Outcome::Undo(t) => {
                steer(&self.connection, "ROLLBACK")?;
                Ok(t)
            }
        });
        if done.is_err() && !self.connection.is_autocommit() {
            // The call's own error says what went wrong; whether SQLite already rolled
            // back or this does, nothing of the call is left.
            let _ = steer(&self.connection, "ROLLBACK");
        }
        if matches!(&done, Err(e) if is_disk_full(e)) {
            // The log's frames go into the database where its pages are, and the log
            // gives its room back to the disk: what lets the next call write once
            // anything at all is freed.
            if let Err(e) = wal_checkpoint(&self.connection, "TRUNCATE") {
                tracing::warn!(error = %e, "the state store's log cannot give its room back yet");
            }
        }
        done
    }

    /// A call in the open group. It takes no savepoint: copying every page a call touches
    /// aside, in case the call fails, cost a tenth of a large fleet's run. SQLite undoes a
    /// failing statement by itself, and the store's calls find whether to undo a call
    /// before they write; so a call that fails or is undone has written nothing, and
    /// one that had (which the store's calls do not do) takes the group down with it.
    fn in_group<T>(
        &mut self,
        body: impl FnOnce(&Connection) -> Result<Outcome<T>, StoreError>,
    ) -> Result<T, StoreError> {
        self.drop_half_call();
        self.answering()?;
        if self.connection.is_autocommit() {
            steer(&self.connection, "BEGIN IMMEDIATE")?;
            self.grouped = 0;
        }
        let before = self.connection.total_changes();
        self.in_call = true;
        let done = body(&self.connection);
        self.in_call = false;
        let answer = match done {
            Ok(Outcome::Keep(t)) => {
                self.grouped += 1;
                if self.grouped >= GROUP_CALLS {
                    self.commit()?;
                }
                return Ok(t);
            }
            Ok(Outcome::Undo(t)) => Ok(t),
            Err(e) => Err(e),
        };
        if self.connection.is_autocommit() {
            // SQLite rolled the whole group back (as it may on a full disk or an I/O
            // error): the calls before this one are gone with it.
            self.lost = true;
        } else if self.connection.total_changes() != before {
            let _ = steer(&self.connection, "ROLLBACK");
            self.lost = true;
        }
        match answer {
            Ok(t) if !self.lost => Ok(t),
            Ok(_) => Err(StoreError::Lost),
            Err(e) => Err(e),
        }
    }

    /// When a call of the group panicked halfway, the group holds half of it: it is
    /// rolled back, and the store lost.
    fn drop_half_call(&mut self) {
        if self.in_call {
            let _ = steer(&self.connection, "ROLLBACK");
            self.lost = true;
            self.in_call = false;
        }
    }

    /// Refuses every call once a group is lost.
    pub fn answering(&self) -> Result<(), StoreError> {
        if self.lost {
            Err(StoreError::Lost)
        } else {
            Ok(())
        }
    }

    /// Commits the open group, if any.
    ///
    /// # Errors
    /// When the commit fails; the store then answers nothing more.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        self.drop_half_call();
        self.answering()?;
        if self.connection.is_autocommit() {
            return Ok(());
        }
        self.grouped = 0;
        steer(&self.connection, "COMMIT").map_err(|e| {
            if !self.connection.is_autocommit() {
                let _ = steer(&self.connection, "ROLLBACK");
            }
            self.lost = true;
            StoreError::from(e)
        })
    }
}

/// How many frames the write-ahead log of grouped commits grows to before it is
/// checkpointed into the database and started over (64 MiB of 4 KiB pages): a run's
/// checkpoints are off the callers' way, and fewer of them write each page fewer times.
pub const CHECKPOINT_FRAMES: i64 = 16_384;

/// The same for a store that commits each call, checkpointed by SQLite itself after a
/// commit (16 MiB): the log must never need more of the disk than a small state
/// directory has, or a disk that fills could not be given back the log's room by a
/// checkpoint that never comes.
pub const EACH_CALL_CHECKPOINT_FRAMES: i64 = 4_096;

/// What SQLite keeps of the log's file once a checkpoint started it over: the room a
/// log that grew (a large write, a reader holding a checkpoint back) gives back.
pub const LOG_KEPT_BYTES: i64 = 16 * 1024 * 1024;

/// Checkpoints run every this many commits of the flusher.
const CHECKPOINT_EVERY: u32 = 10;

/// Commits the open group every so often, so that an idle process leaves nothing
/// uncommitted for long; and checkpoints the write-ahead log on a connection of its own,
/// beside the callers rather than in their way (a large fleet's run spent a tenth of its
/// time waiting for checkpoints). Stops, and waits for its thread, when dropped.
pub struct Flusher {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// # Errors
    /// When the checkpoints' connection cannot be opened or no thread can be started.
    pub fn start(db: Arc<Mutex<Db>>, path: &Path, every: Duration) -> Result<Self, StoreError> {
        let checkpoints = Connection::open(path)?;
        checkpoints.busy_timeout(Duration::from_secs(1))?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("store-commits".into())
            .spawn(move || {
                let mut commits = 0u32;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    if let Err(e) = lock(&db).commit() {
                        // The store answers nothing more: there is nothing left to commit.
                        tracing::error!(error = %e, "cannot commit the state store's last writes");
                        break;
                    }
                    commits = commits.wrapping_add(1);
                    if commits.is_multiple_of(CHECKPOINT_EVERY) {
                        checkpoint(&db, &checkpoints, CHECKPOINT_FRAMES);
                    }
                }
            })
            .map_err(|source| StoreError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Flusher {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// Copies what the log holds into the database while the callers go on; once the log is
/// long, takes the callers' connection for a moment, between two groups, to copy the rest
/// and empty the log, which a connection beside a group that stays open cannot.
fn checkpoint(db: &Mutex<Db>, checkpoints: &Connection, long: i64) {
    let frames = match wal_checkpoint(checkpoints, "PASSIVE") {
        Ok((_, frames)) => frames,
        Err(e) => {
            tracing::warn!(error = %e, "cannot checkpoint the state store's log");
            return;
        }
    };
    if frames < long {
        return;
    }
    let mut db = lock(db);
    if db.commit().is_err() {
        return;
    }
    // Another process reading must not hold the callers up: a busy log is started over
    // at a later checkpoint.
    let restarted = db
        .busy_timeout(Duration::ZERO)
        .and_then(|()| wal_checkpoint(&db, "TRUNCATE"));
    let restored = db.busy_timeout(BUSY_TIMEOUT);
    if let Err(e) = restarted.and(restored) {
        tracing::warn!(error = %e, "cannot start the state store's log over");
    }
}

/// Whether SQLite refused a write for want of room on the disk.
fn is_disk_full(e: &StoreError) -> bool {
    matches!(e, StoreError::Database(crate::DbError::Sqlite(e))
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull))
}

/// `(busy, frames in the log)` after a checkpoint of `mode`.
fn wal_checkpoint(connection: &Connection, mode: &str) -> rusqlite::Result<(bool, i64)> {
    connection.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        Ok((row.get::<_, i64>(0)? != 0, row.get(1)?))
    })
}

/// How long a call waits for another process that holds the database.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

impl Drop for Flusher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub fn lock(db: &Mutex<Db>) -> MutexGuard<'_, Db> {
    db.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames in the log, as a checkpoint that copies nothing more reports them.
    fn frames(connection: &Connection) -> i64 {
        wal_checkpoint(connection, "PASSIVE").unwrap().1
    }

    #[test]
    fn a_long_log_is_started_over_between_two_groups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.db");
        let connection = Connection::open(&path).unwrap();
        connection
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
                 CREATE TABLE t (body TEXT NOT NULL);",
            )
            .unwrap();
        let db = Mutex::new(Db::new(
            connection,
            Commits::Grouped {
                every: Duration::from_secs(3_600),
            },
        ));
        let checkpoints = Connection::open(&path).unwrap();
        // Calls of a group, left open as the flusher finds them between two commits.
        let write = |rows: usize| {
            let mut db = lock(&db);
            for _ in 0..rows {
                db.unit(|tx| {
                    tx.execute("INSERT INTO t (body) VALUES (?1)", ["x".repeat(4_000)])?;
                    Ok(Outcome::Keep(()))
                })
                .unwrap();
            }
        };
        let commit = || lock(&db).commit().unwrap();
        write(200);
        commit();
        // As the flusher finds it: a group open since the last commit, a log checkpointed
        // up to it, which SQLite would go on appending to.
        write(1);
        checkpoint(&db, &checkpoints, 1);
        write(1);
        commit();
        let after = frames(&checkpoints);
        assert!(after < 10, "the log started over: {after} frames");
        let rows: i64 = checkpoints
            .query_row("SELECT COUNT(*) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, 202, "nothing was lost starting over");
    }
}
