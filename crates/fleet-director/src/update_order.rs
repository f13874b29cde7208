//! The order a deploy updates its changed instances in, decided before anything runs:
//! waves of groups (a `serial` group alone, neighbouring `serial: false` groups together),
//! each group AZ by AZ, canaries first in the first AZ, the rest `max_in_flight` at a
//! time. Pure: the plan's groups and the deploy's overrides in, the order out.

use super::manifest::{Count, WatchTime};
use super::plan::{GroupPlan, InstancePlan};

/// Groups updated one wave after another.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateOrder {
    pub waves: Vec<Wave>,
}

/// Groups updated side by side; the wave ends when all of them have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wave {
    pub groups: Vec<GroupOrder>,
}

/// One group's windows, each finished before the next starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOrder {
    /// The group's position in the plan.
    pub group: usize,
    pub name: String,
    pub windows: Vec<Window>,
}

impl GroupOrder {
    /// How many of the group's instances are updated.
    pub fn size(&self) -> usize {
        self.windows.iter().map(|w| w.instances.len()).sum()
    }
}

/// Instances updated at most `limit` at a time, watched for `watch_time` each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub canary: bool,
    pub limit: usize,
    pub watch_time: WatchTime,
    /// Instance indexes in the group, in the order they start.
    pub instances: Vec<u32>,
}

/// `canaries` and `max_in_flight` override every group's own (`bosh deploy --canaries`).
pub fn update_order(
    groups: &[GroupPlan],
    canaries: Option<Count>,
    max_in_flight: Option<Count>,
) -> UpdateOrder {
    let mut waves: Vec<Wave> = Vec::new();
    let mut joins_previous = false;
    for (position, group) in groups.iter().enumerate() {
        let order = group_order(position, group, canaries, max_in_flight);
        let serial = group.update.serial;
        // A group with nothing to update still ends a run of side-by-side groups when it
        // is serial, as it would by running alone.
        match waves.last_mut() {
            Some(wave) if joins_previous && !serial => {
                wave.groups.extend(order);
            }
            _ => waves.push(Wave {
                groups: order.into_iter().collect(),
            }),
        }
        joins_previous = !serial;
    }
    waves.retain(|w| !w.groups.is_empty());
    UpdateOrder { waves }
}

/// A group's windows: AZ by AZ, canaries only from the first AZ; `canaries` and
/// `max_in_flight` are computed from each AZ's changed instances. `None` when nothing in
/// the group changes.
fn group_order(
    position: usize,
    group: &GroupPlan,
    canaries: Option<Count>,
    max_in_flight: Option<Count>,
) -> Option<GroupOrder> {
    let mut windows = Vec::new();
    for (az_position, batch) in az_batches(&group.instances).into_iter().enumerate() {
        let size = batch.len();
        let limit = max_in_flight
            .unwrap_or(group.update.max_in_flight)
            .of(size)
            .max(1);
        let canary_count = if az_position == 0 {
            canaries.unwrap_or(group.update.canaries).of(size).min(size)
        } else {
            0
        };
        let (first, rest) = batch.split_at(canary_count);
        if !first.is_empty() {
            windows.push(Window {
                canary: true,
                limit: canary_count.min(limit).max(1),
                watch_time: group.update.canary_watch_time,
                instances: first.to_vec(),
            });
        }
        if !rest.is_empty() {
            windows.push(Window {
                canary: false,
                limit,
                watch_time: group.update.update_watch_time,
                instances: rest.to_vec(),
            });
        }
    }
    (!windows.is_empty()).then(|| GroupOrder {
        group: position,
        name: group.name.clone(),
        windows,
    })
}

