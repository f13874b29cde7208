//! A VM's own supervisor process, as monit is a VM's: it runs a [`Supervisor`] for the
//! jobs placed on the VM, outlives the `fleet-updater` command that started it, and
//! answers the agent over a Unix socket in the VM's directory
//! (`sys/run/supervisor.sock`), one JSON request and answer per connection. It ends when
//! the agent tells it to (the VM is deleted), stopping its processes, or when its VM's
//! directory is gone. Started again after it died (the machine rebooted), it first ends
//! whatever its processes' pidfiles still name, then starts them afresh.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::jobs;
use super::sandbox::Sandbox;
use super::signal;
pub use super::supervisor::SupervisorError;
use super::supervisor::{ProcessStatus, Processes, Supervisor, Timings};

pub const SOCKET: &str = "sys/run/supervisor.sock";
pub const PIDFILE: &str = "sys/run/supervisor.pid";
const LOCKFILE: &str = "sys/run/supervisor.lock";

/// How often an idle supervisor looks whether its VM still exists.
const VM_CHECK: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    /// Supervise these placed jobs from now on; what ran before is stopped.
    Load {
        jobs: Vec<String>,
    },
    /// After the supervisor process (re)started: load and start the jobs unless it
    /// supervises them already.
    Boot {
        jobs: Vec<String>,
    },
    Start,
    Unmonitor,
    Stop,
    Status,
    /// Stop every process and end.
    Exit,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Answer {
    error: Option<String>,
    statuses: Vec<ProcessStatus>,
}

/// The supervisor process: serves requests until told to end or its VM is gone.
///
/// # Errors
/// When its socket cannot be bound.
pub async fn serve(root: &Path, timings: Timings) -> std::io::Result<()> {
    let sandbox = Sandbox::create(root)?;
    // One supervisor per VM: a second (started while the first's socket was gone) ends
    // at once rather than fight it over the processes.
    let _only = only_supervisor(root)?;
    end_leftovers(&sandbox);
    let socket = root.join(SOCKET);
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)?;
    std::fs::write(root.join(PIDFILE), std::process::id().to_string())?;
    let mut supervisor: Option<Supervisor> = None;
    // A VM that is a directory is gone with its record; a container's supervisor sees
    // no record, and ends with its container.
    let record = root.join(crate::iaas::VM_RECORD);
    let watch_record = record.exists();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            _ = tokio::time::sleep(VM_CHECK) => {
                if watch_record && !record.exists() {
                    if let Some(s) = supervisor.take() {
                        s.stop().await;
                    }
                    return Ok(());
                }
                continue;
            }
        };
        let (read, mut write) = stream.into_split();
        let mut line = String::new();
        if BufReader::new(read).read_line(&mut line).await.is_err() {
            continue;
        }
        let (answer, exit) = match serde_json::from_str::<Request>(&line) {
            Ok(request) => handle(request, &sandbox, timings, &mut supervisor).await,
            Err(e) => (
                Answer {
                    error: Some(format!("unreadable request: {e}")),
                    ..Answer::default()
                },
                false,
            ),
        };
        let mut text = serde_json::to_string(&answer).unwrap_or_default();
        text.push('\n');
        let _ = write.write_all(text.as_bytes()).await;
        let _ = write.shutdown().await;
        if exit {
            let _ = std::fs::remove_file(&socket);
            let _ = std::fs::remove_file(root.join(PIDFILE));
            return Ok(());
        }
    }
}

async fn handle(
    request: Request,
    sandbox: &Sandbox,
    timings: Timings,
    supervisor: &mut Option<Supervisor>,
) -> (Answer, bool) {
    let mut answer = Answer::default();
    let load = |jobs: &[String]| {
        jobs::processes(sandbox, jobs)
            .map(|processes| Supervisor::new(sandbox.clone(), processes, timings))
            .map_err(|e| e.to_string())
    };
    match request {
        Request::Load { jobs } => {
            if let Some(old) = supervisor.take() {
                old.stop().await;
            }
            match load(&jobs) {
                Ok(s) => *supervisor = Some(s),
                Err(e) => answer.error = Some(e),
            }
        }
        Request::Boot { jobs } => {
            if supervisor.is_none() {
                match load(&jobs) {
                    Ok(s) => {
                        s.start().await;
                        *supervisor = Some(s);
                    }
                    Err(e) => answer.error = Some(e),
                }
            }
        }
        Request::Start => match supervisor.as_ref() {
            Some(s) => s.start().await,
            None => answer.error = Some("no jobs are loaded".into()),
        },
        Request::Unmonitor => {
            if let Some(s) = supervisor.as_ref() {
                s.unmonitor().await;
            }
        }
        Request::Stop => {
            if let Some(s) = supervisor.as_ref() {
                s.stop().await;
            }
        }
        Request::Status => {}
        Request::Exit => {
            if let Some(s) = supervisor.take() {
                s.stop().await;
            }
            return (answer, true);
        }
    }
    if let Some(s) = supervisor.as_ref() {
        answer.statuses = s.statuses();
    }
    if let Some(e) = &answer.error {
        answer.statuses.clear();
        tracing::warn!(error = %e, "supervisor request failed");
    }
    (answer, false)
}

