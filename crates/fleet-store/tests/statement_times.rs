//! The statement tally, in a process of its own: recording is the process's, and other
//! tests' stores would add to its counts.

use fleet_store::statement_times::{record, take};
use fleet_store::{SqliteStore, Store, get, put, testing};

#[test]
fn each_statement_a_store_runs_is_counted_and_timed_once_recording() {
    let before = SqliteStore::in_memory().unwrap();
    before
        .write(vec![put(testing::FLEET, "k", "", &0)])
        .unwrap();
    assert!(
        take().is_empty(),
        "nothing is recorded before it is asked for"
    );
    record();
    let store = SqliteStore::in_memory().unwrap();
    take();
    for n in 0..3 {
        store
            .write(vec![put(testing::FLEET, &format!("k{n}"), "", &n)])
            .unwrap();
    }
    assert_eq!(get::<u32>(&store, testing::FLEET, "k2").unwrap(), Some(2));
    let times = take();
    let runs = |start: &str| {
        times
            .iter()
            .filter(|t| t.sql.starts_with(start))
            .map(|t| t.runs)
            .sum::<u64>()
    };
    assert_eq!(
        runs("SELECT body FROM documents WHERE collection = ?1 AND key = ?2"),
        1
    );
    // A put sets the body first, and inserts where no row was there.
    assert_eq!(runs("UPDATE documents SET body"), 3);
    assert_eq!(runs("INSERT INTO documents"), 3);
    assert!(times.iter().all(|t| t.runs > 0));
    assert!(take().is_empty(), "the tally starts again");
}
