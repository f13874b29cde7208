//! Deployment manifests: the model, and parsing with every problem collected and named
//! by instance group and key. No I/O: text in, a manifest or problems out.

mod links;
mod model;
mod parse;

pub use model::{
    ConsumeRef, Count, CustomProvider, InstanceGroup, JobRef, Lifecycle, Manifest, NetworkRef,
    ProvideRef, ReleaseRef, StemcellRef, UpdatePolicy, WatchTime,
};
pub use parse::{ManifestError, parse, parse_root};
