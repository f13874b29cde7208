//! The backend tests run on, picked by the environment: SQLite in memory, or, when
//! `FLEET_TEST_POSTGRES` names a PostgreSQL database (a URL without password), a schema
//! of its own in that database for each store made. One suite thus checks both
//! backends; `.ci/run` runs it a second time against a throwaway PostgreSQL server.

use crate::Collection;
use std::sync::Arc;

use crate::{PgStore, PostgresLocation, SqliteStore, Store};

/// The environment variable that names the PostgreSQL database tests use.
pub const POSTGRES_VARIABLE: &str = "FLEET_TEST_POSTGRES";

/// The database `FLEET_TEST_POSTGRES` names, if it is set.
///
/// # Panics
/// When it is set to something that is not a usable URL: a test run that was asked for
/// PostgreSQL must not quietly run on SQLite.
pub fn postgres() -> Option<PostgresLocation> {
    let url = std::env::var(POSTGRES_VARIABLE).ok()?;
    Some(
        PostgresLocation::parse(&url, None, None)
            .unwrap_or_else(|e| panic!("{POSTGRES_VARIABLE}: {e}")),
    )
}

/// A new, empty schema in `database`, and the location whose connections use it,
/// reached as `database` asks (over TLS when it names a CA).
///
/// # Panics
/// When the server cannot be reached.
pub fn fresh_schema(database: &PostgresLocation) -> PostgresLocation {
    let schema = format!("test_{}", uuid::Uuid::new_v4().simple());
    run(database, format!("CREATE SCHEMA {schema}"));
    database.in_schema(&schema)
}

/// A new, empty database on `database`'s server, and what takes it down and up again as
/// a restart of the server would, for that database alone (the other tests on the server
/// go on).
///
/// # Panics
/// When the server cannot be reached.
pub fn fresh_database(database: &PostgresLocation) -> (PostgresLocation, Outage) {
    let name = format!("test_{}", uuid::Uuid::new_v4().simple());
    run(database, format!("CREATE DATABASE {name}"));
    let outage = Outage {
        server: database.clone(),
        name: name.clone(),
    };
    (database.in_database(&name), outage)
}

/// A database of its own that can be taken down: every connection to it ended, and new
/// ones refused, until it is brought back.
pub struct Outage {
    /// Another database on the server, whose connections run the outage.
    server: PostgresLocation,
    name: String,
}

impl Outage {
    /// Refuses new connections to the database and ends those it has, as a server going
    /// down does (its clients hear `terminating connection due to administrator
    /// command`).
    pub fn begin(&self) {
        let name = &self.name;
        run(
            &self.server,
            format!(
                "ALTER DATABASE {name} ALLOW_CONNECTIONS false;
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
            ),
        );
    }

    /// Takes connections again, as the server back up does.
    pub fn end(&self) {
        run(
            &self.server,
            format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", self.name),
        );
    }
}

/// Runs `sql` on `database`, as a test sets a database up or breaks it.
///
/// # Panics
/// When the server cannot be reached or refuses the statements.
pub(crate) fn run(database: &PostgresLocation, sql: String) {
    let config = database.config();
    let tls = database
        .ca_file()
        .map(|ca| crate::postgres::MakeRustls::trusting(ca).expect("the CA file is usable"));
    // The client runs a runtime of its own, which a test's runtime may not hold.
    std::thread::spawn(move || {
        let connected = match tls {
            Some(tls) => config.connect(tls),
            None => config.connect(postgres::NoTls),
        };
        let mut client =
            connected.unwrap_or_else(|e| panic!("{POSTGRES_VARIABLE}: cannot connect: {e}"));
        client
            .batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{POSTGRES_VARIABLE}: `{sql}` failed: {e}"));
    })
    .join()
    .expect("the statement's thread panicked");
}

/// An empty store on the backend the environment picks.
///
/// # Panics
/// When the picked backend cannot be opened.
pub fn store() -> Arc<dyn Store> {
    match postgres() {
        Some(database) => {
            Arc::new(PgStore::connect(&fresh_schema(&database)).expect("the test database opens"))
        }
        None => Arc::new(SqliteStore::in_memory().expect("SQLite opens in memory")),
    }
}

/// Kinds of records for the store's own tests, named as the layers above name theirs.
pub const FLEET: Collection = Collection::new("fleet");
pub const INSTANCES: Collection = Collection::new("instances");
pub const SERVICE_INSTANCES: Collection = Collection::new("service_instances");
pub const TASK_TRACES: Collection = Collection::new("task_traces");
/// The kinds kept per task in these tests.
pub const PER_TASK: &[Collection] = &[TASK_TRACES];

/// Kinds of task as an upper layer declares them, for the store's own tests.
pub mod kinds {
    use crate::TaskKindSpec;

    pub const CREATE: TaskKindSpec = TaskKindSpec {
        name: "create_deployment",
        description: "create deployment",
        changes_deployment: true,
    };
    pub const UPDATE: TaskKindSpec = TaskKindSpec {
        name: "update_deployment",
        description: "update deployment",
        changes_deployment: true,
    };
    pub const RECREATE: TaskKindSpec = TaskKindSpec {
        name: "recreate_deployment",
        description: "recreate deployment",
        changes_deployment: true,
    };
    /// A task that only looks: nobody's last operation.
    pub const DETAILS: TaskKindSpec = TaskKindSpec {
        name: "instance_details",
        description: "retrieve vm-stats",
        changes_deployment: false,
    };
    pub const ALL: &[TaskKindSpec] = &[CREATE, UPDATE, RECREATE, DETAILS];
}
