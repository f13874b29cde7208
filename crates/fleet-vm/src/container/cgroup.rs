//! A VM's control groups: one per hierarchy it needs (cgroup v1's `memory`, `cpu` and
//! `cpuacct`, or v2's one), made under this process's own, holding the VM's limits
//! (`ram` in MB, `cpu` in cores) and counting what it uses for its vitals. A group is
//! named for its VM; its paths are kept with the container's record, so that whichever
//! process deletes the VM, or cleans up after a crash, removes them.

use std::path::{Path, PathBuf};
use std::time::Duration;

const ROOT: &str = "/sys/fs/cgroup";
/// The period CPU quotas are counted in, in microseconds.
const CPU_PERIOD: u64 = 100_000;

/// What `vm_type` cloud properties ask of a VM.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Cores, fractions allowed.
    pub cpu: Option<f64>,
    pub ram_mb: Option<u64>,
    /// MB of writable space.
    pub disk_mb: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot make the VM's control group {}: {source}", path.display())]
    Make {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set {} to `{value}` (cloud property `{property}`): {source}", path.display())]
    Limit {
        path: PathBuf,
        value: String,
        property: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cloud property `{0}` needs the `{1}` control group, which this machine does not give this process"
    )]
    Unavailable(&'static str, &'static str),
    #[error("cannot move process {pid} into {}: {source}", path.display())]
    Join {
        pid: u32,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where this process's group is in each hierarchy: `(controller, directory)`.
fn own_groups() -> Vec<(&'static str, PathBuf)> {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let unified = Path::new(ROOT).join("cgroup.controllers").exists();
    let mut found = Vec::new();
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if unified && controllers.is_empty() {
            found.push(("unified", Path::new(ROOT).join(path)));
            continue;
        }
        for wanted in ["memory", "cpu", "cpuacct"] {
            if controllers.split(',').any(|c| c == wanted) {
                found.push((wanted, Path::new(ROOT).join(wanted).join(path)));
            }
        }
    }
    found
}

/// The groups of one VM.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Groups {
    /// Each hierarchy's directory, by controller (`memory`, `cpu`, `cpuacct`, `unified`).
    pub dirs: Vec<(String, PathBuf)>,
}

