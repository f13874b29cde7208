//! The director's config server, as BOSH's director uses one: a manifest's `variables:`
//! are generated once, when a deploy first needs them, and kept under
//! `/DIRECTOR/DEPLOYMENT/NAME` (a name starting with `/` is used as it is); `((name))` in
//! the jobs' properties is resolved when their templates are rendered, and elsewhere in
//! the manifest, runtime configs and cloud config when a deploy starts (`placeholders.rs`). The values are
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
        if let Some(mode) = entry.get("update_mode")
            && !matches!(
                mode.as_str(),
                Some("overwrite" | "no-overwrite" | "converge")
            )
        {
            problems.push(format!(
                "Update mode for variable '{name}' must be one of overwrite, no-overwrite, \
                 converge"
            ));
        }
        if let Some(update) = entry.get("update") {
            let strategy = update.get("strategy").and_then(Json::as_str);
            if !update.is_object() || !matches!(strategy, Some("on-deploy" | "on-stemcell-change"))
            {
                problems.push(format!(
                    "Update strategy for variable '{name}' must be on-deploy or \
                     on-stemcell-change"
                ));
            }
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
/// links bring), by the name it uses: see [`resolve_names`].
///
/// # Errors
/// As [`resolve_names`].
pub async fn resolve(
    records: &Records,
    deployment: &str,
    manifest: &Manifest,
    declared: &Json,
    generate: bool,
    extra: &BTreeSet<String>,
) -> Result<Values, StepError> {
    let mut names = used(manifest);
    names.extend(extra.iter().cloned());
    resolve_names(records, deployment, declared, generate, &names).await
}

/// The values of the variables `used` names, by the name it uses: what the store keeps
/// (a name starting with `/` whichever deployment made it), and what `declared` names
/// and the store lacks, generated now and kept. Without `generate` (a dry run) nothing is
/// written: the declarations are generated into a copy that is thrown away, so that one
/// that cannot be generated is found all the same.
///
/// # Errors
/// A declaration that cannot be generated; every used name that is neither kept nor
/// declared, in one message; a store failure.
pub async fn resolve_names(
    records: &Records,
    deployment: &str,
    declared: &Json,
    generate: bool,
    used: &BTreeSet<String>,
) -> Result<Values, StepError> {
    // What the declarations name, by the names they use, from the store first.
    let names = declared_names(declared);
    let mut wanted: BTreeSet<String> = names.iter().cloned().collect();
    wanted.extend(used.iter().cloned());
    let kept: Values = kept_variables(records, deployment, &wanted)
        .await?
        .into_iter()
        .map(|(name, variable)| (name, variable.value))
        .collect();
    let mut local: Values = names
        .iter()
        .filter_map(|n| kept.get(n).map(|v| (n.clone(), v.clone())))
        .collect();
    let made = fleet_variables::generate(declared, &mut local).map_err(variable_error)?;
    if generate && made {
        let new = names.iter().filter(|n| !kept.contains_key(*n));
        keep(records, deployment, declared, new, &local).await?;
    }
    let mut values = Values::new();
    let mut missing = Vec::new();
    for name in used {
        match local.get(name).or_else(|| kept.get(name)) {
            Some(value) => {
                values.insert(name.clone(), value.clone());
            }
            None => missing.push(full_name(deployment, name)),
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

/// The names `declared` gives its variables, in order.
fn declared_names(declared: &Json) -> Vec<String> {
    declared
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d.get("name").and_then(Json::as_str).map(str::to_string))
        .collect()
}

/// The variables the store keeps of `names`, by the name used.
async fn kept_variables<'a>(
    records: &Records,
    deployment: &str,
    names: impl IntoIterator<Item = &'a String>,
) -> Result<std::collections::BTreeMap<String, Variable>, StepError> {
    let mut kept = std::collections::BTreeMap::new();
    for name in names {
        if let Some(variable) = records.variable(&full_name(deployment, name)).await? {
            kept.insert(name.clone(), variable);
        }
    }
    Ok(kept)
}

/// A declaration's `update_mode`.
fn update_mode(declaration: &Json) -> Option<&str> {
    declaration.get("update_mode").and_then(Json::as_str)
}

/// A declaration's `update.strategy`.
fn update_strategy(declaration: &Json) -> Option<&str> {
    declaration
        .get("update")
        .and_then(|u| u.get("strategy"))
        .and_then(Json::as_str)
}

/// The declaration `name` of `declared` as what its value is generated from.
fn generated_from(declared: &Json, name: &str) -> Json {
    declared
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d.get("name").and_then(Json::as_str) == Some(name))
        .map(|d| {
            serde_json::json!({
                "type": d.get("type").cloned().unwrap_or(Json::Null),
                "options": d.get("options").cloned().unwrap_or(Json::Null),
            })
        })
        .unwrap_or(Json::Null)
}

/// Whether any declaration may make its variable anew, and whether that depends on the
/// deployment's stemcells: most manifests declare none that do, and their deploys read
/// nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Never,
    ByMode,
    OnStemcellChange,
}

