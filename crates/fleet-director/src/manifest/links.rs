//! A manifest job's `provides` and `consumes`, as BOSH's director reads them: each link
//! by its spec name, either the string `nil` or a mapping; `name` and `type` belong to the
//! release and are refused here. Whether the names exist in the job's spec is the links'
//! resolution's to say.

use std::collections::BTreeMap;

use super::model::{ConsumeRef, CustomProvider, ProvideRef};
use fleet_yaml::{Checker, Node, Value, join};

fn entries<'n>(
    checker: &mut Checker,
    node: &'n Node,
    path: &str,
) -> Vec<&'n (fleet_yaml::Key, Node)> {
    match &node.value {
        Value::Map(entries) => entries.iter().collect(),
        Value::Null => Vec::new(),
        other => {
            checker.report(
                path,
                node.at,
                format!("must be a mapping of link names, found {}", other.kind()),
            );
            Vec::new()
        }
    }
}

fn is_nil(node: &Node) -> bool {
    matches!(&node.value, Value::Str(s) if s == "nil")
}

/// Refuses `name` and `type`, which only a release may give.
fn release_only(checker: &mut Checker, node: &Node, path: &str, link: &str) {
    if node.get("name").is_some() || node.get("type").is_some() {
        checker.report(
            path,
            node.at,
            format!(
                "Cannot specify 'name' or 'type' properties in the manifest for link '{link}'. \
                 Please provide these keys in the release only."
            ),
        );
    }
}

fn optional_text(checker: &mut Checker, node: &Node, key: &str, path: &str) -> Option<String> {
    let value = node.get(key)?;
    match &value.value {
        Value::Str(s) => Some(s.clone()),
        other => {
            checker.report(
                &join(path, key),
                value.at,
                format!("must be a string, found {}", other.kind()),
            );
            None
        }
    }
}

pub(super) fn provides(
    checker: &mut Checker,
    node: &Node,
    path: &str,
) -> BTreeMap<String, ProvideRef> {
    let mut found = BTreeMap::new();
    for (key, value) in entries(checker, node, path) {
        let here = join(path, &key.name);
        if is_nil(value) {
            found.insert(key.name.clone(), ProvideRef::Blocked);
            continue;
        }
        if value.as_map().is_none() {
            checker.report(
                &here,
                value.at,
                format!(
                    "Provider '{}' specified in the manifest should only be a hash or string 'nil'",
                    key.name
                ),
            );
            continue;
        }
        release_only(checker, value, &here, &key.name);
        found.insert(
            key.name.clone(),
            ProvideRef::Provide {
                alias: optional_text(checker, value, "as", &here),
                shared: value
                    .get("shared")
                    .is_some_and(|s| s.value == Value::Bool(true)),
            },
        );
    }
    found
}

pub(super) fn consumes(
    checker: &mut Checker,
    node: &Node,
    path: &str,
) -> BTreeMap<String, ConsumeRef> {
    let mut found = BTreeMap::new();
    for (key, value) in entries(checker, node, path) {
        let link = &key.name;
        let here = join(path, link);
        if is_nil(value) {
            found.insert(link.clone(), ConsumeRef::Blocked);
            continue;
        }
        if value.as_map().is_none() {
            checker.report(
                &here,
                value.at,
                format!("Consumer '{link}' specified in the manifest should only be a hash or string 'nil'"),
            );
            continue;
        }
        release_only(checker, value, &here, link);
        let manual = ["instances", "properties", "address"]
            .iter()
            .any(|k| value.get(k).is_some());
        if manual {
            if value.get("properties").is_some() && value.get("instances").is_none() {
                checker.report(
                    &here,
                    value.at,
                    format!("Cannot specify 'properties' without 'instances' for link '{link}'."),
                );
            }
            for with_from in ["instances", "properties"] {
                if value.get(with_from).is_some() && value.get("from").is_some() {
                    checker.report(
                        &here,
                        value.at,
                        format!(
                            "Cannot specify both '{with_from}' and 'from' keys for link '{link}'."
                        ),
                    );
                }
            }
            found.insert(link.clone(), ConsumeRef::Manual(value.to_json()));
            continue;
        }
        let ip_addresses = match value.get("ip_addresses") {
            None => None,
            Some(v) => match v.value {
                Value::Bool(b) => Some(b),
                _ => {
                    checker.report(
                        &join(&here, "ip_addresses"),
                        v.at,
                        format!(
                            "Cannot specify non boolean values for 'ip_addresses' field for link '{link}'."
                        ),
                    );
                    None
                }
            },
        };
        found.insert(
            link.clone(),
            ConsumeRef::From {
                // `deployment.link`, the old way of naming another deployment's link, names
                // the link by its last part.
                from: optional_text(checker, value, "from", &here)
                    .map(|f| f.rsplit('.').next().unwrap_or_default().to_string()),
                deployment: optional_text(checker, value, "deployment", &here),
                network: optional_text(checker, value, "network", &here),
                ip_addresses,
            },
        );
    }
    found
}

/// A job's `custom_provider_definitions`: each a non-empty `name` and `type`, and the
/// properties it exports; a name given twice is refused. Whether the job's spec already
/// provides one of the names is the links' resolution's to say.
pub(super) fn custom_providers(
    checker: &mut Checker,
    node: &Node,
    path: &str,
) -> Vec<CustomProvider> {
    let mut found: Vec<CustomProvider> = Vec::new();
    for (i, entry) in checker.list(node, path).iter().enumerate() {
        let here = format!("{path}[{i}]");
        checker.map(entry, &here, &["name", "type", "properties"]);
        let text = |key: &str| match entry.get(key).map(|n| &n.value) {
            Some(Value::Str(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        };
        let (name, link_type) = (text("name"), text("type"));
        for (key, value, label) in [("name", &name, "Name"), ("type", &link_type, "Type")] {
            if value.is_none() {
                checker.report(
                    &join(&here, key),
                    entry.at,
                    format!(
                        "{label} for custom link provider definition in manifest must be a \
                         valid non-empty string."
                    ),
                );
            }
        }
        let properties = entry
            .get("properties")
            .map(|n| {
                checker
                    .list(n, &join(&here, "properties"))
                    .iter()
                    .filter_map(|p| checker.string(p, &join(&here, "properties")))
                    .collect()
            })
            .unwrap_or_default();
        let (Some(name), Some(link_type)) = (name, link_type) else {
            continue;
        };
        if found.iter().any(|c| c.name == name) {
            checker.report(
                &here,
                entry.at,
                format!("Custom provider '{name}' is defined multiple times in manifest."),
            );
            continue;
        }
        found.push(CustomProvider {
            name,
            link_type,
            properties,
        });
    }
    found
}
