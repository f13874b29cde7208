//! Which errand a name means and where it runs, as BOSH's director decides it. Pure: the
//! deployed manifest, the releases and the instance records in, a choice or an error out.

use std::collections::BTreeSet;

use crate::manifest::Manifest;

/// Why an errand cannot run, in BOSH's director's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrandError {
    #[error("Errand '{0}' doesn't exist")]
    Unknown(String),
    #[error(
        "Instance group '{0}' is not an errand. To mark an instance group as an errand set its \
         lifecycle to 'errand' in the deployment manifest."
    )]
    NotAnErrand(String),
    #[error("Errand '{0}' has no jobs to run")]
    NoJobs(String),
    #[error("Filtering by instances is not supported when running errand by instance group name")]
    FilteredGroup,
    #[error("Instance '{deployment}/{group}/0' doesn't exist")]
    NoInstance { deployment: String, group: String },
    #[error("No instances match selection criteria: [{0}]")]
    NoMatch(String),
    #[error("Instance(s) {0} is stopped, unable to run errand. Maybe start vm?")]
    Stopped(String),
    #[error("No instances of deployment '{deployment}' run job '{job}'")]
    NoTargets { deployment: String, job: String },
}
use crate::model::{DesiredState, InstanceRecord, Release};

/// An errand as `bosh run-errand NAME` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Errand {
    /// A `lifecycle: errand` group: it gets a VM for the run, and its first job runs.
    Group { group: String, job: String },
    /// A job with `bin/run` placed in service groups: it runs on their VMs.
    Colocated { job: String },
}

/// One `instances` entry of a run: a group, or one instance of it by id, index or
/// `first`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceFilter {
    pub group: String,
    pub id: Option<String>,
}

impl InstanceFilter {
    fn matches(&self, instance: &InstanceRecord, all: &[InstanceRecord]) -> bool {
        if instance.group != self.group {
            return false;
        }
        match self.id.as_deref() {
            None | Some("") => true,
            // The first by id, as BOSH picks it.
            Some("first") => {
                all.iter()
                    .filter(|i| i.group == self.group)
                    .map(|i| i.id.as_str())
                    .min()
                    == Some(instance.id.as_str())
            }
            Some(id) => instance.id == id || instance.index.to_string() == id,
        }
    }

    /// `group/id`, or `group`, for messages.
    pub fn describe(&self) -> String {
        match &self.id {
            Some(id) => format!("{}/{id}", self.group),
            None => self.group.clone(),
        }
    }
}

/// Whether a release job is an errand: it renders a `bin/run`.
fn runs_as_errand(releases: &[Release], release: &str, job: &str) -> bool {
    releases
        .iter()
        .filter(|r| r.name == release)
        .flat_map(|r| &r.jobs)
        .any(|j| j.name == job && j.templates.values().any(|to| to == "bin/run"))
}

/// The errands of a deployment, as `GET /deployments/NAME/errands` lists them: errand
/// groups, then the jobs with `bin/run` of every group, each name once.
pub fn names(manifest: &Manifest, releases: &[Release]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let groups = manifest
        .instance_groups
        .iter()
        .filter(|g| g.is_errand())
        .map(|g| g.name.clone());
    let jobs = manifest
        .instance_groups
        .iter()
        .flat_map(|g| &g.jobs)
        .filter(|j| runs_as_errand(releases, &j.release, &j.name))
        .map(|j| j.name.clone());
    groups
        .chain(jobs)
        .filter(|name| seen.insert(name.clone()))
        .collect()
}

/// What `name` runs. A job name wins over a group name, as with BOSH (which warns).
///
/// # Errors
/// An unknown name, a service group's name, or a filter with a group errand, worded as
/// BOSH's director words them.
pub fn find(
    manifest: &Manifest,
    releases: &[Release],
    name: &str,
    filters: &[InstanceFilter],
) -> Result<Errand, ErrandError> {
    let placing = |errand: bool| {
        manifest.instance_groups.iter().filter(move |g| {
            g.is_errand() == errand
                && g.jobs
                    .iter()
                    .any(|j| j.name == name && runs_as_errand(releases, &j.release, &j.name))
        })
    };
    if placing(false).next().is_some() {
        return Ok(Errand::Colocated {
            job: name.to_string(),
        });
    }
    // A job of an errand group names its group's errand, that job run.
    if let Some(group) = placing(true).next() {
        return group_errand(manifest, &group.name, name, filters);
    }
    let Some(group) = manifest.instance_groups.iter().find(|g| g.name == name) else {
        return Err(ErrandError::Unknown(name.to_string()));
    };
    if !group.is_errand() {
        return Err(ErrandError::NotAnErrand(name.to_string()));
    }
    let Some(job) = group.jobs.first() else {
        return Err(ErrandError::NoJobs(name.to_string()));
    };
    group_errand(manifest, name, &job.name, filters)
}

