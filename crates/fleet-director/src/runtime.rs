//! Runtime configs (`bosh update-runtime-config`): releases and addon jobs that every
//! deploy places on the instance groups an addon's `include` and `exclude` pick. Each
//! named runtime config keeps its versions; the newest of each name applies.

use super::manifest::{JobRef, Manifest, ReleaseRef};
use fleet_yaml::{self as yaml, Checker, Node, join};

/// One uploaded version of a named runtime config.
pub type RuntimeConfig = crate::model::NamedConfig;

/// Every problem of a runtime config, each naming its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the runtime config is invalid:\n  {}", problems.join("\n  "))]
pub struct RuntimeConfigError {
    pub problems: Vec<String>,
}

/// Which instance groups a rule picks; an empty rule picks nothing by itself.
#[derive(Debug, Clone, Default, PartialEq)]
struct Rule {
    deployments: Vec<String>,
    instance_groups: Vec<String>,
    /// `(job, release)` pairs: groups that run one of them.
    jobs: Vec<(String, String)>,
    stemcell_os: Vec<String>,
}

impl Rule {
    fn is_empty(&self) -> bool {
        self.deployments.is_empty()
            && self.instance_groups.is_empty()
            && self.jobs.is_empty()
            && self.stemcell_os.is_empty()
    }

