//! The CPI as the director calls it: every request and its answer go into the running
//! task's trace (`bosh task --cpi`), with how long the cloud took.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use super::cpi::{Cpi, CpiError, VmRequest};
use super::model::Stemcell;
use super::trace::{Channel, note};

pub struct TracedCpi(pub Arc<dyn Cpi>);

async fn traced<T: Debug>(
    method: &str,
    arguments: String,
    call: impl Future<Output = Result<T, CpiError>>,
) -> Result<T, CpiError> {
    note(Channel::Cpi, || format!("request: {method} {arguments}"));
    let started = tokio::time::Instant::now();
    let answer = call.await;
    let ms = started.elapsed().as_millis();
    note(Channel::Cpi, || match &answer {
        Ok(result) => format!("response: {method} result {result:?} ({ms} ms)"),
        Err(e) => format!("response: {method} error {e} ({ms} ms)"),
    });
    answer
}

#[async_trait]
impl Cpi for TracedCpi {
    fn name(&self) -> String {
        self.0.name()
    }

    async fn create_stemcell(&self, stemcell: &Stemcell) -> Result<Option<String>, CpiError> {
        let arguments = format!("{} {}/{}", stemcell.name, stemcell.os, stemcell.version);
        traced(
            "create_stemcell",
            arguments,
            self.0.create_stemcell(stemcell),
        )
        .await
    }

    async fn vm_of_agent(&self, agent_id: &str) -> Result<Option<String>, CpiError> {
        traced(
            "vm_of_agent",
            agent_id.to_string(),
            self.0.vm_of_agent(agent_id),
        )
        .await
    }

    async fn deployment_taken(&self, deployment: &str) -> Result<(), CpiError> {
        // Not a call to the IaaS: nothing to trace.
        self.0.deployment_taken(deployment).await
    }

    async fn create_vm(&self, request: &VmRequest) -> Result<String, CpiError> {
        let arguments = format!(
            "agent {} stemcell {} vm_type {} networks {:?} for {}/{}",
            request.agent_id,
            request.stemcell,
            request.vm_type.as_deref().unwrap_or("-"),
            request.networks,
            request.deployment,
            request.instance
        );
        traced("create_vm", arguments, self.0.create_vm(request)).await
    }

    async fn delete_vm(&self, cid: &str) -> Result<(), CpiError> {
        traced("delete_vm", cid.to_string(), self.0.delete_vm(cid)).await
    }

    async fn has_vm(&self, cid: &str) -> Result<bool, CpiError> {
        traced("has_vm", cid.to_string(), self.0.has_vm(cid)).await
    }

    async fn reboot_vm(&self, cid: &str) -> Result<(), CpiError> {
        traced("reboot_vm", cid.to_string(), self.0.reboot_vm(cid)).await
    }

    async fn create_disk(
        &self,
        size: u64,
        cloud_properties: &serde_json::Map<String, serde_json::Value>,
        vm_cid: &str,
    ) -> Result<String, CpiError> {
        // Cloud properties are the CPI's business and may hold credentials: not traced.
        let arguments = format!("{size} MiB near {vm_cid}");
        let created = self.0.create_disk(size, cloud_properties, vm_cid);
        traced("create_disk", arguments, created).await
    }

    async fn delete_disk(&self, disk_cid: &str) -> Result<(), CpiError> {
        traced(
            "delete_disk",
            disk_cid.to_string(),
            self.0.delete_disk(disk_cid),
        )
        .await
    }

    async fn attach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        let arguments = format!("{disk_cid} to {vm_cid}");
        traced(
            "attach_disk",
            arguments,
            self.0.attach_disk(vm_cid, disk_cid),
        )
        .await
    }

    async fn detach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        let arguments = format!("{disk_cid} from {vm_cid}");
        traced(
            "detach_disk",
            arguments,
            self.0.detach_disk(vm_cid, disk_cid),
        )
        .await
    }

    async fn snapshot_disk(&self, disk_cid: &str) -> Result<String, CpiError> {
        traced(
            "snapshot_disk",
            disk_cid.to_string(),
            self.0.snapshot_disk(disk_cid),
        )
        .await
    }
}
