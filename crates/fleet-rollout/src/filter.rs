//! Which of the listed instances a run may touch, as the operator narrows it: included
//! by plan, by instance id (globs, `*` and `?`), by organization and space; then anything
//! an exclusion names left out. Pure: an instance in, whether it is in or why not out.

use globset::{Glob, GlobMatcher};

use crate::inventory::Instance;

/// What one side of a filter names; an empty list names nothing (and, for an inclusion,
/// leaves that aspect open).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Criteria {
    pub plans: Vec<String>,
    /// Instance id patterns.
    pub instances: Vec<String>,
    /// Organizations and spaces, by name or GUID.
    pub orgs: Vec<String>,
    pub spaces: Vec<String>,
}

impl Criteria {
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
            && self.instances.is_empty()
            && self.orgs.is_empty()
            && self.spaces.is_empty()
    }
}

/// The operator's narrowing of a run, and the instances to take right after the canaries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceFilter {
    pub include: Criteria,
    pub exclude: Criteria,
    /// Instance ids that go before the rest, after the canaries, in this order.
    pub first: Vec<String>,
}

/// A pattern that is not a glob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{pattern}` is not an instance id pattern: {reason}")]
pub struct PatternError {
    pub pattern: String,
    pub reason: String,
}

/// An id pattern compiled, or why it cannot be.
///
/// # Errors
/// A pattern `globset` refuses.
pub fn pattern(text: &str) -> Result<GlobMatcher, PatternError> {
    Glob::new(text)
        .map(|g| g.compile_matcher())
        .map_err(|e| PatternError {
            pattern: text.to_string(),
            reason: e.kind().to_string(),
        })
}

/// Whether `instance` matches anything `criteria` names of one aspect: its plan, its id,
/// its organization, its space. `None` for an aspect the criteria leave open.
fn aspects(criteria: &Criteria, instance: &Instance) -> [Option<bool>; 4] {
    let context = instance.context.as_ref();
    let any = |names: &[String], have: &[Option<&String>]| {
        (!names.is_empty()).then(|| have.iter().flatten().any(|h| names.contains(h)))
    };
    let id = (!criteria.instances.is_empty()).then(|| {
        criteria
            .instances
            .iter()
            .filter_map(|p| pattern(p).ok())
            .any(|m| m.is_match(&instance.id.0))
    });
    [
        any(&criteria.plans, &[Some(&instance.plan_id)]),
        id,
        any(
            &criteria.orgs,
            &[
                context.and_then(|c| c.organization_name.as_ref()),
                context.and_then(|c| c.organization_guid.as_ref()),
            ],
        ),
        any(
            &criteria.spaces,
            &[
                context.and_then(|c| c.space_name.as_ref()),
                context.and_then(|c| c.space_guid.as_ref()),
                instance.space_guid.as_ref(),
            ],
        ),
    ]
}

const ASPECTS: [&str; 4] = ["plan", "instance id", "organization", "space"];

impl InstanceFilter {
    /// `Ok` when the run may touch `instance`, else why not: it misses what the inclusion
    /// names (every aspect it names must match), or matches something the exclusion names.
    pub fn admit(&self, instance: &Instance) -> Result<(), String> {
        for (matched, aspect) in aspects(&self.include, instance).into_iter().zip(ASPECTS) {
            if matched == Some(false) {
                return Err(format!("its {aspect} is not among those included"));
            }
        }
        for (matched, aspect) in aspects(&self.exclude, instance).into_iter().zip(ASPECTS) {
            if matched == Some(true) {
                return Err(format!("its {aspect} is excluded"));
            }
        }
        Ok(())
    }

    /// Every pattern that is not one.
    pub fn problems(&self) -> Vec<PatternError> {
        self.include
            .instances
            .iter()
            .chain(&self.exclude.instances)
            .filter_map(|p| pattern(p).err())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::InstanceContext;

    fn placed(id: &str, plan: &str, space: &str) -> Instance {
        let mut instance = Instance::new(id, plan);
        instance.context = Some(Box::new(InstanceContext {
            organization_name: Some("system".into()),
            space_name: Some(space.into()),
            ..InstanceContext::default()
        }));
        instance
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn inclusions_narrow_every_aspect_they_name_and_exclusions_take_out_any() {
        let filter = InstanceFilter {
            include: Criteria {
                plans: names(&["small", "large"]),
                instances: names(&["pg-*"]),
                ..Criteria::default()
            },
            exclude: Criteria {
                instances: names(&["pg-0?-legacy"]),
                spaces: names(&["frozen"]),
                ..Criteria::default()
            },
            first: Vec::new(),
        };
        assert_eq!(filter.admit(&placed("pg-1", "small", "prod")), Ok(()));
        assert_eq!(
            filter.admit(&placed("rmq-1", "small", "prod")),
            Err("its instance id is not among those included".into())
        );
        assert_eq!(
            filter.admit(&placed("pg-2", "tiny", "prod")),
            Err("its plan is not among those included".into())
        );
        assert_eq!(
            filter.admit(&placed("pg-07-legacy", "small", "prod")),
            Err("its instance id is excluded".into())
        );
        assert_eq!(
            filter.admit(&placed("pg-3", "large", "frozen")),
            Err("its space is excluded".into())
        );
        assert_eq!(
            InstanceFilter::default().admit(&Instance::new("x", "y")),
            Ok(())
        );
        let bad = InstanceFilter {
            include: Criteria {
                instances: names(&["pg-[", "ok-*"]),
                ..Criteria::default()
            },
            ..InstanceFilter::default()
        };
        assert_eq!(bad.problems().len(), 1);
        assert!(
            bad.problems()[0]
                .to_string()
                .starts_with("`pg-[` is not an instance id pattern")
        );
    }
}