/// The errand of errand group `group`, running `job`.
fn group_errand(
    manifest: &Manifest,
    group: &str,
    job: &str,
    filters: &[InstanceFilter],
) -> Result<Errand, ErrandError> {
    if !filters.is_empty() {
        return Err(ErrandError::FilteredGroup);
    }
    let instances = manifest
        .instance_groups
        .iter()
        .find(|g| g.name == group)
        .map_or(0, |g| g.instances);
    if instances == 0 {
        return Err(ErrandError::NoInstance {
            deployment: manifest.name.clone(),
            group: group.to_string(),
        });
    }
    Ok(Errand::Group {
        group: group.to_string(),
        job: job.to_string(),
    })
}

/// The instances a colocated errand runs on: those of the groups that place the job,
/// narrowed by `filters` (all of them without filters). Instances without a VM are
/// skipped, as BOSH skips them; they are returned second, for a warning.
///
/// # Errors
/// A filter that matches nothing, or a stopped instance among the matches.
pub fn colocated_targets(
    manifest: &Manifest,
    job: &str,
    instances: &[InstanceRecord],
    filters: &[InstanceFilter],
) -> Result<(Vec<InstanceRecord>, Vec<InstanceRecord>), ErrandError> {
    let placing: BTreeSet<&str> = manifest
        .instance_groups
        .iter()
        .filter(|g| !g.is_errand() && g.jobs.iter().any(|j| j.name == job))
        .map(|g| g.name.as_str())
        .collect();
    let mut matched: Vec<InstanceRecord> = if filters.is_empty() {
        instances.to_vec()
    } else {
        let unmatched: Vec<String> = filters
            .iter()
            .filter(|f| !instances.iter().any(|i| f.matches(i, instances)))
            .map(InstanceFilter::describe)
            .collect();
        if !unmatched.is_empty() {
            return Err(ErrandError::NoMatch(unmatched.join(", ")));
        }
        instances
            .iter()
            .filter(|i| filters.iter().any(|f| f.matches(i, instances)))
            .cloned()
            .collect()
    };
    matched.retain(|i| placing.contains(i.group.as_str()));
    matched.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
    let stopped: Vec<String> = matched
        .iter()
        .filter(|i| i.state == DesiredState::Stopped)
        .map(|i| format!("'{}/{}'", i.group, i.id))
        .collect();
    if !stopped.is_empty() {
        return Err(ErrandError::Stopped(stopped.join(",")));
    }
    let (with_vm, without): (Vec<_>, Vec<_>) =
        matched.into_iter().partition(|i| i.vm_cid.is_some());
    if with_vm.is_empty() && without.is_empty() && filters.is_empty() {
        return Err(ErrandError::NoTargets {
            deployment: manifest.name.clone(),
            job: job.to_string(),
        });
    }
    Ok((with_vm, without))
}

