//! What a deploy does to each instance's persistent disk, decided with the rest of its
//! plan: keep it, create a first one, replace it (a new size or disk type: the data moves
//! to a new disk and the old one is orphaned), or orphan it when none is wanted any more.
//! Pure: the instance's record and the deployment's disk records in, the change out.
//! Whether a kept disk must be attached again is the executor's to know, since it depends
//! on whether the step before made the instance a new VM.

use serde_json::{Map, Value};

use crate::model::DiskRecord;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DiskChange {
    /// No disk, and none wanted.
    #[default]
    None,
    /// The disk stays as it is.
    Keep { cid: String },
    /// A disk of `size` (none when 0) takes the data of `old`, which is orphaned.
    /// `reuse`: a disk of that size an earlier attempt created for this instance and
    /// never switched to (its migration failed), taken instead of a new one so that
    /// retries do not pile up disks.
    Replace {
        old: Option<String>,
        size: u64,
        reuse: Option<String>,
    },
}

impl DiskChange {
    /// What an instance holds once a step gave it `disk` (or none).
    pub fn held(disk: Option<&str>) -> DiskChange {
        match disk {
            Some(cid) => DiskChange::Keep {
                cid: cid.to_string(),
            },
            None => DiskChange::None,
        }
    }

    /// The dry run's words for it; `None` when the disk stays as it is.
    pub fn describe(&self) -> Option<String> {
        match self {
            DiskChange::None | DiskChange::Keep { .. } => None,
            DiskChange::Replace {
                old: None, size, ..
            } => Some(format!("creates a {size} MB disk")),
            DiskChange::Replace {
                old: Some(old),
                size: 0,
                ..
            } => Some(format!("orphans disk {old}")),
            DiskChange::Replace {
                old: Some(old),
                size,
                ..
            } => Some(format!("moves disk {old} to a new {size} MB disk")),
        }
    }

    pub fn creates(&self) -> bool {
        matches!(self, DiskChange::Replace { size, reuse: None, .. } if *size > 0)
    }

    pub fn orphans(&self) -> bool {
        matches!(self, DiskChange::Replace { old: Some(_), .. })
    }
}

/// The disk change of one instance: `current` is the disk it has, `wanted` the size its
/// plan asks for (0: none) with `properties`, and `unfinished` that its last update did
/// not finish.
pub fn disk_change(
    instance_id: &str,
    current: Option<&DiskRecord>,
    disks: &[DiskRecord],
    wanted: u64,
    properties: &Map<String, Value>,
    unfinished: bool,
) -> DiskChange {
    match current {
        None if wanted == 0 => DiskChange::None,
        Some(disk) if disk.size == wanted && disk.cloud_properties == *properties => {
            DiskChange::Keep {
                cid: disk.cid.clone(),
            }
        }
        old => {
            let old = old.map(|d| d.cid.clone());
            // Only a migration or an update cut short can have left a disk behind.
            let reuse = (wanted > 0 && (old.is_some() || unfinished))
                .then(|| {
                    disks.iter().find(|d| {
                        !d.orphaned
                            && d.size == wanted
                            && d.cloud_properties == *properties
                            && d.instance_id.as_deref() == Some(instance_id)
                            && Some(&d.cid) != old.as_ref()
                    })
                })
                .flatten()
                .map(|d| d.cid.clone());
            DiskChange::Replace {
                old,
                size: wanted,
                reuse,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(cid: &str, size: u64, kind: &str) -> DiskRecord {
        DiskRecord {
            cid: cid.into(),
            deployment: "d".into(),
            instance_id: Some("i-1".into()),
            size,
            cloud_properties: props(kind),
            orphaned: false,
            orphaned_at: None,
            instance_name: None,
            az: None,
        }
    }

    fn props(kind: &str) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("type".into(), Value::String(kind.into()));
        map
    }

    fn change(
        current: Option<&DiskRecord>,
        disks: &[DiskRecord],
        wanted: u64,
        kind: &str,
    ) -> DiskChange {
        disk_change("i-1", current, disks, wanted, &props(kind), false)
    }

    #[test]
    fn no_disk_and_none_wanted_is_nothing_to_do() {
        assert_eq!(change(None, &[], 0, "ssd"), DiskChange::None);
    }

    #[test]
    fn the_same_size_and_disk_type_keep_the_disk() {
        let current = disk("disk-1", 10, "ssd");
        assert_eq!(
            change(Some(&current), std::slice::from_ref(&current), 10, "ssd"),
            DiskChange::Keep {
                cid: "disk-1".into()
            }
        );
    }

    #[test]
    fn a_new_size_or_disk_type_replaces_the_disk_and_a_first_disk_is_created() {
        let current = disk("disk-1", 10, "ssd");
        let disks = [current.clone()];
        let replaced = |size| DiskChange::Replace {
            old: Some("disk-1".into()),
            size,
            reuse: None,
        };
        assert_eq!(change(Some(&current), &disks, 20, "ssd"), replaced(20));
        assert_eq!(change(Some(&current), &disks, 10, "hdd"), replaced(10));
        let first = change(None, &[], 10, "ssd");
        assert_eq!(
            first,
            DiskChange::Replace {
                old: None,
                size: 10,
                reuse: None
            }
        );
        assert!(first.creates() && !first.orphans());
        assert_eq!(first.describe().as_deref(), Some("creates a 10 MB disk"));
    }

    #[test]
    fn a_disk_no_longer_wanted_is_orphaned_and_none_created() {
        let current = disk("disk-1", 10, "ssd");
        let gone = change(Some(&current), std::slice::from_ref(&current), 0, "ssd");
        assert_eq!(
            gone,
            DiskChange::Replace {
                old: Some("disk-1".into()),
                size: 0,
                reuse: None
            }
        );
        assert!(gone.orphans() && !gone.creates());
        assert_eq!(gone.describe().as_deref(), Some("orphans disk disk-1"));
    }

    #[test]
    fn a_disk_left_by_a_failed_migration_is_taken_again() {
        let current = disk("disk-1", 10, "ssd");
        let other_instance = DiskRecord {
            instance_id: Some("i-2".into()),
            ..disk("disk-3", 20, "ssd")
        };
        let orphan = DiskRecord {
            orphaned: true,
            ..disk("disk-4", 20, "ssd")
        };
        let left = disk("disk-2", 20, "ssd");
        let disks = [current.clone(), other_instance, orphan, left];
        let replaced = change(Some(&current), &disks, 20, "ssd");
        assert_eq!(
            replaced,
            DiskChange::Replace {
                old: Some("disk-1".into()),
                size: 20,
                reuse: Some("disk-2".into())
            }
        );
        assert!(!replaced.creates());
        // A first disk never looks for one, unless the last update was cut short.
        let left = disk("disk-2", 20, "ssd");
        assert_eq!(
            change(None, std::slice::from_ref(&left), 20, "ssd"),
            DiskChange::Replace {
                old: None,
                size: 20,
                reuse: None
            }
        );
        assert_eq!(
            disk_change("i-1", None, &[left], 20, &props("ssd"), true),
            DiskChange::Replace {
                old: None,
                size: 20,
                reuse: Some("disk-2".into())
            }
        );
    }
}
