//! Plans: a manifest template plus the releases and stemcell its instances should run now.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StemcellVersion {
    pub os: String,
    pub version: String,
}

/// What a deployment runs: the part of a plan that maintenance updates change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versions {
    pub releases: Vec<Version>,
    pub stemcell: StemcellVersion,
}

impl Versions {
    /// `postgres/16, ubuntu-jammy/1.612`, for listings.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .releases
            .iter()
            .map(|r| format!("{}/{}", r.name, r.version))
            .collect();
        parts.push(format!("{}/{}", self.stemcell.os, self.stemcell.version));
        parts.join(", ")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub id: String,
    /// The manifest without `name`, `releases` and `stemcells`, which the broker adds;
    /// instance groups use the stemcell alias `default`.
    pub manifest: String,
    /// What instances of this plan should run now.
    pub current: Versions,
}

impl Plan {
    /// The manifest of `deployment` running `versions`.
    pub fn manifest_for(&self, deployment: &str, versions: &Versions) -> String {
        let mut text = format!("name: {deployment}\nreleases:\n");
        for r in &versions.releases {
            text.push_str(&format!(
                "- name: {}\n  version: {}\n",
                quote(&r.name),
                quote(&r.version)
            ));
        }
        text.push_str(&format!(
            "stemcells:\n- alias: default\n  os: {}\n  version: {}\n",
            quote(&versions.stemcell.os),
            quote(&versions.stemcell.version)
        ));
        text.push_str(&self.manifest);
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text
    }
}

/// A JSON string literal is a valid YAML scalar and keeps versions like `1.10` strings.
fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    pub plans: Vec<Plan>,
}

impl Catalog {
    pub fn plan(&self, id: &str) -> Option<&Plan> {
        self.plans.iter().find(|p| p.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_renders_a_complete_manifest() {
        let plan = Plan {
            id: "small".into(),
            manifest: "update: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}\ninstance_groups: []\n".into(),
            current: Versions {
                releases: vec![Version { name: "postgres".into(), version: "16.1".into() }],
                stemcell: StemcellVersion { os: "ubuntu-jammy".into(), version: "1.10".into() },
            },
        };
        let text = plan.manifest_for("service-instance_a", &plan.current);
        let manifest = fleet_director::manifest::parse(&text).unwrap();
        assert_eq!(manifest.name, "service-instance_a");
        assert_eq!(manifest.releases[0].version, "16.1");
        assert_eq!(manifest.stemcells[0].version, "1.10");
    }
}
