//! What the health monitor remembers between passes and what it decides from a pass,
//! without I/O: when an agent counts as timed out, which alerts to raise (once per
//! change, not at every pass), and which instances to resurrect under the meltdown rule
//! and the resurrection rules.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::alerts::{Category, Finding, Severity};
use crate::resurrection::{DeploymentHealth, Meltdown};

/// One instance the monitor checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub group: String,
    pub id: String,
    pub agent_id: String,
}

impl Subject {
    fn name(&self) -> String {
        format!("{}/{}", self.group, self.id)
    }
}

/// What asking an instance's agent for its state found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Running,
    /// These processes do not run.
    Failing(Vec<String>),
    /// The agent did not answer.
    Silent,
}

/// What the monitor remembers of one instance.
#[derive(Debug, Clone)]
struct Tracked {
    agent_id: String,
    group: String,
    /// When its agent last answered (or was first seen: a new agent gets the whole
    /// timeout before it counts as timed out).
    last_answer: Instant,
    /// When it was last seen timed out: it counts towards a meltdown for the meltdown's
    /// time threshold after.
    last_down: Option<Instant>,
    timed_out: bool,
    failing: Vec<String>,
}

impl Tracked {
    fn first_seen(subject: &Subject, now: Instant) -> Self {
        Tracked {
            agent_id: subject.agent_id.clone(),
            group: subject.group.clone(),
            last_answer: now,
            last_down: None,
            timed_out: false,
            failing: Vec::new(),
        }
    }
}

/// What the monitor said of a deployment, so that it says it again only when it changes.
#[derive(Debug, Clone, Default)]
struct Said {
    timed_out: BTreeSet<String>,
    meltdown: bool,
    disabled: BTreeSet<String>,
    stateful: BTreeSet<String>,
}

/// What one pass over a deployment comes to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub findings: Vec<Finding>,
    /// Instance ids by group, to recreate.
    pub resurrect: BTreeMap<String, Vec<String>>,
    pub health: Option<DeploymentHealth>,
}

/// How the monitor judges.
#[derive(Debug, Clone, Copy)]
pub struct Judgement {
    /// An agent silent for longer has timed out.
    pub agent_timeout: Duration,
    pub meltdown: Meltdown,
    /// Whether timed-out instances are resurrected at all (the resurrector plugin).
    pub resurrector: bool,
}

#[derive(Debug)]
pub struct Watch {
    judgement: Judgement,
    instances: BTreeMap<String, BTreeMap<String, Tracked>>,
    said: BTreeMap<String, Said>,
}

/// Whether, and why not, the resurrector may act on a deployment's group.
pub struct Permission<'a> {
    /// Resurrection paused for the whole director.
    pub paused: bool,
    /// Whether the resurrection rules allow it for a group.
    pub allowed: &'a (dyn Fn(&str) -> bool + Sync),
    /// Whether an instance (by id) keeps data on a persistent disk and is left to an
    /// operator (the director does not fix stateful instances by itself).
    pub stateful: &'a (dyn Fn(&str) -> bool + Sync),
}

impl Watch {
    pub fn new(judgement: Judgement) -> Self {
        Watch {
            judgement,
            instances: BTreeMap::new(),
            said: BTreeMap::new(),
        }
    }

    /// Forgets the deployments not among `names` (deleted since).
    pub fn keep_only(&mut self, names: &BTreeSet<String>) {
        self.instances.retain(|d, _| names.contains(d));
        self.said.retain(|d, _| names.contains(d));
    }

