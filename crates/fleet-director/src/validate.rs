//! Semantic validation of a manifest against what the director has: uploaded releases and
//! stemcells, and the cloud config's AZs, VM types, disk types and networks. Every problem
//! is reported together, each naming the instance group and key. Pure: facts in, problems
//! out.

use std::collections::{BTreeMap, BTreeSet};

use super::manifest::Manifest;

/// What the cloud config (or, without one, the manifest) defines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudFacts {
    /// `None` without a cloud config: then AZs and VM types are not checked.
    pub azs: Option<BTreeSet<String>>,
    pub vm_types: Option<BTreeSet<String>>,
    pub vm_extensions: BTreeSet<String>,
    /// Disk type name to size in MB.
    pub disk_types: BTreeMap<String, u64>,
    pub networks: BTreeSet<String>,
}

impl CloudFacts {
    /// Reads the names a cloud config defines.
    pub fn from_cloud_config(root: &fleet_yaml::Node, networks: BTreeSet<String>) -> Self {
        let names = |key: &str| -> BTreeSet<String> {
            root.get(key)
                .map(|n| n.to_json())
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|e| e.get("name").and_then(|n| n.as_str()).map(str::to_string))
                .collect()
        };
        let disk_types = root
            .get("disk_types")
            .map(|n| n.to_json())
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|d| {
                let name = d.get("name")?.as_str()?.to_string();
                Some((
                    name,
                    d.get("disk_size").and_then(|s| s.as_u64()).unwrap_or(0),
                ))
            })
            .collect();
        CloudFacts {
            azs: Some(names("azs")),
            vm_types: Some(names("vm_types")),
            vm_extensions: names("vm_extensions"),
            disk_types,
            networks,
        }
    }
}

/// Releases (`name/version`) and stemcells (`os/version`) the director has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uploaded {
    pub releases: BTreeSet<String>,
    pub stemcells: BTreeSet<String>,
}

