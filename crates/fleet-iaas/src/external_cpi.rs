//! An external CPI as the embedded director's [`Cpi`]: the director's requests in the
//! protocol's arguments, the answers back in its terms, and the CPI's own log in the
//! running task's CPI log (`bosh task N --cpi`) beside the director's record of each call.

use async_trait::async_trait;
use fleet_director::cpi::{Cpi, CpiError, VmRequest};
use fleet_director::model::Stemcell;
use fleet_director::trace::{self, Channel};
use serde_json::{Map, Value, json};

use fleet_cpi::protocol::kinds;
use fleet_cpi::{CallRecord, CpiCallError, ExternalCpi};

pub struct DirectorCpi {
    cpi: ExternalCpi,
}

impl DirectorCpi {
    pub fn new(cpi: ExternalCpi) -> Self {
        DirectorCpi {
            cpi: cpi.logging_to(std::sync::Arc::new(keep_log)),
        }
    }
}

/// The CPI's log lines in the running task's CPI log.
fn keep_log(call: &CallRecord<'_>) {
    for line in call.log.lines().filter(|l| !l.trim().is_empty()) {
        trace::note(Channel::Cpi, || format!("{} log: {line}", call.method));
    }
}

fn director_error(e: CpiCallError) -> CpiError {
    CpiError(e.to_string())
}

/// Deleting what is already gone is what a delete wants.
fn gone_is_fine(outcome: Result<(), CpiCallError>) -> Result<(), CpiError> {
    match outcome {
        Err(e) if matches!(e.kind(), Some(kinds::VM_NOT_FOUND | kinds::DISK_NOT_FOUND)) => Ok(()),
        other => other.map_err(director_error),
    }
}

/// The networks of a VM as `create_vm` takes them: each with its address, manual where
/// the director chose one, dynamic where the IaaS does; the first is the default for DNS
/// and the gateway.
fn networks(request: &VmRequest) -> Value {
    let mut networks = Map::new();
    for (i, (name, ip)) in request.networks.iter().enumerate() {
        let mut network = match ip {
            Some(ip) => json!({"type": "manual", "ip": ip.to_string(), "cloud_properties": {}}),
            None => json!({"type": "dynamic", "cloud_properties": {}}),
        };
        if i == 0 {
            network["default"] = json!(["dns", "gateway"]);
        }
        networks.insert(name.clone(), network);
    }
    Value::Object(networks)
}

#[async_trait]
impl Cpi for DirectorCpi {
    /// The external CPI's program, as BOSH names a CPI after its job.
    fn name(&self) -> String {
        self.cpi.program_name()
    }

    async fn create_stemcell(&self, stemcell: &Stemcell) -> Result<Option<String>, CpiError> {
        let mut properties = Map::new();
        properties.insert("name".into(), json!(stemcell.name));
        properties.insert("operating_system".into(), json!(stemcell.os));
        properties.insert("version".into(), json!(stemcell.version));
        self.cpi
            .create_stemcell("", &properties)
            .await
            .map(Some)
            .map_err(director_error)
    }

    async fn create_vm(&self, request: &VmRequest) -> Result<String, CpiError> {
        let stemcell = request.stemcell_cid.as_deref().ok_or_else(|| {
            CpiError(format!(
                "stemcell {} has no CID: it was uploaded before this CPI was configured; \
                 upload it again",
                request.stemcell
            ))
        })?;
        let env = json!({"bosh": {"group": request.deployment, "groups": [request.deployment]}});
        let vm = self
            .cpi
            .create_vm(
                &request.agent_id,
                stemcell,
                &Value::Object(request.cloud_properties.clone()),
                &match &request.network_settings {
                    settings @ Value::Object(_) => settings.clone(),
                    _ => networks(request),
                },
                &[],
                &env,
            )
            .await
            .map_err(director_error)?;
        let mut metadata = Map::new();
        metadata.insert("director".into(), json!("fleet-updater"));
        metadata.insert("deployment".into(), json!(request.deployment));
        metadata.insert("name".into(), json!(request.instance));
        if let Some(id) = &request.instance_id {
            metadata.insert("id".into(), json!(id));
        }
        match self.cpi.set_vm_metadata(&vm.cid, &metadata).await {
            Err(e) if e.kind() != Some(kinds::NOT_IMPLEMENTED) => Err(director_error(e)),
            _ => Ok(vm.cid),
        }
    }

    async fn delete_vm(&self, cid: &str) -> Result<(), CpiError> {
        gone_is_fine(self.cpi.delete_vm(cid).await)
    }

    async fn has_vm(&self, cid: &str) -> Result<bool, CpiError> {
        self.cpi.has_vm(cid).await.map_err(director_error)
    }

    async fn reboot_vm(&self, cid: &str) -> Result<(), CpiError> {
        self.cpi.reboot_vm(cid).await.map_err(director_error)
    }

    async fn create_disk(
        &self,
        size: u64,
        cloud_properties: &Map<String, Value>,
        vm_cid: &str,
    ) -> Result<String, CpiError> {
        self.cpi
            .create_disk(size, &Value::Object(cloud_properties.clone()), Some(vm_cid))
            .await
            .map_err(director_error)
    }

    async fn delete_disk(&self, disk_cid: &str) -> Result<(), CpiError> {
        gone_is_fine(self.cpi.delete_disk(disk_cid).await)
    }

    async fn attach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        self.cpi
            .attach_disk(vm_cid, disk_cid)
            .await
            .map(|_| ())
            .map_err(director_error)
    }

    async fn detach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        gone_is_fine(self.cpi.detach_disk(vm_cid, disk_cid).await)
    }

    async fn snapshot_disk(&self, disk_cid: &str) -> Result<String, CpiError> {
        self.cpi
            .snapshot_disk(disk_cid, &Map::new())
            .await
            .map_err(director_error)
    }
}
