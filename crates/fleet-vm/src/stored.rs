//! What the process-backed IaaS reads of the director's store: release records and the
//! blobs that hold archives, compiled packages and rendered templates.

use fleet_director::model::Release;
use fleet_store::{AsyncStore, Collection};

pub async fn release(
    store: &AsyncStore,
    name: &str,
    version: &str,
) -> Result<Option<Release>, String> {
    store
        .get::<Release>(Collection::Releases, &format!("{name}/{version}"))
        .await
        .map_err(|e| e.to_string())
}

/// The releases `releases` names (name to version), each of them uploaded.
pub async fn releases<'a>(
    store: &AsyncStore,
    releases: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<Vec<Release>, String> {
    let mut found = Vec::new();
    for (name, version) in releases {
        let release = release(store, name, version)
            .await?
            .ok_or_else(|| format!("release {name}/{version} is not uploaded"))?;
        found.push(release);
    }
    Ok(found)
}

pub async fn blob(store: &AsyncStore, id: &str) -> Result<Vec<u8>, String> {
    store
        .run(|s| s.blob(id))
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("blob {id} is not in the store"))
}

/// The store blob of the compilation kept under `key`
/// ([`fleet_director::compile::cache_key`]).
pub async fn compiled_blob(store: &AsyncStore, key: &str) -> Result<String, String> {
    let record: Option<serde_json::Value> = store
        .get(Collection::CompiledPackages, key)
        .await
        .map_err(|e| e.to_string())?;
    record
        .as_ref()
        .and_then(|r| r.get("blob"))
        .and_then(|b| b.as_str())
        .map(str::to_string)
        .ok_or_else(|| format!("package {key} is not compiled"))
}
