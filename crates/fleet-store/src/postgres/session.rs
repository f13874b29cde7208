//! The connection to PostgreSQL, owned by a thread of its own. The store's calls are
//! synchronous and made from async workers, where a blocking client may not run its own
//! runtime; so each call is handed to this thread, which runs it and answers, and the
//! caller waits for the answer as it would wait for SQLite's file. A broken connection is
//! made again at the next call.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

use super::error::db;
use super::schema;
use super::tls::MakeRustls;
use crate::commits::Outcome;
use crate::{PostgresLocation, StoreError};

/// One call, run on the connection's thread.
type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// A connection with the statements it prepared.
pub struct Session {
    client: Option<Client>,
    statements: HashMap<&'static str, Statement>,
    location: PostgresLocation,
    tls: Option<MakeRustls>,
}

impl Session {
    fn connected(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        if self.client.is_none() {
            self.statements.clear();
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
        self.connected()?.execute(&statement, params).map_err(db)
    }

    pub fn rows(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.connected()?.query(&statement, params).map_err(db)
    }

    pub fn row(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.connected()?.query_opt(&statement, params).map_err(db)
    }

    /// Runs `body` in one transaction: all of its writes or none.
    pub fn unit<T>(
        &mut self,
        body: impl FnOnce(&mut Session) -> Result<Outcome<T>, StoreError>,
    ) -> Result<T, StoreError> {
        self.connected()?.batch_execute("BEGIN").map_err(db)?;
        match body(self) {
            Ok(Outcome::Keep(t)) => match self.connected()?.batch_execute("COMMIT") {
                Ok(()) => Ok(t),
                Err(e) => {
                    self.abandon();
                    Err(db(e))
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
            .is_some_and(|c| c.batch_execute("ROLLBACK").is_ok());
        if !rolled_back {
            self.abandon();
        }
    }

    /// Drops a connection whose state is unknown; the next call connects anew.
    fn abandon(&mut self) {
        self.client = None;
    }
}

/// The handle to the connection's thread.
pub struct Connection {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Option<JoinHandle<()>>,
    /// Calls handed to the thread and not yet answered.
    waiting: AtomicUsize,
}

impl Connection {
    /// Starts the thread and connects (migrating the schema), so that a database that
    /// cannot be reached or is too new is told at once.
    ///
    /// # Errors
    /// When the connection or the migration fails.
    pub fn open(location: PostgresLocation) -> Result<Self, StoreError> {
        let connection = Self::start(location)?;
        connection.call(|s| s.connected().map(|_| ()))?;
        Ok(connection)
    }

    /// Starts the thread, which connects at its first call.
    ///
    /// # Errors
    /// When the CA file cannot be read or no thread can be started.
    pub fn start(location: PostgresLocation) -> Result<Self, StoreError> {
        let tls = location.ca_file().map(MakeRustls::trusting).transpose()?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("fleet-store-pg".into())
            .spawn(move || {
                let mut session = Session {
                    client: None,
                    statements: HashMap::new(),
                    location,
                    tls,
                };
                for job in queue {
                    job(&mut session);
                }
            })
            .map_err(|e| StoreError::Unreachable {
                location: "the database".into(),
                reason: format!("cannot start the connection's thread: {e}"),
            })?;
        Ok(Connection {
            jobs: Mutex::new(Some(jobs)),
            thread: Some(thread),
            waiting: AtomicUsize::new(0),
        })
    }

    /// How many calls wait on this connection now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Runs `job` on the connection and waits for its answer.
    ///
    /// # Errors
    /// The job's own, or [`StoreError::Stopped`] when the thread is gone.
    pub fn call<T, F>(&self, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Session) -> Result<T, StoreError> + Send + 'static,
    {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let answer = self.answer(job);
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        answer
    }

    fn answer<T, F>(&self, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Session) -> Result<T, StoreError> + Send + 'static,
    {
        let (answer, answered) = mpsc::sync_channel(1);
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|jobs| {
                jobs.send(Box::new(move |session: &mut Session| {
                    // A job that panics must not take the connection's thread down
                    // with it; the caller hears of it as a failed call.
                    // A transaction it left open is dropped with the connection.
                    let outcome =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(session)));
                    if outcome.is_err() {
                        session.abandon();
                    }
                    let _ = answer.send(outcome);
                }))
                .is_ok()
            })
            .unwrap_or(false);
        if !sent {
            return Err(StoreError::Stopped);
        }
        match answered.recv() {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => Err(StoreError::Stopped),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        drop(self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
