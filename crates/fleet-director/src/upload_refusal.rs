//! Why an uploaded release is refused after it was read: it clashes with what the
//! director has. Below the upload task and the step errors that carry it.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UploadRefusal {
    #[error(
        "release {name}/{version} was uploaded before with other contents ({what}); give this \
         one a new version, or upload it with --fix to replace it"
    )]
    Changed {
        name: String,
        version: String,
        what: String,
    },
    #[error(
        "packages/{package}.tgz: is missing, and the director has no package with fingerprint \
         {fingerprint} to use instead"
    )]
    MissingPackage {
        package: String,
        fingerprint: String,
    },
}
