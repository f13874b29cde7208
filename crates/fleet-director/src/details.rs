//! The instance details task: every agent of a deployment asked for its state, one JSON
//! line per instance, in the shape `bosh instances` and `bosh vms` read from a task's
//! result.

use std::sync::Arc;

use serde_json::json;
use tokio::task::JoinSet;

use super::Core;
use super::agent::JobState;
use super::error::StepError;
use super::model::{DesiredState, InstanceRecord};

/// What the agent says, in the CLI's words: `running`, `failing`, `stopped`,
/// `starting`, or `unresponsive agent`; empty for an instance without a VM.
async fn process_state(core: &Core, instance: &InstanceRecord) -> String {
    let Some(agent_id) = &instance.agent_id else {
        return String::new();
    };
    if instance.vm_cid.is_none() {
        return String::new();
    }
    match core
        .agent_call(agent_id, "get_state", core.agent.get_state(agent_id))
        .await
    {
        Ok(state) => match state.job_state {
            JobState::Running => "running",
            JobState::Starting => "starting",
            JobState::Stopped => "stopped",
            JobState::Failing => "failing",
        }
        .to_string(),
        Err(_) => "unresponsive agent".to_string(),
    }
}

fn line(instance: &InstanceRecord, process_state: &str) -> serde_json::Value {
    let ips: Vec<&str> = instance
        .vm_networks
        .iter()
        .filter_map(|n| n.split_once('/').map(|(_, ip)| ip))
        .collect();
    let state = match instance.state {
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
        "state": state,
        "disk_cid": instance.disk_cid,
        "disk_cids": instance.disk_cid.iter().collect::<Vec<_>>(),
        "stemcell": instance.vm_stemcell,
        "ignore": false,
        "active": instance.vm_cid.is_some(),
        "processes": [],
        "vitals": null,
        "vm_created_at": "",
        "resurrection_paused": false,
    })
}

/// One JSON line per instance, agents asked in parallel, lines in group and index order.
pub async fn instance_lines(core: Arc<Core>, deployment: String) -> Result<String, StepError> {
    let mut instances: Vec<InstanceRecord> = core.records.instances(&deployment).await?;
    instances.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
    let mut asked = JoinSet::new();
    for (slot, instance) in instances.iter().enumerate() {
        let (core, instance) = (Arc::clone(&core), instance.clone());
        asked.spawn(async move { (slot, process_state(&core, &instance).await) });
    }
    let mut states = vec![String::new(); instances.len()];
    while let Some(joined) = asked.join_next().await {
        let (slot, state) = joined.map_err(|e| format!("internal error: {e}"))?;
        states[slot] = state;
    }
    let mut out = String::new();
    for (instance, state) in instances.iter().zip(&states) {
        out.push_str(&line(instance, state).to_string());
        out.push('\n');
    }
    Ok(out)
}
