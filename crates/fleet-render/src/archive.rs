//! An instance's jobs rendered into the one archive an agent's `apply` receives
//! (`JOB/PATH`, the monit file at `JOB/monit`), its configuration hash, and that archive
//! read back into job files on the VM's side.

use std::collections::BTreeMap;

use crate::erb::{self as render, Declared, JobTemplates, ReleaseName, RenderError};

/// The key the monit file is rendered under, beside the templates' source names.
const MONIT: &str = "(monit)";

/// The largest rendered archive read back.
const RENDERED_LIMIT: u64 = 256 * 1024 * 1024;

/// Why a rendered archive, as an agent's `apply` gets it, is not job files.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error(transparent)]
    Archive(#[from] fleet_release::ArchiveError),
    #[error("`{path}` is outside every job")]
    OutsideJob { path: String },
}

/// One job to render: its templates' source texts (its `monit` file among them), where
/// each goes in the job's directory, the properties its spec declares with their
/// defaults, and the properties the instance gives it.
#[derive(Debug, Clone)]
pub struct JobSource {
    pub name: String,
    pub templates: BTreeMap<String, String>,
    pub monit: String,
    pub destinations: BTreeMap<String, String>,
    pub declared: BTreeMap<String, Option<serde_json::Value>>,
    pub properties: serde_json::Value,
    /// What the job consumes through links, by the link's name in its spec.
    pub links: BTreeMap<String, serde_json::Value>,
    /// The release the job comes from, for `spec.release`.
    pub release: Option<ReleaseName>,
}

impl JobSource {
    /// The job as a release archive holds it, given `properties`.
    pub fn from_files(files: &fleet_release::JobFiles, properties: serde_json::Value) -> Self {
        let text = |bytes: &Vec<u8>| String::from_utf8_lossy(bytes).into_owned();
        JobSource {
            name: files.spec.name.clone(),
            templates: files
                .templates
                .iter()
                .map(|(k, v)| (k.clone(), text(v)))
                .collect(),
            monit: files.monit.clone(),
            destinations: files.spec.templates.clone(),
            declared: files
                .spec
                .properties
                .iter()
                .map(|(k, v)| (k.clone(), v.default.clone()))
                .collect(),
            properties,
            links: BTreeMap::new(),
            release: None,
        }
    }

    /// The job as release `name`/`version` holds it.
    pub fn of_release(self, name: &str, version: &str) -> Self {
        let release = Some(ReleaseName {
            name: name.to_string(),
            version: version.to_string(),
        });
        JobSource { release, ..self }
    }

    /// The job with the links it consumes.
    pub fn consuming(self, links: BTreeMap<String, serde_json::Value>) -> Self {
        JobSource { links, ..self }
    }
}

/// Every job rendered for the instance `spec`: an archive of the rendered files, each at
/// `JOB/PATH` (the `monit` file at `JOB/monit`), and the configuration hash, a digest of
/// every file's path and contents.
///
/// # Errors
/// Every template of the instance that fails and every missing property, at once.
pub async fn render_archive(
    spec: &render::InstanceSpec,
    jobs: &[JobSource],
    isolation: crate::Isolation,
) -> Result<(Vec<u8>, String), RenderError> {
    let templates: Vec<JobTemplates> = jobs
        .iter()
        .map(|job| {
            let mut texts = job.templates.clone();
            texts.insert(MONIT.to_string(), job.monit.clone());
            JobTemplates {
                name: job.name.clone(),
                declared: job
                    .declared
                    .iter()
                    .map(|(k, v)| (k.clone(), Declared { default: v.clone() }))
                    .collect(),
                properties: job.properties.clone(),
                links: job.links.clone(),
                release: job.release.clone(),
                templates: texts,
            }
        })
        .collect();
    let rendered = render::render(spec, &templates, isolation).await?;
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for job in jobs {
        let name = &job.name;
        let texts = rendered.get(name).cloned().unwrap_or_default();
        let monit = texts.get(MONIT).cloned().unwrap_or_default();
        files.insert(format!("{name}/monit"), monit.into_bytes());
        for (source, destination) in &job.destinations {
            let text = texts.get(source).ok_or_else(|| {
                RenderError::Renderer(format!("it gave nothing for {name}/{source}"))
            })?;
            files.insert(format!("{name}/{destination}"), text.clone().into_bytes());
        }
    }
    let listing: String = files
        .iter()
        .map(|(path, bytes)| format!("{path}\0{}\n", fleet_release::sha1_hex(bytes)))
        .collect();
    let entries: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    Ok((
        fleet_release::build_tgz(&entries),
        fleet_release::sha1_hex(listing.as_bytes()),
    ))
}

/// The rendered files of an instance, job by job: each file's path in the job's directory
/// and its contents.
///
/// # Errors
/// An archive that cannot be read.
pub fn unpack(archive: &[u8]) -> Result<BTreeMap<String, BTreeMap<String, Vec<u8>>>, UnpackError> {
    let mut jobs: BTreeMap<String, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
    for entry in fleet_release::tgz_files(archive, RENDERED_LIMIT)? {
        let Some((job, path)) = entry.path.split_once('/') else {
            return Err(UnpackError::OutsideJob { path: entry.path });
        };
        jobs.entry(job.to_string())
            .or_default()
            .insert(path.to_string(), entry.bytes);
    }
    Ok(jobs)
}
