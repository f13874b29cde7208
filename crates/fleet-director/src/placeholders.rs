//! `((name))` placeholders outside job properties: in a manifest's structure (`instances:
//! ((count))`, a network, a VM type), in runtime configs and in cloud configs. BOSH's
//! director resolves these when a deploy starts, before it reads the documents, while
//! properties keep their placeholders until templates are rendered; a runtime or cloud
//! config belongs to no deployment, so only absolute names (`/...`) may be used there.
//! Pure: documents and values in, documents out, positions kept so that errors still
//! name the line written.

use fleet_variables::{Values, VariableError};
use fleet_yaml::{Node, Value};

/// The keys whose values stay as written: properties (rendered later, with the
/// deployment's variables) and the declarations themselves.
fn kept(key: &str, top: bool) -> bool {
    key == "properties" || (top && key == "variables")
}

/// Every name a placeholder outside properties uses, by its name before any `.key`.
pub fn outside_properties(root: &Node) -> Vec<String> {
    let mut names = Vec::new();
    visit(root, true, &mut |leaf| {
        for name in fleet_variables::used(leaf) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    });
    names
}

fn visit(node: &Node, top: bool, leaf: &mut dyn FnMut(&Node)) {
    match &node.value {
        Value::Map(entries) => {
            for (key, value) in entries {
                if !kept(&key.name, top) {
                    visit(value, false, leaf);
                }
            }
        }
        Value::Seq(items) => items.iter().for_each(|n| visit(n, false, leaf)),
        _ => leaf(node),
    }
}

/// `root` with every placeholder outside properties replaced by its value.
///
/// # Errors
/// Every name without a value, in one error; a structured value inside a string.
pub fn interpolate_outside_properties(root: &Node, values: &Values) -> Result<Node, VariableError> {
    let missing: Vec<String> = outside_properties(root)
        .into_iter()
        .filter(|name| !values.contains_key(name))
        .collect();
    if !missing.is_empty() {
        return Err(VariableError::Missing(missing));
    }
    replace(root, true, values)
}

fn replace(node: &Node, top: bool, values: &Values) -> Result<Node, VariableError> {
    let value = match &node.value {
        Value::Map(entries) => Value::Map(
            entries
                .iter()
                .map(|(key, value)| {
                    let value = if kept(&key.name, top) {
                        value.clone()
                    } else {
                        replace(value, false, values)?
                    };
                    Ok((key.clone(), value))
                })
                .collect::<Result<_, VariableError>>()?,
        ),
        Value::Seq(items) => Value::Seq(
            items
                .iter()
                .map(|n| replace(n, false, values))
                .collect::<Result<_, _>>()?,
        ),
        _ => return fleet_variables::interpolate(node, values),
    };
    Ok(Node { value, at: node.at })
}

/// The names of `names` that are relative, which a runtime or cloud config may not use.
pub fn relative(names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| !n.starts_with('/'))
        .cloned()
        .collect()
}

/// BOSH's words for relative names where only absolute ones may stand.
pub fn relative_problem(names: &[String]) -> String {
    format!(
        "Relative paths are not allowed in this context. The following must be be switched \
         to use absolute paths: {}",
        names
            .iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use fleet_yaml::{Limits, load};
    use serde_json::json;

    use super::*;

    const MANIFEST: &str = "name: d\nvariables: [{name: pw, type: password}]\nproperties: {a: ((global))}\ninstance_groups:\n- name: web\n  instances: ((count))\n  vm_type: ((/shared/vm_type))\n  networks: [{name: ((net.name))}]\n  properties: {b: ((group))}\n  jobs:\n  - {name: web, release: r, properties: {pw: ((pw))}}\n";

    #[test]
    fn placeholders_outside_properties_are_found_and_replaced_with_their_positions() {
        let root = load(MANIFEST, Limits::default()).unwrap();
        assert_eq!(
            outside_properties(&root),
            ["count", "/shared/vm_type", "net"]
        );
        let values: Values = [
            ("count".to_string(), json!(3)),
            ("/shared/vm_type".to_string(), json!("large")),
            ("net".to_string(), json!({"name": "private"})),
        ]
        .into();
        let done = interpolate_outside_properties(&root, &values).unwrap();
        let group = &done.get("instance_groups").unwrap().to_json()[0];
        assert_eq!(group["instances"], 3);
        assert_eq!(group["vm_type"], "large");
        assert_eq!(group["networks"][0]["name"], "private");
        assert_eq!(group["properties"]["b"], "((group))", "properties kept");
        assert_eq!(group["jobs"][0]["properties"]["pw"], "((pw))");
        assert_eq!(done.to_json()["properties"]["a"], "((global))");
        let line = |n: &Node| n.get("instance_groups").unwrap().to_json();
        assert_eq!(line(&done)[0]["name"], line(&root)[0]["name"]);
        let count = |n: &Node| match &n.get("instance_groups").unwrap().value {
            Value::Seq(items) => items[0].get("instances").unwrap().at,
            _ => unreachable!(),
        };
        assert_eq!(
            count(&done),
            count(&root),
            "a value stands where its placeholder stood"
        );
    }

    #[test]
    fn missing_values_are_named_together_and_relative_names_found() {
        let root = load(MANIFEST, Limits::default()).unwrap();
        let e = interpolate_outside_properties(&root, &Values::new()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Expected to find variables: count, /shared/vm_type, net"
        );
        let names = outside_properties(&root);
        assert_eq!(relative(&names), ["count", "net"]);
        assert!(relative_problem(&relative(&names)).ends_with("'count', 'net'"));
    }
}
