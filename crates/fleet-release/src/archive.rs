//! A whole release, from its tarball or from a directory holding what the tarball
//! would: `release.MF`, `jobs/NAME.tgz`, `packages/NAME.tgz` (or, for a compiled release,
//! `compiled_packages/NAME.tgz`). Every archive the manifest lists is checked against its
//! digest; a package archive may be left out (as `bosh upload-release` leaves out those
//! the director already has), a job archive may not.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::digest::Digest;
use super::job::{self, JobFiles};
use super::manifest::{self, ArchiveRef, CompiledRef, PackageRef, ReleaseManifest};
use super::payload::Payload;
use super::{ArchiveError, package, tgz};

/// The outer tarball holds already compressed archives: about its own size unpacked.
pub const MAX_RELEASE_BYTES: u64 = 16 * 1024 * 1024 * 1024;

/// The most a release's `release.MF` may hold: a document, read whole.
pub const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The file (`release.MF`, `jobs/kv.tgz`, or the release itself) and each problem.
    #[error("{file}: {}", problems.join("; "))]
    Invalid { file: String, problems: Vec<String> },
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ReleaseError {
    fn invalid(file: impl Into<String>, problem: impl Into<String>) -> Self {
        ReleaseError::Invalid {
            file: file.into(),
            problems: vec![problem.into()],
        }
    }
}

#[derive(Debug, Clone)]
pub struct JobArchive {
    pub archive: ArchiveRef,
    pub files: JobFiles,
    /// The archive as uploaded, kept by the director as a blob.
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct PackageArchive {
    pub package: PackageRef,
    /// `None` when the upload left it out.
    pub bytes: Option<Payload>,
}

/// A compiled package: what its installation left, for one stemcell.
#[derive(Debug, Clone)]
pub struct CompiledArchive {
    pub compiled: CompiledRef,
    /// `None` when the upload left it out.
    pub bytes: Option<Payload>,
}

#[derive(Debug, Clone)]
pub struct ReleaseArchive {
    pub manifest: ReleaseManifest,
    /// In the manifest's order.
    pub jobs: Vec<JobArchive>,
    pub packages: Vec<PackageArchive>,
    pub compiled: Vec<CompiledArchive>,
}

/// Reads a release tarball (gzipped or not) or a directory holding its files.
///
/// # Errors
/// [`ReleaseError::Io`] when the path cannot be read, else as [`from_tarball`].
pub fn from_path(path: &Path) -> Result<ReleaseArchive, ReleaseError> {
    let io = |source| ReleaseError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.is_dir() {
        let mut files = BTreeMap::new();
        let manifest = path.join("release.MF");
        files.insert(
            "release.MF".to_string(),
            Payload::memory(std::fs::read(&manifest).map_err(|source| ReleaseError::Io {
                path: manifest.clone(),
                source,
            })?),
        );
        for sub in ["jobs", "packages"] {
            let dir = path.join(sub);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let entry = entry.map_err(io)?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".tgz") && entry.path().is_file() {
                    let bytes = std::fs::read(entry.path()).map_err(|source| ReleaseError::Io {
                        path: entry.path(),
                        source,
                    })?;
                    files.insert(format!("{sub}/{name}"), Payload::memory(bytes));
                }
            }
        }
        assemble(files, &TRUSTED, 0)
    } else {
        from_tarball(&std::fs::read(path).map_err(io)?)
    }
}

/// Reads a release tarball, as `bosh upload-release` sends it.
///
/// # Errors
/// [`ReleaseError::Invalid`] naming the file and every problem of it: a manifest that
/// does not parse, a job archive missing or not matching its digest, a job spec naming a
/// package the release lacks.
pub fn from_tarball(bytes: &[u8]) -> Result<ReleaseArchive, ReleaseError> {
    from_tarball_within(bytes, &TRUSTED)
}

/// This machine's own files (the CLI, create-env, the fleet's sources): bounded only by
/// the absolute size, not by how far they inflate.
const TRUSTED: UnpackLimits = UnpackLimits {
    max_bytes: MAX_RELEASE_BYTES,
    max_entries: 100_000,
    max_expansion: u64::MAX,
};

