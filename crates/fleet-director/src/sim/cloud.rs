use std::collections::HashMap;
use std::sync::Mutex;

use super::draw;
use super::mirror::{AgentRecord, CloudDisk, CloudVm, Mirror, Records};
use super::settings::{Fault, FaultKind, SimulationSettings};
use super::vitals;
use crate::agent::{
    Agent, AgentError, AgentState, CompiledDependency, Drain, ErrandOutput, JobState,
};
use crate::cpi::{Cpi, CpiError, VmRequest};
use crate::ids::new_id;
use crate::model::InstanceSpec;
use async_trait::async_trait;
use fleet_store::{AsyncStore, StoreError, put, remove};

/// What a test's change to the simulated cloud can run into.
#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    #[error("the simulated cloud has no agent {0}")]
    UnknownAgent(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The simulated IaaS: both the CPI and every agent.
pub struct SimulatedCloud {
    records: Mirror,
    /// Compilations running now, the most at once, and every package compiled in order.
    compiling: Mutex<(usize, usize, Vec<String>)>,
    settings: SimulationSettings,
    /// Faults can change while the cloud runs, to test what a deploy cut short leaves.
    faults: Mutex<Vec<Fault>>,
    calls: Mutex<HashMap<String, u64>>,
    /// Every CPI and agent call as `method deployment/instance`, in order.
    log: Mutex<Vec<String>>,
    /// Answers of the next drain calls; 0 once they run out.
    drains: Mutex<std::collections::VecDeque<i64>>,
    /// What each drain was asked as, `deployment/instance kind`, in order.
    drain_kinds: Mutex<Vec<String>>,
    /// What VMs and processes are stamped with: tokio's clock, so virtual in tests.
    clock: fleet_clock::WallClock,
}

impl SimulatedCloud {
    pub fn new(store: impl Into<AsyncStore>, settings: SimulationSettings) -> Self {
        SimulatedCloud {
            records: Mirror::new(store.into()),
            compiling: Mutex::new((0, 0, Vec::new())),
            faults: Mutex::new(settings.faults.clone()),
            settings,
            calls: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            drains: Mutex::new(std::collections::VecDeque::new()),
            drain_kinds: Mutex::new(Vec::new()),
            clock: fleet_clock::WallClock::new(),
        }
    }

    /// What the drains since the last call were asked as, each `deployment/instance
    /// kind`: `update`, `status`, or `shutdown` with what becomes of the VM, instance and
    /// deployment (`shutdown delete/keep/keep`).
    pub fn take_drain_kinds(&self) -> Vec<String> {
        std::mem::take(&mut *self.drain_kinds.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The calls made since the last time they were taken.
    pub fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// What the next drain calls answer: a negative value asks the director to wait that
    /// many seconds and ask again (dynamic drain).
    pub fn script_drains(&self, answers: impl IntoIterator<Item = i64>) {
        self.drains
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(answers);
    }

    /// Replaces the configured faults.
    pub fn set_faults(&self, faults: Vec<Fault>) {
        *self.faults.lock().unwrap_or_else(|p| p.into_inner()) = faults;
    }

    /// The n-th call of `key` so far, counting this one.
    fn count(&self, key: &str) -> u64 {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let n = calls.entry(key.to_string()).or_default();
        *n += 1;
        *n
    }

    /// `deployment/group/index` of a VM, the stable subject of draws about it.
    async fn vm_subject(&self, cid: &str) -> String {
        self.records
            .read(|r| vm_subject(r, cid))
            .await
            .unwrap_or_else(|_| cid.to_string())
    }

    async fn agent_subject(&self, agent_id: &str) -> String {
        self.records
            .read(|r| {
                r.agents.get(agent_id).map_or_else(
                    || agent_id.to_string(),
                    |a| format!("{}/{}", a.deployment, a.instance),
                )
            })
            .await
            .unwrap_or_else(|_| agent_id.to_string())
    }

    /// Sleeps for this call's latency: the n-th call of `method` on an instance always
    /// draws the same value under the same seed, however calls on other instances
    /// interleave.
    async fn pause(&self, cpi: bool, method: &str, subject: &str) {
        let key = format!("{method}/{subject}");
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("{method} {subject}"));
        let n = self.count(&key);
        let latency = if cpi {
            self.settings.cpi_latency
        } else {
            self.settings.agent_latency
        };
        let d = latency.at(draw(self.settings.seed, &format!("latency/{key}/{n}")));
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }

    fn faulty(&self, kind: FaultKind, deployment: &str, subject: &str) -> bool {
        let faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        faults.iter().any(|f| {
            f.kind == kind
                && deployment.contains(&f.deployment)
                && (f.instance_group.is_empty()
                    || subject.split('/').next() == Some(f.instance_group.as_str()))
                && draw(
                    self.settings.seed,
                    &format!("fault/{}/{deployment}/{subject}", kind.as_str()),
                ) < f.probability
        })
    }

    async fn agent(&self, agent_id: &str, method: &str) -> Result<AgentRecord, AgentError> {
        let record = self
            .records
            .read(|r| r.agents.get(agent_id).cloned())
            .await
            .map_err(|e| agent_failure(agent_id, method, &e))?;
        match record {
            Some(r) if r.responsive => Ok(r),
            _ => Err(AgentError::Unresponsive {
                agent_id: agent_id.into(),
                method: method.into(),
            }),
        }
    }

    /// Records `record` as the agent's state.
    async fn save_agent(&self, record: AgentRecord) -> Result<(), StoreError> {
        let write = put(
            crate::sim::AGENTS,
            &record.agent_id,
            &record.deployment,
            &record,
        );
        self.records
            .change(vec![write], |r| {
                r.agents.insert(record.agent_id.clone(), record);
            })
            .await
    }

    /// A call to a responsive agent; what `change` does to its state is recorded (a call
    /// that changes nothing writes nothing).
    async fn agent_call(
        &self,
        agent_id: &str,
        method: &str,
        change: impl FnOnce(&mut AgentRecord),
    ) -> Result<AgentRecord, AgentError> {
        self.pause(false, method, &self.agent_subject(agent_id).await)
            .await;
        let before = self.agent(agent_id, method).await?;
        let mut record = before.clone();
        change(&mut record);
        if record != before {
            self.save_agent(record.clone())
                .await
                .map_err(|e| agent_failure(agent_id, method, &e))?;
        }
        Ok(record)
    }

    /// Makes an agent stop answering (an expired NATS certificate) or answer again.
    ///
    /// # Errors
    /// When the agent does not exist or the store fails.
    pub async fn set_responsive(
        &self,
        agent_id: &str,
        responsive: bool,
    ) -> Result<(), SimulationError> {
        self.change_agent(agent_id, |a| a.responsive = responsive)
            .await
    }

    async fn change_agent(
        &self,
        agent_id: &str,
        change: impl FnOnce(&mut AgentRecord),
    ) -> Result<(), SimulationError> {
        let mut record = self
            .records
            .read(|r| r.agents.get(agent_id).cloned())
            .await?
            .ok_or_else(|| SimulationError::UnknownAgent(agent_id.to_string()))?;
        change(&mut record);
        Ok(self.save_agent(record).await?)
    }

    /// Makes an agent's jobs fail to reach running after their next start, or reach it
    /// again: a job that breaks on a VM that ran, then is fixed.
    ///
    /// # Errors
    /// When the agent does not exist or the store fails.
    pub async fn set_job_start_fails(
        &self,
        agent_id: &str,
        fails: bool,
    ) -> Result<(), SimulationError> {
        self.change_agent(agent_id, |a| a.job_start_fails = fails)
            .await
    }

    /// Every package compiled so far, in the order compilations finished.
    pub fn compiled(&self) -> Vec<String> {
        self.compiling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .2
            .clone()
    }

    /// The most compilations that ran at once.
    pub fn peak_compilations(&self) -> usize {
        self.compiling.lock().unwrap_or_else(|p| p.into_inner()).1
    }

    /// The VMs the cloud has, as `(cid, agent id)`: what a test compares with the director's view.
    pub async fn vms(&self) -> Vec<(String, String)> {
        let mut vms: Vec<(String, String)> = self
            .records
            .read(|r| {
                r.vms
                    .values()
                    .map(|vm| (vm.cid.clone(), vm.agent_id.clone()))
                    .collect()
            })
            .await
            .unwrap_or_default();
        vms.sort();
        vms
    }

    /// The disks the cloud has, by CID: what a check compares with the director's view.
    pub async fn disks(&self) -> Vec<String> {
        let mut disks: Vec<String> = self
            .records
            .read(|r| r.disks.keys().cloned().collect())
            .await
            .unwrap_or_default();
        disks.sort();
        disks
    }

    /// The cloud properties the VM or disk `cid` was made with; `None` when the cloud
    /// has no such VM or disk.
    pub async fn cloud_properties(
        &self,
        cid: &str,
    ) -> Option<serde_json::Map<String, serde_json::Value>> {
        self.records
            .read(|r| {
                r.vms
                    .get(cid)
                    .map(|vm| vm.cloud_properties.clone())
                    .or_else(|| r.disk(cid).map(|d| d.cloud_properties.clone()))
            })
            .await
            .ok()
            .flatten()
    }

    fn cpi_error(e: impl std::fmt::Display) -> CpiError {
        CpiError(e.to_string())
    }
}

#[async_trait]
impl Cpi for SimulatedCloud {
    fn name(&self) -> String {
        "simulated".into()
    }

    async fn deployment_taken(&self, deployment: &str) -> Result<(), CpiError> {
        self.records
            .refresh(deployment)
            .await
            .map_err(Self::cpi_error)
    }

    async fn vm_of_agent(&self, agent_id: &str) -> Result<Option<String>, CpiError> {
        let agent = agent_id.to_string();
        Ok(self
            .records
            .read(move |r| {
                r.vms
                    .values()
                    .find(|vm| vm.agent_id == agent)
                    .map(|vm| vm.cid.clone())
            })
            .await
            .map_err(Self::cpi_error)?)
    }

    async fn create_vm(&self, request: &VmRequest) -> Result<String, CpiError> {
        let subject = format!("{}/{}", request.deployment, request.instance);
        self.pause(true, "create_vm", &subject).await;
        // Which VM of the instance this is: an unresponsive agent is decided per VM.
        let generation = self.count(&format!("vm/{subject}"));
        if self.faulty(FaultKind::CreateVm, &request.deployment, &request.instance) {
            return Err(CpiError(format!(
                "create_vm failed for {} in {}: quota exceeded (simulated fault)",
                request.instance, request.deployment
            )));
        }
        let cid = new_id("vm");
        let vm = CloudVm {
            cid: cid.clone(),
            agent_id: request.agent_id.clone(),
            stemcell: request.stemcell.clone(),
            deployment: request.deployment.clone(),
            instance: request.instance.clone(),
            cloud_properties: request.cloud_properties.clone(),
        };
        let agent = AgentRecord {
            agent_id: request.agent_id.clone(),
            vm_cid: cid.clone(),
            deployment: request.deployment.clone(),
            instance: request.instance.clone(),
            responsive: !self.faulty(
                FaultKind::Unresponsive,
                &request.deployment,
                &format!("{}/{generation}", request.instance),
            ),
            job_start_fails: self.faulty(
                FaultKind::JobStart,
                &request.deployment,
                &request.instance,
            ),
            job_state: JobState::Stopped,
            applied: None,
            disks: Vec::new(),
            networks: request
                .networks
                .iter()
                .map(|(network, ip)| {
                    // A dynamic network's address comes from the IaaS: 172.16.0.0/12, drawn.
                    let ip = ip.unwrap_or_else(|| {
                        let n = draw(
                            self.settings.seed,
                            &format!("ip/{subject}/{network}/{generation}"),
                        );
                        std::net::Ipv4Addr::from(
                            0xac10_0000 | ((n * f64::from(0x000f_ffff_u32)) as u32 + 1),
                        )
                    });
                    (network.clone(), ip)
                })
                .collect(),
            created_at: Some(self.clock.unix_secs()),
            started_at: None,
        };
        let writes = vec![
            put(crate::sim::CLOUD_VMS, &cid, &request.deployment, &vm),
            put(
                crate::sim::AGENTS,
                &request.agent_id,
                &request.deployment,
                &agent,
            ),
        ];
        self.records
            .change(writes, |r| {
                r.vms.insert(cid.clone(), vm);
                r.agents.insert(agent.agent_id.clone(), agent);
            })
            .await
            .map_err(Self::cpi_error)?;
        Ok(cid)
    }

    async fn delete_vm(&self, cid: &str) -> Result<(), CpiError> {
        self.pause(true, "delete_vm", &self.vm_subject(cid).await)
            .await;
        let found = self
            .records
            .read(|r| r.vms.get(cid).cloned().map(|vm| (vm, r.attached_to(cid))))
            .await
            .map_err(Self::cpi_error)?;
        let Some((vm, attached)) = found else {
            // Deleting a VM that is already gone succeeds, as CPIs do.
            return Ok(());
        };
        let detached: Vec<CloudDisk> = attached
            .into_iter()
            .map(|disk| CloudDisk {
                vm_cid: None,
                ..disk
            })
            .collect();
        let mut writes = vec![
            remove(crate::sim::CLOUD_VMS, cid),
            remove(crate::sim::AGENTS, &vm.agent_id),
        ];
        writes.extend(
            detached
                .iter()
                .map(|d| put(crate::sim::CLOUD_DISKS, &d.cid, "", d)),
        );
        self.records
            .change(writes, |r| {
                r.vms.remove(cid);
                r.agents.remove(&vm.agent_id);
                for disk in detached {
                    r.put_disk(disk);
                }
            })
            .await
            .map_err(Self::cpi_error)
    }

    async fn has_vm(&self, cid: &str) -> Result<bool, CpiError> {
        self.pause(true, "has_vm", &self.vm_subject(cid).await)
            .await;
        self.records
            .read(|r| r.vms.contains_key(cid))
            .await
            .map_err(Self::cpi_error)
    }

    async fn reboot_vm(&self, cid: &str) -> Result<(), CpiError> {
        self.pause(true, "reboot_vm", &self.vm_subject(cid).await)
            .await;
        let agent = self
            .records
            .read(|r| {
                let vm = r.vms.get(cid)?;
                r.agents.get(&vm.agent_id).cloned()
            })
            .await
            .map_err(Self::cpi_error)?
            .ok_or_else(|| CpiError(format!("VM `{cid}` not found")))?;
        // The agent comes back and starts what was applied; a reboot does not renew an
        // expired certificate, so an agent that did not answer still does not.
        let mut rebooted = agent;
        if rebooted.applied.is_some() {
            rebooted.start_jobs(self.clock.unix_secs());
        }
        self.save_agent(rebooted).await.map_err(Self::cpi_error)
    }

    async fn delete_disk(&self, disk_cid: &str) -> Result<(), CpiError> {
        self.pause(true, "delete_disk", &self.disk_subject(disk_cid).await)
            .await;
        let found = self
            .records
            .read(|r| r.disk(disk_cid).cloned())
            .await
            .map_err(Self::cpi_error)?;
        match found {
            None => Ok(()),
            Some(disk) if disk.vm_cid.is_some() => Err(CpiError(format!(
                "disk `{disk_cid}` is attached to VM `{}`",
                disk.vm_cid.unwrap_or_default()
            ))),
            Some(_) => self
                .records
                .change(vec![remove(crate::sim::CLOUD_DISKS, disk_cid)], |r| {
                    r.remove_disk(disk_cid)
                })
                .await
                .map_err(Self::cpi_error),
        }
    }

    async fn create_disk(
        &self,
        size: u64,
        cloud_properties: &serde_json::Map<String, serde_json::Value>,
        vm_cid: &str,
    ) -> Result<String, CpiError> {
        self.pause(true, "create_disk", &self.vm_subject(vm_cid).await)
            .await;
        let cid = new_id("disk");
        let disk = CloudDisk {
            cid: cid.clone(),
            size,
            vm_cid: None,
            cloud_properties: cloud_properties.clone(),
        };
        let write = put(crate::sim::CLOUD_DISKS, &cid, "", &disk);
        self.records
            .change(vec![write], |r| {
                r.put_disk(disk);
            })
            .await
            .map_err(Self::cpi_error)?;
        Ok(cid)
    }

    async fn attach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        self.pause(true, "attach_disk", &self.vm_subject(vm_cid).await)
            .await;
        let (disk, vm_exists) = self
            .records
            .read(|r| (r.disk(disk_cid).cloned(), r.vms.contains_key(vm_cid)))
            .await
            .map_err(Self::cpi_error)?;
        let disk = disk.ok_or_else(|| CpiError(format!("disk {disk_cid} does not exist")))?;
        if !vm_exists {
            return Err(CpiError(format!("VM {vm_cid} does not exist")));
        }
        let attached = CloudDisk {
            vm_cid: Some(vm_cid.to_string()),
            ..disk
        };
        self.save_disk(attached, vm_cid).await
    }

    async fn snapshot_disk(&self, disk_cid: &str) -> Result<String, CpiError> {
        self.pause(true, "snapshot_disk", &self.disk_subject(disk_cid).await)
            .await;
        Ok(new_id("snapshot"))
    }

    async fn detach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        self.pause(true, "detach_disk", &self.vm_subject(vm_cid).await)
            .await;
        let disk = self
            .records
            .read(|r| r.disk(disk_cid).cloned())
            .await
            .map_err(Self::cpi_error)?;
        if let Some(disk) = disk {
            let detached = CloudDisk {
                vm_cid: None,
                ..disk
            };
            self.save_disk(detached, "").await?;
        }
        Ok(())
    }
}

