//! Every file the project writes whole goes through [`write`]: made beside its place
//! under a name no other writer uses, given its mode before it holds anything, written,
//! synced, renamed over the old one, and then its folder synced. A reader (a person, a
//! metrics scraper, the next run, a VM's agent) sees the old file or the new one, never
//! half of either, and a crash or power loss keeps one of them whole. One rule for every
//! file: state, records, reports, blobs, keys.

mod space;

pub use space::disk_use;

use std::io::Write;
use std::path::Path;

/// Who may read a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Its owner alone (0600): credentials, keys, a VM's settings, variables.
    Private,
    /// Anyone on the machine (0644): certificates, reports, records.
    Public,
}

impl Mode {
    fn bits(self) -> u32 {
        match self {
            Mode::Private => 0o600,
            Mode::Public => 0o644,
        }
    }
}

/// Writes `bytes` as the file `path`, whole or not at all (see the crate's page).
///
/// # Errors
/// Any I/O error making, writing, syncing or renaming the file; the old file, if any, is
/// then left as it was, and no part file is left beside it.
pub fn write(path: &Path, bytes: &[u8], mode: Mode) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut part = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".part")
        .permissions(permissions(mode))
        .tempfile_in(dir)?;
    part.write_all(bytes)?;
    part.as_file().sync_all()?;
    part.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

fn permissions(mode: Mode) -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::Permissions::from_mode(mode.bits())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_file_is_replaced_whole_with_its_mode_and_nothing_is_left_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write(&path, b"one", Mode::Public).unwrap();
        write(&path, b"two", Mode::Private).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o600,
            "the new file has the mode asked for, not the old one's"
        );
        assert_eq!(entries(dir.path()), ["state.json"]);
    }

    #[test]
    fn a_write_that_fails_keeps_the_old_file_and_leaves_no_part() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kept");
        write(&path, b"old", Mode::Public).unwrap();
        // A directory where the file goes: the rename fails.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("inside"), b"x").unwrap();
        assert!(write(&blocked, b"new", Mode::Public).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(entries(dir.path()), ["blocked", "kept"]);
    }

    #[test]
    fn a_file_in_a_missing_folder_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let error = write(&dir.path().join("no/such/file"), b"x", Mode::Public).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
    }
}
