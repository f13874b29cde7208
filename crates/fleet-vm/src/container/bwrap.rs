//! The bubblewrap command line that makes a VM's container, built from what the VM is
//! (pure: the host's root is read by the caller). The VM sees this machine's operating
//! system read-only as its stemcell, its own directory as `/var/vcap` (its `jobs/` and,
//! but on compilation VMs, its `packages/` read-only where the agent that places them
//! is this machine's; writable where the VM runs its own agent), its
//! own `/etc` files that name it and its users, and its own `/tmp`, `/home` and `/root`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::VM_PROGRAM;
use crate::iaas::RECORDS;
use crate::sandbox::VCAP;

/// What this machine's root has at one of the operating system's top-level names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostEntry {
    /// A directory, bound read-only.
    Directory,
    /// A link (`/bin -> usr/bin` on a merged `/usr`), made the same inside.
    Link(PathBuf),
}

/// The top-level names of the operating system a VM sees.
pub const SYSTEM_NAMES: [&str; 9] = [
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt",
];

/// The files of `/etc` that are the VM's own (in its system directory's `etc/`).
pub const OWN_ETC_FILES: [&str; 6] = ["hostname", "hosts", "passwd", "group", "shadow", "gshadow"];

#[derive(Debug, Clone)]
pub struct Layout<'a> {
    pub hostname: &'a str,
    /// The VM's directory, its `/var/vcap`.
    pub vm_dir: &'a Path,
    /// The VM's system directory: `etc/` (its own files), `tmp/`, `home/`, `root/`, and
    /// `inbox/`.
    pub system_dir: &'a Path,
    /// What the host has at each of [`SYSTEM_NAMES`]; absent names are left out.
    pub host: Vec<(String, HostEntry)>,
    /// What of those only this machine's own users may read (its host keys, its
    /// shadow files, private keys): hidden from the VM, whose root could read them. Each
    /// path, and whether it is a directory.
    pub private: Vec<(PathBuf, bool)>,
    /// The program the VM's supervisor runs as, bound at [`VM_PROGRAM`].
    pub program: Option<&'a Path>,
    /// A compilation VM installs what it compiles into `packages/`, and a VM running
    /// its own agent places its packages there.
    pub packages_writable: bool,
    /// A VM running its own agent places its jobs.
    pub jobs_writable: bool,
    /// The VM's ephemeral disk, mounted on this machine, when it has one of its own:
    /// its `/var/vcap/data`.
    pub ephemeral: Option<&'a Path>,
    /// Whether the VM has a network namespace of its own (`false`: the host's).
    pub own_network: bool,
    /// Whether the VM has a user namespace of its own, its root this process's user.
    pub user_namespace: bool,
    /// Where bubblewrap writes the container's pid, and what it waits on before it runs
    /// the container's first process.
    pub info_fd: i32,
    pub block_fd: i32,
}

fn push(args: &mut Vec<OsString>, words: &[&str]) {
    args.extend(words.iter().map(OsString::from));
}

fn bind(args: &mut Vec<OsString>, how: &str, from: &Path, to: &str) {
    args.push(how.into());
    args.push(from.into());
    args.push(to.into());
}