impl SimulatedCloud {
    async fn disk_subject(&self, disk_cid: &str) -> String {
        self.records
            .read(
                |r| match r.disk(disk_cid).and_then(|d| d.vm_cid.as_deref()) {
                    Some(vm) => vm_subject(r, vm),
                    None => disk_cid.to_string(),
                },
            )
            .await
            .unwrap_or_else(|_| disk_cid.to_string())
    }

    /// Records a disk's state; `scope` is the VM it is attached to, if any.
    async fn save_disk(&self, disk: CloudDisk, scope: &str) -> Result<(), CpiError> {
        let write = put(crate::sim::CLOUD_DISKS, &disk.cid, scope, &disk);
        self.records
            .change(vec![write], |r| {
                r.put_disk(disk);
            })
            .await
            .map_err(Self::cpi_error)
    }
}

/// An agent call that failed on the store's account, not the agent's.
fn agent_failure(agent_id: &str, method: &str, e: &StoreError) -> AgentError {
    AgentError::Failed {
        agent_id: agent_id.into(),
        method: method.into(),
        message: e.to_string(),
    }
}

/// `deployment/group/index` of a VM, the stable subject of draws about it.
fn vm_subject(records: &Records, cid: &str) -> String {
    records.vms.get(cid).map_or_else(
        || cid.to_string(),
        |vm| format!("{}/{}", vm.deployment, vm.instance),
    )
}

