//! VMs whose existence a crash could leave the records not knowing. One is noted before
//! the cloud makes it, and again when a recorded one is forgotten before its deletion;
//! the note goes in the same write that records what the cloud then has. A note a crash
//! left behind names a VM no record may name: it is deleted, at the next start of a
//! director that holds its store alone, and by the next deploy or deletion of its
//! deployment (under the deployment's lock, so on a shared database too).

use serde::{Deserialize, Serialize};

use crate::cpi::Cpi;
use crate::records::{Records, change};
use fleet_store::StoreError;

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

/// What settling did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// VMs deleted, as `(cid, instance)`.
    pub deleted: Vec<(String, String)>,
    /// Notes kept for the next try: the cloud could not say or could not delete.
    pub kept: usize,
}

/// Settles the notes of `deployment` (of every deployment with `None`): a VM the cloud
/// has and no record names is deleted, and the note goes.
///
/// # Errors
/// The store's; a cloud that fails keeps the note instead (see [`Settled::kept`]).
pub async fn settle(
    cpi: &dyn Cpi,
    records: &Records,
    deployment: Option<&str>,
) -> Result<Settled, StoreError> {
    let mut settled = Settled::default();
    for note in records.unsettled_vms(deployment).await? {
        let cid = match &note.cid {
            Some(cid) => Some(cid.clone()),
            None => match cpi.vm_of_agent(&note.agent_id).await {
                Ok(cid) => cid,
                Err(e) => {
                    tracing::warn!(agent = %note.agent_id, instance = %note.instance, error = %e, "the cloud cannot say whether a VM was made");
                    settled.kept += 1;
                    continue;
                }
            },
        };
        if let Some(cid) = cid
            && !records.names_vm(&cid).await?
        {
            if let Err(e) = cpi.delete_vm(&cid).await {
                tracing::warn!(vm = %cid, instance = %note.instance, error = %e, "a VM a crash left unrecorded could not be deleted");
                settled.kept += 1;
                continue;
            }
            tracing::warn!(vm = %cid, instance = %note.instance, "deleted a VM a crash left unrecorded");
            settled.deleted.push((cid, note.instance.clone()));
        }
        records
            .write(vec![change::vm_settled(&note.agent_id)])
            .await?;
    }
    Ok(settled)
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
