//! The cloud config as a typed model: parsed and validated when it is uploaded, every
//! problem at once and each naming its key, so that a bad network is refused by
//! `update-cloud-config` and not by the next deploy. Pure: text in, model or problems out.

use super::cloud_properties::CloudProperties;
use super::network::{Network, networks};
use super::validate::CloudFacts;
use fleet_yaml::{self as yaml, Checker, Node};

/// The `compilation` section of the cloud config (or of the manifest without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompilationConfig {
    pub workers: usize,
    pub network: Option<String>,
    pub vm_type: Option<String>,
    pub az: Option<String>,
    pub reuse_compilation_vms: bool,
}

impl Default for CompilationConfig {
    fn default() -> Self {
        CompilationConfig {
            workers: 1,
            network: None,
            vm_type: None,
            az: None,
            reuse_compilation_vms: false,
        }
    }
}

/// A `compilation` block that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompilationConfigError {
    #[error("compilation.workers must be an integer from 1 to 256, found {0}")]
    Workers(String),
    /// The manifest holding the block is not YAML.
    #[error("{0}")]
    Yaml(String),
}

pub(crate) fn read_config(node: &Node) -> Result<CompilationConfig, CompilationConfigError> {
    let json = node.to_json();
    let text = |key: &str| json.get(key).and_then(|v| v.as_str()).map(str::to_string);
    let workers = match json.get("workers") {
        None => 1,
        Some(w) => {
            w.as_u64()
                .filter(|w| (1..=256).contains(w))
                .ok_or_else(|| CompilationConfigError::Workers(w.to_string()))? as usize
        }
    };
    Ok(CompilationConfig {
        workers,
        network: text("network"),
        vm_type: text("vm_type"),
        az: text("az"),
        reuse_compilation_vms: json
            .get("reuse_compilation_vms")
            .and_then(|v| v.as_bool())
            .unwrap_or(false),
    })
}

/// What deploys read of a cloud config.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudModel {
    pub version: u64,
    pub networks: Vec<Network>,
    /// The names it defines, for validating manifests.
    pub facts: CloudFacts,
    pub compilation: CompilationConfig,
    /// What the CPI gets for each AZ, VM type, VM extension and disk type.
    pub properties: CloudProperties,
}

/// Every problem of a cloud config, each as `key: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the cloud config is invalid:\n  {}", problems.join("\n  "))]
pub struct CloudConfigError {
    pub problems: Vec<String>,
}

/// Parses and validates `text` as cloud config `version`.
///
/// # Errors
/// Its YAML syntax, or every invalid network, subnet and `compilation` key.
pub fn parse(text: &str, version: u64) -> Result<CloudModel, CloudConfigError> {
    let root = yaml::load(text, yaml::Limits::default()).map_err(|e| CloudConfigError {
        problems: vec![e.to_string()],
    })?;
    parse_root(&root, version)
}

/// As [`parse`], from the document read (its placeholders resolved).
///
/// # Errors
/// As [`parse`].
pub fn parse_root(root: &yaml::Node, version: u64) -> Result<CloudModel, CloudConfigError> {
    let azs = names(root, "azs");
    let mut checker = Checker::new();
    let nets = match root.get("networks") {
        Some(node) => networks(
            &mut checker,
            node,
            "networks",
            (!azs.is_empty()).then_some(azs.as_slice()),
        ),
        None => Vec::new(),
    };
    let properties = CloudProperties::read(&mut checker, root);
    let mut problems: Vec<String> = checker
        .into_problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    let compilation = match root.get("compilation") {
        Some(node) => read_config(node).unwrap_or_else(|e| {
            problems.push(e.to_string());
            CompilationConfig::default()
        }),
        None => CompilationConfig::default(),
    };
    if !problems.is_empty() {
        return Err(CloudConfigError { problems });
    }
    let facts = CloudFacts::from_cloud_config(root, nets.iter().map(|n| n.name.clone()).collect());
    Ok(CloudModel {
        version,
        networks: nets,
        facts,
        compilation,
        properties,
    })
}

/// The `name` of every entry of the list under `key`.
fn names(root: &Node, key: &str) -> Vec<String> {
    root.get(key)
        .map(Node::to_json)
        .and_then(|a| a.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e.get("name").and_then(|n| n.as_str()).map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_named_at_once() {
        let text = "networks:\n- name: default\n  subnets:\n  - {range: 10.0.0.0/24, gateway: 10.1.0.1}\n- name: other\n  subnets:\n  - {range: not-a-range, gateway: 10.2.0.1}\ncompilation: {workers: 0}\n";
        let e = parse(text, 1).unwrap_err();
        assert_eq!(e.problems.len(), 3, "{e}");
        assert!(
            e.problems
                .iter()
                .any(|p| p.contains("networks.default.subnets[0].gateway")),
            "{e}"
        );
        assert!(
            e.problems
                .iter()
                .any(|p| p.contains("networks.other.subnets[0].range")),
            "{e}"
        );
        assert!(
            e.problems.iter().any(|p| p.contains("compilation.workers")),
            "{e}"
        );
    }

    #[test]
    fn a_valid_cloud_config_becomes_its_model() {
        let text = "azs: [{name: z1}]\nvm_types: [{name: small}]\nnetworks:\n- name: default\n  subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1, azs: [z1]}]\ncompilation: {workers: 3, network: default}\n";
        let model = parse(text, 7).unwrap();
        assert_eq!(model.version, 7);
        assert_eq!(model.networks.len(), 1);
        assert_eq!(model.compilation.workers, 3);
        assert!(model.facts.networks.contains("default"));
        assert_eq!(model.facts.azs.as_ref().map(|a| a.len()), Some(1));
    }
}
