//! The VM's side of a process-backed VM: a VM is a directory on this machine (`iaas`),
//! the job files a release brings (monit, bpm.yml, lifecycle scripts) are read, each VM's
//! processes are supervised as monit and bpm do, and the job lifecycle of seed 003 runs in
//! its order. This is what runs inside a VM; it links no database and not the director,
//! which reach it only through an agent (`fleet-iaas`'s in-process one, or `fleet-agent`).

pub mod beneath;
pub mod bpm;
pub mod compile;
pub mod container;
pub mod daemon;
pub mod drain;
pub mod iaas;
pub mod jobs;
pub mod lifecycle;
pub mod logs;
pub mod monit;
pub mod place;
pub mod registry_client;
pub mod sandbox;
pub mod script;
pub mod signal;
pub mod supervisor;

#[cfg(test)]
mod tests;

/// bpm's limit on its pre-start hook.
pub const PRE_START_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);
