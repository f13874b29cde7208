//! The cloud provider interface: what the director asks of the IaaS.

use async_trait::async_trait;

use super::model::Stemcell;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CpiError(pub String);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmRequest {
    pub agent_id: String,
    /// The stemcell as the director names it (`os/version`).
    pub stemcell: String,
    /// What the CPI calls that stemcell, when it made one at upload.
    pub stemcell_cid: Option<String>,
    pub vm_type: Option<String>,
    pub deployment: String,
    /// `group/index`, which the simulated cloud uses to decide configured faults.
    pub instance: String,
    /// Address per network; `None` where the IaaS assigns one (dynamic networks).
    pub networks: Vec<(String, Option<std::net::Ipv4Addr>)>,
    /// The same networks as a CPI's `create_vm` takes them, with their subnets'
    /// netmask, gateway, DNS and cloud properties; null where the director has none.
    pub network_settings: serde_json::Value,
    /// What the cloud config says about the VM for the CPI alone (its AZ's, VM type's and
    /// extensions' cloud properties, merged).
    pub cloud_properties: serde_json::Map<String, serde_json::Value>,
    /// The instance's id and AZ, which its job templates may read; `None` for a
    /// compilation VM.
    pub instance_id: Option<String>,
    pub az: Option<String>,
}

#[async_trait]
pub trait Cpi: Send + Sync {
    /// What the director's `/info` (and so `bosh env`) calls this CPI.
    fn name(&self) -> String;
    /// Makes the stemcell's image known to the IaaS, at upload; `None` for an IaaS that
    /// needs no image (the simulation, VMs as directories).
    async fn create_stemcell(&self, _stemcell: &Stemcell) -> Result<Option<String>, CpiError> {
        Ok(None)
    }
    /// This director process took `deployment`'s lock, on a database it shares with
    /// other director processes. A CPI that keeps the cloud's records in memory reads
    /// that deployment's again: the process that held it last may have changed them.
    async fn deployment_taken(&self, _deployment: &str) -> Result<(), CpiError> {
        Ok(())
    }
    async fn create_vm(&self, request: &VmRequest) -> Result<String, CpiError>;
    /// The VM made for `agent_id`, where the IaaS can tell: a VM whose creation a crash
    /// cut off before the director recorded its CID is found again by the agent it was
    /// made for, and deleted. `None` where it cannot (BOSH's CPI protocol has no such
    /// call, so an external CPI's VM is left, as BOSH's director leaves it).
    async fn vm_of_agent(&self, _agent_id: &str) -> Result<Option<String>, CpiError> {
        Ok(None)
    }
    async fn delete_vm(&self, cid: &str) -> Result<(), CpiError>;
    async fn has_vm(&self, cid: &str) -> Result<bool, CpiError>;
    /// Restarts the VM; its agent starts its jobs again.
    async fn reboot_vm(&self, cid: &str) -> Result<(), CpiError>;
    /// `cloud_properties`: the disk type's, for the CPI alone.
    async fn create_disk(
        &self,
        size: u64,
        cloud_properties: &serde_json::Map<String, serde_json::Value>,
        vm_cid: &str,
    ) -> Result<String, CpiError>;
    /// Deletes a detached disk; one that is already gone is no error.
    async fn delete_disk(&self, disk_cid: &str) -> Result<(), CpiError>;
    async fn attach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError>;
    async fn detach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError>;
    /// Takes a snapshot of a persistent disk; returns the snapshot's id.
    async fn snapshot_disk(&self, disk_cid: &str) -> Result<String, CpiError>;
}
