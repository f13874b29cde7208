//! A VM as a directory laid out like `/var/vcap`: `data/`, `jobs/`, `packages/`,
//! `sys/run/`, `sys/log/`, and `store/` while a persistent disk is mounted. Job files
//! written for `/var/vcap` have that prefix rewritten to the VM's directory when they are
//! placed, since a VM here shares the machine's root.

use std::path::{Path, PathBuf};

pub const VCAP: &str = "/var/vcap";

/// The variable every process started in a VM has, naming the VM's directory: scripts
/// find the VM by it, and a pid read from a pidfile is known to be the VM's own by it,
/// not a process that took the number after the machine restarted.
pub const VM_ROOT: &str = "BOSH_VM_ROOT";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    root: PathBuf,
}

impl Sandbox {
    /// The VM at `root`, its directories made.
    ///
    /// # Errors
    /// When a directory cannot be made.
    pub fn create(root: &Path) -> std::io::Result<Sandbox> {
        for dir in ["data", "jobs", "packages", "sys/run", "sys/log"] {
            std::fs::create_dir_all(root.join(dir))?;
        }
        Ok(Sandbox {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn jobs(&self) -> PathBuf {
        self.root.join("jobs")
    }

    pub fn job(&self, name: &str) -> PathBuf {
        self.jobs().join(name)
    }

    pub fn packages(&self) -> PathBuf {
        self.root.join("packages")
    }

    /// Where a job's script or process logs: `sys/log/JOB`.
    pub fn log_dir(&self, job: &str) -> PathBuf {
        self.root.join("sys/log").join(job)
    }

    pub fn run_dir(&self) -> PathBuf {
        self.root.join("sys/run")
    }

    /// The mount point of the persistent disk.
    pub fn store(&self) -> PathBuf {
        self.root.join("store")
    }

    /// `text` with every `/var/vcap` path pointing into this VM.
    pub fn rewrite(&self, text: &str) -> String {
        let root = self.root.to_string_lossy();
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(VCAP) {
            let after = &rest[at + VCAP.len()..];
            // Only the path itself: `/var/vcapx` is another name.
            let ends = after
                .chars()
                .next()
                .is_none_or(|c| c == '/' || !(c.is_alphanumeric() || c == '_' || c == '-'));
            out.push_str(&rest[..at]);
            out.push_str(if ends { &root } else { VCAP });
            rest = after;
        }
        out.push_str(rest);
        out
    }

    /// Mounts a persistent disk (a directory elsewhere) at `store/`.
    ///
    /// # Errors
    /// When `store/` is taken by another disk or cannot be linked.
    pub fn mount(&self, disk: &Path) -> std::io::Result<()> {
        let store = self.store();
        match std::fs::read_link(&store) {
            Ok(current) if current == disk => return Ok(()),
            Ok(current) => {
                return Err(std::io::Error::other(format!(
                    "store/ has {} mounted already",
                    current.display()
                )));
            }
            Err(_) => {}
        }
        std::os::unix::fs::symlink(disk, &store)
    }

    /// Unmounts whatever disk is at `store/`; nothing mounted is no error.
    ///
    /// # Errors
    /// When the link cannot be removed.
    pub fn unmount(&self) -> std::io::Result<()> {
        match std::fs::remove_file(self.store()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcap_paths_point_into_the_vm() {
        let vm = Sandbox {
            root: PathBuf::from("/s/vm-1"),
        };
        assert_eq!(
            vm.rewrite("exec /var/vcap/packages/kv/bin/kv --data /var/vcap/store/kv"),
            "exec /s/vm-1/packages/kv/bin/kv --data /s/vm-1/store/kv"
        );
        assert_eq!(
            vm.rewrite("cd /var/vcap; ls /var/vcapx"),
            "cd /s/vm-1; ls /var/vcapx"
        );
    }

    #[test]
    fn a_disk_is_mounted_once_and_unmounted() {
        let dir = tempfile::tempdir().unwrap();
        let vm = Sandbox::create(&dir.path().join("vm")).unwrap();
        let disk = dir.path().join("disk-1");
        std::fs::create_dir(&disk).unwrap();
        std::fs::write(disk.join("data"), "kept").unwrap();
        vm.mount(&disk).unwrap();
        vm.mount(&disk).unwrap();
        assert_eq!(
            std::fs::read_to_string(vm.store().join("data")).unwrap(),
            "kept"
        );
        let other = dir.path().join("disk-2");
        assert!(vm.mount(&other).is_err());
        vm.unmount().unwrap();
        vm.unmount().unwrap();
        assert!(!vm.store().exists());
    }
}