/// The arguments after `bwrap`; the container's first process is `sleep infinity`
/// under bubblewrap's own init, which reaps what the VM's processes leave.
pub fn arguments(layout: &Layout<'_>) -> Vec<OsString> {
    let mut args = Vec::new();
    push(
        &mut args,
        &[
            "--unshare-pid",
            "--unshare-uts",
            "--unshare-ipc",
            "--unshare-cgroup-try",
        ],
    );
    if layout.own_network {
        push(&mut args, &["--unshare-net"]);
    }
    if layout.user_namespace {
        push(&mut args, &["--unshare-user", "--uid", "0", "--gid", "0"]);
    }
    push(&mut args, &["--hostname", layout.hostname]);
    for (name, entry) in &layout.host {
        let at = format!("/{name}");
        match entry {
            HostEntry::Directory => bind(&mut args, "--ro-bind", Path::new(&at), &at),
            HostEntry::Link(target) => {
                args.push("--symlink".into());
                args.push(target.into());
                args.push(at.into());
            }
        }
    }
    for (path, directory) in &layout.private {
        let at = path.to_string_lossy();
        if *directory {
            push(&mut args, &["--tmpfs", &at, "--remount-ro", &at]);
        } else {
            bind(&mut args, "--ro-bind", Path::new("/dev/null"), &at);
        }
    }
    let etc = layout.system_dir.join("etc");
    for file in OWN_ETC_FILES {
        bind(
            &mut args,
            "--bind",
            &etc.join(file),
            &format!("/etc/{file}"),
        );
    }
    // Made as a VM's are, whatever this process's umask: open to the VM's users.
    push(&mut args, &["--perms", "0755", "--dir", "/var"]);
    bind(&mut args, "--bind", layout.vm_dir, VCAP);
    if let Some(disk) = layout.ephemeral {
        bind(&mut args, "--bind", disk, &format!("{VCAP}/data"));
    }
    if !layout.jobs_writable {
        bind(
            &mut args,
            "--ro-bind",
            &layout.vm_dir.join("jobs"),
            &format!("{VCAP}/jobs"),
        );
    }
    if !layout.packages_writable {
        bind(
            &mut args,
            "--ro-bind",
            &layout.vm_dir.join("packages"),
            &format!("{VCAP}/packages"),
        );
    }
    // The IaaS's and the agent's records of the VM are not the VM's to see.
    let records = format!("{VCAP}/{RECORDS}");
    push(&mut args, &["--tmpfs", &records, "--remount-ro", &records]);
    bind(
        &mut args,
        "--ro-bind",
        &layout.system_dir.join("inbox"),
        super::INBOX,
    );
    bind(
        &mut args,
        "--ro-bind",
        &layout.system_dir.join("settings"),
        crate::iaas::OWN_AGENT_DIR,
    );
    if let Some(program) = layout.program {
        bind(&mut args, "--ro-bind", program, VM_PROGRAM);
    }
    for (dir, at) in [
        ("tmp", "/tmp"),
        ("tmp", "/var/tmp"),
        ("home", "/home"),
        ("root", "/root"),
    ] {
        bind(&mut args, "--bind", &layout.system_dir.join(dir), at);
    }
    push(
        &mut args,
        &[
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--perms",
            "1777",
            "--tmpfs",
            "/dev/shm",
            "--tmpfs",
            "/run",
            "--chdir",
            VCAP,
            "--new-session",
        ],
    );
    for (flag, fd) in [
        ("--info-fd", layout.info_fd),
        ("--block-fd", layout.block_fd),
    ] {
        args.push(flag.into());
        args.push(fd.to_string().into());
    }
    push(&mut args, &["--", "sleep", "infinity"]);
    args
}

/// The files and directories below the system's directories among `host` that not
/// every user of this machine may read (mode without `o+r`), links not followed and
/// what is below a hidden directory left out; `/usr` is not searched (it is large, and
/// what it holds is public).
pub fn private_paths(host: &[(String, HostEntry)]) -> Vec<(PathBuf, bool)> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = Vec::new();
    let mut pending: Vec<PathBuf> = host
        .iter()
        .filter(|(name, entry)| *entry == HostEntry::Directory && name != "usr")
        .map(|(name, _)| Path::new("/").join(name))
        .collect();
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            let readable = meta.permissions().mode() & 0o004 != 0;
            match (meta.is_dir(), readable) {
                (true, true) => pending.push(entry.path()),
                (is_dir, false) => found.push((entry.path(), is_dir)),
                (false, true) => {}
            }
        }
    }
    found.sort();
    found
}

