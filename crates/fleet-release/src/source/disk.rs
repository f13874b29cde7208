//! Reading a release source directory: its subdirectories, the files under a directory
//! (symbolic links noted, not followed), and a file with its mode.

use std::path::{Path, PathBuf};

use crate::archive::ReleaseError;

/// A file found under a directory, by its path relative to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub relative: String,
    /// A symbolic link: kept out of the walk's descent, and refused where packaged.
    pub link: bool,
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReleaseError + '_ {
    move |source| ReleaseError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The directories in `dir`, by name; none when `dir` does not exist.
pub(crate) fn subdirectories(dir: &Path) -> Result<Vec<PathBuf>, ReleaseError> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let path = entry.map_err(io(dir))?.path();
        if path.is_dir() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Every file under `dir` (none when it does not exist), in path order. A link is listed
/// as one file and not descended into, as the CLI packages only what lies under the
/// directory itself.
pub(crate) fn files_under(dir: &Path) -> Result<Vec<Found>, ReleaseError> {
    let mut found = Vec::new();
    if !dir.is_dir() {
        return Ok(found);
    }
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).map_err(io(&at))? {
            let entry = entry.map_err(io(&at))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(io(&path))?;
            if kind.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path
                .strip_prefix(dir)
                .expect("found under dir")
                .to_string_lossy()
                .into_owned();
            found.push(Found {
                relative,
                link: kind.is_symlink(),
            });
        }
    }
    found.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(found)
}

/// The file's contents and Unix mode (a link followed).
pub(crate) fn read(path: &Path) -> Result<(Vec<u8>, u32), ReleaseError> {
    use std::os::unix::fs::PermissionsExt;
    let bytes = std::fs::read(path).map_err(io(path))?;
    let mode = std::fs::metadata(path)
        .map_err(io(path))?
        .permissions()
        .mode()
        & 0o7777;
    Ok((bytes, mode))
}
