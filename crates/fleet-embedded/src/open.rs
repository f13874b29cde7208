use std::collections::VecDeque;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::definition::{CpiProgram, Definition, ExternalCpiSettings, Iaas, Vms};
use fleet_broker::{Broker, BrokerError, deployment_name};
use fleet_cpi::{CpiCommand, ExternalCpi};
use fleet_director::agent::Agent;
use fleet_director::cpi::Cpi;
use fleet_director::manifest::Count;
use fleet_director::model::{Task, TaskState};
use fleet_director::sim::SimulatedCloud;
use fleet_director::{Director, DirectorError, DirectorSettings, Infrastructure, RecreateOptions};
use fleet_iaas::cloud::{ProcessCloud, Supervision};
use fleet_iaas::external_cpi::DirectorCpi;
use fleet_store::{AsyncStore, Collection, Commits, PgStore, SqliteStore, Store, StoreError};
use fleet_store::{StoreLocation, put};
use fleet_vm::supervisor::Timings;

/// Facts about the embedded fleet as a whole (whether it was provisioned).
const FLEET: Collection = Collection::new("fleet");

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("{} is in use by another fleet-updater process", .0.display())]
    InUse(PathBuf),
    #[error("there is no embedded fleet in {} yet; `fleet-updater run` creates it", .0.display())]
    NotProvisioned(PathBuf),
    #[error("the state directory {} is a file, not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("cannot read the state directory {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Director(#[from] DirectorError),
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error("cannot open the process-backed IaaS in {}: {source}", path.display())]
    Iaas {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A release source that cannot be built, or whose upload failed.
    #[error("{0}")]
    Release(String),
    /// The definition asks for what cannot be had here.
    #[error("{0}")]
    Definition(String),
}

/// Who supervises the VMs' processes, and whether the VMs are containers.
///
/// # Errors
/// Containers asked for where they cannot be had.
fn supervision(definition: &Definition) -> Result<Supervision, FleetError> {
    let program = definition.supervisor.clone();
    let containers = match definition.vms {
        Vms::Processes => false,
        Vms::Containers => {
            if let Err(why) = fleet_vm::container::privilege() {
                return Err(FleetError::Definition(format!(
                    "vms: containers cannot be made here: {why}"
                )));
            }
            true
        }
        // Containers need the program their supervisors run as: without it (a test, a
        // benchmark in one process) `auto` is plain processes.
        Vms::Auto => match fleet_vm::container::privilege() {
            Ok(_) if program.is_some() => true,
            Ok(_) => false,
            Err(why) => {
                tracing::warn!(
                    "VMs are plain processes on this machine, not containers ({why}): their jobs run as this user, on this machine's network"
                );
                false
            }
        },
    };
    Ok(match (program, containers) {
        (Some(program), true) => Supervision::Containers { program },
        (None, true) => {
            return Err(FleetError::Definition(
                "vms: containers need the fleet-updater program, which each VM's supervisor runs as"
                    .into(),
            ));
        }
        (Some(program), false) => Supervision::Daemons { program },
        (None, false) => Supervision::InProcess,
    })
}

/// Who may change the fleet: one process at a time runs tasks and recovers from crashes;
/// any number may look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Holds the state directory's lock for as long as the fleet is open, and commits
    /// the store's writes as said.
    Exclusive(Commits),
    /// No lock, no recovery, no provisioning.
    ReadOnly,
}

impl Access {
    /// For a run in this process. Nobody outside it learns of a task as it starts, so
    /// writes are committed in groups, a tenth of a second apart at most: a large fleet
    /// runs in two thirds of the time, a process looking on (`fleet`) sees the state of
    /// at most that long ago, and a crash loses at most that much work, from the newest.
    pub const RUN: Access = Access::Exclusive(Commits::Grouped {
        every: Duration::from_millis(100),
    });

    /// For clients over HTTP: a task a client was told of is committed before it hears.
    pub const SERVE: Access = Access::Exclusive(Commits::EachCall);
}

pub struct EmbeddedFleet {
    pub broker: Arc<Broker>,
    pub cloud: Arc<SimulatedCloud>,
    /// The process-backed IaaS, when the definition asks for it; the director's cloud
    /// and agents then.
    pub processes: Option<Arc<ProcessCloud>>,
    store: AsyncStore,
    /// Released when the fleet is dropped (or the process ends, however it ends).
    _lock: Option<File>,
}

