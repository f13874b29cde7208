use super::cloud::CloudConfigError;
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
    /// Refused at upload: the cloud config in force stays as it was.
    #[error(transparent)]
    CloudConfig(#[from] CloudConfigError),
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
    #[error(transparent)]
    Store(#[from] StoreError),
}
