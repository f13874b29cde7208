//! One VM's process supervision, as monit and bpm do it: each process is started, and
//! while it is monitored, checked every cycle and started again when it is gone, waiting
//! longer after each failure in a row. A monit process is started and stopped by its
//! programs and found by its pidfile; a bpm process is this supervisor's own child, and
//! is stopped with bpm's escalation (its shutdown signal, 15 s, SIGQUIT, 2 s, SIGKILL).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::time::Instant;

use super::bpm::{BpmProcess, ShutdownSignal};
use super::sandbox::{Sandbox, VM_ROOT};
use super::script::{self, Script};
use super::signal;

/// How supervision paces itself; BOSH's figures by default, shorter in tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// How often a monitored process is checked (monit's cycle).
    pub check_every: Duration,
    /// The wait before the first restart after a failure; each failure in a row doubles
    /// it, up to `restart_max`.
    pub restart_first: Duration,
    pub restart_max: Duration,
    /// bpm: how long a process has after its shutdown signal, then after SIGQUIT.
    pub bpm_term: Duration,
    pub bpm_quit: Duration,
    /// bpm's pre-start hook limit.
    pub bpm_pre_start: Duration,
    /// The longest a stop program runs, whatever its own timeout: how long BOSH waits
    /// for services to stop.
    pub monit_stop: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            check_every: Duration::from_secs(1),
            restart_first: Duration::from_secs(1),
            restart_max: Duration::from_secs(30),
            bpm_term: Duration::from_secs(15),
            bpm_quit: Duration::from_secs(2),
            bpm_pre_start: Duration::from_secs(30),
            monit_stop: Duration::from_secs(5 * 60),
        }
    }
}

/// How a process is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Monit {
        start: String,
        /// How long the process has to appear after its start program is started.
        start_timeout: Duration,
        stop: Option<String>,
        stop_timeout: Duration,
        pidfile: PathBuf,
    },
    Bpm(BpmProcess),
}

/// A process of a job, with its paths already pointing into the VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessDef {
    pub job: String,
    pub name: String,
    pub kind: Kind,
    /// monit's `depends on`: processes started before this one and stopped after it.
    pub depends_on: Vec<String>,
}

/// A process as the agent reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessState {
    Running,
    /// Started, and not yet found alive by a check.
    Starting,
    /// Not running while it should: starting again after a failure.
    Failing,
    /// Not monitored: never started, or stopped.
    Unknown,
}

