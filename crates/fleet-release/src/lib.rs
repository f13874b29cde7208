//! BOSH release archives, read and checked before the director keeps anything of them:
//! the manifest (`release.MF`), each job's spec, monit file and templates, each package's
//! packaging script, and every archive's digest. Pure: bytes in, a typed release or the
//! file and field at fault out.

mod archive;
mod builder;
mod digest;
mod error;
mod fingerprint;
mod job;
mod manifest;
mod package;
mod payload;
mod source;
mod tgz;
mod tree;

pub use archive::{
    CompiledArchive, EXPANSION_FLOOR, JobArchive, MAX_RELEASE_BYTES, PackageArchive,
    ReleaseArchive, ReleaseError, UnpackLimits, from_file_within, from_path, from_tarball,
    from_tarball_within,
};
pub use builder::{File, ReleaseBuilder, SourceFile};
pub use digest::{Digest, sha1_hex, sha256_hex};
pub use error::ArchiveError;
pub use job::{JobFiles, JobSpec, LinkSpec, PropertySpec, parse_spec};
pub use payload::Payload;

/// A job archive read and checked; every problem joined.
///
/// # Errors
/// [`ArchiveError::InvalidJob`], as the job module's `read`: a missing spec or monit, a
/// template the spec names that the archive lacks.
pub fn job_files(bytes: &[u8]) -> Result<JobFiles, ArchiveError> {
    job::read(bytes).map_err(|problems| ArchiveError::InvalidJob { problems })
}
pub use manifest::{ArchiveRef, CompiledRef, PackageRef, ReleaseManifest, parse as parse_manifest};
pub use source::{build_from_source, is_release_source, source_name};
pub use tgz::{
    Entry, build as build_tgz, build_with_modes as build_tgz_with_modes, files as tgz_files,
    paths as tgz_paths,
};
pub use tree::{pack, unpack};

#[cfg(test)]
mod tests;
