//! The simulated cloud's records (VMs, disks, agents) kept in memory beside the store.
//! The cloud outlives the process, so every change goes to the store, with the director's
//! next call; reads, which are most of what agents and CPIs do, come from memory. Loaded on first use; the one
//! process that runs tasks on a state directory is the only one changing them.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use crate::agent::JobState;
use crate::model::InstanceSpec;
use fleet_store::{AsyncStore, StoreError, Write, list};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct CloudVm {
    pub cid: String,
    pub agent_id: String,
    pub stemcell: String,
    pub deployment: String,
    pub instance: String,
    /// What the director asked of the VM beyond its stemcell, as an IaaS would keep it.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub cloud_properties: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct CloudDisk {
    pub cid: String,
    pub size: u64,
    pub vm_cid: Option<String>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub cloud_properties: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct AgentRecord {
    pub agent_id: String,
    pub vm_cid: String,
    pub deployment: String,
    /// `group/index`: what draws are keyed on, so that they do not depend on random ids.
    #[serde(default)]
    pub instance: String,
    pub responsive: bool,
    pub job_start_fails: bool,
    pub job_state: JobState,
    pub applied: Option<InstanceSpec>,
    pub disks: Vec<String>,
    /// The VM's address per network; the cloud picks those of dynamic networks.
    #[serde(default)]
    pub networks: Vec<(String, std::net::Ipv4Addr)>,
    /// When the VM was made and when its jobs last started (Unix seconds): uptimes.
    #[serde(default)]
    pub created_at: Option<u64>,
    #[serde(default)]
    pub started_at: Option<u64>,
}

impl AgentRecord {
    /// Its jobs start at `now` (Unix seconds), or fail to, as the agent's configured
    /// fault says.
    pub fn start_jobs(&mut self, now: u64) {
        self.job_state = if self.job_start_fails {
            JobState::Failing
        } else {
            JobState::Running
        };
        self.started_at = Some(now);
    }
}

/// Every record of the cloud, by id.
#[derive(Default)]
pub(super) struct Records {
    pub vms: HashMap<String, CloudVm>,
    pub agents: HashMap<String, AgentRecord>,
    pub disks: HashMap<String, CloudDisk>,
    /// The disks attached to each VM, so that deleting a VM does not look at every disk.
    attached: HashMap<String, BTreeSet<String>>,
}

impl Records {
    pub fn disk(&self, cid: &str) -> Option<&CloudDisk> {
        self.disks.get(cid)
    }

    /// The disks attached to VM `vm_cid`.
    pub fn attached_to(&self, vm_cid: &str) -> Vec<CloudDisk> {
        self.attached
            .get(vm_cid)
            .into_iter()
            .flatten()
            .filter_map(|cid| self.disks.get(cid).cloned())
            .collect()
    }

    /// Forgets a disk; attached disks are never removed.
    pub fn remove_disk(&mut self, cid: &str) {
        if self.disks.get(cid).is_some_and(|d| d.vm_cid.is_none()) {
            self.disks.remove(cid);
        }
    }

    pub fn put_disk(&mut self, disk: CloudDisk) {
        if let Some(vm) = self.disks.get(&disk.cid).and_then(|d| d.vm_cid.as_ref())
            && let Some(set) = self.attached.get_mut(vm)
        {
            set.remove(&disk.cid);
            if set.is_empty() {
                self.attached.remove(vm);
            }
        }
        if let Some(vm) = &disk.vm_cid {
            self.attached
                .entry(vm.clone())
                .or_default()
                .insert(disk.cid.clone());
        }
        self.disks.insert(disk.cid.clone(), disk);
    }
}

pub(super) struct Mirror {
    store: AsyncStore,
    records: OnceCell<Mutex<Records>>,
}

impl Mirror {
    pub fn new(store: AsyncStore) -> Self {
        Mirror {
            store,
            records: OnceCell::new(),
        }
    }

    async fn records(&self) -> Result<MutexGuard<'_, Records>, StoreError> {
        let records = self
            .records
            .get_or_try_init(|| async {
                let loaded = self
                    .store
                    .run(|s| {
                        let vms: Vec<CloudVm> = list(s, crate::sim::CLOUD_VMS, None)?;
                        let disks: Vec<CloudDisk> = list(s, crate::sim::CLOUD_DISKS, None)?;
                        let agents: Vec<AgentRecord> = list(s, crate::sim::AGENTS, None)?;
                        let mut records = Records {
                            vms: vms.into_iter().map(|v| (v.cid.clone(), v)).collect(),
                            agents: agents
                                .into_iter()
                                .map(|a| (a.agent_id.clone(), a))
                                .collect(),
                            ..Records::default()
                        };
                        for disk in disks {
                            records.put_disk(disk);
                        }
                        Ok(records)
                    })
                    .await?;
                Ok::<_, StoreError>(Mutex::new(loaded))
            })
            .await?;
        Ok(records.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Reads `deployment`'s VMs, agents and attached disks from the store again,
    /// replacing what memory holds of them: on a database shared with other director
    /// processes, the one that held the deployment last may have changed them.
    pub async fn refresh(&self, deployment: &str) -> Result<(), StoreError> {
        let named = deployment.to_string();
        let (vms, agents, disks) = self
            .store
            .run(move |s| {
                let vms: Vec<CloudVm> = list(s, crate::sim::CLOUD_VMS, Some(&named))?;
                let agents: Vec<AgentRecord> = list(s, crate::sim::AGENTS, Some(&named))?;
                let mut disks: Vec<CloudDisk> = Vec::new();
                for vm in &vms {
                    disks.extend(list::<CloudDisk>(
                        s,
                        crate::sim::CLOUD_DISKS,
                        Some(&vm.cid),
                    )?);
                }
                Ok((vms, agents, disks))
            })
            .await?;
        let mut records = self.records().await?;
        let gone: Vec<String> = records
            .vms
            .values()
            .filter(|vm| vm.deployment == deployment)
            .map(|vm| vm.cid.clone())
            .collect();
        for cid in gone {
            records.vms.remove(&cid);
            for disk in records.attached.remove(&cid).unwrap_or_default() {
                records.disks.remove(&disk);
            }
        }
        records.agents.retain(|_, a| a.deployment != deployment);
        for vm in vms {
            records.vms.insert(vm.cid.clone(), vm);
        }
        for agent in agents {
            records.agents.insert(agent.agent_id.clone(), agent);
        }
        for disk in disks {
            records.put_disk(disk);
        }
        Ok(())
    }

    /// What `look` finds in the records.
    pub async fn read<T>(&self, look: impl FnOnce(&Records) -> T) -> Result<T, StoreError> {
        Ok(look(&*self.records().await?))
    }

    /// Defers `writes` to the store, then applies `apply` to memory: the writes go with
    /// the director's next call, so that a cloud call costs no commit of its own and
    /// nothing the director records after it is stored without it.
    pub async fn change(
        &self,
        writes: Vec<Write>,
        apply: impl FnOnce(&mut Records),
    ) -> Result<(), StoreError> {
        let mut records = self.records().await?;
        self.store.defer(writes)?;
        apply(&mut records);
        Ok(())
    }
}
