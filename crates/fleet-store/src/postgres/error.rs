//! PostgreSQL's errors in the store's terms.

use crate::{DbError, StoreError};

/// A database error, kept apart by what a caller can do about it.
pub fn db(e: postgres::Error) -> StoreError {
    use postgres::error::SqlState;
    if e.is_closed() {
        return StoreError::Unreachable {
            location: "the database".into(),
            reason: e.to_string(),
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