/// The changed instances of a group in the director's order, batched by AZ: the
/// bootstrap instance's AZ (the lowest index) first, then instances without an AZ, then the
/// other AZs alphabetically; by index inside an AZ.
pub fn az_batches(instances: &[InstancePlan]) -> Vec<Vec<u32>> {
    let mut changed: Vec<&InstancePlan> = instances.iter().filter(|i| i.changed()).collect();
    changed.sort_by_key(|i| i.index);
    let Some(bootstrap) = changed.first() else {
        return Vec::new();
    };
    let first_az = bootstrap.az.clone();
    let mut order: Vec<Option<String>> = vec![first_az.clone()];
    if first_az.is_some() {
        order.push(None);
    }
    let mut others: Vec<String> = changed
        .iter()
        .filter_map(|i| i.az.clone())
        .filter(|az| Some(az) != first_az.as_ref())
        .collect();
    others.sort();
    others.dedup();
    order.extend(others.into_iter().map(Some));
    order
        .into_iter()
        .map(|az| {
            changed
                .iter()
                .filter(|i| i.az == az)
                .map(|i| i.index)
                .collect::<Vec<_>>()
        })
        .filter(|batch| !batch.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::UpdatePolicy;
    use crate::model::InstanceSpec;
    use crate::plan::Change;

    fn plan(index: u32, az: Option<&str>, changed: bool) -> InstancePlan {
        InstancePlan {
            id: format!("i{index}"),
            group: "g".into(),
            index,
            az: az.map(str::to_string),
            existing: None,
            desired: InstanceSpec::default(),
            changes: if changed {
                [Change::New].into()
            } else {
                Default::default()
            },
            addresses: Vec::new(),
            obsolete_addresses: Vec::new(),
            disk: Default::default(),
            network_settings: serde_json::Value::Null,
            links: Default::default(),
        }
    }

    fn group(name: &str, serial: bool, instances: Vec<InstancePlan>) -> GroupPlan {
        GroupPlan {
            name: name.into(),
            errand: false,
            update: UpdatePolicy {
                canaries: Count::Fixed(1),
                max_in_flight: Count::Fixed(2),
                serial,
                ..UpdatePolicy::default()
            },
            instances,
        }
    }

    #[test]
    fn the_bootstrap_az_comes_first_then_no_az_then_the_others_alphabetically() {
        let plans = vec![
            plan(0, Some("z2"), true),
            plan(1, Some("z1"), true),
            plan(2, None, true),
            plan(3, Some("z2"), true),
            plan(4, Some("z3"), false),
            plan(5, Some("z0"), true),
        ];
        assert_eq!(
            az_batches(&plans),
            vec![vec![0, 3], vec![2], vec![5], vec![1]]
        );
    }

    #[test]
    fn canaries_come_from_the_first_az_and_the_rest_go_max_in_flight_at_a_time() {
        let plans = (0..5)
            .map(|i| plan(i, Some(if i % 2 == 0 { "z1" } else { "z2" }), true))
            .collect();
        let order = update_order(&[group("web", true, plans)], None, None);
        let windows: Vec<(bool, usize, Vec<u32>)> = order.waves[0].groups[0]
            .windows
            .iter()
            .map(|w| (w.canary, w.limit, w.instances.clone()))
            .collect();
        assert_eq!(
            windows,
            vec![
                (true, 1, vec![0]),
                (false, 2, vec![2, 4]),
                (false, 2, vec![1, 3]),
            ]
        );
    }

    #[test]
    fn overrides_replace_every_groups_own_counts() {
        let plans = (0..4).map(|i| plan(i, None, true)).collect();
        let order = update_order(
            &[group("web", true, plans)],
            Some(Count::Fixed(2)),
            Some(Count::Percent(100)),
        );
        let windows: Vec<(bool, usize, usize)> = order.waves[0].groups[0]
            .windows
            .iter()
            .map(|w| (w.canary, w.limit, w.instances.len()))
            .collect();
        assert_eq!(windows, vec![(true, 2, 2), (false, 4, 2)]);
    }

    #[test]
    fn serial_groups_run_alone_and_neighbouring_parallel_groups_together() {
        let changed = || vec![plan(0, None, true)];
        let groups = vec![
            group("a", true, changed()),
            group("b", false, changed()),
            group("c", false, changed()),
            group("d", true, changed()),
            group("e", false, vec![plan(0, None, false)]),
            group("f", false, changed()),
        ];
        let waves: Vec<Vec<String>> = update_order(&groups, None, None)
            .waves
            .iter()
            .map(|w| w.groups.iter().map(|g| g.name.clone()).collect())
            .collect();
        assert_eq!(
            waves,
            vec![
                vec!["a".to_string()],
                vec!["b".into(), "c".into()],
                vec!["d".into()],
                vec!["f".into()],
            ]
        );
    }

    #[test]
    fn a_group_with_nothing_changed_has_no_windows() {
        let order = update_order(
            &[group("web", true, vec![plan(0, None, false)])],
            None,
            None,
        );
        assert!(order.waves.is_empty());
    }
}
