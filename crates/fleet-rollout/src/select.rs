//! Which instances a run touches, in which order, and which of them are canaries.
//!
//! Order: instances are grouped by plan (plans by id), each group sorted by instance id,
//! and the groups are interleaved round-robin. The canaries are the first `canaries`
//! eligible instances of that order, so with at least as many canaries as plans every plan
//! is proven before the rest of the fleet is touched. The order depends only on ids, so
//! two runs over the same fleet agree whatever order the inventory lists in.

use std::collections::{BTreeMap, BTreeSet};

use super::filter::InstanceFilter;
use super::settings::Strategy;
use crate::inventory::{Instance, InstanceState};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub instance: Instance,
    /// Sent with the trigger: the owner blocked updates and the operator overrides it.
    pub force: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    Blocked,
}

impl SkipReason {
    pub fn describe(self) -> &'static str {
        match self {
            SkipReason::Blocked => "the owner blocked maintenance updates",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub instance: Instance,
    pub reason: SkipReason,
}

/// An instance the strategy selected that the operator's filter left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    pub instance: Instance,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub strategy: Strategy,
    /// Instances the strategy selected, the skipped ones included.
    pub selected: usize,
    /// Instances to trigger, in processing order.
    pub order: Vec<Candidate>,
    /// How many canaries the canary phase waits for: the requested number, clamped to the
    /// eligible instances (or to those the canary selection matched).
    pub canaries: usize,
    /// How many instances at the front of `order` may be canaries: all of them, or those
    /// the canary selection matched, which come first.
    pub canary_pool: usize,
    pub skipped: Vec<Skipped>,
    /// Instances an earlier run of the same intent finished: reported, not touched.
    pub done_earlier: Vec<Instance>,
    /// Instances the operator's filter left out: reported, not touched.
    pub excluded: Vec<Excluded>,
    /// Instance ids that go right after the canaries.
    pub first: Vec<String>,
}

impl Plan {
    /// The plan without the instances `done` names, which an earlier run finished; with
    /// `canaries_passed`, that run's canaries proved the change and none are tried again.
    pub fn without_done(mut self, done: &BTreeSet<String>, canaries_passed: bool) -> Plan {
        let pool_done = self.order[..self.canary_pool]
            .iter()
            .filter(|c| done.contains(&c.instance.id.0))
            .count();
        self.canary_pool -= pool_done;
        let (earlier, order): (Vec<Candidate>, Vec<Candidate>) = self
            .order
            .into_iter()
            .partition(|c| done.contains(&c.instance.id.0));
        self.done_earlier
            .extend(earlier.into_iter().map(|c| c.instance));
        self.order = order;
        self.canaries = if canaries_passed {
            0
        } else {
            self.canaries.min(self.canary_pool)
        };
        self
    }

    /// The plan with its canaries chosen among the instances `matched` names (a canary
    /// selection's listing), as the On-Demand Service Broker's errand chooses them: those
    /// go first; `canaries` is clamped to how many there are, and `0` makes every one a
    /// canary.
    pub fn with_canaries_among(mut self, matched: &BTreeSet<String>, canaries: usize) -> Plan {
        let (pool, rest): (Vec<Candidate>, Vec<Candidate>) = self
            .order
            .into_iter()
            .partition(|c| matched.contains(&c.instance.id.0));
        self.canary_pool = pool.len();
        self.canaries = if canaries == 0 {
            pool.len()
        } else {
            canaries.min(pool.len())
        };
        self.order = pool;
        self.order.extend(first_then_rest(rest, &self.first));
        self
    }

    /// The instances the canary phase tries first; if one of them turns out to need
    /// nothing (up to date, gone, busy), the next in order takes its place.
    pub fn canary_candidates(&self) -> &[Candidate] {
        &self.order[..self.canaries]
    }
}

pub fn plan(instances: Vec<Instance>, strategy: Strategy, canaries: usize) -> Plan {
    plan_with(instances, strategy, canaries, &InstanceFilter::default())
}

/// The plan of the instances `filter` admits; the canaries are the first `canaries` of
/// the order but for `filter.first`, which come right after them.
pub fn plan_with(
    instances: Vec<Instance>,
    strategy: Strategy,
    canaries: usize,
    filter: &InstanceFilter,
) -> Plan {
    let mut seen = BTreeSet::new();
    let mut by_plan: BTreeMap<String, Vec<Instance>> = BTreeMap::new();
    let mut excluded = Vec::new();
    for instance in instances {
        if selected(&instance, strategy) && seen.insert(instance.id.clone()) {
            if let Err(reason) = filter.admit(&instance) {
                excluded.push(Excluded { instance, reason });
                continue;
            }
            by_plan
                .entry(instance.plan_id.clone())
                .or_default()
                .push(instance);
        }
    }
    let selected_count = seen.len() - excluded.len();
    for group in by_plan.values_mut() {
        group.sort_by(|a, b| a.id.cmp(&b.id));
    }
    let mut order = Vec::with_capacity(selected_count);
    let mut skipped = Vec::new();
    for instance in round_robin(by_plan.into_values().collect()) {
        if instance.maintenance_updates_blocked && !strategy.force() {
            skipped.push(Skipped {
                instance,
                reason: SkipReason::Blocked,
            });
        } else {
            let force = instance.maintenance_updates_blocked;
            order.push(Candidate { instance, force });
        }
    }
    let canaries = canaries.min(order.len());
    // The canaries come from the order without the instances named first, which follow
    // them.
    let (named, others): (Vec<Candidate>, Vec<Candidate>) = order
        .into_iter()
        .partition(|c| filter.first.contains(&c.instance.id.0));
    let mut others = others.into_iter();
    let mut order: Vec<Candidate> = others.by_ref().take(canaries).collect();
    order.extend(first_then_rest(named, &filter.first));
    order.extend(others);
    Plan {
        strategy,
        selected: selected_count,
        canaries,
        canary_pool: order.len(),
        order,
        skipped,
        done_earlier: Vec::new(),
        excluded,
        first: filter.first.clone(),
    }
}

