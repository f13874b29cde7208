//! The ports every job of the director reaches through: the store, the cloud, the agents
//! and the settings. A leaf: it knows nothing of tasks, plans or the facade.

use std::sync::Arc;
use std::time::Duration;

use super::agent::Agent;
use super::cpi::Cpi;
use super::cpi_trace::TracedCpi;
use super::networking::Addresses;
use super::ports::{Agents, CompileLocks, DeployPorts, Ports};
use super::records::Records;
use super::renderer::{NoRendering, Renderer};
use fleet_store::AsyncStore;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectorSettings {
    /// How long an agent may take to answer before it counts as unresponsive.
    pub agent_timeout: Duration,
    /// Snapshot persistent disks before an instance changes.
    pub snapshots: bool,
    /// How many instances a manifest may ask for.
    pub limits: super::limits::InstanceLimits,
    /// Finished tasks kept per kind; older ones are deleted with their output.
    pub tasks_kept: usize,
    /// On a database shared with other director processes: how long this process's
    /// locks and tasks outlive its last renewal (it renews every third of it). A process
    /// that died is known by it, as BOSH's director knows an expired lock.
    pub lock_timeout: Duration,
    /// Whether the resurrector's `scan and fix` recreates VMs of instances with persistent
    /// disks too (BOSH's `scan_and_fix.auto_fix_stateful_nodes`).
    pub auto_fix_stateful_nodes: bool,
}

impl Default for DirectorSettings {
    fn default() -> Self {
        DirectorSettings {
            agent_timeout: Duration::from_secs(45),
            snapshots: false,
            limits: super::limits::InstanceLimits::default(),
            // BOSH's `max_tasks`.
            tasks_kept: 2000,
            lock_timeout: Duration::from_secs(10),
            auto_fix_stateful_nodes: false,
        }
    }
}

/// What the director drives: the IaaS through its CPI, the agents on the VMs, and what
/// renders job templates for them.
#[derive(Clone)]
pub struct Infrastructure {
    pub cpi: Arc<dyn Cpi>,
    pub agent: Arc<dyn Agent>,
    pub renderer: Arc<dyn Renderer>,
}

impl Infrastructure {
    /// An infrastructure whose agents need no rendered templates.
    pub fn new(cpi: Arc<dyn Cpi>, agent: Arc<dyn Agent>) -> Self {
        Infrastructure {
            cpi,
            agent,
            renderer: Arc::new(NoRendering),
        }
    }

    pub fn rendering(self, renderer: Arc<dyn Renderer>) -> Self {
        Infrastructure { renderer, ..self }
    }
}

/// What the director's jobs need: the store, the cloud, the agents and settings.
pub struct Core {
    /// Reached asynchronously only: a job never blocks a worker thread on SQLite.
    pub store: AsyncStore,
    /// The director's records in `store`, typed.
    pub records: Records,
    pub cpi: Arc<dyn Cpi>,
    pub agents: Agents,
    pub renderer: Arc<dyn Renderer>,
    pub settings: DirectorSettings,
    /// One lock per package and stemcell: deploys running at once compile a package once,
    /// the others wait and find it compiled.
    pub compile_locks: CompileLocks,
    /// The store's addresses, planned one deploy at a time.
    pub addresses: Addresses,
    /// Held by a release upload from reading the releases to recording its own.
    pub release_uploads: Arc<tokio::sync::Mutex<()>>,
    /// The time leases are measured in: tokio's, so that tests pass it at will.
    pub clock: fleet_clock::WallClock,
}

impl Core {
    pub fn new(
        store: AsyncStore,
        infrastructure: Infrastructure,
        settings: DirectorSettings,
    ) -> Self {
        Core {
            records: Records::new(store.clone()),
            addresses: Addresses::new(store.clone()),
            store,
            // Every CPI call of a task is in its trace.
            cpi: Arc::new(TracedCpi(infrastructure.cpi)),
            agents: Agents {
                agent: infrastructure.agent,
                timeout: settings.agent_timeout,
            },
            renderer: infrastructure.renderer,
            settings,
            compile_locks: CompileLocks::default(),
            release_uploads: Arc::default(),
            clock: fleet_clock::WallClock::new(),
        }
    }

    /// Unix milliseconds by [`Core::clock`].
    pub fn now_ms(&self) -> u64 {
        self.clock.unix_millis()
    }

    /// Unix seconds by [`Core::clock`], as records and tasks are stamped.
    pub fn unix_now(&self) -> u64 {
        self.clock.unix_secs()
    }

    /// The lease a lock or this process's registration is taken for now: until the lock
    /// timeout on a shared database, for good on a store this process holds alone.
    pub fn lease(&self) -> fleet_store::Lease {
        let now = self.now_ms();
        if self.store.blocking().shared() {
            let timeout = u64::try_from(self.settings.lock_timeout.as_millis()).unwrap_or(u64::MAX);
            fleet_store::Lease {
                now,
                until: now.saturating_add(timeout),
            }
        } else {
            fleet_store::Lease::forever(now)
        }
    }

    /// What an instance's VM and disk steps reach.
    pub fn ports(&self) -> Ports {
        Ports {
            records: self.records.clone(),
            cpi: Arc::clone(&self.cpi),
            agents: self.agents.clone(),
            clock: self.clock,
            addresses: self.addresses.clone(),
            snapshots: self.settings.snapshots,
        }
    }

    /// What a deploy's executor reaches.
    pub fn deploy_ports(&self) -> DeployPorts {
        DeployPorts {
            ports: self.ports(),
            renderer: Arc::clone(&self.renderer),
            compile_locks: self.compile_locks.clone(),
        }
    }
}
