use super::manifest::ManifestError;
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
    #[error(transparent)]
    Store(#[from] StoreError),
}
