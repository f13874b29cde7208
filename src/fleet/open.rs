use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::definition::Definition;
use crate::broker::{Broker, BrokerError, deployment_name};
use crate::director::agent::Agent;
use crate::director::cpi::Cpi;
use crate::director::model::TaskState;
use crate::director::sim::SimulatedCloud;
use crate::director::store::{SqliteStore, Store, StoreError};
use crate::director::{Director, DirectorError, DirectorSettings, RecreateOptions};

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Director(#[from] DirectorError),
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

pub struct EmbeddedFleet {
    pub broker: Arc<Broker>,
    pub cloud: Arc<SimulatedCloud>,
}

impl EmbeddedFleet {
    pub fn director(&self) -> &Director {
        self.broker.director()
    }
}

/// Opens the fleet kept in `state_dir`. On first use (no service instances yet) the
/// definition's instances are provisioned on their starting versions, the blocked ones
/// blocked, and a long operation started on the busy ones. `progress` hears what happens.
///
/// # Errors
/// When the state cannot be opened or provisioning cannot start.
pub async fn open(
    state_dir: &Path,
    definition: &Definition,
    progress: &mut dyn FnMut(String),
) -> Result<EmbeddedFleet, FleetError> {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(state_dir)?);
    let cloud = Arc::new(SimulatedCloud::new(
        Arc::clone(&store),
        definition.simulation.clone(),
    ));
    let settings = DirectorSettings {
        agent_timeout: Duration::from_secs(10),
        watch_poll: Duration::from_millis(250),
    };
    let director = Director::new(
        Arc::clone(&store),
        Arc::clone(&cloud) as Arc<dyn Cpi>,
        Arc::clone(&cloud) as Arc<dyn Agent>,
        settings,
    )?;
    for release in &definition.releases {
        director.upload_release(release)?;
    }
    for stemcell in &definition.stemcells {
        director.upload_stemcell(stemcell)?;
    }
    let broker = Arc::new(Broker::new(
        director.clone(),
        store,
        definition.catalog.clone(),
    ));
    let wanted = definition.instances();
    if broker.instances()?.is_empty() && !wanted.is_empty() {
        progress(format!(
            "provisioning the embedded fleet in {} (first use): {} service instances on older versions",
            state_dir.display(),
            wanted.len()
        ));
        let mut tasks = Vec::new();
        for (id, plan, versions) in &wanted {
            tasks.push((id, broker.provision(id, plan, Some(versions))?));
        }
        for (id, task) in tasks {
            let done = director.wait(task.id).await?;
            if done.state != TaskState::Done {
                progress(format!(
                    "provisioning {id} failed: {}",
                    done.result.unwrap_or_default()
                ));
            }
        }
        for id in &definition.blocked {
            broker.set_blocked(id, true)?;
        }
        for id in &definition.busy {
            // One VM at a time, so that the operation outlasts the canary phase.
            let options = RecreateOptions {
                fix: true,
                canaries: Some(1),
                max_in_flight: Some(1),
                ..RecreateOptions::default()
            };
            let task = director.recreate(&deployment_name(id), options)?;
            progress(format!(
                "{id} is busy with a long operation (task {}) as the run starts",
                task.id
            ));
        }
        progress(format!(
            "provisioned; blocked by their owners: {}",
            definition.blocked.join(", ")
        ));
    }
    Ok(EmbeddedFleet { broker, cloud })
}
