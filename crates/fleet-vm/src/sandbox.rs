//! A VM as a directory laid out like `/var/vcap`: `data/`, `jobs/`, `packages/`,
//! `sys/run/`, `sys/log/`, and `store/` while a persistent disk is mounted. A VM that is
//! a container sees its directory at `/var/vcap`, and what it runs enters it
//! ([`Sandbox::enter`]); a VM that shares the machine's root instead has the `/var/vcap`
//! of job files rewritten to its directory when they are placed.

use std::path::{Path, PathBuf};

use crate::container::{Containers, Enter};

pub const VCAP: &str = "/var/vcap";

/// The variable every process started in a VM has, naming the VM's directory: scripts
/// find the VM by it, and a pid read from a pidfile is known to be the VM's own by it,
/// not a process that took the number after the machine restarted.
pub const VM_ROOT: &str = "BOSH_VM_ROOT";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    root: PathBuf,
    /// The container the VM is, when it is one.
    container: Option<(Containers, String)>,
}

impl Sandbox {
    /// The VM at `root`, its directories made; the VM's directory is its owner's alone,
    /// as a VM is: its jobs' rendered files and its settings hold credentials.
    ///
    /// # Errors
    /// When a directory cannot be made.
    pub fn create(root: &Path) -> std::io::Result<Sandbox> {
        use std::os::unix::fs::PermissionsExt;
        let new = !root.exists();
        std::fs::create_dir_all(root)?;
        // Within the VM's directory, whose links a VM's jobs may have made.
        let within = crate::beneath::Root::open(root)?;
        for dir in ["data", "jobs", "packages", "sys/run", "sys/log"] {
            within.create_dir_all(Path::new(dir))?;
        }
        // Set when it is made: a container VM opens its own to its users.
        if new {
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Sandbox {
            root: root.to_path_buf(),
            container: None,
        })
    }

    /// The same VM as the container `cid` of `containers`.
    pub fn in_container(mut self, containers: Containers, cid: &str) -> Sandbox {
        self.container = Some((containers, cid.to_string()));
        self
    }

    /// How what the VM runs enters its container; `None` for a VM that is no container.
    ///
    /// # Errors
    /// For a container VM whose container does not run.
    pub fn enter(&self) -> std::io::Result<Option<Enter>> {
        let Some((containers, cid)) = &self.container else {
            return Ok(None);
        };
        containers.enter(cid, &self.root).map(Some).ok_or_else(|| {
            std::io::Error::other(format!("the container of VM {cid} is not running"))
        })
    }

    /// Where this machine's side hands a container VM files, which it sees at
    /// [`crate::container::INBOX`]; `None` for a VM that is no container.
    pub fn inbox(&self) -> Option<PathBuf> {
        self.container
            .as_ref()
            .map(|(containers, cid)| containers.inbox(cid))
    }

