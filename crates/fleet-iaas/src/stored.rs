//! What the process-backed IaaS reads of the director's store: release records and the
//! blobs that hold archives, compiled packages and rendered templates.

use fleet_director::model::Release;
use fleet_store::{AsyncStore, StoreError};

/// Why a blob the director's records name could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("blob {id} is not in the store")]
    NoBlob { id: String },
    #[error("package {key} is not compiled")]
    NotCompiled { key: String },
    #[error("release {name}/{version} is not uploaded")]
    NotUploaded { name: String, version: String },
    #[error("job {job} is in none of the instance's releases")]
    NoJob { job: String },
    #[error(
        "release {name}/{version} has no archives: upload it in BOSH's format to run it on \
         processes"
    )]
    NoArchives { name: String, version: String },
    #[error("job {job}: {source}")]
    JobFiles {
        job: String,
        #[source]
        source: fleet_release::ArchiveError,
    },
    #[error("the spec has no rendered templates: the director renders them before it applies")]
    NotRendered,
    #[error(transparent)]
    Unpack(#[from] fleet_render::UnpackError),
    /// Work moved off the async workers (unpacking an archive) ended without an answer.
    #[error("internal error: {0}")]
    Interrupted(#[from] tokio::task::JoinError),
}

pub async fn release(
    store: &AsyncStore,
    name: &str,
    version: &str,
) -> Result<Option<Release>, StoredError> {
    Ok(store
        .get::<Release>(
            fleet_director::collections::RELEASES,
            &format!("{name}/{version}"),
        )
        .await?)
}

/// The releases `releases` names (name to version), each of them uploaded.
pub async fn releases<'a>(
    store: &AsyncStore,
    releases: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<Vec<Release>, StoredError> {
    let mut found = Vec::new();
    for (name, version) in releases {
        let release =
            release(store, name, version)
                .await?
                .ok_or_else(|| StoredError::NotUploaded {
                    name: name.clone(),
                    version: version.clone(),
                })?;
        found.push(release);
    }
    Ok(found)
}

pub async fn blob(store: &AsyncStore, id: &str) -> Result<Vec<u8>, StoredError> {
    store
        .blob(id)
        .await?
        .ok_or_else(|| StoredError::NoBlob { id: id.to_string() })
}

/// The store blob of the compilation kept under `key`
/// ([`fleet_director::compile::cache_key`]).
pub async fn compiled_blob(store: &AsyncStore, key: &str) -> Result<String, StoredError> {
    let record: Option<serde_json::Value> = store
        .get(fleet_director::collections::COMPILED_PACKAGES, key)
        .await?;
    record
        .as_ref()
        .and_then(|r| r.get("blob"))
        .and_then(|b| b.as_str())
        .map(str::to_string)
        .ok_or_else(|| StoredError::NotCompiled {
            key: key.to_string(),
        })
}
