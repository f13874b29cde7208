//! What a dry run shows: the plan as a deploy would apply it, addresses and disks included, one
//! line per instance in the task's events (what `bosh deploy --dry-run` prints) and the
//! counts in its result. Pure: the plan in, text out.

use super::deploy::decide::DeployPlan;
use super::network::to_ip;
use super::plan::InstancePlan;

/// One instance's planned line: its name, what changes, and each network's address
/// (`dynamic` where the IaaS assigns it), what happens to its disk, and the addresses it
/// gives up.
pub fn instance_line(instance: &InstancePlan) -> String {
    let id = if instance.id.is_empty() {
        "new"
    } else {
        instance.id.as_str()
    };
    let addresses: Vec<String> = instance
        .addresses
        .iter()
        .map(|(network, ip)| match ip {
            Some(ip) => format!("{network} {}", to_ip(*ip)),
            None => format!("{network} dynamic"),
        })
        .collect();
    let changes = if instance.changed() {
        let names: Vec<&str> = instance.changes.iter().map(|c| c.describe()).collect();
        format!("changes: {}", names.join(", "))
    } else {
        "unchanged".to_string()
    };
    let mut line = format!(
        "{}/{id} ({}): {changes}; {}",
        instance.group,
        instance.index,
        if addresses.is_empty() {
            "no networks".to_string()
        } else {
            addresses.join(", ")
        }
    );
    if let Some(disk) = instance.disk.describe() {
        line.push_str(&format!("; {disk}"));
    }
    if !instance.obsolete_addresses.is_empty() {
        let gone: Vec<String> = instance
            .obsolete_addresses
            .iter()
            .map(|h| format!("{} {}", h.network, to_ip(h.ip)))
            .collect();
        line.push_str(&format!("; releases {}", gone.join(", ")));
    }
    line
}

/// The dry run's result: how many instances would be updated and deleted, how many
/// addresses claimed and released, disks created and orphaned, and packages compiled.
pub fn summary(plan: &DeployPlan) -> String {
    let claimed: usize = plan
        .instances
        .instances()
        .map(|i| {
            let current = i
                .existing
                .as_ref()
                .map_or(&[][..], |e| e.current_networks());
            i.desired
                .networks
                .iter()
                .filter(|n| n.contains('/') && !current.contains(n))
                .count()
        })
        .sum();
    let released: usize = plan
        .instances
        .instances()
        .map(|i| i.obsolete_addresses.len())
        .sum::<usize>()
        + plan
            .deletions
            .iter()
            .map(|d| {
                d.record
                    .current_networks()
                    .iter()
                    .filter(|n| n.contains('/'))
                    .count()
            })
            .sum::<usize>();
    let disks_created = plan
        .instances
        .instances()
        .filter(|i| i.disk.creates())
        .count();
    let disks_orphaned = plan
        .instances
        .instances()
        .filter(|i| i.disk.orphans())
        .count()
        + plan
            .deletions
            .iter()
            .filter(|d| d.record.disk_cid.is_some())
            .count();
    format!(
        "dry run: {} instances would be updated and {} deleted, {claimed} addresses claimed and \
         {released} released, {disks_created} disks created and {disks_orphaned} orphaned, {} \
         packages compiled; nothing was changed",
        plan.instances.changed_instances(),
        plan.deletions.len(),
        plan.compilation.packages(),
    )
}