/// What this machine's root has at each of [`SYSTEM_NAMES`].
pub fn host_entries() -> Vec<(String, HostEntry)> {
    SYSTEM_NAMES
        .iter()
        .filter_map(|name| {
            let at = Path::new("/").join(name);
            let meta = std::fs::symlink_metadata(&at).ok()?;
            let entry = if meta.file_type().is_symlink() {
                HostEntry::Link(std::fs::read_link(&at).ok()?)
            } else if meta.is_dir() {
                HostEntry::Directory
            } else {
                return None;
            };
            Some((name.to_string(), entry))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn layout(packages_writable: bool, jobs_writable: bool) -> Layout<'static> {
        Layout {
            hostname: "a1b2",
            vm_dir: Path::new("/s/vms/vm-1"),
            system_dir: Path::new("/s/systems/vm-1"),
            host: vec![
                ("usr".into(), HostEntry::Directory),
                ("bin".into(), HostEntry::Link("usr/bin".into())),
            ],
            private: vec![
                ("/etc/ssh/ssh_host_rsa_key".into(), false),
                ("/etc/ssl/private".into(), true),
            ],
            program: Some(Path::new("/opt/fleet-updater")),
            packages_writable,
            jobs_writable,
            ephemeral: Some(Path::new("/s/systems/vm-1/ephemeral")),
            own_network: true,
            user_namespace: false,
            info_fd: 7,
            block_fd: 8,
        }
    }

    #[test]
    fn the_vm_sees_the_host_read_only_and_its_own_directory_at_var_vcap() {
        let args = text(&arguments(&layout(false, false)));
        for expected in [
            "--unshare-pid --unshare-uts --unshare-ipc --unshare-cgroup-try --unshare-net --hostname a1b2",
            "--ro-bind /usr /usr --symlink usr/bin /bin",
            "--bind /s/systems/vm-1/etc/passwd /etc/passwd",
            "--ro-bind /dev/null /etc/ssh/ssh_host_rsa_key --tmpfs /etc/ssl/private --remount-ro /etc/ssl/private",
            "--bind /s/vms/vm-1 /var/vcap --bind /s/systems/vm-1/ephemeral /var/vcap/data --ro-bind /s/vms/vm-1/jobs /var/vcap/jobs --ro-bind /s/vms/vm-1/packages /var/vcap/packages",
            "--tmpfs /var/vcap/.records --remount-ro /var/vcap/.records",
            "--ro-bind /s/systems/vm-1/inbox /var/vcap/bosh/inbox --ro-bind /s/systems/vm-1/settings /var/vcap/bosh/settings --ro-bind /opt/fleet-updater /var/vcap/bosh/bin/fleet-updater",
            "--bind /s/systems/vm-1/tmp /tmp",
            "--info-fd 7 --block-fd 8 -- sleep infinity",
        ] {
            assert!(args.contains(expected), "{expected} in {args}");
        }
        let compiling = text(&arguments(&layout(true, false)));
        assert!(!compiling.contains("/var/vcap/packages"), "{compiling}");
        assert!(compiling.contains("--ro-bind /s/vms/vm-1/jobs /var/vcap/jobs"));
        // A VM that runs its own agent places both itself.
        let own_agent = text(&arguments(&layout(true, true)));
        assert!(!own_agent.contains("/var/vcap/packages"), "{own_agent}");
        assert!(!own_agent.contains("/var/vcap/jobs"), "{own_agent}");
    }

    #[test]
    fn what_only_this_machines_users_may_read_is_found_to_be_hidden() {
        let found = private_paths(&host_entries());
        // On any machine: the shadow file is its owner's.
        if Path::new("/etc/shadow").exists() {
            assert!(
                found.contains(&(PathBuf::from("/etc/shadow"), false)),
                "{found:?}"
            );
        }
        assert!(!found.iter().any(|(p, _)| p.starts_with("/usr")));
        assert!(!found.contains(&(PathBuf::from("/etc/passwd"), false)));
    }

    #[test]
    fn the_var_vcap_binds_come_after_the_directory_they_cover() {
        let args = text(&arguments(&layout(false, false)));
        let vcap = args.find("/s/vms/vm-1 /var/vcap ").unwrap();
        let jobs = args.find("/var/vcap/jobs").unwrap();
        let hidden = args.find("/var/vcap/.records").unwrap();
        assert!(vcap < jobs && vcap < hidden);
    }
}
