//! Prints the embedded 1,000- and 10,000-instance fleets on SQLite and on PostgreSQL side
//! by side: provisioning and the update run, with every simulated latency at zero, so
//! that the wall time is what the director, broker and store cost. PostgreSQL is the
//! database `FLEET_TEST_POSTGRES` names, a schema of its own per figure:
//!
//!     scripts/with-postgres cargo run --release --example store_bench [b|c]
//!
//! (`scripts/with-postgres` starts a throwaway server with fsync off, as a benchmark of
//! the store's own work wants; a production server's commits cost its disk's flushes.)
//! Without the variable, the SQLite figures alone are printed. Followed by `statements`
//! too, each run's statements that took longest follow its figures (PostgreSQL's as its
//! client waited for them, the round trip included, `BEGIN` and `COMMIT` among them).

// Wall time is what this measures, so it reads the real clock.
#![allow(clippy::disallowed_types)]

#[path = "shared/fleet_run.rs"]
mod fleet_run;

use fleet_updater::fleet::{DEMO, Definition};
use fleet_updater::store::statement_times;
use fleet_updater::store::{StoreLocation, testing};

fn fleet_of(instances: u32) -> Definition {
    let mut definition = Definition::parse(DEMO)
        .expect("the demo fleet is valid")
        .without_latency();
    definition.provision[0].count = instances * 6 / 10;
    definition.provision[1].count = instances * 4 / 10;
    // 18,000 VMs do not fit the demo's /20.
    definition.cloud_config = definition
        .cloud_config
        .map(|c| c.replace("10.244.0.0/20", "10.240.0.0/12"));
    definition
}

fn main() {
    let mut only: Vec<String> = std::env::args().skip(1).collect();
    let statements = only.iter().any(|a| a == "statements");
    if statements {
        statement_times::record();
        only.retain(|a| a != "statements");
    }
    let wanted = |figure: &str| only.is_empty() || only.iter().any(|o| o == figure);
    let postgres = testing::postgres();
    if postgres.is_none() {
        println!(
            "{} names no PostgreSQL database: SQLite only (run under scripts/with-postgres for both)",
            testing::POSTGRES_VARIABLE
        );
    }
    println!(
        "{:<22} {:>10} {:>8} {:>18} {:>12} {:>10}",
        "fleet", "store", "updated", "provisioning (s)", "update (s)", "total (s)"
    );
    for (figure, instances) in [("b", 1_000), ("c", 10_000)] {
        if !wanted(figure) {
            continue;
        }
        let definition = fleet_of(instances);
        let mut stores = vec![("SQLite", StoreLocation::Sqlite)];
        if let Some(database) = &postgres {
            stores.push((
                "PostgreSQL",
                StoreLocation::Postgres(testing::fresh_schema(database)),
            ));
        }
        for (name, store) in stores {
            let timed = fleet_run::run(&definition, &store, &[]);
            let provisioning = timed.provisioning.as_secs_f64();
            println!(
                "{:<22} {:>10} {:>8} {:>18.2} {:>12.2} {:>10.2}",
                format!("({figure}) {instances} instances"),
                name,
                timed.counts.updated,
                provisioning,
                timed.total.as_secs_f64() - provisioning,
                timed.total.as_secs_f64()
            );
            if statements {
                let runs: u64 = timed.statements.iter().map(|s| s.runs).sum();
                println!("    {runs} statements:");
                for statement in timed.statements.iter().take(15) {
                    println!(
                        "        {:>8.3}s {:>9} runs  {:.150}",
                        statement.total.as_secs_f64(),
                        statement.runs,
                        statement.sql
                    );
                }
            }
        }
    }
}
