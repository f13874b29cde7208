//! The ports every job of the director reaches through: the store, the cloud, the agents
//! and the settings. A leaf: it knows nothing of tasks, plans or the facade.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::agent::{Agent, AgentError};
use super::cpi::Cpi;
use super::cpi_trace::TracedCpi;
use super::records::Records;
use super::renderer::{NoRendering, Renderer};
use super::trace::{Channel, note};
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
    compile_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Held from reading the claimed addresses to applying a plan's claims: deploys of
    /// this process then never lose a plan to one another, however many start at once
    /// (the store still refuses a plan that lost to another process).
    pub ip_planning: tokio::sync::Mutex<()>,
    /// Held by a release upload from reading the releases to recording its own.
    pub release_uploads: tokio::sync::Mutex<()>,
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
            store,
            // Every CPI call of a task is in its trace.
            cpi: Arc::new(TracedCpi(infrastructure.cpi)),
            agents: Agents {
                agent: infrastructure.agent,
                timeout: settings.agent_timeout,
            },
            renderer: infrastructure.renderer,
            settings,
            compile_locks: Mutex::new(HashMap::new()),
            ip_planning: tokio::sync::Mutex::new(()),
            release_uploads: tokio::sync::Mutex::new(()),
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

    /// The lock for compiling `key`.
    pub fn compile_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.compile_locks.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(locks.entry(key.to_string()).or_default())
    }
}

/// The agents as the director's steps reach them: each call bounded by the agent timeout
/// and noted in the task's trace. A step that only talks to agents takes this, not
/// [`Core`].
#[derive(Clone)]
pub struct Agents {
    pub agent: Arc<dyn Agent>,
    /// How long an agent may take to answer before it counts as unresponsive.
    pub timeout: Duration,
}

impl Agents {
    /// Bounds an agent call by the agent timeout.
    pub async fn call<T>(
        &self,
        agent_id: &str,
        method: &str,
        call: impl Future<Output = Result<T, AgentError>>,
    ) -> Result<T, AgentError> {
        let started = tokio::time::Instant::now();
        let answer = match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(AgentError::Unresponsive {
                agent_id: agent_id.to_string(),
                method: method.to_string(),
            }),
        };
        let ms = started.elapsed().as_millis();
        note(Channel::Debug, || match &answer {
            Ok(_) => format!("agent {agent_id}: {method} answered ({ms} ms)"),
            Err(e) => format!("agent {agent_id}: {method} failed: {e} ({ms} ms)"),
        });
        answer
    }
}