/// What reading a release tarball sent by anyone may cost: checked while it is read, so
/// that a compression bomb or a flood of files is refused before it takes the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackLimits {
    /// The most the tarball may inflate to.
    pub max_bytes: u64,
    /// The most files it may hold.
    pub max_entries: usize,
    /// The most it may inflate to, as a multiple of its own size (past a floor of
    /// [`EXPANSION_FLOOR`]): a release's files are archives already, so a release
    /// tarball inflates little, and a bomb a thousandfold.
    pub max_expansion: u64,
}

/// What any tarball may inflate to, however small: headers and padding of a small
/// release inflate well past its packed size.
pub const EXPANSION_FLOOR: u64 = 64 * 1024 * 1024;

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits {
            max_bytes: MAX_RELEASE_BYTES,
            max_entries: 100_000,
            max_expansion: 8,
        }
    }
}

impl UnpackLimits {
    /// The most a tarball of `packed` bytes may inflate to.
    pub fn inflated(&self, packed: u64) -> u64 {
        packed
            .saturating_mul(self.max_expansion)
            .max(EXPANSION_FLOOR)
            .min(self.max_bytes)
    }
}

/// [`from_tarball`] within `limits`.
///
/// # Errors
/// As [`from_tarball`]; a tarball past a limit, named.
pub fn from_tarball_within(
    bytes: &[u8],
    limits: &UnpackLimits,
) -> Result<ReleaseArchive, ReleaseError> {
    let bounds = tgz::Bounds {
        max_bytes: limits.inflated(bytes.len() as u64),
        max_entries: limits.max_entries,
        document: Some(("release.MF", MAX_MANIFEST_BYTES)),
    };
    let entries = tgz::files_within(bytes, bounds)
        .map_err(|e| ReleaseError::invalid("the release tarball", e.to_string()))?;
    let mut files = BTreeMap::new();
    let mut unpacked = 0u64;
    for entry in entries {
        unpacked += entry.bytes.len() as u64;
        files.insert(entry.path, Payload::memory(entry.bytes));
    }
    assemble(files, limits, unpacked)
}

/// [`from_tarball_within`] for the tarball in the file `path` (an upload spooled to disk),
/// read as it streams: `release.MF` and the job archives (small, read whole) are held in
/// memory, each package archive goes to a file of its own in a new directory under
/// `spool` (gone with the last payload in it), and any other file is read past. Memory
/// holds no more than a job archive, whatever the release's size.
///
/// # Errors
/// As [`from_tarball_within`]; [`ReleaseError::Io`] when the file or the spool cannot be
/// read or written.
pub fn from_file_within(
    path: &Path,
    limits: &UnpackLimits,
    spool: &Path,
) -> Result<ReleaseArchive, ReleaseError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReleaseError::Io { path, source }
    };
    let file = std::fs::File::open(path).map_err(io(path))?;
    let packed = file.metadata().map_err(io(path))?.len();
    std::fs::create_dir_all(spool).map_err(io(spool))?;
    let unpacked = Arc::new(
        tempfile::Builder::new()
            .prefix("release-")
            .tempdir_in(spool)
            .map_err(io(spool))?,
    );
    let invalid = |e: ArchiveError| ReleaseError::invalid("the release tarball", e.to_string());
    let plain = tgz::plain_reader(file).map_err(|e| invalid(ArchiveError::NotATarball(e)))?;
    let mut files = BTreeMap::new();
    let mut entries = 0usize;
    let unpacked = tgz::walk_from(plain, limits.inflated(packed), |name, reader| {
        if entries == limits.max_entries {
            return Err(ArchiveError::TooManyEntries {
                limit: limits.max_entries,
            });
        }
        entries += 1;
        let held = match name {
            "release.MF" => Some(MAX_MANIFEST_BYTES),
            _ if name.starts_with("jobs/") => Some(job::MAX_JOB_BYTES),
            _ => None,
        };
        let kept = if let Some(cap) = held {
            Payload::memory(tgz::read_capped(reader, name, cap)?)
        } else if name.starts_with("packages/") || name.starts_with("compiled_packages/") {
            let spooled = Payload::spool(reader, &unpacked, &entries.to_string());
            spooled.map_err(|source| ArchiveError::WriteEntry {
                path: name.to_string(),
                source,
            })?
        } else {
            // Not part of a release: read past (the tarball's reader skips it).
            return Ok(());
        };
        files.insert(name.to_string(), kept);
        Ok(())
    })
    .map_err(invalid)?;
    assemble(files, limits, unpacked)
}

