//! Documents compared by what they mean, not how they are written: layout, comments,
//! quoting and key order do not count. The director keeps configs and manifests as text,
//! but a client that reads one back and sends it again (the `bosh` CLI writes YAML its own
//! way) must find it unchanged.

use super::node::{Key, Node, Value};

/// Whether two documents mean the same: equal scalars, lists equal item by item, and
/// mappings with the same keys holding the same values in any order.
pub fn same(a: &Node, b: &Node) -> bool {
    match (&a.value, &b.value) {
        (Value::Map(x), Value::Map(y)) => {
            let others: std::collections::HashMap<&str, &Node> =
                y.iter().map(|(k, v)| (k.name.as_str(), v)).collect();
            x.len() == y.len()
                && x.iter().all(|(key, value)| {
                    others
                        .get(key.name.as_str())
                        .is_some_and(|other| same(value, other))
                })
        }
        (Value::Seq(x), Value::Seq(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (x, y) => x == y,
    }
}

/// The document written out one way only: two spaces a level, lists under their key, one
/// scalar form each, no comments. With `like`, mapping keys follow its order where it has
/// them (items of lists of named mappings are matched by `name`), so that writing the old
/// document like the new one leaves only real changes for a line diff to find.
pub fn render(node: &Node, like: Option<&Node>) -> String {
    let mut out = String::new();
    write_node(&mut out, node, like, 0);
    out
}

fn write_node(out: &mut String, node: &Node, like: Option<&Node>, indent: usize) {
    match &node.value {
        Value::Map(entries) if !entries.is_empty() => {
            for (key, value) in ordered(entries, like) {
                let like = like.and_then(|l| l.get(&key.name));
                write_entry(out, &key.name, value, like, indent);
            }
        }
        Value::Seq(items) if !items.is_empty() => {
            for (index, item) in items.iter().enumerate() {
                write_item(out, item, counterpart(item, index, like), indent);
            }
        }
        _ => {
            out.push_str(&" ".repeat(indent));
            out.push_str(&scalar(&node.value));
            out.push('\n');
        }
    }
}

fn write_entry(out: &mut String, key: &str, value: &Node, like: Option<&Node>, indent: usize) {
    out.push_str(&" ".repeat(indent));
    out.push_str(&scalar_key(key));
    out.push(':');
    match &value.value {
        Value::Map(entries) if !entries.is_empty() => {
            out.push('\n');
            write_node(out, value, like, indent + 2);
        }
        Value::Seq(items) if !items.is_empty() => {
            out.push('\n');
            write_node(out, value, like, indent);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

/// `- ` and the item; a mapping's first entry shares the dash's line.
fn write_item(out: &mut String, item: &Node, like: Option<&Node>, indent: usize) {
    let mut nested = String::new();
    write_node(&mut nested, item, like, indent + 2);
    let body = nested.get(indent + 2..).unwrap_or_default();
    out.push_str(&" ".repeat(indent));
    out.push_str("- ");
    out.push_str(body);
}

/// Entries in `like`'s key order first, then the others in their own order.
fn ordered<'n>(entries: &'n [(Key, Node)], like: Option<&Node>) -> Vec<&'n (Key, Node)> {
    let Some(order) = like.and_then(Node::as_map) else {
        return entries.iter().collect();
    };
    let mut out: Vec<&(Key, Node)> = order
        .iter()
        .filter_map(|(k, _)| entries.iter().find(|(own, _)| own.name == k.name))
        .collect();
    out.extend(
        entries
            .iter()
            .filter(|(own, _)| !order.iter().any(|(k, _)| k.name == own.name)),
    );
    out
}

/// The item of `like` an item is written like: the one of the same `name`, else the one
/// at the same place.
fn counterpart<'l>(item: &Node, index: usize, like: Option<&'l Node>) -> Option<&'l Node> {
    let Value::Seq(others) = &like?.value else {
        return None;
    };
    match item.get("name").and_then(Node::as_str) {
        Some(name) => others
            .iter()
            .find(|o| o.get("name").and_then(Node::as_str) == Some(name)),
        None => others.get(index),
    }
}

fn scalar_key(key: &str) -> String {
    scalar(&Value::Str(key.to_string()))
}

fn scalar(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) if f.is_nan() => ".nan".to_string(),
        Value::Float(f) if f.is_infinite() => if *f > 0.0 { ".inf" } else { "-.inf" }.to_string(),
        Value::Float(f) => format!("{f:?}"),
        Value::Str(s) if plain_is_safe(s) => s.clone(),
        // JSON's string form is a valid double-quoted YAML scalar.
        Value::Str(s) => serde_json::Value::String(s.clone()).to_string(),
        Value::Seq(_) => "[]".to_string(),
        Value::Map(_) => "{}".to_string(),
    }
}

