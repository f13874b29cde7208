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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fleet_director::Infrastructure;
use fleet_director::agent::{
    Agent, AgentError, AgentState, CompiledDependency, Drain, Intent, JobState, Process,
};
use fleet_director::compile as director_compile;
use fleet_director::cpi::{Cpi, CpiError, VmRequest};
use fleet_director::model::InstanceSpec;
use fleet_store::AsyncStore;
use serde::{Deserialize, Serialize};

use super::compile::{self, CompileRequest};
use super::daemon::{self, Daemon};
use super::jobs;
use super::lifecycle::{Lifecycle, StopContext};
use super::place::{self, PackageToPlace};
use super::rendering::{self, TemplateRenderer};
use super::sandbox::Sandbox;
use super::script::ScriptRun;
use super::signal;
use super::stored;
use super::supervisor::{ProcessState, Processes, Supervisor, Timings};
use fleet_director::trace::{self, Channel};

/// What the cloud keeps of a VM on its disk, to find it again after a restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct VmFacts {
    cid: String,
    agent_id: String,
    stemcell: String,
    deployment: String,
    instance: String,
    instance_id: Option<String>,
    az: Option<String>,
    networks: Vec<(String, Option<std::net::Ipv4Addr>)>,
    disk: Option<String>,
    /// What was applied and whether its jobs were started: what a boot brings back.
    #[serde(default)]
    applied: Option<InstanceSpec>,
    #[serde(default)]
    jobs: Vec<String>,
    #[serde(default)]
    started: bool,
}

#[derive(Default)]
struct Running {
    applied: Option<InstanceSpec>,
    jobs: Vec<String>,
    supervisor: Option<Arc<dyn Processes>>,
    started: bool,
}

struct Vm {
    facts: Mutex<VmFacts>,
    sandbox: Sandbox,
    running: tokio::sync::Mutex<Running>,
}

