//! The job lifecycle of seed 003 on one VM, in its order.
//!
//! Start: mount the persistent disk; (the jobs and packages are placed before); every
//! job's `pre-start` at once, waited for; every process started; every `post-start` at
//! once, waited for. `post-deploy` runs when the director says every instance started.
//! Stop: unmonitor; every `pre-stop` at once; every `drain` at once, each following the
//! drain protocol; every process stopped; every `post-stop` at once; unmount. A job's own
//! scripts have no time limit. Each script run is returned for the task's logs; the first
//! failing one fails the step, named.

use std::path::Path;
use std::time::Duration;

use super::drain::{self, DrainAnswer};
use super::sandbox::Sandbox;
use super::script::{self, Script, ScriptRun};
use super::supervisor::Processes;

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// A script ended badly: which, how, and the tail of its output.
    #[error("{}: {}", run.describe(), run.tail)]
    Script {
        run: ScriptRun,
        runs: Vec<ScriptRun>,
    },
    #[error("drain of job {job} {message}")]
    Drain { job: String, message: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The VM's supervision could not be reached or did not do what it was asked.
    #[error("supervision: {0}")]
    Supervision(String),
}

/// Why a stop is made: drain scripts are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The instance goes away or is stopped.
    Shutdown,
    /// The instance is updated and starts again with a changed spec.
    Update,
}

/// The jobs placed on a VM and its supervisor.
pub struct Lifecycle<'a> {
    pub sandbox: &'a Sandbox,
    pub jobs: &'a [String],
    pub supervisor: &'a dyn Processes,
}

impl Lifecycle<'_> {
    /// # Errors
    /// A failing `pre-start` (nothing is started then) or `post-start`, or a disk that
    /// cannot be mounted.
    pub async fn start(&self, disk: Option<&Path>) -> Result<Vec<ScriptRun>, LifecycleError> {
        if let Some(disk) = disk {
            self.sandbox.mount(disk)?;
        }
        let mut runs = self.hooks("pre-start", &[]).await?;
        self.supervisor
            .start()
            .await
            .map_err(LifecycleError::Supervision)?;
        runs.extend(self.hooks("post-start", &[]).await?);
        Ok(runs)
    }

    /// `post-deploy` on this VM, once every instance of the deployment started.
    ///
    /// # Errors
    /// A failing script.
    pub async fn post_deploy(&self) -> Result<Vec<ScriptRun>, LifecycleError> {
        self.hooks("post-deploy", &[]).await
    }

    /// # Errors
    /// A failing `pre-stop`, `drain` or `post-stop`. As with BOSH's agent, a failing
    /// script ends the stop where it is: processes a failing `pre-stop` or `drain` kept
    /// from stopping run on, unmonitored, until the instance is stopped again or deleted.
    pub async fn stop(
        &self,
        reason: StopReason,
        unmount: bool,
    ) -> Result<Vec<ScriptRun>, LifecycleError> {
        let mut runs = self.drain(reason).await?;
        runs.extend(self.halt().await?);
        if unmount {
            self.sandbox.unmount()?;
        }
        Ok(runs)
    }

    /// The first half of a stop, as the director's `drain` asks it: unmonitor, every
    /// `pre-stop`, every `drain` to its end.
    ///
    /// # Errors
    /// A failing `pre-stop` or `drain`.
    pub async fn drain(&self, reason: StopReason) -> Result<Vec<ScriptRun>, LifecycleError> {
        self.supervisor
            .unmonitor()
            .await
            .map_err(LifecycleError::Supervision)?;
        let mut runs = self.hooks("pre-stop", &[]).await?;
        runs.extend(self.drains(reason).await?);
        Ok(runs)
    }

    /// The second half, as the director's `stop` asks it: every process stopped, then
    /// every `post-stop`.
    ///
    /// # Errors
    /// A failing `post-stop`.
    pub async fn halt(&self) -> Result<Vec<ScriptRun>, LifecycleError> {
        self.supervisor
            .stop()
            .await
            .map_err(LifecycleError::Supervision)?;
        self.hooks("post-stop", &[]).await
    }

    /// Processes back as they were after a reboot of the VM: monit starts them, no hook
    /// runs.
    ///
    /// # Errors
    /// When the VM's supervision cannot be reached.
    pub async fn reboot(&self) -> Result<(), LifecycleError> {
        self.supervisor
            .stop()
            .await
            .map_err(LifecycleError::Supervision)?;
        self.supervisor
            .start()
            .await
            .map_err(LifecycleError::Supervision)
    }

    fn script(&self, job: &str, name: &str, args: &[&str]) -> Option<Script> {
        let path = self.sandbox.job(job).join("bin").join(name);
        path.is_file().then(|| Script {
            job: job.to_string(),
            name: name.to_string(),
            path,
            args: args.iter().map(|a| a.to_string()).collect(),
            env: vec![(
                "BOSH_VM_ROOT".into(),
                self.sandbox.root().display().to_string(),
            )],
            timeout: None,
            log_dir: self.sandbox.log_dir(job),
            cwd: None,
        })
    }

    /// The scripts called `name` of every job that has one, at once.
    async fn hooks(&self, name: &str, args: &[&str]) -> Result<Vec<ScriptRun>, LifecycleError> {
        let scripts: Vec<Script> = self
            .jobs
            .iter()
            .filter_map(|job| self.script(job, name, args))
            .collect();
        let runs = script::run_all(scripts).await?;
        match runs.iter().find(|r| !r.succeeded()) {
            Some(failed) => Err(LifecycleError::Script {
                run: failed.clone(),
                runs,
            }),
            None => Ok(runs),
        }
    }

    /// Every job's drain at once, each run again while it asks to be.
    async fn drains(&self, reason: StopReason) -> Result<Vec<ScriptRun>, LifecycleError> {
        let (state, hash) = match reason {
            StopReason::Shutdown => ("job_shutdown", "hash_unchanged"),
            StopReason::Update => ("job_changed", "hash_changed"),
        };
        let mut set = tokio::task::JoinSet::new();
        for job in self.jobs {
            let Some(first) = self.script(job, "drain", &[state, hash]) else {
                continue;
            };
            let again = self.script(job, "drain", &["job_check_status", "hash_unchanged"]);
            set.spawn(drain_one(job.clone(), first, again));
        }
        let mut runs = Vec::new();
        let mut failure = None;
        while let Some(joined) = set.join_next().await {
            let (job_runs, outcome) = joined.map_err(std::io::Error::other)?;
            runs.extend(job_runs);
            if let Err(e) = outcome
                && failure.is_none()
            {
                failure = Some(e);
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(runs),
        }
    }
}

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
            return (runs.clone(), Err(LifecycleError::Script { run, runs }));
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
            Err(message) => return (runs, Err(LifecycleError::Drain { job, message })),
        }
    }
}
