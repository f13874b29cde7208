//! The manifest `create-env` deploys (seed 002), read after its variables are
//! interpolated: the deployment (`networks`, `resource_pools`, `disk_pools` and exactly
//! one job of one instance) and the CPI's configuration (`cloud_provider`). Every problem
//! is reported at once, each with its key.

use std::net::Ipv4Addr;

use fleet_yaml::{Checker, Node, join};
use ipnet::Ipv4Net;
use serde_json::Value as Json;

#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseEntry {
    pub name: String,
    /// `file://PATH` (relative to the manifest's directory), a tarball or a directory
    /// holding a release (`release.MF`) or its source (`release.yml`).
    pub url: String,
    /// The version to build a release kept as source in.
    pub version: Option<String>,
    pub sha1: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkKind {
    Manual,
    Dynamic,
    Vip,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub name: String,
    pub kind: NetworkKind,
    /// A manual network's one subnet: range, gateway, DNS servers, cloud properties.
    pub range: Option<Ipv4Net>,
    pub gateway: Option<Ipv4Addr>,
    pub dns: Vec<String>,
    pub cloud_properties: Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ResourcePool {
    pub name: String,
    pub network: String,
    pub stemcell_url: String,
    pub stemcell_sha1: Option<String>,
    pub cloud_properties: Json,
    pub env: Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DiskPool {
    pub name: String,
    pub disk_size: u64,
    pub cloud_properties: Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobTemplate {
    pub name: String,
    pub release: String,
    /// The job's own properties, which replace the instance group's when given.
    pub properties: Option<Json>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobNetwork {
    pub name: String,
    pub static_ips: Vec<Ipv4Addr>,
    pub default: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub name: String,
    pub templates: Vec<JobTemplate>,
    pub resource_pool: String,
    pub persistent_disk: u64,
    pub persistent_disk_pool: Option<String>,
    pub networks: Vec<JobNetwork>,
    pub properties: Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CloudProvider {
    /// The CPI job and the release it is in.
    pub job: String,
    pub release: String,
    /// Where the VM's agent answers, with the credentials to bring.
    pub mbus: String,
    pub properties: Json,
    /// The CA the agent's certificate is checked against; unchecked without one.
    pub ca: Option<String>,
    /// The registry to start for the CPI (`properties.registry`), when it uses one.
    pub registry: Option<super::registry::RegistrySettings>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EnvManifest {
    pub name: String,
    pub releases: Vec<ReleaseEntry>,
    pub networks: Vec<Network>,
    pub resource_pools: Vec<ResourcePool>,
    pub disk_pools: Vec<DiskPool>,
    pub job: Job,
    pub properties: Json,
    pub cloud_provider: CloudProvider,
    /// How long the job may take to run after it starts: the end of `update_watch_time`.
    pub watch_time_ms: u64,
}

impl CloudProvider {
    /// Where the agent answers, without its credentials.
    pub fn mbus_address(&self) -> String {
        fleet_agent::mbus::MbusUrl::parse(&self.mbus)
            .map(|u| u.without_credentials())
            .unwrap_or_else(|_| "the mbus".into())
    }
}

impl EnvManifest {
    pub fn resource_pool(&self) -> &ResourcePool {
        self.resource_pools
            .iter()
            .find(|p| p.name == self.job.resource_pool)
            .expect("validated: the job's resource pool exists")
    }

    /// The persistent disk's size in MiB (0 for none) and its cloud properties.
    pub fn disk(&self) -> (u64, Json) {
        match &self.job.persistent_disk_pool {
            Some(pool) => self
                .disk_pools
                .iter()
                .find(|p| &p.name == pool)
                .map(|p| (p.disk_size, p.cloud_properties.clone()))
                .unwrap_or((0, Json::Null)),
            None => (self.job.persistent_disk, serde_json::json!({})),
        }
    }

    /// The job's properties as its templates see them: its own, else the instance
    /// group's over the global ones.
    pub fn job_properties(&self, template: &JobTemplate) -> Json {
        if let Some(own) = &template.properties {
            return own.clone();
        }
        let mut merged = self.properties.clone();
        merge(&mut merged, &self.job.properties);
        merged
    }
}

fn merge(into: &mut Json, from: &Json) {
    match (into, from) {
        (Json::Object(a), Json::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Json::Null), v);
            }
        }
        (slot, value) if !value.is_null() => *slot = value.clone(),
        _ => {}
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the manifest is invalid:\n  {}", .0.join("\n  "))]
pub struct ManifestError(pub Vec<String>);

const TOP: &[&str] = &[
    "name",
    "releases",
    "networks",
    "resource_pools",
    "disk_pools",
    "jobs",
    "instance_groups",
    "cloud_provider",
    "properties",
    "variables",
    "update",
    "tags",
];

fn text(c: &mut Checker, node: &Node, path: &str, key: &str) -> Option<String> {
    match node.get(key) {
        Some(n) if n.value != fleet_yaml::Value::Null => c.string(n, &join(path, key)),
        _ => {
            c.report(&join(path, key), node.at, "must be provided");
            None
        }
    }
}

fn optional_text(c: &mut Checker, node: &Node, path: &str, key: &str) -> Option<String> {
    node.get(key)
        .filter(|n| n.value != fleet_yaml::Value::Null)
        .and_then(|n| c.string(n, &join(path, key)))
}

fn size(c: &mut Checker, node: &Node, path: &str, key: &str) -> Option<u64> {
    let n = node
        .get(key)
        .filter(|n| n.value != fleet_yaml::Value::Null)?;
    let at = join(path, key);
    let value = c.integer(n, &at)?;
    match u64::try_from(value) {
        Ok(v) => Some(v),
        Err(_) => {
            c.report(&at, n.at, "must be >= 0");
            None
        }
    }
}

fn json(node: &Node, key: &str) -> Json {
    node.get(key).map(Node::to_json).unwrap_or(Json::Null)
}

fn releases(c: &mut Checker, root: &Node) -> Vec<ReleaseEntry> {
    let Some(list) = root.get("releases") else {
        c.report("releases", root.at, "must contain at least 1 release");
        return Vec::new();
    };
    let mut out: Vec<ReleaseEntry> = Vec::new();
    for (i, r) in c.list(list, "releases").iter().enumerate() {
        let path = format!("releases[{i}]");
        c.map(r, &path, &["name", "url", "version", "sha1"]);
        let name = text(c, r, &path, "name");
        let url = text(c, r, &path, "url");
        if let Some(url) = &url
            && !url.starts_with("file://")
        {
            c.report(
                &join(&path, "url"),
                r.at,
                format!("`{url}` must be a file:// URL"),
            );
        }
        if let Some(name) = &name
            && out.iter().any(|o| &o.name == name)
        {
            c.report(
                &join(&path, "name"),
                r.at,
                format!("`{name}` must be unique"),
            );
        }
        if let (Some(name), Some(url)) = (name, url) {
            out.push(ReleaseEntry {
                name,
                url,
                version: optional_text(c, r, &path, "version"),
                sha1: optional_text(c, r, &path, "sha1"),
            });
        }
    }
    if out.is_empty() && c.is_clean() {
        c.report("releases", list.at, "must contain at least 1 release");
    }
    out
}

fn networks(c: &mut Checker, root: &Node) -> Vec<Network> {
    let mut out = Vec::new();
    let Some(list) = root.get("networks") else {
        return out;
    };
    for (i, n) in c.list(list, "networks").iter().enumerate() {
        let path = format!("networks[{i}]");
        c.map(
            n,
            &path,
            &["name", "type", "subnets", "dns", "cloud_properties"],
        );
        let name = text(c, n, &path, "name");
        let kind = match n.get("type").and_then(|t| t.as_str()) {
            Some("manual") | None => NetworkKind::Manual,
            Some("dynamic") => NetworkKind::Dynamic,
            Some("vip") => NetworkKind::Vip,
            Some(_) => {
                c.report(
                    &join(&path, "type"),
                    n.at,
                    "must be 'manual', 'dynamic', or 'vip'",
                );
                NetworkKind::Manual
            }
        };
        let (mut range, mut gateway, mut dns) = (None, None, Vec::new());
        if kind == NetworkKind::Manual {
            let subnets = n.get("subnets").map(|s| c.list(s, &join(&path, "subnets")));
            match subnets {
                Some([subnet]) => {
                    let sp = format!("{path}.subnets[0]");
                    c.map(
                        subnet,
                        &sp,
                        &[
                            "range",
                            "gateway",
                            "dns",
                            "static",
                            "reserved",
                            "cloud_properties",
                        ],
                    );
                    range =
                        text(c, subnet, &sp, "range").and_then(|r| match r.parse::<Ipv4Net>() {
                            Ok(net) => Some(net),
                            Err(_) => {
                                c.report(&join(&sp, "range"), subnet.at, "must be an ip range");
                                None
                            }
                        });
                    gateway =
                        text(c, subnet, &sp, "gateway").and_then(|g| match g.parse::<Ipv4Addr>() {
                            Ok(ip) => Some(ip),
                            Err(_) => {
                                c.report(&join(&sp, "gateway"), subnet.at, "must be an ip");
                                None
                            }
                        });
                    if let (Some(net), Some(gw)) = (range, gateway)
                        && (!net.contains(&gw) || gw == net.network() || gw == net.broadcast())
                    {
                        c.report(
                            &join(&sp, "gateway"),
                            subnet.at,
                            "must be within the range, not its network or broadcast address",
                        );
                    }
                    dns = subnet
                        .get("dns")
                        .map(|d| d.to_json())
                        .and_then(|d| serde_json::from_value(d).ok())
                        .unwrap_or_default();
                }
                _ => c.report(&join(&path, "subnets"), n.at, "must be of size 1"),
            }
        }
        if let Some(name) = name {
            out.push(Network {
                name,
                kind,
                range,
                gateway,
                dns,
                cloud_properties: json(n, "cloud_properties"),
            });
        }
    }
    out
}

fn resource_pools(c: &mut Checker, root: &Node, nets: &[Network]) -> Vec<ResourcePool> {
    let mut out = Vec::new();
    let Some(list) = root.get("resource_pools") else {
        return out;
    };
    for (i, p) in c.list(list, "resource_pools").iter().enumerate() {
        let path = format!("resource_pools[{i}]");
        c.map(
            p,
            &path,
            &["name", "network", "stemcell", "cloud_properties", "env"],
        );
        let name = text(c, p, &path, "name");
        let network = text(c, p, &path, "network");
        if let Some(net) = &network
            && !nets.iter().any(|n| &n.name == net)
        {
            c.report(
                &join(&path, "network"),
                p.at,
                "must be the name of a network",
            );
        }
        let stemcell = p.get("stemcell");
        let sp = join(&path, "stemcell");
        let url = match stemcell {
            Some(s) => {
                c.map(s, &sp, &["url", "sha1"]);
                text(c, s, &sp, "url")
            }
            None => {
                c.report(&join(&sp, "url"), p.at, "must be provided");
                None
            }
        };
        if let Some(u) = &url
            && !u.starts_with("file://")
        {
            c.report(&join(&sp, "url"), p.at, "must be a valid URL (file://)");
        }
        if let (Some(name), Some(network), Some(url)) = (name, network, url) {
            out.push(ResourcePool {
                name,
                network,
                stemcell_url: url,
                stemcell_sha1: stemcell.and_then(|s| optional_text(c, s, &sp, "sha1")),
                cloud_properties: json(p, "cloud_properties"),
                env: json(p, "env"),
            });
        }
    }
    out
}

fn disk_pools(c: &mut Checker, root: &Node) -> Vec<DiskPool> {
    let mut out = Vec::new();
    let Some(list) = root.get("disk_pools") else {
        return out;
    };
    for (i, d) in c.list(list, "disk_pools").iter().enumerate() {
        let path = format!("disk_pools[{i}]");
        c.map(d, &path, &["name", "disk_size", "cloud_properties"]);
        let name = text(c, d, &path, "name");
        let disk_size = size(c, d, &path, "disk_size").unwrap_or(0);
        if disk_size == 0 {
            c.report(&join(&path, "disk_size"), d.at, "must be > 0");
        }
        if let Some(name) = name {
            out.push(DiskPool {
                name,
                disk_size,
                cloud_properties: json(d, "cloud_properties"),
            });
        }
    }
    out
}

fn job_networks(c: &mut Checker, job: &Node, path: &str, nets: &[Network]) -> Vec<JobNetwork> {
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

fn job(c: &mut Checker, root: &Node, context: &Context) -> Option<Job> {
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
struct Context {
    releases: Vec<String>,
    resource_pools: Vec<String>,
    disk_pools: Vec<String>,
    networks: Vec<Network>,
}

fn cloud_provider(c: &mut Checker, root: &Node, releases: &[String]) -> Option<CloudProvider> {
    let Some(cp) = root.get("cloud_provider") else {
        c.report("cloud_provider", root.at, "must be provided");
        return None;
    };
    c.map(
        cp,
        "cloud_provider",
        &[
            "template",
            "templates",
            "mbus",
            "properties",
            "cert",
            "ssh_tunnel",
        ],
    );
    let template = match (cp.get("template"), cp.get("templates")) {
        (Some(t), None) => Some(t),
        (None, Some(list)) => match c.list(list, "cloud_provider.templates") {
            [one] => Some(one),
            _ => {
                c.report(
                    "cloud_provider.templates",
                    list.at,
                    "must hold the one CPI job",
                );
                None
            }
        },
        _ => {
            c.report(
                "cloud_provider.template",
                cp.at,
                "either cloud_provider.templates or cloud_provider.template must be provided",
            );
            None
        }
    };
    let (mut job, mut release) = (None, None);
    if let Some(t) = template {
        c.map(t, "cloud_provider.template", &["name", "release"]);
        job = text(c, t, "cloud_provider.template", "name");
        release = text(c, t, "cloud_provider.template", "release");
        if let Some(r) = &release
            && !releases.iter().any(|x| x == r)
        {
            c.report(
                "cloud_provider.template.release",
                t.at,
                format!("'{r}' must refer to a release in releases"),
            );
        }
    }
    let mbus = text(c, cp, "cloud_provider", "mbus");
    if let Some(m) = &mbus
        && let Err(e) = fleet_agent::mbus::MbusUrl::parse(m)
    {
        c.report("cloud_provider.mbus", cp.at, e);
    }
    let ca = cp.get("cert").and_then(|cert| {
        c.map(cert, "cloud_provider.cert", &["ca"]);
        optional_text(c, cert, "cloud_provider.cert", "ca")
    });
    if let Some(pem) = &ca
        && !pem.contains("-----BEGIN CERTIFICATE-----")
    {
        c.report("cloud_provider.cert.ca", cp.at, "Invalid CA cert");
    }
    let registry = cp
        .get("properties")
        .and_then(|p| p.get("registry"))
        .and_then(|r| registry(c, r));
    Some(CloudProvider {
        job: job?,
        release: release?,
        mbus: mbus?,
        properties: json(cp, "properties"),
        ca,
        registry,
    })
}

fn registry(c: &mut Checker, node: &Node) -> Option<super::registry::RegistrySettings> {
    let path = "cloud_provider.properties.registry";
    c.map(
        node,
        path,
        &["host", "port", "username", "password", "endpoint"],
    );
    let host = text(c, node, path, "host").and_then(|h| match h.parse() {
        Ok(ip) => Some(ip),
        Err(_) => {
            c.report(
                &join(path, "host"),
                node.at,
                format!("`{h}` must be an IP address"),
            );
            None
        }
    });
    let port = node.get("port").and_then(|p| {
        let port = c.integer(p, &join(path, "port"))?;
        u16::try_from(port).ok().or_else(|| {
            c.report(&join(path, "port"), p.at, "must be a port number");
            None
        })
    });
    if port.is_none() && node.get("port").is_none() {
        c.report(&join(path, "port"), node.at, "must be provided");
    }
    Some(super::registry::RegistrySettings {
        host: host?,
        port: port?,
        username: text(c, node, path, "username")?,
        password: text(c, node, path, "password")?,
    })
}

fn watch_time(c: &mut Checker, root: &Node) -> u64 {
    let default = 300_000;
    let Some(update) = root.get("update") else {
        return default;
    };
    c.map(
        update,
        "update",
        &[
            "update_watch_time",
            "canary_watch_time",
            "canaries",
            "max_in_flight",
            "serial",
        ],
    );
    let Some(w) = update.get("update_watch_time") else {
        return default;
    };
    let text = match &w.value {
        fleet_yaml::Value::Int(i) => i.to_string(),
        fleet_yaml::Value::Str(s) => s.clone(),
        _ => String::new(),
    };
    let end = text.rsplit('-').next().unwrap_or_default().trim();
    match end.parse::<u64>() {
        Ok(ms) => ms,
        Err(_) => {
            c.report(
                "update.update_watch_time",
                w.at,
                "must be N or A-B milliseconds",
            );
            default
        }
    }
}

/// Reads and checks an interpolated manifest.
///
/// # Errors
/// Every problem found, each naming its key.
pub fn parse(root: &Node) -> Result<EnvManifest, ManifestError> {
    let mut c = Checker::new();
    c.map(root, "", TOP);
    let name = text(&mut c, root, "", "name");
    let releases = releases(&mut c, root);
    let release_names: Vec<String> = releases.iter().map(|r| r.name.clone()).collect();
    let networks = networks(&mut c, root);
    let resource_pools = resource_pools(&mut c, root, &networks);
    let disk_pools = disk_pools(&mut c, root);
    let context = Context {
        releases: release_names.clone(),
        resource_pools: resource_pools.iter().map(|p| p.name.clone()).collect(),
        disk_pools: disk_pools.iter().map(|p| p.name.clone()).collect(),
        networks: networks.clone(),
    };
    let job = job(&mut c, root, &context);
    let cloud_provider = cloud_provider(&mut c, root, &release_names);
    let watch_time_ms = watch_time(&mut c, root);
    let problems: Vec<String> = c.into_problems().iter().map(ToString::to_string).collect();
    match (problems.is_empty(), name, job, cloud_provider) {
        (true, Some(name), Some(job), Some(cloud_provider)) => Ok(EnvManifest {
            name,
            releases,
            networks,
            resource_pools,
            disk_pools,
            job,
            properties: json(root, "properties"),
            cloud_provider,
            watch_time_ms,
        }),
        _ => Err(ManifestError(problems)),
    }
}

#[cfg(test)]
mod tests;
