//! Binding a deployment's existing VMs, as BOSH's director does before it decides:
//! every agent is asked for its state at once; what answered and with which addresses,
//! and what did not, is what a deploy, a stop and a delete decide from.

use std::collections::{BTreeSet, HashMap};

use tokio::task::JoinSet;

use crate::error::StepError;
use crate::model::InstanceRecord;
use crate::network::to_u32;
use crate::ports::Agents;
use crate::task::TaskLog;

/// What binding learned: instances whose agents did not answer, and the addresses the
/// others reported, by instance id.
pub(super) struct Bound {
    pub(super) unresponsive: BTreeSet<String>,
    pub(super) reported: HashMap<String, Vec<(String, u32)>>,
}

/// Asks every agent of the deployment for its state, in parallel. Unanswered agents fail
/// the deploy, unless `fix`: then their instances get new VMs.
pub(super) async fn bind(
    agents: &Agents,
    log: &TaskLog,
    existing: &[InstanceRecord],
    fix: bool,
) -> Result<Bound, StepError> {
    let stage = log.stage("Preparing deployment", Vec::new(), 1);
    // A deployment's first deploy has nothing to bind.
    let step = stage.start(if existing.is_empty() {
        "Preparing deployment"
    } else {
        "Binding existing deployment"
    });
    let mut calls = JoinSet::new();
    // Ignored instances are not asked: their agents may be down for a reason.
    for instance in existing.iter().filter(|i| !i.ignore) {
        let (Some(agent), Some(_)) = (instance.agent_id.clone(), &instance.vm_cid) else {
            continue;
        };
        let agents = agents.clone();
        let (id, name) = (instance.id.clone(), instance.name());
        calls.spawn(crate::trace::within(async move {
            let state = agents
                .call(&agent, "get_state", agents.agent.get_state(&agent))
                .await
                .ok();
            (id, name, state)
        }));
    }
    let mut bound = Bound {
        unresponsive: BTreeSet::new(),
        reported: HashMap::new(),
    };
    let mut names = Vec::new();
    while let Some(joined) = calls.join_next().await {
        let (id, name, state) = joined?;
        match state {
            Some(state) => {
                let nets = state
                    .networks
                    .into_iter()
                    .map(|(n, ip)| (n, to_u32(ip)))
                    .collect();
                bound.reported.insert(id, nets);
            }
            None => {
                bound.unresponsive.insert(id);
                names.push(name);
            }
        }
    }
    names.sort();
    if !names.is_empty() && !fix {
        return step.end(Err(StepError::Failed(format!(
            "Timed out sending get_state to the agents of {}; run cloud check (`bosh cck`) to see why they \
             cannot be reached, or recreate with fix to replace their VMs",
            names.join(", ")
        ))));
    }
    step.finish();
    Ok(bound)
}
