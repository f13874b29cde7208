//! The process-backed IaaS: the director's CPI and agents over VMs that are directories
//! of this machine (`<root>/vms/CID`), persistent disks that are directories too
//! (`<root>/disks/CID`), and jobs that run as real processes. The agent reads what it
//! places from the director's store: release records and their archives, and the
//! packages compiled for the VM's stemcell.
//!
//! Each VM's processes are supervised by the VM's own supervisor process
//! ([`Supervision::Daemons`], [`crate::daemon`]), which outlives the command that started
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
use fleet_director::model::InstanceSpec;
use fleet_store::AsyncStore;
use serde::{Deserialize, Serialize};

use super::daemon::{self, Daemon};
use super::jobs;
use super::lifecycle::Lifecycle;
use super::rendering::TemplateRenderer;
use super::sandbox::Sandbox;
use super::signal;
use super::supervisor::{Processes, Supervisor, Timings};

/// What the cloud keeps of a VM on its disk, to find it again after a restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct VmFacts {
    pub(crate) cid: String,
    pub(crate) agent_id: String,
    pub(crate) stemcell: String,
    pub(crate) deployment: String,
    pub(crate) instance: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) az: Option<String>,
    pub(crate) networks: Vec<(String, Option<std::net::Ipv4Addr>)>,
    pub(crate) disk: Option<String>,
    /// What was applied and whether its jobs were started: what a boot brings back.
    #[serde(default)]
    pub(crate) applied: Option<InstanceSpec>,
    #[serde(default)]
    pub(crate) jobs: Vec<String>,
    #[serde(default)]
    pub(crate) started: bool,
}

#[derive(Default)]
pub(crate) struct Running {
    pub(crate) applied: Option<InstanceSpec>,
    pub(crate) jobs: Vec<String>,
    pub(crate) supervisor: Option<Arc<dyn Processes>>,
    pub(crate) started: bool,
}

pub(crate) struct Vm {
    pub(crate) facts: Mutex<VmFacts>,
    pub(crate) sandbox: Sandbox,
    pub(crate) running: tokio::sync::Mutex<Running>,
}

impl Vm {
    pub(crate) fn facts(&self) -> VmFacts {
        self.facts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes what is kept of the VM, on disk too.
    pub(crate) fn remember(&self, change: impl FnOnce(&mut VmFacts)) -> std::io::Result<()> {
        change(&mut self.facts.lock().unwrap_or_else(|p| p.into_inner()));
        self.save()
    }

    fn save(&self) -> std::io::Result<()> {
        let facts = self.facts();
        let text = serde_json::to_string_pretty(&facts).map_err(std::io::Error::other)?;
        std::fs::write(self.sandbox.root().join("vm.json"), text)
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
}

pub struct ProcessCloud {
    pub(crate) root: PathBuf,
    pub(crate) supervision: Supervision,
    pub(crate) store: AsyncStore,
    pub(crate) timings: Timings,
    /// By VM cid; agents are found by their id through `agents`.
    pub(crate) vms: Mutex<HashMap<String, Arc<Vm>>>,
    pub(crate) agents: Mutex<HashMap<String, String>>,
}

fn cpi_error(e: impl std::fmt::Display) -> CpiError {
    CpiError(e.to_string())
}

fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the system's random source works");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-{hex}")
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
        // Scripts run elsewhere and disks are linked: every path must be absolute.
        let root = &std::path::absolute(root)?;
        for dir in ["vms", "disks", "snapshots"] {
            std::fs::create_dir_all(root.join(dir))?;
        }
        let cloud = ProcessCloud {
            root: root.to_path_buf(),
            supervision,
            store,
            timings,
            vms: Mutex::new(HashMap::new()),
            agents: Mutex::new(HashMap::new()),
        };
        for entry in std::fs::read_dir(root.join("vms"))? {
            let dir = entry?.path();
            let Ok(text) = std::fs::read_to_string(dir.join("vm.json")) else {
                continue;
            };
            let Ok(facts) = serde_json::from_str::<VmFacts>(&text) else {
                continue;
            };
            let sandbox = Sandbox::create(&dir)?;
            // A VM's own supervisor ends what it finds left when it starts again.
            if cloud.supervision == Supervision::InProcess {
                end_leftovers(&sandbox);
            }
            cloud.insert(facts, sandbox);
        }
        Ok(cloud)
    }