    /// Records one pass over `deployment`'s instances (every one the monitor checks),
    /// seen at `now`, and decides what to say and what to resurrect.
    pub fn observe(
        &mut self,
        deployment: &str,
        seen: Vec<(Subject, Seen)>,
        now: Instant,
        permission: &Permission<'_>,
    ) -> Verdict {
        let judgement = self.judgement;
        let tracked = self.instances.entry(deployment.to_string()).or_default();
        let present: BTreeSet<&str> = seen.iter().map(|(s, _)| s.id.as_str()).collect();
        tracked.retain(|id, _| present.contains(id.as_str()));
        let mut findings = Vec::new();
        for (subject, seen) in &seen {
            let entry = tracked
                .entry(subject.id.clone())
                .or_insert_with(|| Tracked::first_seen(subject, now));
            if entry.agent_id != subject.agent_id {
                // A new VM: judged afresh.
                *entry = Tracked::first_seen(subject, now);
            }
            match seen {
                Seen::Running => {
                    entry.last_answer = now;
                    entry.timed_out = false;
                    entry.failing.clear();
                }
                Seen::Failing(processes) => {
                    entry.last_answer = now;
                    entry.timed_out = false;
                    if *processes != entry.failing {
                        findings.push(Finding {
                            severity: Severity::Alert,
                            category: Category::VmHealth,
                            title: format!(
                                "{} has failing processes: {}",
                                subject.name(),
                                processes.join(", ")
                            ),
                            summary: format!(
                                "the agent {} says {} not running",
                                subject.agent_id,
                                if processes.len() == 1 {
                                    "it is"
                                } else {
                                    "they are"
                                }
                            ),
                            instance: subject.name(),
                        });
                        entry.failing = processes.clone();
                    }
                }
                Seen::Silent => {
                    if now.duration_since(entry.last_answer) > judgement.agent_timeout {
                        entry.last_down = Some(now);
                        if !entry.timed_out {
                            findings.push(Finding {
                                severity: Severity::Critical,
                                category: Category::VmHealth,
                                title: format!("{} has timed out", subject.agent_id),
                                summary: format!(
                                    "the agent of {} has not answered for more than {}",
                                    subject.name(),
                                    fleet_clock::short(judgement.agent_timeout)
                                ),
                                instance: subject.name(),
                            });
                        }
                        entry.timed_out = true;
                    }
                }
            }
        }
        let said = self.said.entry(deployment.to_string()).or_default();
        let timed_out: BTreeSet<String> = tracked
            .iter()
            .filter(|(_, t)| t.timed_out)
            .map(|(id, _)| id.clone())
            .collect();
        if !timed_out.is_empty() && timed_out != said.timed_out {
            findings.push(Finding {
                severity: Severity::Critical,
                category: Category::DeploymentHealth,
                title: format!("{deployment} has instances with timed out agents"),
                summary: by_group(tracked, &timed_out),
                instance: String::new(),
            });
        }
        said.timed_out = timed_out.clone();
        let recently_down = tracked
            .values()
            .filter(|t| {
                t.last_down
                    .is_some_and(|at| now.duration_since(at) <= judgement.meltdown.time_threshold)
            })
            .count();
        let health = judgement.meltdown.judge(recently_down, tracked.len());
        let mut verdict = Verdict {
            findings,
            resurrect: BTreeMap::new(),
            health: Some(health),
        };
        if health == DeploymentHealth::Meltdown {
            if !said.meltdown {
                verdict.findings.push(Finding {
                    severity: Severity::Alert,
                    category: Category::DeploymentHealth,
                    title: "We are in meltdown".into(),
                    summary: format!(
                        "{recently_down} of {} instances of {deployment} are down: nothing is resurrected until fewer are",
                        tracked.len()
                    ),
                    instance: String::new(),
                });
            }
            said.meltdown = true;
            return verdict;
        }
        said.meltdown = false;
        if !judgement.resurrector || permission.paused || timed_out.is_empty() {
            return verdict;
        }
        let (allowed, disabled): (BTreeSet<String>, BTreeSet<String>) = timed_out
            .into_iter()
            .partition(|id| (permission.allowed)(&tracked[id].group));
        if !disabled.is_empty() && disabled != said.disabled {
            verdict.findings.push(Finding {
                severity: Severity::Alert,
                category: Category::DeploymentHealth,
                title: "Resurrection is disabled by resurrection config".into(),
                summary: by_group(tracked, &disabled),
                instance: String::new(),
            });
        }
        said.disabled = disabled;
        let (stateful, allowed): (BTreeSet<String>, BTreeSet<String>) = allowed
            .into_iter()
            .partition(|id| (permission.stateful)(id));
        if !stateful.is_empty() && stateful != said.stateful {
            verdict.findings.push(Finding {
                severity: Severity::Alert,
                category: Category::DeploymentHealth,
                title: "Instances with persistent disks are left to an operator".into(),
                summary: by_group(tracked, &stateful),
                instance: String::new(),
            });
        }
        said.stateful = stateful;
        if !allowed.is_empty() {
            verdict.findings.push(Finding {
                severity: Severity::Warning,
                category: Category::DeploymentHealth,
                title: "Scan unresponsive VMs".into(),
                summary: by_group(tracked, &allowed),
                instance: String::new(),
            });
            for id in allowed {
                verdict
                    .resurrect
                    .entry(tracked[&id].group.clone())
                    .or_default()
                    .push(id);
            }
        }
        verdict
    }
}

