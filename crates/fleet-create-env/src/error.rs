//! How `create-env` and `delete-env` fail: what was wrong with their input, or which step
//! failed and how.

use fleet_agent::client::AgentCallError;
use fleet_cpi::CpiCallError;

use super::sources::SourceError;

use super::manifest::ManifestError;
use super::state::StateError;
use super::variables::VariableError;

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The manifest, a release, the stemcell or a flag.
    #[error("{0}")]
    Input(String),
    /// A release or the stemcell the manifest names.
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Variables(#[from] VariableError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("installing the CPI: {0}")]
    Install(#[from] super::install::InstallError),
    #[error("{step}: {source}")]
    Cpi {
        step: String,
        #[source]
        source: CpiCallError,
    },
    #[error("{step}: {source}")]
    Agent {
        step: String,
        #[source]
        source: AgentCallError,
    },
    /// A job rendered, a package compiled, a job that does not run.
    #[error("{0}")]
    Deploy(String),
    /// Work moved off the runtime (reading archives, unpacking) ended without an answer.
    #[error("{0} was interrupted")]
    Interrupted(&'static str),
}

/// Runs `work` on a thread for blocking work, so that reading and unpacking archives of
/// many gigabytes never holds up the runtime.
pub(crate) async fn off_runtime<T: Send + 'static, E: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, EnvError>
where
    EnvError: From<E>,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| EnvError::Interrupted(what))?
        .map_err(EnvError::from)
}

impl EnvError {
    /// Whether what was given was wrong (the manifest, its variables, a release or
    /// stemcell, a flag), before anything was made.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            EnvError::Input(_)
                | EnvError::Source(_)
                | EnvError::Manifest(_)
                | EnvError::Variables(_)
        )
    }

    pub fn cpi(step: impl Into<String>) -> impl FnOnce(CpiCallError) -> EnvError {
        let step = step.into();
        move |source| EnvError::Cpi { step, source }
    }

    pub fn agent(step: impl Into<String>) -> impl FnOnce(AgentCallError) -> EnvError {
        let step = step.into();
        move |source| EnvError::Agent { step, source }
    }
}
