//! `create-env` and `delete-env` (seed 002): one VM deployed without a director. The CPI
//! is installed from the CPI release the manifest names; the VM, its stemcell and its
//! persistent disk are made through it; its agent is spoken to over HTTPS; and everything
//! made is written to the deployment state file before the next step, so that a run cut
//! short anywhere is finished by the next without leaking anything.

pub mod create;
pub mod delete;
pub mod error;
pub mod install;
pub mod jobs;
pub mod manifest;
pub mod prepare;
pub mod registry;
pub mod sources;
pub mod state;
pub mod variables;
pub mod vm;
