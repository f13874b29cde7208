//! A VM's agent reachable over HTTPS, as BOSH's agent serves its mbus for `create-env`:
//! the agent message protocol (`ping`, `get_state`, `apply`, `start`, `stop`, `drain`,
//! `run_script`, disks, `compile_package`, and `get_task` for the long ones), a blobstore
//! beside it, and the client that speaks to it.

pub mod actions;
pub mod blobstore;
pub mod client;
mod compile;
pub mod daemon;
mod disks;
mod error;
pub mod mbus;
mod networks;
pub mod protocol;
pub mod server;
mod tasks;

#[cfg(test)]
mod tests;