/// The lock that makes a VM's supervisor its only one, held while it runs.
fn only_supervisor(root: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.join(LOCKFILE))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(std::io::Error::other("another supervisor runs for this VM"));
    }
    Ok(file)
}

/// Ends what a VM's processes left when the process supervising them went away: every
/// pid in its pidfiles that was started in the VM, with its process group. A pid that
/// another process has taken since (the machine restarted) is left alone
/// ([`signal::started_in`]).
pub fn end_leftovers(sandbox: &Sandbox) {
    let mut pending = vec![sandbox.run_dir()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "pid")
                && !path.ends_with(PIDFILE)
                && let Some(pid) = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| t.trim().parse::<u32>().ok())
                && signal::started_in(pid, sandbox.root(), &path)
            {
                signal::group(pid, libc::SIGKILL);
                signal::process(pid, libc::SIGKILL);
            }
        }
    }
}

/// The agent's handle on a VM's supervisor process; it starts the process when it is
/// not running.
#[derive(Debug, Clone)]
pub struct Daemon {
    root: PathBuf,
    program: PathBuf,
    /// The VM, when it is a container the supervisor runs in.
    vm: Option<Sandbox>,
}

impl Daemon {
    /// `program` is run as `program vm-supervisor ROOT`.
    pub fn new(root: &Path, program: &Path) -> Self {
        Daemon {
            root: root.to_path_buf(),
            program: program.to_path_buf(),
            vm: None,
        }
    }

    /// The supervisor of `vm`, run inside it when it is a container (as the program
    /// bound into it, [`crate::container::VM_PROGRAM`]).
    pub fn of(vm: &Sandbox, program: &Path) -> Self {
        Daemon {
            root: vm.root().to_path_buf(),
            program: program.to_path_buf(),
            vm: Some(vm.clone()),
        }
    }

