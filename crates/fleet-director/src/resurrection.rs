//! What the resurrector may do, decided without I/O: resurrection configs (`bosh
//! update-config --type resurrection`), whose rules turn resurrection off for deployments
//! and instance groups, and the meltdown rule that stops it when too much of a deployment
//! is down at once (then the cause is rarely the VMs, and recreating them all would make
//! things worse).

use std::time::Duration;

use crate::runtime::strings;
use fleet_yaml::{self as yaml, Checker, Node, join};

/// One uploaded version of a named resurrection config.
pub type ResurrectionConfig = crate::model::NamedConfig;

/// Every problem of a resurrection config, each naming its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the resurrection config is invalid:\n  {}", problems.join("\n  "))]
pub struct ResurrectionConfigError {
    pub problems: Vec<String>,
}

/// Deployments and instance groups a rule's `include` or `exclude` names; an empty list
/// names every one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Names {
    deployments: Vec<String>,
    instance_groups: Vec<String>,
}

impl Names {
    fn is_empty(&self) -> bool {
        self.deployments.is_empty() && self.instance_groups.is_empty()
    }

    fn matches(&self, deployment: &str, group: &str) -> bool {
        (self.deployments.is_empty() || self.deployments.iter().any(|d| d == deployment))
            && (self.instance_groups.is_empty() || self.instance_groups.iter().any(|g| g == group))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    enabled: bool,
    include: Names,
    exclude: Names,
}

impl Rule {
    /// An empty `include` applies everywhere; an empty `exclude` excludes nothing.
    fn applies(&self, deployment: &str, group: &str) -> bool {
        self.include.matches(deployment, group)
            && (self.exclude.is_empty() || !self.exclude.matches(deployment, group))
    }
}

/// Every rule of every resurrection config in force.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResurrectionRules {
    rules: Vec<Rule>,
}

impl ResurrectionRules {
    /// The rules of each config's text, in turn.
    ///
    /// # Errors
    /// The first config that is invalid (they were checked at upload, so only a config
    /// stored by another version gets here).
    pub fn of<'a>(
        texts: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, ResurrectionConfigError> {
        let mut rules = Vec::new();
        for text in texts {
            rules.extend(parse(text)?.rules);
        }
        Ok(ResurrectionRules { rules })
    }

    /// Whether instances of `group` in `deployment` may be resurrected: unless a rule
    /// that applies to them says `enabled: false`.
    pub fn enabled(&self, deployment: &str, group: &str) -> bool {
        self.rules
            .iter()
            .filter(|r| r.applies(deployment, group))
            .all(|r| r.enabled)
    }
}

fn names(checker: &mut Checker, node: Option<&Node>, path: &str) -> Names {
    let Some(node) = node else {
        return Names::default();
    };
    checker.map(node, path, &["deployments", "instance_groups"]);
    Names {
        deployments: strings(checker, node.get("deployments"), &join(path, "deployments")),
        instance_groups: strings(
            checker,
            node.get("instance_groups"),
            &join(path, "instance_groups"),
        ),
    }
}

/// Parses and checks a resurrection config: `rules`, each with a boolean `enabled` and
/// optional `include` and `exclude` of `deployments` and `instance_groups`.
///
/// # Errors
/// Its YAML syntax, or every invalid key at once.
pub fn parse(text: &str) -> Result<ResurrectionRules, ResurrectionConfigError> {
    let root = yaml::load(text, yaml::Limits::default()).map_err(|e| ResurrectionConfigError {
        problems: vec![e.to_string()],
    })?;
    let mut checker = Checker::new();
    checker.map(&root, "", &["rules"]);
    let mut rules = Vec::new();
    match root.get("rules") {
        None => checker.report("rules", root.at, "a resurrection config needs `rules`"),
        Some(list) => {
            for (i, r) in checker.list(list, "rules").iter().enumerate() {
                let here = format!("rules[{i}]");
                checker.map(r, &here, &["enabled", "include", "exclude"]);
                let enabled = match r.get("enabled") {
                    Some(node) => checker.boolean(node, &join(&here, "enabled")),
                    None => {
                        checker.report(
                            &join(&here, "enabled"),
                            r.at,
                            "a rule needs `enabled`: true or false",
                        );
                        None
                    }
                };
                let include = names(&mut checker, r.get("include"), &join(&here, "include"));
                let exclude = names(&mut checker, r.get("exclude"), &join(&here, "exclude"));
                if let Some(enabled) = enabled {
                    rules.push(Rule {
                        enabled,
                        include,
                        exclude,
                    });
                }
            }
        }
    }
    if !checker.is_clean() {
        return Err(ResurrectionConfigError {
            problems: checker
                .into_problems()
                .iter()
                .map(ToString::to_string)
                .collect(),
        });
    }
    Ok(ResurrectionRules { rules })
}

