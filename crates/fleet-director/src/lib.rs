//! The embedded director core: releases, stemcells, cloud config, deployments and their
//! instances, VMs and disks, and tasks with event logs, behind one facade ([`Director`],
//! one file per feature under `director/`). Operations run as background tasks; one
//! operation per deployment at a time (a second is refused at once, naming the task that
//! holds the lock). State lives in a [`store::Store`]; the IaaS and the agents are behind
//! the [`cpi::Cpi`] and [`agent::Agent`] traits.

pub mod addresses;
pub mod agent;
pub mod alerts;
pub mod audit;
pub mod cleanup;
pub mod cloud;
pub mod cloud_check;
pub mod cloud_properties;
pub mod collections;
mod compilation;
pub mod compile;
pub mod config_server;
pub mod core;
pub mod cpi;
mod cpi_trace;
mod deploy;
mod details;
mod director;
pub mod disk_plan;
mod documents;
mod dry_run;
pub mod errand;
mod error;
mod gather;
pub mod health_monitor;
mod identity;
mod ids;
pub mod latest;
mod lease_keeper;
pub mod limits;
pub mod links;
pub mod log_request;
pub mod logs;
pub mod manifest;
pub mod model;
mod names;
pub mod network;
mod networking;
pub mod placeholders;
pub mod plan;
pub mod ports;
pub mod problem;
pub mod records;
pub mod release_export;
mod release_upload;
pub mod renderer;
pub mod resurrection;
mod runner;
pub mod runtime;
pub mod sim;
mod snapshot;
pub mod ssh;
mod target;
mod task;
pub mod task_kind;
pub mod templates;
pub mod trace;
pub mod unsettled;
mod update;
mod update_order;
mod upload_refusal;
pub mod validate;
mod variable_names;

#[cfg(test)]
mod shared_tests;

pub use core::{Core, DirectorSettings, Infrastructure};
pub use deploy::DeployOptions;
pub use director::{Director, LinkView, RECOVERY_REASON, Readiness};
pub use error::DirectorError;
pub use identity::{DIRECTOR_NAME, director_uuid};
pub use limits::InstanceLimits;
pub use links::LinkError;
pub use names::{MAX_NAME_LEN, name_problem};
pub use target::Target;
pub use task::JobError;

use manifest::Count;

/// Options of `recreate`, as `bosh recreate` takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecreateOptions {
    pub fix: bool,
    pub skip_drain: bool,
    pub canaries: Option<Count>,
    pub max_in_flight: Option<Count>,
    pub dry_run: bool,
    pub target: Target,
}

#[cfg(test)]
mod cancel_tests;
#[cfg(test)]
mod cloud_properties_tests;
#[cfg(test)]
mod errand_tests;
#[cfg(test)]
mod health_monitor_tests;
#[cfg(test)]
mod links_tests;
#[cfg(test)]
mod logs_tests;
#[cfg(test)]
mod release_tests;
#[cfg(test)]
mod stop_and_render_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod unsettled_tests;
#[cfg(test)]
mod variables_tests;
