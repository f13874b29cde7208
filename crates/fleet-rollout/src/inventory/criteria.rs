//! Listing criteria, as the On-Demand Service Broker's management API takes them in its
//! query (`cf_org=system&cf_space=canaries`): what an operator's canary selection sends.
//! A broker may ignore them, so the criteria this side can judge are applied again here:
//! the plan, and the organization and space by name or GUID where the listing gives them.
//! A criterion nothing here can judge (a broker's own, or a context the listing lacks)
//! admits the instance: the broker said it matched. Pure.

use std::collections::BTreeMap;

use super::types::Instance;

/// Listing parameters by name.
pub type Criteria = BTreeMap<String, String>;

/// Whether `instance` may match `criteria` a broker filtered by: no criterion this side
/// can judge refutes it.
pub fn admits(criteria: &Criteria, instance: &Instance) -> bool {
    judge(criteria, instance, true)
}

/// Whether `instance` matches `criteria` with nothing filtered before: every criterion
/// must be judged here and hold, since no broker said it matched.
pub fn matches(criteria: &Criteria, instance: &Instance) -> bool {
    judge(criteria, instance, false)
}

fn judge(criteria: &Criteria, instance: &Instance, unknown: bool) -> bool {
    let context = instance.context.as_ref();
    criteria.iter().all(|(key, wanted)| {
        let known: Vec<Option<&String>> = match key.as_str() {
            "plan" | "plan_id" => vec![Some(&instance.plan_id)],
            "cf_org" => context
                .map(|c| vec![c.organization_name.as_ref(), c.organization_guid.as_ref()])
                .unwrap_or_default(),
            "cf_space" => {
                let mut known = vec![instance.space_guid.as_ref()];
                if let Some(c) = context {
                    known.extend([c.space_name.as_ref(), c.space_guid.as_ref()]);
                }
                known
            }
            _ => Vec::new(),
        };
        let known: Vec<&String> = known.into_iter().flatten().collect();
        if known.is_empty() {
            unknown
        } else {
            known.contains(&wanted)
        }
    })
}

/// The criteria as ODB's errand prints them: `cf_org: system, cf_space: canaries`.
pub fn describe(criteria: &Criteria) -> String {
    criteria
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::super::types::InstanceContext;
    use super::*;

    fn criteria(pairs: &[(&str, &str)]) -> Criteria {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn plan_org_and_space_are_judged_where_known_and_the_rest_left_to_the_broker() {
        let mut placed = Instance::new("a", "small");
        placed.context = Some(Box::new(InstanceContext {
            organization_name: Some("system".into()),
            space_name: Some("canaries".into()),
            space_guid: Some("s-1".into()),
            ..InstanceContext::default()
        }));
        let bare = Instance::new("b", "small");
        let ours = criteria(&[("cf_org", "system"), ("cf_space", "canaries")]);
        assert!(admits(&ours, &placed));
        assert!(admits(&ours, &bare), "no context: the broker's word stands");
        assert!(
            admits(&criteria(&[("cf_space", "s-1")]), &placed),
            "by GUID"
        );
        assert!(!admits(&criteria(&[("cf_space", "prod")]), &placed));
        assert!(!admits(&criteria(&[("plan", "large")]), &bare));
        assert!(admits(&criteria(&[("region", "eu")]), &bare));
        assert!(matches(&ours, &placed));
        assert!(
            !matches(&ours, &bare) && !matches(&criteria(&[("region", "eu")]), &bare),
            "nothing filtered: what cannot be judged does not match"
        );
        assert_eq!(describe(&ours), "cf_org: system, cf_space: canaries");
    }
}
