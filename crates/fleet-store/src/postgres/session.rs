//! A connection to PostgreSQL and the calls made on it. A broken connection is made again
//! at the next call; so are the others of its store, which a server that went away has
//! broken too though they do not know it yet (a connection hears of its end only at its
//! next statement, which would fail).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

use super::error::db;
use super::schema;
use super::tls::MakeRustls;
use crate::commits::Outcome;
use crate::{PostgresLocation, StoreError};

/// A connection with the statements it prepared.
pub struct Session {
    client: Option<Client>,
    statements: HashMap<&'static str, Statement>,
    location: PostgresLocation,
    tls: Option<MakeRustls>,
    /// How many connections of the store were found lost so far, and how many had been
    /// when this one connected.
    lost: Arc<AtomicU64>,
    connected_after: u64,
    /// Inside [`Session::unit`]: a connection that broke there is not made again, or the
    /// rest of the transaction would run outside it.
    in_unit: bool,
}

impl Session {
    /// Drops the connection when another of the store was found lost since it was made.
    fn forget_if_stale(&mut self) {
        if self.connected_after < self.lost.load(Ordering::SeqCst) {
            self.client = None;
        }
    }

    fn connected(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        if self.client.is_none() && self.in_unit {
            return Err(StoreError::Unreachable {
                location: self.location.url().to_string(),
                reason: "the connection broke inside a transaction".into(),
            });
        }
        if self.client.is_none() {
            self.statements.clear();
            self.connected_after = self.lost.load(Ordering::SeqCst);
            let config = self.location.config();
            let connected = match &self.tls {
                Some(tls) => config.connect(tls.clone()),
                None => config.connect(postgres::NoTls),
            };
            let mut client = connected.map_err(|e| StoreError::Unreachable {
                location: self.location.url().to_string(),
                reason: e.to_string(),
            })?;
            schema::migrate(&mut client)?;
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("connected just now"))
    }

    /// `sql`, prepared once per connection.
    fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        // Connected first: a connection made again has prepared nothing yet.
        self.connected()?;
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.connected()?.prepare(sql).map_err(db)?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    pub fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        let client = self.connected()?;
        timed(sql, || client.execute(&statement, params)).map_err(db)
    }

    pub fn rows(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let statement = self.statement(sql)?;
        let client = self.connected()?;
        timed(sql, || client.query(&statement, params)).map_err(db)
    }

    pub fn row(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        let statement = self.statement(sql)?;
        let client = self.connected()?;
        timed(sql, || client.query_opt(&statement, params)).map_err(db)
    }

    /// `sql` sent as it is (no parameters, no rows).
    fn simple(&mut self, sql: &'static str) -> Result<(), StoreError> {
        let client = self.connected()?;
        timed(sql, || client.batch_execute(sql)).map_err(db)
    }

    /// Runs `body` in one transaction: all of its writes or none.
    pub fn unit<T>(
        &mut self,
        body: impl FnOnce(&mut Session) -> Result<Outcome<T>, StoreError>,
    ) -> Result<T, StoreError> {
        self.simple("BEGIN")?;
        self.in_unit = true;
        let ended = body(self);
        self.in_unit = false;
        match ended {
            Ok(Outcome::Keep(t)) => match self.simple("COMMIT") {
                Ok(()) => Ok(t),
                Err(e) => {
                    self.abandon();
                    Err(e)
                }
            },
            Ok(Outcome::Undo(t)) => {
                self.rollback();
                Ok(t)
            }
            Err(e) => {
                self.rollback();
                Err(e)
            }
        }
    }

    fn rollback(&mut self) {
        let rolled_back = self
            .client
            .as_mut()
            .is_some_and(|c| timed("ROLLBACK", || c.batch_execute("ROLLBACK")).is_ok());
        if !rolled_back {
            self.abandon();
        }
    }

    /// Drops a connection whose state is unknown; the next call connects anew.
    fn abandon(&mut self) {
        self.client = None;
        self.in_unit = false;
    }
}

/// Runs `statement`, timing it when statements are timed
/// ([`crate::statement_times::record`]).
fn timed<T>(sql: &str, statement: impl FnOnce() -> T) -> T {
    if !crate::statement_times::recording() {
        return statement();
    }
    // The wall clock's time, on purpose: a call may run where a paused clock is current.
    #[allow(clippy::disallowed_types)]
    let started = std::time::Instant::now();
    let answer = statement();
    crate::statement_times::note(sql, started.elapsed());
    answer
}

/// A connection, used by one call at a time on the caller's own thread: a call made on
/// tokio's blocking pool (as the async store makes them) or outside any runtime waits for
/// the server there, with no thread to hand it to and back. A call made on an async
/// worker, where the blocking client may not run its own runtime, runs on a thread of its
/// own, as rare callers do (a command-line path, a test).
pub struct Connection {
    session: Mutex<Session>,
    /// Calls holding or waiting for the connection.
    waiting: AtomicUsize,
}

impl Connection {
    /// Connects (migrating the schema), so that a database that cannot be reached or is
    /// too new is told at once.
    ///
    /// # Errors
    /// When the connection or the migration fails.
    pub fn open(location: PostgresLocation, lost: Arc<AtomicU64>) -> Result<Self, StoreError> {
        let connection = Self::start(location, lost)?;
        connection.call(|s| s.connected().map(|_| ()))?;
        Ok(connection)
    }

    /// A connection made at its first call; `lost` counts the store's connections found
    /// lost.
    ///
    /// # Errors
    /// When the CA file cannot be read.
    pub fn start(location: PostgresLocation, lost: Arc<AtomicU64>) -> Result<Self, StoreError> {
        let tls = location.ca_file().map(MakeRustls::trusting).transpose()?;
        Ok(Connection {
            session: Mutex::new(Session {
                client: None,
                statements: HashMap::new(),
                location,
                tls,
                lost,
                connected_after: 0,
                in_unit: false,
            }),
            waiting: AtomicUsize::new(0),
        })
    }

    /// How many calls hold or wait for this connection now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Runs `job` on the connection, once the calls before it are done.
    ///
    /// # Errors
    /// The job's own.
    pub fn call<T, F>(&self, job: F) -> Result<T, StoreError>
    where
        T: Send,
        F: FnOnce(&mut Session) -> Result<T, StoreError> + Send,
    {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _counted = Counted(&self.waiting);
        crate::handle::where_blocking_is_allowed(|| self.run(job))
    }

    fn run<T>(
        &self,
        job: impl FnOnce(&mut Session) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        session.forget_if_stale();
        // A job that panics leaves the connection in a state nobody knows (a transaction
        // open): it is dropped, and the caller hears of the panic.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut session))) {
            Ok(answer) => {
                if matches!(answer, Err(StoreError::Unreachable { .. })) {
                    session.lost.fetch_add(1, Ordering::SeqCst);
                }
                answer
            }
            Err(panic) => {
                session.abandon();
                std::panic::resume_unwind(panic)
            }
        }
    }
}

impl Drop for Connection {
    /// The blocking client runs a runtime of its own, which may not be dropped on an
    /// async worker: there, it goes on a thread of its own.
    fn drop(&mut self) {
        let session = self.session.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = session.client.take() {
            crate::handle::where_blocking_is_allowed(move || drop(client));
        }
    }
}

/// Counts a call out when it ends, however it ends.
struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
