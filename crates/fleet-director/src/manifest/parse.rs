use std::time::Duration;

use super::model::{
    Count, InstanceGroup, JobRef, Lifecycle, Manifest, NetworkRef, ReleaseRef, StemcellRef,
    UpdatePolicy, WatchTime,
};
use fleet_yaml::{self as yaml, Checker, Node, Problem, Value, join};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManifestError {
    #[error("manifest is not valid YAML: {0}")]
    Syntax(yaml::LoadError),
    #[error("{}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid { problems: Vec<Problem> },
}

const TOP: &[&str] = &[
    "name",
    "networks",
    "compilation",
    "director_uuid",
    "releases",
    "stemcells",
    "update",
    "instance_groups",
    "properties",
    "variables",
    "features",
    "tags",
];
const UPDATE: &[&str] = &[
    "canaries",
    "max_in_flight",
    "canary_watch_time",
    "update_watch_time",
    "serial",
    "vm_strategy",
];
const GROUP: &[&str] = &[
    "name",
    "instances",
    "azs",
    "jobs",
    "vm_type",
    "vm_extensions",
    "stemcell",
    "persistent_disk",
    "persistent_disk_type",
    "networks",
    "update",
    "properties",
    "lifecycle",
    "env",
];

/// Parses and checks a manifest; every problem names its instance group and key.
///
/// # Errors
/// [`ManifestError::Syntax`] for text that is not YAML, [`ManifestError::Invalid`] with
/// every problem found otherwise.
pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
    let root = yaml::load(text, yaml::Limits::default()).map_err(ManifestError::Syntax)?;
    parse_root(&root)
}

/// As [`parse`], from the document read (its placeholders outside properties resolved).
///
/// # Errors
/// [`ManifestError::Invalid`] with every problem found.
pub fn parse_root(root: &Node) -> Result<Manifest, ManifestError> {
    let mut checker = Checker::new();
    let manifest = read(root, &mut checker);
    if checker.is_clean() {
        Ok(manifest)
    } else {
        Err(ManifestError::Invalid {
            problems: checker.into_problems(),
        })
    }
}

fn required<'n>(
    checker: &mut Checker,
    node: &'n Node,
    entries: &[&'n (yaml::Key, Node)],
    path: &str,
    key: &str,
) -> Option<&'n Node> {
    let found = entries.iter().find(|(k, _)| k.name == key).map(|(_, v)| v);
    if found.is_none() {
        checker.report(&join(path, key), node.at, "is required");
    }
    found
}

