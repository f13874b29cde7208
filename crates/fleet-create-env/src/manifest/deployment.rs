//! The deployment's parts besides its job: releases, networks, resource pools and disk
//! pools, each checked with the problems named by key.

use std::net::Ipv4Addr;

use fleet_yaml::{Checker, Node, join};
use ipnet::Ipv4Net;

use super::model::{DiskPool, Network, NetworkKind, ReleaseEntry, ResourcePool};
use super::read::{json, optional_text, size, text};

pub(super) fn releases(c: &mut Checker, root: &Node) -> Vec<ReleaseEntry> {
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

pub(super) fn networks(c: &mut Checker, root: &Node) -> Vec<Network> {
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

pub(super) fn resource_pools(c: &mut Checker, root: &Node, nets: &[Network]) -> Vec<ResourcePool> {
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

pub(super) fn disk_pools(c: &mut Checker, root: &Node) -> Vec<DiskPool> {
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
