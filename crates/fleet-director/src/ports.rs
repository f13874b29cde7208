//! The narrow ports the director's steps reach the world through. A task takes the
//! [`crate::Core`] and hands each step only what it uses: an instance's update reaches
//! records, the CPI, the agents, the clock and address releases, never the store, the
//! renderer or the settings as a whole.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleet_clock::WallClock;

use super::agent::{Agent, AgentError};
use super::cpi::Cpi;
use super::networking::Addresses;
use super::records::Records;
use super::renderer::Renderer;
use super::trace::{Channel, note};

/// What an instance's steps reach (create, update, stop and delete its VM and disk), and
/// the deploy's executor with them.
#[derive(Clone)]
pub struct Ports {
    pub records: Records,
    pub cpi: Arc<dyn Cpi>,
    pub agents: Agents,
    pub clock: WallClock,
    pub addresses: Addresses,
    /// Snapshot persistent disks before an instance changes.
    pub snapshots: bool,
}

/// What a deploy's executor reaches: the instances' ports, the renderer of their
/// templates, and the compile locks shared with the deploys running beside it.
#[derive(Clone)]
pub struct DeployPorts {
    pub ports: Ports,
    pub renderer: Arc<dyn Renderer>,
    pub compile_locks: CompileLocks,
}

/// One lock per package and stemcell: deploys running at once compile a package once, the
/// others wait and find it compiled.
#[derive(Clone, Default)]
pub struct CompileLocks(Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>);

impl CompileLocks {
    /// The lock for compiling `key`.
    pub fn of(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(locks.entry(key.to_string()).or_default())
    }
}

/// The agents as the director's steps reach them: each call bounded by the agent timeout
/// and noted in the task's trace. A step that only talks to agents takes this, not
/// the core.
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