/// When a deployment is in meltdown: at least `minimum_down` of its instances are down
/// and they are at least `percent_threshold` of them. An instance counts as down for
/// `time_threshold` after it was last seen down.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Meltdown {
    pub minimum_down: usize,
    /// A fraction: 0.2 is a fifth.
    pub percent_threshold: f64,
    pub time_threshold: Duration,
}

impl Default for Meltdown {
    /// BOSH's resurrector's defaults.
    fn default() -> Self {
        Meltdown {
            minimum_down: 5,
            percent_threshold: 0.2,
            time_threshold: Duration::from_secs(600),
        }
    }
}

/// What the resurrector makes of a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeploymentHealth {
    /// Nothing is down.
    Normal,
    /// Some instances are down: they are resurrected.
    Managed,
    /// Too many are down at once: nothing is resurrected, an alert says so.
    Meltdown,
}

impl Meltdown {
    /// `down` of a deployment's `total` instances are down.
    pub fn judge(&self, down: usize, total: usize) -> DeploymentHealth {
        if down == 0 {
            return DeploymentHealth::Normal;
        }
        let share = down as f64 / total.max(1) as f64;
        if down >= self.minimum_down && share >= self.percent_threshold {
            DeploymentHealth::Meltdown
        } else {
            DeploymentHealth::Managed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_turn_resurrection_off_where_they_apply_and_every_rule_must_agree() {
        let rules = ResurrectionRules::of([
            "rules:\n- enabled: false\n  include: {deployments: [pg]}\n  exclude: {instance_groups: [proxy]}\n",
            "rules:\n- enabled: true\n  include: {instance_groups: [web]}\n- enabled: false\n  include: {deployments: [kv], instance_groups: [db]}\n",
        ])
        .unwrap();
        assert!(!rules.enabled("pg", "db"), "included");
        assert!(rules.enabled("pg", "proxy"), "excluded from the rule");
        assert!(!rules.enabled("pg", "web"), "one rule off is enough");
        assert!(!rules.enabled("kv", "db"), "both names match");
        assert!(rules.enabled("kv", "web"));
        assert!(rules.enabled("other", "db"), "no rule applies");
        assert!(ResurrectionRules::default().enabled("any", "thing"));
    }

    #[test]
    fn an_invalid_config_names_every_key_at_fault() {
        let err = parse(
            "rules:\n- include: {deployments: [pg]}\n- enabled: maybe\n- enabled: true\n  include: {deployment: [x]}\n",
        )
        .unwrap_err();
        let all = err.problems.join("\n");
        assert!(
            all.contains("rules[0].enabled: a rule needs `enabled`"),
            "{all}"
        );
        assert!(all.contains("rules[1].enabled"), "{all}");
        assert!(all.contains("rules[2].include.deployment"), "{all}");
        assert!(parse("{}").unwrap_err().problems[0].contains("needs `rules`"));
        assert!(parse("rules: [").is_err());
    }

    #[test]
    fn a_meltdown_needs_both_the_count_and_the_share() {
        let rule = Meltdown::default();
        assert_eq!(rule.judge(0, 10), DeploymentHealth::Normal);
        assert_eq!(rule.judge(4, 4), DeploymentHealth::Managed, "too few");
        assert_eq!(
            rule.judge(5, 100),
            DeploymentHealth::Managed,
            "too small a share"
        );
        assert_eq!(rule.judge(5, 25), DeploymentHealth::Meltdown);
        let strict = Meltdown {
            minimum_down: 1,
            percent_threshold: 0.5,
            ..Meltdown::default()
        };
        assert_eq!(strict.judge(1, 3), DeploymentHealth::Managed);
        assert_eq!(strict.judge(2, 3), DeploymentHealth::Meltdown);
    }
}
