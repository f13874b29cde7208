//! Scenario files: a fleet and its scripted answers, written in YAML.
//!
//! ```yaml
//! list: [unavailable]            # answers of the first list calls (optional)
//! instances:
//!   - id: si-001
//!     plan_id: small             # default: default
//!     state: provisioned         # provisioned | deploying | failed | stopped | deleted
//!     update_available: true     # default: true
//!     maintenance_updates_blocked: false
//!     script: [busy, accepted, in_progress x3, succeeded]
//! ```

use std::path::Path;

use super::step::parse_steps;
use super::{ListStep, ScriptedInventory};
use fleet_rollout::inventory::{Instance, InstanceId, InstanceState};
use fleet_yaml::{self as yaml, Checker, Problem};

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("scenario {path}: {source}")]
    Syntax {
        path: String,
        source: yaml::LoadError,
    },
    #[error("scenario {path} is invalid:\n{}", problems.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        path: String,
        problems: Vec<Problem>,
    },
}

/// Reads a scenario file into a scripted inventory.
///
/// # Errors
/// When the file cannot be read or parsed, or names unknown keys, states or steps.
pub fn load_scenario(path: &Path) -> Result<ScriptedInventory, ScenarioError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: shown.clone(),
        source,
    })?;
    let root =
        yaml::load(&text, yaml::Limits::default()).map_err(|source| ScenarioError::Syntax {
            path: shown.clone(),
            source,
        })?;
    let mut checker = Checker::new();
    let inventory = read(&root, &mut checker);
    if checker.is_clean() {
        Ok(inventory)
    } else {
        Err(ScenarioError::Invalid {
            path: shown,
            problems: checker.into_problems(),
        })
    }
}

const INSTANCE_KEYS: &[&str] = &[
    "id",
    "plan_id",
    "state",
    "update_available",
    "maintenance_updates_blocked",
    "script",
];
const STATES: &[&str] = &["provisioned", "deploying", "failed", "stopped", "deleted"];

fn read(root: &yaml::Node, checker: &mut Checker) -> ScriptedInventory {
    let mut inventory = ScriptedInventory::new();
    let mut list_steps = Vec::new();
    for (key, node) in checker.map(root, "", &["list", "instances"]) {
        match key.name.as_str() {
            "list" => {
                for (i, step) in checker.list(node, "list").iter().enumerate() {
                    let path = format!("list[{i}]");
                    match checker.choice(step, &path, &["unavailable", "error"]) {
                        Some("unavailable") => list_steps.push(ListStep::Unavailable),
                        Some(_) => list_steps.push(ListStep::Error),
                        None => {}
                    }
                }
            }
            "instances" => {
                for (i, entry) in checker.list(node, "instances").iter().enumerate() {
                    let path = format!("instances[{i}]");
                    if let Some((instance, script)) = read_instance(entry, &path, checker) {
                        inventory = inventory.with(instance, script);
                    }
                }
            }
            _ => {}
        }
    }
    inventory.with_list_script(list_steps)
}

fn read_instance(
    node: &yaml::Node,
    path: &str,
    checker: &mut Checker,
) -> Option<(Instance, Vec<super::Step>)> {
    let mut instance = Instance::new("", "default");
    let mut script = Vec::new();
    let mut has_id = false;
    for (key, value) in checker.map(node, path, INSTANCE_KEYS) {
        let key_path = yaml::join(path, &key.name);
        match key.name.as_str() {
            "id" => {
                if let Some(id) = checker.string(value, &key_path) {
                    instance.id = InstanceId(id);
                    has_id = true;
                }
            }
            "plan_id" => {
                if let Some(plan) = checker.string(value, &key_path) {
                    instance.plan_id = plan;
                }
            }
            "state" => {
                instance.state = match checker.choice(value, &key_path, STATES) {
                    Some("deploying") => InstanceState::Deploying,
                    Some("failed") => InstanceState::Failed,
                    Some("stopped") => InstanceState::Stopped,
                    Some("deleted") => InstanceState::Deleted,
                    _ => InstanceState::Provisioned,
                }
            }
            "update_available" => {
                instance.update_available = checker.boolean(value, &key_path).unwrap_or(true);
            }
            "maintenance_updates_blocked" => {
                instance.maintenance_updates_blocked =
                    checker.boolean(value, &key_path).unwrap_or(false);
            }
            "script" => {
                for (i, step) in checker.list(value, &key_path).iter().enumerate() {
                    let step_path = format!("{key_path}[{i}]");
                    if let Some(text) = checker.string(step, &step_path) {
                        match parse_steps(&text) {
                            Ok(steps) => script.extend(steps),
                            Err(e) => checker.report(&step_path, step.at, e.to_string()),
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if !has_id {
        checker.report(path, node.at, "an instance needs an `id`");
        return None;
    }
    Some((instance, script))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_rollout::inventory::{Inventory, Selection};

    fn write(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[tokio::test]
    async fn a_scenario_file_becomes_a_scripted_inventory() {
        let file = write(
            "instances:\n  - id: a\n    script: [busy, runs 5m]\n  - id: b\n    plan_id: big\n    maintenance_updates_blocked: true\n",
        );
        let inventory = load_scenario(file.path()).unwrap();
        let listed = inventory.list(Selection::All).await.unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1].plan_id, "big");
        assert!(listed[1].maintenance_updates_blocked);
    }

    #[test]
    fn every_problem_of_a_scenario_is_reported() {
        let file = write(
            "instances:\n  - plan_id: x\n  - id: b\n    state: melting\n    script: [teleported]\n    colour: red\n",
        );
        let err = load_scenario(file.path()).unwrap_err().to_string();
        assert!(
            err.contains("line 2, column 5: instances[0]: an instance needs an `id`"),
            "{err}"
        );
        assert!(
            err.contains("instances[1].state: `melting` is not allowed"),
            "{err}"
        );
        assert!(
            err.contains("instances[1].script[0]: unknown step `teleported`"),
            "{err}"
        );
        assert!(err.contains("instances[1].colour: unknown key"), "{err}");
    }
}
