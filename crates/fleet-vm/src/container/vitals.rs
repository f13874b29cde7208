//! A container VM's vitals as BOSH's agent reports them: its CPU use since the last
//! reading (user and system, percent of one machine), its memory (KiB and percent of its
//! limit, or of the machine without one), the machine's load, its uptime, and the use of
//! the disks it sees (`system` for `/`, `ephemeral` for its directory, `persistent` for
//! a mounted disk).

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::cgroup::Usage;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Vitals {
    pub load: [f64; 3],
    pub cpu_user: f64,
    pub cpu_sys: f64,
    pub mem_kb: u64,
    pub mem_percent: f64,
    pub uptime_secs: u64,
    /// `(disk, percent, inode percent)`.
    pub disks: Vec<(String, u64, u64)>,
}

/// A reading of a VM's CPU time, to tell its use since then.
#[derive(Debug, Clone, Copy)]
pub struct CpuReading {
    at: Instant,
    user: Duration,
    system: Duration,
}

/// The share of `used` over `elapsed` across the machine's cores, in percent.
fn percent(used: Duration, elapsed: Duration, cores: usize) -> f64 {
    if elapsed.is_zero() {
        return 0.0;
    }
    100.0 * used.as_secs_f64() / (elapsed.as_secs_f64() * cores.max(1) as f64)
}

pub use fleet_file::disk_use;

fn machine_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn load() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut figures = text.split_whitespace().map(|f| f.parse().unwrap_or(0.0));
    [
        figures.next().unwrap_or(0.0),
        figures.next().unwrap_or(0.0),
        figures.next().unwrap_or(0.0),
    ]
}

/// The vitals from `usage`, CPU use counted since `last` (since the VM started
/// without one); the reading to count from next time.
pub fn vitals(
    usage: &Usage,
    last: Option<CpuReading>,
    uptime: Duration,
    disks: &[(&str, &Path)],
) -> (Vitals, CpuReading) {
    let now = Instant::now();
    let (user, system) = (
        usage.cpu_user.unwrap_or_default(),
        usage.cpu_system.unwrap_or_default(),
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (since_user, since_system, elapsed) = match last {
        Some(l) => (
            user.saturating_sub(l.user),
            system.saturating_sub(l.system),
            now.duration_since(l.at),
        ),
        None => (user, system, uptime),
    };
    let memory = usage.memory_bytes.unwrap_or(0);
    let of = usage
        .memory_limit
        .filter(|l| *l > 0)
        .unwrap_or_else(machine_memory_bytes)
        .max(1);
    let vitals = Vitals {
        load: load(),
        cpu_user: percent(since_user, elapsed, cores),
        cpu_sys: percent(since_system, elapsed, cores),
        mem_kb: memory / 1024,
        mem_percent: 100.0 * memory as f64 / of as f64,
        uptime_secs: uptime.as_secs(),
        disks: disks
            .iter()
            .filter_map(|(name, path)| {
                let (blocks, inodes) = disk_use(path)?;
                Some((name.to_string(), blocks, inodes))
            })
            .collect(),
    };
    (
        vitals,
        CpuReading {
            at: now,
            user,
            system,
        },
    )
}

/// How long the process `pid` has run, from its start time.
pub fn uptime_of(started_ticks: u64) -> Duration {
    let boot = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64((boot - started_ticks as f64 / hz).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_use_is_counted_since_the_last_reading_across_the_cores() {
        assert_eq!(
            percent(Duration::from_millis(500), Duration::from_secs(1), 2),
            25.0
        );
        assert_eq!(percent(Duration::from_secs(1), Duration::ZERO, 2), 0.0);
        let usage = Usage {
            memory_bytes: Some(64 * 1024 * 1024),
            memory_limit: Some(128 * 1024 * 1024),
            cpu_user: Some(Duration::from_secs(1)),
            cpu_system: None,
        };
        let (v, reading) = vitals(
            &usage,
            None,
            Duration::from_secs(10),
            &[("system", Path::new("/"))],
        );
        assert_eq!(v.mem_kb, 65536);
        assert_eq!(v.mem_percent, 50.0);
        assert!(v.cpu_user > 0.0);
        assert_eq!(v.disks[0].0, "system");
        assert!(v.disks[0].1 <= 100);
        let (again, _) = vitals(&usage, Some(reading), Duration::from_secs(11), &[]);
        assert_eq!(again.cpu_user, 0.0, "nothing used since the last reading");
    }
}
