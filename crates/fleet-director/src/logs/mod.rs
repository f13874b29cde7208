//! Fetching logs (`bosh logs`), as BOSH's director does it: each chosen instance's agent
//! packs the logs asked for into a gzipped tarball; one instance's bundle is kept as the
//! agent made it, several are packed together (`GROUP.ID.TIME.tgz` each) into one. A
//! bundle is kept as a blob for download (`GET /resources/ID`) for ten days; each fetch
//! deletes those older. An errand's run keeps its instance's job logs the same way.

pub use crate::log_request::{LogFilter, LogRequest, LogRequestError, LogType};
pub use crate::model::LogBundle;

use fleet_clock::WallClock;

use super::error::StepError;
use super::ids::new_id;
use super::model::InstanceRecord;
use super::ports::{Agents, Ports};
use super::records::Records;
use super::records::change;
use super::task::{JobError, TaskLog};

/// How long a bundle is kept, as BOSH keeps its log bundles.
pub const KEPT_FOR_MS: u64 = 10 * 24 * 60 * 60 * 1000;

const BUNDLE_PREFIX: &str = "logs-";

/// Whether the blob `id` is a log bundle (and so neither a release's nor a deployment's,
/// and what `GET /resources/ID` may hand out).
pub fn is_bundle(id: &str) -> bool {
    id.starts_with(BUNDLE_PREFIX)
}

/// The instances of `instances` that `group` and `id` (an index or an instance id; `*`
/// or none for all) choose and that have a VM to ask, in group and index order.
pub fn choose<'a>(
    instances: &'a [InstanceRecord],
    group: Option<&str>,
    id: Option<&str>,
) -> Vec<&'a InstanceRecord> {
    let any = |v: Option<&str>| v.is_none_or(|v| v == "*" || v.is_empty());
    let mut chosen: Vec<&InstanceRecord> = instances
        .iter()
        .filter(|i| i.agent_id.is_some())
        .filter(|i| any(group) || group == Some(i.group.as_str()))
        .filter(|i| any(id) || id == Some(i.id.as_str()) || id == Some(&i.index.to_string()))
        .collect();
    chosen.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
    chosen
}

/// The task's work: the logs of the instances chosen (by id) when it was asked for, as
/// one kept bundle; its id is the task's result, as the `bosh` CLI reads it. The
/// instances are read again here, so that a VM replaced in between is the one asked.
pub async fn fetch(
    ports: &Ports,
    log: &TaskLog,
    deployment: &str,
    chosen: Vec<String>,
    request: LogRequest,
) -> Result<String, JobError> {
    let (records, clock) = (&ports.records, &ports.clock);
    delete_old(records, clock).await?;
    let instances = records.instances(deployment).await?;
    let targets: Vec<&InstanceRecord> = chosen
        .iter()
        .filter_map(|id| instances.iter().find(|i| &i.id == id))
        .filter(|i| i.agent_id.is_some())
        .collect();
    if targets.is_empty() {
        return Err(StepError::Failed(
            "none of the chosen instances has a VM any more".to_string(),
        )
        .into());
    }
    let bundle = if chosen.len() == 1 {
        let bytes = from_instance(&ports.agents, log, targets[0], &request).await?;
        keep(records, clock, deployment, &bytes).await?
    } else {
        let mut packed = Vec::new();
        for target in targets {
            log.check()?;
            let bytes = from_instance(&ports.agents, log, target, &request).await?;
            let at = fleet_clock::rfc3339_unix(clock.unix_secs())
                .trim_end_matches('Z')
                .replace([':', 'T'], "-");
            packed.push((format!("{}.{}.{at}.tgz", target.group, target.id), bytes));
        }
        let stage = log.stage("Fetching group of logs", Vec::new(), 1);
        let step = stage.start("Packing log files together");
        // Every instance's logs, compressed again: off the async workers.
        let together = tokio::task::spawn_blocking(move || {
            let files: Vec<(&str, &[u8])> = packed
                .iter()
                .map(|(name, bytes)| (name.as_str(), bytes.as_slice()))
                .collect();
            fleet_release::build_tgz(&files)
        })
        .await;
        let kept = match together {
            Ok(together) => keep(records, clock, deployment, &together).await,
            Err(e) => Err(StepError::from(e)),
        };
        step.end(kept)?
    };
    Ok(bundle.id)
}

/// The logs `request` asks of `record`'s agent, as a stage of its own.
pub async fn from_instance(
    agents: &Agents,
    log: &TaskLog,
    record: &InstanceRecord,
    request: &LogRequest,
) -> Result<Vec<u8>, StepError> {
    let stage = log.stage(
        &format!("Fetching logs for {}", record.name()),
        Vec::new(),
        1,
    );
    let step = stage.start("Finding and packing log files");
    let Some(agent) = record.agent_id.clone() else {
        return step.end(Err(StepError::Failed(format!(
            "{} has no VM to fetch logs from",
            record.name()
        ))));
    };
    let fetching = agents.call(
        &agent,
        "fetch_logs",
        agents.agent.fetch_logs(&agent, request),
    );
    let fetched = log
        .unless_cancelled(|| format!("fetching logs from {}", record.name()), fetching)
        .await
        .and_then(|fetched| {
            fetched.map_err(|e| StepError::Failed(format!("fetch_logs on {}: {e}", record.name())))
        });
    step.end(fetched)
}

/// Keeps `bytes` as a new bundle of `deployment`.
pub async fn keep(
    records: &Records,
    clock: &WallClock,
    deployment: &str,
    bytes: &[u8],
) -> Result<LogBundle, StepError> {
    let bundle = LogBundle {
        id: new_id(BUNDLE_PREFIX.trim_end_matches('-')),
        deployment: deployment.to_string(),
        created_at: clock.unix_millis(),
        sha1: fleet_release::sha1_hex(bytes),
    };
    records.put_blob(&bundle.id, bytes.to_vec()).await?;
    records.write(vec![change::log_bundle(&bundle)]).await?;
    Ok(bundle)
}

/// Deletes the bundles kept longer than [`KEPT_FOR_MS`]: the record first, so that a
/// blob left by a failure in between is only an unnamed blob for `clean-up`.
pub async fn delete_old(records: &Records, clock: &WallClock) -> Result<(), StepError> {
    let now = clock.unix_millis();
    for bundle in records.log_bundles().await? {
        if bundle.created_at.saturating_add(KEPT_FOR_MS) <= now {
            records
                .write(vec![change::log_bundle_gone(&bundle.id)])
                .await?;
            records.delete_blob(bundle.id.clone()).await?;
        }
    }
    Ok(())
}
