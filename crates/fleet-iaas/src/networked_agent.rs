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
        if vm_dir.join(AGENT_PIDFILE).exists() {
            return Ok(());
        }
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(error) = logged.lines().rev().find(|l| l.starts_with("error: ")) {
            return Err(AgentStartError::Failed {
                logged: error[7..].to_string(),
            });
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
