//! The deployment state file, in the layout BOSH's CLI keeps: who deploys (`director_id`,
//! `installation_id`), what exists now (`current_vm_cid`, `current_stemcell_id`,
//! `current_disk_id`, `current_release_ids`, `current_manifest_sha`) and every stemcell,
//! disk and release made (`stemcells`, `disks`, `releases`, by record ids). It is
//! written whole through a file renamed into place after every step that makes or
//! deletes something, so that a run killed anywhere leaves a state the next run
//! finishes from.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StemcellRecord {
    pub id: String,
    pub name: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<u32>,
    pub cid: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskRecord {
    pub id: String,
    pub cid: String,
    pub size: u64,
    #[serde(default)]
    pub cloud_properties: Json,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRecord {
    pub id: String,
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DeploymentState {
    #[serde(default)]
    pub director_id: String,
    #[serde(default)]
    pub installation_id: String,
    #[serde(default)]
    pub current_vm_cid: String,
    #[serde(default)]
    pub current_stemcell_id: String,
    #[serde(default)]
    pub current_disk_id: String,
    #[serde(default, deserialize_with = "nullable")]
    pub current_release_ids: Vec<String>,
    #[serde(default)]
    pub current_manifest_sha: String,
    #[serde(default, deserialize_with = "nullable")]
    pub disks: Vec<DiskRecord>,
    #[serde(default, deserialize_with = "nullable")]
    pub stemcells: Vec<StemcellRecord>,
    #[serde(default, deserialize_with = "nullable")]
    pub releases: Vec<ReleaseRecord>,
}

impl DeploymentState {
    /// Whether the last deploy was of this manifest (its digest), this stemcell and these
    /// releases (name and version): then there is nothing to deploy.
    pub fn deployed(&self, sha: &str, stemcell: (&str, &str), releases: &[(&str, &str)]) -> bool {
        let current = self
            .stemcells
            .iter()
            .find(|s| s.id == self.current_stemcell_id);
        let same_stemcell =
            current.is_some_and(|s| (s.name.as_str(), s.version.as_str()) == stemcell);
        let same_releases = !self.releases.is_empty()
            && self.releases.len() == releases.len()
            && releases.iter().all(|(name, version)| {
                self.releases
                    .iter()
                    .any(|r| r.name == *name && r.version == *version)
            });
        !sha.is_empty() && self.current_manifest_sha == sha && same_stemcell && same_releases
    }
}

/// BOSH's CLI writes empty lists as `null`.
fn nullable<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("the deployment state file {path}: {message}")]
    Unreadable { path: String, message: String },
    #[error("cannot write the deployment state file {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// A random UUID, as the CLI names its records.
pub fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The state file and what it holds now.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    pub state: DeploymentState,
}

