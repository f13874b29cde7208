//! What a manifest's `file://` URLs name: releases (a tarball, a directory holding a
//! release, or one holding its source, built in the version the manifest gives) and the
//! stemcell (a tarball or a directory with `stemcell.MF`).

use std::path::{Path, PathBuf};

use fleet_release::ReleaseArchive;
use serde_json::Value as Json;

use super::manifest::ReleaseEntry;

/// The path a `file://` URL names, relative ones from the manifest's directory.
pub fn path_of(url: &str, base: &Path) -> PathBuf {
    let path = Path::new(url.strip_prefix("file://").unwrap_or(url));
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}

/// Reads the release `entry` names.
///
/// # Errors
/// A release that cannot be read or built, one whose name is not the entry's, or one
/// whose digest differs from the entry's `sha1`, named.
pub fn release(index: usize, entry: &ReleaseEntry, base: &Path) -> Result<ReleaseArchive, String> {
    let at = format!("releases[{index}] ({})", entry.name);
    let path = path_of(&entry.url, base);
    let archive = if path.join("release.yml").is_file() {
        let version = entry
            .version
            .as_deref()
            .ok_or_else(|| format!("{at}: version must be given for a release kept as source"))?;
        let tarball =
            fleet_release::build_from_source(&path, version).map_err(|e| format!("{at}: {e}"))?;
        fleet_release::from_tarball(&tarball).map_err(|e| format!("{at}: {e}"))?
    } else {
        if let (Some(sha1), true) = (&entry.sha1, path.is_file()) {
            let bytes = std::fs::read(&path).map_err(|e| format!("{at}: {e}"))?;
            fleet_release::Digest::parse(sha1)
                .and_then(|d| d.verify(&bytes))
                .map_err(|e| format!("{at}: sha1: {e}"))?;
        }
        fleet_release::from_path(&path).map_err(|e| format!("{at}: {e}"))?
    };
    if archive.manifest.name != entry.name {
        return Err(format!(
            "{at}: {} holds release `{}`",
            path.display(),
            archive.manifest.name
        ));
    }
    if let Some(version) = &entry.version
        && &archive.manifest.version != version
    {
        return Err(format!(
            "{at}: {} holds version {}, the manifest asks for {version}",
            path.display(),
            archive.manifest.version
        ));
    }
    Ok(archive)
}

/// A stemcell as its `stemcell.MF` describes it, and where its image is.
#[derive(Debug, Clone, PartialEq)]
pub struct Stemcell {
    pub name: String,
    pub version: String,
    pub operating_system: String,
    pub api_version: u32,
    pub cloud_properties: Json,
    pub image: PathBuf,
}

/// Reads the stemcell at `url`; a tarball is unpacked under `scratch` first.
///
/// # Errors
/// A stemcell that cannot be read, or a `stemcell.MF` without its name or version.
pub fn stemcell(url: &str, base: &Path, scratch: &Path) -> Result<Stemcell, String> {
    let path = path_of(url, base);
    let dir = if path.is_dir() {
        path.clone()
    } else {
        let bytes =
            std::fs::read(&path).map_err(|e| format!("stemcell {}: {e}", path.display()))?;
        let at = scratch.join(format!("stemcell-{}", fleet_release::sha1_hex(&bytes)));
        if !at.join("stemcell.MF").is_file() {
            let _ = std::fs::remove_dir_all(&at);
            fleet_release::unpack(&bytes, &at, 64 * 1024 * 1024 * 1024)
                .map_err(|e| format!("stemcell {}: {e}", path.display()))?;
        }
        at
    };
    let manifest = dir.join("stemcell.MF");
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("stemcell {}: {e}", manifest.display()))?;
    let node = fleet_yaml::load(&text, fleet_yaml::Limits::default())
        .map_err(|e| format!("{}: {e}", manifest.display()))?
        .to_json();
    let field = |key: &str| {
        node.get(key)
            .and_then(|v| match v {
                Json::String(s) => Some(s.clone()),
                Json::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .ok_or_else(|| format!("{}: {key} must be provided", manifest.display()))
    };
    Ok(Stemcell {
        name: field("name")?,
        version: field("version")?,
        operating_system: field("operating_system").unwrap_or_default(),
        api_version: node
            .get("api_version")
            .and_then(Json::as_u64)
            .map_or(1, |v| v as u32),
        cloud_properties: node
            .get("cloud_properties")
            .cloned()
            .unwrap_or(Json::Object(Default::default())),
        image: dir.join("image"),
    })
}
