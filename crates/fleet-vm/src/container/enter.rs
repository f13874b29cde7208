//! Running a program inside a VM's container: `nsenter` into the namespaces of the
//! container's init (its root, mounts, PID numbering, hostname, IPC and network), after
//! this process's child has joined the VM's control groups, so that what it starts is
//! counted against the VM's limits. Paths of the VM's directory as this machine sees
//! them are given as the VM sees them (`/var/vcap/...`); the environment is the VM's
//! own, not this process's.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::ContainerRecord;
use crate::sandbox::VCAP;

/// What root in a VM may do: a container runtime's usual set (files' owners and modes,
/// users, signals, low ports, raw sockets), and nothing that reaches beyond the VM
/// (no mounts, no modules, no raw I/O, no tracing of others): without
/// `CAP_SYS_ADMIN` nothing inside can undo the container's mounts.
const BOUNDING_SET: &str = "--bounding-set=-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,+net_bind_service,+net_raw,+sys_chroot,+mknod,+audit_write,+setfcap";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enter {
    pid: u32,
    /// A container of a user namespace is entered through it first.
    user_namespace: bool,
    /// Each control group's `cgroup.procs`.
    procs: Vec<PathBuf>,
    /// The VM's directory on this machine, `/var/vcap` inside.
    vm_dir: PathBuf,
}

impl Enter {
    pub fn new(record: &ContainerRecord, vm_dir: &Path) -> Self {
        Enter {
            pid: record.pid,
            user_namespace: record.privilege == super::Privilege::UserNamespace,
            procs: record
                .groups
                .dirs
                .iter()
                .map(|(_, d)| d.join("cgroup.procs"))
                .collect(),
            vm_dir: vm_dir.to_path_buf(),
        }
    }

    /// The VM's directory on this machine.
    pub fn vm_dir(&self) -> &Path {
        &self.vm_dir
    }

    /// `path` as the VM sees it: under `/var/vcap` for what is in the VM's directory,
    /// as it is otherwise.
    pub fn inside(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(&self.vm_dir) {
            Ok(rest) if rest.as_os_str().is_empty() => PathBuf::from(VCAP),
            Ok(rest) => Path::new(VCAP).join(rest),
            Err(_) => path.to_path_buf(),
        }
    }

    /// A value of the environment as the VM sees it: a path in the VM's directory
    /// translated, anything else as it is.
    pub fn inside_value(&self, value: &str) -> String {
        let prefix = self.vm_dir.to_string_lossy();
        match value.strip_prefix(prefix.as_ref()) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("{VCAP}{rest}"),
            _ => value.to_string(),
        }
    }

    /// The command that runs `program` with `args` in the container, in `cwd` (paths as
    /// this machine sees them), with only `env` and `PATH` in its environment. It keeps
    /// nsenter's exit: the program's code, or its signal.
    pub fn command(
        &self,
        program: &Path,
        args: &[impl AsRef<OsStr>],
        cwd: Option<&Path>,
        env: &[(String, String)],
    ) -> tokio::process::Command {
        let cwd = cwd.map_or_else(|| PathBuf::from(VCAP), |c| self.inside(c));
        let mut command = tokio::process::Command::new("nsenter");
        command.arg(format!("--target={}", self.pid));
        // A container of a user namespace shares this machine's network, which only
        // root may enter: it is this process's already.
        if self.user_namespace {
            // This user is the namespace's root already: its ids stay as they are (the
            // namespace allows no change of groups).
            command.args(["--user", "--preserve-credentials"]);
            command.args(["--mount", "--uts", "--ipc", "--pid", "--root", "--wd"]);
        } else {
            command.args([
                "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd",
            ]);
        }
        command
            .args(["--", "setpriv", BOUNDING_SET, "--inh-caps=-all", "--"])
            .args(["/bin/sh", "-c", "umask 022; cd \"$0\" && exec \"$@\""])
            .arg(&cwd)
            .arg(self.inside(program))
            .args(args.iter().map(|a| {
                let a = a.as_ref();
                match a.to_str() {
                    Some(text) => OsString::from(self.inside_value(text)),
                    None => a.to_os_string(),
                }
            }))
            .env_clear()
            .env("PATH", crate::lifecycle::SCRIPT_PATH)
            .env("HOME", "/root")
            .env(crate::sandbox::VM_ROOT, VCAP);
        for (key, value) in env {
            command.env(key, self.inside_value(value));
        }
        let procs: Vec<CString> = self
            .procs
            .iter()
            .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
            .collect();
        // SAFETY: between fork and exec only async-signal-safe calls (getpid, open, write,
        // close) on memory made before the fork.
        unsafe {
            command.pre_exec(move || {
                join_groups(&procs);
                Ok(())
            });
        }
        command
    }
}

