//! The agent's own blobstore (`<mbus>/blobs/ID`): blobs a client puts for `apply` and
//! `compile_package` to fetch, and what a compilation makes for the client to get. Blobs
//! are files in the VM's `data/blobs/`, named by their id, checked against the digest
//! the spec gives before use.

use std::path::{Path, PathBuf};

/// Why a blob the spec names cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("blob {id}: {source}")]
    Read {
        id: String,
        #[source]
        source: std::io::Error,
    },
    #[error("blob {id} is not in the agent's blobstore")]
    Missing { id: String },
    /// A digest the spec gives that is malformed, or that the blob does not have.
    #[error("blob {id}: {source}")]
    Digest {
        id: String,
        #[source]
        source: fleet_release::ArchiveError,
    },
}

#[derive(Debug, Clone)]
pub struct Blobstore {
    dir: PathBuf,
}

/// Whether `id` may name a blob: a file name, never a path.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// A blob's id: a random UUID, as BOSH's blobstores name blobs.
fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl Blobstore {
    /// # Errors
    /// When the directory cannot be made.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Blobstore {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, id: &str) -> std::io::Result<PathBuf> {
        if valid_id(id) {
            Ok(self.dir.join(id))
        } else {
            Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("`{id}` is not a blob id"),
            ))
        }
    }

    /// Keeps `bytes` as blob `id`, whole or not at all.
    ///
    /// # Errors
    /// An id that is not a file name, or a write that fails.
    pub fn put(&self, id: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.path(id)?;
        fleet_file::write(&path, bytes, fleet_file::Mode::Private)
    }

    /// # Errors
    /// An id that is not a file name, or a read that fails other than for a missing blob.
    pub fn get(&self, id: &str) -> std::io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.path(id)?) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The blob `id`, checked against `digest` (BOSH's notation: `sha1`, `sha256:...`).
    ///
    /// # Errors
    /// A missing blob, or one whose digest differs.
    pub fn fetch(&self, id: &str, digest: &str) -> Result<Vec<u8>, BlobError> {
        let bytes = self
            .get(id)
            .map_err(|source| BlobError::Read {
                id: id.to_string(),
                source,
            })?
            .ok_or_else(|| BlobError::Missing { id: id.to_string() })?;
        fleet_release::Digest::parse(digest)
            .and_then(|d| d.verify(&bytes))
            .map_err(|source| BlobError::Digest {
                id: id.to_string(),
                source,
            })?;
        Ok(bytes)
    }

    /// [`Blobstore::put`] on the blocking pool: a blob is a whole package, written and
    /// synced.
    ///
    /// # Errors
    /// Those of [`Blobstore::put`].
    pub async fn put_off_runtime(
        &self,
        id: &str,
        bytes: impl AsRef<[u8]> + Send + 'static,
    ) -> std::io::Result<()> {
        let (store, id) = (self.clone(), id.to_string());
        off_runtime(move || store.put(&id, bytes.as_ref())).await?
    }

    /// [`Blobstore::get`] on the blocking pool.
    ///
    /// # Errors
    /// Those of [`Blobstore::get`].
    pub async fn get_off_runtime(&self, id: &str) -> std::io::Result<Option<Vec<u8>>> {
        let (store, id) = (self.clone(), id.to_string());
        off_runtime(move || store.get(&id)).await?
    }

    /// [`Blobstore::fetch`] on the blocking pool: read whole and hashed.
    ///
    /// # Errors
    /// Those of [`Blobstore::fetch`].
    pub async fn fetch_off_runtime(&self, id: &str, digest: &str) -> Result<Vec<u8>, BlobError> {
        let (store, id, digest) = (self.clone(), id.to_string(), digest.to_string());
        let read = id.clone();
        off_runtime(move || store.fetch(&id, &digest))
            .await
            .map_err(|source| BlobError::Read { id: read, source })?
    }

    /// [`Blobstore::create`] on the blocking pool.
    ///
    /// # Errors
    /// Those of [`Blobstore::create`].
    pub async fn create_off_runtime(&self, bytes: Vec<u8>) -> std::io::Result<(String, String)> {
        let store = self.clone();
        off_runtime(move || store.create(&bytes)).await?
    }

    /// Keeps `bytes` under a new id; the id and their SHA-1.
    ///
    /// # Errors
    /// A write that fails.
    pub fn create(&self, bytes: &[u8]) -> std::io::Result<(String, String)> {
        let id = new_id();
        self.put(&id, bytes)?;
        Ok((id, fleet_release::sha1_hex(bytes)))
    }
}

/// Runs `work` on the blocking pool; a task that panicked or was cut short is an I/O
/// error of the blob it worked on.
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(std::io::Error::other)
}
