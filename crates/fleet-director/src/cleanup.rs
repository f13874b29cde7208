//! `bosh clean-up`: what no deployment uses goes. By default the two newest unused
//! versions of each release and stemcell stay, for a quick way back, and orphaned disks
//! stay; with `remove_all` every unused version goes, and orphaned disks with them unless
//! they are to be kept.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::cpi::Cpi;
use super::error::StepError;
use super::model::{DeployedVersions, DiskRecord, Release, Stemcell};
use super::records::{Records, change};
use super::task::{JobError, TaskLog};
use fleet_store::Write;

/// How many unused versions of each release and stemcell a default clean-up keeps.
const KEEP_UNUSED: usize = 2;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanUpOptions {
    pub remove_all: bool,
    pub keep_orphaned_disks: bool,
}

/// What a clean-up deletes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanUpPlan {
    pub releases: Vec<Release>,
    pub stemcells: Vec<Stemcell>,
    pub disks: Vec<DiskRecord>,
}

/// The unused versions of each name that go: all of them, or all but the newest
/// [`KEEP_UNUSED`].
fn unused<T: Clone>(
    items: &[T],
    name: impl Fn(&T) -> &str,
    version: impl Fn(&T) -> &str,
    used: impl Fn(&T) -> bool,
    remove_all: bool,
) -> Vec<T> {
    let mut by_name: BTreeMap<&str, Vec<&T>> = BTreeMap::new();
    for item in items.iter().filter(|i| !used(i)) {
        by_name.entry(name(item)).or_default().push(item);
    }
    let keep = if remove_all { 0 } else { KEEP_UNUSED };
    by_name
        .into_values()
        .flat_map(|mut versions| {
            versions.sort_by(|a, b| fleet_versions::compare(version(b), version(a)));
            versions.into_iter().skip(keep).cloned().collect::<Vec<_>>()
        })
        .collect()
}

/// Whether no other item of the same name has a newer version.
pub(crate) fn is_newest<T>(items: &[T], item: &T, key: impl Fn(&T) -> (&String, &String)) -> bool {
    let (name, version) = key(item);
    items.iter().all(|other| {
        let (other_name, other_version) = key(other);
        other_name != name
            || fleet_versions::compare(other_version, version) != std::cmp::Ordering::Greater
    })
}

/// What goes, from what the director has and what its deployments use. Pure.
pub fn plan(
    releases: &[Release],
    stemcells: &[Stemcell],
    deployed: &DeployedVersions,
    orphaned: Vec<DiskRecord>,
    options: CleanUpOptions,
) -> CleanUpPlan {
    let mut used_stemcells: BTreeSet<(&str, &str)> = deployed
        .stemcells
        .iter()
        .map(|(os, version, _)| (os.as_str(), version.as_str()))
        .collect();
    let mut used_releases: BTreeSet<(&str, &str)> = deployed
        .releases
        .iter()
        .map(|(name, version)| (name.as_str(), version.as_str()))
        .collect();
    // A manifest that says `latest` uses the newest version there is.
    for r in releases {
        if used_releases.contains(&(r.name.as_str(), "latest"))
            && is_newest(releases, r, |x| (&x.name, &x.version))
        {
            used_releases.insert((r.name.as_str(), r.version.as_str()));
        }
    }
    for s in stemcells {
        if used_stemcells.contains(&(s.os.as_str(), "latest"))
            && is_newest(stemcells, s, |x| (&x.os, &x.version))
        {
            used_stemcells.insert((s.os.as_str(), s.version.as_str()));
        }
    }
    CleanUpPlan {
        releases: unused(
            releases,
            |r| &r.name,
            |r| &r.version,
            |r| used_releases.contains(&(r.name.as_str(), r.version.as_str())),
            options.remove_all,
        ),
        stemcells: unused(
            stemcells,
            |s| &s.os,
            |s| &s.version,
            |s| used_stemcells.contains(&(s.os.as_str(), s.version.as_str())),
            options.remove_all,
        ),
        disks: if options.remove_all && !options.keep_orphaned_disks {
            orphaned
        } else {
            Vec::new()
        },
    }
}

/// Deletes one orphaned disk from the cloud, then forgets it.
async fn delete_disk(records: &Records, cpi: &dyn Cpi, disk: &DiskRecord) -> Result<(), StepError> {
    cpi.delete_disk(&disk.cid)
        .await
        .map_err(|e| StepError::Failed(format!("delete_disk {}: {e}", disk.cid)))?;
    records
        .write(vec![change::disk_gone(&disk.cid)])
        .await
        .map_err(StepError::from)
}

/// Deletes orphaned disks, a step each; the first failure stops the rest.
pub async fn delete_disks(
    records: &Records,
    cpi: &dyn Cpi,
    log: &TaskLog,
    disks: &[DiskRecord],
) -> Result<(), JobError> {
    if disks.is_empty() {
        return Ok(());
    }
    let stage = log.stage("Deleting orphaned disks", Vec::new(), disks.len() as u32);
    for disk in disks {
        log.check()?;
        let step = stage.start(disk.cid.clone());
        step.end(delete_disk(records, cpi, disk).await)?;
    }
    Ok(())
}

/// Forgets records, a step each: `(what the step names, the write that forgets it)`.
pub(crate) async fn forget(
    records: &Records,
    log: &TaskLog,
    stage: &str,
    forgotten: Vec<(String, Write)>,
) -> Result<(), JobError> {
    if forgotten.is_empty() {
        return Ok(());
    }
    let stage = log.stage(stage, Vec::new(), forgotten.len() as u32);
    for (what, write) in forgotten {
        log.check()?;
        let step = stage.start(what);
        let gone = records.write(vec![write]).await;
        step.end(gone.map_err(StepError::from))?;
    }
    Ok(())
}

