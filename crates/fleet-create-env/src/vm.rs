//! The VM's side of `create-env` and `delete-env`: a VM deleted (its jobs stopped and
//! disks unmounted first when its agent answers) and made, its persistent disk brought
//! to what the manifest asks (made, attached and mounted, or migrated to a new size, the
//! old one deleted), each CID written to the state file as soon as the CPI made it.

use std::time::Duration;

use fleet_agent::client::AgentClient;
use fleet_cpi::ExternalCpi;
use fleet_cpi::protocol::kinds;
use serde_json::{Map, Value as Json, json};

use super::error::EnvError;
use super::manifest::{EnvManifest, NetworkKind};
use super::state::{DiskRecord, StateFile, uuid};

/// How long an agent that should be there may take to answer before its VM is deleted
/// without stopping its jobs first.
const OLD_AGENT_WAIT: Duration = Duration::from_secs(10);

/// How long a new VM's agent may take to come up.
const NEW_AGENT_WAIT: Duration = Duration::from_secs(10 * 60);

fn gone(e: &fleet_cpi::CpiCallError) -> bool {
    matches!(
        e.kind(),
        Some(kinds::VM_NOT_FOUND | kinds::DISK_NOT_FOUND | kinds::STEMCELL_NOT_FOUND)
    )
}

/// The agent of the deployment's VM, as the manifest's mbus names it.
///
/// # Errors
/// An mbus URL or CA that cannot be used.
pub fn agent(manifest: &EnvManifest) -> Result<AgentClient, EnvError> {
    let mbus = fleet_agent::mbus::MbusUrl::parse(&manifest.cloud_provider.mbus)
        .map_err(|e| EnvError::Input(e.to_string()))?;
    AgentClient::new(mbus, manifest.cloud_provider.ca.as_deref())
        .map_err(EnvError::agent("setting up the agent client"))
}

/// Deletes the current VM, if any: its jobs stopped (`pre-stop`, drain, stop,
/// `post-stop`) and its disks unmounted when its agent answers, then the VM itself; its
/// CID leaves the state file.
///
/// # Errors
/// The CPI fails to delete it, or the state cannot be written.
pub async fn delete_current(
    cpi: &ExternalCpi,
    agent: &AgentClient,
    state: &mut StateFile,
    progress: &mut dyn FnMut(String),
) -> Result<(), EnvError> {
    let cid = state.state.current_vm_cid.clone();
    if cid.is_empty() {
        return Ok(());
    }
    let exists = cpi
        .has_vm(&cid)
        .await
        .map_err(EnvError::cpi(format!("has_vm {cid}")))?;
    if exists && agent.wait_until_ready(OLD_AGENT_WAIT).await.is_ok() {
        progress(format!("Stopping jobs on VM '{cid}'"));
        let stop = async {
            agent.run_script("pre-stop").await?;
            agent
                .call("drain", vec![json!("shutdown"), json!({})])
                .await?;
            agent.call("stop", vec![]).await?;
            agent.run_script("post-stop").await?;
            for disk in agent.list_disk().await? {
                agent.call("unmount_disk", vec![json!(disk)]).await?;
            }
            Ok::<(), fleet_agent::client::AgentCallError>(())
        };
        stop.await
            .map_err(EnvError::agent(format!("stopping the jobs of VM {cid}")))?;
    } else if exists {
        progress(format!(
            "The agent of VM '{cid}' does not answer; deleting the VM"
        ));
    }
    progress(format!("Deleting VM '{cid}'"));
    match cpi.delete_vm(&cid).await {
        Err(e) if !gone(&e) => return Err(EnvError::cpi(format!("delete_vm {cid}"))(e)),
        _ => {}
    }
    state
        .change(|s| {
            s.current_vm_cid.clear();
            s.current_stemcell_id.clear();
        })
        .await?;
    Ok(())
}

/// The networks as `create_vm` takes them.
fn networks(manifest: &EnvManifest) -> Json {
    let job = &manifest.job;
    let mut out = Map::new();
    for job_network in &job.networks {
        let Some(network) = manifest
            .networks
            .iter()
            .find(|n| n.name == job_network.name)
        else {
            continue;
        };
        let mut spec = Map::new();
        spec.insert(
            "type".into(),
            json!(match network.kind {
                NetworkKind::Manual => "manual",
                NetworkKind::Dynamic => "dynamic",
                NetworkKind::Vip => "vip",
            }),
        );
        if let Some(ip) = job_network.static_ips.first() {
            spec.insert("ip".into(), json!(ip.to_string()));
        }
        if let Some(range) = network.range {
            spec.insert("netmask".into(), json!(range.netmask().to_string()));
        }
        if let Some(gateway) = network.gateway {
            spec.insert("gateway".into(), json!(gateway.to_string()));
        }
        if !network.dns.is_empty() {
            spec.insert("dns".into(), json!(network.dns));
        }
        let default = if job.networks.len() == 1 {
            vec!["dns".to_string(), "gateway".to_string()]
        } else {
            job_network.default.clone()
        };
        if !default.is_empty() {
            spec.insert("default".into(), json!(default));
        }
        let properties = if network.cloud_properties.is_null() {
            json!({})
        } else {
            network.cloud_properties.clone()
        };
        spec.insert("cloud_properties".into(), properties);
        out.insert(network.name.clone(), Json::Object(spec));
    }
    Json::Object(out)
}

