//! `bosh ssh` and `bosh scp`, as BOSH's director serves them: the instances a target
//! names (an instance group, indexes or ids; none for all) that have a VM are each asked
//! to set up (or clean up) the session's user, and the task's result is one JSON line:
//! per instance, what its agent answered with the instance's `id`, `index` and `job`.

use serde_json::{Value, json};

use super::agent::SshRequest;
use super::error::StepError;
use super::model::InstanceRecord;
use super::ports::Ports;
use super::task::{JobError, TaskLog};

/// Which instances a session is for, as the CLI sends it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SshTarget {
    pub group: Option<String>,
    /// Each an index or an instance id; none for every instance (of the group).
    pub ids: Vec<String>,
}

impl SshTarget {
    /// `group/id` as BOSH's director writes a filter in its messages.
    fn describe(&self) -> String {
        format!(
            "{}/{}",
            self.group.as_deref().unwrap_or("*"),
            if self.ids.is_empty() {
                "*".to_string()
            } else {
                self.ids.join(",")
            }
        )
    }
}

/// The instances of `instances` that `target` chooses and that have a VM, in group and
/// index order, as `bosh logs` chooses them (an id of digits is an index).
pub fn choose<'a>(instances: &'a [InstanceRecord], target: &SshTarget) -> Vec<&'a InstanceRecord> {
    let group = target.group.as_deref();
    if target.ids.is_empty() {
        return super::logs::choose(instances, group, None);
    }
    let mut chosen: Vec<&InstanceRecord> = target
        .ids
        .iter()
        .flat_map(|id| super::logs::choose(instances, group, Some(id)))
        .collect();
    chosen.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
    chosen.dedup_by(|a, b| a.id == b.id);
    chosen
}

/// The task's work: every chosen instance's agent asked, in order; one agent's failure
/// fails the task, as on BOSH's director.
pub async fn run(
    ports: &Ports,
    log: &TaskLog,
    deployment: &str,
    target: SshTarget,
    request: SshRequest,
) -> Result<String, JobError> {
    let instances = ports.records.instances(deployment).await?;
    let chosen = choose(&instances, &target);
    if chosen.is_empty() {
        return Err(StepError::Failed(format!(
            "No instance with a VM in deployment '{deployment}' matched filter {}",
            target.describe()
        ))
        .into());
    }
    let command = match &request {
        SshRequest::Setup { .. } => "setup",
        SshRequest::Cleanup { .. } => "cleanup",
    };
    let mut answers = Vec::new();
    // Each chosen for having a VM, whose agent is asked.
    let agents = chosen
        .into_iter()
        .filter_map(|i| i.agent_id.clone().map(|agent| (i, agent)));
    for (instance, agent) in agents {
        log.check()?;
        let session = ports
            .agents
            .call(&agent, "ssh", ports.agents.agent.ssh(&agent, &request))
            .await
            .map_err(|e| StepError::Failed(format!("ssh on {}: {e}", instance.name())))?;
        let mut answer = json!({
            "command": command,
            "status": "success",
            "id": instance.id,
            "index": instance.index,
            "job": instance.group,
        });
        if let SshRequest::Setup { .. } = request {
            answer["ip"] = session.ip.map_or(Value::Null, Value::String);
            answer["host_public_key"] = session.host_public_key.map_or(Value::Null, Value::String);
        }
        answers.push(answer);
    }
    Ok(Value::Array(answers).to_string())
}
