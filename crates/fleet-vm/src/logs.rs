//! A VM's logs as the agent packs them for `bosh logs` and an errand's run: the jobs'
//! files under `sys/log` (`JOB/...`), those the request's filters choose (the caller
//! reads the request; the VM's side only asks it about each path). A process VM
//! has no agent log of its own (the agent's lines go to the task's debug log) and no
//! operating system of its own, so `agent` and `system` add nothing.

use std::path::Path;

/// The most a bundle may hold, so that a runaway log cannot exhaust the director's
/// memory and store.
pub const MAX_BUNDLE_BYTES: u64 = 256 * 1024 * 1024;

/// The job log files below the VM's `sys/log` (the VM's directory is `vm_root`) whose
/// path `wants`, as a gzipped tarball; links are not followed, since a job could point
/// one anywhere.
///
/// # Errors
/// A file that cannot be read, or more than [`MAX_BUNDLE_BYTES`] of them.
pub fn pack(vm_root: &Path, wants: &dyn Fn(&str) -> bool) -> std::io::Result<Vec<u8>> {
    let mut files = Vec::new();
    // `sys/log` found within the VM's directory: a job may have linked it anywhere.
    let vm = crate::beneath::Root::open(vm_root)?;
    if let Ok(root) = vm.below(Path::new("sys/log")) {
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
    fn a_vm_whose_sys_is_a_link_packs_nothing_of_where_it_points() {
        let dir = tempfile::tempdir().unwrap();
        let (vm, outside) = (dir.path().join("vm"), dir.path().join("outside"));
        std::fs::create_dir_all(outside.join("log/kv")).unwrap();
        std::fs::write(outside.join("log/kv/secret.log"), "this machine's").unwrap();
        std::fs::create_dir_all(&vm).unwrap();
        std::os::unix::fs::symlink(&outside, vm.join("sys")).unwrap();
        let bundle = pack(&vm, &|_| true).unwrap();
        assert!(paths(&bundle).is_empty(), "{:?}", paths(&bundle));
    }

    #[test]
    fn job_files_are_packed_by_path_and_filters_choose_among_them() {
        let root = tempfile::tempdir().unwrap();
        let log = &root.path().join("sys/log");
        std::fs::create_dir_all(log).unwrap();
        std::fs::create_dir_all(log.join("pg/sub")).unwrap();
        std::fs::write(log.join("pg/pg.stdout.log"), "up\n").unwrap();
        std::fs::write(log.join("pg/sub/audit.txt"), "a\n").unwrap();
        std::fs::create_dir_all(log.join("bpm")).unwrap();
        std::fs::write(log.join("bpm/bpm.log"), "b\n").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", log.join("pg/host.log")).unwrap();
        let everything = pack(root.path(), &|_| true).unwrap();
        assert_eq!(
            paths(&everything),
            ["bpm/bpm.log", "pg/pg.stdout.log", "pg/sub/audit.txt"]
        );
        let files = fleet_release::tgz_files(&everything, 1 << 20).unwrap();
        assert_eq!(files[1].bytes, b"up\n");
        let chosen = pack(root.path(), &|p| {
            p.starts_with("pg/") && p.ends_with(".log")
        })
        .unwrap();
        assert_eq!(paths(&chosen), ["pg/pg.stdout.log"]);
        assert!(paths(&pack(root.path(), &|_| false).unwrap()).is_empty());
    }
}