impl Vm {
    fn facts(&self) -> VmFacts {
        self.facts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes what is kept of the VM, on disk too.
    fn remember(&self, change: impl FnOnce(&mut VmFacts)) -> std::io::Result<()> {
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
    root: PathBuf,
    supervision: Supervision,
    store: AsyncStore,
    timings: Timings,
    /// By VM cid; agents are found by their id through `agents`.
    vms: Mutex<HashMap<String, Arc<Vm>>>,
    agents: Mutex<HashMap<String, String>>,
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

    fn vm(&self, cid: &str) -> Option<Arc<Vm>> {
        self.vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(cid)
            .cloned()
    }

    fn agent(&self, agent_id: &str, method: &str) -> Result<Arc<Vm>, AgentError> {
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

    fn disk_dir(&self, cid: &str) -> PathBuf {
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

    fn failed(agent_id: &str, method: &str, message: impl std::fmt::Display) -> AgentError {
        AgentError::Failed {
            agent_id: agent_id.to_string(),
            method: method.to_string(),
            message: message.to_string(),
        }
    }

    /// Each package `spec` places (its jobs' packages and theirs), with the key its
    /// compilation is kept under.
    async fn package_keys(&self, spec: &InstanceSpec) -> Result<BTreeMap<String, String>, String> {
        let releases = stored::releases(&self.store, &spec.releases).await?;
        let mut wanted: BTreeMap<String, String> = BTreeMap::new();
        for job_name in &spec.jobs {
            let (release, job) = releases
                .iter()
                .find_map(|r| r.jobs.iter().find(|j| &j.name == job_name).map(|j| (r, j)))
                .ok_or_else(|| format!("job {job_name} is in none of the instance's releases"))?;
            let mut pending = job.packages.clone();
            while let Some(p) = pending.pop() {
                if wanted.contains_key(&p) {
                    continue;
                }
                let key = director_compile::cache_key(release, &p, &spec.stemcell);
                wanted.insert(p.clone(), key);
                if let Some(package) = release.packages.iter().find(|x| x.name == p) {
                    pending.extend(package.dependencies.iter().cloned());
                }
            }
        }
        Ok(wanted)
    }

    /// The jobs' rendered files and the compiled packages `spec` places, read from the
    /// store.
    async fn placement(
        &self,
        spec: &InstanceSpec,
    ) -> Result<(RenderedJobs, Vec<PackageToPlace>), String> {
        let rendered = spec.rendered.as_ref().ok_or_else(|| {
            "the spec has no rendered templates: the director renders them before it applies"
                .to_string()
        })?;
        let archive = stored::blob(&self.store, &rendered.blob).await?;
        let jobs = rendering::unpack(&archive)?;
        let mut packages = Vec::new();
        for (name, key) in self.package_keys(spec).await? {
            let blob = stored::compiled_blob(&self.store, &key).await?;
            let compiled = stored::blob(&self.store, &blob).await?;
            packages.push(PackageToPlace { name, compiled });
        }
        Ok((jobs, packages))
    }

    /// What a stop tells the scripts, as BOSH's agent works it out from what the
    /// director asks and the spec applied now.
    async fn stop_context(
        &self,
        applied: Option<&InstanceSpec>,
        jobs: &[String],
        drain: Drain<'_>,
    ) -> StopContext {
        let next = match drain {
            Drain::Update(next) => next,
            Drain::Shutdown(intent) => return StopContext::shutdown(pre_stop_env(intent)),
            Drain::Status => return StopContext::shutdown(pre_stop_env(Intent::KeepVm)),
        };
        let hash = |s: Option<&InstanceSpec>| {
            s.and_then(|s| s.rendered.as_ref())
                .map(|r| r.configuration_hash.clone())
        };
        let hash_change = match (hash(applied), hash(Some(next))) {
            (None, _) => "hash_new",
            (old, new) if old == new => "hash_unchanged",
            _ => "hash_changed",
        };
        let before = match applied {
            Some(spec) => self.package_keys(spec).await.unwrap_or_default(),
            None => BTreeMap::new(),
        };
        let after = self.package_keys(next).await.unwrap_or_default();
        let updated_packages = after
            .iter()
            .filter(|(name, key)| before.get(*name) != Some(*key))
            .map(|(name, _)| name.clone())
            .collect();
        let job_state = |s: &InstanceSpec| format!("{{\"persistent_disk\":{}}}", s.persistent_disk);
        let mut drain_env = vec![("BOSH_JOB_NEXT_STATE".to_string(), job_state(next))];
        if let Some(applied) = applied {
            drain_env.push(("BOSH_JOB_STATE".to_string(), job_state(applied)));
        }
        StopContext {
            job_change: if jobs.is_empty() {
                "job_new"
            } else {
                "job_changed"
            }
            .into(),
            hash_change: hash_change.into(),
            updated_packages,
            drain_env,
            pre_stop_env: pre_stop_env(Intent::KeepVm),
        }
    }
}

/// Job to each rendered file's path in its directory and contents.
type RenderedJobs = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

fn pre_stop_env(intent: Intent) -> Vec<(String, String)> {
    intent
        .next_states()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Ends what a VM's processes left when the process supervising them went away: every
/// pid in its pidfiles that was started in the VM, with its process group. A pid that
/// another process has taken since (the machine restarted) is left alone.
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
                && signal::started_in(pid, sandbox.root())
            {
                signal::group(pid, libc::SIGKILL);
                signal::process(pid, libc::SIGKILL);
            }
        }
    }
}

/// Puts every script run of a lifecycle step in the task's debug log, a failed step's
/// too: which script, how it ended, the tail of its output.
fn log_runs(agent_id: &str, runs: &[ScriptRun]) {
    for run in runs {
        trace::note(Channel::Debug, || {
            let tail = if run.tail.is_empty() {
                String::new()
            } else {
                format!(", output ends: {}", run.tail.replace('\n', " | "))
            };
            format!("agent {agent_id}: {}{tail}", run.describe())
        });
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
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

#[async_trait]
impl Agent for ProcessCloud {
    async fn get_state(&self, agent_id: &str) -> Result<AgentState, AgentError> {
        let vm = self.agent(agent_id, "get_state")?;
        let running = vm.running.lock().await;
        let statuses = match &running.supervisor {
            Some(s) => s
                .statuses()
                .await
                .map_err(|e| Self::failed(agent_id, "get_state", e))?,
            None => Vec::new(),
        };
        let job_state = if !running.started {
            JobState::Stopped
        } else if statuses.iter().all(|s| s.state == ProcessState::Running) {
            JobState::Running
        } else if statuses.iter().any(|s| s.state == ProcessState::Failing) {
            JobState::Failing
        } else {
            JobState::Starting
        };
        let failing_jobs: BTreeSet<String> = statuses
            .iter()
            .filter(|s| s.state != ProcessState::Running)
            .map(|s| s.job.clone())
            .collect();
        Ok(AgentState {
            job_state,
            applied: running.applied.clone(),
            failing_jobs: failing_jobs.into_iter().collect(),
            networks: vm
                .facts()
                .networks
                .iter()
                .filter_map(|(n, ip)| ip.map(|ip| (n.clone(), ip)))
                .collect(),
            processes: statuses
                .iter()
                .map(|s| Process {
                    name: s.name.clone(),
                    state: s.state.as_str().to_string(),
                    uptime_secs: s.uptime.map(|u| u.as_secs()),
                    mem_kb: None,
                    mem_percent: None,
                    cpu_total: None,
                })
                .collect(),
            vitals: None,
        })
    }

    async fn prepare(&self, agent_id: &str, _spec: &InstanceSpec) -> Result<(), AgentError> {
        self.agent(agent_id, "prepare").map(|_| ())
    }

    /// `pre-stop` and `drain` of every job (the drain protocol followed to its end); the
    /// director's drain wait is then zero.
    async fn drain(&self, agent_id: &str, drain: Drain<'_>) -> Result<i64, AgentError> {
        let vm = self.agent(agent_id, "drain")?;
        // Dynamic drains are followed to their end here, as a current BOSH agent does.
        if drain == Drain::Status {
            return Ok(0);
        }
        let running = vm.running.lock().await;
        let (Some(supervisor), true) = (&running.supervisor, running.started) else {
            return Ok(0);
        };
        let context = self
            .stop_context(running.applied.as_ref(), &running.jobs, drain)
            .await;
        let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &**supervisor);
        let outcome = lifecycle.drain(&context).await;
        log_runs(agent_id, &lifecycle.runs());
        outcome
            .map(|_| 0)
            .map_err(|e| Self::failed(agent_id, "drain", e))
    }

    async fn stop(&self, agent_id: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "stop")?;
        let mut running = vm.running.lock().await;
        let Some(supervisor) = running.supervisor.clone() else {
            return Ok(());
        };
        let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &*supervisor);
        let halted = lifecycle.halt().await;
        log_runs(agent_id, &lifecycle.runs());
        running.started = false;
        vm.remember(|f| f.started = false)
            .map_err(|e| Self::failed(agent_id, "stop", e))?;
        halted
            .map(|_| ())
            .map_err(|e| Self::failed(agent_id, "stop", e))
    }

    async fn apply(&self, agent_id: &str, spec: &InstanceSpec) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "apply")?;
        let failed = |e: String| Self::failed(agent_id, "apply", e);
        let (rendered, packages) = self.placement(spec).await.map_err(failed)?;
        let mut running = vm.running.lock().await;
        // What ran before is stopped before its files are replaced.
        if let Some(old) = running.supervisor.take() {
            old.stop().await.map_err(failed)?;
        }
        place::place(&vm.sandbox, &rendered, packages)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let names = spec.jobs.clone();
        let supervisor: Arc<dyn Processes> = match &self.supervision {
            Supervision::InProcess => {
                let processes =
                    jobs::processes(&vm.sandbox, &names).map_err(|e| failed(e.to_string()))?;
                Arc::new(Supervisor::new(vm.sandbox.clone(), processes, self.timings))
            }
            Supervision::Daemons { program } => {
                let d = Daemon::new(vm.sandbox.root(), program);
                d.load(&names).await.map_err(failed)?;
                Arc::new(d)
            }
        };
        running.supervisor = Some(supervisor);
        running.jobs = names.clone();
        running.applied = Some(spec.clone());
        running.started = false;
        vm.remember(|f| {
            f.applied = Some(spec.clone());
            f.jobs = names;
            f.started = false;
        })
        .map_err(|e| failed(e.to_string()))
    }

    async fn start(&self, agent_id: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "start")?;
        let mut running = vm.running.lock().await;
        let Some(supervisor) = running.supervisor.clone() else {
            return Err(Self::failed(agent_id, "start", "nothing was applied"));
        };
        let disk = vm.facts().disk.map(|d| self.disk_dir(&d));
        let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &*supervisor);
        let started = lifecycle.start(disk.as_deref()).await;
        log_runs(agent_id, &lifecycle.runs());
        running.started = started.is_ok();
        let ok = started.is_ok();
        vm.remember(|f| f.started = ok)
            .map_err(|e| Self::failed(agent_id, "start", e))?;
        started
            .map(|_| ())
            .map_err(|e| Self::failed(agent_id, "start", e))
    }

    async fn mount_disk(&self, agent_id: &str, disk_cid: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "mount_disk")?;
        vm.sandbox
            .mount(&self.disk_dir(disk_cid))
            .map_err(|e| Self::failed(agent_id, "mount_disk", e))
    }

    async fn unmount_disk(&self, agent_id: &str, disk_cid: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "unmount_disk")?;
        vm.sandbox
            .unmount_disk(&self.disk_dir(disk_cid))
            .map_err(|e| Self::failed(agent_id, "unmount_disk", e))
    }

    async fn compile_package(
        &self,
        agent_id: &str,
        package: &str,
        dependencies: &[CompiledDependency],
    ) -> Result<String, AgentError> {
        let vm = self.agent(agent_id, "compile_package")?;
        let failed = |e: String| Self::failed(agent_id, "compile_package", e);
        let mut parts = package.splitn(3, '/');
        let (Some(release), Some(version), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(failed(format!(
                "`{package}` is not release/version/package"
            )));
        };
        let record = stored::release(&self.store, release, version)
            .await
            .map_err(failed)?
            .ok_or_else(|| failed(format!("release {release}/{version} is not uploaded")))?;
        let archived = record
            .packages
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.archive.clone())
            .ok_or_else(|| failed(format!("package {package} has no archive")))?;
        let source = stored::blob(&self.store, &archived.blob)
            .await
            .map_err(failed)?;
        let mut compiled_dependencies = Vec::new();
        for dep in dependencies {
            let blob = stored::compiled_blob(&self.store, &dep.key)
                .await
                .map_err(failed)?;
            let bytes = stored::blob(&self.store, &blob).await.map_err(failed)?;
            compiled_dependencies.push((dep.name.clone(), bytes));
        }
        let outcome = compile::compile(
            &vm.sandbox,
            CompileRequest {
                name,
                version: &archived.version,
                source: &source,
                dependencies: compiled_dependencies,
            },
        )
        .await;
        if let Ok((_, run)) | Err(compile::CompileError::Packaging { run }) = &outcome {
            log_runs(agent_id, std::slice::from_ref(run));
        }
        let (compiled, _) = outcome.map_err(|e| failed(e.to_string()))?;
        let blob = fleet_release::sha1_hex(&compiled);
        self.store
            .run(|s| s.put_blob(&blob, &compiled))
            .await
            .map_err(|e| failed(e.to_string()))?;
        Ok(blob)
    }

    /// Copies the data of the disk at `store/` to the one at the migration target, which
    /// then takes its place at `store/`, as BOSH's agent migrates.
    async fn migrate_disk(&self, agent_id: &str, from: &str, to: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "migrate_disk")?;
        let failed = |e: std::io::Error| Self::failed(agent_id, "migrate_disk", e);
        let (source, target) = (self.disk_dir(from), self.disk_dir(to));
        tokio::task::spawn_blocking(move || copy_tree(&source, &target))
            .await
            .map_err(|e| failed(std::io::Error::other(e)))?
            .map_err(failed)?;
        if std::fs::read_link(vm.sandbox.migration_target()).is_ok() {
            vm.sandbox.finish_migration().map_err(failed)?;
        }
        vm.remember(|f| f.disk = Some(to.to_string()))
            .map_err(failed)
    }

    async fn post_deploy(&self, agent_id: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "run_script")?;
        let running = vm.running.lock().await;
        let (Some(supervisor), true) = (&running.supervisor, running.started) else {
            return Ok(());
        };
        let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &**supervisor);
        let outcome = lifecycle.post_deploy().await;
        log_runs(agent_id, &lifecycle.runs());
        outcome
            .map(|_| ())
            .map_err(|e| Self::failed(agent_id, "run_script", e))
    }
}