/// `candidates` with those `first` names at the front, in its order.
fn first_then_rest(candidates: Vec<Candidate>, first: &[String]) -> Vec<Candidate> {
    let (mut named, rest): (Vec<Candidate>, Vec<Candidate>) = candidates
        .into_iter()
        .partition(|c| first.contains(&c.instance.id.0));
    named.sort_by_key(|c| first.iter().position(|f| *f == c.instance.id.0));
    named.extend(rest);
    named
}

fn selected(instance: &Instance, strategy: Strategy) -> bool {
    instance.state != InstanceState::Deleted && strategy.selection().matches(instance)
}

fn round_robin(groups: Vec<Vec<Instance>>) -> Vec<Instance> {
    let total = groups.iter().map(Vec::len).sum();
    let mut iters: Vec<_> = groups.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        for it in &mut iters {
            if let Some(instance) = it.next() {
                out.push(instance);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Selection;

    fn ids(plan: &Plan) -> Vec<&str> {
        plan.order
            .iter()
            .map(|c| c.instance.id.0.as_str())
            .collect()
    }

    fn update(force: bool) -> Strategy {
        Strategy::Update {
            instance_type: Selection::Outdated,
            force,
        }
    }

    #[test]
    fn order_interleaves_plans_and_sorts_by_id() {
        let fleet = vec![
            Instance::new("b2", "big"),
            Instance::new("s2", "small"),
            Instance::new("b1", "big"),
            Instance::new("s1", "small"),
            Instance::new("s3", "small"),
        ];
        let plan = plan(fleet, update(false), 2);
        assert_eq!(ids(&plan), ["b1", "s1", "b2", "s2", "s3"]);
        let canaries: Vec<_> = plan
            .canary_candidates()
            .iter()
            .map(|c| c.instance.id.0.as_str())
            .collect();
        assert_eq!(canaries, ["b1", "s1"]);
    }

    #[test]
    fn update_selects_the_instance_type_and_skips_blocked() {
        let mut blocked = Instance::new("a", "p");
        blocked.maintenance_updates_blocked = true;
        let mut current = Instance::new("b", "p");
        current.update_available = false;
        let plan = plan(
            vec![blocked, current, Instance::new("c", "p")],
            update(false),
            0,
        );
        assert_eq!(plan.selected, 2);
        assert_eq!(ids(&plan), ["c"]);
        assert_eq!(plan.skipped.len(), 1);
        assert_eq!(plan.skipped[0].reason, SkipReason::Blocked);
    }

    #[test]
    fn force_updates_blocked_instances_with_force() {
        let mut blocked = Instance::new("a", "p");
        blocked.maintenance_updates_blocked = true;
        let plan = plan(vec![blocked, Instance::new("b", "p")], update(true), 0);
        assert_eq!(ids(&plan), ["a", "b"]);
        assert!(plan.order[0].force);
        assert!(!plan.order[1].force);
    }

    #[test]
    fn recreate_takes_every_instance_that_is_not_deleted() {
        let mut gone = Instance::new("gone", "p");
        gone.state = InstanceState::Deleted;
        let mut failed = Instance::new("failed", "p");
        failed.state = InstanceState::Failed;
        failed.update_available = false;
        let mut blocked = Instance::new("blocked", "p");
        blocked.maintenance_updates_blocked = true;
        let respectful = Strategy::Recreate {
            fix: true,
            force: false,
        };
        let plan = plan(vec![gone, failed, blocked.clone()], respectful, 0);
        assert_eq!(ids(&plan), ["failed"]);
        assert_eq!(plan.skipped.len(), 1);

        let forced = Strategy::Recreate {
            fix: true,
            force: true,
        };
        let plan = super::plan(vec![blocked], forced, 0);
        assert_eq!(ids(&plan), ["blocked"]);
        assert!(plan.order[0].force);
    }

    #[test]
    fn update_never_selects_a_deleted_instance() {
        let mut gone = Instance::new("gone", "p");
        gone.state = InstanceState::Deleted;
        let plan = plan(vec![gone], update(false), 0);
        assert_eq!(plan.selected, 0);
    }

    #[test]
    fn canaries_are_clamped_to_the_eligible_instances() {
        let plan = plan(vec![Instance::new("a", "p")], update(false), 5);
        assert_eq!(plan.canaries, 1);
    }

    #[test]
    fn duplicate_ids_are_taken_once() {
        let plan = plan(
            vec![Instance::new("a", "p"), Instance::new("a", "p")],
            update(false),
            0,
        );
        assert_eq!(plan.selected, 1);
        assert_eq!(ids(&plan), ["a"]);
    }
}
