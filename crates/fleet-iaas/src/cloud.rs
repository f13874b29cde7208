//! The process-backed IaaS: the director's CPI and agents over VMs that are directories
//! of this machine (`<root>/vms/CID`), persistent disks that are directories too
//! (`<root>/disks/CID`), and jobs that run as real processes. The agent reads what it
//! places from the director's store: release records and their archives, and the
//! packages compiled for the VM's stemcell.
//!
//! Each VM's processes are supervised by the VM's own supervisor process
//! ([`Supervision::Daemons`], [`fleet_vm::daemon`]), which outlives the command that started
//! it as monit outlives a BOSH agent's restart: the fleet's processes run until their VMs
//! are stopped or deleted. [`Supervision::InProcess`] supervises them inside this process
//! instead (tests and benchmarks, which have no `fleet-updater` program to start): then
//! they live while it does, [`ProcessCloud::halt`] stops them all, and processes a
//! crashed predecessor left are ended by their pidfiles when the cloud is opened, so that
//! nothing runs that no supervisor watches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fleet_director::Infrastructure;
use fleet_director::agent::{Agent, AgentError};
use fleet_director::cpi::{Cpi, CpiError, VmRequest};
use fleet_director::model::{InstanceSpec, Stemcell};
use fleet_store::AsyncStore;
use serde::{Deserialize, Serialize};

use super::rendering::TemplateRenderer;
use crate::blocking::on_iaas;
use fleet_vm::daemon::{self, Daemon};
use fleet_vm::iaas::{ContainerSettings, IaasError, ProcessIaas, write_atomically};
use fleet_vm::jobs;
use fleet_vm::lifecycle::Lifecycle;
use fleet_vm::sandbox::Sandbox;

use fleet_vm::supervisor::{Processes, Supervisor, Timings};

/// What the agent keeps of its VM in the VM's directory (`agent.json`), to find it again
/// after a restart: what was applied, whether its jobs were started, and the persistent
/// disk it mounted.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct AgentFacts {
    #[serde(default)]
    pub(crate) applied: Option<InstanceSpec>,
    #[serde(default)]
    pub(crate) jobs: Vec<String>,
    #[serde(default)]
    pub(crate) started: bool,
    #[serde(default)]
    pub(crate) disk: Option<String>,
}

const AGENT_FACTS: &str = fleet_vm::iaas::AGENT_RECORD;

#[derive(Default)]
pub(crate) struct Running {
    pub(crate) applied: Option<InstanceSpec>,
    pub(crate) jobs: Vec<String>,
    pub(crate) supervisor: Option<Arc<dyn Processes>>,
    pub(crate) started: bool,
}

pub(crate) struct Vm {
    pub(crate) cid: String,
    pub(crate) agent_id: String,
    pub(crate) sandbox: Sandbox,
    facts: Mutex<AgentFacts>,
    /// Held from changing the facts to their write's end: writes land in the order the
    /// changes were made.
    writing: tokio::sync::Mutex<()>,
    pub(crate) running: tokio::sync::Mutex<Running>,
    /// The last reading of its CPU time, for the use since then in its vitals.
    pub(crate) cpu: Mutex<Option<fleet_vm::container::vitals::CpuReading>>,
}

impl Vm {
    /// The VM `cid` of `agent_id` as its directory holds it, with what its agent kept.
    /// Blocking: it reads the VM's files.
    fn found(iaas: &ProcessIaas, cid: &str, agent_id: &str) -> std::io::Result<Vm> {
        let sandbox = iaas.sandbox(cid)?;
        let facts = std::fs::read(sandbox.root().join(AGENT_FACTS))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        Ok(Vm {
            cid: cid.to_string(),
            agent_id: agent_id.to_string(),
            sandbox,
            facts: Mutex::new(facts),
            writing: tokio::sync::Mutex::new(()),
            running: tokio::sync::Mutex::new(Running::default()),
            cpu: Mutex::new(None),
        })
    }