#[async_trait]
impl Agent for SimulatedCloud {
    async fn get_state(&self, agent_id: &str) -> Result<AgentState, AgentError> {
        self.pause(false, "get_state", &self.agent_subject(agent_id).await)
            .await;
        let record = self.agent(agent_id, "get_state").await?;
        let failing_jobs = match record.job_state {
            JobState::Failing => record
                .applied
                .as_ref()
                .map(|s| s.jobs.clone())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let now = self.clock.unix_secs();
        Ok(AgentState {
            processes: vitals::processes(self.settings.seed, &record, now),
            vitals: Some(vitals::vitals(self.settings.seed, &record, now)),
            job_state: record.job_state,
            applied: record.applied,
            failing_jobs,
            networks: record.networks,
        })
    }

    async fn prepare(&self, agent_id: &str, _spec: &InstanceSpec) -> Result<(), AgentError> {
        self.agent_call(agent_id, "prepare", |_| {})
            .await
            .map(|_| ())
    }

    async fn drain(&self, agent_id: &str, drain: Drain<'_>) -> Result<i64, AgentError> {
        let method = match drain {
            Drain::Status => "drain_status",
            Drain::Update(_) | Drain::Shutdown(_) => "drain",
        };
        let kind = match drain {
            Drain::Update(_) => "update".to_string(),
            Drain::Status => "status".to_string(),
            Drain::Shutdown(intent) => {
                let states: Vec<&str> = intent.next_states().iter().map(|(_, s)| *s).collect();
                format!("shutdown {}", states.join("/"))
            }
        };
        let subject = self.agent_subject(agent_id).await;
        self.drain_kinds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("{subject} {kind}"));
        self.agent_call(agent_id, method, |_| {}).await?;
        Ok(self
            .drains
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
            .unwrap_or(0))
    }