impl Enter {
    /// Runs `script` under `/bin/sh` in the VM, its arguments `args`, to its end; what it
    /// printed, or how it ended and what it said on stderr.
    ///
    /// # Errors
    /// When it cannot be started or does not exit 0.
    pub async fn sh(&self, script: &str, args: &[&str]) -> Result<Vec<u8>, String> {
        let mut all = vec!["-c", script, "sh"];
        all.extend_from_slice(args);
        let output = self
            .command(Path::new("/bin/sh"), &all, None, &[])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(output.stdout)
        } else {
            Err(format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }
}

/// Writes this process's id into each `cgroup.procs`: async-signal-safe, no allocation.
fn join_groups(procs: &[CString]) {
    // SAFETY: getpid cannot fail.
    let mut pid = unsafe { libc::getpid() } as u32;
    let mut digits = [0u8; 12];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (pid % 10) as u8;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    for path in procs {
        // SAFETY: a path made before the fork, and a buffer on this stack.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, digits[at..].as_ptr().cast(), digits.len() - at);
                libc::close(fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enter() -> Enter {
        Enter {
            pid: 42,
            user_namespace: false,
            procs: vec![],
            vm_dir: PathBuf::from("/s/vms/vm-1"),
        }
    }

    #[test]
    fn paths_of_the_vm_are_given_as_the_vm_sees_them() {
        let e = enter();
        assert_eq!(e.inside(Path::new("/s/vms/vm-1")), Path::new("/var/vcap"));
        assert_eq!(
            e.inside(Path::new("/s/vms/vm-1/jobs/kv/bin/pre-start")),
            Path::new("/var/vcap/jobs/kv/bin/pre-start")
        );
        assert_eq!(e.inside(Path::new("/bin/bash")), Path::new("/bin/bash"));
        assert_eq!(
            e.inside_value("/s/vms/vm-1/data/compile/kv"),
            "/var/vcap/data/compile/kv"
        );
        assert_eq!(e.inside_value("/s/vms/vm-10"), "/s/vms/vm-10");
        assert_eq!(e.inside_value("kv"), "kv");
    }

    #[test]
    fn the_command_enters_every_namespace_of_the_init_and_changes_directory_inside() {
        let command = enter().command(
            Path::new("/s/vms/vm-1/jobs/kv/bin/drain"),
            &["job_changed"],
            Some(Path::new("/s/vms/vm-1")),
            &[("BOSH_JOB_STATE".into(), "{}".into())],
        );
        let args: Vec<String> = command
            .as_std()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(command.as_std().get_program(), "nsenter");
        assert_eq!(
            args,
            [
                "--target=42",
                "--mount",
                "--uts",
                "--ipc",
                "--net",
                "--pid",
                "--root",
                "--wd",
                "--",
                "setpriv",
                BOUNDING_SET,
                "--inh-caps=-all",
                "--",
                "/bin/sh",
                "-c",
                "umask 022; cd \"$0\" && exec \"$@\"",
                "/var/vcap",
                "/var/vcap/jobs/kv/bin/drain",
                "job_changed",
            ]
        );
    }
}
