//! The job's side of `create-env`: its templates rendered here with the manifest's
//! properties and put in the agent's blobstore, its packages compiled on the VM by the
//! agent (sources put, compilations got back by reference), then `stop`, `apply` with
//! the rendered archive, the packages and the configuration hash, `pre-start`, `start`,
//! the wait until the jobs run, and `post-start`.

use std::collections::BTreeMap;
use std::time::Duration;

use fleet_agent::client::AgentClient;
use fleet_agent::protocol::{ApplySpec, BlobRef, JobRef, PackageRef, TemplateRef};
use fleet_release::ReleaseArchive;
use fleet_render::{InstanceSpec, JobSource, render_archive};
use serde_json::{Value as Json, json};

use super::error::EnvError;
use super::manifest::EnvManifest;
use super::state::uuid;

/// The instance's address on each network: the static one the manifest gives, else the
/// one the agent reports.
async fn addresses(manifest: &EnvManifest, agent: &AgentClient) -> BTreeMap<String, String> {
    let reported = agent.get_state().await.unwrap_or(Json::Null);
    manifest
        .job
        .networks
        .iter()
        .map(|n| {
            let ip = n
                .static_ips
                .first()
                .map(ToString::to_string)
                .or_else(|| {
                    reported
                        .pointer(&format!("/networks/{}/ip", n.name))
                        .and_then(Json::as_str)
                        .map(str::to_string)
                })
                .unwrap_or_else(|| "127.0.0.1".into());
            (n.name.clone(), ip)
        })
        .collect()
}

fn release<'a>(releases: &'a [ReleaseArchive], name: &str) -> Result<&'a ReleaseArchive, EnvError> {
    releases
        .iter()
        .find(|r| r.manifest.name == name)
        .ok_or_else(|| EnvError::Deploy(format!("release `{name}` is not read")))
}

/// Renders every job and puts the archive in the agent's blobstore; its reference and
/// the configuration hash.
async fn render(
    manifest: &EnvManifest,
    releases: &[ReleaseArchive],
    agent: &AgentClient,
    progress: &mut dyn FnMut(String),
) -> Result<(BlobRef, String, BTreeMap<String, String>), EnvError> {
    let job = &manifest.job;
    progress(format!(
        "Rendering job templates for instance '{}/0'",
        job.name
    ));
    let addresses = addresses(manifest, agent).await;
    let first = job
        .networks
        .iter()
        .find(|n| n.default.iter().any(|d| d == "gateway"))
        .or_else(|| job.networks.first())
        .map(|n| addresses[&n.name].clone())
        .unwrap_or_default();
    let spec = InstanceSpec {
        address: first.clone(),
        ip: first,
        id: "0".into(),
        index: 0,
        name: job.name.clone(),
        az: Some("unknown".into()),
        deployment: manifest.name.clone(),
        networks: addresses
            .iter()
            .map(|(n, ip)| (n.clone(), json!({"ip": ip})))
            .collect(),
        bootstrap: true,
    };
    let mut sources = Vec::new();
    for template in &job.templates {
        let release = release(releases, &template.release)?;
        let archive = release
            .jobs
            .iter()
            .find(|j| j.files.spec.name == template.name)
            .ok_or_else(|| {
                EnvError::Deploy(format!(
                    "job `{}` is not in release {}",
                    template.name, template.release
                ))
            })?;
        sources.push(
            JobSource::from_files(&archive.files, manifest.job_properties(template))
                .of_release(&release.manifest.name, &release.manifest.version),
        );
    }
    let (archive, hash) = render_archive(&spec, &sources, fleet_render::Isolation::Host)
        .await
        .map_err(|e| {
            EnvError::Deploy(format!("rendering the templates of '{}/0': {e}", job.name))
        })?;
    let id = uuid();
    let digest = format!("sha256:{}", fleet_release::sha256_hex(&archive));
    agent
        .put_blob(&id, archive)
        .await
        .map_err(EnvError::agent("uploading the rendered templates"))?;
    Ok((
        BlobRef {
            blobstore_id: id,
            sha1: digest,
        },
        hash,
        addresses,
    ))
}

