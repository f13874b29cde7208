//! The job lifecycle of seed 003 on one VM, in its order.
//!
//! Start: mount the persistent disk; (the jobs and packages are placed before); every
//! job's `pre-start` at once, waited for; every process started. Every `post-start` runs
//! at once when the director has seen every process running (as BOSH's director asks
//! for it once `get_state` says `running`); `post-deploy` when it says every instance
//! started.
//! Stop: unmonitor; every `pre-stop` at once; every `drain` at once, each following the
//! drain protocol; every process stopped; every `post-stop` at once; unmount. A job's own
//! scripts have no time limit. Every script run is kept, also those of a step that
//! failed, for the task's logs; the first failing one fails the step, named.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use super::drain::{self, DrainAnswer};
use super::sandbox::{Sandbox, VM_ROOT};
use super::script::{self, Script, ScriptRun};
use super::supervisor::Processes;

/// The `PATH` BOSH's agent gives the scripts it runs (`pathenv.Path()`).
pub const SCRIPT_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// A script ended badly: which, how, and the tail of its output.
    #[error("{}: {}", run.describe(), run.tail)]
    Script { run: ScriptRun },
    #[error("drain of job {job} {message}")]
    Drain { job: String, message: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The VM's supervision could not be reached or did not do what it was asked.
    #[error("supervision: {0}")]
    Supervision(#[from] super::daemon::SupervisorError),
}

/// What a stop tells the jobs' scripts, as BOSH's agent tells them: `drain`'s arguments
/// (how the job and its configuration change, then the packages that change) and its
/// environment (`BOSH_JOB_STATE`, `BOSH_JOB_NEXT_STATE`), and `pre-stop`'s environment
/// (`BOSH_VM_NEXT_STATE`, `BOSH_INSTANCE_NEXT_STATE`, `BOSH_DEPLOYMENT_NEXT_STATE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopContext {
    /// `job_changed`, `job_new` or `job_shutdown`.
    pub job_change: String,
    /// `hash_changed`, `hash_unchanged` or `hash_new`.
    pub hash_change: String,
    pub updated_packages: Vec<String>,
    pub drain_env: Vec<(String, String)>,
    pub pre_stop_env: Vec<(String, String)>,
}

impl StopContext {
    /// The jobs stop for good (or their VM goes): `job_shutdown hash_unchanged`.
    pub fn shutdown(pre_stop_env: Vec<(String, String)>) -> Self {
        StopContext {
            job_change: "job_shutdown".into(),
            hash_change: "hash_unchanged".into(),
            updated_packages: Vec::new(),
            drain_env: Vec::new(),
            pre_stop_env,
        }
    }

    fn drain_args(&self) -> Vec<String> {
        let mut args = vec![self.job_change.clone(), self.hash_change.clone()];
        args.extend(self.updated_packages.iter().cloned());
        args
    }
}

/// The jobs placed on a VM and its supervisor.
pub struct Lifecycle<'a> {
    sandbox: &'a Sandbox,
    jobs: &'a [String],
    supervisor: &'a dyn Processes,
    /// Every script run so far, in the order they ended.
    runs: Mutex<Vec<ScriptRun>>,
}

impl<'a> Lifecycle<'a> {
    pub fn new(sandbox: &'a Sandbox, jobs: &'a [String], supervisor: &'a dyn Processes) -> Self {
        Lifecycle {
            sandbox,
            jobs,
            supervisor,
            runs: Mutex::new(Vec::new()),
        }
    }

    /// Every script run so far, a failed step's included: what the task's logs show.
    pub fn runs(&self) -> Vec<ScriptRun> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn record(&self, run: &ScriptRun) {
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(run.clone());
    }

    /// The disk mounted, every `pre-start`, then every process started; the processes
    /// are not waited for.
    ///
    /// # Errors
    /// A failing `pre-start` (nothing is started then), or a disk that cannot be mounted.
    pub async fn start(&self, disk: Option<&Path>) -> Result<(), LifecycleError> {
        if let Some(disk) = disk {
            self.sandbox.mount(disk)?;
        }
        self.hooks("pre-start", &[], &[]).await?;
        Ok(self.supervisor.start().await?)
    }

