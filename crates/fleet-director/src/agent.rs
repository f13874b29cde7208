//! The agent on each VM, as the director talks to it.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::model::InstanceSpec;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// The agent did not answer in time: its VM is gone, or its NATS certificate expired.
    #[error("timed out sending {method} to agent {agent_id}")]
    Unresponsive { agent_id: String, method: String },
    #[error("agent {agent_id} failed {method}: {message}")]
    Failed {
        agent_id: String,
        method: String,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Starting,
    Stopped,
    Failing,
}

impl JobState {
    /// The word the CLI shows for it.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Starting => "starting",
            JobState::Stopped => "stopped",
            JobState::Failing => "failing",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    pub job_state: JobState,
    pub applied: Option<InstanceSpec>,
    /// Jobs whose processes are not running, for error messages.
    pub failing_jobs: Vec<String>,
    /// The VM's address on each network, as the agent sees it.
    #[serde(default)]
    pub networks: Vec<(String, std::net::Ipv4Addr)>,
    /// Each job's process as the agent's process monitor sees it.
    #[serde(default)]
    pub processes: Vec<Process>,
    /// What the VM uses of its machine, for `bosh vms --vitals`.
    #[serde(default)]
    pub vitals: Option<Vitals>,
}

/// One monitored process: its state in the CLI's words (`running`, `failing`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Process {
    pub name: String,
    pub state: String,
    pub uptime_secs: Option<u64>,
    pub mem_kb: Option<u64>,
    pub mem_percent: Option<f64>,
    pub cpu_total: Option<f64>,
}

/// The agent's vitals, in its own form: figures as decimal text.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Vitals {
    /// Load averages over 1, 5 and 15 minutes.
    pub load: [String; 3],
    pub cpu_sys: String,
    pub cpu_user: String,
    pub cpu_wait: String,
    pub mem_kb: String,
    pub mem_percent: String,
    pub swap_kb: String,
    pub swap_percent: String,
    pub uptime_secs: Option<u64>,
    /// Use per disk (`system`, `ephemeral`, `persistent`): percent and inode percent.
    pub disks: Vec<(String, String, String)>,
}

/// What becomes of an instance's VM, the instance and its deployment once its jobs stop,
/// as BOSH's director tells `pre-stop` scripts (`BOSH_VM_NEXT_STATE` and the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    KeepVm,
    DeleteVm,
    DeleteInstance,
    DeleteDeployment,
}

impl Intent {
    /// `keep` or `delete` for the VM, the instance and the deployment.
    pub fn next_states(self) -> [(&'static str, &'static str); 3] {
        let (vm, instance, deployment) = match self {
            Intent::KeepVm => ("keep", "keep", "keep"),
            Intent::DeleteVm => ("delete", "keep", "keep"),
            Intent::DeleteInstance => ("delete", "delete", "keep"),
            Intent::DeleteDeployment => ("delete", "delete", "delete"),
        };
        [
            ("BOSH_VM_NEXT_STATE", vm),
            ("BOSH_INSTANCE_NEXT_STATE", instance),
            ("BOSH_DEPLOYMENT_NEXT_STATE", deployment),
        ]
    }
}

/// What the director asks of an agent's drain (BOSH's drain types): its drain scripts
/// learn from it whether the job is updated in place or shut down.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Drain<'a> {
    /// The instance is updated in place and started again with this spec (`pre-stop`
    /// hears that everything is kept).
    Update(&'a InstanceSpec),
    /// The jobs stop for good, or the VM is replaced or goes away with the instance or its
    /// deployment.
    Shutdown(Intent),
    /// A dynamic drain asked to be asked again.
    Status,
}

/// How an errand's run ended, as the agent reports it: its exit code and everything it
/// printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrandOutput {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// What `bosh ssh` asks of an agent, as BOSH's agent's `ssh` action takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SshRequest {
    /// A user `user` (`bosh_` and hex digits) who logs in with `public_key`.
    Setup { user: String, public_key: String },
    /// Every user whose name starts with `bosh_` and matches `user_regex` removed, with
    /// their homes.
    Cleanup { user_regex: String },
}

/// What a set-up session is reached at: the VM's address on its default network and
/// its SSH host key (`ssh-rsa ...`), which the client trusts for this session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshSession {
    pub ip: Option<String>,
    pub host_public_key: Option<String>,
}

/// A package compiled before the one that needs it: its name, and the key its compilation
/// is kept under in the store ([`crate::compile::cache_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledDependency {
    pub name: String,
    pub key: String,
}

#[async_trait]
pub trait Agent: Send + Sync {
    async fn get_state(&self, agent_id: &str) -> Result<AgentState, AgentError>;
    /// Downloads what `apply` will need.
    async fn prepare(&self, agent_id: &str, spec: &InstanceSpec) -> Result<(), AgentError>;
    /// Unmonitors the jobs and runs `pre-stop` and the drain scripts; a negative answer
    /// means "ask again ([`Drain::Status`]) after that many seconds".
    async fn drain(&self, agent_id: &str, drain: Drain<'_>) -> Result<i64, AgentError>;
    async fn stop(&self, agent_id: &str) -> Result<(), AgentError>;
    async fn apply(&self, agent_id: &str, spec: &InstanceSpec) -> Result<(), AgentError>;
    async fn start(&self, agent_id: &str) -> Result<(), AgentError>;
    async fn mount_disk(&self, agent_id: &str, disk_cid: &str) -> Result<(), AgentError>;
    async fn unmount_disk(&self, agent_id: &str, disk_cid: &str) -> Result<(), AgentError>;
    /// Compiles a package (`release/version/name`; its dependencies already compiled) and
    /// returns the blob that holds the result.
    async fn compile_package(
        &self,
        agent_id: &str,
        package: &str,
        dependencies: &[CompiledDependency],
    ) -> Result<String, AgentError>;
    /// Copies the persistent data from the old disk to the new one; both are mounted.
    async fn migrate_disk(&self, agent_id: &str, from: &str, to: &str) -> Result<(), AgentError>;
    /// Runs every applied job's script `name` at once, as BOSH's agent's `run_script`:
    /// `post-start` once the jobs run, `post-deploy` once every instance of the
    /// deployment started. Jobs without one are skipped; agents whose jobs have none
    /// answer at once.
    async fn run_script(&self, _agent_id: &str, _name: &str) -> Result<(), AgentError> {
        Ok(())
    }
    /// Runs the applied job `job`'s `bin/run` to its end. An exit code other than 0 is an
    /// answer, not an error: the errand ran and failed.
    async fn run_errand(&self, agent_id: &str, job: &str) -> Result<ErrandOutput, AgentError>;
    /// The logs `request` asks for, as a gzipped tarball with paths relative to each
    /// kind's log directory (a job's files under `JOB/`).
    async fn fetch_logs(
        &self,
        agent_id: &str,
        request: &crate::log_request::LogRequest,
    ) -> Result<Vec<u8>, AgentError>;
    /// Sets up or cleans up an SSH session's user on the VM (`bosh ssh`, `bosh scp`).
    /// A VM that runs no SSH server (the simulation's, a directory of this machine)
    /// refuses.
    async fn ssh(&self, agent_id: &str, _request: &SshRequest) -> Result<SshSession, AgentError> {
        Err(AgentError::Failed {
            agent_id: agent_id.to_string(),
            method: "ssh".into(),
            message: "this VM runs no SSH server".into(),
        })
    }
}
