//! VMs as directories on this machine and BOSH jobs as real processes: the job files a
//! release brings (monit, bpm.yml, lifecycle scripts) read, each VM's processes
//! supervised as monit and bpm do, and the job lifecycle of seed 003 run in its order.

mod agent;
pub mod bpm;
pub mod cloud;
pub mod compile;
pub mod cpi_server;
pub mod daemon;
pub mod drain;
pub mod iaas;
mod instance_spec;
pub mod jobs;
pub mod lifecycle;
mod logs;
pub mod monit;
pub mod networked_agent;
pub mod place;
pub mod registry_client;
pub mod render;
pub mod rendering;
pub mod sandbox;
pub mod script;
mod signal;
mod stored;
pub mod supervisor;

#[cfg(test)]
mod tests;

/// bpm's limit on its pre-start hook.
pub const PRE_START_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);
