//! The documents a deploy reads, loaded once: the manifest, the runtime configs in force
//! (the newest of each name) and the cloud config; their placeholders outside job
//! properties listed, and the documents with those placeholders resolved. Pure.

use fleet_variables::Values;
use fleet_yaml::{Limits, Node, load};

use super::cloud::CloudConfigError;
use super::error::StepError;
use super::manifest::ManifestError;
use super::placeholders::{
    interpolate_outside_properties, outside_properties, relative, relative_problem,
};
use super::records::Uploads;
use super::runtime::{self, RuntimeConfig, RuntimeConfigError};

pub struct Documents {
    pub manifest: Node,
    runtime: Vec<(RuntimeConfig, Node)>,
    cloud: Option<(u64, Node)>,
    /// Every name a placeholder outside properties uses, in any of them, found once.
    pub placeholders: Vec<String>,
}

/// The documents with their placeholders resolved.
pub struct Resolved {
    pub manifest: Node,
    pub runtime: Vec<(RuntimeConfig, Node)>,
    /// The cloud config's version and document.
    pub cloud: Option<(u64, Node)>,
}

fn runtime_error(config: &RuntimeConfig, problem: String) -> StepError {
    StepError::RuntimeConfig {
        name: config.name.clone(),
        version: config.version,
        source: Box::new(RuntimeConfigError {
            problems: vec![problem],
        }),
    }
}

fn cloud_error(problem: String) -> StepError {
    StepError::CloudConfig(CloudConfigError {
        problems: vec![problem],
    })
}

impl Documents {
    /// Loads the manifest `text` and what `uploads` holds, and lists their placeholders
    /// outside properties.
    ///
    /// # Errors
    /// A document that is not YAML, named; a relative name in a runtime or cloud config,
    /// which belongs to no deployment.
    pub fn read(text: &str, uploads: &Uploads) -> Result<Documents, StepError> {
        let manifest = load(text, Limits::default())
            .map_err(|e| StepError::Manifest(ManifestError::Syntax(e)))?;
        let runtime = runtime::latest(&uploads.runtime_configs)
            .into_iter()
            .map(|c| {
                load(&c.text, Limits::default())
                    .map(|root| (c.clone(), root))
                    .map_err(|e| runtime_error(c, e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cloud = uploads
            .cloud_config
            .as_ref()
            .map(|c| {
                load(&c.text, Limits::default())
                    .map(|root| (c.version, root))
                    .map_err(|e| cloud_error(e.to_string()))
            })
            .transpose()?;
        let placeholders = placeholders(&manifest, &runtime, cloud.as_ref())?;
        Ok(Documents {
            manifest,
            runtime,
            cloud,
            placeholders,
        })
    }

    /// The documents with `values` in place of their placeholders outside properties;
    /// without values (none was needed, or none is known) the documents as read, a
    /// placeholder among them named as missing.
    ///
    /// # Errors
    /// A placeholder without a value, named with its document.
    pub fn resolve(self, values: &Values) -> Result<Resolved, StepError> {
        if values.is_empty() && self.placeholders.is_empty() {
            // Most deploys use none: nothing to copy.
            return Ok(Resolved {
                manifest: self.manifest,
                runtime: self.runtime,
                cloud: self.cloud,
            });
        }
        let missing = |e: fleet_variables::VariableError| e.to_string();
        let manifest = interpolate_outside_properties(&self.manifest, values)
            .map_err(|e| StepError::Failed(missing(e)))?;
        let runtime = self
            .runtime
            .into_iter()
            .map(
                |(config, root)| match interpolate_outside_properties(&root, values) {
                    Ok(root) => Ok((config, root)),
                    Err(e) => Err(runtime_error(&config, missing(e))),
                },
            )
            .collect::<Result<Vec<_>, _>>()?;
        let cloud = self
            .cloud
            .map(|(version, root)| {
                interpolate_outside_properties(&root, values)
                    .map(|root| (version, root))
                    .map_err(|e| cloud_error(missing(e)))
            })
            .transpose()?;
        Ok(Resolved {
            manifest,
            runtime,
            cloud,
        })
    }
}

/// Every name a placeholder outside properties uses, in any of the documents.
///
/// # Errors
/// A relative name in a runtime or cloud config, which belongs to no deployment.
fn placeholders(
    manifest: &Node,
    runtime: &[(RuntimeConfig, Node)],
    cloud: Option<&(u64, Node)>,
) -> Result<Vec<String>, StepError> {
    let mut names = outside_properties(manifest);
    for (config, root) in runtime {
        let used = outside_properties(root);
        let relative = relative(&used);
        if !relative.is_empty() {
            return Err(runtime_error(config, relative_problem(&relative)));
        }
        names.extend(used);
    }
    if let Some((_, root)) = cloud {
        let used = outside_properties(root);
        let relative = relative(&used);
        if !relative.is_empty() {
            return Err(cloud_error(relative_problem(&relative)));
        }
        names.extend(used);
    }
    names.sort();
    names.dedup();
    Ok(names)
}
