//! VMs as containers: each VM its own mount, PID, UTS, IPC and network namespaces made
//! by bubblewrap (`bwrap`, no daemon), its control groups holding its limits, and its
//! addresses on host bridges. The container's first process is an idle init that lives
//! as long as the VM; everything the VM runs (its supervisor and the processes it
//! starts, lifecycle scripts, packaging scripts, errands) enters its namespaces and
//! groups through [`Enter`], so that whatever it does, it does inside.
//!
//! ```text
//! ROOT/containers/CID.json   a running container: its init's pid, groups, NICs
//! ROOT/systems/CID/          the VM's own etc/ files, tmp/, home/ and root/
//! ```
//!
//! A container's record is written once it runs and removed last when it stops, so a
//! crash at any point leaves a record that the next [`Containers::clean_up`] finishes:
//! its init ended, its groups, veths and bridges removed. A machine restart leaves
//! records whose init is gone (checked by the process's start time, not its number).

pub mod bwrap;
pub mod cgroup;
pub mod enter;
pub mod ephemeral;
pub mod etc_files;
pub mod network;
pub mod ports;
pub mod ssh;
pub mod vitals;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use cgroup::Limits;
pub use enter::Enter;

/// Where the program a VM's supervisor runs as is inside the VM.
pub const VM_PROGRAM: &str = "/var/vcap/bosh/bin/fleet-updater";

/// Where the VM finds what its agent hands it (archives to unpack), read-only: only
/// this machine's side writes there (its system directory's `inbox/`).
pub const INBOX: &str = "/var/vcap/bosh/inbox";

#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("cannot start the VM's container (bwrap): {0}")]
    Spawn(#[source] std::io::Error),
    #[error("the VM's container did not start: {0}")]
    DidNotStart(String),
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
    #[error(transparent)]
    Network(#[from] network::NetworkError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cloud property `{0}` needs root: a serve that is not root makes containers without control groups or disks of their own"
    )]
    NeedsRoot(&'static str),
    #[error("cloud property `{key}` is `{value}`: {expected}")]
    Property {
        key: &'static str,
        value: String,
        expected: &'static str,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ContainerError {
    let what = what.into();
    move |source| ContainerError::Io { what, source }
}

/// A running container, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub cid: String,
    /// The container's init in this machine's numbering, and its start time (clock
    /// ticks after boot) that tells it from a process given the number later.
    pub pid: u32,
    pub started: u64,
    pub groups: cgroup::Groups,
    pub nics: Vec<network::Nic>,
    /// How it was made; a container of a user namespace is entered through it.
    #[serde(default = "root_privilege")]
    pub privilege: Privilege,
    /// The process forwarding its host ports (`ports`), with its start time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarder: Option<(u32, u64)>,
}

fn root_privilege() -> Privilege {
    Privilege::Root
}

/// What a new VM's container is made of.
#[derive(Debug, Clone)]
pub struct ContainerSpec<'a> {
    pub cid: &'a str,
    pub hostname: &'a str,
    pub vm_dir: &'a Path,
    /// The networks as `create_vm` was given them.
    pub networks: &'a serde_json::Value,
    pub limits: Limits,
    pub compilation: bool,
    /// The VM runs its own agent, which places its jobs and packages.
    pub own_agent: bool,
    /// This machine's ports forwarded to the VM's (`ports`).
    pub forwards: Vec<ports::Forward>,
}

/// The start time of process `pid` (field 22 of its `stat`), while it runs.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // After the name: state is field 3, start time field 22.
    fields.nth(18)?.parse().ok()
}

/// How this process makes containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Privilege {
    /// As root: each VM with its own network and control groups.
    Root,
    /// As another user, in a user namespace of the VM's own (where the kernel allows
    /// them): the VM's root is this user, and it shares this machine's network, with no
    /// control groups.
    UserNamespace,
}

fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// How this process can make containers: as root with `bwrap`, `nsenter` and `ip`, or
/// as another user where the kernel gives it user namespaces. Where it cannot, why.
///
/// # Errors
/// Why no container can be made here.
pub fn privilege() -> Result<Privilege, String> {
    for program in ["bwrap", "nsenter", "setpriv"] {
        if !installed(program) {
            return Err(format!("`{program}` is not installed"));
        }
    }
    // SAFETY: geteuid reads the process's credentials and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        if !installed("ip") {
            return Err("`ip` (iproute2) is not installed".into());
        }
        // Root inside a container (a VM of this IaaS, say) may make no namespaces.
        return if probe(&["--unshare-net", "--unshare-pid"]) {
            Ok(Privilege::Root)
        } else {
            Err("this process is root but may not make namespaces (it runs in a container)".into())
        };
    }
    if probe(&["--unshare-user"]) {
        Ok(Privilege::UserNamespace)
    } else {
        Err("this user may not make user namespaces here, and is not root".into())
    }
}

/// Whether bubblewrap makes a container with these namespaces here; asked once per
/// process for each set.
fn probe(unshare: &'static [&'static str]) -> bool {
    static ASKED: std::sync::Mutex<Vec<(&'static [&'static str], bool)>> =
        std::sync::Mutex::new(Vec::new());
    let mut asked = ASKED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, answer)) = asked.iter().find(|(set, _)| *set == unshare) {
        return *answer;
    }
    let answer = std::process::Command::new("bwrap")
        .args(unshare)
        .args(["--ro-bind", "/", "/", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    asked.push((unshare, answer));
    answer
}

/// Whether this machine can run VMs as containers of their own network and control
/// groups (as root). Where it cannot, why.
pub fn unavailable() -> Option<String> {
    match privilege() {
        Ok(Privilege::Root) => None,
        Ok(Privilege::UserNamespace) => {
            Some("containers with a network and limits of their own need root".into())
        }
        Err(why) => Some(why),
    }
}

/// The containers of one IaaS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Containers {
    /// The IaaS's root.
    root: PathBuf,
    /// The program bound into every VM, which its supervisor runs as.
    program: Option<PathBuf>,
    /// How the containers it starts are made: root's, or in user namespaces.
    privilege: Privilege,
}

impl Containers {
    pub fn new(root: &Path, program: Option<&Path>) -> Self {
        // SAFETY: geteuid reads the process's credentials and cannot fail.
        let root_user = unsafe { libc::geteuid() } == 0;
        Containers {
            root: root.to_path_buf(),
            program: program.map(Path::to_path_buf),
            privilege: if root_user {
                Privilege::Root
            } else {
                Privilege::UserNamespace
            },
        }
    }

    fn record_path(&self, cid: &str) -> PathBuf {
        self.root.join("containers").join(format!("{cid}.json"))
    }

    /// The VM's system directory: its own `/etc` files, `/tmp`, `/home`, `/root`.
    pub fn system_dir(&self, cid: &str) -> PathBuf {
        self.root.join("systems").join(cid)
    }

    /// Where the VM `cid`'s ephemeral disk is mounted on this machine, when it has one
    /// of its own (a `disk` cloud property).
    pub fn ephemeral(&self, cid: &str) -> Option<PathBuf> {
        // Made only for a VM with a disk of its own, which is mounted on it at once: no
        // need to read the mount table on every look.
        let at = ephemeral::mount_point(&self.system_dir(cid));
        at.is_dir().then_some(at)
    }

    /// Where this machine's side puts the settings of the VM `cid`'s own agent, which
    /// it sees at [`crate::iaas::OWN_AGENT_SETTINGS`] (its directory bound read-only).
    pub fn own_agent_settings(&self, cid: &str) -> PathBuf {
        self.system_dir(cid).join("settings/agent.json")
    }

    /// Where this machine's side puts what it hands the VM `cid`, which sees it at
    /// [`INBOX`].
    pub fn inbox(&self, cid: &str) -> PathBuf {
        self.system_dir(cid).join("inbox")
    }

