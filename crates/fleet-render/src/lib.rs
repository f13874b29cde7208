//! BOSH job templates rendered through Ruby's ERB with the director's semantics, the
//! rendered files packed as the archive an agent's `apply` receives, and that archive read
//! back. Both the director's renderer and `create-env` render through it; the VM's side
//! only unpacks.

mod archive;
mod erb;
mod isolation;

pub use archive::{JobSource, UnpackError, render_archive, unpack};
pub use erb::{Declared, InstanceSpec, JobTemplates, ReleaseName, RenderError, render};
pub use isolation::Isolation;
