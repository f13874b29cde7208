//! The CPI's part of the manifest: `cloud_provider` (the CPI job, the mbus, properties,
//! the agent's CA, the registry) and how long the job may take to run.

use fleet_yaml::{Checker, Node, join};

use super::model::CloudProvider;
use super::read::{json, optional_text, text};
use crate::registry::RegistrySettings;

pub(super) fn cloud_provider(
    c: &mut Checker,
    root: &Node,
    releases: &[String],
) -> Option<CloudProvider> {
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
        c.report("cloud_provider.mbus", cp.at, e.to_string());
    }
    let ca = cp.get("cert").and_then(|cert| {
        // Usually a certificate variable's whole value: only its CA is read, as the bosh
        // CLI reads it.
        c.map(
            cert,
            "cloud_provider.cert",
            &["ca", "certificate", "private_key"],
        );
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

pub(super) fn registry(c: &mut Checker, node: &Node) -> Option<RegistrySettings> {
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
    Some(RegistrySettings {
        host: host?,
        port: port?,
        username: text(c, node, path, "username")?,
        password: text(c, node, path, "password")?,
    })
}

pub(super) fn watch_time(c: &mut Checker, root: &Node) -> u64 {
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