/// Compiles every package the jobs need on the VM, dependencies first.
async fn compile(
    manifest: &EnvManifest,
    releases: &[ReleaseArchive],
    agent: &AgentClient,
    progress: &mut dyn FnMut(String),
) -> Result<BTreeMap<String, PackageRef>, EnvError> {
    let mut compiled: BTreeMap<String, PackageRef> = BTreeMap::new();
    for template in &manifest.job.templates {
        let release = release(releases, &template.release)?;
        let job = release
            .jobs
            .iter()
            .find(|j| j.files.spec.name == template.name)
            .expect("rendered before: the job is in its release");
        let mut pending: Vec<(String, bool)> = job
            .files
            .spec
            .packages
            .iter()
            .map(|p| (p.clone(), false))
            .collect();
        // Depth first: a package is compiled once its dependencies are.
        while let Some((name, expanded)) = pending.pop() {
            if compiled.contains_key(&name) {
                continue;
            }
            let package = release
                .packages
                .iter()
                .find(|p| p.package.archive.name == name)
                .ok_or_else(|| {
                    EnvError::Deploy(format!(
                        "package `{name}` is not in release {}",
                        release.manifest.name
                    ))
                })?;
            let dependencies = &package.package.dependencies;
            if !expanded {
                pending.push((name.clone(), true));
                for dep in dependencies {
                    if !compiled.contains_key(dep) {
                        pending.push((dep.clone(), false));
                    }
                }
                continue;
            }
            let archive = &package.package.archive;
            progress(format!("Compiling package '{name}/{}'", archive.version));
            let source = package
                .bytes
                .as_ref()
                .ok_or_else(|| {
                    EnvError::Deploy(format!(
                        "package `{name}`: the release holds no archive of it"
                    ))
                })?
                .read()
                .map_err(|e| EnvError::Deploy(format!("package `{name}`: {e}")))?;
            let source_id = uuid();
            agent
                .put_blob(&source_id, source)
                .await
                .map_err(EnvError::agent(format!("uploading package {name}")))?;
            let deps: BTreeMap<&String, &PackageRef> = dependencies
                .iter()
                .filter_map(|d| compiled.get(d).map(|r| (d, r)))
                .collect();
            let result = agent
                .call(
                    "compile_package",
                    vec![
                        json!(source_id),
                        json!(archive.digest.as_str()),
                        json!(name),
                        json!(archive.fingerprint),
                        json!(deps),
                    ],
                )
                .await
                .map_err(EnvError::agent(format!("compiling package {name}")))?;
            let field = |key: &str| {
                result
                    .pointer(&format!("/result/{key}"))
                    .and_then(Json::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| {
                        EnvError::Deploy(format!(
                            "compiling package {name}: the agent gave no {key}"
                        ))
                    })
            };
            compiled.insert(
                name.clone(),
                PackageRef {
                    name: name.clone(),
                    version: archive.fingerprint.clone(),
                    sha1: field("sha1")?,
                    blobstore_id: field("blobstore_id")?,
                },
            );
        }
    }
    Ok(compiled)
}

/// Updates the instance to what the manifest says and waits until its jobs run.
///
/// # Errors
/// A template that does not render, a package that does not compile, a script that
/// fails, or jobs not running by the end of `update_watch_time`.
pub async fn update(
    manifest: &EnvManifest,
    releases: &[ReleaseArchive],
    agent: &AgentClient,
    progress: &mut dyn FnMut(String),
) -> Result<(), EnvError> {
    let (archive, hash, addresses) = render(manifest, releases, agent, progress).await?;
    let packages = compile(manifest, releases, agent, progress).await?;
    let job = &manifest.job;
    let instance = format!("{}/0", job.name);
    let spec = ApplySpec {
        deployment: manifest.name.clone(),
        name: job.name.clone(),
        index: Some(0),
        id: "0".into(),
        az: "unknown".into(),
        job: JobRef {
            name: Some(job.name.clone()),
            templates: job
                .templates
                .iter()
                .map(|t| TemplateRef {
                    name: t.name.clone(),
                    version: String::new(),
                })
                .collect(),
        },
        packages,
        networks: addresses
            .into_iter()
            .map(|(n, ip)| (n, json!({"ip": ip})))
            .collect(),
        rendered_templates_archive: Some(archive),
        configuration_hash: hash,
        persistent_disk: manifest.disk().0,
    };
    progress(format!("Updating instance '{instance}'"));
    let step = |what: &str| format!("{what} of instance '{instance}'");
    agent
        .call("stop", vec![])
        .await
        .map_err(EnvError::agent(step("stop")))?;
    agent
        .apply(&spec)
        .await
        .map_err(EnvError::agent(step("apply")))?;
    agent
        .run_script("pre-start")
        .await
        .map_err(EnvError::agent(step("pre-start")))?;
    let started = agent
        .call("start", vec![])
        .await
        .map_err(EnvError::agent(step("start")))?;
    if started != json!("started") {
        return Err(EnvError::Deploy(format!(
            "{}: the agent answered {started}",
            step("start")
        )));
    }
    progress(format!("Waiting for instance '{instance}' to be running"));
    let limit = Duration::from_millis(manifest.watch_time_ms);
    let began = tokio::time::Instant::now();
    loop {
        let state = agent
            .get_state()
            .await
            .map_err(EnvError::agent(step("get_state")))?;
        if state["job_state"] == "running" {
            break;
        }
        if began.elapsed() >= limit {
            return Err(EnvError::Deploy(format!(
                "instance '{instance}' is not running after update: its jobs are {}",
                state["job_state"]
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    agent
        .run_script("post-start")
        .await
        .map_err(EnvError::agent(step("post-start")))?;
    Ok(())
}