pub fn renewal(declared: &Json) -> Renewal {
    let list = declared.as_array().map(Vec::as_slice).unwrap_or_default();
    let strategy = |d: &Json| update_strategy(d) == Some("on-stemcell-change");
    let mode = |d: &Json| matches!(update_mode(d), Some("overwrite" | "converge"));
    if list.iter().any(strategy) {
        Renewal::OnStemcellChange
    } else if list.iter().any(mode) {
        Renewal::ByMode
    } else {
        Renewal::Never
    }
}

/// The declared variables a deploy makes anew, as BOSH's director asks its config server
/// to: every deploy for `update_mode: overwrite`; when the deployment's stemcells
/// changed for `update: {strategy: on-stemcell-change}`; when the declaration is not the
/// one the kept value came from for `update_mode: converge`. Pure: `kept_from` gives what
/// a kept value was generated from (`None` for one not kept, which is generated anyway).
pub fn to_regenerate(
    declared: &Json,
    stemcells_changed: bool,
    kept_from: &dyn Fn(&str) -> Option<Json>,
) -> Vec<String> {
    declared
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| {
            let name = d.get("name").and_then(Json::as_str)?;
            let from = kept_from(name)?;
            let (mode, strategy) = (update_mode(d), update_strategy(d));
            // A value kept before its declaration was recorded is not known to differ.
            let again = mode == Some("overwrite")
                || (strategy == Some("on-stemcell-change") && stemcells_changed)
                || (mode == Some("converge")
                    && !from.is_null()
                    && from != generated_from(declared, name));
            again.then(|| name.to_string())
        })
        .collect()
}

/// Makes the variables `to_regenerate` names anew and keeps them (when `generate`; a dry
/// run generates nothing). The names made.
///
/// # Errors
/// A declaration that cannot be generated; a store failure.
pub async fn regenerate(
    records: &Records,
    deployment: &str,
    declared: &Json,
    stemcells_changed: bool,
    generate: bool,
) -> Result<Vec<String>, StepError> {
    let names = declared_names(declared);
    let kept = kept_variables(records, deployment, &names).await?;
    let again = to_regenerate(declared, stemcells_changed, &|name| {
        kept.get(name).map(|v| v.generated_from.clone())
    });
    if again.is_empty() || !generate {
        return Ok(Vec::new());
    }
    // Everything else as kept, so that a certificate made anew is signed by its kept CA.
    let mut values: Values = kept
        .iter()
        .filter(|(name, _)| !again.contains(name))
        .map(|(name, v)| (name.clone(), v.value.clone()))
        .collect();
    fleet_variables::generate(declared, &mut values).map_err(variable_error)?;
    // What was declared and never kept is kept too: a certificate made anew here may be
    // signed by a CA made with it.
    let new = names
        .iter()
        .filter(|n| again.contains(n) || !kept.contains_key(*n));
    keep(records, deployment, declared, new, &values).await?;
    Ok(again)
}

/// Keeps the values of `names` from `values`, each as a new variable of `deployment`.
async fn keep(
    records: &Records,
    deployment: &str,
    declared: &Json,
    names: impl Iterator<Item = &String>,
    values: &Values,
) -> Result<(), StepError> {
    let made: Vec<Variable> = names
        .filter_map(|n| {
            values.get(n).map(|value| Variable {
                id: new_id("variable"),
                name: full_name(deployment, n),
                deployment: deployment.to_string(),
                value: value.clone(),
                generated_from: generated_from(declared, n),
            })
        })
        .collect();
    Ok(records
        .write(made.iter().map(change::variable).collect())
        .await?)
}

fn variable_error(e: fleet_variables::VariableError) -> StepError {
    StepError::Failed(e.to_string())
}