    fn insert(&self, facts: VmFacts, sandbox: Sandbox) -> Arc<Vm> {
        let vm = Arc::new(Vm {
            facts: Mutex::new(facts.clone()),
            sandbox,
            running: tokio::sync::Mutex::new(Running::default()),
        });
        self.vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(facts.cid.clone(), Arc::clone(&vm));
        self.agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(facts.agent_id, facts.cid);
        vm
    }

    pub(crate) fn vm(&self, cid: &str) -> Option<Arc<Vm>> {
        self.vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(cid)
            .cloned()
    }

    pub(crate) fn agent(&self, agent_id: &str, method: &str) -> Result<Arc<Vm>, AgentError> {
        let cid = self
            .agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent_id)
            .cloned();
        cid.and_then(|c| self.vm(&c))
            .ok_or_else(|| AgentError::Unresponsive {
                agent_id: agent_id.to_string(),
                method: method.to_string(),
            })
    }

    pub(crate) fn disk_dir(&self, cid: &str) -> PathBuf {
        self.root.join("disks").join(cid)
    }

    /// The cloud as the director drives it: its CPI, its agents, and the renderer of the
    /// templates they place.
    pub fn infrastructure(self: &Arc<Self>) -> Infrastructure {
        Infrastructure::new(
            Arc::clone(self) as Arc<dyn Cpi>,
            Arc::clone(self) as Arc<dyn Agent>,
        )
        .rendering(Arc::new(TemplateRenderer::new(self.store.clone())))
    }

    /// How many VMs there are.
    pub fn vm_count(&self) -> usize {
        self.vms.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Brings the VMs back as a reboot would: the processes of every VM whose jobs were
    /// started are started again by their supervisor, and no lifecycle script runs
    /// (seed 003, "Non-Bosh VM Operations").
    pub async fn boot(&self) {
        let vms: Vec<Arc<Vm>> = self
            .vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for vm in vms {
            let facts = vm.facts();
            let (Some(applied), true) = (facts.applied.clone(), facts.started) else {
                continue;
            };
            let mut running = vm.running.lock().await;
            if running.supervisor.is_some() {
                continue;
            }
            if let Some(disk) = &facts.disk {
                let _ = vm.sandbox.mount(&self.disk_dir(disk));
            }
            let supervisor: Arc<dyn Processes> = match &self.supervision {
                Supervision::InProcess => {
                    let Ok(processes) = jobs::processes(&vm.sandbox, &facts.jobs) else {
                        tracing::warn!(vm = %facts.cid, "its jobs cannot be read; left stopped");
                        continue;
                    };
                    let s = Supervisor::new(vm.sandbox.clone(), processes, self.timings);
                    s.start().await;
                    Arc::new(s)
                }
                Supervision::Daemons { program } => {
                    let d = Daemon::new(vm.sandbox.root(), program);
                    if let Err(e) = d.boot(&facts.jobs).await {
                        tracing::warn!(vm = %facts.cid, error = %e, "its jobs were not started");
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

    /// Every VM's process id that runs now, for checks that nothing is left behind.
    pub async fn pids(&self) -> Vec<u32> {
        let vms: Vec<Arc<Vm>> = self
            .vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let mut pids = Vec::new();
        for vm in vms {
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
        let vms: Vec<Arc<Vm>> = self
            .vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for vm in vms {
            let mut running = vm.running.lock().await;
            if let Some(s) = running.supervisor.take() {
                let _ = s.stop().await;
            }
            running.started = false;
        }
    }
}

/// Ends what a VM's processes left when the process supervising them went away: every
/// pid in its pidfiles that was started in the VM, with its process group. A pid that
/// another process has taken since (the machine restarted) is left alone
/// ([`signal::started_in`]).
pub(crate) fn end_leftovers(sandbox: &Sandbox) {
    let mut pending = vec![sandbox.run_dir()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "pid")
                && !path.ends_with(daemon::PIDFILE)
                && let Some(pid) = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| t.trim().parse::<u32>().ok())
                && signal::started_in(pid, sandbox.root(), &path)
            {
                signal::group(pid, libc::SIGKILL);
                signal::process(pid, libc::SIGKILL);
            }
        }
    }
}

pub(crate) fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            let link = std::fs::read_link(entry.path())?;
            let _ = std::fs::remove_file(&target);
            std::os::unix::fs::symlink(link, target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

#[async_trait]
impl Cpi for ProcessCloud {
    async fn create_vm(&self, request: &VmRequest) -> Result<String, CpiError> {
        let cid = new_id("vm");
        let sandbox = Sandbox::create(&self.root.join("vms").join(&cid)).map_err(cpi_error)?;
        let facts = VmFacts {
            cid: cid.clone(),
            agent_id: request.agent_id.clone(),
            stemcell: request.stemcell.clone(),
            deployment: request.deployment.clone(),
            instance: request.instance.clone(),
            instance_id: request.instance_id.clone(),
            az: request.az.clone(),
            networks: request.networks.clone(),
            disk: None,
            applied: None,
            jobs: Vec::new(),
            started: false,
        };
        let vm = self.insert(facts, sandbox);
        vm.save().map_err(cpi_error)?;
        Ok(cid)
    }

    async fn delete_vm(&self, cid: &str) -> Result<(), CpiError> {
        let Some(vm) = self.vm(cid) else {
            return Ok(());
        };
        if let Some(s) = vm.running.lock().await.supervisor.take() {
            let _ = s.stop().await;
        }
        if let Supervision::Daemons { program } = &self.supervision {
            Daemon::new(vm.sandbox.root(), program).exit().await;
        }
        let _ = vm.sandbox.unmount();
        let root = vm.sandbox.root().to_path_buf();
        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(root))
            .await
            .map_err(cpi_error)?
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
            .map_err(cpi_error)?;
        let agent = vm.facts().agent_id;
        self.vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(cid);
        self.agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&agent);
        Ok(())
    }

    async fn has_vm(&self, cid: &str) -> Result<bool, CpiError> {
        Ok(self.vm(cid).is_some())
    }

    async fn reboot_vm(&self, cid: &str) -> Result<(), CpiError> {
        let vm = self
            .vm(cid)
            .ok_or_else(|| cpi_error(format!("VM {cid} not found")))?;
        let running = vm.running.lock().await;
        if let (Some(s), true) = (&running.supervisor, running.started) {
            let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &**s);
            lifecycle.reboot().await.map_err(cpi_error)?;
        }
        Ok(())
    }

    async fn create_disk(&self, _size: u64, _vm_cid: &str) -> Result<String, CpiError> {
        let cid = new_id("disk");
        std::fs::create_dir_all(self.disk_dir(&cid)).map_err(cpi_error)?;
        Ok(cid)
    }

    async fn delete_disk(&self, disk_cid: &str) -> Result<(), CpiError> {
        match std::fs::remove_dir_all(self.disk_dir(disk_cid)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(cpi_error(e)),
            _ => Ok(()),
        }
    }

    async fn attach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        let vm = self
            .vm(vm_cid)
            .ok_or_else(|| cpi_error(format!("VM {vm_cid} not found")))?;
        if !self.disk_dir(disk_cid).is_dir() {
            return Err(cpi_error(format!("disk {disk_cid} not found")));
        }
        // The disk a boot mounts at store/ is the first attached; a second is there to
        // take the first's data, and its place once it has (`migrate_disk`).
        vm.remember(|f| {
            f.disk.get_or_insert_with(|| disk_cid.to_string());
        })
        .map_err(cpi_error)
    }

    async fn detach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        let Some(vm) = self.vm(vm_cid) else {
            return Ok(());
        };
        let _ = vm.sandbox.unmount_disk(&self.disk_dir(disk_cid));
        vm.remember(|f| {
            if f.disk.as_deref() == Some(disk_cid) {
                f.disk = None;
            }
        })
        .map_err(cpi_error)
    }

    async fn snapshot_disk(&self, disk_cid: &str) -> Result<String, CpiError> {
        let id = new_id("snap");
        let to = self.root.join("snapshots").join(&id);
        let from = self.disk_dir(disk_cid);
        tokio::task::spawn_blocking(move || copy_tree(&from, &to))
            .await
            .map_err(cpi_error)?
            .map_err(cpi_error)?;
        Ok(id)
    }
}
