//! Starting and ending a VM's networked agent process (`fleet-updater vm-agent VM_DIR`),
//! as the process-backed CPI does for a VM whose creator talks to its agent over HTTPS.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fleet_vm::iaas::AGENT_PIDFILE;
use fleet_vm::signal;

/// How long an agent has to stop its VM's processes and end once told to.
const END_LIMIT: Duration = Duration::from_secs(20);

/// How long an agent may take to listen: it may wait for the registry first.
const START_LIMIT: Duration = Duration::from_secs(90);

/// Why a VM's agent is not listening; what it logged, when it said why.
#[derive(Debug, thiserror::Error)]
pub enum AgentStartError {
    #[error("cannot start the VM's agent: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("cannot start the VM's agent: sh {0}")]
    Shell(std::process::ExitStatus),
    #[error("the VM's agent did not start: {logged}")]
    Failed { logged: String },
    #[error("the VM's agent did not listen within {} s; see {}", limit.as_secs(), log.display())]
    TimedOut { limit: Duration, log: PathBuf },
}

/// Starts it detached, logging to the VM's `sys/log/agent.log` (neither this process's
/// end nor a Ctrl-C at its terminal reaches it), and waits until it listens: its pidfile
/// is written once its port is bound.
///
/// # Errors
/// When it cannot be started, or ends before it listens (its port is taken, its
/// settings cannot be read), with the reason it logged.
pub async fn start(program: &Path, vm_dir: &Path) -> Result<(), AgentStartError> {
    let log = vm_dir.join("sys/log/agent.log");
    // The log is appended to: what an earlier start logged is not this start's reason.
    let mut reader = LogTail {
        offset: tokio::fs::metadata(&log).await.map_or(0, |m| m.len()),
        partial: String::new(),
    };
    let status = tokio::process::Command::new("/bin/sh")
        .args([
            "-c",
            "exec \"$0\" --log-level info vm-agent \"$1\" </dev/null >>\"$2\" 2>&1 &",
        ])
        .arg(program)
        .arg(vm_dir)
        .arg(&log)
        .env(fleet_vm::sandbox::VM_ROOT, vm_dir)
        .stdin(Stdio::null())
        .process_group(0)
        .status()
        .await
        .map_err(AgentStartError::Spawn)?;
    if !status.success() {
        return Err(AgentStartError::Shell(status));
    }
    let started = tokio::time::Instant::now();
    loop {
        if tokio::fs::try_exists(vm_dir.join(AGENT_PIDFILE))
            .await
            .unwrap_or(false)
        {
            return Ok(());
        }
        if let Some(error) = reader.error(&log).await {
            return Err(AgentStartError::Failed { logged: error });
        }
        if started.elapsed() >= START_LIMIT {
            return Err(AgentStartError::TimedOut {
                limit: START_LIMIT,
                log,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The agent's log as it grows: each look reads only what was added since the last.
struct LogTail {
    offset: u64,
    /// The end of the last read after its last newline: a line still being written.
    partial: String,
}

impl LogTail {
    /// The last `error: ` line logged so far, without its prefix.
    async fn error(&mut self, log: &Path) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        let mut file = tokio::fs::File::open(log).await.ok()?;
        file.seek(std::io::SeekFrom::Start(self.offset))
            .await
            .ok()?;
        let mut added = Vec::new();
        file.read_to_end(&mut added).await.ok()?;
        self.offset += added.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&added));
        let complete = self.partial.rfind('\n').map_or(0, |at| at + 1);
        let error = self.partial[..complete]
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .map(str::to_string);
        self.partial.drain(..complete);
        error
    }
}

/// Tells the VM's agent to end (SIGTERM), which stops the VM's processes, and waits for
/// it; one that does not end in time is killed with its process group.
pub async fn end(vm_dir: &Path) {
    let pidfile = vm_dir.join(AGENT_PIDFILE);
    let Some(pid) = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
    else {
        return;
    };
    if !signal::started_in(pid, vm_dir, &pidfile) {
        return;
    }
    signal::process(pid, libc::SIGTERM);
    let started = tokio::time::Instant::now();
    while signal::alive(pid) && started.elapsed() < END_LIMIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if signal::alive(pid) {
        signal::process(pid, libc::SIGKILL);
        // What it supervised may outlive it: its processes are ended by their pidfiles.
        if let Ok(sandbox) = fleet_vm::sandbox::Sandbox::create(vm_dir) {
            fleet_vm::daemon::end_leftovers(&sandbox);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_log_is_read_from_where_the_start_found_it_and_a_line_counts_once_whole() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("agent.log");
        std::fs::write(&log, "error: from an earlier start\n").unwrap();
        let mut tail = LogTail {
            offset: std::fs::metadata(&log).unwrap().len(),
            partial: String::new(),
        };
        assert_eq!(tail.error(&log).await, None, "an earlier start's error");
        let append = |text: &str| {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .append(true)
                .open(&log)
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        };
        append("info: listening soon\nerror: port 8443 is ta");
        assert_eq!(tail.error(&log).await, None, "half a line");
        append("ken\n");
        assert_eq!(
            tail.error(&log).await.as_deref(),
            Some("port 8443 is taken")
        );
        assert_eq!(tail.error(&log).await, None, "nothing new");
    }
}