impl ProcessState {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessState::Running => "running",
            ProcessState::Starting => "starting",
            ProcessState::Failing => "failing",
            ProcessState::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessStatus {
    pub job: String,
    pub name: String,
    pub state: ProcessState,
    pub pid: Option<u32>,
    pub restarts: u32,
    pub uptime: Option<Duration>,
}

/// What a process has now.
struct Current {
    state: ProcessState,
    pid: Option<u32>,
    /// The process group to take down when it stops.
    group: Option<u32>,
    since: Option<Instant>,
    restarts: u32,
    /// Set when a start attempt failed: why, for logs and errors.
    last_error: Option<String>,
}

struct Supervised {
    def: ProcessDef,
    current: Mutex<Current>,
    child: tokio::sync::Mutex<Option<Child>>,
}

impl Supervised {
    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Why the agent could not have a VM's supervisor process do what it asked.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("cannot start the VM's supervisor: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("cannot start the VM's supervisor: sh {0}")]
    Shell(std::process::ExitStatus),
    #[error("the VM's supervisor did not start in 10 s ({source}); see {}", log.display())]
    DidNotStart {
        log: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the VM's supervisor is not running: {0}")]
    NotRunning(#[source] std::io::Error),
    #[error(transparent)]
    Encode(serde_json::Error),
    #[error("cannot reach the VM's supervisor: {0}")]
    Unreachable(#[source] std::io::Error),
    #[error("the VM's supervisor did not answer: {0}")]
    NoAnswer(#[source] std::io::Error),
    #[error("the VM's supervisor answered `{answer}`: {source}")]
    Unreadable {
        answer: String,
        #[source]
        source: serde_json::Error,
    },
    /// The supervisor process's own error, which reaches the agent as text.
    #[error("{0}")]
    Refused(String),
}

/// Why a process could not be started; the message names the process and where its
/// output went.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot make {}: {source}", path.display())]
    LogDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the log of {name}: {source}")]
    Log {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run the {which} program of {name}: {source}")]
    Spawn {
        which: &'static str,
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the {which} program of {name} failed: {source}")]
    Wait {
        which: &'static str,
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the start program of {name} exited {code} (see sys/log/{job}/{name}.start.*.log)")]
    Exited {
        name: String,
        job: String,
        code: i32,
    },
    #[error("the start program of {name} did not finish in {limit}")]
    TimedOut { name: String, limit: String },
    #[error("cannot run bpm's pre-start of {name}: {source}")]
    PreStartRun {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("bpm {outcome}: {tail}")]
    PreStart { outcome: String, tail: String },
    #[error("cannot start {name} ({executable}): {source}")]
    Bpm {
        name: String,
        executable: String,
        #[source]
        source: std::io::Error,
    },
}

/// What the lifecycle asks of a VM's supervision, wherever it runs: in this process
/// ([`Supervisor`]) or in the VM's own supervisor process ([`crate::daemon::Daemon`]).
#[async_trait::async_trait]
pub trait Processes: Send + Sync {
    /// Starts every process and monitors them.
    async fn start(&self) -> Result<(), SupervisorError>;
    /// Stops monitoring, leaving the processes as they are.
    async fn unmonitor(&self) -> Result<(), SupervisorError>;
    /// Stops every process; nothing of them is left.
    async fn stop(&self) -> Result<(), SupervisorError>;
    async fn statuses(&self) -> Result<Vec<ProcessStatus>, SupervisorError>;
}

#[async_trait::async_trait]
impl Processes for Supervisor {
    async fn start(&self) -> Result<(), SupervisorError> {
        Supervisor::start(self).await;
        Ok(())
    }

    async fn unmonitor(&self) -> Result<(), SupervisorError> {
        Supervisor::unmonitor(self).await;
        Ok(())
    }

    async fn stop(&self) -> Result<(), SupervisorError> {
        Supervisor::stop(self).await;
        Ok(())
    }

    async fn statuses(&self) -> Result<Vec<ProcessStatus>, SupervisorError> {
        Ok(Supervisor::statuses(self))
    }
}

pub struct Supervisor {
    sandbox: Sandbox,
    timings: Timings,
    processes: Vec<Arc<Supervised>>,
    /// True while processes are monitored; the watchers stop when it turns false.
    monitoring: watch::Sender<bool>,
    watchers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Supervisor {
    pub fn new(sandbox: Sandbox, processes: Vec<ProcessDef>, timings: Timings) -> Self {
        Supervisor {
            sandbox,
            timings,
            processes: processes
                .into_iter()
                .map(|def| {
                    Arc::new(Supervised {
                        def,
                        current: Mutex::new(Current {
                            state: ProcessState::Unknown,
                            pid: None,
                            group: None,
                            since: None,
                            restarts: 0,
                            last_error: None,
                        }),
                        child: tokio::sync::Mutex::new(None),
                    })
                })
                .collect(),
            monitoring: watch::channel(false).0,
            watchers: Mutex::new(Vec::new()),
        }
    }

    /// Starts every process and monitors them (`monit start all`); returns once each has
    /// had its first start.
    pub async fn start(&self) {
        if self.monitoring.send_replace(true) {
            return;
        }
        let mut started = Vec::new();
        let mut handles = Vec::new();
        for process in &self.processes {
            let (first, first_done) = tokio::sync::oneshot::channel();
            let depends_on = self
                .processes
                .iter()
                .filter(|p| process.def.depends_on.contains(&p.def.name))
                .cloned()
                .collect();
            let watcher = Watcher {
                process: Arc::clone(process),
                depends_on,
                sandbox: self.sandbox.clone(),
                timings: self.timings,
                monitoring: self.monitoring.subscribe(),
            };
            handles.push(tokio::spawn(watcher.watch(first)));
            started.push(first_done);
        }
        self.watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(handles);
        for first in started {
            let _ = first.await;
        }
    }

    /// Stops checking the processes, leaving them as they are (`monit unmonitor all`).
    pub async fn unmonitor(&self) {
        self.monitoring.send_replace(false);
        let watchers: Vec<_> =
            std::mem::take(&mut *self.watchers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in watchers {
            let _ = w.await;
        }
    }

    /// Unmonitors and stops every process; returns when all are gone. Processes stop at
    /// once, except that one stops only after those that depend on it (monit's `depends
    /// on`). A process its stop program leaves running, and anything left in its process
    /// group, is killed, so that nothing outlives its VM.
    pub async fn stop(&self) {
        self.unmonitor().await;
        let mut left = self.processes.clone();
        while !left.is_empty() {
            let (now, later): (Vec<_>, Vec<_>) = left.iter().cloned().partition(|p| {
                !left
                    .iter()
                    .any(|other| other.def.depends_on.contains(&p.def.name))
            });
            // Processes that depend on each other round a circle stop together.
            let now = if now.is_empty() {
                std::mem::take(&mut left)
            } else {
                left = later;
                now
            };
            let mut set = tokio::task::JoinSet::new();
            for process in now {
                let timings = self.timings;
                let sandbox = self.sandbox.clone();
                set.spawn(async move { stop_one(&process, &sandbox, timings).await });
            }
            while set.join_next().await.is_some() {}
        }
    }

    pub fn statuses(&self) -> Vec<ProcessStatus> {
        self.processes
            .iter()
            .map(|p| {
                let c = p.current();
                ProcessStatus {
                    job: p.def.job.clone(),
                    name: p.def.name.clone(),
                    state: c.state,
                    pid: c.pid,
                    restarts: c.restarts,
                    uptime: c.since.map(|s| s.elapsed()),
                }
            })
            .collect()
    }

    /// Why each failing process last failed to start, by name.
    pub fn failures(&self) -> Vec<(String, String)> {
        self.processes
            .iter()
            .filter_map(|p| {
                let c = p.current();
                (c.state == ProcessState::Failing)
                    .then(|| (p.def.name.clone(), c.last_error.clone().unwrap_or_default()))
            })
            .collect()
    }
}

struct Watcher {
    process: Arc<Supervised>,
    /// What monit starts first: this process starts once they all run.
    depends_on: Vec<Arc<Supervised>>,
    sandbox: Sandbox,
    timings: Timings,
    monitoring: watch::Receiver<bool>,
}

impl Watcher {
    /// Monit's cycle for one process: a process just started is `starting` until a check
    /// finds it alive, then `running` (so is one found alive in any other state: a
    /// daemon that came up late); one that died before that (a monit process: whose
    /// pidfile named no live process within its start timeout), or could not be started,
    /// is `failing` and started again after a wait that doubles with each such failure in
    /// a row; one that dies after it ran is started again at once.
    async fn watch(mut self, first: tokio::sync::oneshot::Sender<()>) {
        let mut first = Some(first);
        let mut failures: u32 = 0;
        loop {
            if !*self.monitoring.borrow() {
                break;
            }
            let alive = is_alive(&self.process).await;
            let state = self.process.current().state;
            let wait = match (alive, state) {
                (true, ProcessState::Running) => self.timings.check_every,
                (true, _) => {
                    failures = 0;
                    let mut c = self.process.current();
                    c.state = ProcessState::Running;
                    c.since.get_or_insert_with(Instant::now);
                    self.timings.check_every
                }
                (false, ProcessState::Starting) if self.may_still_appear() => {
                    self.timings.check_every
                }
                (false, ProcessState::Starting) => {
                    failures += 1;
                    self.fail("it exited right after it started".into());
                    backoff(self.timings, failures)
                }
                (false, _) if !self.dependencies_run() => self.timings.check_every,
                (false, state) => {
                    if state != ProcessState::Unknown {
                        self.process.current().restarts += 1;
                    }
                    match start_one(&self.process, &self.sandbox, self.timings).await {
                        Ok(()) => {
                            // A monit process's pid is in the pidfile its start wrote.
                            is_alive(&self.process).await;
                            let mut c = self.process.current();
                            c.state = ProcessState::Starting;
                            c.since = Some(Instant::now());
                            self.timings.check_every
                        }
                        Err(e) => {
                            failures += 1;
                            self.fail(e.to_string());
                            backoff(self.timings, failures)
                        }
                    }
                }
            };
            if let Some(done) = first.take() {
                let _ = done.send(());
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.monitoring.changed() => {}
            }
        }
        if let Some(done) = first.take() {
            let _ = done.send(());
        }
    }

    /// Whether a monit process started but never yet found may still write its pidfile:
    /// monit waits for it up to the start program's timeout. One found once and gone
    /// since has died; a bpm process is this supervisor's child: gone is gone.
    fn may_still_appear(&self) -> bool {
        let Kind::Monit { start_timeout, .. } = &self.process.def.kind else {
            return false;
        };
        let c = self.process.current();
        c.pid.is_none() && c.since.is_some_and(|s| s.elapsed() < *start_timeout)
    }

    fn dependencies_run(&self) -> bool {
        self.depends_on
            .iter()
            .all(|d| d.current().state == ProcessState::Running)
    }

    fn fail(&self, why: String) {
        let mut c = self.process.current();
        c.state = ProcessState::Failing;
        c.pid = None;
        c.since = None;
        c.last_error = Some(why);
    }
}

/// The wait before starting a process again after `failures` failures in a row: it
/// doubles with each, as monit's cycles spread out a flapping process's restarts.
fn backoff(timings: Timings, failures: u32) -> Duration {
    fleet_clock::Doubling {
        first: timings.restart_first,
        max: timings.restart_max,
    }
    .after(failures)
}

/// Whether the process lives, updating what is known of it.
async fn is_alive(process: &Supervised) -> bool {
    match &process.def.kind {
        Kind::Bpm(_) => {
            let mut child = process.child.lock().await;
            match child.as_mut() {
                Some(c) => matches!(c.try_wait(), Ok(None)),
                None => false,
            }
        }
        Kind::Monit { pidfile, .. } => {
            let pid = monit_pid(pidfile).await;
            if pid.is_some() {
                process.current().pid = pid;
            }
            pid.is_some()
        }
    }
}

async fn read_pid(pidfile: &std::path::Path) -> Option<u32> {
    tokio::fs::read_to_string(pidfile)
        .await
        .ok()?
        .trim()
        .parse()
        .ok()
}

async fn start_one(
    process: &Supervised,
    sandbox: &Sandbox,
    timings: Timings,
) -> Result<(), StartError> {
    let job = &process.def.job;
    let logs = sandbox.log_dir(job);
    tokio::fs::create_dir_all(&logs)
        .await
        .map_err(|source| StartError::LogDir {
            path: logs.clone(),
            source,
        })?;
    match &process.def.kind {
        Kind::Monit {
            start,
            start_timeout,
            pidfile,
            ..
        } => {
            start_monit(
                process,
                start,
                *start_timeout,
                pidfile,
                &logs,
                sandbox,
                timings,
            )
            .await
        }
        Kind::Bpm(bpm) => {
            if let Some(hook) = &bpm.pre_start {
                let run = script::run(&Script {
                    job: job.clone(),
                    name: format!("{}.pre-start", bpm.name),
                    path: PathBuf::from(hook),
                    args: Vec::new(),
                    env: bpm.env.clone().into_iter().collect(),
                    timeout: Some(timings.bpm_pre_start),
                    log_dir: logs.clone(),
                    cwd: None,
                    enter: None,
                })
                .await
                .map_err(|source| StartError::PreStartRun {
                    name: bpm.name.clone(),
                    source,
                })?;
                if !run.succeeded() {
                    return Err(StartError::PreStart {
                        outcome: run.describe(),
                        tail: run.tail,
                    });
                }
            }
            let child = spawn_bpm(bpm, sandbox, job, &logs).await?;
            let pid = child.id();
            // Where bpm keeps its pidfiles, for the job's own scripts that look there.
            if let Some(pid) = pid {
                let pid_dir = sandbox.run_dir().join("bpm").join(job);
                let _ = tokio::fs::create_dir_all(&pid_dir).await;
                let pidfile = pid_dir.join(format!("{}.pid", bpm.name));
                let _ = tokio::fs::write(pidfile, pid.to_string()).await;
            }
            {
                let mut c = process.current();
                c.pid = pid;
                c.group = pid;
            }
            *process.child.lock().await = Some(child);
            Ok(())
        }
    }
}

async fn spawn_bpm(
    bpm: &BpmProcess,
    sandbox: &Sandbox,
    job: &str,
    logs: &std::path::Path,
) -> Result<Child, StartError> {
    let log = |suffix: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!("{}.{suffix}.log", bpm.name)))
            .map_err(|source| StartError::Log {
                name: bpm.name.clone(),
                source,
            })
    };
    let workdir = bpm
        .workdir
        .clone()
        .map_or_else(|| sandbox.job(job), PathBuf::from);
    let mut command = Command::new(&bpm.executable);
    command
        .args(&bpm.args)
        .envs(&bpm.env)
        .env(VM_ROOT, sandbox.root())
        .current_dir(workdir)
        .stdin(Stdio::null())
        .stdout(log("stdout")?)
        .stderr(log("stderr")?)
        .process_group(0);
    signal::default_handling(&mut command);
    let child = fleet_spawn::spawn(&mut command)
        .await
        .map_err(|source| StartError::Bpm {
            name: bpm.name.clone(),
            executable: bpm.executable.clone(),
            source,
        })?;
    Ok(child)
}

async fn stop_one(process: &Supervised, sandbox: &Sandbox, timings: Timings) {
    match &process.def.kind {
        Kind::Bpm(bpm) => {
            let mut guard = process.child.lock().await;
            if let Some(child) = guard.as_mut() {
                stop_bpm(child, bpm.shutdown_signal, timings).await;
            }
            *guard = None;
            let pidfile = sandbox
                .run_dir()
                .join("bpm")
                .join(&process.def.job)
                .join(format!("{}.pid", bpm.name));
            let _ = tokio::fs::remove_file(pidfile).await;
        }
        Kind::Monit {
            stop,
            stop_timeout,
            pidfile,
            ..
        } => {
            let pid = read_pid(pidfile).await;
            if let Some(stop) = stop {
                let logs = sandbox.log_dir(&process.def.job);
                let _ = run_program(
                    &process.def.name,
                    "stop",
                    stop,
                    (*stop_timeout).min(timings.monit_stop),
                    &logs,
                    sandbox,
                )
                .await;
            }
            // What the stop program left behind goes with the VM: the process, and the
            // process group its start program made.
            let group = process.current().group;
            if let Some(group) = group {
                signal::group(group, libc::SIGKILL);
            }
            let ours = match pid {
                Some(pid) => {
                    let (root, pidfile) = (sandbox.root().to_path_buf(), pidfile.clone());
                    tokio::task::spawn_blocking(move || signal::started_in(pid, &root, &pidfile))
                        .await
                        .unwrap_or(false)
                        .then_some(pid)
                }
                None => None,
            };
            if let Some(pid) = ours {
                signal::group(pid, libc::SIGKILL);
                signal::process(pid, libc::SIGKILL);
            }
        }
    }
    let mut c = process.current();
    c.state = ProcessState::Unknown;
    c.pid = None;
    c.group = None;
    c.since = None;
}

/// Starts a monit process as monit does: its start program is started and not waited
/// for. It is started once the program exits 0 (a daemon that forked; its pidfile is then
/// checked each cycle) or its pidfile names a live process while the program still runs
/// (a program that stays in the foreground, as many monit-era `ctl start` do, and runs
/// on). A program that exits otherwise failed; one that neither exits nor shows a live
/// process within its timeout is ended with its process group.
async fn start_monit(
    process: &Supervised,
    start: &str,
    limit: Duration,
    pidfile: &std::path::Path,
    logs: &std::path::Path,
    sandbox: &Sandbox,
    timings: Timings,
) -> Result<(), StartError> {
    let name = &process.def.name;
    let mut child = spawn_program(name, "start", start, logs, sandbox).await?;
    let group = child.id();
    process.current().group = group;
    let deadline = Instant::now() + limit;
    let every = timings.check_every.min(Duration::from_millis(100));
    loop {
        tokio::select! {
            ended = child.wait() => {
                let status = ended.map_err(|source| StartError::Wait {
                    which: "start",
                    name: name.clone(),
                    source,
                })?;
                return match exit_code(status) {
                    0 => Ok(()),
                    code => Err(StartError::Exited {
                        name: name.clone(),
                        job: process.def.job.clone(),
                        code,
                    }),
                };
            }
            _ = tokio::time::sleep(every) => {
                if monit_pid(pidfile).await.is_some() {
                    // It runs on in the foreground: reaped whenever it ends.
                    tokio::spawn(async move {
                        let _ = child.wait().await;
                    });
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    if let Some(g) = group {
                        signal::group(g, libc::SIGKILL);
                    }
                    let _ = child.wait().await;
                    return Err(StartError::TimedOut {
                        name: name.clone(),
                        limit: humanize(limit),
                    });
                }
            }
        }
    }
}

/// The exit code a shell reports: 128 plus the signal for a program a signal ended.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| {
        128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(libc::SIGKILL)
    })
}

/// The live process a pidfile names, if any.
async fn monit_pid(pidfile: &std::path::Path) -> Option<u32> {
    let pid = read_pid(pidfile).await?;
    // `/proc` is read off the async workers, as every file is.
    tokio::task::spawn_blocking(move || signal::alive(pid))
        .await
        .unwrap_or(false)
        .then_some(pid)
}

/// Runs a monit stop program to its end or `limit`, when its process group is killed:
/// its exit code (`None` past the limit).
async fn run_program(
    name: &str,
    which: &'static str,
    command: &str,
    limit: Duration,
    logs: &std::path::Path,
    sandbox: &Sandbox,
) -> Result<(Option<i32>, Option<u32>), StartError> {
    let mut child = spawn_program(name, which, command, logs, sandbox).await?;
    let group = child.id();
    match tokio::time::timeout(limit, child.wait()).await {
        Ok(Ok(status)) => Ok((status.code(), group)),
        Ok(Err(source)) => Err(StartError::Wait {
            which,
            name: name.to_string(),
            source,
        }),
        Err(_) => {
            if let Some(g) = group {
                signal::group(g, libc::SIGKILL);
            }
            let _ = child.wait().await;
            Ok((None, group))
        }
    }
}

/// Starts a monit start or stop program with `sh -c` in a process group of its own, in
/// the VM's root as monit runs it in `/`, its output going straight to the job's logs: a
/// program that leaves a daemon behind must not be waited for through pipes the daemon
/// keeps open.
async fn spawn_program(
    name: &str,
    which: &'static str,
    command: &str,
    logs: &std::path::Path,
    sandbox: &Sandbox,
) -> Result<Child, StartError> {
    let log = |stream: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!("{name}.{which}.{stream}.log")))
            .map_err(|source| StartError::Log {
                name: name.to_string(),
                source,
            })
    };
    let mut program = Command::new("/bin/sh");
    program
        .args(["-c", command])
        .env(VM_ROOT, sandbox.root())
        .current_dir(sandbox.root())
        .stdin(Stdio::null())
        .stdout(log("stdout")?)
        .stderr(log("stderr")?)
        .process_group(0);
    signal::default_handling(&mut program);
    fleet_spawn::spawn(&mut program)
        .await
        .map_err(|source| StartError::Spawn {
            which,
            name: name.to_string(),
            source,
        })
}

fn humanize(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// bpm's escalation: the shutdown signal, then SIGQUIT, then SIGKILL, to the process
/// group, each after its grace period.
async fn stop_bpm(child: &mut Child, first: ShutdownSignal, timings: Timings) {
    let Some(pid) = child.id() else {
        return;
    };
    let first = match first {
        ShutdownSignal::Term => libc::SIGTERM,
        ShutdownSignal::Int => libc::SIGINT,
    };
    for (signal_number, grace) in [(first, timings.bpm_term), (libc::SIGQUIT, timings.bpm_quit)] {
        signal::group(pid, signal_number);
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            signal::group(pid, libc::SIGKILL);
            return;
        }
    }
    signal::group(pid, libc::SIGKILL);
    let _ = child.wait().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_doubling_up_to_the_maximum() {
        let t = Timings {
            restart_first: Duration::from_secs(1),
            restart_max: Duration::from_secs(30),
            ..Timings::default()
        };
        let waits: Vec<u64> = (1..=7).map(|n| backoff(t, n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(backoff(t, u32::MAX), Duration::from_secs(30));
    }
}
