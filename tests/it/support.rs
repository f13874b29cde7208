use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// A temporary folder holding a configuration and its scenario.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Self {
        Workspace {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A configuration replaying `scenario` with intervals short enough for real time;
    /// `extra` adds top-level sections and replaces the defaults' `busy_retry`.
    pub fn scripted(&self, scenario: &str, extra: &str) -> PathBuf {
        self.write("scenario.yml", scenario);
        let busy_retry = if extra.contains("busy_retry:") {
            ""
        } else {
            "busy_retry:\n  interval: 200ms\n"
        };
        self.write(
            "fleet.yml",
            &format!(
                "inventory:\n  type: scripted\n  scenario: scenario.yml\nstate_dir: state\n{busy_retry}polling:\n  interval: 50ms\nrate_limit:\n  requests_per_second: 1000\n{extra}"
            ),
        )
    }
}

pub fn fleet_updater() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleet-updater"));
    cmd.env_remove("FLEET_UPDATER_CONFIG")
        .env_remove("FLEET_UPDATER_LOG");
    cmd
}

pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The ids of the report's instances with `outcome`.
pub fn ids_with(report: &serde_json::Value, outcome: &str) -> std::collections::BTreeSet<String> {
    report["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["outcome"] == outcome)
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect()
}

/// Copies the tree at `from` to `to`, files with their modes.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