    /// Every container's record.
    pub fn records(&self) -> Vec<ContainerRecord> {
        let Ok(entries) = std::fs::read_dir(self.root.join("containers")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
            .collect()
    }

    /// This IaaS's containers to itself until the guard goes (`flock`, so that another
    /// process's CPI waits too).
    fn lock(&self) -> Result<std::fs::File, ContainerError> {
        let dir = self.root.join("containers");
        std::fs::create_dir_all(&dir).map_err(io(dir.display().to_string()))?;
        let path = dir.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(path.display().to_string()))?;
        // SAFETY: flock on a descriptor this function owns; released when it is closed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io(path.display().to_string())(
                std::io::Error::last_os_error(),
            ));
        }
        Ok(file)
    }

    /// The record of `cid`'s container, whether or not it still runs.
    pub fn record(&self, cid: &str) -> Option<ContainerRecord> {
        let bytes = std::fs::read(self.record_path(cid)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The record of `cid`'s container while its init runs.
    pub fn running(&self, cid: &str) -> Option<ContainerRecord> {
        self.record(cid)
            .filter(|r| start_time(r.pid) == Some(r.started))
    }

    /// How a process enters `cid`'s container while it runs.
    pub fn enter(&self, cid: &str, vm_dir: &Path) -> Option<Enter> {
        self.running(cid).map(|r| Enter::new(&r, vm_dir))
    }

    /// Starts the VM's container and waits until its network is up.
    ///
    /// # Errors
    /// When bubblewrap cannot start it, or its groups or network cannot be made; what
    /// was started is ended then, its system directory kept (the users its jobs added,
    /// its ephemeral disk) for a start that succeeds; deleting the VM removes it.
    pub fn start(&self, spec: &ContainerSpec<'_>) -> Result<ContainerRecord, ContainerError> {
        // One start at a time across processes: a dynamic address is handed out once.
        let _lock = self.lock()?;
        let taken: Vec<std::net::Ipv4Addr> = self
            .records()
            .iter()
            .filter(|r| r.cid != spec.cid)
            .flat_map(|r| r.nics.iter().map(|n| n.address))
            .collect();
        let own = self.privilege == Privilege::Root;
        // In a user namespace a VM shares this machine's network: its addresses are the
        // director's bookkeeping only.
        let nics = if own {
            network::plan(&self.root, spec.cid, spec.networks, &taken)?
        } else {
            for (key, set) in [
                ("cpu", spec.limits.cpu.is_some()),
                ("ram", spec.limits.ram_mb.is_some()),
                ("disk", spec.limits.disk_mb.is_some()),
                ("ports", !spec.forwards.is_empty()),
            ] {
                if set {
                    return Err(ContainerError::NeedsRoot(key));
                }
            }
            Vec::new()
        };
        let system = self.system_dir(spec.cid);
        for dir in [
            "etc",
            "tmp",
            "home",
            "root",
            "home/vcap",
            "inbox",
            "settings",
        ] {
            std::fs::create_dir_all(system.join(dir)).map_err(io(format!("VM {}", spec.cid)))?;
        }
        use std::os::unix::fs::PermissionsExt;
        let _ =
            std::fs::set_permissions(system.join("tmp"), std::fs::Permissions::from_mode(0o1777));
        let addresses: Vec<_> = nics.iter().map(|n| n.address).collect();
        let host =
            |name: &str| std::fs::read_to_string(Path::new("/etc").join(name)).unwrap_or_default();
        // Made once: a container started again (after a machine restart) keeps the users
        // its jobs added, as a VM's disk does.
        for (name, text) in etc_files::files(spec.hostname, &addresses, &host) {
            let path = system.join("etc").join(name);
            if !path.exists() {
                // Its owner's alone, as a shadow file is: the VM's root reads them all.
                fleet_file::write(&path, text.as_bytes(), fleet_file::Mode::Private)
                    .map_err(io(path.display().to_string()))?;
                if !name.contains("shadow") {
                    use std::os::unix::fs::PermissionsExt;
                    let public = std::fs::Permissions::from_mode(0o644);
                    std::fs::set_permissions(&path, public)
                        .map_err(io(path.display().to_string()))?;
                }
            }
        }
        // Within the VM's directory: a container started again finds links its VM made.
        let vm_root =
            crate::beneath::Root::open(spec.vm_dir).map_err(io(format!("VM {}", spec.cid)))?;
        for dir in ["jobs", "packages", "bosh/bin", crate::iaas::RECORDS] {
            vm_root
                .create_dir_all(Path::new(dir))
                .map_err(io(format!("VM {}: {dir}", spec.cid)))?;
        }
        // Inside, `/var/vcap` is open to the VM's users (session users sign in through
        // it, `vcap` runs jobs); on this machine, the directories above it keep it to
        // its owner.
        std::fs::set_permissions(spec.vm_dir, std::fs::Permissions::from_mode(0o755))
            .map_err(io(format!("VM {}", spec.cid)))?;
        for parent in [self.root.join("vms"), self.root.join("systems")] {
            let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700));
        }
        let groups = if own {
            cgroup::Groups::make(&format!("fleet-{}", spec.cid), &spec.limits)?
        } else {
            cgroup::Groups::default()
        };
        let disk = match spec.limits.disk_mb {
            Some(mb) => match ephemeral::prepare(&system, mb) {
                Ok(at) => Some(at),
                Err(e) => {
                    groups.remove();
                    return Err(e);
                }
            },
            None => None,
        };
        let started = self.spawn(spec, &system, disk.as_deref(), !nics.is_empty());
        let (pid, started, mut release) = match started {
            Ok(s) => s,
            Err(e) => {
                groups.remove();
                ephemeral::release(&system);
                return Err(e);
            }
        };
        let record = ContainerRecord {
            cid: spec.cid.to_string(),
            pid,
            started,
            groups,
            nics,
            privilege: self.privilege,
            forwarder: None,
        };
        let ready = (|| -> Result<(), ContainerError> {
            self.save(&record)?;
            record.groups.join(pid)?;
            network::connect(pid, &record.nics)?;
            std::io::Write::write_all(&mut release, b"1").map_err(io("releasing the container"))
        })();
        if let Err(e) = ready {
            self.halt(spec.cid);
            return Err(e);
        }
        let mut record = record;
        if !spec.forwards.is_empty() {
            let forwarded = self.forward(spec, &record).and_then(|forwarder| {
                record.forwarder = Some(forwarder);
                self.save(&record)
            });
            if let Err(e) = forwarded {
                self.halt(spec.cid);
                return Err(e);
            }
        }
        Ok(record)
    }

    fn save(&self, record: &ContainerRecord) -> Result<(), ContainerError> {
        let path = self.record_path(&record.cid);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir.display().to_string()))?;
        }
        fleet_file::write(
            &path,
            &serde_json::to_vec_pretty(record).expect("a record serializes"),
            fleet_file::Mode::Private,
        )
        .map_err(io(path.display().to_string()))
    }

    /// Starts bubblewrap, detached from this process (its own session; it outlives
    /// this process as a VM outlives its director), and reads the container's pid. The
    /// container waits on the returned pipe before its init runs.
    fn spawn(
        &self,
        spec: &ContainerSpec<'_>,
        system: &Path,
        ephemeral: Option<&Path>,
        own_network: bool,
    ) -> Result<(u32, u64, std::io::PipeWriter), ContainerError> {
        let (mut info_read, info_write) = std::io::pipe().map_err(ContainerError::Spawn)?;
        let (block_read, block_write) = std::io::pipe().map_err(ContainerError::Spawn)?;
        let host = bwrap::host_entries();
        // Read once: what the machine hides from its users changes with its packages.
        static PRIVATE: std::sync::OnceLock<Vec<(PathBuf, bool)>> = std::sync::OnceLock::new();
        let private = PRIVATE.get_or_init(|| bwrap::private_paths(&host)).clone();
        let layout = bwrap::Layout {
            hostname: spec.hostname,
            vm_dir: spec.vm_dir,
            system_dir: system,
            host,
            private,
            program: self.program.as_deref(),
            packages_writable: spec.compilation || spec.own_agent,
            jobs_writable: spec.own_agent,
            ephemeral,
            user_namespace: self.privilege == Privilege::UserNamespace,
            own_network,
            info_fd: info_write.as_raw_fd(),
            block_fd: block_read.as_raw_fd(),
        };
        let mut log = VmLog::open(spec, "container.log")?;
        let mut command = std::process::Command::new("bwrap");
        command
            .args(bwrap::arguments(&layout))
            .env_clear()
            .env("PATH", crate::lifecycle::SCRIPT_PATH)
            .stdin(std::process::Stdio::null())
            .stdout(log.output()?)
            .stderr(log.output()?);
        let inherit = [info_write.as_raw_fd(), block_read.as_raw_fd()];
        // SAFETY: between fork and exec only async-signal-safe calls: setsid and fcntl.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                libc::setsid();
                for fd in inherit {
                    libc::fcntl(fd, libc::F_SETFD, 0);
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(ContainerError::Spawn)?;
        drop(info_write);
        drop(block_read);
        let mut info = String::new();
        let read = info_read.read_to_string(&mut info);
        let pid = read
            .ok()
            .and_then(|_| serde_json::from_str::<serde_json::Value>(&info).ok())
            .and_then(|v| v.get("child-pid")?.as_u64())
            .and_then(|p| u32::try_from(p).ok());
        let Some(pid) = pid else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ContainerError::DidNotStart(
                log.last_line()
                    .unwrap_or_else(|| "bwrap said nothing".into()),
            ));
        };
        // bubblewrap's own process waits for the container; a thread reaps it so that
        // no zombie is left while this process runs.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        let started = start_time(pid)
            .ok_or_else(|| ContainerError::DidNotStart("its init ended at once".into()))?;
        Ok((pid, started, block_write))
    }

    /// Starts the process that forwards this machine's ports to the VM's address on its
    /// default network, detached as the container is; its pid and start time, once it
    /// listens.
    fn forward(
        &self,
        spec: &ContainerSpec<'_>,
        record: &ContainerRecord,
    ) -> Result<(u32, u64), ContainerError> {
        let program = self.program.as_deref().ok_or_else(|| {
            ContainerError::DidNotStart(
                "forwarding `ports` needs the fleet-updater program, which this process is not"
                    .into(),
            )
        })?;
        let address = record
            .nics
            .iter()
            .find(|n| n.default_route)
            .or(record.nics.first())
            .map(|n| n.address)
            .ok_or_else(|| {
                ContainerError::DidNotStart(
                    "forwarding its ports: the VM has no address of its own".into(),
                )
            })?;
        let mut log = VmLog::open(spec, "ports.log")?;
        let mut command = std::process::Command::new(program);
        command
            .arg("vm-ports")
            .args(spec.forwards.iter().map(|f| ports::argument(f, address)))
            .env_clear()
            .env("PATH", crate::lifecycle::SCRIPT_PATH)
            .stdin(std::process::Stdio::null())
            .stdout(log.output()?)
            .stderr(log.output()?);
        // SAFETY: between fork and exec only setsid, which is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(ContainerError::Spawn)?;
        let pid = child.id();
        // It listens at once, or ends saying why (a port another process has).
        let mut listening = false;
        for _ in 0..50 {
            if let Ok(Some(_)) = child.try_wait() {
                return Err(ContainerError::DidNotStart(format!(
                    "forwarding its ports: {}",
                    log.last_line().unwrap_or_else(|| "it ended".into())
                )));
            }
            listening = spec
                .forwards
                .iter()
                .all(|f| std::net::TcpStream::connect(("127.0.0.1", f.host)).is_ok());
            if listening {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !listening {
            // SAFETY: a signal to the process this function started.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
            let _ = child.wait();
            return Err(ContainerError::DidNotStart(
                "forwarding its ports: it did not listen within a second".into(),
            ));
        }
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        let started = start_time(pid)
            .ok_or_else(|| ContainerError::DidNotStart("forwarding its ports: it ended".into()))?;
        Ok((pid, started))
    }

    /// Ends `cid`'s container (every process in it), removes its groups, NICs, system
    /// directory and record: its VM is deleted. A container already gone is no error.
    pub fn stop(&self, cid: &str) {
        self.halt(cid);
        let _ = std::fs::remove_dir_all(self.system_dir(cid));
    }

    /// Ends `cid`'s container as [`Containers::stop`] does, keeping its system directory
    /// (the users its jobs added, its ephemeral disk) for the container to start again
    /// with, as a VM keeps its disks through a reboot.
    pub fn halt(&self, cid: &str) {
        let Some(record) = self.record(cid) else {
            ephemeral::release(&self.system_dir(cid));
            return;
        };
        if start_time(record.pid) == Some(record.started) {
            // SAFETY: a signal to a process id; no memory is involved.
            unsafe {
                libc::kill(record.pid as i32, libc::SIGKILL);
            }
            for _ in 0..100 {
                if start_time(record.pid) != Some(record.started) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if let Some((pid, started)) = record.forwarder
            && start_time(pid) == Some(started)
        {
            // SAFETY: a signal to a process id; no memory is involved.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
        record.groups.remove();
        network::disconnect(&record.nics);
        ephemeral::release(&self.system_dir(cid));
        let _ = std::fs::remove_file(self.record_path(cid));
    }

    /// Stops every container whose VM is not among `vms`, and removes what a stopped
    /// container left (after a crash or a machine restart) of those that are.
    pub fn clean_up(&self, vms: &[String]) {
        let Ok(entries) = std::fs::read_dir(self.root.join("containers")) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(cid) = name.strip_suffix(".json").filter(|c| !c.starts_with('.')) else {
                continue;
            };
            if !vms.iter().any(|v| v == cid) {
                self.stop(cid);
            } else if self.running(cid).is_none() {
                self.halt(cid);
            }
        }
    }
}

/// A log of this machine's side in a VM's `sys/log` (bubblewrap's, the port
/// forwarder's), opened within the VM's directory as a regular file (a container started
/// again finds what its VM left there, links and pipes included), and what was written
/// to it since it was opened, read back through the same file.
struct VmLog {
    file: std::fs::File,
    from: u64,
    what: String,
}

impl VmLog {
    fn open(spec: &ContainerSpec<'_>, name: &str) -> Result<VmLog, ContainerError> {
        let what = format!("VM {}: sys/log/{name}", spec.cid);
        let mut file = (|| {
            let root = crate::beneath::Root::open(spec.vm_dir)?;
            root.create_dir_all(Path::new("sys/log"))?;
            root.open_file(
                &Path::new("sys/log").join(name),
                libc::O_RDWR | libc::O_APPEND | libc::O_CREAT,
                0o644,
            )
        })()
        .map_err(io(what.clone()))?;
        let from =
            std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0)).map_err(io(what.clone()))?;
        Ok(VmLog { file, from, what })
    }

    /// The file again, for a child's stdout or stderr.
    fn output(&self) -> Result<std::fs::File, ContainerError> {
        self.file.try_clone().map_err(io(self.what.clone()))
    }

    /// The last line written since it was opened.
    fn last_line(&mut self) -> Option<String> {
        use std::io::{Read, Seek};
        let mut said = String::new();
        self.file.seek(std::io::SeekFrom::Start(self.from)).ok()?;
        (&mut self.file)
            .take(1 << 16)
            .read_to_string(&mut said)
            .ok()?;
        said.lines().last().map(str::to_string)
    }
}

/// The limits `vm_type` cloud properties set: `cpu` (cores), `ram` (MB), `disk` (MB).
///
/// # Errors
/// A property that is not a positive number, named.
pub fn limits(cloud_properties: &serde_json::Value) -> Result<Limits, ContainerError> {
    let number =
        |key: &'static str| -> Result<Option<f64>, ContainerError> {
            match cloud_properties.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => v.as_f64().filter(|n| *n > 0.0).map(Some).ok_or_else(|| {
                    ContainerError::Property {
                        key,
                        value: v.to_string(),
                        expected: "a positive number",
                    }
                }),
            }
        };
    Ok(Limits {
        cpu: number("cpu")?,
        ram_mb: number("ram")?.map(|n| n.ceil() as u64),
        disk_mb: number("disk")?.map(|n| n.ceil() as u64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vm_type_cloud_properties_are_the_limits_and_bad_ones_are_named() {
        let l = limits(&json!({"cpu": 0.5, "ram": 64, "disk": 1024, "other": "x"})).unwrap();
        assert_eq!(
            l,
            Limits {
                cpu: Some(0.5),
                ram_mb: Some(64),
                disk_mb: Some(1024)
            }
        );
        assert_eq!(limits(&json!({})).unwrap(), Limits::default());
        assert_eq!(
            limits(&json!({"ram": "lots"})).unwrap_err().to_string(),
            "cloud property `ram` is `\"lots\"`: a positive number"
        );
    }

    #[test]
    fn a_process_start_time_tells_it_from_one_that_took_its_number() {
        let me = std::process::id();
        assert!(start_time(me).is_some());
        assert_eq!(start_time(u32::MAX - 1), None);
    }
}