    pub(crate) fn facts(&self) -> AgentFacts {
        self.facts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes what the agent keeps of the VM, on disk too: written (and synced) on
    /// tokio's blocking pool, since it happens on every agent call that changes the VM.
    pub(crate) async fn remember(
        &self,
        change: impl FnOnce(&mut AgentFacts),
    ) -> std::io::Result<()> {
        let _writing = self.writing.lock().await;
        let facts = {
            let mut facts = self.facts.lock().unwrap_or_else(|p| p.into_inner());
            change(&mut facts);
            facts.clone()
        };
        let text = serde_json::to_vec_pretty(&facts).map_err(std::io::Error::other)?;
        let path = self.sandbox.root().join(AGENT_FACTS);
        tokio::task::spawn_blocking(move || write_atomically(&path, &text))
            .await
            .map_err(std::io::Error::other)?
            .map_err(std::io::Error::other)
    }
}

/// Where a VM's processes are supervised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Supervision {
    /// In this process: the processes live while it does.
    InProcess,
    /// In a supervisor process per VM, `PROGRAM vm-supervisor VM_DIR`, which outlives
    /// the command that started it.
    Daemons { program: PathBuf },
    /// Every VM a container ([`fleet_vm::container`]), supervised by a supervisor process
    /// inside it, `PROGRAM vm-supervisor /var/vcap`, which lives as long as the container.
    Containers { program: PathBuf },
}

impl Supervision {
    /// The handle on a VM's own supervisor process.
    pub(crate) fn daemon(&self, vm: &Sandbox) -> Option<Daemon> {
        match self {
            Supervision::InProcess => None,
            Supervision::Daemons { program } => Some(Daemon::new(vm.root(), program)),
            Supervision::Containers { program } => Some(Daemon::of(vm, program)),
        }
    }
}

pub struct ProcessCloud {
    pub(crate) iaas: ProcessIaas,
    pub(crate) supervision: Supervision,
    pub(crate) store: AsyncStore,
    pub(crate) timings: Timings,
    /// The VMs whose agents this process has met, by agent id.
    pub(crate) vms: Mutex<HashMap<String, Arc<Vm>>>,
}

fn cpi_error(e: impl std::fmt::Display) -> CpiError {
    CpiError(e.to_string())
}

impl ProcessCloud {
    /// The cloud whose VMs and disks live under `root`, finding the VMs made before.
    /// Processes left by a process that ended without stopping them are ended: the next
    /// `start` of their VMs starts them again under supervision.
    ///
    /// # Errors
    /// When `root` cannot be made or read.
    pub fn open(
        root: &Path,
        store: AsyncStore,
        timings: Timings,
        supervision: Supervision,
    ) -> std::io::Result<Self> {
        let mut iaas = ProcessIaas::open(root).map_err(std::io::Error::other)?;
        if let Supervision::Containers { program } = &supervision {
            iaas = iaas.with_program(program);
            // The containers a machine restart ended come back, those of VMs deleted
            // while no process watched go.
            iaas.restart_containers().map_err(std::io::Error::other)?;
        }
        let cloud = ProcessCloud {
            iaas,
            supervision,
            store,
            timings,
            vms: Mutex::new(HashMap::new()),
        };
        for record in cloud.iaas.vms().map_err(std::io::Error::other)? {
            let vm = cloud.meet(&record.cid, &record.agent_id)?;
            // A VM's own supervisor ends what it finds left when it starts again.
            if cloud.supervision == Supervision::InProcess {
                daemon::end_leftovers(&vm.sandbox);
            }
        }
        Ok(cloud)
    }

    /// The VM of an agent met for the first time: what it kept is read back.
    fn meet(&self, cid: &str, agent_id: &str) -> std::io::Result<Arc<Vm>> {
        Ok(self.remember(Vm::found(&self.iaas, cid, agent_id)?))
    }

    /// Keeps `vm` as the VM of its agent.
    fn remember(&self, vm: Vm) -> Arc<Vm> {
        let vm = Arc::new(vm);
        let agent_id = vm.agent_id.clone();
        self.vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(agent_id, Arc::clone(&vm));
        vm
    }

