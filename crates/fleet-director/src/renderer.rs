//! The renderer port: what the director asks of an infrastructure's template rendering,
//! and where rendered files are kept. Below the deploy and the director's core, which
//! hand it instances; [`crate::templates`] drives it.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use async_trait::async_trait;

use super::model::{InstanceSpec, RenderedTemplates};

/// The blobs of rendered templates are named for their deployment, so that only its own
/// deploys and its deletion, which hold its lock, delete them (release clean-ups leave
/// them alone).
const RENDERED: &str = "rendered/";

/// The blob id of a deployment's rendered templates with the digest `sha1`.
pub fn rendered_blob_id(deployment: &str, sha1: &str) -> String {
    format!("{RENDERED}{deployment}/{sha1}")
}

/// Whether a blob holds rendered templates.
pub fn is_rendered_blob(id: &str) -> bool {
    id.starts_with(RENDERED)
}

/// What a template sees of its instance besides its properties (`spec.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateInstance {
    pub deployment: String,
    /// The instance group's name.
    pub group: String,
    pub index: u32,
    pub id: String,
    pub az: Option<String>,
    pub bootstrap: bool,
    /// Each network with the instance's address on it; `None` where the IaaS assigns.
    pub networks: Vec<(String, Option<Ipv4Addr>)>,
    /// What each job consumes through links, by the link's name in its spec.
    pub links: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// Templates that failed and properties missing: every problem of the instance.
    #[error("{0}")]
    Failed(String),
    /// What rendering needs could not be had: a release, an archive, the renderer itself.
    #[error("{0}")]
    Unavailable(String),
}

#[async_trait]
pub trait Renderer: Send + Sync {
    /// Whether this renderer renders at all: the deploy's event log shows the step only
    /// then.
    fn renders(&self) -> bool {
        true
    }

    /// Renders every job of the instance that `spec` describes and keeps the result.
    ///
    /// # Errors
    /// Every failing template and missing property of the instance, in one error.
    async fn render(
        &self,
        spec: &InstanceSpec,
        instance: &TemplateInstance,
    ) -> Result<Option<RenderedTemplates>, TemplateError>;
}

/// For infrastructures whose agents need no rendered files.
pub struct NoRendering;

#[async_trait]
impl Renderer for NoRendering {
    fn renders(&self) -> bool {
        false
    }

    async fn render(
        &self,
        _spec: &InstanceSpec,
        _instance: &TemplateInstance,
    ) -> Result<Option<RenderedTemplates>, TemplateError> {
        Ok(None)
    }
}
