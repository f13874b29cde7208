//! The one job create-env deploys: its templates (jobs), resource pool, persistent disk
//! and networks, checked against the rest of the manifest.

use std::net::Ipv4Addr;

use fleet_yaml::{Checker, Node, join};

use super::model::{Job, JobNetwork, JobTemplate, Network};
use super::read::{json, optional_text, size, text};

pub(super) fn job_networks(
    c: &mut Checker,
    job: &Node,
    path: &str,
    nets: &[Network],
) -> Vec<JobNetwork> {
    let mut out = Vec::new();
    let list = match job.get("networks") {
        Some(l) => c.list(l, &join(path, "networks")),
        None => &[],
    };
    if list.is_empty() {
        c.report(&join(path, "networks"), job.at, "must be a non-empty array");
    }
    for (i, n) in list.iter().enumerate() {
        let np = format!("{path}.networks[{i}]");
        c.map(n, &np, &["name", "static_ips", "default"]);
        let Some(name) = text(c, n, &np, "name") else {
            continue;
        };
        let network = nets.iter().find(|x| x.name == name);
        if network.is_none() {
            c.report(&np, n.at, format!("`{name}` not found in networks"));
        }
        let mut static_ips = Vec::new();
        if let Some(ips) = n.get("static_ips") {
            for (j, ip) in c.list(ips, &join(&np, "static_ips")).iter().enumerate() {
                let ip_path = format!("{np}.static_ips[{j}]");
                let Some(text) = c.string(ip, &ip_path) else {
                    continue;
                };
                match text.parse::<Ipv4Addr>() {
                    Ok(addr) => {
                        if let Some(range) = network.and_then(|n| n.range)
                            && !range.contains(&addr)
                        {
                            c.report(
                                &ip_path,
                                ip.at,
                                format!("static ip '{addr}' must be within subnet range"),
                            );
                        }
                        static_ips.push(addr);
                    }
                    Err(_) => c.report(&ip_path, ip.at, "must be a valid IP"),
                }
            }
        }
        let mut default = Vec::new();
        if let Some(d) = n.get("default") {
            for (j, item) in c.list(d, &join(&np, "default")).iter().enumerate() {
                if let Some(v) = c.choice(item, &format!("{np}.default[{j}]"), &["dns", "gateway"])
                {
                    default.push(v.to_string());
                }
            }
        }
        out.push(JobNetwork {
            name,
            static_ips,
            default,
        });
    }
    if out.len() > 1 {
        for what in ["dns", "gateway"] {
            let defaults = out
                .iter()
                .filter(|n| n.default.iter().any(|d| d == what))
                .count();
            if defaults == 0 {
                c.report(
                    &join(path, "networks"),
                    job.at,
                    format!("with multiple networks, a default for '{what}' must be specified"),
                );
            } else if defaults > 1 {
                c.report(
                    &join(path, "networks"),
                    job.at,
                    format!("only one network can be the default for '{what}'"),
                );
            }
        }
    }
    out
}

pub(super) fn job(c: &mut Checker, root: &Node, context: &Context) -> Option<Job> {
    let (key, list) = match (root.get("jobs"), root.get("instance_groups")) {
        (Some(_), Some(_)) => {
            c.report(
                "instance_groups",
                root.at,
                "Deployment specifies both jobs and instance_groups keys, only one is allowed",
            );
            return None;
        }
        (Some(l), None) => ("jobs", l),
        (None, Some(l)) => ("instance_groups", l),
        (None, None) => {
            c.report("jobs", root.at, "must be of size 1");
            return None;
        }
    };
    let items = c.list(list, key);
    if items.len() != 1 {
        c.report(
            key,
            list.at,
            format!("must be of size 1, found {}", items.len()),
        );
        return None;
    }
    let node = &items[0];
    let path = format!("{key}[0]");
    c.map(
        node,
        &path,
        &[
            "name",
            "instances",
            "templates",
            "jobs",
            "resource_pool",
            "persistent_disk",
            "persistent_disk_pool",
            "networks",
            "properties",
            "lifecycle",
            "vm_type",
            "stemcell",
        ],
    );
    let name = text(c, node, &path, "name");
    if let Some(n) = node.get("instances")
        && c.integer(n, &join(&path, "instances"))
            .is_some_and(|i| i != 1)
    {
        c.report(
            &join(&path, "instances"),
            n.at,
            "must be 1: create-env deploys one VM",
        );
    }
    if let Some(l) = node.get("lifecycle")
        && l.as_str() != Some("service")
    {
        c.report(&join(&path, "lifecycle"), l.at, "must be 'service'");
    }
    let (tkey, tlist) = match (node.get("templates"), node.get("jobs")) {
        (Some(_), Some(_)) => {
            c.report(
                &join(&path, "jobs"),
                node.at,
                "specifies both templates and jobs keys, only one is allowed",
            );
            (None, None)
        }
        (Some(l), None) => (Some("templates"), Some(l)),
        (None, Some(l)) => (Some("jobs"), Some(l)),
        (None, None) => {
            c.report(&join(&path, "jobs"), node.at, "must be provided");
            (None, None)
        }
    };
    let mut templates: Vec<JobTemplate> = Vec::new();
    if let (Some(tkey), Some(tlist)) = (tkey, tlist) {
        for (i, t) in c.list(tlist, &join(&path, tkey)).iter().enumerate() {
            let tp = format!("{path}.{tkey}[{i}]");
            c.map(t, &tp, &["name", "release", "properties"]);
            let tname = text(c, t, &tp, "name");
            let release = text(c, t, &tp, "release");
            if let Some(r) = &release
                && !context.releases.iter().any(|x| x == r)
            {
                c.report(
                    &join(&tp, "release"),
                    t.at,
                    format!("`{r}` must refer to release in releases"),
                );
            }
            if let Some(n) = &tname
                && templates.iter().any(|x| &x.name == n)
            {
                c.report(&join(&tp, "name"), t.at, format!("`{n}` must be unique"));
            }
            if let (Some(name), Some(release)) = (tname, release) {
                templates.push(JobTemplate {
                    name,
                    release,
                    properties: t.get("properties").map(Node::to_json),
                });
            }
        }
    }
    let resource_pool = text(c, node, &path, "resource_pool");
    if let Some(rp) = &resource_pool
        && !context.resource_pools.iter().any(|x| x == rp)
    {
        c.report(
            &join(&path, "resource_pool"),
            node.at,
            "must be the name of a resource pool",
        );
    }
    let persistent_disk = size(c, node, &path, "persistent_disk").unwrap_or(0);
    let persistent_disk_pool = optional_text(c, node, &path, "persistent_disk_pool");
    if let Some(pool) = &persistent_disk_pool
        && !context.disk_pools.iter().any(|x| x == pool)
    {
        c.report(
            &join(&path, "persistent_disk_pool"),
            node.at,
            "must be the name of a disk pool",
        );
    }
    let networks = job_networks(c, node, &path, &context.networks);
    Some(Job {
        name: name?,
        templates,
        resource_pool: resource_pool?,
        persistent_disk,
        persistent_disk_pool,
        networks,
        properties: json(node, "properties"),
    })
}

/// What the job is checked against.
pub(super) struct Context {
    pub(super) releases: Vec<String>,
    pub(super) resource_pools: Vec<String>,
    pub(super) disk_pools: Vec<String>,
    pub(super) networks: Vec<Network>,
}
