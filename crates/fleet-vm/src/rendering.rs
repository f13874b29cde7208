//! The director's template rendering for the process-backed IaaS: every job of an
//! instance rendered through Ruby's ERB ([`crate::render`]) from the job archives its
//! releases keep, the files kept as one archive in the store for the agent's `apply`, and
//! their digest as the instance's configuration hash.

use std::collections::BTreeMap;

use async_trait::async_trait;
use fleet_director::model::{InstanceSpec, RenderedTemplates};
use fleet_director::templates::{Renderer, TemplateError, TemplateInstance, rendered_blob_id};
use fleet_store::AsyncStore;

use super::render::{self, Declared, JobTemplates};
use super::stored;

/// The key the monit file is rendered under, beside the templates' source names.
const MONIT: &str = "(monit)";

/// The largest job archive read.
const JOB_LIMIT: u64 = 64 * 1024 * 1024;

/// The largest rendered archive read back.
const RENDERED_LIMIT: u64 = 256 * 1024 * 1024;

pub struct TemplateRenderer {
    store: AsyncStore,
}

impl TemplateRenderer {
    pub fn new(store: AsyncStore) -> Self {
        TemplateRenderer { store }
    }
}

/// One job to render: its templates and where each goes in the job's directory.
struct Job {
    templates: JobTemplates,
    destinations: BTreeMap<String, String>,
}

impl TemplateRenderer {
    async fn job(&self, spec: &InstanceSpec, name: &str) -> Result<Job, String> {
        let releases = stored::releases(&self.store, &spec.releases).await?;
        let (release, job) = releases
            .iter()
            .find_map(|r| r.jobs.iter().find(|j| j.name == name).map(|j| (r, j)))
            .ok_or_else(|| format!("job {name} is in none of the instance's releases"))?;
        let archive = job.archive.as_ref().ok_or_else(|| {
            format!(
                "release {}/{} has no archives: upload it in BOSH's format to run it on \
                 processes",
                release.name, release.version
            )
        })?;
        let bytes = stored::blob(&self.store, &archive.blob).await?;
        let entries =
            fleet_release::tgz_files(&bytes, JOB_LIMIT).map_err(|e| format!("job {name}: {e}"))?;
        let text = |path: &str| {
            entries
                .iter()
                .find(|e| e.path == path)
                .map(|e| String::from_utf8_lossy(&e.bytes).into_owned())
        };
        let mut templates = BTreeMap::new();
        for source in job.templates.keys() {
            let body = text(&format!("templates/{source}"))
                .ok_or_else(|| format!("job {name}: its archive has no templates/{source}"))?;
            templates.insert(source.clone(), body);
        }
        templates.insert(MONIT.to_string(), text("monit").unwrap_or_default());
        Ok(Job {
            templates: JobTemplates {
                name: name.to_string(),
                declared: job
                    .properties
                    .iter()
                    .map(|(k, v)| {
                        let default = v.default.clone();
                        (k.clone(), Declared { default })
                    })
                    .collect(),
                properties: spec
                    .properties
                    .get(name)
                    .cloned()
                    .unwrap_or(serde_json::Value::Null),
                templates,
            },
            destinations: job.templates.clone(),
        })
    }
}

/// What `spec` is in a template, from what the director knows of the instance. An
/// address the IaaS assigns (a dynamic network) is this machine's loopback, where the
/// VM's processes listen.
fn template_spec(instance: &TemplateInstance) -> render::InstanceSpec {
    let ip =
        |ip: &Option<std::net::Ipv4Addr>| ip.unwrap_or(std::net::Ipv4Addr::LOCALHOST).to_string();
    let address = instance
        .networks
        .first()
        .map(|(_, a)| ip(a))
        .unwrap_or_else(|| ip(&None));
    render::InstanceSpec {
        address: address.clone(),
        ip: address,
        id: instance.id.clone(),
        index: instance.index,
        name: instance.group.clone(),
        az: instance.az.clone(),
        deployment: instance.deployment.clone(),
        networks: instance
            .networks
            .iter()
            .map(|(n, a)| (n.clone(), serde_json::json!({ "ip": ip(a) })))
            .collect(),
        bootstrap: instance.bootstrap,
    }
}

#[async_trait]
impl Renderer for TemplateRenderer {
    async fn render(
        &self,
        spec: &InstanceSpec,
        instance: &TemplateInstance,
    ) -> Result<Option<RenderedTemplates>, TemplateError> {
        let mut jobs = Vec::new();
        for name in &spec.jobs {
            jobs.push(
                self.job(spec, name)
                    .await
                    .map_err(TemplateError::Unavailable)?,
            );
        }
        let templates: Vec<JobTemplates> = jobs.iter().map(|j| j.templates.clone()).collect();
        let rendered = render::render(&template_spec(instance), &templates)
            .await
            .map_err(|e| match e {
                render::RenderError::Failed(_) => TemplateError::Failed(e.to_string()),
                _ => TemplateError::Unavailable(e.to_string()),
            })?;
        let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for job in &jobs {
            let name = &job.templates.name;
            let texts = rendered.get(name).cloned().unwrap_or_default();
            let monit = texts.get(MONIT).cloned().unwrap_or_default();
            files.insert(format!("{name}/monit"), monit.into_bytes());
            for (source, destination) in &job.destinations {
                let text = texts.get(source).ok_or_else(|| {
                    TemplateError::Unavailable(format!(
                        "the renderer gave nothing for {name}/{source}"
                    ))
                })?;
                files.insert(format!("{name}/{destination}"), text.clone().into_bytes());
            }
        }
        let listing: String = files
            .iter()
            .map(|(path, bytes)| format!("{path}\0{}\n", fleet_release::sha1_hex(bytes)))
            .collect();
        let configuration_hash = fleet_release::sha1_hex(listing.as_bytes());
        let entries: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        let archive = fleet_release::build_tgz(&entries);
        let blob = rendered_blob_id(&instance.deployment, &fleet_release::sha1_hex(&archive));
        self.store
            .run(|s| s.put_blob(&blob, &archive))
            .await
            .map_err(|e| TemplateError::Unavailable(e.to_string()))?;
        Ok(Some(RenderedTemplates {
            blob,
            configuration_hash,
        }))
    }
}

/// The rendered files of an instance, job by job: each file's path in the job's directory
/// and its contents.
///
/// # Errors
/// An archive that cannot be read.
pub fn unpack(archive: &[u8]) -> Result<BTreeMap<String, BTreeMap<String, Vec<u8>>>, String> {
    let mut jobs: BTreeMap<String, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
    for entry in fleet_release::tgz_files(archive, RENDERED_LIMIT)? {
        let Some((job, path)) = entry.path.split_once('/') else {
            return Err(format!("`{}` is outside every job", entry.path));
        };
        jobs.entry(job.to_string())
            .or_default()
            .insert(path.to_string(), entry.bytes);
    }
    Ok(jobs)
}
