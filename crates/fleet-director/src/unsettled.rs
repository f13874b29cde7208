//! VMs whose existence a crash could leave the records not knowing. One is noted before
//! the cloud makes it, and again when a recorded one is forgotten before its deletion;
//! the note goes in the same write that records what the cloud then has. A note a crash
//! left behind names a VM no record may name: it is deleted, at the next start of a
//! director that holds its store alone, by the next deploy or deletion of its deployment
//! (under the deployment's lock, so on a shared database too), and when the task that
//! made it ends.

use serde::{Deserialize, Serialize};

use crate::cpi::{Cpi, CpiError, VmRequest};
use crate::records::{Records, change};
use fleet_store::{StoreError, Write};

/// One noted VM. Stored first as an `[agent, instance]` pair, which still reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnsettledVm {
    pub agent_id: String,
    /// `group/index (id)`, or the compilation's worker: for the log.
    pub instance: String,
    /// Known for a VM being deleted; one being made is found by its agent.
    #[serde(default)]
    pub cid: Option<String>,
}

/// Has the cloud make the VM `request` asks for (for `instance`, as the log names it),
/// noted first, and writes `recorded(cid)` with the write that settles the note, so that
/// a crash at any point leaves no VM the records cannot find. A VM whose record the store
/// refuses is deleted again; its note stays while the cloud keeps it.
///
/// # Errors
/// The store's, noting or recording; inside, the cloud's refusal (nothing was made).
pub async fn create_vm(
    cpi: &dyn Cpi,
    records: &Records,
    request: &VmRequest,
    instance: &str,
    recorded: impl FnOnce(&str) -> Vec<Write>,
) -> Result<Result<String, CpiError>, StoreError> {
    let agent = &request.agent_id;
    let note = UnsettledVm {
        agent_id: agent.clone(),
        instance: instance.to_string(),
        cid: None,
    };
    records
        .write(vec![change::vm_unsettled(&request.deployment, &note)])
        .await?;
    let cid = match cpi.create_vm(request).await {
        Ok(cid) => cid,
        Err(refused) => {
            let _ = records.write(vec![change::vm_settled(agent)]).await;
            return Ok(Err(refused));
        }
    };
    let mut writes = recorded(&cid);
    writes.push(change::vm_settled(agent));
    if let Err(e) = records.write(writes).await {
        if cpi.delete_vm(&cid).await.is_ok() {
            let _ = records.write(vec![change::vm_settled(agent)]).await;
        }
        return Err(e);
    }
    Ok(Ok(cid))
}

/// Settles the notes of `deployment` (of every deployment with `None`): a VM the cloud
/// has and no record names is deleted, and the note goes; a note whose VM the cloud cannot
/// find or delete now stays for the next try.
///
/// # Errors
/// The store's.
pub async fn settle(
    cpi: &dyn Cpi,
    records: &Records,
    deployment: Option<&str>,
) -> Result<(), StoreError> {
    for note in records.unsettled_vms(deployment).await? {
        let cid = match &note.cid {
            Some(cid) => Some(cid.clone()),
            None => match cpi.vm_of_agent(&note.agent_id).await {
                Ok(cid) => cid,
                Err(e) => {
                    tracing::warn!(agent = %note.agent_id, instance = %note.instance, error = %e, "the cloud cannot say whether a VM was made");
                    continue;
                }
            },
        };
        if let Some(cid) = cid
            && !records.names_vm(&cid).await?
        {
            if let Err(e) = cpi.delete_vm(&cid).await {
                tracing::warn!(vm = %cid, instance = %note.instance, error = %e, "a VM a crash left unrecorded could not be deleted");
                continue;
            }
            tracing::warn!(vm = %cid, instance = %note.instance, "deleted a VM a crash left unrecorded");
        }
        records
            .write(vec![change::vm_settled(&note.agent_id)])
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_stored_as_a_pair_still_reads() {
        let old: UnsettledVm = serde_json::from_str(r#"["agent-1","web/0 (abc)"]"#).unwrap();
        assert_eq!(
            old,
            UnsettledVm {
                agent_id: "agent-1".into(),
                instance: "web/0 (abc)".into(),
                cid: None,
            }
        );
    }
}