    /// Where the VM sees its own directory: `/var/vcap` in a container.
    pub fn inside(&self) -> &Path {
        if self.container.is_some() {
            Path::new(VCAP)
        } else {
            &self.root
        }
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

    /// Where the jobs log: `sys/log`.
    pub fn log_root(&self) -> PathBuf {
        self.root.join("sys/log")
    }

    /// Where a job's script or process logs: `sys/log/JOB`.
    pub fn log_dir(&self, job: &str) -> PathBuf {
        self.log_root().join(job)
    }

    pub fn run_dir(&self) -> PathBuf {
        self.root.join("sys/run")
    }

    /// The mount point of the persistent disk.
    pub fn store(&self) -> PathBuf {
        self.root.join("store")
    }

    /// `text` with every `/var/vcap` path pointing into this VM as it sees itself.
    pub fn rewrite(&self, text: &str) -> String {
        let root = self.inside().to_string_lossy();
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

    /// The disk mounted at `at` (`store/` or the migration target), as this machine
    /// sees it.
    pub fn mounted_at(&self, at: &Path) -> Option<PathBuf> {
        std::fs::read_link(at).ok().map(|link| self.root.join(link))
    }

    /// The disk mounted at `store/`, as this machine sees it.
    pub fn mounted(&self) -> Option<PathBuf> {
        self.mounted_at(&self.store())
    }

    /// Where a second disk is mounted while the data of the first moves to it, as BOSH's
    /// agent mounts it.
    pub fn migration_target(&self) -> PathBuf {
        self.root.join("store_migration_target")
    }

    /// Mounts a persistent disk (a directory elsewhere) at `store/`, or, when another
    /// disk is there, at the migration target.
    ///
    /// # Errors
    /// When both places are taken by other disks, or the link cannot be made.
    pub fn mount(&self, disk: &Path) -> std::io::Result<()> {
        for at in [self.store(), self.migration_target()] {
            match self.mounted_at(&at) {
                Some(current) if current == disk => return Ok(()),
                Some(_) => continue,
                // A disk in the VM's directory is linked relatively: the same link
                // reaches it from inside the VM's container.
                None => {
                    let target = disk.strip_prefix(&self.root).unwrap_or(disk);
                    return std::os::unix::fs::symlink(target, &at);
                }
            }
        }
        Err(std::io::Error::other(format!(
            "store/ and store_migration_target/ have other disks mounted; cannot mount {}",
            disk.display()
        )))
    }

    /// After the data moved to the disk at the migration target: that disk is mounted at
    /// `store/` in place of the old one.
    ///
    /// # Errors
    /// When no disk is at the migration target, or the links cannot be changed.
    pub fn finish_migration(&self) -> std::io::Result<()> {
        let target = std::fs::read_link(self.migration_target()).map_err(|e| {
            std::io::Error::new(e.kind(), "no disk is mounted at store_migration_target/")
        })?;
        // As it was linked: relative to the VM's directory or absolute.
        self.unmount()?;
        std::os::unix::fs::symlink(&target, self.store())?;
        std::fs::remove_file(self.migration_target())
    }

    /// Unmounts `disk` wherever it is mounted; a disk not mounted is no error.
    ///
    /// # Errors
    /// When a link cannot be removed.
    pub fn unmount_disk(&self, disk: &Path) -> std::io::Result<()> {
        for at in [self.store(), self.migration_target()] {
            if self.mounted_at(&at).is_some_and(|current| current == disk) {
                std::fs::remove_file(&at)?;
            }
        }
        Ok(())
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
            container: None,
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
    fn a_vms_links_do_not_take_its_directories_outside() {
        let dir = tempfile::tempdir().unwrap();
        let (vm, outside) = (dir.path().join("vm"), dir.path().join("outside"));
        std::fs::create_dir_all(&vm).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        // What a job could leave: its `sys` a link to this machine's directory.
        std::os::unix::fs::symlink(&outside, vm.join("sys")).unwrap();
        let made = Sandbox::create(&vm);
        assert!(
            std::fs::read_dir(&outside).unwrap().next().is_none(),
            "nothing was made outside: {made:?}"
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
        vm.unmount().unwrap();
        vm.unmount().unwrap();
        assert!(!vm.store().exists());
    }

    #[test]
    fn a_second_disk_is_mounted_beside_the_first_and_takes_its_place_after_a_migration() {
        let dir = tempfile::tempdir().unwrap();
        let vm = Sandbox::create(&dir.path().join("vm")).unwrap();
        let disks: Vec<PathBuf> = (1..=3)
            .map(|n| dir.path().join(format!("disk-{n}")))
            .collect();
        for d in &disks {
            std::fs::create_dir(d).unwrap();
        }
        vm.mount(&disks[0]).unwrap();
        vm.mount(&disks[1]).unwrap();
        assert_eq!(std::fs::read_link(vm.migration_target()).unwrap(), disks[1]);
        assert!(vm.mount(&disks[2]).is_err(), "no third place");
        vm.finish_migration().unwrap();
        assert_eq!(std::fs::read_link(vm.store()).unwrap(), disks[1]);
        assert!(!vm.migration_target().exists());
        vm.unmount_disk(&disks[0]).unwrap();
        assert_eq!(
            std::fs::read_link(vm.store()).unwrap(),
            disks[1],
            "the old disk was not mounted any more"
        );
        vm.unmount_disk(&disks[1]).unwrap();
        assert!(!vm.store().exists());
    }
}
