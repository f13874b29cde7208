//! The director's side of the IaaSes beyond the simulation. The process-backed IaaS: its
//! CPI and its agents as the director's ports (`cloud`, `agent`, `instance_spec`), the
//! director's template renderer over its store (`rendering`), what the IaaS reads of that
//! store (`stored`), the same IaaS served as an external CPI (`cpi_server`, behind
//! `fleet-updater cpi`) with a networked agent started per VM (`networked_agent`). And
//! any external CPI as the director's `Cpi` (`external_cpi`). The VM's own side
//! (supervision, lifecycle, scripts) is `fleet-vm`, which this drives and never the
//! other way round.

mod agent;
mod blocking;
pub mod cloud;
pub mod cpi_server;
pub mod external_cpi;
mod instance_spec;
pub mod networked_agent;
pub mod rendering;
mod stored;
