//! `fleet-updater` brings a fleet of BOSH-deployed service instances up to date.
//!
//! This package is the command line: the configuration and the wiring of the layers,
//! each a crate of the workspace (see `docs/architecture.md`). The layers are
//! re-exported under their old module names so that the binary, the examples and the
//! integration tests name them in one way.

pub mod canary_check;
pub mod config;

pub use fleet_agent as agent;
pub use fleet_broker as broker;
pub use fleet_clock as clock;
pub use fleet_cpi as cpi;
pub use fleet_create_env as create_env;
pub use fleet_director as director;
pub use fleet_embedded as fleet;
pub use fleet_iaas as iaas;
pub use fleet_ipset as ipset;
pub use fleet_output as output;
pub use fleet_release as release;
pub use fleet_render as render;
pub use fleet_rollout as rollout;
pub use fleet_schedule as schedule;
pub use fleet_serve as serve;
pub use fleet_store as store;
pub use fleet_vm as vm;
pub use fleet_yaml as yaml;

/// The seam between the engine and the fleets, with every adapter.
pub mod inventory {
    pub use fleet_inventory_broker as broker_http;
    pub use fleet_inventory_director as director_http;
    pub use fleet_inventory_embedded as embedded;
    pub use fleet_inventory_scripted as scripted;
    pub use fleet_rollout::inventory::*;
}