    /// The jobs run no scripts here; the call is made and logged as BOSH's director
    /// makes it.
    async fn run_script(&self, agent_id: &str, name: &str) -> Result<(), AgentError> {
        self.agent_call(agent_id, &format!("run_script {name}"), |_| {})
            .await
            .map(|_| ())
    }

    async fn stop(&self, agent_id: &str) -> Result<(), AgentError> {
        self.agent_call(agent_id, "stop", |a| {
            a.job_state = JobState::Stopped;
            a.started_at = None;
        })
        .await
        .map(|_| ())
    }

    async fn apply(&self, agent_id: &str, spec: &InstanceSpec) -> Result<(), AgentError> {
        self.agent_call(agent_id, "apply", |a| a.applied = Some(spec.clone()))
            .await
            .map(|_| ())
    }

    async fn start(&self, agent_id: &str) -> Result<(), AgentError> {
        let now = self.clock.unix_secs();
        self.agent_call(agent_id, "start", |a| a.start_jobs(now))
            .await
            .map(|_| ())
    }

    async fn mount_disk(&self, agent_id: &str, disk_cid: &str) -> Result<(), AgentError> {
        let disk = disk_cid.to_string();
        self.agent_call(agent_id, "mount_disk", |a| {
            if !a.disks.contains(&disk) {
                a.disks.push(disk);
            }
        })
        .await
        .map(|_| ())
    }