/// The release of `files`, every archive checked. Package archives are tarballs again:
/// each may inflate as the release tarball may ([`UnpackLimits::inflated`] of its own
/// size), and all of them together to what is left of `limits.max_bytes` once the
/// release tarball inflated to `unpacked`, so that a bomb nested in a package costs no
/// more than one sent whole.
fn assemble(
    mut files: BTreeMap<String, Payload>,
    limits: &UnpackLimits,
    unpacked: u64,
) -> Result<ReleaseArchive, ReleaseError> {
    let mut left = limits.max_bytes.saturating_sub(unpacked);
    let text = files
        .remove("release.MF")
        .ok_or_else(|| ReleaseError::invalid("the release", "has no `release.MF`"))?
        .into_bytes()
        .map_err(|e| ReleaseError::invalid("release.MF", e.to_string()))?;
    let text = String::from_utf8(text)
        .map_err(|_| ReleaseError::invalid("release.MF", "is not UTF-8 text"))?;
    let manifest = manifest::parse(&text).map_err(|problems| ReleaseError::Invalid {
        file: "release.MF".to_string(),
        problems,
    })?;
    let mut jobs = Vec::new();
    for archive in &manifest.jobs {
        let file = format!("jobs/{}.tgz", archive.name);
        let bytes = files
            .remove(&file)
            .ok_or_else(|| {
                ReleaseError::invalid(
                    &file,
                    format!("is missing, but release.MF lists job `{}`", archive.name),
                )
            })?
            .into_bytes()
            .map_err(|e| ReleaseError::invalid(&file, e.to_string()))?;
        archive
            .digest
            .verify(&bytes)
            .map_err(|e| ReleaseError::invalid(&file, format!("sha1: {e}")))?;
        let files = job::read(&bytes).map_err(|problems| ReleaseError::Invalid {
            file: file.clone(),
            problems,
        })?;
        if files.spec.name != archive.name {
            return Err(ReleaseError::invalid(
                &file,
                format!(
                    "its spec names job `{}`, release.MF names it `{}`",
                    files.spec.name, archive.name
                ),
            ));
        }
        for needed in &files.spec.packages {
            let found = manifest.packages.iter().any(|p| &p.archive.name == needed)
                || manifest
                    .compiled
                    .iter()
                    .any(|c| &c.package.archive.name == needed);
            if !found {
                return Err(ReleaseError::invalid(
                    &file,
                    format!("packages: `{needed}` is not a package of the release"),
                ));
            }
        }
        jobs.push(JobArchive {
            archive: archive.clone(),
            files,
            bytes,
        });
    }
    let mut packages = Vec::new();
    for package in &manifest.packages {
        let file = format!("packages/{}.tgz", package.archive.name);
        let bytes = files.remove(&file);
        if let Some(bytes) = &bytes {
            verify(&file, &package.archive.digest, bytes)?;
            let reader = bytes
                .reader()
                .map_err(|e| ReleaseError::invalid(&file, e.to_string()))?;
            let limit = limits.inflated(bytes.len()).min(left);
            let read = package::check_reader(reader, limit)
                .map_err(|e| ReleaseError::invalid(&file, e.to_string()))?;
            left -= read;
        }
        packages.push(PackageArchive {
            package: package.clone(),
            bytes,
        });
    }
    let mut compiled = Vec::new();
    for entry in &manifest.compiled {
        let file = format!("compiled_packages/{}.tgz", entry.package.archive.name);
        let bytes = files.remove(&file);
        if let Some(bytes) = &bytes {
            verify(&file, &entry.package.archive.digest, bytes)?;
        }
        compiled.push(CompiledArchive {
            compiled: entry.clone(),
            bytes,
        });
    }
    Ok(ReleaseArchive {
        manifest,
        jobs,
        packages,
        compiled,
    })
}

fn verify(file: &str, digest: &Digest, payload: &Payload) -> Result<(), ReleaseError> {
    // Its SHA-1 is known from its reading: only another algorithm reads it again.
    let checked = match digest.verify_sha1(payload.sha1()) {
        Some(checked) => checked,
        None => {
            let mut reader = payload
                .reader()
                .map_err(|e| ReleaseError::invalid(file, e.to_string()))?;
            digest.verify_reader(&mut reader, file)
        }
    };
    checked.map_err(|e| ReleaseError::invalid(file, format!("sha1: {e}")))
}
