//! What an instance's VM and disk steps reach, and nothing else: the records, the CPI,
//! the agents and the clock. The core's store, renderer, settings and locks stay out of
//! their reach.

use fleet_clock::WallClock;

use crate::Core;
use crate::core::Agents;
use crate::cpi::Cpi;
use crate::records::Records;

pub struct Ports<'a> {
    pub records: &'a Records,
    pub cpi: &'a dyn Cpi,
    pub agents: &'a Agents,
    pub clock: &'a WallClock,
}

impl<'a> Ports<'a> {
    pub fn of(core: &'a Core) -> Self {
        Ports {
            records: &core.records,
            cpi: &*core.cpi,
            agents: &core.agents,
            clock: &core.clock,
        }
    }
}
