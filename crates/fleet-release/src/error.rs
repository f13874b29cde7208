use std::path::PathBuf;

/// What is wrong with one archive, digest or tree; callers put the file's name before it.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("unknown digest algorithm `{algorithm}` (use sha1, sha256 or sha512)")]
    UnknownAlgorithm { algorithm: String },
    #[error("`{digest}` is not a {algorithm} digest ({length} hex digits)")]
    MalformedDigest {
        digest: String,
        algorithm: &'static str,
        length: usize,
    },
    #[error("{algorithm} digest is {actual}, the manifest says {expected}")]
    DigestMismatch {
        algorithm: &'static str,
        actual: String,
        expected: String,
    },
    #[error("not a tarball: {0}")]
    NotATarball(#[source] std::io::Error),
    #[error("not a readable tarball: {0}")]
    Unreadable(#[source] std::io::Error),
    /// Reading stopped at the caller's limit; tar's own error would hide why.
    #[error("unpacks to more than {} MiB", limit / (1024 * 1024))]
    TooLarge { limit: u64 },
    #[error("the archive holds more than {limit} files")]
    TooManyEntries { limit: usize },
    #[error("`{path}` is larger than {limit} bytes")]
    EntryTooLarge { path: String, limit: u64 },
    #[error("`{path}` leaves the archive (`..`)")]
    LeavesArchive { path: String },
    #[error("`{path}` is an absolute path")]
    AbsolutePath { path: String },
    #[error("`{path}` names no file")]
    NamesNoFile { path: String },
    #[error("`{path}` is a link or special file; only regular files are allowed")]
    NotARegularFile { path: String },
    #[error(
        "`{path}` is a hard link or special file; only files, directories and links are allowed"
    )]
    NotAFileDirectoryOrLink { path: String },
    #[error("`{path}` is a link without a target")]
    LinkWithoutTarget { path: String },
    #[error("`{path}` links to `{}`, outside the archive", target.display())]
    LinkLeavesArchive { path: String, target: PathBuf },
    #[error("cannot read `{path}`: {source}")]
    ReadEntry {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write `{path}`: {source}")]
    WriteEntry {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot make {}: {source}", path.display())]
    MakeDirectory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot archive {}: {source}", path.display())]
    Archive {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot finish the archive: {0}")]
    Finish(#[source] std::io::Error),
    #[error("has no `packaging` script")]
    NoPackagingScript,
    /// Every problem of a job archive, joined.
    #[error("{}", problems.join("; "))]
    InvalidJob { problems: Vec<String> },
}