impl StateFile {
    /// The state at `path`; a new one (with a director and an installation id, written at
    /// once) where there is none.
    ///
    /// # Errors
    /// A state file that is not the CLI's JSON, or one that cannot be written.
    pub async fn open(path: &Path) -> Result<StateFile, StateError> {
        let state = match tokio::fs::read(path).await {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| StateError::Unreadable {
                path: path.display().to_string(),
                message: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => DeploymentState::default(),
            Err(e) => {
                return Err(StateError::Unreadable {
                    path: path.display().to_string(),
                    message: e.to_string(),
                });
            }
        };
        let mut file = StateFile {
            path: path.to_path_buf(),
            state,
        };
        if file.state.director_id.is_empty() || file.state.installation_id.is_empty() {
            file.change(|s| {
                if s.director_id.is_empty() {
                    s.director_id = uuid();
                }
                if s.installation_id.is_empty() {
                    s.installation_id = uuid();
                }
            })
            .await?;
        }
        Ok(file)
    }

    pub fn exists(path: &Path) -> bool {
        path.exists()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Changes the state and writes it, whole, before returning: written and synced on
    /// tokio's blocking pool.
    ///
    /// # Errors
    /// When it cannot be written: the change is not kept then.
    pub async fn change(
        &mut self,
        change: impl FnOnce(&mut DeploymentState),
    ) -> Result<(), StateError> {
        let mut next = self.state.clone();
        change(&mut next);
        let text = serde_json::to_vec_pretty(&next).expect("a state serializes");
        let write = |source| StateError::Write {
            path: self.path.display().to_string(),
            source,
        };
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            fleet_file::write(&path, &text, fleet_file::Mode::Private)
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|written| written)
        .map_err(write)?;
        self.state = next;
        Ok(())
    }

    /// Removes the state file (`delete-env` is done).
    ///
    /// # Errors
    /// When it cannot be removed.
    pub async fn remove(self) -> Result<(), StateError> {
        match tokio::fs::remove_file(&self.path).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StateError::Write {
                path: self.path.display().to_string(),
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// The stemcell record that is current, if any.
    pub fn current_stemcell(&self) -> Option<&StemcellRecord> {
        let id = &self.state.current_stemcell_id;
        self.state.stemcells.iter().find(|s| &s.id == id)
    }

    pub fn current_disk(&self) -> Option<&DiskRecord> {
        let id = &self.state.current_disk_id;
        self.state.disks.iter().find(|d| &d.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deploy_is_skipped_only_when_manifest_stemcell_and_releases_are_what_was_deployed() {
        let state = DeploymentState {
            current_manifest_sha: "m1".into(),
            current_stemcell_id: "s".into(),
            stemcells: vec![StemcellRecord {
                id: "s".into(),
                name: "sc".into(),
                version: "1".into(),
                api_version: Some(2),
                cid: "stemcell-1".into(),
            }],
            releases: vec![ReleaseRecord {
                id: "r".into(),
                name: "kv".into(),
                version: "1".into(),
            }],
            ..DeploymentState::default()
        };
        assert!(state.deployed("m1", ("sc", "1"), &[("kv", "1")]));
        assert!(
            !state.deployed("m2", ("sc", "1"), &[("kv", "1")]),
            "manifest"
        );
        assert!(
            !state.deployed("m1", ("sc", "2"), &[("kv", "1")]),
            "stemcell"
        );
        assert!(
            !state.deployed("m1", ("sc", "1"), &[("kv", "2")]),
            "release version"
        );
        assert!(
            !state.deployed("m1", ("sc", "1"), &[("kv", "1"), ("cpi", "1")]),
            "one more release"
        );
        let cleared = DeploymentState {
            releases: Vec::new(),
            ..state.clone()
        };
        assert!(
            !cleared.deployed("m1", ("sc", "1"), &[]),
            "a deploy cut short"
        );
    }

    /// A state file as the bosh CLI (v7) writes it: four-space indents, its manifest
    /// digest a SHA-512, disks with their cloud properties, stemcells with their API
    /// version; every field read, and the deployment it describes found deployed.
    #[tokio::test]
    async fn a_state_file_in_the_clis_own_layout_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cli-state.json");
        let sha = "ab".repeat(64);
        std::fs::write(
            &path,
            format!(
                r#"{{
    "director_id": "5c1e2a0b-7d2f-4e41-6b1a-0d9f3c2e8a11",
    "installation_id": "1f0c9d8e-2b3a-4c5d-7e6f-8a9b0c1d2e3f",
    "current_vm_cid": "vm-0123456789abcdef",
    "current_stemcell_id": "a1b2c3d4-0000-4000-8000-000000000001",
    "current_disk_id": "a1b2c3d4-0000-4000-8000-000000000002",
    "current_release_ids": [
        "a1b2c3d4-0000-4000-8000-000000000003",
        "a1b2c3d4-0000-4000-8000-000000000004"
    ],
    "current_manifest_sha": "{sha}",
    "disks": [
        {{
            "id": "a1b2c3d4-0000-4000-8000-000000000002",
            "cid": "disk-0123456789abcdef",
            "size": 64,
            "cloud_properties": {{}}
        }}
    ],
    "stemcells": [
        {{
            "id": "a1b2c3d4-0000-4000-8000-000000000001",
            "name": "bosh-fleet-process-stemcell",
            "version": "1",
            "api_version": 2,
            "cid": "stemcell-0123456789abcdef"
        }}
    ],
    "releases": [
        {{
            "id": "a1b2c3d4-0000-4000-8000-000000000003",
            "name": "kv",
            "version": "1"
        }},
        {{
            "id": "a1b2c3d4-0000-4000-8000-000000000004",
            "name": "process-cpi",
            "version": "1"
        }}
    ]
}}"#
            ),
        )
        .unwrap();
        let file = StateFile::open(&path).await.unwrap();
        assert_eq!(file.current_disk().unwrap().cid, "disk-0123456789abcdef");
        assert_eq!(
            file.current_stemcell().unwrap().cid,
            "stemcell-0123456789abcdef"
        );
        let state = &file.state;
        assert_eq!(state.current_vm_cid, "vm-0123456789abcdef");
        assert_eq!(state.releases.len(), 2);
        assert!(state.deployed(
            &sha,
            ("bosh-fleet-process-stemcell", "1"),
            &[("kv", "1"), ("process-cpi", "1")]
        ));
    }

    #[tokio::test]
    async fn the_state_is_written_whole_after_each_change_and_reads_the_clis_nulls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("env-state.json");
        let mut file = StateFile::open(&path).await.unwrap();
        let director = file.state.director_id.clone();
        assert_eq!(director.len(), 36);
        file.change(|s| s.current_vm_cid = "vm-1".into())
            .await
            .unwrap();
        let again = StateFile::open(&path).await.unwrap();
        assert_eq!(again.state.current_vm_cid, "vm-1");
        assert_eq!(again.state.director_id, director, "kept");
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for key in [
            "director_id",
            "installation_id",
            "current_vm_cid",
            "current_stemcell_id",
            "current_disk_id",
            "current_release_ids",
            "current_manifest_sha",
            "disks",
            "stemcells",
            "releases",
        ] {
            assert!(written.get(key).is_some(), "{key}");
        }
        std::fs::write(&path, r#"{"director_id":"d","installation_id":"i","disks":null,"stemcells":null,"releases":null,"current_release_ids":null}"#).unwrap();
        let cli = StateFile::open(&path).await.unwrap();
        assert!(cli.state.disks.is_empty() && cli.state.releases.is_empty());
        std::fs::write(&path, "not json").unwrap();
        assert!(
            StateFile::open(&path)
                .await
                .unwrap_err()
                .to_string()
                .contains("env-state.json")
        );
    }
}
