//! The agent's persistent disks: a disk is found by its CID among the IaaS's disks, or
//! where a hint the client gave (`add_persistent_disk`) says; mounted at `store/`, or at
//! the migration target while another is there; unmounted; and its data migrated to the
//! one at the migration target, which then takes its place.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::actions::VmAgent;
use super::error::ActionError;

/// Where the hints of `add_persistent_disk` are kept, by disk CID.
const HINTS: &str = "bosh/disk_hints.json";

impl VmAgent {
    fn hints(&self) -> BTreeMap<String, String> {
        std::fs::read(self.vm.root().join(HINTS))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Keeps where a disk is (`add_persistent_disk(cid, hint)`), or forgets it (`None`).
    pub(crate) fn set_hint(&self, cid: &str, hint: Option<&str>) -> Result<(), ActionError> {
        if !super::blobstore::valid_id(cid) {
            return Err(ActionError::NotADiskCid(cid.to_string()));
        }
        let mut hints = self.hints();
        match hint {
            Some(h) => hints.insert(cid.to_string(), h.to_string()),
            None => hints.remove(cid),
        };
        let text = serde_json::to_vec(&hints).map_err(|source| ActionError::Encode {
            what: "the disk hints",
            source,
        })?;
        Ok(fleet_vm::iaas::write_atomically(
            &self.vm.root().join(HINTS),
            &text,
        )?)
    }

    /// Where disk `cid` is: as its hint says (a directory inside the IaaS: a hint never
    /// takes the VM's store elsewhere on this machine), else where the IaaS keeps it.
    fn disk(&self, cid: &str) -> Result<PathBuf, ActionError> {
        if !super::blobstore::valid_id(cid) {
            return Err(ActionError::NotADiskCid(cid.to_string()));
        }
        let iaas = self.disks.parent().unwrap_or(&self.disks);
        let hinted = self
            .hints()
            .get(cid)
            .and_then(|hint| std::fs::canonicalize(hint).ok())
            .filter(|path| path.is_dir())
            .filter(|path| std::fs::canonicalize(iaas).is_ok_and(|root| path.starts_with(root)));
        // Without a hint, where the IaaS has it: an attached disk is in its VM's directory
        // (all an agent inside its VM sees).
        let known = || {
            if self.disks.starts_with(self.vm.root()) {
                return self.disks.join(cid);
            }
            fleet_vm::iaas::ProcessIaas::of_vm(self.vm.root())
                .map(|(iaas, _)| iaas.disk_dir(cid))
                .filter(|dir| dir.starts_with(iaas))
                .unwrap_or_else(|| self.disks.join(cid))
        };
        Ok(hinted.unwrap_or_else(known))
    }

    pub(crate) fn mount(&self, cid: &str) -> Result<(), ActionError> {
        let disk = self.disk(cid)?;
        if !disk.is_dir() {
            return Err(ActionError::NotAttached(cid.to_string()));
        }
        self.vm
            .mount(&disk)
            .map_err(ActionError::io("mount the disk"))
    }

    pub(crate) fn unmount(&self, cid: &str) -> Result<Value, ActionError> {
        let disk = self.disk(cid)?;
        let mounted = self.mounted_disks().contains(&cid.to_string());
        self.vm
            .unmount_disk(&disk)
            .map_err(ActionError::io("unmount the disk"))?;
        Ok(if mounted {
            json!({"message": format!("Unmounted partition of disk {cid}")})
        } else {
            json!({"message": format!("Partition of disk {cid} is not mounted")})
        })
    }

    pub(crate) fn mounted_disks(&self) -> Vec<String> {
        [self.vm.store(), self.vm.migration_target()]
            .iter()
            .filter_map(|at| self.vm.mounted_at(at))
            .filter_map(|disk| disk.file_name()?.to_str().map(str::to_string))
            .collect()
    }

    /// The data of the disk at `store/` copied to the one at the migration target, which
    /// then takes its place.
    pub(crate) async fn migrate(&self) -> Result<(), ActionError> {
        let from = self
            .vm
            .mounted_at(&self.vm.store())
            .ok_or(ActionError::NothingMounted("store/"))?;
        let to = self
            .vm
            .mounted_at(&self.vm.migration_target())
            .ok_or(ActionError::NothingMounted("store_migration_target/"))?;
        tokio::task::spawn_blocking(move || fleet_vm::iaas::copy_tree(&from, &to))
            .await
            .map_err(|_| ActionError::Interrupted("disk migration"))?
            .map_err(ActionError::io("copy the disk's data"))?;
        self.vm
            .finish_migration()
            .map_err(ActionError::io("finish the migration"))
    }
}
