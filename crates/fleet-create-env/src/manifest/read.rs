//! The helpers every part of the reading shares: a key's text or size, a free-form
//! subtree, and the top-level keys a manifest may have.

use fleet_yaml::{Checker, Node, join};
use serde_json::Value as Json;

pub(super) const TOP: &[&str] = &[
    "name",
    "releases",
    "networks",
    "resource_pools",
    "disk_pools",
    "jobs",
    "instance_groups",
    "cloud_provider",
    "properties",
    "variables",
    "update",
    "tags",
];

pub(super) fn text(c: &mut Checker, node: &Node, path: &str, key: &str) -> Option<String> {
    match node.get(key) {
        Some(n) if n.value != fleet_yaml::Value::Null => c.string(n, &join(path, key)),
        _ => {
            c.report(&join(path, key), node.at, "must be provided");
            None
        }
    }
}

pub(super) fn optional_text(c: &mut Checker, node: &Node, path: &str, key: &str) -> Option<String> {
    node.get(key)
        .filter(|n| n.value != fleet_yaml::Value::Null)
        .and_then(|n| c.string(n, &join(path, key)))
}

pub(super) fn size(c: &mut Checker, node: &Node, path: &str, key: &str) -> Option<u64> {
    let n = node
        .get(key)
        .filter(|n| n.value != fleet_yaml::Value::Null)?;
    let at = join(path, key);
    let value = c.integer(n, &at)?;
    match u64::try_from(value) {
        Ok(v) => Some(v),
        Err(_) => {
            c.report(&at, n.at, "must be >= 0");
            None
        }
    }
}

pub(super) fn json(node: &Node, key: &str) -> Json {
    node.get(key).map(Node::to_json).unwrap_or(Json::Null)
}
