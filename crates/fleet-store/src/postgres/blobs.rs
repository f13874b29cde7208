//! Blobs in pieces: a release's archive or a compiled package runs to hundreds of
//! megabytes, which one value would have the client hold whole (and encode again) to
//! write, and the server hold whole to store. Each blob is its pieces in order, at least
//! one (an empty blob is one empty piece); a blob written again replaces all of them in
//! one transaction.

use std::io::Read;
use std::path::Path;

use super::session::Session;
use crate::StoreError;
use crate::commits::Outcome;

/// The size of a piece.
pub(super) const PIECE: usize = 1 << 20;

/// The first key of the advisory locks writers of one blob take (the second is a hash
/// of the blob's id): "blob" in ASCII.
const BLOB_LOCKS: i32 = 0x626c_6f62;

/// Keeps what `read` yields as the blob `id`, a piece at a time; `from` names the source
/// in a read's error.
pub(super) fn put(
    s: &mut Session,
    id: &str,
    mut read: impl Read,
    from: &Path,
) -> Result<(), StoreError> {
    s.unit(|s| {
        // Two writers of one blob take turns, the last one's pieces kept: each would
        // otherwise miss the other's uncommitted pieces when deleting, and collide.
        s.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&BLOB_LOCKS, &id],
        )?;
        s.execute("DELETE FROM blob_pieces WHERE id = $1", &[&id])?;
        let mut piece = Vec::with_capacity(PIECE);
        for seq in 0i32.. {
            piece.clear();
            (&mut read)
                .take(PIECE as u64)
                .read_to_end(&mut piece)
                .map_err(|source| StoreError::Source {
                    path: from.to_path_buf(),
                    source,
                })?;
            if piece.is_empty() && seq > 0 {
                break;
            }
            s.execute(
                "INSERT INTO blob_pieces (id, seq, bytes) VALUES ($1, $2, $3)",
                &[&id, &seq, &piece],
            )?;
            if piece.len() < PIECE {
                break;
            }
        }
        Ok(Outcome::Keep(()))
    })
}

/// The blob `id`, its pieces joined.
pub(super) fn get(s: &mut Session, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let rows = s.rows(
        "SELECT bytes FROM blob_pieces WHERE id = $1 ORDER BY seq",
        &[&id],
    )?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    for row in &rows {
        bytes.extend_from_slice(row.get::<_, &[u8]>(0));
    }
    Ok(Some(bytes))
}

pub(super) fn ids(s: &mut Session) -> Result<Vec<String>, StoreError> {
    Ok(
        s.rows("SELECT id FROM blob_pieces WHERE seq = 0 ORDER BY id", &[])?
            .iter()
            .map(|r| r.get(0))
            .collect(),
    )
}

pub(super) fn delete(s: &mut Session, id: &str) -> Result<(), StoreError> {
    s.execute("DELETE FROM blob_pieces WHERE id = $1", &[&id])?;
    Ok(())
}