/// `group: id, id; group: id`.
fn by_group(tracked: &BTreeMap<String, Tracked>, ids: &BTreeSet<String>) -> String {
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for id in ids {
        groups.entry(&tracked[id].group).or_default().push(id);
    }
    groups
        .iter()
        .map(|(g, ids)| format!("{g}: {}", ids.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn watch() -> Watch {
        Watch::new(Judgement {
            agent_timeout: MIN,
            meltdown: Meltdown::default(),
            resurrector: true,
        })
    }

    fn fleet(n: usize, silent: &[usize]) -> Vec<(Subject, Seen)> {
        (0..n)
            .map(|i| {
                let subject = Subject {
                    group: if i % 2 == 0 { "web" } else { "db" }.into(),
                    id: format!("i{i}"),
                    agent_id: format!("agent-{i}"),
                };
                let seen = if silent.contains(&i) {
                    Seen::Silent
                } else {
                    Seen::Running
                };
                (subject, seen)
            })
            .collect()
    }

    fn open() -> Permission<'static> {
        Permission {
            paused: false,
            allowed: &|_| true,
            stateful: &|_| false,
        }
    }

    fn titles(v: &Verdict) -> Vec<&str> {
        v.findings.iter().map(|f| f.title.as_str()).collect()
    }

    #[test]
    fn a_silent_agent_is_resurrected_once_past_its_timeout_and_said_once() {
        let mut w = watch();
        let t0 = Instant::now();
        let first = w.observe("d", fleet(10, &[]), t0, &open());
        assert!(first.findings.is_empty() && first.resurrect.is_empty());
        let early = w.observe("d", fleet(10, &[3]), t0 + MIN / 2, &open());
        assert!(early.resurrect.is_empty(), "not yet timed out: {early:?}");
        let late = w.observe("d", fleet(10, &[3]), t0 + 2 * MIN, &open());
        assert_eq!(
            titles(&late),
            [
                "agent-3 has timed out",
                "d has instances with timed out agents",
                "Scan unresponsive VMs"
            ]
        );
        assert_eq!(late.findings[1].summary, "db: i3");
        assert_eq!(
            late.resurrect,
            BTreeMap::from([("db".into(), vec!["i3".into()])])
        );
        let again = w.observe("d", fleet(10, &[3]), t0 + 3 * MIN, &open());
        assert_eq!(titles(&again), ["Scan unresponsive VMs"], "not said twice");
        assert_eq!(again.resurrect.len(), 1, "still asked for until it answers");
        // Recreated: a new agent, judged afresh.
        let mut renewed = fleet(10, &[3]);
        renewed[3].0.agent_id = "agent-3b".into();
        let fresh = w.observe("d", renewed, t0 + 4 * MIN, &open());
        assert!(fresh.resurrect.is_empty(), "{fresh:?}");
    }

    #[test]
    fn failing_processes_are_said_when_they_change() {
        let mut w = watch();
        let t0 = Instant::now();
        let mut seen = fleet(2, &[]);
        seen[0].1 = Seen::Failing(vec!["kv".into()]);
        let v = w.observe("d", seen.clone(), t0, &open());
        assert_eq!(titles(&v), ["web/i0 has failing processes: kv"]);
        assert!(v.resurrect.is_empty(), "a failing process is no dead agent");
        assert!(w.observe("d", seen, t0 + MIN, &open()).findings.is_empty());
    }

    #[test]
    fn no_resurrection_in_a_meltdown_paused_or_disabled_by_rules() {
        let t0 = Instant::now();
        let mut w = watch();
        w.observe("d", fleet(20, &[]), t0, &open());
        let melt = w.observe("d", fleet(20, &[0, 1, 2, 3, 4]), t0 + 2 * MIN, &open());
        assert!(melt.resurrect.is_empty());
        assert_eq!(melt.health, Some(DeploymentHealth::Meltdown));
        assert!(titles(&melt).contains(&"We are in meltdown"), "{melt:?}");
        // Those down count for the time threshold after they answer again.
        let after = w.observe("d", fleet(20, &[0]), t0 + 3 * MIN, &open());
        assert_eq!(after.health, Some(DeploymentHealth::Meltdown));
        let later = w.observe("d", fleet(20, &[0]), t0 + 14 * MIN, &open());
        assert_eq!(later.health, Some(DeploymentHealth::Managed));
        assert_eq!(later.resurrect.len(), 1);

        let mut w = watch();
        w.observe("d", fleet(4, &[]), t0, &open());
        let paused = Permission {
            paused: true,
            ..open()
        };
        assert!(
            w.observe("d", fleet(4, &[1]), t0 + 2 * MIN, &paused)
                .resurrect
                .is_empty()
        );
        let no_db = Permission {
            allowed: &|g| g != "db",
            ..open()
        };
        let ruled = w.observe("d", fleet(4, &[1, 2]), t0 + 3 * MIN, &no_db);
        assert_eq!(ruled.resurrect, BTreeMap::new(), "i2 is not timed out yet");
        assert!(
            titles(&ruled).contains(&"Resurrection is disabled by resurrection config"),
            "{ruled:?}"
        );
        let ruled = w.observe("d", fleet(4, &[1, 2]), t0 + 5 * MIN, &no_db);
        assert_eq!(
            ruled.resurrect,
            BTreeMap::from([("web".into(), vec!["i2".into()])])
        );
        let keeps_data = Permission {
            stateful: &|id| id == "i2",
            ..open()
        };
        let left = w.observe("d", fleet(4, &[1, 2]), t0 + 6 * MIN, &keeps_data);
        assert_eq!(
            left.resurrect,
            BTreeMap::from([("db".into(), vec!["i1".into()])])
        );
        assert!(
            titles(&left).contains(&"Instances with persistent disks are left to an operator"),
            "{left:?}"
        );
    }
}
