use std::path::Path;

use serde::Serialize;

/// Writes pretty JSON to a temporary file beside `path` and renames it into place, so a
/// reader never sees half a report.
///
/// # Errors
/// Any I/O error creating, writing or renaming the file.
pub fn write_json_file(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    write_file(path, &bytes)
}

/// Writes `bytes` to a temporary file beside `path` and renames it into place, so a
/// reader (a person, node_exporter, the next run) never sees half of it, and a crash
/// leaves the old file or the new one, whole: the file and then its folder are synced.
///
/// # Errors
/// Any I/O error creating, writing or renaming the file.
pub fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    fleet_file::write(path, bytes, fleet_file::Mode::Public)
}

/// Checks, before any work, that a file can later be written at `path` the way
/// [`write_json_file`] writes it: a file made beside it and renamed over it. An output
/// that cannot be written must stop a run before it triggers anything.
///
/// # Errors
/// The folder is missing or not writable, or `path` is a folder.
pub fn check_writable(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "it is a directory",
        ));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let probe = dir.join(format!(".fleet-updater-probe.{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_lands_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        write_json_file(&path, &serde_json::json!({"schema": 1})).unwrap();
        let read: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(read["schema"], 1);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_missing_folder_or_a_folder_as_the_file_is_found_before_any_work() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_writable(&dir.path().join("report.json")).is_ok());
        assert!(check_writable(&dir.path().join("missing/report.json")).is_err());
        assert!(check_writable(dir.path()).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
