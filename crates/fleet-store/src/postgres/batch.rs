//! A batch of document writes as one statement: a deploy writes its records by the dozen,
//! puts and deletes mixed, and each statement is a round trip (a transaction of more
//! would cost its `BEGIN` and `COMMIT` too). A statement is atomic, so the batch is
//! applied whole or not at all. Deletes go through a function of the schema
//! (`fleet_write_documents`), which looks each up by its key.

use std::collections::HashMap;

use super::session::Session;
use crate::{StoreError, Write};

/// Applies `batch` as if one write after the other: what each key ends as is its last
/// write, so the puts and deletes that remain touch distinct keys and go in one
/// statement.
pub(super) fn apply(s: &mut Session, batch: &[Write]) -> Result<(), StoreError> {
    let mut last: HashMap<(&str, &str), usize> = HashMap::new();
    for (at, write) in batch.iter().enumerate() {
        last.insert(address(write), at);
    }
    let mut gone = (Vec::new(), Vec::new());
    let (mut collections, mut keys, mut scopes, mut bodies) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (at, write) in batch.iter().enumerate() {
        if last.get(&address(write)) != Some(&at) {
            continue;
        }
        match write {
            Write::Delete { collection, key } => {
                gone.0.push(collection.name());
                gone.1.push(key.as_str());
            }
            Write::Put {
                collection,
                key,
                scope,
                body,
            } => {
                collections.push(collection.name());
                keys.push(key.as_str());
                scopes.push(scope.as_str());
                bodies.push(body.as_str());
            }
        }
    }
    if gone.0.is_empty() {
        if !keys.is_empty() {
            s.execute(
                "INSERT INTO documents (collection, key, scope, body)
                 SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[])
                 ON CONFLICT (collection, key) DO UPDATE
                     SET scope = EXCLUDED.scope, body = EXCLUDED.body",
                &[&collections, &keys, &scopes, &bodies],
            )?;
        }
    } else {
        // The keys deleted and those put are distinct: the order of the two parts does
        // not matter.
        s.execute(
            "SELECT fleet_write_documents($1, $2, $3, $4, $5, $6)",
            &[&collections, &keys, &scopes, &bodies, &gone.0, &gone.1],
        )?;
    }
    Ok(())
}

/// The document a write is to.
fn address(write: &Write) -> (&str, &str) {
    match write {
        Write::Put {
            collection, key, ..
        }
        | Write::Delete { collection, key } => (collection.name(), key.as_str()),
    }
}
