//! What a manifest's `file://` URLs name: releases (a tarball, a directory holding a
//! release, or one holding its source, built in the version the manifest gives) and the
//! stemcell (a tarball or a directory with `stemcell.MF`).

use std::path::{Path, PathBuf};

use fleet_release::{ArchiveError, ReleaseArchive, ReleaseError};
use serde_json::Value as Json;

use super::manifest::ReleaseEntry;

/// What is wrong with a release or stemcell the manifest names; `at` is `releases[0] (kv)`.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{at}: version must be given for a release kept as source")]
    NoVersion { at: String },
    #[error("{at}: {source}")]
    Release {
        at: String,
        #[source]
        source: ReleaseError,
    },
    #[error("{at}: {source}")]
    Read {
        at: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{at}: sha1: {source}")]
    Digest {
        at: String,
        #[source]
        source: ArchiveError,
    },
    #[error("{at}: {} holds release `{found}`", path.display())]
    OtherRelease {
        at: String,
        path: PathBuf,
        found: String,
    },
    #[error("{at}: {} holds version {found}, the manifest asks for {wanted}", path.display())]
    OtherVersion {
        at: String,
        path: PathBuf,
        found: String,
        wanted: String,
    },
    #[error("stemcell {}: {source}", path.display())]
    StemcellRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("stemcell {}: {source}", path.display())]
    StemcellUnpack {
        path: PathBuf,
        #[source]
        source: ArchiveError,
    },
    #[error("{}: {source}", path.display())]
    StemcellManifest {
        path: PathBuf,
        #[source]
        source: fleet_yaml::LoadError,
    },
    #[error("{}: {key} must be provided", path.display())]
    StemcellField { path: PathBuf, key: &'static str },
}

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
pub fn release(
    index: usize,
    entry: &ReleaseEntry,
    base: &Path,
) -> Result<ReleaseArchive, SourceError> {
    let at = format!("releases[{index}] ({})", entry.name);
    let path = path_of(&entry.url, base);
    let release = |source| SourceError::Release {
        at: at.clone(),
        source,
    };
    let archive = if fleet_release::is_release_source(&path) {
        let version = entry
            .version
            .as_deref()
            .ok_or_else(|| SourceError::NoVersion { at: at.clone() })?;
        let tarball = fleet_release::build_from_source(&path, version).map_err(release)?;
        fleet_release::from_tarball(&tarball).map_err(release)?
    } else {
        if let (Some(sha1), true) = (&entry.sha1, path.is_file()) {
            let bytes = std::fs::read(&path).map_err(|source| SourceError::Read {
                at: at.clone(),
                source,
            })?;
            fleet_release::Digest::parse(sha1)
                .and_then(|d| d.verify(&bytes))
                .map_err(|source| SourceError::Digest {
                    at: at.clone(),
                    source,
                })?;
        }
        fleet_release::from_path(&path).map_err(release)?
    };
    if archive.manifest.name != entry.name {
        return Err(SourceError::OtherRelease {
            at,
            path,
            found: archive.manifest.name,
        });
    }
    if let Some(version) = &entry.version
        && &archive.manifest.version != version
    {
        return Err(SourceError::OtherVersion {
            at,
            path,
            found: archive.manifest.version,
            wanted: version.clone(),
        });
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
pub fn stemcell(url: &str, base: &Path, scratch: &Path) -> Result<Stemcell, SourceError> {
    let path = path_of(url, base);
    let dir = if path.is_dir() {
        path.clone()
    } else {
        let bytes = std::fs::read(&path).map_err(|source| SourceError::StemcellRead {
            path: path.clone(),
            source,
        })?;
        let at = scratch.join(format!("stemcell-{}", fleet_release::sha1_hex(&bytes)));
        if !at.join("stemcell.MF").is_file() {
            let _ = std::fs::remove_dir_all(&at);
            fleet_release::unpack(&bytes, &at, 64 * 1024 * 1024 * 1024).map_err(|source| {
                SourceError::StemcellUnpack {
                    path: path.clone(),
                    source,
                }
            })?;
        }
        at
    };
    let manifest = dir.join("stemcell.MF");
    let text = std::fs::read_to_string(&manifest).map_err(|source| SourceError::StemcellRead {
        path: manifest.clone(),
        source,
    })?;
    let node = fleet_yaml::load(&text, fleet_yaml::Limits::default())
        .map_err(|source| SourceError::StemcellManifest {
            path: manifest.clone(),
            source,
        })?
        .to_json();
    let field = |key: &'static str| {
        node.get(key)
            .and_then(|v| match v {
                Json::String(s) => Some(s.clone()),
                Json::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .ok_or_else(|| SourceError::StemcellField {
                path: manifest.clone(),
                key,
            })
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