    fn known(&self) -> Vec<Arc<Vm>> {
        self.vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    fn vm(&self, cid: &str) -> Option<Arc<Vm>> {
        self.known().into_iter().find(|vm| vm.cid == cid)
    }

    /// The VM of `agent_id`: one this process knows, or one a CPI in another process
    /// made since, found by its record; none once its VM is gone.
    pub(crate) async fn agent(&self, agent_id: &str, method: &str) -> Result<Arc<Vm>, AgentError> {
        let unresponsive = || AgentError::Unresponsive {
            agent_id: agent_id.to_string(),
            method: method.to_string(),
        };
        let known = self
            .vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent_id)
            .cloned();
        if let Some(vm) = known {
            let cid = vm.cid.clone();
            let there = on_iaas(&self.iaas, move |iaas| Ok(iaas.has_vm(&cid))).await;
            if matches!(there, Ok(Ok(true))) {
                return Ok(vm);
            }
            self.vms
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(agent_id);
            return Err(unresponsive());
        }
        // Every VM record is read to find it: on the blocking pool, as the CPI's work is.
        let agent = agent_id.to_string();
        let found = on_iaas(&self.iaas, move |iaas| {
            let Some(record) = iaas.vm_of_agent(&agent)? else {
                return Ok(None);
            };
            Vm::found(iaas, &record.cid, &agent)
                .map(Some)
                .map_err(|source| IaasError::Io {
                    what: format!("VM {}", record.cid),
                    source,
                })
        })
        .await;
        match found {
            Ok(Ok(Some(vm))) => Ok(self.remember(vm)),
            _ => Err(unresponsive()),
        }
    }

    pub(crate) fn disk_dir(&self, cid: &str) -> PathBuf {
        self.iaas.disk_dir(cid)
    }

    /// The disk the agent mounts at `store/` when its jobs start: the one it mounted,
    /// while the CPI has it attached.
    pub(crate) async fn mounted_disk(&self, vm: &Vm) -> Option<PathBuf> {
        let disk = vm.facts().disk?;
        let cid = vm.cid.clone();
        let attached = on_iaas(&self.iaas, move |iaas| iaas.vm(&cid))
            .await
            .ok()?
            .ok()?
            .disks;
        attached.contains(&disk).then(|| self.disk_dir(&disk))
    }

    /// The cloud as the director drives it: its CPI, its agents, and the renderer of the
    /// templates they place.
    pub fn infrastructure(self: &Arc<Self>) -> Infrastructure {
        self.infrastructure_with(Arc::clone(self) as Arc<dyn Cpi>)
    }

    /// The same with another CPI over the same VMs (`fleet-updater cpi`, run as an
    /// external CPI): its agents find the VMs it makes by their records.
    pub fn infrastructure_with(self: &Arc<Self>, cpi: Arc<dyn Cpi>) -> Infrastructure {
        Infrastructure::new(cpi, Arc::clone(self) as Arc<dyn Agent>).rendering(Arc::new(
            TemplateRenderer::new(
                self.store.clone(),
                if self.vms_are_containers() {
                    fleet_render::Isolation::Sandbox
                } else {
                    fleet_render::Isolation::Host
                },
            ),
        ))
    }

    /// How many VMs there are.
    pub fn vm_count(&self) -> usize {
        self.iaas.vms().map_or(0, |v| v.len())
    }

    /// Brings the VMs back as a reboot would: the processes of every VM whose jobs were
    /// started are started again by their supervisor, and no lifecycle script runs
    /// (seed 003, "Non-Bosh VM Operations").
    pub async fn boot(&self) {
        for vm in self.known() {
            let facts = vm.facts();
            let (Some(applied), true) = (facts.applied.clone(), facts.started) else {
                continue;
            };
            let mut running = vm.running.lock().await;
            if running.supervisor.is_some() {
                continue;
            }
            if let Some(disk) = self.mounted_disk(&vm).await {
                let _ = vm.sandbox.mount(&disk);
            }
            let supervisor: Arc<dyn Processes> = match &self.supervision {
                Supervision::InProcess => {
                    let Ok(processes) = jobs::processes(&vm.sandbox, &facts.jobs) else {
                        tracing::warn!(vm = %vm.cid, "its jobs cannot be read; left stopped");
                        continue;
                    };
                    let s = Supervisor::new(vm.sandbox.clone(), processes, self.timings);
                    s.start().await;
                    Arc::new(s)
                }
                Supervision::Daemons { .. } | Supervision::Containers { .. } => {
                    let Some(d) = self.supervision.daemon(&vm.sandbox) else {
                        continue;
                    };
                    if let Err(e) = d.boot(&facts.jobs).await {
                        tracing::warn!(vm = %vm.cid, error = %e, "its jobs were not started");
                        continue;
                    }
                    Arc::new(d)
                }
            };
            running.supervisor = Some(supervisor);
            running.jobs = facts.jobs.clone();
            running.applied = Some(applied);
            running.started = true;
        }
    }

