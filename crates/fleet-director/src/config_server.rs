//! The director's config server, as BOSH's director uses one: a manifest's `variables:`
//! are generated once, when a deploy first needs them, and kept under
//! `/DIRECTOR/DEPLOYMENT/NAME` (a name starting with `/` is used as it is); `((name))` in
//! the jobs' properties is resolved when their templates are rendered. The values are
//! secrets: they are kept in the store and in rendered templates, and never reach a
//! manifest, a task's output, an event or a log.

use std::collections::BTreeSet;

use serde_json::Value as Json;

use super::error::StepError;
use super::ids::new_id;
use super::manifest::Manifest;
use super::model::Variable;
use super::records::{Records, change};
pub use super::variable_names::{full_name, qualify};
use fleet_variables::Values;

/// Why a name is not one the config server takes, as BOSH words it.
fn name_problem(name: &str) -> Option<String> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/'))
        && !name.ends_with('/')
        && !name.contains("//");
    (!valid).then(|| {
        format!(
            "Variable name '{name}' must only contain alphanumeric, underscores, dashes, or \
             forward slash characters, and must not end with a slash or contain double slashes"
        )
    })
}

/// The manifest's `variables:`, checked as BOSH's director checks them.
///
/// # Errors
/// Every declaration without a name or type, with a bad name, or named twice.
pub fn declared(manifest: &Manifest) -> Result<Json, StepError> {
    let declared = match &manifest.variables {
        Json::Null => return Ok(Json::Array(Vec::new())),
        given => given.clone(),
    };
    let Some(list) = declared.as_array() else {
        return Err(StepError::Failed(
            "`variables` must be a list of {name, type, options}".into(),
        ));
    };
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for entry in list {
        let name = entry.get("name").and_then(Json::as_str).unwrap_or_default();
        if name.is_empty() {
            problems.push("Name for a variable is missing; 'name' must be specified".into());
            continue;
        }
        if let Some(problem) = name_problem(name) {
            problems.push(problem);
        }
        if entry
            .get("type")
            .and_then(Json::as_str)
            .is_none_or(str::is_empty)
        {
            problems.push(format!(
                "Type for variable '{name}' is missing; 'type' must be specified"
            ));
        }
        if entry.get("options").is_some_and(|o| !o.is_object()) {
            problems.push(format!("Options for variable '{name}' must be a hash"));
        }
        if !seen.insert(name.to_string()) {
            problems.push(format!(
                "Some of the variables have duplicate names, eg: '{name}'"
            ));
        }
    }
    if problems.is_empty() {
        Ok(declared)
    } else {
        Err(StepError::Failed(problems.join("\n")))
    }
}

/// Every `((name))` the manifest's jobs' properties use.
pub fn used(manifest: &Manifest) -> BTreeSet<String> {
    manifest
        .instance_groups
        .iter()
        .flat_map(|g| &g.jobs)
        .flat_map(|j| fleet_variables::used_json(&j.properties))
        .collect()
}

/// The values of every variable `manifest` uses (and `extra`, names other deployments'
/// links bring), by the name it uses: what the store keeps (a name starting with `/`
/// whichever deployment made it), and what `declared` names and the store lacks,
/// generated now and kept. Without `generate` (a dry run) nothing is written: the
/// declarations are generated into a copy that is thrown away, so that one that cannot
/// be generated is found all the same.
///
/// # Errors
/// A declaration that cannot be generated; every used name that is neither kept nor
/// declared, in one message; a store failure.
pub async fn resolve(
    records: &Records,
    deployment: &str,
    manifest: &Manifest,
    declared: &Json,
    generate: bool,
    extra: &BTreeSet<String>,
) -> Result<Values, StepError> {
    // What the declarations name, by the names they use, from the store first.
    let names: Vec<String> = declared
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d.get("name").and_then(Json::as_str).map(str::to_string))
        .collect();
    let mut wanted: BTreeSet<String> = names.iter().cloned().collect();
    wanted.extend(used(manifest));
    wanted.extend(extra.iter().cloned());
    let mut kept = Values::new();
    for name in &wanted {
        if let Some(variable) = records.variable(&full_name(deployment, name)).await? {
            kept.insert(name.clone(), variable.value);
        }
    }
    let mut local: Values = names
        .iter()
        .filter_map(|n| kept.get(n).map(|v| (n.clone(), v.clone())))
        .collect();
    let made = fleet_variables::generate(declared, &mut local).map_err(variable_error)?;
    if generate && made {
        let made: Vec<_> = names
            .iter()
            .filter(|n| !kept.contains_key(*n))
            .filter_map(|n| {
                local.get(n).map(|value| Variable {
                    id: new_id("variable"),
                    name: full_name(deployment, n),
                    deployment: deployment.to_string(),
                    value: value.clone(),
                })
            })
            .collect();
        records
            .write(made.iter().map(change::variable).collect())
            .await?;
    }
    let mut values = Values::new();
    let mut missing = Vec::new();
    for name in used(manifest).into_iter().chain(extra.iter().cloned()) {
        match local.get(&name).or_else(|| kept.get(&name)) {
            Some(value) => {
                values.insert(name, value.clone());
            }
            None => missing.push(full_name(deployment, &name)),
        }
    }
    if missing.is_empty() {
        Ok(values)
    } else {
        Err(StepError::Failed(format!(
            "Failed to find variables from config server: {}",
            missing
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

fn variable_error(e: fleet_variables::VariableError) -> StepError {
    StepError::Failed(e.to_string())
}
