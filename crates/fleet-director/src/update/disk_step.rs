//! What an instance's persistent disk needs, decided from the disk it has and the one its
//! plan wants. Pure; decided when the step runs, because a VM made earlier in the same
//! deploy (a new instance's, an errand's) changes what its disk needs.

use serde_json::{Map, Value};

/// The disk an instance has, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct CurrentDisk {
    pub cid: String,
    pub size: u64,
    pub cloud_properties: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DiskStep {
    /// No disk, and none wanted.
    Nothing,
    /// The disk stays; with `reattach` it is attached and mounted again (its VM is new,
    /// or a crash may have cut the last attach short).
    Keep { cid: String, reattach: bool },
    /// The disk changes: a new one of `size` (none when 0) takes the data of `old`, which
    /// is orphaned. With `reattach`, `old` is attached to the VM first so that its data
    /// can move.
    Replace {
        old: Option<String>,
        reattach: bool,
        size: u64,
    },
}

/// `fresh_vm`: the VM was just created; `unfinished`: the instance's last update did not
/// finish.
pub fn disk_step(
    current: Option<CurrentDisk>,
    wanted: u64,
    properties: &Map<String, Value>,
    fresh_vm: bool,
    unfinished: bool,
) -> DiskStep {
    match current {
        None if wanted == 0 => DiskStep::Nothing,
        Some(disk) if disk.size == wanted && disk.cloud_properties == *properties => {
            DiskStep::Keep {
                cid: disk.cid,
                reattach: fresh_vm || unfinished,
            }
        }
        old => DiskStep::Replace {
            reattach: fresh_vm && old.is_some(),
            old: old.map(|d| d.cid),
            size: wanted,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(size: u64, kind: &str) -> CurrentDisk {
        CurrentDisk {
            cid: "disk-1".into(),
            size,
            cloud_properties: props(kind),
        }
    }

    fn props(kind: &str) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("type".into(), Value::String(kind.into()));
        map
    }

    #[test]
    fn no_disk_and_none_wanted_is_nothing_to_do() {
        assert_eq!(
            disk_step(None, 0, &Map::new(), true, true),
            DiskStep::Nothing
        );
    }

    #[test]
    fn the_same_disk_stays_and_is_attached_again_only_to_a_new_vm_or_after_a_crash() {
        let keep = |fresh, unfinished| {
            disk_step(Some(disk(10, "ssd")), 10, &props("ssd"), fresh, unfinished)
        };
        assert_eq!(
            keep(false, false),
            DiskStep::Keep {
                cid: "disk-1".into(),
                reattach: false
            }
        );
        for (fresh, unfinished) in [(true, false), (false, true)] {
            assert_eq!(
                keep(fresh, unfinished),
                DiskStep::Keep {
                    cid: "disk-1".into(),
                    reattach: true
                }
            );
        }
    }

    #[test]
    fn a_new_size_or_disk_type_replaces_the_disk_and_a_first_disk_is_created() {
        assert_eq!(
            disk_step(Some(disk(10, "ssd")), 20, &props("ssd"), true, false),
            DiskStep::Replace {
                old: Some("disk-1".into()),
                reattach: true,
                size: 20
            }
        );
        assert_eq!(
            disk_step(Some(disk(10, "ssd")), 10, &props("hdd"), false, false),
            DiskStep::Replace {
                old: Some("disk-1".into()),
                reattach: false,
                size: 10
            }
        );
        assert_eq!(
            disk_step(None, 10, &props("ssd"), true, false),
            DiskStep::Replace {
                old: None,
                reattach: false,
                size: 10
            }
        );
    }

    #[test]
    fn a_disk_no_longer_wanted_goes() {
        assert_eq!(
            disk_step(Some(disk(10, "ssd")), 0, &props("ssd"), false, false),
            DiskStep::Replace {
                old: Some("disk-1".into()),
                reattach: false,
                size: 0
            }
        );
    }
}
