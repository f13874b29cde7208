use super::agent::AgentError;
use super::cloud::{CloudConfigError, CompilationConfigError};
use super::compile::CompileError;
use super::cpi::CpiError;
use super::manifest::ManifestError;
use super::network::NetworkError;
use fleet_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DirectorError {
    /// One operation per deployment: this is what a broker reports as busy.
    #[error("deployment `{deployment}` is locked by task {task}")]
    Locked { deployment: String, task: u64 },
    #[error("{what} not found")]
    NotFound { what: String },
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    #[error("{0}")]
    Invalid(String),
    /// Refused at upload: the cloud config in force stays as it was.
    #[error(transparent)]
    CloudConfig(#[from] CloudConfigError),
    /// Refused at upload: the runtime config in force stays as it was.
    #[error(transparent)]
    RuntimeConfig(#[from] crate::runtime::RuntimeConfigError),
    /// Refused at upload: the resurrection configs in force stay as they were.
    #[error(transparent)]
    ResurrectionConfig(#[from] crate::resurrection::ResurrectionConfigError),
    /// The acting user's scopes do not cover the deployment (a team user and a
    /// deployment of other teams).
    #[error("{0}")]
    NotPermitted(String),
    /// Resurrection is paused for the whole director (`bosh update-resurrection off`).
    #[error("Resurrector is paused")]
    ResurrectionPaused,
    #[error("Deployment '{deployment}' has no successfully deployed manifest to act on")]
    NotDeployed { deployment: String },
    #[error("Instance group '{group}' doesn't exist in deployment '{deployment}'")]
    UnknownGroup { deployment: String, group: String },
    #[error("Instance '{group}/{instance}' doesn't exist in deployment '{deployment}'")]
    UnknownInstance {
        deployment: String,
        group: String,
        instance: String,
    },
    /// An uploaded release that cannot be read: the file and field at fault.
    #[error(transparent)]
    Release(#[from] fleet_release::ReleaseError),
    #[error(transparent)]
    Link(#[from] crate::links::LinkError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a step of a director task failed, keeping the failure it came from. It displays
/// as the task's result shows it: the underlying error's own words, or a message that
/// names the step and what it acted on.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A long step (a compilation, an errand's run, a log fetch) stopped because its task
    /// was cancelled: the task ends cancelled, not failed.
    #[error("{0} was stopped: its task was cancelled")]
    Stopped(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Cpi(#[from] CpiError),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Network(#[from] NetworkError),
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error(transparent)]
    Record(#[from] serde_json::Error),
    #[error(transparent)]
    CloudConfig(#[from] CloudConfigError),
    #[error(transparent)]
    Compilation(#[from] CompilationConfigError),
    #[error(transparent)]
    Errand(#[from] crate::errand::select::ErrandError),
    #[error(transparent)]
    Upload(#[from] crate::upload_refusal::UploadRefusal),
    /// A call to the cloud failed; `subject` is what it acted on.
    #[error("{call} for {subject}: {source}")]
    CloudCall {
        call: &'static str,
        subject: String,
        source: Box<CpiError>,
    },
    /// A call to an agent failed; `subject` is the instance or VM it runs on.
    #[error("{call} for {subject}: {source}")]
    AgentCall {
        call: &'static str,
        subject: String,
        source: Box<AgentError>,
    },
    #[error("compiling {package} for {stemcell}: {source}")]
    Compiling {
        package: String,
        stemcell: String,
        source: Box<AgentError>,
    },
    #[error("post-deploy of {instance}: {source}")]
    PostDeploy {
        instance: String,
        source: Box<AgentError>,
    },
    #[error("the manifest is invalid:\n{0}")]
    Manifest(#[source] ManifestError),
    #[error("runtime config `{name}` (version {version}): {source}")]
    RuntimeConfig {
        name: String,
        version: u64,
        source: Box<crate::runtime::RuntimeConfigError>,
    },
    /// `recreate`, `start` and errands act on what was last deployed.
    #[error("deployment `{deployment}` has no successfully deployed manifest to {purpose}")]
    NotDeployed {
        deployment: String,
        purpose: &'static str,
    },
    #[error("cannot record the start of the task: {0}")]
    NotStarted(#[source] StoreError),
    /// Work the director ran as a task of its own panicked or was cut short.
    #[error("internal error: {0}")]
    Internal(#[from] tokio::task::JoinError),
    /// A failure in the director's own words.
    #[error("{0}")]
    Failed(String),
}

/// Names the call and what it acted on when a cloud or agent call fails.
pub(crate) trait CallContext<T> {
    fn for_subject(self, call: &'static str, subject: &str) -> Result<T, StepError>;
}

impl<T> CallContext<T> for Result<T, CpiError> {
    fn for_subject(self, call: &'static str, subject: &str) -> Result<T, StepError> {
        self.map_err(|source| StepError::CloudCall {
            call,
            subject: subject.to_string(),
            source: Box::new(source),
        })
    }
}

impl<T> CallContext<T> for Result<T, AgentError> {
    fn for_subject(self, call: &'static str, subject: &str) -> Result<T, StepError> {
        self.map_err(|source| StepError::AgentCall {
            call,
            subject: subject.to_string(),
            source: Box::new(source),
        })
    }
}