/// Deletes the blobs no record names any more: the archives of deleted releases that no
/// other release shares, and those of an upload cut short.
pub(crate) async fn delete_unnamed_blobs(records: &Records, log: &TaskLog) -> Result<(), JobError> {
    let named = records.named_blobs().await?;
    let kept = records.blob_ids().await?;
    // Rendered templates are their deployment's to delete (see `templates`).
    let unnamed: Vec<String> = kept
        .into_iter()
        .filter(|b| {
            !named.contains(b)
                && !crate::templates::is_rendered_blob(b)
                // An exported release is kept for its download.
                && !b.starts_with(crate::release_export::EXPORT_PREFIX)
        })
        .collect();
    if unnamed.is_empty() {
        return Ok(());
    }
    let stage = log.stage("Deleting release blobs", Vec::new(), unnamed.len() as u32);
    for blob in unnamed {
        log.check()?;
        let step = stage.start(blob.clone());
        let gone = records.delete_blob(blob).await;
        step.end(gone.map_err(StepError::from))?;
    }
    Ok(())
}

/// Carries out `plan`: disks first (they hold data; a failure stops before anything
/// else), then the release and stemcell records.
pub async fn clean_up(
    records: Records,
    cpi: Arc<dyn Cpi>,
    log: TaskLog,
    plan: CleanUpPlan,
) -> Result<String, JobError> {
    delete_disks(&records, &*cpi, &log, &plan.disks).await?;
    let releases = plan
        .releases
        .iter()
        .map(|r| (format!("{}/{}", r.name, r.version), change::release_gone(r)))
        .collect();
    forget(&records, &log, "Deleting releases", releases).await?;
    delete_unnamed_blobs(&records, &log).await?;
    let stemcells = plan
        .stemcells
        .iter()
        .map(|s| {
            (
                format!("{}/{}", s.name, s.version),
                change::stemcell_gone(s),
            )
        })
        .collect();
    forget(&records, &log, "Deleting stemcells", stemcells).await?;
    Ok(format!(
        "Deleted {} release(s), {} stemcell(s), {} orphaned disk(s)",
        plan.releases.len(),
        plan.stemcells.len(),
        plan.disks.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(version: &str) -> Release {
        Release {
            name: "pg".into(),
            version: version.into(),
            jobs: Vec::new(),
            packages: Vec::new(),
            ..Default::default()
        }
    }

    fn stemcell(version: &str) -> Stemcell {
        Stemcell {
            name: "bosh-jammy".into(),
            os: "jammy".into(),
            version: version.into(),
            cid: None,
        }
    }

    fn disk(cid: &str) -> DiskRecord {
        DiskRecord {
            cid: cid.into(),
            deployment: "d".into(),
            instance_id: None,
            size: 1024,
            cloud_properties: Default::default(),
            orphaned: true,
            orphaned_at: Some(1),
            instance_name: Some("db/abc".into()),
            az: None,
        }
    }

    #[test]
    fn the_two_newest_unused_versions_stay_unless_all_go_and_used_ones_always_stay() {
        let releases: Vec<Release> = ["1.9", "1.10", "2", "3", "4"].map(release).into();
        let stemcells: Vec<Stemcell> = ["1.1", "1.2", "1.3"].map(stemcell).into();
        let deployed = DeployedVersions {
            releases: [("pg".to_string(), "4".to_string())].into(),
            stemcells: vec![("jammy".into(), "1.1".into(), "d".into())],
        };
        let versions = |plan: &CleanUpPlan| -> (Vec<String>, Vec<String>) {
            let mut r: Vec<String> = plan.releases.iter().map(|r| r.version.clone()).collect();
            let mut s: Vec<String> = plan.stemcells.iter().map(|s| s.version.clone()).collect();
            r.sort();
            s.sort();
            (r, s)
        };
        let default = plan(
            &releases,
            &stemcells,
            &deployed,
            vec![disk("d-1")],
            CleanUpOptions::default(),
        );
        // Unused: 1.9, 1.10, 2, 3; the newest two (3 and 2) stay; 1.10 is newer than 1.9.
        assert_eq!(versions(&default).0, ["1.10", "1.9"]);
        assert!(versions(&default).1.is_empty(), "two unused stemcells stay");
        assert!(default.disks.is_empty(), "orphaned disks stay by default");

        let all = CleanUpOptions {
            remove_all: true,
            keep_orphaned_disks: false,
        };
        let everything = plan(&releases, &stemcells, &deployed, vec![disk("d-1")], all);
        assert_eq!(versions(&everything).0, ["1.10", "1.9", "2", "3"]);
        assert_eq!(versions(&everything).1, ["1.2", "1.3"]);
        assert_eq!(everything.disks, [disk("d-1")]);

        // `latest` in a deployed manifest keeps the newest version.
        let on_latest = DeployedVersions {
            releases: [("pg".to_string(), "latest".to_string())].into(),
            stemcells: vec![],
        };
        let gone = plan(&releases, &stemcells, &on_latest, vec![], all);
        assert!(!gone.releases.iter().any(|r| r.version == "4"), "{gone:?}");
        assert_eq!(gone.releases.len(), 4);

        let keep_disks = CleanUpOptions {
            keep_orphaned_disks: true,
            ..all
        };
        assert!(
            plan(
                &releases,
                &stemcells,
                &deployed,
                vec![disk("d-1")],
                keep_disks
            )
            .disks
            .is_empty()
        );
    }
}
