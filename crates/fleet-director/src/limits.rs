//! How many instances a manifest may ask for, checked before anything is planned: the
//! director's memory grows with the instances it plans, so a manifest asking for a
//! trillion must be refused while it is still text.

use serde::Deserialize;

use super::manifest::Manifest;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InstanceLimits {
    pub instances_per_group: u32,
    pub instances_per_deployment: u32,
}

impl Default for InstanceLimits {
    /// Far above any service instance and above the largest Cloud Foundry instance
    /// groups operators run, far below what would exhaust a director's memory.
    fn default() -> Self {
        InstanceLimits {
            instances_per_group: 5_000,
            instances_per_deployment: 10_000,
        }
    }
}

impl InstanceLimits {
    /// Every group over its limit, then the deployment's total; empty when within both.
    pub fn problems(&self, manifest: &Manifest) -> Vec<String> {
        let mut out = Vec::new();
        let mut total: u64 = 0;
        for g in &manifest.instance_groups {
            total += u64::from(g.instances);
            if g.instances > self.instances_per_group {
                out.push(format!(
                    "instance_groups.{}.instances: {} instances; this director allows at most {} \
                     per instance group",
                    g.name, g.instances, self.instances_per_group
                ));
            }
        }
        if total > u64::from(self.instances_per_deployment) {
            out.push(format!(
                "instance_groups: {total} instances in all; this director allows at most {} per \
                 deployment",
                self.instances_per_deployment
            ));
        }
        out
    }
}