/// Whether `s` can be written plain and read back as the same string, in either schema.
fn plain_is_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    let safe_chars = s
        .chars()
        .all(|c| c.is_alphanumeric() || "-_./@=+,()$%^&*~!?".contains(c) || c == ' ');
    let reads_back = matches!(super::load::resolve_plain_1_1(s), Value::Str(_))
        && matches!(super::load::resolve_plain(s), Value::Str(_));
    safe_chars
        && reads_back
        && (first.is_alphanumeric() || "_./$(".contains(first))
        && !s.ends_with(' ')
        && !s.contains(" #")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, load, load_as_director};

    fn doc(text: &str) -> Node {
        load_as_director(text, Limits::default()).unwrap()
    }

    #[test]
    fn layout_comments_quoting_and_key_order_do_not_count() {
        let a = doc(
            "# the config\nnetworks:\n- name: default\n  type: manual\nvm_types: [{name: small, cloud_properties: {cpu: 1}}]\n",
        );
        let b = doc(
            "vm_types:\n  - cloud_properties:\n      cpu: 1\n    name: 'small'\nnetworks:\n  - type: \"manual\"\n    name: default # inline\n",
        );
        assert!(same(&a, &b));
        assert_eq!(render(&a, Some(&b)), render(&b, None));
        let c = doc(
            "vm_types: [{name: small, cloud_properties: {cpu: 2}}]\nnetworks: [{name: default, type: manual}]\n",
        );
        assert!(!same(&a, &c));
    }

    #[test]
    fn yaml_1_1_scalars_mean_what_they_mean_to_the_director() {
        assert!(same(
            &doc("a: yes\nb: off\nc: 1_000\n"),
            &doc("a: true\nb: false\nc: 1000\n")
        ));
        assert!(
            !same(&doc("a: 'yes'\n"), &doc("a: true\n")),
            "a quoted yes is a string"
        );
        // The core schema, for our own configuration, reads `yes` as a string.
        let core = load("a: yes\n", Limits::default()).unwrap();
        assert_eq!(core.get("a").unwrap().value, Value::Str("yes".into()));
    }

    #[test]
    fn what_is_written_reads_back_as_the_same_document() {
        let text = "name: d\nreleases:\n- name: pg\n  version: '1.0'\ninstance_groups:\n- name: db\n  instances: 2\n  jobs:\n  - name: postgres\n    properties: {password: 'yes', note: 'a: b', empty: '', list: [[1, 2], []], map: {}}\n  networks: [{name: default, static_ips: [10.0.0.5]}]\n";
        let original = doc(text);
        let written = render(&original, None);
        assert!(same(&doc(&written), &original), "{written}");
        assert!(written.contains("  version: \"1.0\"\n"), "{written}");
        assert!(written.contains("password: \"yes\"\n"), "{written}");
    }

    #[test]
    fn list_items_are_written_like_the_item_of_the_same_name() {
        let new = doc("groups:\n- name: b\n  p: 1\n  q: 2\n- name: a\n  q: 3\n  p: 4\n");
        let old = doc("groups:\n- name: a\n  p: 4\n  q: 3\n- name: b\n  q: 2\n  p: 1\n");
        let written = render(&old, Some(&new));
        assert_eq!(
            written,
            "groups:\n- name: a\n  q: 3\n  p: 4\n- name: b\n  p: 1\n  q: 2\n"
        );
    }
}
