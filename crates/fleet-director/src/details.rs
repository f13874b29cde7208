//! The instance details task: every agent of a deployment asked for its state, one JSON
//! line per instance, in the shape `bosh instances` and `bosh vms` read from a task's
//! result.

use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::agent::AgentState;
use super::error::StepError;
use super::model::{DesiredState, InstanceRecord, Stemcell, VmRecord};
use super::ports::Agents;
use super::records::Records;

/// What the agent says: the instance's process state in the CLI's words (`running`,
/// `failing`, `stopped`, `starting`, or `unresponsive agent`; empty for an instance without
/// a VM), and its processes and vitals when it answered.
async fn observe(agents: &Agents, instance: &InstanceRecord) -> (String, Option<AgentState>) {
    let Some(agent_id) = &instance.agent_id else {
        return (String::new(), None);
    };
    if instance.vm_cid.is_none() {
        return (String::new(), None);
    }
    match agents
        .call(agent_id, "get_state", agents.agent.get_state(agent_id))
        .await
    {
        Ok(state) => (state.job_state.as_str().to_string(), Some(state)),
        Err(_) => ("unresponsive agent".to_string(), None),
    }
}

/// `{name, version}` of the stemcell an instance's VM was made from (recorded as
/// `os/version`), named as it was uploaded.
fn stemcell(recorded: Option<&str>, uploaded: &[Stemcell]) -> Value {
    let Some((os, version)) = recorded.and_then(|s| s.split_once('/')) else {
        return json!({ "name": "", "version": "" });
    };
    let name = uploaded
        .iter()
        .find(|s| s.os == os && s.version == version)
        .map_or(os, |s| s.name.as_str());
    json!({ "name": name, "version": version })
}

fn processes(state: Option<&AgentState>) -> Vec<Value> {
    state
        .map(|s| s.processes.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "state": p.state,
                "uptime": { "secs": p.uptime_secs },
                "mem": { "kb": p.mem_kb, "percent": p.mem_percent },
                "cpu": { "total": p.cpu_total },
            })
        })
        .collect()
}

fn vitals(state: Option<&AgentState>) -> Value {
    let Some(v) = state.and_then(|s| s.vitals.as_ref()) else {
        return Value::Null;
    };
    let disks: serde_json::Map<String, Value> = v
        .disks
        .iter()
        .map(|(name, percent, inodes)| {
            (
                name.clone(),
                json!({ "percent": percent, "inode_percent": inodes }),
            )
        })
        .collect();
    json!({
        "load": v.load,
        "cpu": { "sys": v.cpu_sys, "user": v.cpu_user, "wait": v.cpu_wait },
        "mem": { "kb": v.mem_kb, "percent": v.mem_percent },
        "swap": { "kb": v.swap_kb, "percent": v.swap_percent },
        "uptime": { "secs": v.uptime_secs },
        "disk": disks,
    })
}

/// `2024-05-01T12:00:00Z`, as the CLI parses `vm_created_at`; empty when unknown.
fn timestamp(unix: Option<u64>) -> String {
    unix.map(fleet_clock::rfc3339_unix).unwrap_or_default()
}

fn line(
    instance: &InstanceRecord,
    vm: Option<&VmRecord>,
    observed: &(String, Option<AgentState>),
    uploaded: &[Stemcell],
    resurrection_paused: bool,
) -> Value {
    let (process_state, state) = (&observed.0, observed.1.as_ref());
    let mut ips: Vec<String> = instance
        .vm_networks
        .iter()
        .filter_map(|n| n.split_once('/').map(|(_, ip)| ip.to_string()))
        .collect();
    // A dynamic network's address is the one the agent reports, as BOSH's director
    // lists them.
    let recorded: Vec<&str> = instance
        .vm_networks
        .iter()
        .filter_map(|n| n.split_once('/').map(|(name, _)| name))
        .collect();
    if let Some(state) = state {
        for (name, ip) in &state.networks {
            if !recorded.contains(&name.as_str()) {
                ips.push(ip.to_string());
            }
        }
    }
    let desired = match instance.state {
        DesiredState::Started => "started",
        DesiredState::Stopped => "stopped",
        DesiredState::Detached => "detached",
    };
    json!({
        "agent_id": instance.agent_id,
        "vm_cid": instance.vm_cid,
        "job_name": instance.group,
        "index": instance.index,
        "id": instance.id,
        "bootstrap": instance.index == 0,
        "az": instance.az,
        "ips": ips,
        "dns": [],
        "vm_type": instance.vm_type,
        "job_state": process_state,
        "process_state": process_state,
        "state": desired,
        "disk_cid": instance.disk_cid,
        "disk_cids": instance.disk_cid.iter().collect::<Vec<_>>(),
        "stemcell": stemcell(instance.vm_stemcell.as_deref(), uploaded),
        "ignore": instance.ignore,
        "active": instance.vm_cid.is_some(),
        "processes": processes(state),
        "vitals": vitals(state),
        "vm_created_at": timestamp(vm.and_then(|v| v.created_at)),
        "resurrection_paused": resurrection_paused,
    })
}

/// One JSON line per instance (per VM with `vms_only`, as `bosh vms` lists them), agents
/// asked in parallel, lines in group and index order.
pub async fn instance_lines(
    records: &Records,
    agents: &Agents,
    deployment: String,
    vms_only: bool,
) -> Result<String, StepError> {
    let mut instances: Vec<InstanceRecord> = records.instances(&deployment).await?;
    instances.retain(|i| !vms_only || i.vm_cid.is_some());
    let vms: Vec<VmRecord> = records.vms(&deployment).await?;
    let uploaded = records.stemcells().await?;
    let paused = records.resurrection_paused().await?;
    instances.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
    let mut asked = JoinSet::new();
    for (slot, instance) in instances.iter().enumerate() {
        let (agents, instance) = (agents.clone(), instance.clone());
        asked.spawn(crate::trace::within(async move {
            (slot, observe(&agents, &instance).await)
        }));
    }
    let mut observed = vec![(String::new(), None); instances.len()];
    while let Some(joined) = asked.join_next().await {
        let (slot, seen) = joined.map_err(StepError::from)?;
        observed[slot] = seen;
    }
    let mut out = String::new();
    for (instance, seen) in instances.iter().zip(&observed) {
        let vm = vms
            .iter()
            .find(|v| Some(&v.cid) == instance.vm_cid.as_ref());
        out.push_str(&line(instance, vm, seen, &uploaded, paused).to_string());
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_in_utc() {
        assert_eq!(timestamp(Some(0)), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(Some(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(timestamp(Some(1_795_435_199)), "2026-11-23T11:59:59Z");
        assert_eq!(timestamp(None), "");
    }

    #[test]
    fn the_stemcell_is_named_as_uploaded() {
        let uploaded = [Stemcell {
            name: "bosh-warden-boshlite-ubuntu-jammy-go_agent".into(),
            os: "ubuntu-jammy".into(),
            version: "1.404".into(),
            cid: None,
        }];
        assert_eq!(
            stemcell(Some("ubuntu-jammy/1.404"), &uploaded),
            json!({"name": "bosh-warden-boshlite-ubuntu-jammy-go_agent", "version": "1.404"})
        );
        assert_eq!(
            stemcell(Some("ubuntu-noble/1"), &uploaded),
            json!({"name": "ubuntu-noble", "version": "1"})
        );
    }
}