    async fn compile_package(
        &self,
        agent_id: &str,
        package: &str,
        _dependencies: &[CompiledDependency],
    ) -> Result<String, AgentError> {
        {
            let mut c = self.compiling.lock().unwrap_or_else(|p| p.into_inner());
            c.0 += 1;
            c.1 = c.1.max(c.0);
        }
        let result = self.agent_call(agent_id, "compile_package", |_| {}).await;
        let mut c = self.compiling.lock().unwrap_or_else(|p| p.into_inner());
        c.0 -= 1;
        result?;
        c.2.push(package.to_string());
        Ok(format!("blob-{}", package.replace('/', "-")))
    }

    async fn migrate_disk(&self, agent_id: &str, from: &str, to: &str) -> Result<(), AgentError> {
        self.agent_call(agent_id, "migrate_disk", |a| {
            if a.disks.iter().any(|d| d == from) && !a.disks.iter().any(|d| d == to) {
                a.disks.push(to.to_string());
            }
        })
        .await
        .map(|_| ())
    }

    async fn unmount_disk(&self, agent_id: &str, disk_cid: &str) -> Result<(), AgentError> {
        self.agent_call(agent_id, "unmount_disk", |a| {
            a.disks.retain(|d| d != disk_cid)
        })
        .await
        .map(|_| ())
    }

