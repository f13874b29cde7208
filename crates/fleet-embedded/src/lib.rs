//! The embedded default fleet: a broker over an embedded director in a simulated IaaS, or
//! one whose jobs run as real processes, kept in the state directory. A fleet definition says what exists (releases, stemcells,
//! plans), what is provisioned on first use, and how the simulated cloud behaves.

mod definition;
mod open;

pub use definition::{
    CpiProgram, DEMO, DEMO_CONFIG, Definition, DefinitionError, ExternalCpiSettings, FaultText,
    Iaas, Provision, ReleaseSource, SimulationError, parse_fault, parse_latency,
};
pub use open::{Access, EmbeddedFleet, FleetError, open};
