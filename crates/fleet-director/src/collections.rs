//! The director's kinds of records in the store. The names are those the databases already
//! hold.

use fleet_store::Collection;

pub const RELEASES: Collection = Collection::new("releases");
pub const STEMCELLS: Collection = Collection::new("stemcells");
/// The cloud configs, every version.
pub const CLOUD_CONFIG: Collection = Collection::new("cloud_config");
pub const DEPLOYMENTS: Collection = Collection::new("deployments");
pub const INSTANCES: Collection = Collection::new("instances");
/// The director's VMs, by CID.
pub const VMS: Collection = Collection::new("vms");
/// Persistent disks, orphaned ones included.
pub const DISKS: Collection = Collection::new("disks");
/// Packages compiled per stemcell, the compilation cache.
pub const COMPILED_PACKAGES: Collection = Collection::new("compiled_packages");
/// DNS records: `<instance>.<group>.<network>.<deployment>.bosh` to its address.
pub const DNS: Collection = Collection::new("dns");
/// What the last cloud check of each deployment found, until it is resolved.
pub const PROBLEMS: Collection = Collection::new("problems");
/// Each finished task's CPI and debug lines, by task id.
pub const TASK_TRACES: Collection = Collection::new("task_traces");
/// What a finished task wrote as its result output beyond its one-line result (an
/// errand's results), by task id.
pub const TASK_RESULTS: Collection = Collection::new("task_results");
/// The state of a deployment's instances at an errand's last successful run, by
/// `deployment/errand`: what `when-changed` compares against.
pub const ERRAND_RUNS: Collection = Collection::new("errand_runs");
/// Log bundles kept for download, by blob id.
pub const LOG_BUNDLES: Collection = Collection::new("log_bundles");
/// Every version of every named runtime config.
pub const RUNTIME_CONFIGS: Collection = Collection::new("runtime_configs");
/// VMs whose existence the records may not match, by the agent they are made for: noted
/// before the cloud makes one and before a recorded one is forgotten for deletion, until
/// the records say again what the cloud has. What a crash left noted is deleted (kept
/// under the name it was first stored by).
pub const UNSETTLED_VMS: Collection = Collection::new("creating_vms");
/// The teams each deployment belongs to (those its creator administered), by deployment.
pub const DEPLOYMENT_TEAMS: Collection = Collection::new("deployment_teams");
/// Every version of every named resurrection config.
pub const RESURRECTION_CONFIGS: Collection = Collection::new("resurrection_configs");
/// The health monitor's alerts, by id, scoped by deployment: events of `bosh events`.
pub const ALERTS: Collection = Collection::new("alerts");
/// Compilation VMs that exist, by CID: one left by a crash is deleted by the next
/// deploy of its deployment.
pub const COMPILATION_VMS: Collection = Collection::new("compilation_vms");
/// Links a client made to a shared provider (`POST /links`, an external consumer), by id.
pub const EXTERNAL_LINKS: Collection = Collection::new("external_links");
/// The config server's variables, by full name (`/DIRECTOR/DEPLOYMENT/NAME`), scoped by
/// deployment.
pub const VARIABLES: Collection = Collection::new("variables");
/// Facts about the director itself (its UUID), beside the embedded fleet's own facts in
/// the same kind, under keys of their own.
pub const DIRECTOR: Collection = Collection::new("fleet");
/// The documents kept per task id, deleted with the task when it is pruned.
pub const PER_TASK: &[Collection] = &[TASK_TRACES, TASK_RESULTS];