    /// A simulated VM's jobs run no processes and write no logs: its bundle is a valid,
    /// empty archive.
    async fn fetch_logs(
        &self,
        agent_id: &str,
        _request: &crate::logs::LogRequest,
    ) -> Result<Vec<u8>, AgentError> {
        self.agent_call(agent_id, "fetch_logs", |_| {}).await?;
        Ok(fleet_release::build_tgz(&[]))
    }

    /// The simulated errand succeeds, unless an `errand` fault is drawn for its instance.
    async fn run_errand(&self, agent_id: &str, job: &str) -> Result<ErrandOutput, AgentError> {
        let record = self.agent_call(agent_id, "run_errand", |_| {}).await?;
        let applied = record.applied.as_ref().map_or(&[][..], |s| &s.jobs[..]);
        if !applied.iter().any(|j| j == job) {
            return Err(AgentError::Failed {
                agent_id: agent_id.to_string(),
                method: "run_errand".to_string(),
                message: format!("no job `{job}` is applied on this VM"),
            });
        }
        let on = format!("{}/{}", record.deployment, record.instance);
        Ok(
            if self.faulty(FaultKind::Errand, &record.deployment, &record.instance) {
                ErrandOutput {
                    exit_code: 1,
                    stdout: String::new(),
                    stderr: format!("errand {job} failed on {on} (a simulated fault)\n"),
                }
            } else {
                ErrandOutput {
                    exit_code: 0,
                    stdout: format!("errand {job} ran on {on}\n"),
                    stderr: String::new(),
                }
            },
        )
    }
}