    /// Whether its VMs are containers; otherwise the jobs of the releases they run run on
    /// this machine itself.
    pub fn vms_are_containers(&self) -> bool {
        matches!(self.supervision, Supervision::Containers { .. })
    }

    /// Every VM's process id that runs now, for checks that nothing is left behind.
    pub async fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for vm in self.known() {
            let supervisor = vm.running.lock().await.supervisor.clone();
            if let Some(s) = supervisor {
                let statuses = s.statuses().await.unwrap_or_default();
                pids.extend(statuses.iter().filter_map(|p| p.pid));
            }
        }
        pids
    }

    /// Stops every VM's processes, running no script, when this process supervises them:
    /// they cannot outlive it. VMs with their own supervisor keep theirs running.
    pub async fn halt(&self) {
        if self.supervision != Supervision::InProcess {
            return;
        }
        for vm in self.known() {
            let mut running = vm.running.lock().await;
            if let Some(s) = running.supervisor.take() {
                let _ = s.stop().await;
            }
            running.started = false;
        }
    }
}

/// A CPI's error as the director reads it: a VM or disk already gone is what delete
/// calls want.
fn gone_is_fine(outcome: Result<(), IaasError>) -> Result<(), CpiError> {
    match outcome {
        Err(IaasError::VmNotFound(_) | IaasError::DiskNotFound(_)) | Ok(()) => Ok(()),
        Err(e) => Err(cpi_error(e)),
    }
}

#[async_trait]
impl Cpi for ProcessCloud {
    /// `containers`, or `processes` for VMs that are directories of this machine.
    fn name(&self) -> String {
        if self.vms_are_containers() {
            "containers"
        } else {
            "processes"
        }
        .into()
    }

    async fn create_stemcell(&self, stemcell: &Stemcell) -> Result<Option<String>, CpiError> {
        let properties = serde_json::json!({
            "name": stemcell.name, "operating_system": stemcell.os, "version": stemcell.version,
        });
        on_iaas(&self.iaas, move |iaas| {
            iaas.create_stemcell("", &properties)
        })
        .await
        .map_err(cpi_error)?
        .map(Some)
        .map_err(cpi_error)
    }

    async fn create_vm(&self, request: &VmRequest) -> Result<String, CpiError> {
        let networks = match &request.network_settings {
            serde_json::Value::Object(settings) => settings.clone(),
            _ => request
                .networks
                .iter()
                .map(|(name, ip)| {
                    let network = match ip {
                        Some(ip) => serde_json::json!({"type": "manual", "ip": ip.to_string()}),
                        None => serde_json::json!({"type": "dynamic"}),
                    };
                    (name.clone(), network)
                })
                .collect(),
        };
        let stemcell = request
            .stemcell_cid
            .clone()
            .unwrap_or_else(|| request.stemcell.clone());
        let env = serde_json::json!({"bosh": {"group": request.deployment}});
        let mut metadata = serde_json::Map::new();
        metadata.insert("deployment".into(), request.deployment.clone().into());
        metadata.insert("name".into(), request.instance.clone().into());
        if let Some(id) = &request.instance_id {
            metadata.insert("id".into(), id.clone().into());
        }
        let (agent_id, cloud_properties) = (
            request.agent_id.clone(),
            serde_json::Value::Object(request.cloud_properties.clone()),
        );
        // A container is named for its instance, as BOSH names a VM's host.
        let container = self.vms_are_containers().then(|| ContainerSettings {
            hostname: request
                .instance_id
                .clone()
                .unwrap_or_else(|| request.agent_id.clone()),
            compilation: request.instance_id.is_none(),
            own_agent: false,
        });
        let record = on_iaas(&self.iaas, move |iaas| {
            let record = iaas.create_vm(
                &agent_id,
                &stemcell,
                &cloud_properties,
                &serde_json::Value::Object(networks),
                &env,
            )?;
            iaas.set_vm_metadata(&record.cid, &metadata)?;
            if let Some(settings) = container
                && let Err(e) = iaas.start_container(&record.cid, settings)
            {
                // Nothing of a VM that did not start is left.
                let _ = iaas.delete_vm(&record.cid);
                return Err(e);
            }
            Ok(record)
        })
        .await
        .map_err(cpi_error)?
        .map_err(cpi_error)?;
        self.meet(&record.cid, &record.agent_id)
            .map_err(cpi_error)?;
        Ok(record.cid)
    }