/// Makes the VM from `stemcell_cid` and writes its CID to the state at once, so that a
/// run killed right after does not lose it; then waits for its agent.
///
/// # Errors
/// The CPI fails, the state cannot be written, or the agent does not come up.
pub async fn create(
    cpi: &ExternalCpi,
    agent: &AgentClient,
    manifest: &EnvManifest,
    state: &mut StateFile,
    stemcell: (&str, &str),
    progress: &mut dyn FnMut(String),
) -> Result<String, EnvError> {
    let (stemcell_id, stemcell_cid) = stemcell;
    let pool = manifest.resource_pool();
    let instance = format!("{}/0", manifest.job.name);
    progress(format!(
        "Creating VM for instance '{instance}' from stemcell '{stemcell_cid}'"
    ));
    let disks: Vec<String> = state.state.disks.iter().map(|d| d.cid.clone()).collect();
    let env = if pool.env.is_null() {
        json!({})
    } else {
        pool.env.clone()
    };
    let properties = if pool.cloud_properties.is_null() {
        json!({})
    } else {
        pool.cloud_properties.clone()
    };
    let vm = cpi
        .create_vm(
            &uuid(),
            stemcell_cid,
            &properties,
            &networks(manifest),
            &disks,
            &env,
        )
        .await
        .map_err(EnvError::cpi(format!(
            "create_vm for instance '{instance}'"
        )))?;
    state
        .change(|s| {
            s.current_vm_cid = vm.cid.clone();
            s.current_stemcell_id = stemcell_id.to_string();
        })
        .await?;
    let mut metadata = Map::new();
    for (k, v) in [
        ("deployment", manifest.name.clone()),
        ("job", manifest.job.name.clone()),
        ("instance_group", manifest.job.name.clone()),
        ("index", "0".into()),
        ("director", "fleet-updater".into()),
        ("name", instance.clone()),
    ] {
        metadata.insert(k.into(), json!(v));
    }
    match cpi.set_vm_metadata(&vm.cid, &metadata).await {
        Err(e) if e.kind() != Some(kinds::NOT_IMPLEMENTED) => {
            return Err(EnvError::cpi(format!("set_vm_metadata {}", vm.cid))(e));
        }
        _ => {}
    }
    progress(format!(
        "Waiting for the agent on VM '{}' to be ready",
        vm.cid
    ));
    agent
        .wait_until_ready(NEW_AGENT_WAIT)
        .await
        .map_err(EnvError::agent(format!(
            "waiting for the agent on VM {}",
            vm.cid
        )))?;
    Ok(vm.cid)
}

async fn attach_and_mount(
    cpi: &ExternalCpi,
    agent: &AgentClient,
    vm: &str,
    disk: &str,
    progress: &mut dyn FnMut(String),
) -> Result<(), EnvError> {
    progress(format!("Attaching disk '{disk}' to VM '{vm}'"));
    cpi.attach_disk(vm, disk)
        .await
        .map_err(EnvError::cpi(format!("attach_disk {disk} to {vm}")))?;
    agent
        .call("mount_disk", vec![json!(disk)])
        .await
        .map_err(EnvError::agent(format!("mounting disk {disk}")))?;
    Ok(())
}

/// Brings the persistent disk to what the manifest asks, then deletes every disk the
/// state keeps that is not the current one (left by a run cut short, or replaced).
///
/// # Errors
/// The CPI or the agent fails, or the state cannot be written.
pub async fn converge_disk(
    cpi: &ExternalCpi,
    agent: &AgentClient,
    manifest: &EnvManifest,
    state: &mut StateFile,
    vm: &str,
    progress: &mut dyn FnMut(String),
) -> Result<(), EnvError> {
    let (size, properties) = manifest.disk();
    let properties = if properties.is_null() {
        json!({})
    } else {
        properties
    };
    let current = state.current_disk().cloned();
    if size > 0 {
        match &current {
            Some(disk) if disk.size == size && disk.cloud_properties == properties => {
                attach_and_mount(cpi, agent, vm, &disk.cid, progress).await?;
            }
            _ => {
                if let Some(old) = &current {
                    attach_and_mount(cpi, agent, vm, &old.cid, progress).await?;
                }
                progress(format!("Creating disk of {size} MiB"));
                let cid = cpi
                    .create_disk(size, &properties, Some(vm))
                    .await
                    .map_err(EnvError::cpi("create_disk"))?;
                let record = DiskRecord {
                    id: uuid(),
                    cid: cid.clone(),
                    size,
                    cloud_properties: properties.clone(),
                };
                state.change(|s| s.disks.push(record.clone())).await?;
                attach_and_mount(cpi, agent, vm, &cid, progress).await?;
                if let Some(old) = &current {
                    progress(format!(
                        "Migrating disk content from '{}' to '{cid}'",
                        old.cid
                    ));
                    agent
                        .call("migrate_disk", vec![])
                        .await
                        .map_err(EnvError::agent("migrating the disk's data"))?;
                }
                state
                    .change(|s| s.current_disk_id = record.id.clone())
                    .await?;
            }
        }
    } else if current.is_some() {
        state.change(|s| s.current_disk_id.clear()).await?;
    }
    let unused: Vec<DiskRecord> = state
        .state
        .disks
        .iter()
        .filter(|d| d.id != state.state.current_disk_id)
        .cloned()
        .collect();
    for disk in unused {
        progress(format!("Deleting unused disk '{}'", disk.cid));
        let _ = agent.call("unmount_disk", vec![json!(disk.cid)]).await;
        match cpi.detach_disk(vm, &disk.cid).await {
            Err(e) if !gone(&e) => {
                return Err(EnvError::cpi(format!("detach_disk {}", disk.cid))(e));
            }
            _ => {}
        }
        match cpi.delete_disk(&disk.cid).await {
            Err(e) if !gone(&e) => {
                return Err(EnvError::cpi(format!("delete_disk {}", disk.cid))(e));
            }
            _ => {}
        }
        state
            .change(|s| s.disks.retain(|d| d.id != disk.id))
            .await?;
    }
    Ok(())
}