    /// A connection to the supervisor's socket. A container VM's is found within the VM's
    /// directory (its jobs may have put a link where the socket was) and reached through
    /// the descriptor that found it.
    async fn connect(&self) -> std::io::Result<UnixStream> {
        let socket = self.root.join(SOCKET);
        if self.vm.as_ref().is_none_or(|vm| vm.inbox().is_none()) {
            return UnixStream::connect(&socket).await;
        }
        let found = crate::beneath::Root::open(&self.root)?.open_at(
            Path::new(SOCKET),
            libc::O_PATH | libc::O_NOFOLLOW,
            0,
        )?;
        let connected = UnixStream::connect(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&found)
        ))
        .await;
        drop(found);
        connected
    }

    /// Whether the supervisor process answers.
    pub async fn running(&self) -> bool {
        self.connect().await.is_ok()
    }

    /// Starts the supervisor process, detached: it is not this process's child, and it
    /// has a process group of its own, so neither this process's end nor a Ctrl-C at its
    /// terminal reaches it.
    async fn spawn(&self) -> Result<(), SupervisorError> {
        let log = self.root.join("sys/log/supervisor.log");
        let background = "exec \"$0\" vm-supervisor \"$1\" </dev/null >>\"$2\" 2>&1 &";
        let enter = match &self.vm {
            Some(vm) => vm.enter().map_err(SupervisorError::Spawn)?,
            None => None,
        };
        let mut command = match enter {
            Some(enter) => {
                let vcap = Path::new(crate::sandbox::VCAP);
                enter.command(
                    Path::new("/bin/sh"),
                    &[
                        Path::new("-c"),
                        Path::new(background),
                        Path::new(crate::container::VM_PROGRAM),
                        vcap,
                        &vcap.join("sys/log/supervisor.log"),
                    ],
                    None,
                    &[],
                )
            }
            None => {
                let mut command = tokio::process::Command::new("/bin/sh");
                command
                    .args(["-c", background])
                    .arg(&self.program)
                    .arg(&self.root)
                    .arg(&log);
                command
            }
        };
        let status = command
            .stdin(Stdio::null())
            .process_group(0)
            .status()
            .await
            .map_err(SupervisorError::Spawn)?;
        if status.success() {
            Ok(())
        } else {
            Err(SupervisorError::Shell(status))
        }
    }

    async fn request(&self, request: &Request, spawn: bool) -> Result<Answer, SupervisorError> {
        let mut stream = match self.connect().await {
            Ok(stream) => stream,
            Err(_) if spawn => {
                self.spawn().await?;
                let mut waited = Duration::ZERO;
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    waited += Duration::from_millis(20);
                    match self.connect().await {
                        Ok(stream) => break stream,
                        Err(source) if waited >= Duration::from_secs(10) => {
                            return Err(SupervisorError::DidNotStart {
                                log: self.root.join("sys/log/supervisor.log"),
                                source,
                            });
                        }
                        Err(_) => {}
                    }
                }
            }
            Err(e) => return Err(SupervisorError::NotRunning(e)),
        };
        let mut text = serde_json::to_string(request).map_err(SupervisorError::Encode)?;
        text.push('\n');
        stream
            .write_all(text.as_bytes())
            .await
            .map_err(SupervisorError::Unreachable)?;
        let mut line = String::new();
        BufReader::new(stream)
            .read_line(&mut line)
            .await
            .map_err(SupervisorError::NoAnswer)?;
        let answer: Answer =
            serde_json::from_str(&line).map_err(|source| SupervisorError::Unreadable {
                answer: line.trim().to_string(),
                source,
            })?;
        match answer.error {
            Some(e) => Err(SupervisorError::Refused(e)),
            None => Ok(answer),
        }
    }

    /// Supervise the jobs now placed; what ran before is stopped.
    ///
    /// # Errors
    /// When the supervisor cannot be started or reached, or the jobs' files are wrong.
    pub async fn load(&self, jobs: &[String]) -> Result<(), SupervisorError> {
        let jobs = jobs.to_vec();
        self.request(&Request::Load { jobs }, true)
            .await
            .map(|_| ())
    }

    /// Brings the jobs back after the supervisor process died, as a reboot would: no
    /// effect while it runs and supervises them.
    ///
    /// # Errors
    /// As [`Daemon::load`].
    pub async fn boot(&self, jobs: &[String]) -> Result<(), SupervisorError> {
        let jobs = jobs.to_vec();
        self.request(&Request::Boot { jobs }, true)
            .await
            .map(|_| ())
    }

    /// Stops every process and ends the supervisor, when it runs.
    pub async fn exit(&self) {
        let _ = self.request(&Request::Exit, false).await;
    }
}

#[async_trait::async_trait]
impl Processes for Daemon {
    async fn start(&self) -> Result<(), SupervisorError> {
        self.request(&Request::Start, true).await.map(|_| ())
    }

    async fn unmonitor(&self) -> Result<(), SupervisorError> {
        self.request(&Request::Unmonitor, true).await.map(|_| ())
    }

    async fn stop(&self) -> Result<(), SupervisorError> {
        self.request(&Request::Stop, true).await.map(|_| ())
    }

    async fn statuses(&self) -> Result<Vec<ProcessStatus>, SupervisorError> {
        // A supervisor that is not running supervises nothing: asking starts none.
        match self.request(&Request::Status, false).await {
            Ok(answer) => Ok(answer.statuses),
            Err(_) if !self.running().await => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod lock_tests {
    use super::*;

    #[test]
    fn a_second_supervisor_of_a_vm_is_refused_while_the_first_runs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/run")).unwrap();
        let first = only_supervisor(dir.path()).unwrap();
        let second = only_supervisor(dir.path()).unwrap_err();
        assert!(
            second.to_string().contains("another supervisor"),
            "{second}"
        );
        drop(first);
        assert!(
            only_supervisor(dir.path()).is_ok(),
            "free once the first ended"
        );
    }
}
