//! The `store` key: where the embedded director and broker keep their state. Left out,
//! SQLite in the state directory; a PostgreSQL URL, a database several `serve` processes
//! may share.

use std::path::Path;

use super::model::StoreConfig;
use super::read_value::path_value;
use crate::yaml::{Checker, Node, Value, join};

const KEYS: &[&str] = &["url", "password_file", "ca_file"];

pub fn read_store(node: &Node, base: &Path, checker: &mut Checker) -> Option<StoreConfig> {
    let mut store = StoreConfig::default();
    if let Value::Str(_) = &node.value {
        store.url = checker.string(node, "store");
    } else {
        for (key, value) in checker.map(node, "store", KEYS) {
            let path = join("store", &key.name);
            match key.name.as_str() {
                "url" => store.url = checker.string(value, &path),
                "password_file" => {
                    store.password_file = path_value(checker, value, &path, Some(base))
                }
                _ => store.ca_file = path_value(checker, value, &path, Some(base)),
            }
        }
    }
    let Some(url) = &store.url else {
        checker.report(
            "store.url",
            node.at,
            "is required: a PostgreSQL URL such as postgres://fleet@db.example.com/fleet",
        );
        return None;
    };
    if let Err(e) = fleet_store::PostgresLocation::parse(url, None, None) {
        // The message names the problem without echoing a password.
        let message = e.to_string();
        checker.report("store", node.at, message.trim_start_matches("store: "));
        return None;
    }
    Some(store)
}
