//! The director's template rendering for the process-backed IaaS: every job of an
//! instance rendered through Ruby's ERB ([`fleet_render`]) from the job archives its
//! releases keep, the files kept as one archive in the store for the agent's `apply`, and
//! their digest as the instance's configuration hash.

use async_trait::async_trait;
use fleet_director::model::{InstanceSpec, RenderedTemplates};
use fleet_director::templates::{Renderer, TemplateError, TemplateInstance, rendered_blob_id};
use fleet_store::AsyncStore;

use fleet_render::{self as render, JobSource, RenderError, render_archive};

use super::stored::{self, StoredError};

pub struct TemplateRenderer {
    store: AsyncStore,
    isolation: render::Isolation,
}

impl TemplateRenderer {
    /// Rendering in `isolation`: in a sandbox of its own where the VMs are containers,
    /// since a template is code a release brings.
    pub fn new(store: AsyncStore, isolation: render::Isolation) -> Self {
        TemplateRenderer { store, isolation }
    }
}

impl TemplateRenderer {
    async fn job(
        &self,
        spec: &InstanceSpec,
        instance: &TemplateInstance,
        name: &str,
    ) -> Result<JobSource, StoredError> {
        let releases = stored::releases(&self.store, &spec.releases).await?;
        let (release, job) = releases
            .iter()
            .find_map(|r| r.jobs.iter().find(|j| j.name == name).map(|j| (r, j)))
            .ok_or_else(|| StoredError::NoJob {
                job: name.to_string(),
            })?;
        let archive = job
            .archive
            .as_ref()
            .ok_or_else(|| StoredError::NoArchives {
                name: release.name.clone(),
                version: release.version.clone(),
            })?;
        let bytes = stored::blob(&self.store, &archive.blob).await?;
        let files = fleet_release::job_files(&bytes).map_err(|source| StoredError::JobFiles {
            job: name.to_string(),
            source,
        })?;
        let properties = spec
            .properties
            .get(name)
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let links = instance.links.get(name).cloned().unwrap_or_default();
        Ok(JobSource::from_files(&files, properties)
            .of_release(&release.name, &release.version)
            .consuming(links))
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
                self.job(spec, instance, name)
                    .await
                    .map_err(|e| TemplateError::Unavailable(e.to_string()))?,
            );
        }
        let (archive, configuration_hash) =
            render_archive(&template_spec(instance), &jobs, self.isolation)
                .await
                .map_err(|e| match e {
                    RenderError::Failed(_) => TemplateError::Failed(e.to_string()),
                    _ => TemplateError::Unavailable(e.to_string()),
                })?;
        let blob = rendered_blob_id(&instance.deployment, &fleet_release::sha1_hex(&archive));
        self.store
            .put_blob(&blob, archive)
            .await
            .map_err(|e| TemplateError::Unavailable(e.to_string()))?;
        Ok(Some(RenderedTemplates {
            blob,
            configuration_hash,
        }))
    }
}
