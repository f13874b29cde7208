//! The manifest `create-env` deploys (seed 002), read after its variables are
//! interpolated: the deployment (`networks`, `resource_pools`, `disk_pools` and exactly
//! one job of one instance) and the CPI's configuration (`cloud_provider`). Every problem
//! is reported at once, each with its key.

mod deployment;
mod job;
mod model;
mod provider;
mod read;

use fleet_yaml::{Checker, Node};

pub use model::{
    CloudProvider, DiskPool, EnvManifest, Job, JobNetwork, JobTemplate, Network, NetworkKind,
    ReleaseEntry, ResourcePool,
};

#[derive(Debug, thiserror::Error)]
#[error("the manifest is invalid:\n  {}", .0.join("\n  "))]
pub struct ManifestError(pub Vec<String>);

/// Reads and checks an interpolated manifest.
///
/// # Errors
/// Every problem found, each naming its key.
pub fn parse(root: &Node) -> Result<EnvManifest, ManifestError> {
    let mut c = Checker::new();
    c.map(root, "", read::TOP);
    let name = read::text(&mut c, root, "", "name");
    let releases = deployment::releases(&mut c, root);
    let release_names: Vec<String> = releases.iter().map(|r| r.name.clone()).collect();
    let networks = deployment::networks(&mut c, root);
    let resource_pools = deployment::resource_pools(&mut c, root, &networks);
    let disk_pools = deployment::disk_pools(&mut c, root);
    let context = job::Context {
        releases: release_names.clone(),
        resource_pools: resource_pools.iter().map(|p| p.name.clone()).collect(),
        disk_pools: disk_pools.iter().map(|p| p.name.clone()).collect(),
        networks: networks.clone(),
    };
    let job = job::job(&mut c, root, &context);
    let cloud_provider = provider::cloud_provider(&mut c, root, &release_names);
    let watch_time_ms = provider::watch_time(&mut c, root);
    let problems: Vec<String> = c.into_problems().iter().map(ToString::to_string).collect();
    match (problems.is_empty(), name, job, cloud_provider) {
        (true, Some(name), Some(job), Some(cloud_provider)) => Ok(EnvManifest {
            name,
            releases,
            networks,
            resource_pools,
            disk_pools,
            job,
            properties: read::json(root, "properties"),
            cloud_provider,
            watch_time_ms,
        }),
        _ => Err(ManifestError(problems)),
    }
}

#[cfg(test)]
mod tests;
