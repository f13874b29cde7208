//! What an instance's spec means on its VM, read from the director's store: the
//! compiled packages it places, the files the director rendered for it, and what a stop
//! tells its scripts, as BOSH's agent works that out from the spec it runs and the one
//! the director sends.

use std::collections::BTreeMap;

use fleet_director::agent::{Drain, Intent};
use fleet_director::compile as director_compile;
use fleet_director::model::InstanceSpec;
use fleet_store::AsyncStore;

use super::stored::{self, StoredError};
use fleet_vm::lifecycle::StopContext;
use fleet_vm::place::PackageToPlace;

/// Job to each rendered file's path in its directory and contents.
pub type RenderedJobs = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// Each package `spec` places (its jobs' packages and theirs), with the key its
/// compilation is kept under.
///
/// # Errors
/// A release the spec names that is not uploaded, or a job that is in none of them.
pub async fn package_keys(
    store: &AsyncStore,
    spec: &InstanceSpec,
) -> Result<BTreeMap<String, String>, StoredError> {
    let releases = stored::releases(store, &spec.releases).await?;
    let mut wanted: BTreeMap<String, String> = BTreeMap::new();
    for job_name in &spec.jobs {
        let (release, job) = releases
            .iter()
            .find_map(|r| r.jobs.iter().find(|j| &j.name == job_name).map(|j| (r, j)))
            .ok_or_else(|| StoredError::NoJob {
                job: job_name.clone(),
            })?;
        let mut pending = job.packages.clone();
        while let Some(p) = pending.pop() {
            if wanted.contains_key(&p) {
                continue;
            }
            let key = director_compile::cache_key(release, &p, &spec.stemcell);
            wanted.insert(p.clone(), key);
            if let Some(package) = release.packages.iter().find(|x| x.name == p) {
                pending.extend(package.dependencies.iter().cloned());
            }
        }
    }
    Ok(wanted)
}

/// The jobs' rendered files and the compiled packages `spec` places.
///
/// # Errors
/// A spec the director rendered nothing for, or what it names missing from the store.
pub async fn placement(
    store: &AsyncStore,
    spec: &InstanceSpec,
) -> Result<(RenderedJobs, Vec<PackageToPlace>), StoredError> {
    let rendered = spec.rendered.as_ref().ok_or(StoredError::NotRendered)?;
    let archive = stored::blob(store, &rendered.blob).await?;
    let jobs = tokio::task::spawn_blocking(move || fleet_render::unpack(&archive)).await??;
    let mut packages = Vec::new();
    for (name, key) in package_keys(store, spec).await? {
        let blob = stored::compiled_blob(store, &key).await?;
        let compiled = stored::blob(store, &blob).await?;
        packages.push(PackageToPlace { name, compiled });
    }
    Ok((jobs, packages))
}

/// What a stop asked as `drain` tells the scripts of the jobs `jobs` running `applied`.
/// An update in place: `job_changed` (`job_new` where nothing ran), whether the
/// configuration hash changed, the packages that change, both specs' job state; a
/// shutdown: `job_shutdown hash_unchanged` and the spec's job state. `pre-stop` hears
/// what becomes of the VM, the instance and the deployment.
pub async fn stop_context(
    store: &AsyncStore,
    applied: Option<&InstanceSpec>,
    jobs: &[String],
    drain: Drain<'_>,
) -> StopContext {
    let job_state = |s: &InstanceSpec| format!("{{\"persistent_disk\":{}}}", s.persistent_disk);
    let state_env = applied.map(|a| ("BOSH_JOB_STATE".to_string(), job_state(a)));
    let next = match drain {
        Drain::Update(next) => next,
        // A dynamic drain's status run is the agent's own; asked for it, it shuts down.
        Drain::Shutdown(_) | Drain::Status => {
            let intent = match drain {
                Drain::Shutdown(intent) => intent,
                _ => Intent::KeepVm,
            };
            let mut context = StopContext::shutdown(pre_stop_env(intent));
            context.drain_env.extend(state_env);
            return context;
        }
    };
    let hash = |s: Option<&InstanceSpec>| {
        s.and_then(|s| s.rendered.as_ref())
            .map(|r| r.configuration_hash.clone())
    };
    let hash_change = match (hash(applied), hash(Some(next))) {
        (None, _) => "hash_new",
        (old, new) if old == new => "hash_unchanged",
        _ => "hash_changed",
    };
    let keys = |spec: &InstanceSpec| {
        let spec = spec.clone();
        let store = store.clone();
        async move {
            package_keys(&store, &spec).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "drain scripts are not told which packages change");
                BTreeMap::new()
            })
        }
    };
    let before = match applied {
        Some(spec) => keys(spec).await,
        None => BTreeMap::new(),
    };
    let after = keys(next).await;
    let updated_packages = after
        .iter()
        .filter(|(name, key)| before.get(*name) != Some(*key))
        .map(|(name, _)| name.clone())
        .collect();
    let mut drain_env = vec![("BOSH_JOB_NEXT_STATE".to_string(), job_state(next))];
    drain_env.extend(state_env);
    StopContext {
        job_change: if jobs.is_empty() {
            "job_new"
        } else {
            "job_changed"
        }
        .into(),
        hash_change: hash_change.into(),
        updated_packages,
        drain_env,
        pre_stop_env: pre_stop_env(Intent::KeepVm),
    }
}

fn pre_stop_env(intent: Intent) -> Vec<(String, String)> {
    intent
        .next_states()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
