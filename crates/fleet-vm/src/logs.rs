//! A VM's logs as the agent packs them for `bosh logs` and an errand's run: the jobs'
//! files under `sys/log` (`JOB/...`), those the request's filters choose (the caller
//! reads the request; the VM's side only asks it about each path). A process VM
//! has no agent log of its own (the agent's lines go to the task's debug log) and no
//! operating system of its own, so `agent` and `system` add nothing.

use std::path::Path;

/// The most a bundle may hold, so that a runaway log cannot exhaust the director's
/// memory and store.
pub const MAX_BUNDLE_BYTES: u64 = 256 * 1024 * 1024;

/// The job log files below `log_root` (the VM's `sys/log`) whose path `wants`, as a
/// gzipped tarball; symlinks are not followed, since a job could point one anywhere.
///
/// # Errors
/// A file that cannot be read, or more than [`MAX_BUNDLE_BYTES`] of them.
pub fn pack(log_root: &Path, wants: &dyn Fn(&str) -> bool) -> std::io::Result<Vec<u8>> {
    let mut files = Vec::new();
    if log_root.is_dir() {
        let root = crate::beneath::Root::open(log_root)?;
        let mut total = 0u64;
        collect(&root, Path::new(""), wants, &mut files, &mut total)?;
    }
    let entries: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(path, bytes)| (path.as_str(), bytes.as_slice()))
        .collect();
    Ok(fleet_release::build_tgz(&entries))
}

/// Every file below `at` that `wants`, read within `root` (a job may swap a directory
/// for a link while it is read: the link leads nowhere outside).
fn collect(
    root: &crate::beneath::Root,
    at: &Path,
    wants: &dyn Fn(&str) -> bool,
    files: &mut Vec<(String, Vec<u8>)>,
    total: &mut u64,
) -> std::io::Result<()> {
    use crate::beneath::Kind;
    for (name, kind) in root.entries(at)? {
        let path = at.join(&name);
        let text = path.to_string_lossy().into_owned();
        match kind {
            Kind::Directory => collect(root, &path, wants, files, total)?,
            Kind::File if wants(&text) => {
                let left = MAX_BUNDLE_BYTES.saturating_sub(*total);
                let bytes = root.read(&path, left).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::Other {
                        std::io::Error::other(format!(
                            "the logs asked for hold more than {MAX_BUNDLE_BYTES} bytes; \
                             choose fewer files with filters"
                        ))
                    } else {
                        e
                    }
                })?;
                *total += bytes.len() as u64;
                files.push((text, bytes));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(tgz: &[u8]) -> Vec<String> {
        fleet_release::tgz_paths(tgz, 1 << 20).unwrap()
    }

    #[test]
    fn job_files_are_packed_by_path_and_filters_choose_among_them() {
        let root = tempfile::tempdir().unwrap();
        let log = root.path();
        std::fs::create_dir_all(log.join("pg/sub")).unwrap();
        std::fs::write(log.join("pg/pg.stdout.log"), "up\n").unwrap();
        std::fs::write(log.join("pg/sub/audit.txt"), "a\n").unwrap();
        std::fs::create_dir_all(log.join("bpm")).unwrap();
        std::fs::write(log.join("bpm/bpm.log"), "b\n").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", log.join("pg/host.log")).unwrap();
        let everything = pack(log, &|_| true).unwrap();
        assert_eq!(
            paths(&everything),
            ["bpm/bpm.log", "pg/pg.stdout.log", "pg/sub/audit.txt"]
        );
        let files = fleet_release::tgz_files(&everything, 1 << 20).unwrap();
        assert_eq!(files[1].bytes, b"up\n");
        let chosen = pack(log, &|p| p.starts_with("pg/") && p.ends_with(".log")).unwrap();
        assert_eq!(paths(&chosen), ["pg/pg.stdout.log"]);
        assert!(paths(&pack(log, &|_| false).unwrap()).is_empty());
    }
}