    async fn delete_vm(&self, cid: &str) -> Result<(), CpiError> {
        if let Some(vm) = self.vm(cid) {
            if let Some(s) = vm.running.lock().await.supervisor.take() {
                let _ = s.stop().await;
            }
            self.vms
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&vm.agent_id);
        }
        // Its supervisor, reached as any VM's is (a container's through its own directory).
        if let Ok(sandbox) = self.iaas.sandbox(cid)
            && let Some(daemon) = self.supervision.daemon(&sandbox)
        {
            daemon.exit().await;
        }
        let cid = cid.to_string();
        gone_is_fine(
            on_iaas(&self.iaas, move |iaas| iaas.delete_vm(&cid))
                .await
                .map_err(cpi_error)?,
        )
    }

    async fn has_vm(&self, cid: &str) -> Result<bool, CpiError> {
        Ok(self.iaas.has_vm(cid))
    }

    async fn vm_of_agent(&self, agent_id: &str) -> Result<Option<String>, CpiError> {
        let agent = agent_id.to_string();
        let found = on_iaas(&self.iaas, move |iaas| iaas.vm_of_agent(&agent))
            .await
            .map_err(cpi_error)?
            .map_err(cpi_error)?;
        Ok(found.map(|vm| vm.cid))
    }

    async fn reboot_vm(&self, cid: &str) -> Result<(), CpiError> {
        let record = self.iaas.vm(cid).map_err(cpi_error)?;
        let vm = self
            .agent(&record.agent_id, "reboot")
            .await
            .map_err(cpi_error)?;
        let running = vm.running.lock().await;
        if let (Some(s), true) = (&running.supervisor, running.started) {
            let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &**s);
            lifecycle.reboot().await.map_err(cpi_error)?;
        }
        Ok(())
    }

    async fn create_disk(
        &self,
        size: u64,
        cloud_properties: &serde_json::Map<String, serde_json::Value>,
        _vm_cid: &str,
    ) -> Result<String, CpiError> {
        let properties = serde_json::Value::Object(cloud_properties.clone());
        on_iaas(&self.iaas, move |iaas| iaas.create_disk(size, &properties))
            .await
            .map_err(cpi_error)?
            .map_err(cpi_error)
    }

    async fn delete_disk(&self, disk_cid: &str) -> Result<(), CpiError> {
        let disk = disk_cid.to_string();
        gone_is_fine(
            on_iaas(&self.iaas, move |iaas| iaas.delete_disk(&disk))
                .await
                .map_err(cpi_error)?,
        )
    }

    async fn attach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        let (vm, disk) = (vm_cid.to_string(), disk_cid.to_string());
        on_iaas(&self.iaas, move |iaas| iaas.attach_disk(&vm, &disk))
            .await
            .map_err(cpi_error)?
            .map(|_| ())
            .map_err(cpi_error)
    }

    async fn detach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        let (vm, disk) = (vm_cid.to_string(), disk_cid.to_string());
        gone_is_fine(
            on_iaas(&self.iaas, move |iaas| iaas.detach_disk(&vm, &disk))
                .await
                .map_err(cpi_error)?,
        )
    }

    async fn snapshot_disk(&self, disk_cid: &str) -> Result<String, CpiError> {
        let disk = disk_cid.to_string();
        on_iaas(&self.iaas, move |iaas| iaas.snapshot_disk(&disk))
            .await
            .map_err(cpi_error)?
            .map_err(cpi_error)
    }
}