    /// The errand of job `job`: its `bin/run` to its end, however it ends.
    ///
    /// # Errors
    /// When the job has no `bin/run` (it is no errand) or it cannot be started.
    pub async fn errand(&self, job: &str) -> Result<ScriptRun, LifecycleError> {
        let enter = self.sandbox.enter()?;
        let script = self.script(&enter, job, "run", &[], &[]).ok_or_else(|| {
            LifecycleError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("job {job} has no bin/run: it is not an errand"),
            ))
        })?;
        let run = script::run(&script).await?;
        self.record(&run);
        Ok(run)
    }

    /// # Errors
    /// A failing `pre-stop`, `drain` or `post-stop`. As with BOSH's agent, a failing
    /// script ends the stop where it is: processes a failing `pre-stop` or `drain` kept
    /// from stopping run on, unmonitored, until the instance is stopped again or deleted.
    pub async fn stop(&self, context: &StopContext, unmount: bool) -> Result<(), LifecycleError> {
        self.drain(context).await?;
        self.halt().await?;
        if unmount {
            self.sandbox.unmount()?;
        }
        Ok(())
    }

    /// The first half of a stop, as the director's `drain` asks it: unmonitor, every
    /// `pre-stop`, every `drain` to its end.
    ///
    /// # Errors
    /// A failing `pre-stop` or `drain`.
    pub async fn drain(&self, context: &StopContext) -> Result<(), LifecycleError> {
        self.supervisor.unmonitor().await?;
        self.hooks("pre-stop", &[], &context.pre_stop_env).await?;
        self.drains(context).await
    }

    /// Unmonitor and every `drain`, without `pre-stop`: BOSH's agent's `drain`, for a
    /// caller that runs `pre-stop` itself (`run_script`).
    ///
    /// # Errors
    /// A failing `drain`.
    pub async fn drain_only(&self, context: &StopContext) -> Result<(), LifecycleError> {
        self.supervisor.unmonitor().await?;
        self.drains(context).await
    }

    /// Every job's script called `name` at once (BOSH's agent's `run_script`), with
    /// `env` beside the VM's own variables.
    ///
    /// # Errors
    /// The first failing script.
    pub async fn run_hooks(
        &self,
        name: &str,
        env: &[(String, String)],
    ) -> Result<(), LifecycleError> {
        self.hooks(name, &[], env).await
    }

    /// The second half, as the director's `stop` asks it: every process stopped, then
    /// every `post-stop`.
    ///
    /// # Errors
    /// A failing `post-stop`.
    pub async fn halt(&self) -> Result<(), LifecycleError> {
        self.supervisor.stop().await?;
        self.hooks("post-stop", &[], &[]).await
    }

    /// Processes back as they were after a reboot of the VM: monit starts them, no hook
    /// runs.
    ///
    /// # Errors
    /// When the VM's supervision cannot be reached.
    pub async fn reboot(&self) -> Result<(), LifecycleError> {
        self.supervisor.stop().await?;
        Ok(self.supervisor.start().await?)
    }

    /// The script `name` of `job`, run in the VM's container (`enter`) when it is one.
    fn script(
        &self,
        enter: &Option<crate::container::Enter>,
        job: &str,
        name: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Option<Script> {
        let path = self.sandbox.job(job).join("bin").join(name);
        // As BOSH's agent runs a job's scripts: its `PATH`, beside the agent's own
        // environment, and the VM's root as the directory they start in.
        let mut all_env = vec![
            ("PATH".to_string(), SCRIPT_PATH.to_string()),
            (
                VM_ROOT.to_string(),
                self.sandbox.root().display().to_string(),
            ),
        ];
        all_env.extend(env.iter().cloned());
        path.is_file().then(|| Script {
            job: job.to_string(),
            name: name.to_string(),
            path,
            args: args.to_vec(),
            env: all_env,
            timeout: None,
            log_dir: self.sandbox.log_dir(job),
            cwd: Some(self.sandbox.root().to_path_buf()),
            enter: enter.clone(),
        })
    }

    /// The scripts called `name` of every job that has one, at once.
    async fn hooks(
        &self,
        name: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<(), LifecycleError> {
        // A container VM's scripts run in it, never beside it.
        let enter = self.sandbox.enter()?;
        let scripts: Vec<Script> = self
            .jobs
            .iter()
            .filter_map(|job| self.script(&enter, job, name, args, env))
            .collect();
        let runs = script::run_all(scripts).await?;
        for run in &runs {
            self.record(run);
        }
        match runs.into_iter().find(|r| !r.succeeded()) {
            Some(run) => Err(LifecycleError::Script { run }),
            None => Ok(()),
        }
    }

    /// Every job's drain at once, each run again while it asks to be.
    async fn drains(&self, context: &StopContext) -> Result<(), LifecycleError> {
        let check_status = ["job_check_status".to_string(), "hash_unchanged".to_string()];
        let enter = self.sandbox.enter()?;
        let mut set = tokio::task::JoinSet::new();
        for job in self.jobs {
            let Some(first) = self.script(
                &enter,
                job,
                "drain",
                &context.drain_args(),
                &context.drain_env,
            ) else {
                continue;
            };
            // The status run hears no next state, as with BOSH's agent.
            let status_env: Vec<(String, String)> = context
                .drain_env
                .iter()
                .filter(|(k, _)| k != "BOSH_JOB_NEXT_STATE")
                .cloned()
                .collect();
            let again = self.script(&enter, job, "drain", &check_status, &status_env);
            set.spawn(drain_one(job.clone(), first, again));
        }
        let mut failure = None;
        while let Some(joined) = set.join_next().await {
            let (runs, outcome) = joined.map_err(std::io::Error::other)?;
            for run in &runs {
                self.record(run);
            }
            if let Err(e) = outcome
                && failure.is_none()
            {
                failure = Some(e);
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// One job's drain, following the protocol to its end: its runs, and how it ended.
async fn drain_one(
    job: String,
    first: Script,
    again: Option<Script>,
) -> (Vec<ScriptRun>, Result<(), LifecycleError>) {
    let mut runs = Vec::new();
    let mut next = first;
    loop {
        let run = match script::run(&next).await {
            Ok(run) => run,
            Err(e) => return (runs, Err(e.into())),
        };
        runs.push(run.clone());
        if !run.succeeded() {
            return (runs, Err(LifecycleError::Script { run }));
        }
        match drain::answer(&run.stdout) {
            Ok(DrainAnswer::Wait(wait)) => {
                tokio::time::sleep(wait).await;
                return (runs, Ok(()));
            }
            Ok(DrainAnswer::AskAgain(wait)) => {
                tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
                match &again {
                    Some(s) => next = s.clone(),
                    None => return (runs, Ok(())),
                }
            }
            Err(e) => {
                let message = e.to_string();
                return (runs, Err(LifecycleError::Drain { job, message }));
            }
        }
    }
}
