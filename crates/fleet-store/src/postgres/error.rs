//! PostgreSQL's errors in the store's terms.

use crate::{DbError, StoreError};

/// A database error, kept apart by what a caller can do about it.
pub fn db(e: postgres::Error) -> StoreError {
    use postgres::error::SqlState;
    // A connection that broke, that failed (class 08) or that the server ended (shutting
    // down, restarting, an operator's termination: 57P01 to 57P05) is gone; the next call
    // connects again, so the same call may succeed then.
    let gone = e
        .code()
        .is_some_and(|c| c.code().starts_with("57P") || c.code().starts_with("08"));
    if e.is_closed() || gone {
        return StoreError::Unreachable {
            location: "the database".into(),
            reason: describe(&e),
        };
    }
    match e.code() {
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::LOCK_NOT_AVAILABLE =>
        {
            StoreError::Busy(DbError::Postgres(e))
        }
        Some(c) if c.code().starts_with("23") => StoreError::Constraint(DbError::Postgres(e)),
        _ => StoreError::Database(DbError::Postgres(e)),
    }
}

/// What the server said, where the client's own words (`db error`) say nothing: its
/// message and its SQLSTATE code.
pub fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}
