//! Why an agent's action failed. The message goes back to the client as the action's
//! exception (`Action Failed METHOD: ...`), so each names what it was about.

use fleet_vm::compile::CompileError;
use fleet_vm::iaas::IaasError;
use fleet_vm::jobs::JobFilesError;
use fleet_vm::lifecycle::LifecycleError;
use fleet_vm::place::PlaceError;

use super::blobstore::BlobError;

#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("argument {position} ({name}) must be a string")]
    NotAString { position: usize, name: String },
    #[error("argument {position} ({name}) is not what it must be: {source}")]
    BadArgument {
        position: usize,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("Network '{0}' is not found in settings")]
    NetworkNotInSettings(String),
    #[error("drain type `{0}` is not update, shutdown or status")]
    DrainType(String),
    #[error("`{0}` is not a disk CID")]
    NotADiskCid(String),
    #[error("disk {0} is not attached")]
    NotAttached(String),
    #[error("no disk is mounted at {0}")]
    NothingMounted(&'static str),
    #[error(transparent)]
    Blob(#[from] BlobError),
    #[error(transparent)]
    Unpack(#[from] fleet_render::UnpackError),
    #[error(transparent)]
    JobFiles(#[from] JobFilesError),
    #[error(transparent)]
    Place(#[from] PlaceError),
    /// Boxed: a script's run, with the tail of its output, is large.
    #[error(transparent)]
    Lifecycle(Box<LifecycleError>),
    #[error(transparent)]
    Iaas(#[from] IaasError),
    #[error("Compiling package {package}: {source}")]
    Compile {
        package: String,
        #[source]
        source: Box<CompileError>,
    },
    #[error("cannot {what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the {0} task did not finish")]
    Interrupted(&'static str),
}

impl From<LifecycleError> for ActionError {
    fn from(e: LifecycleError) -> Self {
        ActionError::Lifecycle(Box::new(e))
    }
}

impl ActionError {
    pub(crate) fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> ActionError {
        move |source| ActionError::Io { what, source }
    }
}
