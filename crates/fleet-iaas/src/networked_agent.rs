//! Starting and ending a VM's networked agent process (`fleet-updater vm-agent VM_DIR`),
//! as the process-backed CPI does for a VM whose creator talks to its agent over HTTPS:
//! on this machine for a VM that is a directory, inside the VM for one that is a
//! container.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fleet_vm::beneath::Root;
use fleet_vm::iaas::{AGENT_PIDFILE, OWN_AGENT_SETTINGS};
use fleet_vm::sandbox::Sandbox;
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
    #[error("cannot start the VM's agent: its container does not run")]
    NotRunning,
    #[error("cannot start the VM's agent inside it: the VM is no container")]
    NotAContainer,
    #[error("cannot start the VM's agent: sh {0}")]
    Shell(std::process::ExitStatus),
    #[error("the VM's agent did not start: {logged}")]
    Failed { logged: String },
    #[error("the VM's agent did not listen within {} s; see {}", limit.as_secs(), log.display())]
    TimedOut { limit: Duration, log: PathBuf },
}

/// Where the agent logs, in its VM's directory.
const LOG: &str = "sys/log/agent.log";

/// Starts it detached, logging to the VM's `sys/log/agent.log` (neither this process's
/// end nor a Ctrl-C at its terminal reaches it), and waits until it listens: its pidfile
/// is written once its port is bound.
///
/// # Errors
/// When it cannot be started, or ends before it listens (its port is taken, its
/// settings cannot be read), with the reason it logged.
pub async fn start(program: &Path, vm_dir: &Path) -> Result<(), AgentStartError> {
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .args([
            "-c",
            "exec \"$0\" --log-level info vm-agent \"$1\" </dev/null >>\"$2\" 2>&1 &",
        ])
        .arg(program)
        .arg(vm_dir)
        .arg(vm_dir.join(LOG))
        .env(fleet_vm::sandbox::VM_ROOT, vm_dir);
    launch(command, vm_dir).await
}

/// Starts the agent of a VM that is a container inside it, as the program bound into
/// it, with the settings its IaaS handed it ([`OWN_AGENT_SETTINGS`]): it listens at the
/// VM's own address. Waited for as [`start`] waits.
///
/// # Errors
/// As [`start`]; a VM that is no container, or whose container does not run.
pub async fn start_inside(vm: &Sandbox) -> Result<(), AgentStartError> {
    let enter = vm
        .enter()
        .map_err(|_| AgentStartError::NotRunning)?
        .ok_or(AgentStartError::NotAContainer)?;
    let vcap = Path::new(fleet_vm::sandbox::VCAP);
    let command = enter.command(
        Path::new("/bin/sh"),
        &[
            Path::new("-c"),
            Path::new(
                "exec \"$0\" --log-level info vm-agent --settings \"$1\" \"$2\" </dev/null >>\"$3\" 2>&1 &",
            ),
            Path::new(fleet_vm::container::VM_PROGRAM),
            Path::new(OWN_AGENT_SETTINGS),
            vcap,
            &vcap.join(LOG),
        ],
        None,
        &[],
    );
    launch(command, vm.root()).await
}

/// Runs the shell that puts the agent in the background, then waits until it listens.
/// The VM's directory is looked into within it: a VM that is a container writes there.
async fn launch(
    mut command: tokio::process::Command,
    vm_dir: &Path,
) -> Result<(), AgentStartError> {
    let root = Root::open(vm_dir).map_err(AgentStartError::Spawn)?;
    // A pidfile an agent killed with its VM left is not this start's.
    root.remove_file(Path::new(AGENT_PIDFILE))
        .map_err(AgentStartError::Spawn)?;
    // The log is appended to: what an earlier start logged is not this start's reason.
    let mut reader = LogTail {
        offset: root
            .open_file(Path::new(LOG), libc::O_RDONLY, 0)
            .and_then(|f| f.metadata())
            .map_or(0, |m| m.len()),
        partial: String::new(),
    };
    let status = command
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
        if root.exists(Path::new(AGENT_PIDFILE)) {
            return Ok(());
        }
        if let Some(error) = reader.error(&root) {
            return Err(AgentStartError::Failed { logged: error });
        }
        if started.elapsed() >= START_LIMIT {
            return Err(AgentStartError::TimedOut {
                limit: START_LIMIT,
                log: vm_dir.join(LOG),
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
    fn error(&mut self, root: &Root) -> Option<String> {
        use std::io::{Read, Seek};
        let mut file = root.open_file(Path::new(LOG), libc::O_RDONLY, 0).ok()?;
        file.seek(std::io::SeekFrom::Start(self.offset)).ok()?;
        let mut added = Vec::new();
        // A log is small between two looks; one that grew beyond reason is read in part.
        file.take(1 << 20).read_to_end(&mut added).ok()?;
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

    #[test]
    fn the_log_is_read_from_where_the_start_found_it_and_a_line_counts_once_whole() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/log")).unwrap();
        let root = Root::open(dir.path()).unwrap();
        let log = dir.path().join(LOG);
        std::fs::write(&log, "error: from an earlier start\n").unwrap();
        let mut tail = LogTail {
            offset: std::fs::metadata(&log).unwrap().len(),
            partial: String::new(),
        };
        assert_eq!(tail.error(&root), None, "an earlier start's error");
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
        assert_eq!(tail.error(&root), None, "half a line");
        append("ken\n");
        assert_eq!(tail.error(&root).as_deref(), Some("port 8443 is taken"));
        assert_eq!(tail.error(&root), None, "nothing new");
    }
}
