//! Deployment manifests: the model, and parsing with every problem collected and named
//! by instance group and key. No I/O: text in, a manifest or problems out.

mod model;
mod parse;

pub use model::{
    Count, InstanceGroup, JobRef, Lifecycle, Manifest, NetworkRef, ReleaseRef, StemcellRef,
    UpdatePolicy, WatchTime,
};
pub use parse::{ManifestError, parse};