impl EmbeddedFleet {
    pub fn director(&self) -> &Director {
        self.broker.director()
    }

    /// The fleet's store, for what `serve` keeps beside the director's and the broker's
    /// records (the login throttle's failures, which processes sharing a database share).
    pub fn store(&self) -> &AsyncStore {
        &self.store
    }

    /// Whether a release's jobs, packaging scripts and templates would run on this
    /// machine itself: its VMs are processes here, not containers (with an external CPI
    /// too, whose VMs are directories).
    pub fn releases_run_on_host(&self) -> bool {
        self.processes
            .as_ref()
            .is_some_and(|p| !p.vms_are_containers())
    }

    /// Stops the jobs' processes when this process supervises them (they cannot outlive
    /// it); the next opening starts them again. VMs with their own supervisor process keep
    /// running.
    pub async fn close(&self) {
        if let Some(processes) = &self.processes {
            processes.halt().await;
        }
    }
}

const PROVISIONED: &str = "provisioned";

fn lock(state_dir: &Path) -> Result<File, FleetError> {
    let path = state_dir.join("lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| FleetError::Lock {
            path: path.clone(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(FleetError::InUse(state_dir.to_path_buf())),
        Err(TryLockError::Error(source)) => Err(FleetError::Lock { path, source }),
    }
}

/// Opens the fleet kept in `state_dir`. With [`Access::Exclusive`], on first use (or to
/// finish a first use that was cut short) the definition's instances are provisioned on
/// their starting versions, the blocked ones recorded as blocked, and a long operation
/// started on the busy ones. `progress` hears what happens.
///
/// # Errors
/// When another process holds the fleet, the state cannot be opened, or provisioning
/// cannot start.
pub async fn open(
    state_dir: &Path,
    definition: &Definition,
    access: Access,
    location: &StoreLocation,
    progress: &mut dyn FnMut(String),
) -> Result<EmbeddedFleet, FleetError> {
    if state_dir.exists() && !state_dir.is_dir() {
        return Err(FleetError::NotADirectory(state_dir.to_path_buf()));
    }
    let held = match access {
        Access::Exclusive(_) => {
            std::fs::create_dir_all(state_dir).map_err(|source| FleetError::Lock {
                path: state_dir.to_path_buf(),
                source,
            })?;
            Some(lock(state_dir)?)
        }
        Access::ReadOnly => {
            // A directory that cannot be read is not one without a fleet.
            let unreadable = |source| FleetError::Unreadable {
                path: state_dir.to_path_buf(),
                source,
            };
            if state_dir.exists() {
                std::fs::read_dir(state_dir).map_err(unreadable)?;
            }
            match (location, state_dir.join("fleet.db").try_exists()) {
                (StoreLocation::Postgres(_), _) | (_, Ok(true)) => None,
                (_, Ok(false)) => {
                    return Err(FleetError::NotProvisioned(state_dir.to_path_buf()));
                }
                (_, Err(source)) => return Err(unreadable(source)),
            }
        }
    };
    // Opening may migrate the database: blocking work, off the async workers.
    let dir = state_dir.to_path_buf();
    let commits = match access {
        Access::Exclusive(commits) => commits,
        Access::ReadOnly => Commits::EachCall,
    };
    let read_only = access == Access::ReadOnly;
    let location = location.clone();
    let opened = match tokio::task::spawn_blocking(move || -> Result<Arc<dyn Store>, StoreError> {
        Ok(match &location {
            StoreLocation::Postgres(database) => Arc::new(PgStore::connect(database)?),
            StoreLocation::Sqlite if read_only => Arc::new(SqliteStore::open_read_only(&dir)?),
            StoreLocation::Sqlite => Arc::new(SqliteStore::open_with(&dir, commits)?),
        })
    })
    .await
    {
        Ok(opened) => opened,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(StoreError::Stopped),
    };
    // One handle, so that the director, the broker and the simulated cloud share the
    // store's one worker.
    let store = AsyncStore::new(opened?);
    let cloud = Arc::new(SimulatedCloud::new(
        store.clone(),
        definition.simulation.clone(),
    ));
    let processes = match (definition.iaas, access) {
        (Iaas::Processes, Access::Exclusive(_)) => {
            let root = state_dir.join("iaas");
            let supervision = supervision(definition)?;
            let opened = ProcessCloud::open(&root, store.clone(), Timings::default(), supervision)
                .map_err(|source| FleetError::Iaas { path: root, source })?;
            // The VMs come back as after a reboot, before any task runs: the processes of
            // the instances that ran are started again, no lifecycle script runs.
            opened.boot().await;
            Some(Arc::new(opened))
        }
        _ => None,
    };
    let settings = DirectorSettings {
        // Real jobs compile and start in their own time: a compile of a large package
        // takes minutes, not the simulation's milliseconds.
        agent_timeout: match definition.iaas {
            Iaas::Simulated => Duration::from_secs(10),
            Iaas::Processes => Duration::from_secs(15 * 60),
        },
        snapshots: false,
        limits: definition.limits,
        tasks_kept: definition
            .tasks_kept
            .unwrap_or(DirectorSettings::default().tasks_kept),
        lock_timeout: definition
            .lock_timeout
            .unwrap_or(DirectorSettings::default().lock_timeout),
        auto_fix_stateful_nodes: definition.auto_fix_stateful_nodes,
    };
    let infrastructure = match (&processes, &definition.cpi) {
        (Some(p), Some(settings)) => {
            let cpi = external_cpi(settings, &store, state_dir, definition).await?;
            p.infrastructure_with(Arc::new(cpi))
        }
        (Some(p), None) => p.infrastructure(),
        (None, _) => Infrastructure::new(
            Arc::clone(&cloud) as Arc<dyn Cpi>,
            Arc::clone(&cloud) as Arc<dyn Agent>,
        ),
    };
    let director = match access {
        Access::Exclusive(_) => Director::new(store.clone(), infrastructure, settings).await?,
        Access::ReadOnly => Director::observing(store.clone(), infrastructure, settings),
    };
    let broker = Arc::new(Broker::new(
        director.clone(),
        store.clone(),
        definition.catalog.clone(),
    ));
    if let Access::Exclusive(_) = access {
        for release in &definition.releases {
            director.upload_release(release).await?;
        }
        upload_sources(&director, definition, progress).await?;
        for stemcell in &definition.stemcells {
            director.upload_stemcell(stemcell).await?;
        }
        if let Some(cloud_config) = &definition.cloud_config {
            director.update_cloud_config(cloud_config).await?;
        }
        provision(state_dir, &store, &broker, definition, progress).await?;
    }
    Ok(EmbeddedFleet {
        broker,
        cloud,
        processes,
        store,
        _lock: held,
    })
}

/// The definition's external CPI, told the director's UUID and its properties, `root`
/// (the IaaS's directory, which the fleet's agents use) added when absent.
async fn external_cpi(
    settings: &ExternalCpiSettings,
    store: &AsyncStore,
    state_dir: &Path,
    definition: &Definition,
) -> Result<DirectorCpi, FleetError> {
    let (executable, args) = match &settings.executable {
        CpiProgram::Path(path) => (path.clone(), settings.args.clone()),
        CpiProgram::ThisProgram => {
            let program = definition.supervisor.clone().ok_or_else(|| {
                FleetError::Definition(
                    "cpi.executable: `fleet-updater` names this program, which only the \
                     fleet-updater command runs as"
                        .into(),
                )
            })?;
            let mut args = vec!["cpi".to_string()];
            args.extend(settings.args.iter().cloned());
            (program, args)
        }
    };
    let mut properties = settings.properties.clone();
    let root = std::path::absolute(state_dir.join("iaas")).unwrap_or(state_dir.join("iaas"));
    properties
        .entry("root")
        .or_insert_with(|| serde_json::Value::String(root.display().to_string()));
    let uuid = fleet_director::director_uuid(store).await?;
    let command = CpiCommand {
        executable,
        args,
        env: Vec::new(),
        timeout: settings.timeout,
    };
    Ok(DirectorCpi::new(ExternalCpi::new(
        command, &uuid, properties,
    )))
}

/// Builds every version of every release source and uploads it; a version uploaded
/// before is a no-op.
async fn upload_sources(
    director: &Director,
    definition: &Definition,
    progress: &mut dyn FnMut(String),
) -> Result<(), FleetError> {
    for source in &definition.release_sources {
        for version in &source.versions {
            let (path, v) = (source.path.clone(), version.clone());
            let archive = tokio::task::spawn_blocking(move || {
                fleet_release::build_from_source(&path, &v)
                    .and_then(|tarball| fleet_release::from_tarball(&tarball))
            })
            .await
            .map_err(|e| FleetError::Release(e.to_string()))?
            .map_err(|e| FleetError::Release(format!("release source: {e}")))?;
            let name = format!("{}/{}", archive.manifest.name, archive.manifest.version);
            let task = director.upload_release_archive(archive, false).await?;
            let done = director.wait(task.id).await?;
            if done.state != TaskState::Done {
                return Err(FleetError::Release(format!(
                    "uploading release {name} failed: {}",
                    done.result.unwrap_or_default()
                )));
            }
            if done.result.as_deref() != Some(&format!("Release '{name}' already exists")) {
                progress(format!("built and uploaded release {name}"));
            }
        }
    }
    Ok(())
}

/// How many instances are provisioned at a time. All of a large fleet at once held every
/// deploy's plan in memory together (three quarters of a gigabyte for 10,000 instances),
/// and the scattered heap they left behind slowed every later allocation of the run.
const PROVISIONING_AT_ONCE: usize = 64;

/// Waits for an instance's provisioning task and tells how it ended when it failed.
async fn provisioned(
    director: &Director,
    id: String,
    task: Task,
    progress: &mut dyn FnMut(String),
) -> Result<(), FleetError> {
    let done = director.wait(task.id).await?;
    if done.state != TaskState::Done {
        progress(format!(
            "provisioning {id} failed: {}",
            done.result.unwrap_or_default()
        ));
    }
    Ok(())
}

/// Provisions what the definition wants and the store lacks, then marks the fleet as
/// provisioned; a first use cut short is finished by the next.
async fn provision(
    state_dir: &Path,
    store: &AsyncStore,
    broker: &Broker,
    definition: &Definition,
    progress: &mut dyn FnMut(String),
) -> Result<(), FleetError> {
    if store.get::<bool>(FLEET, PROVISIONED).await?.is_some() {
        return Ok(());
    }
    let director = broker.director();
    // A first use cut short left instances recorded but not deployed, deploys errored by
    // recovery, a busy operation never started: every pass makes each instance
    // provisioned, however far the last one got.
    let before = broker.instances().await?;
    let first_use = before.is_empty();
    let wanted = definition.instances();
    let done = |id: &str| {
        before
            .iter()
            .any(|v| v.instance.id == id && v.state == fleet_broker::State::Provisioned)
    };
    progress(if first_use {
        format!(
            "provisioning the embedded fleet in {} (first use): {} service instances on older versions",
            state_dir.display(),
            wanted.len()
        )
    } else {
        format!(
            "finishing the embedded fleet's provisioning in {}, cut short before: {} of {} \
             service instances to provision",
            state_dir.display(),
            wanted.iter().filter(|(id, _, _)| !done(id)).count(),
            wanted.len()
        )
    });
    let mut provisioning = VecDeque::new();
    for (id, plan, versions) in &wanted {
        if provisioning.len() == PROVISIONING_AT_ONCE
            && let Some((id, task)) = provisioning.pop_front()
        {
            provisioned(director, id, task, progress).await?;
        }
        let blocked = definition.blocked.contains(id);
        let task = if first_use {
            Some(
                broker
                    .provision(id, plan, Some(versions), blocked, &definition.placement(id))
                    .await?,
            )
        } else {
            broker
                .provision_again(id, plan, Some(versions), blocked, &definition.placement(id))
                .await?
        };
        if let Some(task) = task {
            provisioning.push_back((id.clone(), task));
        }
    }
    for (id, task) in provisioning {
        provisioned(director, id, task, progress).await?;
    }
    for id in &definition.busy {
        // One VM at a time, so that the operation outlasts the canary phase.
        let options = RecreateOptions {
            fix: true,
            canaries: Some(Count::Fixed(1)),
            max_in_flight: Some(Count::Fixed(1)),
            ..RecreateOptions::default()
        };
        match director.recreate(&deployment_name(id), options).await {
            Ok(task) => progress(format!(
                "{id} is busy with a long operation (task {}) as the run starts",
                task.id
            )),
            Err(e) => progress(format!("{id} could not be made busy: {e}")),
        }
    }
    store
        .write(vec![put(FLEET, PROVISIONED, "", &true)])
        .await?;
    progress(if definition.blocked.is_empty() {
        "provisioned; none is blocked by its owner".to_string()
    } else {
        format!(
            "provisioned; blocked by their owners: {}",
            definition.blocked.join(", ")
        )
    });
    Ok(())
}