/// What `when-changed` compares: each target instance's id and the spec it runs (or, for
/// a group errand, will run), in a digest independent of order.
pub fn state_hash(targets: &[(String, String)]) -> String {
    let mut parts: Vec<String> = targets
        .iter()
        .map(|(id, spec)| format!("{id}\n{spec}"))
        .collect();
    parts.sort();
    fleet_release::sha1_hex(parts.join("\n\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse;
    use crate::model::ReleaseJob;

    const MANIFEST: &str = "name: d
releases: [{name: r, version: '1'}]
stemcells: [{alias: default, os: jammy, version: '1'}]
update: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}
instance_groups:
- name: db
  instances: 2
  jobs: [{name: server, release: r}, {name: backup, release: r}]
  stemcell: default
  networks: [{name: default}]
- name: smoke-tests
  lifecycle: errand
  instances: 1
  jobs: [{name: smoke, release: r}]
  stemcell: default
  networks: [{name: default}]
";

    fn releases() -> Vec<Release> {
        let job = |name: &str, run: bool| ReleaseJob {
            name: name.into(),
            templates: if run {
                [("run.sh.erb".to_string(), "bin/run".to_string())].into()
            } else {
                [("ctl.erb".to_string(), "bin/ctl".to_string())].into()
            },
            ..ReleaseJob::default()
        };
        vec![Release {
            name: "r".into(),
            version: "1".into(),
            jobs: vec![
                job("server", false),
                job("backup", true),
                job("smoke", true),
            ],
            ..Release::default()
        }]
    }

    fn instance(group: &str, index: u32, id: &str, state: DesiredState) -> InstanceRecord {
        InstanceRecord {
            vm_cid: (state != DesiredState::Detached).then(|| format!("vm-{id}")),
            agent_id: None,
            state,
            ..InstanceRecord::on_vm(group, index, id)
        }
    }

    fn filter(group: &str, id: Option<&str>) -> InstanceFilter {
        InstanceFilter {
            group: group.into(),
            id: id.map(str::to_string),
        }
    }

    #[test]
    fn errands_are_errand_groups_and_jobs_with_bin_run() {
        let m = parse(MANIFEST).unwrap();
        assert_eq!(names(&m, &releases()), ["smoke-tests", "backup", "smoke"]);
        // Without release metadata (a simulated release) only groups are errands.
        assert_eq!(names(&m, &[]), ["smoke-tests"]);
    }

    #[test]
    fn a_name_is_a_colocated_job_or_an_errand_group_else_a_directors_error() {
        let m = parse(MANIFEST).unwrap();
        let r = releases();
        assert_eq!(
            find(&m, &r, "backup", &[]),
            Ok(Errand::Colocated {
                job: "backup".into()
            })
        );
        assert_eq!(
            find(&m, &r, "smoke-tests", &[]),
            Ok(Errand::Group {
                group: "smoke-tests".into(),
                job: "smoke".into()
            })
        );
        // The job of an errand group runs as that group's errand.
        assert_eq!(
            find(&m, &r, "smoke", &[]),
            Ok(Errand::Group {
                group: "smoke-tests".into(),
                job: "smoke".into()
            })
        );
        assert_eq!(
            find(&m, &r, "nope", &[]).unwrap_err().to_string(),
            "Errand 'nope' doesn't exist"
        );
        assert!(
            find(&m, &r, "db", &[])
                .unwrap_err()
                .to_string()
                .starts_with("Instance group 'db' is not an errand.")
        );
        assert!(
            find(&m, &r, "server", &[])
                .unwrap_err()
                .to_string()
                .starts_with("Errand 'server' doesn't exist")
        );
        assert!(
            find(&m, &r, "smoke-tests", &[filter("smoke-tests", None)])
                .unwrap_err()
                .to_string()
                .starts_with("Filtering by instances is not supported")
        );
    }

    #[test]
    fn filters_pick_by_group_index_id_or_first_and_a_filter_matching_nothing_is_named() {
        let m = parse(MANIFEST).unwrap();
        let all = vec![
            instance("db", 0, "bbb", DesiredState::Started),
            instance("db", 1, "aaa", DesiredState::Started),
            instance("smoke-tests", 0, "ccc", DesiredState::Detached),
        ];
        let picked = |filters: &[InstanceFilter]| {
            let (run, _) = colocated_targets(&m, "backup", &all, filters).unwrap();
            run.iter().map(|i| i.id.clone()).collect::<Vec<_>>()
        };
        assert_eq!(picked(&[]), ["bbb", "aaa"]);
        assert_eq!(picked(&[filter("db", Some("1"))]), ["aaa"]);
        assert_eq!(picked(&[filter("db", Some("bbb"))]), ["bbb"]);
        assert_eq!(picked(&[filter("db", Some("first"))]), ["aaa"]);
        assert_eq!(picked(&[filter("db", None)]), ["bbb", "aaa"]);
        assert_eq!(
            colocated_targets(
                &m,
                "backup",
                &all,
                &[filter("db", Some("7")), filter("web", None)]
            )
            .unwrap_err()
            .to_string(),
            "No instances match selection criteria: [db/7, web]"
        );
    }

    #[test]
    fn a_stopped_instance_refuses_the_run_and_one_without_a_vm_is_skipped() {
        let m = parse(MANIFEST).unwrap();
        let stopped = vec![
            instance("db", 0, "a", DesiredState::Started),
            instance("db", 1, "b", DesiredState::Stopped),
        ];
        assert_eq!(
            colocated_targets(&m, "backup", &stopped, &[])
                .unwrap_err()
                .to_string(),
            "Instance(s) 'db/b' is stopped, unable to run errand. Maybe start vm?"
        );
        let detached = vec![
            instance("db", 0, "a", DesiredState::Started),
            instance("db", 1, "b", DesiredState::Detached),
        ];
        let (run, skipped) = colocated_targets(&m, "backup", &detached, &[]).unwrap();
        assert_eq!((run.len(), skipped[0].id.as_str()), (1, "b"));
    }

    #[test]
    fn the_state_hash_follows_ids_and_specs_not_their_order() {
        let a = ("i1".to_string(), "spec-1".to_string());
        let b = ("i2".to_string(), "spec-2".to_string());
        assert_eq!(
            state_hash(&[a.clone(), b.clone()]),
            state_hash(&[b.clone(), a.clone()])
        );
        let changed = ("i2".to_string(), "spec-3".to_string());
        assert_ne!(state_hash(&[a.clone(), b]), state_hash(&[a, changed]));
    }
}