impl Groups {
    fn dir(&self, controller: &str) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _)| c == controller)
            .map(|(_, d)| d.as_path())
    }

    /// Makes the VM's groups, named `name`, with its limits. A hierarchy this process
    /// cannot make groups in is left out, unless a limit needs it.
    ///
    /// # Errors
    /// A limit that cannot be set; what was made is removed then.
    pub fn make(name: &str, limits: &Limits) -> Result<Groups, CgroupError> {
        let mut groups = Groups::default();
        let mut seen = Vec::new();
        for (controller, parent) in own_groups() {
            let dir = parent.join(name);
            let real = std::fs::canonicalize(&parent).unwrap_or(parent.clone());
            if seen.contains(&real) {
                // `cpu` and `cpuacct` mounted together.
                groups.dirs.push((controller.to_string(), dir));
                continue;
            }
            seen.push(real);
            match std::fs::create_dir(&dir) {
                Ok(()) => groups.dirs.push((controller.to_string(), dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    groups.dirs.push((controller.to_string(), dir))
                }
                Err(_) => {}
            }
        }
        if let Err(e) = groups.limit(limits) {
            groups.remove();
            return Err(e);
        }
        Ok(groups)
    }

    fn limit(&self, limits: &Limits) -> Result<(), CgroupError> {
        let write = |path: PathBuf, value: String, property| {
            std::fs::write(&path, &value).map_err(|source| CgroupError::Limit {
                path,
                value,
                property,
                source,
            })
        };
        if let Some(mb) = limits.ram_mb {
            let bytes = mb.saturating_mul(1024 * 1024);
            if let Some(dir) = self.dir("memory") {
                write(dir.join("memory.limit_in_bytes"), bytes.to_string(), "ram")?;
                // Without swap beyond it, where the kernel counts swap.
                let swap = dir.join("memory.memsw.limit_in_bytes");
                if swap.exists() {
                    write(swap, bytes.to_string(), "ram")?;
                }
            } else if let Some(dir) = self.dir("unified") {
                write(dir.join("memory.max"), bytes.to_string(), "ram")?;
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            } else {
                return Err(CgroupError::Unavailable("ram", "memory"));
            }
        }
        if let Some(cores) = limits.cpu {
            let quota = ((cores * CPU_PERIOD as f64).round() as u64).max(1000);
            if let Some(dir) = self.dir("cpu") {
                write(dir.join("cpu.cfs_period_us"), CPU_PERIOD.to_string(), "cpu")?;
                write(dir.join("cpu.cfs_quota_us"), quota.to_string(), "cpu")?;
            } else if let Some(dir) = self.dir("unified") {
                write(dir.join("cpu.max"), format!("{quota} {CPU_PERIOD}"), "cpu")?;
            } else {
                return Err(CgroupError::Unavailable("cpu", "cpu"));
            }
        }
        Ok(())
    }

    /// Moves `pid` (and what it starts from now on) into every group.
    ///
    /// # Errors
    /// When a group does not take it.
    pub fn join(&self, pid: u32) -> Result<(), CgroupError> {
        for (_, dir) in &self.dirs {
            let path = dir.join("cgroup.procs");
            std::fs::write(&path, pid.to_string()).map_err(|source| CgroupError::Join {
                pid,
                path,
                source,
            })?;
        }
        Ok(())
    }

    /// Removes the groups, ending whatever still runs in them; a group already gone is
    /// no error, and one that will not go is left, logged.
    pub fn remove(&self) {
        for (_, dir) in self.dirs.iter().rev() {
            for attempt in 0..50 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) => {
                        let procs =
                            std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                            // SAFETY: a signal to a process id; no memory is involved.
                            unsafe {
                                libc::kill(pid, libc::SIGKILL);
                            }
                        }
                        if attempt == 49 {
                            tracing::warn!(group = %dir.display(), error = %e, "a VM's control group cannot be removed");
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        }
    }

    /// What the VM uses now.
    pub fn usage(&self) -> Usage {
        let read = |dir: Option<&Path>, file: &str| -> Option<String> {
            std::fs::read_to_string(dir?.join(file)).ok()
        };
        let number = |text: Option<String>| text.and_then(|t| t.trim().parse::<u64>().ok());
        let stat = |text: Option<String>, key: &str| {
            text.and_then(|t| {
                t.lines().find_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    (k == key).then(|| v.trim().parse::<u64>().ok()).flatten()
                })
            })
        };
        let mut usage = Usage::default();
        if let Some(dir) = self.dir("memory") {
            let used = number(read(Some(dir), "memory.usage_in_bytes")).unwrap_or(0);
            let inactive = stat(read(Some(dir), "memory.stat"), "total_inactive_file").unwrap_or(0);
            usage.memory_bytes = Some(used.saturating_sub(inactive));
            usage.memory_limit =
                number(read(Some(dir), "memory.limit_in_bytes")).filter(|l| *l < u64::MAX / 2);
        } else if let Some(dir) = self.dir("unified") {
            let used = number(read(Some(dir), "memory.current")).unwrap_or(0);
            let inactive = stat(read(Some(dir), "memory.stat"), "inactive_file").unwrap_or(0);
            usage.memory_bytes = Some(used.saturating_sub(inactive));
            usage.memory_limit = number(read(Some(dir), "memory.max"));
        }
        if let Some(dir) = self.dir("cpuacct") {
            // USER_HZ ticks, a hundredth of a second on Linux.
            let text = read(Some(dir), "cpuacct.stat");
            usage.cpu_user = stat(text.clone(), "user").map(|t| Duration::from_millis(t * 10));
            usage.cpu_system = stat(text, "system").map(|t| Duration::from_millis(t * 10));
        } else if let Some(dir) = self.dir("unified") {
            let text = read(Some(dir), "cpu.stat");
            usage.cpu_user = stat(text.clone(), "user_usec").map(Duration::from_micros);
            usage.cpu_system = stat(text, "system_usec").map(Duration::from_micros);
        }
        usage
    }
}

/// What a VM's groups count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Memory in use, the page cache the kernel can take back not counted.
    pub memory_bytes: Option<u64>,
    pub memory_limit: Option<u64>,
    pub cpu_user: Option<Duration>,
    pub cpu_system: Option<Duration>,
}
