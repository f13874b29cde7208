//! Where Ruby renders a job's templates. A template is code (`<%= %>` runs Ruby), so on
//! a director whose VMs are containers it runs in a sandbox of its own made by
//! bubblewrap: no network, no user of this machine (`nobody`, no capabilities), nothing
//! of this machine's files but its programs and libraries (`/usr`), an empty `/tmp`,
//! and only its inputs on stdin; its answer is its stdout. Either way its environment is
//! only `PATH` and `LANG`: nothing of the director's reaches it.

use std::path::Path;

use tokio::process::Command;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Ruby as a process of this machine.
    #[default]
    Host,
    /// Ruby in a sandbox of its own.
    Sandbox,
}

/// The top-level names of this machine's root that hold programs and libraries; each a
/// link (a merged `/usr`) or a directory.
const PROGRAM_NAMES: [&str; 6] = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

impl Isolation {
    /// The command that runs `ruby ARGS`.
    pub fn ruby(self, args: &[&str]) -> Command {
        let mut command = match self {
            Isolation::Host => Command::new("ruby"),
            Isolation::Sandbox => {
                let mut command = Command::new("bwrap");
                command.args([
                    "--unshare-all",
                    "--unshare-user",
                    "--uid",
                    "65534",
                    "--gid",
                    "65534",
                    "--new-session",
                    "--die-with-parent",
                    "--ro-bind",
                    "/usr",
                    "/usr",
                ]);
                for name in PROGRAM_NAMES {
                    let at = Path::new("/").join(name);
                    match std::fs::read_link(&at) {
                        Ok(target) => {
                            command.arg("--symlink").arg(target).arg(&at);
                        }
                        Err(_) if at.is_dir() => {
                            command.arg("--ro-bind").arg(&at).arg(&at);
                        }
                        Err(_) => {}
                    }
                }
                command.args([
                    "--ro-bind-try",
                    "/etc/ld.so.cache",
                    "/etc/ld.so.cache",
                    "--proc",
                    "/proc",
                    "--dev",
                    "/dev",
                    "--tmpfs",
                    "/tmp",
                    "--chdir",
                    "/tmp",
                    "--",
                    "ruby",
                ]);
                command
            }
        };
        // This machine's Ruby is found where this process finds it (`/usr/local/bin`, a
        // version manager's); in the sandbox, where the distribution puts it.
        let path = match self {
            Isolation::Host => std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
            Isolation::Sandbox => "/usr/local/bin:/usr/bin:/bin".into(),
        };
        command
            .args(args)
            .env_clear()
            .env("PATH", path)
            .env("LANG", "C.UTF-8");
        command
    }
}
