//! The arrows between the workspace's crates that must never exist, read from each
//! crate's manifest: the program that runs inside a VM, and `create-env`, which a laptop
//! runs without a director, link no database driver and not the director.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each workspace crate's normal dependencies, as its `Cargo.toml` names them.
fn manifests() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates = BTreeMap::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let text = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let mut name = None;
        let mut deps = BTreeSet::new();
        let mut section = String::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_string();
            } else if section == "[package]" && line.starts_with("name = ") {
                name = Some(line["name = ".len()..].trim_matches('"').to_string());
            } else if section == "[dependencies]"
                && let Some(dep) = line.split(['.', ' ', '=']).next()
                && !dep.is_empty()
                && !dep.starts_with('#')
            {
                deps.insert(dep.to_string());
            }
        }
        crates.insert(name.expect("every crate has a name"), deps);
    }
    crates
}

/// Every crate `name` reaches through normal dependencies, external ones included.
fn reach(crates: &BTreeMap<String, BTreeSet<String>>, name: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![name.to_string()];
    while let Some(next) = todo.pop() {
        for dep in crates.get(&next).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen
}

#[test]
fn the_vm_side_and_create_env_link_no_database_and_not_the_director() {
    let crates = manifests();
    assert!(
        reach(&crates, "fleet-director").contains("fleet-store"),
        "the reading of manifests finds the director's store: {crates:?}"
    );
    let forbidden = [
        "fleet-director",
        "fleet-store",
        "fleet-iaas",
        "rusqlite",
        "postgres",
        "tokio-postgres",
    ];
    for side in [
        "fleet-vm",
        "fleet-agent",
        "fleet-render",
        "fleet-cpi",
        "fleet-create-env",
    ] {
        assert!(crates.contains_key(side), "no crate {side}");
        let reached = reach(&crates, side);
        let wrong: Vec<_> = forbidden.iter().filter(|f| reached.contains(**f)).collect();
        assert!(wrong.is_empty(), "{side} depends on {wrong:?}");
    }
}

#[test]
fn the_director_reaches_neither_the_rollout_nor_a_broker_nor_an_inventory() {
    let crates = manifests();
    let reached = reach(&crates, "fleet-director");
    let wrong: Vec<_> = reached
        .iter()
        .filter(|c| c.contains("rollout") || c.contains("broker") || c.contains("inventory"))
        .collect();
    assert!(wrong.is_empty(), "fleet-director depends on {wrong:?}");
}