    /// Whether every criterion the rule has matches.
    fn matches(&self, manifest: &Manifest, group: usize) -> bool {
        let g = &manifest.instance_groups[group];
        let os = manifest.stemcell(&g.stemcell).map(|s| s.os.as_str());
        (self.deployments.is_empty() || self.deployments.contains(&manifest.name))
            && (self.instance_groups.is_empty() || self.instance_groups.contains(&g.name))
            && (self.jobs.is_empty()
                || self.jobs.iter().any(|(job, release)| {
                    g.jobs
                        .iter()
                        .any(|j| &j.name == job && &j.release == release)
                }))
            && (self.stemcell_os.is_empty()
                || os.is_some_and(|os| self.stemcell_os.iter().any(|o| o == os)))
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Addon {
    jobs: Vec<JobRef>,
    include: Rule,
    exclude: Rule,
}

/// A runtime config as deploys read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeModel {
    releases: Vec<ReleaseRef>,
    addons: Vec<Addon>,
}

/// The strings of an optional list; each item that is not one is reported.
pub(crate) fn strings(checker: &mut Checker, node: Option<&Node>, path: &str) -> Vec<String> {
    let Some(node) = node else {
        return Vec::new();
    };
    checker
        .list(node, path)
        .iter()
        .enumerate()
        .filter_map(|(i, item)| checker.string(item, &format!("{path}[{i}]")))
        .collect()
}

/// A job's `name` and `release`, both required; its other keys must be among `known`.
fn name_and_release(
    checker: &mut Checker,
    job: &Node,
    path: &str,
    known: &[&str],
) -> Option<(String, String)> {
    checker.map(job, path, known);
    let name = job
        .get("name")
        .and_then(|n| checker.string(n, &join(path, "name")));
    let release = job
        .get("release")
        .and_then(|n| checker.string(n, &join(path, "release")));
    match (name, release) {
        (Some(name), Some(release)) => Some((name, release)),
        _ => {
            checker.report(path, job.at, "a job needs `name` and `release`");
            None
        }
    }
}

fn rule(checker: &mut Checker, node: Option<&Node>, path: &str) -> Rule {
    let Some(node) = node else {
        return Rule::default();
    };
    checker.map(
        node,
        path,
        &["deployments", "instance_groups", "jobs", "stemcell"],
    );
    let mut jobs = Vec::new();
    if let Some(list) = node.get("jobs") {
        let at = join(path, "jobs");
        for (i, job) in checker.list(list, &at).iter().enumerate() {
            let here = format!("{at}[{i}]");
            jobs.extend(name_and_release(checker, job, &here, &["name", "release"]));
        }
    }
    let mut stemcell_os = Vec::new();
    if let Some(list) = node.get("stemcell") {
        let at = join(path, "stemcell");
        for (i, s) in checker.list(list, &at).iter().enumerate() {
            let here = format!("{at}[{i}]");
            checker.map(s, &here, &["os"]);
            if let Some(os) = s
                .get("os")
                .and_then(|n| checker.string(n, &join(&here, "os")))
            {
                stemcell_os.push(os);
            }
        }
    }
    Rule {
        deployments: strings(checker, node.get("deployments"), &join(path, "deployments")),
        instance_groups: strings(
            checker,
            node.get("instance_groups"),
            &join(path, "instance_groups"),
        ),
        jobs,
        stemcell_os,
    }
}

/// Parses and validates a runtime config: every release has a name and a version, every
/// addon job names a release the config lists.
///
/// # Errors
/// Its YAML syntax, or every invalid key at once.
pub fn parse(text: &str) -> Result<RuntimeModel, RuntimeConfigError> {
    let root = yaml::load(text, yaml::Limits::default()).map_err(|e| RuntimeConfigError {
        problems: vec![e.to_string()],
    })?;
    parse_root(&root)
}

/// As [`parse`], from the document read (its placeholders resolved).
///
/// # Errors
/// As [`parse`].
pub fn parse_root(root: &yaml::Node) -> Result<RuntimeModel, RuntimeConfigError> {
    let mut checker = Checker::new();
    checker.map(root, "", &["releases", "addons", "tags", "variables"]);
    let mut releases = Vec::new();
    if let Some(list) = root.get("releases") {
        for (i, r) in checker.list(list, "releases").iter().enumerate() {
            let here = format!("releases[{i}]");
            checker.map(r, &here, &["name", "version", "url", "sha1", "stemcell"]);
            let name = r
                .get("name")
                .and_then(|n| checker.string(n, &join(&here, "name")));
            let version = r.get("version").map(|v| match &v.value {
                yaml::Value::Int(n) => Some(n.to_string()),
                yaml::Value::Float(f) => Some(f.to_string()),
                _ => checker.string(v, &join(&here, "version")),
            });
            match (name, version.flatten()) {
                // A runtime config applies to deployments made at other times: it names
                // versions, as BOSH's director requires.
                (Some(name), Some(version))
                    if version == "latest"
                        || version.ends_with(".latest")
                        || version.ends_with("_latest") =>
                {
                    checker.report(
                        &join(&here, "version"),
                        r.at,
                        format!(
                            "Runtime manifest contains the release '{name}' with version as \
                             '{version}'. Please specify the actual version string."
                        ),
                    );
                }
                (Some(name), Some(version)) => releases.push(ReleaseRef {
                    name,
                    version,
                    exported_from: Vec::new(),
                }),
                _ => checker.report(&here, r.at, "a release needs `name` and `version`"),
            }
        }
    }
    let mut addons = Vec::new();
    if let Some(list) = root.get("addons") {
        for (i, a) in checker.list(list, "addons").iter().enumerate() {
            let here = format!("addons[{i}]");
            checker.map(
                a,
                &here,
                &["name", "jobs", "include", "exclude", "properties"],
            );
            if a.get("name")
                .and_then(|n| checker.string(n, &join(&here, "name")))
                .is_none()
            {
                checker.report(&here, a.at, "an addon needs a `name`");
            }
            let mut jobs = Vec::new();
            let at = join(&here, "jobs");
            let listed = a
                .get("jobs")
                .map(|j| checker.list(j, &at))
                .unwrap_or_default();
            if listed.is_empty() {
                checker.report(&at, a.at, "an addon needs at least one job");
            }
            for (k, job) in listed.iter().enumerate() {
                let jpath = format!("{at}[{k}]");
                let known = ["name", "release", "properties"];
                let Some((name, release)) = name_and_release(&mut checker, job, &jpath, &known)
                else {
                    continue;
                };
                if !releases.iter().any(|r: &ReleaseRef| r.name == release) {
                    checker.report(
                        &join(&jpath, "release"),
                        job.at,
                        format!(
                            "release `{release}` is not one of the runtime config's `releases`"
                        ),
                    );
                }
                let properties = job
                    .get("properties")
                    .map(Node::to_json)
                    .unwrap_or_else(|| serde_json::json!({}));
                jobs.push(JobRef {
                    name,
                    release,
                    properties,
                    provides: Default::default(),
                    consumes: Default::default(),
                    custom_providers: Vec::new(),
                });
            }
            addons.push(Addon {
                jobs,
                include: rule(&mut checker, a.get("include"), &join(&here, "include")),
                exclude: rule(&mut checker, a.get("exclude"), &join(&here, "exclude")),
            });
        }
    }
    let problems: Vec<String> = checker
        .into_problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    if !problems.is_empty() {
        return Err(RuntimeConfigError { problems });
    }
    Ok(RuntimeModel { releases, addons })
}

/// The newest version of each name.
pub fn latest(all: &[RuntimeConfig]) -> Vec<&RuntimeConfig> {
    let mut newest: std::collections::BTreeMap<&str, &RuntimeConfig> = Default::default();
    for config in all {
        let kept = newest.entry(&config.name).or_insert(config);
        if config.version > kept.version {
            *kept = config;
        }
    }
    newest.into_values().collect()
}

/// The versions of `configs`, ascending: what a deployment records having applied.
pub fn versions(configs: &[&RuntimeConfig]) -> Vec<u64> {
    let mut versions: Vec<u64> = configs.iter().map(|c| c.version).collect();
    versions.sort_unstable();
    versions
}

/// Places every addon's jobs on the instance groups it picks, and its releases in the
/// manifest. A job the group already runs, or a release the manifest already names, is
/// left as the manifest has it. Pure.
pub fn apply(manifest: &mut Manifest, configs: &[RuntimeModel]) {
    for config in configs {
        let mut used = Vec::new();
        for addon in &config.addons {
            for group in 0..manifest.instance_groups.len() {
                let included = addon.include.is_empty() || addon.include.matches(manifest, group);
                let excluded = !addon.exclude.is_empty() && addon.exclude.matches(manifest, group);
                if !included || excluded {
                    continue;
                }
                let jobs = &mut manifest.instance_groups[group].jobs;
                for job in &addon.jobs {
                    if !jobs.iter().any(|j| j.name == job.name) {
                        jobs.push(job.clone());
                        used.push(job.release.clone());
                    }
                }
            }
        }
        for release in &config.releases {
            if used.contains(&release.name) && manifest.release(&release.name).is_none() {
                manifest.releases.push(release.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse as parse_manifest;

    fn manifest(name: &str) -> Manifest {
        parse_manifest(&format!(
            "name: {name}
releases: [{{name: pg, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '1'}}]
update: {{canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}}
instance_groups:
- name: db
  instances: 1
  jobs: [{{name: postgres, release: pg}}]
  stemcell: default
  networks: [{{name: default}}]
- name: web
  instances: 1
  jobs: [{{name: nginx, release: pg}}]
  stemcell: default
  networks: [{{name: default}}]
"
        ))
        .unwrap()
    }

    fn jobs(m: &Manifest) -> Vec<(String, Vec<String>)> {
        m.instance_groups
            .iter()
            .map(|g| {
                (
                    g.name.clone(),
                    g.jobs.iter().map(|j| j.name.clone()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn addons_go_where_include_and_exclude_say_with_their_releases() {
        let config = parse(
            "releases: [{name: os-conf, version: 22}]
addons:
- name: users
  jobs: [{name: user_add, release: os-conf, properties: {users: []}}]
  exclude: {jobs: [{name: nginx, release: pg}]}
- name: only-d2
  jobs: [{name: syslog, release: os-conf}]
  include: {deployments: [d2]}
",
        )
        .unwrap();
        let mut one = manifest("d1");
        apply(&mut one, std::slice::from_ref(&config));
        assert_eq!(
            jobs(&one),
            [
                (
                    "db".to_string(),
                    vec!["postgres".to_string(), "user_add".to_string()]
                ),
                ("web".to_string(), vec!["nginx".to_string()]),
            ]
        );
        assert_eq!(
            one.release("os-conf").map(|r| r.version.as_str()),
            Some("22")
        );
        let mut two = manifest("d2");
        apply(&mut two, &[config]);
        assert_eq!(jobs(&two)[1].1, ["nginx", "syslog"]);
    }

    #[test]
    fn every_problem_is_named_with_its_key() {
        let e = parse(
            "releases: [{name: os-conf}]
addons:
- name: a
  jobs: [{name: x, release: missing}]
  include: {deploymnets: [d]}
- jobs: []
",
        )
        .unwrap_err();
        let all = e.problems.join("\n");
        assert!(all.contains("releases[0]"), "{all}");
        assert!(all.contains("addons[0].jobs[0].release"), "{all}");
        assert!(all.contains("deploymnets"), "{all}");
        assert!(all.contains("addons[1]"), "{all}");
        assert!(parse("a: [").is_err());
    }
}
