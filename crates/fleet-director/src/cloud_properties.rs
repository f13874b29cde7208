//! The IaaS-specific settings a cloud config attaches to AZs, VM types, VM extensions,
//! disk types and the compilation block, merged the way the BOSH director hands them to
//! a CPI: only the CPI reads them, so the director keeps them opaque and compares them
//! whole, and a change to what an instance's VM was made with makes a new VM. Pure.

use std::collections::BTreeMap;

use fleet_yaml::{Checker, Node};
use serde_json::{Map, Value};

/// One entry's `cloud_properties`: an object the CPI interprets.
pub type Properties = Map<String, Value>;

/// Every `cloud_properties` a cloud config defines, by the name of what carries them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CloudProperties {
    pub azs: BTreeMap<String, Properties>,
    pub vm_types: BTreeMap<String, Properties>,
    pub vm_extensions: BTreeMap<String, Properties>,
    pub disk_types: BTreeMap<String, Properties>,
    /// The compilation block's own, for compilation VMs without a `vm_type`.
    pub compilation: Properties,
}

impl CloudProperties {
    /// Reads them from a cloud config; an entry's `cloud_properties` that is not a map
    /// is reported at its key, one that is absent is empty.
    pub fn read(checker: &mut Checker, root: &Node) -> Self {
        let mut all = CloudProperties::default();
        for (section, into) in [
            ("azs", &mut all.azs),
            ("vm_types", &mut all.vm_types),
            ("vm_extensions", &mut all.vm_extensions),
            ("disk_types", &mut all.disk_types),
        ] {
            let Some(list) = root.get(section) else {
                continue;
            };
            for (i, entry) in checker.list(list, section).iter().enumerate() {
                let name = entry.get("name").and_then(Node::as_str).map(str::to_string);
                let at = match &name {
                    Some(name) => format!("{section}.{name}.cloud_properties"),
                    None => format!("{section}[{i}].cloud_properties"),
                };
                let properties = properties_at(checker, entry, &at);
                if let Some(name) = name {
                    into.insert(name, properties);
                }
            }
        }
        if let Some(block) = root.get("compilation") {
            all.compilation = properties_at(checker, block, "compilation.cloud_properties");
        }
        all
    }

    /// What `create_vm` gets for an instance: its AZ's, then its VM type's, then each
    /// extension's in the manifest's order, a later key replacing an earlier one whole
    /// (BOSH merges them one level deep, not recursively).
    pub fn for_vm(
        &self,
        az: Option<&str>,
        vm_type: Option<&str>,
        extensions: &[String],
    ) -> Properties {
        let mut merged = Properties::new();
        let layers = [
            az.and_then(|a| self.azs.get(a)),
            vm_type.and_then(|t| self.vm_types.get(t)),
        ]
        .into_iter()
        .chain(extensions.iter().map(|e| self.vm_extensions.get(e)));
        for layer in layers.flatten() {
            merged.extend(layer.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        merged
    }

    /// A compilation VM's: its AZ's, then its VM type's, or the compilation block's own
    /// when it names no VM type.
    pub fn for_compilation(&self, az: Option<&str>, vm_type: Option<&str>) -> Properties {
        let mut merged = az
            .and_then(|a| self.azs.get(a))
            .cloned()
            .unwrap_or_default();
        let own = match vm_type {
            Some(t) => self.vm_types.get(t),
            None => Some(&self.compilation),
        };
        for (k, v) in own.into_iter().flatten() {
            merged.insert(k.clone(), v.clone());
        }
        merged
    }

    /// What `create_disk` gets: the disk type's, empty for a size given in the manifest.
    pub fn for_disk(&self, disk_type: Option<&str>) -> Properties {
        disk_type
            .and_then(|t| self.disk_types.get(t))
            .cloned()
            .unwrap_or_default()
    }
}

fn properties_at(checker: &mut Checker, entry: &Node, at: &str) -> Properties {
    match entry.get("cloud_properties") {
        None => Properties::new(),
        Some(node) => match node.to_json() {
            Value::Object(map) => map,
            Value::Null => Properties::new(),
            _ => {
                checker.report(
                    at,
                    node.at,
                    format!(
                        "must be a map of the CPI's settings, found {}",
                        fleet_yaml::describe(&node.value)
                    ),
                );
                Properties::new()
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CLOUD: &str = "
azs:
- {name: z1, cloud_properties: {zone: eu-1a, tier: zonal}}
- {name: z2}
vm_types:
- {name: small, cloud_properties: {instance_type: t3.small, tier: general}}
- {name: bare}
vm_extensions:
- {name: lb, cloud_properties: {elbs: [web], tier: public}}
- {name: big-root, cloud_properties: {ephemeral_disk: {size: 50000}}}
disk_types:
- {name: fast, disk_size: 1024, cloud_properties: {type: gp3}}
compilation: {workers: 2, cloud_properties: {instance_type: c5.large}}
";

    fn read(text: &str) -> (CloudProperties, Vec<String>) {
        let root = fleet_yaml::load(text, fleet_yaml::Limits::default()).unwrap();
        let mut checker = Checker::new();
        let read = CloudProperties::read(&mut checker, &root);
        let problems = checker
            .into_problems()
            .iter()
            .map(ToString::to_string)
            .collect();
        (read, problems)
    }

    #[test]
    fn az_then_vm_type_then_extensions_in_order_each_key_replaced_whole() {
        let (cloud, problems) = read(CLOUD);
        assert!(problems.is_empty(), "{problems:?}");
        let merged = Value::Object(cloud.for_vm(
            Some("z1"),
            Some("small"),
            &["lb".to_string(), "big-root".to_string()],
        ));
        assert_eq!(
            merged,
            json!({
                "zone": "eu-1a",
                "instance_type": "t3.small",
                "elbs": ["web"],
                "tier": "public",
                "ephemeral_disk": {"size": 50000},
            })
        );
        assert!(cloud.for_vm(Some("z2"), Some("bare"), &[]).is_empty());
        assert!(cloud.for_vm(None, None, &[]).is_empty());
    }

    #[test]
    fn compilation_vms_take_the_blocks_own_unless_it_names_a_vm_type() {
        let (cloud, _) = read(CLOUD);
        assert_eq!(
            Value::Object(cloud.for_compilation(Some("z1"), None)),
            json!({"zone": "eu-1a", "tier": "zonal", "instance_type": "c5.large"})
        );
        assert_eq!(
            Value::Object(cloud.for_compilation(None, Some("small"))),
            json!({"instance_type": "t3.small", "tier": "general"})
        );
    }

    #[test]
    fn disks_take_their_types() {
        let (cloud, _) = read(CLOUD);
        assert_eq!(
            Value::Object(cloud.for_disk(Some("fast"))),
            json!({"type": "gp3"})
        );
        assert!(cloud.for_disk(None).is_empty());
    }

    #[test]
    fn cloud_properties_that_are_not_a_map_are_named() {
        let (_, problems) = read(
            "vm_types:\n- {name: small, cloud_properties: [a]}\ndisk_types:\n- {cloud_properties: 3}\n",
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("vm_types.small.cloud_properties"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("disk_types[0].cloud_properties"),
            "{problems:?}"
        );
    }
}
