//! Stopping an instance's jobs as BOSH's director does: drain first (unless skipped),
//! then stop.

use crate::error::CallContext;
use std::time::Duration;

use tokio::time::sleep;

use super::super::agent::Drain;
use super::super::error::StepError;
use crate::ports::Agents;

/// Drain (a positive answer is a wait in seconds; a negative one means wait that long
/// and ask again), then stop. `skip_drain` skips `pre-stop` and drain, as BOSH's does.
pub async fn stop_jobs(
    agents: &Agents,
    agent: &str,
    name: &str,
    skip_drain: bool,
    drain: Drain<'_>,
) -> Result<(), StepError> {
    if !skip_drain {
        let mut answer = agents
            .call(agent, "drain", agents.agent.drain(agent, drain))
            .await
            .for_subject("drain", name)?;
        while answer < 0 {
            sleep(Duration::from_secs(answer.unsigned_abs())).await;
            answer = agents
                .call(agent, "drain", agents.agent.drain(agent, Drain::Status))
                .await
                .for_subject("drain", name)?;
        }
        if answer > 0 {
            sleep(Duration::from_secs(answer as u64)).await;
        }
    }
    agents
        .call(agent, "stop", agents.agent.stop(agent))
        .await
        .map_err(|e| StepError::Failed(format!("stop for {name}: {e}")))
}