fn known(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        "none are defined".into()
    } else {
        format!(
            "defined: {}",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

pub fn problems(manifest: &Manifest, cloud: &CloudFacts, uploaded: &Uploaded) -> Vec<String> {
    let mut out = Vec::new();
    for r in &manifest.releases {
        if !uploaded
            .releases
            .contains(&format!("{}/{}", r.name, r.version))
        {
            out.push(format!(
                "releases.{}: version `{}` is not uploaded to the director",
                r.name, r.version
            ));
        }
    }
    for s in &manifest.stemcells {
        if !uploaded
            .stemcells
            .contains(&format!("{}/{}", s.os, s.version))
        {
            out.push(format!(
                "stemcells.{}: `{}/{}` is not uploaded to the director",
                s.alias, s.os, s.version
            ));
        }
    }
    for g in &manifest.instance_groups {
        let path = format!("instance_groups.{}", g.name);
        if let Some(stemcell) = manifest.stemcell(&g.stemcell) {
            let desc = format!("{}/{}", stemcell.os, stemcell.version);
            let mut named = BTreeSet::new();
            for job in &g.jobs {
                let Some(release) = manifest.release(&job.release) else {
                    continue;
                };
                if !named.insert(&release.name) {
                    continue;
                }
                if release.exported_from.is_empty()
                    || release
                        .exported_from
                        .iter()
                        .any(|e| crate::compile::compatible(e, &desc))
                {
                    continue;
                }
                out.push(format!(
                    "Invalid release detected in instance group '{}' using stemcell '{desc}': \
                     release '{}' must be exported from stemcell '{desc}'. Release '{}' is \
                     exported from: {}.",
                    g.name,
                    release.name,
                    release.name,
                    release
                        .exported_from
                        .iter()
                        .map(|e| format!("'{e}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        for n in &g.networks {
            if !cloud.networks.contains(&n.name) {
                out.push(format!(
                    "{path}.networks.{}: unknown network; {}",
                    n.name,
                    known(&cloud.networks)
                ));
            }
            if !n.static_ips.is_empty() && n.static_ips.len() != g.instances as usize {
                out.push(format!(
                    "{path}.networks.{}.static_ips: {} static IPs for {} instances; give one per instance",
                    n.name,
                    n.static_ips.len(),
                    g.instances
                ));
            }
        }
        if let Some(azs) = &cloud.azs {
            for az in &g.azs {
                if !azs.contains(az) {
                    out.push(format!(
                        "{path}.azs: unknown availability zone `{az}`; {}",
                        known(azs)
                    ));
                }
            }
        }
        if let Some(vm_types) = &cloud.vm_types {
            match &g.vm_type {
                Some(t) if !vm_types.contains(t) => out.push(format!(
                    "{path}.vm_type: unknown VM type `{t}`; {}",
                    known(vm_types)
                )),
                None => out.push(format!("{path}.vm_type: is required with a cloud config")),
                _ => {}
            }
        }
        for e in &g.vm_extensions {
            if !cloud.vm_extensions.contains(e) {
                out.push(format!(
                    "{path}.vm_extensions: unknown VM extension `{e}`; {}",
                    known(&cloud.vm_extensions)
                ));
            }
        }
        if let Some(t) = &g.persistent_disk_type {
            if g.persistent_disk > 0 {
                out.push(format!(
                    "{path}: give `persistent_disk` or `persistent_disk_type`, not both"
                ));
            }
            if !cloud.disk_types.contains_key(t) {
                let names: BTreeSet<String> = cloud.disk_types.keys().cloned().collect();
                out.push(format!(
                    "{path}.persistent_disk_type: unknown disk type `{t}`; {}",
                    known(&names)
                ));
            }
        }
    }
    out
}

/// Disk types become sizes, once the manifest is known to be valid.
pub fn resolve_disk_types(manifest: &mut Manifest, cloud: &CloudFacts) {
    for g in &mut manifest.instance_groups {
        if let Some(size) = g
            .persistent_disk_type
            .as_ref()
            .and_then(|t| cloud.disk_types.get(t))
        {
            g.persistent_disk = *size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse;

    const MANIFEST: &str = "name: d
releases: [{name: nginx, version: '1'}, {name: redis, version: '7'}]
stemcells: [{alias: default, os: jammy, version: '1.0'}]
update: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}
instance_groups:
- name: web
  instances: 2
  azs: [z1, z9]
  jobs: [{name: nginx, release: nginx}]
  vm_type: huge
  vm_extensions: [lb, public-ip]
  stemcell: default
  persistent_disk_type: fast
  networks: [{name: default, static_ips: [10.0.0.5]}, {name: nowhere}]
";

    #[test]
    fn every_semantic_problem_is_named_together() {
        let m = parse(MANIFEST).unwrap();
        let cloud = CloudFacts {
            azs: Some(BTreeSet::from(["z1".to_string()])),
            vm_types: Some(BTreeSet::from(["small".to_string()])),
            vm_extensions: BTreeSet::from(["lb".to_string()]),
            disk_types: BTreeMap::from([("slow".to_string(), 1024)]),
            networks: BTreeSet::from(["default".to_string()]),
        };
        let uploaded = Uploaded {
            releases: BTreeSet::from(["nginx/1".to_string()]),
            stemcells: BTreeSet::new(),
        };
        let found = problems(&m, &cloud, &uploaded);
        let expected = [
            "releases.redis: version `7` is not uploaded to the director",
            "stemcells.default: `jammy/1.0` is not uploaded to the director",
            "instance_groups.web.networks.default.static_ips: 1 static IPs for 2 instances; give one per instance",
            "instance_groups.web.networks.nowhere: unknown network; defined: `default`",
            "instance_groups.web.azs: unknown availability zone `z9`; defined: `z1`",
            "instance_groups.web.vm_type: unknown VM type `huge`; defined: `small`",
            "instance_groups.web.vm_extensions: unknown VM extension `public-ip`; defined: `lb`",
            "instance_groups.web.persistent_disk_type: unknown disk type `fast`; defined: `slow`",
        ];
        assert_eq!(found, expected);
    }

    #[test]
    fn a_disk_type_becomes_its_size() {
        let mut m =
            parse(&MANIFEST.replace("persistent_disk_type: fast", "persistent_disk_type: slow"))
                .unwrap();
        let cloud = CloudFacts {
            disk_types: BTreeMap::from([("slow".to_string(), 4096)]),
            ..CloudFacts::default()
        };
        resolve_disk_types(&mut m, &cloud);
        assert_eq!(m.instance_groups[0].persistent_disk, 4096);
    }
}