fn text(checker: &mut Checker, node: &Node, path: &str) -> Option<String> {
    match &node.value {
        Value::Str(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        other => {
            checker.report(
                path,
                node.at,
                format!("must be a string, found {}", other.kind()),
            );
            None
        }
    }
}

/// A name the director accepts (see [`crate::names::name_problem`]).
fn named(checker: &mut Checker, node: &Node, path: &str) -> Option<String> {
    let name = text(checker, node, path)?;
    match crate::names::name_problem(&name) {
        None => Some(name),
        Some(problem) => {
            checker.report(path, node.at, problem);
            None
        }
    }
}

fn read(root: &Node, checker: &mut Checker) -> Manifest {
    let entries = checker.map(root, "", TOP);
    let name = required(checker, root, &entries, "", "name")
        .and_then(|n| named(checker, n, "name"))
        .unwrap_or_default();
    let mut releases = Vec::new();
    if let Some(node) = required(checker, root, &entries, "", "releases") {
        for (i, r) in checker.list(node, "releases").iter().enumerate() {
            let path = format!("releases[{i}]");
            let fields = checker.map(
                r,
                &path,
                &[
                    "name",
                    "version",
                    "url",
                    "sha1",
                    "stemcell",
                    "exported_from",
                ],
            );
            let name = required(checker, r, &fields, &path, "name")
                .and_then(|n| text(checker, n, &join(&path, "name")));
            let version = required(checker, r, &fields, &path, "version")
                .and_then(|n| text(checker, n, &join(&path, "version")));
            let mut exported_from = Vec::new();
            if let Some(list) = r.get("exported_from") {
                let here = join(&path, "exported_from");
                for (j, e) in checker.list(list, &here).iter().enumerate() {
                    let at = format!("{here}[{j}]");
                    let keys = checker.map(e, &at, &["os", "version"]);
                    let os = required(checker, e, &keys, &at, "os")
                        .and_then(|n| text(checker, n, &join(&at, "os")));
                    let version = required(checker, e, &keys, &at, "version")
                        .and_then(|n| text(checker, n, &join(&at, "version")));
                    if let (Some(os), Some(version)) = (os, version) {
                        exported_from.push(format!("{os}/{version}"));
                    }
                }
            }
            if let (Some(name), Some(version)) = (name, version) {
                releases.push(ReleaseRef {
                    name,
                    version,
                    exported_from,
                });
            }
        }
    }
    let mut stemcells = Vec::new();
    if let Some(node) = required(checker, root, &entries, "", "stemcells") {
        for (i, s) in checker.list(node, "stemcells").iter().enumerate() {
            let path = format!("stemcells[{i}]");
            let fields = checker.map(s, &path, &["alias", "os", "version", "name"]);
            let alias = required(checker, s, &fields, &path, "alias")
                .and_then(|n| text(checker, n, &join(&path, "alias")));
            let os = required(checker, s, &fields, &path, "os")
                .and_then(|n| text(checker, n, &join(&path, "os")));
            let version = required(checker, s, &fields, &path, "version")
                .and_then(|n| text(checker, n, &join(&path, "version")));
            if let (Some(alias), Some(os), Some(version)) = (alias, os, version) {
                stemcells.push(StemcellRef { alias, os, version });
            }
        }
    }
    let update = match entries.iter().find(|(k, _)| k.name == "update") {
        Some((_, node)) => read_update(checker, node, "update", UpdatePolicy::default()),
        None => {
            checker.report("update", root.at, "is required");
            UpdatePolicy::default()
        }
    };
    let mut instance_groups = Vec::new();
    if let Some(node) = required(checker, root, &entries, "", "instance_groups") {
        for (i, g) in checker.list(node, "instance_groups").iter().enumerate() {
            if let Some(group) = read_group(checker, g, i, update) {
                instance_groups.push(group);
            }
        }
    }
    let networks = entries
        .iter()
        .find(|(k, _)| k.name == "networks")
        .map(|(_, node)| crate::network::networks(checker, node, "networks", None));
    let variables = entries
        .iter()
        .find(|(k, _)| k.name == "variables")
        .map_or(serde_json::Value::Null, |(_, node)| node.to_json());
    let manifest = Manifest {
        name,
        networks,
        releases,
        stemcells,
        update,
        instance_groups,
        variables,
    };
    check_references(checker, &manifest, root);
    manifest
}

fn read_update(checker: &mut Checker, node: &Node, path: &str, base: UpdatePolicy) -> UpdatePolicy {
    let mut policy = base;
    for (key, value) in checker.map(node, path, UPDATE) {
        let p = join(path, &key.name);
        match key.name.as_str() {
            "canaries" => {
                if let Some(c) = count(checker, value, &p, 0) {
                    policy.canaries = c;
                }
            }
            "max_in_flight" => {
                if let Some(c) = count(checker, value, &p, 1) {
                    policy.max_in_flight = c;
                }
            }
            "canary_watch_time" => {
                if let Some(w) = watch_time(checker, value, &p) {
                    policy.canary_watch_time = w;
                }
            }
            "update_watch_time" => {
                if let Some(w) = watch_time(checker, value, &p) {
                    policy.update_watch_time = w;
                }
            }
            "serial" => {
                if let Some(b) = checker.boolean(value, &p) {
                    policy.serial = b;
                }
            }
            _ => {}
        }
    }
    policy
}

fn count(checker: &mut Checker, node: &Node, path: &str, min: i64) -> Option<Count> {
    match &node.value {
        Value::Int(n) if *n >= min => u32::try_from(*n).ok().map(Count::Fixed),
        Value::Str(s) if s.ends_with('%') => match s.trim_end_matches('%').parse::<u32>() {
            Ok(p) if p <= 100 && (p > 0 || min == 0) => Some(Count::Percent(p)),
            _ => {
                checker.report(
                    path,
                    node.at,
                    format!("`{s}` is not a percentage between {min}% and 100%"),
                );
                None
            }
        },
        other => {
            checker.report(
                path,
                node.at,
                format!(
                    "must be an integer of at least {min} or a percentage like `25%`, found {}",
                    yaml::describe(other)
                ),
            );
            None
        }
    }
}

/// `N` (milliseconds) or `A-B` (a range in milliseconds).
fn watch_time(checker: &mut Checker, node: &Node, path: &str) -> Option<WatchTime> {
    let parsed = match &node.value {
        Value::Int(n) if *n >= 0 => Some((*n as u64, *n as u64)),
        Value::Str(s) => s.split_once('-').and_then(|(a, b)| {
            let (a, b) = (a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?);
            (a <= b).then_some((a, b))
        }),
        _ => None,
    };
    match parsed {
        Some((min, max)) => Some(WatchTime {
            min: Duration::from_millis(min),
            max: Duration::from_millis(max),
        }),
        None => {
            checker.report(
                path,
                node.at,
                format!(
                    "must be milliseconds `N` or a range `A-B` with A <= B, found {}",
                    yaml::describe(&node.value)
                ),
            );
            None
        }
    }
}

fn read_group(
    checker: &mut Checker,
    node: &Node,
    i: usize,
    update: UpdatePolicy,
) -> Option<InstanceGroup> {
    // The group's name first, so that every problem inside it can name the group.
    let name = node
        .get("name")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let problem = name.as_deref().and_then(crate::names::name_problem);
    let path = match &name {
        Some(n) if problem.is_none() => format!("instance_groups.{n}"),
        _ => format!("instance_groups[{i}]"),
    };
    let fields = checker.map(node, &path, GROUP);
    if name.is_none() {
        checker.report(&format!("{path}.name"), node.at, "is required");
        return None;
    }
    if let Some(problem) = problem {
        checker.report(&format!("{path}.name"), node.at, problem);
        return None;
    }
    let mut group = InstanceGroup {
        name: name.unwrap_or_default(),
        instances: 0,
        azs: Vec::new(),
        jobs: Vec::new(),
        vm_type: None,
        vm_extensions: Vec::new(),
        stemcell: String::new(),
        persistent_disk: 0,
        persistent_disk_type: None,
        networks: Vec::new(),
        update,
        lifecycle: Lifecycle::Service,
    };
    for key in ["instances", "jobs", "stemcell", "networks"] {
        required(checker, node, &fields, &path, key);
    }
    let mut group_properties = None;
    for (key, value) in &fields {
        let p = join(&path, &key.name);
        match key.name.as_str() {
            "instances" => match &value.value {
                Value::Int(n) if *n >= 0 && u32::try_from(*n).is_ok() => {
                    group.instances = *n as u32
                }
                Value::Int(n) if *n >= 0 => checker.report(
                    &p,
                    value.at,
                    format!("{n} is more instances than any director can run"),
                ),
                other => checker.report(
                    &p,
                    value.at,
                    format!(
                        "must be an integer of at least 0, found {}",
                        yaml::describe(other)
                    ),
                ),
            },
            "azs" => {
                group.azs = checker
                    .list(value, &p)
                    .iter()
                    .filter_map(|a| text(checker, a, &p))
                    .collect();
            }
            "jobs" => {
                for (j, job) in checker.list(value, &p).iter().enumerate() {
                    let jp = format!("{p}[{j}]");
                    let jf = checker.map(
                        job,
                        &jp,
                        &[
                            "name",
                            "release",
                            "properties",
                            "consumes",
                            "provides",
                            "custom_provider_definitions",
                        ],
                    );
                    let name = required(checker, job, &jf, &jp, "name")
                        .and_then(|n| named(checker, n, &join(&jp, "name")));
                    let release = required(checker, job, &jf, &jp, "release")
                        .and_then(|n| text(checker, n, &join(&jp, "release")));
                    let properties = jf
                        .iter()
                        .find(|(k, _)| k.name == "properties")
                        .map(|(_, v)| v.to_json())
                        .unwrap_or(serde_json::Value::Null);
                    let provides = job
                        .get("provides")
                        .map(|n| super::links::provides(checker, n, &join(&jp, "provides")))
                        .unwrap_or_default();
                    let consumes = job
                        .get("consumes")
                        .map(|n| super::links::consumes(checker, n, &join(&jp, "consumes")))
                        .unwrap_or_default();
                    let custom_providers = job
                        .get("custom_provider_definitions")
                        .map(|n| {
                            super::links::custom_providers(
                                checker,
                                n,
                                &join(&jp, "custom_provider_definitions"),
                            )
                        })
                        .unwrap_or_default();
                    if let (Some(name), Some(release)) = (name, release) {
                        group.jobs.push(JobRef {
                            name,
                            release,
                            properties,
                            provides,
                            consumes,
                            custom_providers,
                        });
                    }
                }
            }
            "vm_type" => group.vm_type = text(checker, value, &p),
            "vm_extensions" => {
                group.vm_extensions = checker
                    .list(value, &p)
                    .iter()
                    .filter_map(|e| text(checker, e, &p))
                    .collect();
            }
            "stemcell" => group.stemcell = text(checker, value, &p).unwrap_or_default(),
            "persistent_disk" => match &value.value {
                Value::Int(n) if *n >= 0 => group.persistent_disk = *n as u64,
                other => checker.report(
                    &p,
                    value.at,
                    format!("must be a size in MB, found {}", yaml::describe(other)),
                ),
            },
            "networks" => {
                for (n, net) in checker.list(value, &p).iter().enumerate() {
                    let np = format!("{p}[{n}]");
                    let nf = checker.map(net, &np, &["name", "static_ips", "default"]);
                    let mut static_ips = Vec::new();
                    if let Some((_, ips)) = nf.iter().find(|(k, _)| k.name == "static_ips") {
                        let sp = join(&np, "static_ips");
                        for (i, entry) in checker.list(ips, &sp).iter().enumerate() {
                            let ep = format!("{sp}[{i}]");
                            match text(checker, entry, &ep).map(|t| crate::network::entry(&t)) {
                                Some(Ok((a, b))) if b - a < 65_536 => static_ips.extend(a..=b),
                                Some(Ok(_)) => checker.report(
                                    &ep,
                                    entry.at,
                                    "a static IP range may hold at most 65,536 addresses",
                                ),
                                Some(Err(e)) => checker.report(&ep, entry.at, e.to_string()),
                                None => {}
                            }
                        }
                    }
                    if let Some(name) = required(checker, net, &nf, &np, "name")
                        .and_then(|n| text(checker, n, &join(&np, "name")))
                    {
                        group.networks.push(NetworkRef { name, static_ips });
                    }
                }
            }
            "update" => group.update = read_update(checker, value, &p, update),
            "properties" => group_properties = Some(value.to_json()),
            "persistent_disk_type" => group.persistent_disk_type = text(checker, value, &p),
            "lifecycle" => match value.as_str() {
                Some("service") => group.lifecycle = Lifecycle::Service,
                Some("errand") => group.lifecycle = Lifecycle::Errand,
                _ => checker.report(
                    &p,
                    value.at,
                    format!(
                        "must be `service` or `errand`, found {}",
                        yaml::describe(&value.value)
                    ),
                ),
            },
            _ => {}
        }
    }
    // Group-level properties apply to the jobs that set none of their own, as in BOSH.
    if let Some(properties) = group_properties {
        for job in &mut group.jobs {
            if job.properties.is_null() {
                job.properties = properties.clone();
            }
        }
    }
    Some(group)
}

/// References inside the manifest: jobs name releases the manifest lists, groups name
/// stemcell aliases it defines, and names are unique.
fn check_references(checker: &mut Checker, manifest: &Manifest, root: &Node) {
    let at = root.at;
    let mut seen = std::collections::BTreeSet::new();
    for group in &manifest.instance_groups {
        let path = format!("instance_groups.{}", group.name);
        if !seen.insert(&group.name) {
            checker.report(&path, at, "duplicate instance group name");
        }
        if !group.stemcell.is_empty() && manifest.stemcell(&group.stemcell).is_none() {
            checker.report(
                &join(&path, "stemcell"),
                at,
                format!("unknown stemcell alias `{}`", group.stemcell),
            );
        }
        let mut jobs = std::collections::BTreeSet::new();
        for job in &group.jobs {
            if !jobs.insert(&job.name) {
                checker.report(
                    &join(&path, "jobs"),
                    at,
                    format!("duplicate job `{}`", job.name),
                );
            }
            if manifest.release(&job.release).is_none() {
                checker.report(
                    &join(&path, "jobs"),
                    at,
                    format!(
                        "job `{}` is from release `{}`, which the manifest does not name",
                        job.name, job.release
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "name: pg
releases:
- {name: postgres, version: '43'}
stemcells:
- {alias: default, os: ubuntu-jammy, version: '1.500'}
update:
  canaries: 1
  max_in_flight: 50%
  canary_watch_time: 1000-30000
  update_watch_time: 5000
instance_groups:
- name: db
  instances: 3
  azs: [z1]
  jobs: [{name: postgres, release: postgres, properties: {port: 5432}}]
  vm_type: small
  stemcell: default
  persistent_disk: 10240
  networks: [{name: default}]
";

    #[test]
    fn a_manifest_parses_with_counts_and_watch_times() {
        let m = parse(MANIFEST).unwrap();
        assert_eq!(m.name, "pg");
        assert_eq!(m.update.max_in_flight, Count::Percent(50));
        assert_eq!(m.update.max_in_flight.of(3), 1);
        assert_eq!(m.update.canary_watch_time.max, Duration::from_secs(30));
        assert_eq!(m.update.update_watch_time.min, Duration::from_secs(5));
        let db = &m.instance_groups[0];
        assert_eq!((db.instances, db.persistent_disk), (3, 10240));
        assert_eq!(db.jobs[0].properties["port"], 5432);
    }

    #[test]
    fn group_properties_apply_to_jobs_without_their_own_and_a_lifecycle_is_service_or_errand() {
        let with_group = MANIFEST.replace(
            "jobs: [{name: postgres, release: postgres, properties: {port: 5432}}]",
            "jobs: [{name: postgres, release: postgres}]\n  properties: {port: 6432}",
        );
        let m = parse(&with_group).unwrap();
        assert_eq!(m.instance_groups[0].jobs[0].properties["port"], 6432);
        assert!(!m.instance_groups[0].is_errand());
        let errand = MANIFEST.replace("vm_type: small", "vm_type: small\n  lifecycle: errand");
        assert!(parse(&errand).unwrap().instance_groups[0].is_errand());
        let unknown = MANIFEST.replace("vm_type: small", "vm_type: small\n  lifecycle: daemon");
        let ManifestError::Invalid { problems } = parse(&unknown).unwrap_err() else {
            panic!("expected problems");
        };
        let found: Vec<String> = problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect();
        assert!(
            found.iter().any(|p| p
                .starts_with("instance_groups.db.lifecycle: must be `service` or `errand`")
                && p.contains("daemon")),
            "{found:?}"
        );
    }

    fn problems(text: &str) -> Vec<String> {
        match parse(text) {
            Err(ManifestError::Invalid { problems }) => problems
                .iter()
                .map(|p| format!("{}:{} {}: {}", p.at.line, p.at.column, p.path, p.message))
                .collect(),
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn yaml_errors_carry_line_and_column() {
        let ManifestError::Syntax(e) = parse("name: d\nreleases: [\n").unwrap_err() else {
            panic!("expected a syntax error");
        };
        assert!(e.at.line >= 2, "{e}");
    }

    #[test]
    fn each_kind_of_problem_is_named_with_its_group_key_and_line() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "  canaries: 1\n",
                "  canaries: many\n",
                "update.canaries: must be an integer of at least 0 or a percentage",
            ),
            (
                "max_in_flight: 50%",
                "max_in_flight: 0",
                "update.max_in_flight: must be an integer of at least 1",
            ),
            (
                "canary_watch_time: 1000-30000",
                "canary_watch_time: 30000-1000",
                "update.canary_watch_time: must be milliseconds `N` or a range `A-B` with A <= B",
            ),
            (
                "update_watch_time: 5000",
                "update_watch_time: soon",
                "update.update_watch_time: must be milliseconds",
            ),
            (
                "instances: 3",
                "instances: three",
                "instance_groups.db.instances: must be an integer of at least 0",
            ),
            (
                "vm_type: small",
                "vm_type: small\n  colour: red",
                "instance_groups.db.colour: unknown key",
            ),
            (
                "stemcell: default",
                "stemcell: jammy",
                "instance_groups.db.stemcell: unknown stemcell alias `jammy`",
            ),
            (
                "release: postgres,",
                "release: mysql,",
                "which the manifest does not name",
            ),
        ];
        for (from, to, expected) in cases {
            let found = problems(&MANIFEST.replace(from, to));
            assert!(
                found.iter().any(|p| p.contains(expected)),
                "{to}: {found:?}"
            );
            assert!(
                found.iter().all(|p| !p.starts_with("0:")),
                "every problem has a line: {found:?}"
            );
        }
        let duplicate_group = format!(
            "{MANIFEST}- name: db\n  instances: 1\n  jobs: [{{name: postgres, release: postgres}}]\n  stemcell: default\n  networks: [{{name: default}}]\n"
        );
        assert!(
            problems(&duplicate_group)
                .iter()
                .any(|p| p.contains("instance_groups.db: duplicate instance group name"))
        );
        let duplicate_job = MANIFEST.replace(
            "jobs: [{name: postgres, release: postgres, properties: {port: 5432}}]",
            "jobs: [{name: postgres, release: postgres}, {name: postgres, release: postgres}]",
        );
        assert!(
            problems(&duplicate_job)
                .iter()
                .any(|p| p.contains("duplicate job `postgres`"))
        );
        let missing = problems("name: d\nreleases: []\nstemcells: []\ninstance_groups: []\n");
        assert!(
            missing.iter().any(|p| p.contains("update: is required")),
            "{missing:?}"
        );
    }

    #[test]
    fn watch_times_follow_the_directors_schedule() {
        let ms = Duration::from_millis;
        let w = |min, max| WatchTime {
            min: ms(min),
            max: ms(max),
        };
        let one_to_thirty = w(1000, 30_000).schedule();
        assert_eq!(one_to_thirty.len(), 10, "1 s, then 9 polls");
        assert_eq!(one_to_thirty[0], ms(1000));
        assert_eq!(one_to_thirty[1], ms(3222));
        assert_eq!(w(30_000, 30_000).schedule(), vec![ms(30_000)]);
        let long = w(5000, 300_000).schedule();
        assert_eq!(
            (long[1], long.len()),
            (ms(15_000), 20),
            "steps capped at 15 s"
        );
        let total: Duration = long.iter().sum();
        assert_eq!(
            total,
            ms(290_000),
            "the remainder smaller than a step is dropped"
        );
    }

    #[test]
    fn every_problem_names_its_group_and_key() {
        let bad = MANIFEST
            .replace("max_in_flight: 50%", "max_in_flight: lots")
            .replace("release: postgres,", "release: mysql,")
            .replace("stemcell: default", "stemcell: jammy");
        let ManifestError::Invalid { problems } = parse(&bad).unwrap_err() else {
            panic!("expected problems");
        };
        let text: Vec<String> = problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect();
        assert!(
            text.iter()
                .any(|p| p.starts_with("update.max_in_flight: must be an integer")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|p| p.contains("instance_groups.db.stemcell: unknown stemcell alias `jammy`")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|p| p.contains("release `mysql`, which the manifest does not name")),
            "{text:?}"
        );
    }
}
