//! The `serve` block: listen addresses, certificate, users and limits of the HTTP APIs.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use fleet_director::health_monitor::HealthMonitorSettings;

use super::read_value::{at_least, duration, path_value, secret, set};
use crate::yaml::{Checker, Node, join};
use fleet_serve::{ServeConfig, ServeUser};

const KEYS: &[&str] = &[
    "director",
    "broker",
    "tls",
    "users",
    "broker_users",
    "limits",
    "releases_on_host",
    "health_monitor",
    "metrics",
];
const HEALTH_MONITOR: &[&str] = &[
    "enabled",
    "interval",
    "agent_timeout",
    "check_timeout",
    "resurrector",
    "meltdown",
];
const MELTDOWN: &[&str] = &["minimum_down", "percent_threshold", "time_threshold"];
const LIMITS: &[&str] = &[
    "max_body_bytes",
    "request_timeout",
    "max_connections",
    "max_connections_per_client",
    "max_upload_bytes",
    "upload_timeout",
    "max_unpacked_bytes",
    "max_release_files",
    "max_expansion",
];

pub fn read_serve(node: &Node, base: &Path, serve: &mut ServeConfig, checker: &mut Checker) {
    for (key, value) in checker.map(node, "serve", KEYS) {
        let path = join("serve", &key.name);
        match key.name.as_str() {
            "director" => set(&mut serve.director_listen, listen(checker, value, &path)),
            "broker" => set(&mut serve.broker_listen, listen(checker, value, &path)),
            "tls" => {
                for (k, v) in checker.map(value, &path, &["certificate", "private_key"]) {
                    let p = join(&path, &k.name);
                    let file = path_value(checker, v, &p, Some(base));
                    if k.name == "certificate" {
                        serve.certificate = file;
                    } else {
                        serve.private_key = file;
                    }
                }
                if serve.certificate.is_some() != serve.private_key.is_some() {
                    checker.report(
                        &path,
                        value.at,
                        "give both `certificate` and `private_key`, or neither to have them \
                         generated",
                    );
                }
            }
            "users" => serve.users = read_users(value, &path, checker),
            "broker_users" => serve.broker_users = read_users(value, &path, checker),
            "releases_on_host" => set(&mut serve.releases_on_host, checker.boolean(value, &path)),
            "metrics" => serve.metrics_listen = listen(checker, value, &path),
            "health_monitor" => {
                serve.health_monitor = read_health_monitor(value, &path, checker);
            }
            _ => {
                for (k, v) in checker.map(value, &path, LIMITS) {
                    let p = join(&path, &k.name);
                    match k.name.as_str() {
                        "max_body_bytes" => set(
                            &mut serve.limits.max_body_bytes,
                            at_least(checker, v, &p, 1024).map(|n| n as usize),
                        ),
                        "request_timeout" => {
                            set(&mut serve.limits.request_timeout, duration(checker, v, &p))
                        }
                        "max_upload_bytes" => set(
                            &mut serve.limits.max_upload_bytes,
                            at_least(checker, v, &p, 1024).map(|n| n as usize),
                        ),
                        "upload_timeout" => {
                            set(&mut serve.limits.upload_timeout, duration(checker, v, &p))
                        }
                        "max_unpacked_bytes" => set(
                            &mut serve.limits.max_unpacked_bytes,
                            at_least(checker, v, &p, 1024 * 1024).map(|n| n as u64),
                        ),
                        "max_release_files" => set(
                            &mut serve.limits.max_release_files,
                            at_least(checker, v, &p, 1).map(|n| n as usize),
                        ),
                        "max_expansion" => set(
                            &mut serve.limits.max_expansion,
                            at_least(checker, v, &p, 1).map(|n| n as u64),
                        ),
                        "max_connections_per_client" => set(
                            &mut serve.limits.max_connections_per_client,
                            at_least(checker, v, &p, 1).map(|n| n as usize),
                        ),
                        _ => set(
                            &mut serve.limits.max_connections,
                            at_least(checker, v, &p, 1).map(|n| n as usize),
                        ),
                    }
                }
            }
        }
    }
}

/// `enabled: false` turns the monitor off; the other keys change BOSH's defaults.
fn read_health_monitor(
    node: &Node,
    path: &str,
    checker: &mut Checker,
) -> Option<HealthMonitorSettings> {
    let mut settings = HealthMonitorSettings::default();
    let mut enabled = true;
    for (k, v) in checker.map(node, path, HEALTH_MONITOR) {
        let p = join(path, &k.name);
        match k.name.as_str() {
            "enabled" => set(&mut enabled, checker.boolean(v, &p)),
            "interval" => set(&mut settings.interval, at_least_a_second(checker, v, &p)),
            "agent_timeout" => set(
                &mut settings.agent_timeout,
                at_least_a_second(checker, v, &p),
            ),
            "check_timeout" => set(
                &mut settings.check_timeout,
                at_least_a_second(checker, v, &p),
            ),
            "resurrector" => set(&mut settings.resurrector, checker.boolean(v, &p)),
            _ => {
                for (mk, mv) in checker.map(v, &p, MELTDOWN) {
                    let mp = join(&p, &mk.name);
                    match mk.name.as_str() {
                        "minimum_down" => set(
                            &mut settings.meltdown.minimum_down,
                            at_least(checker, mv, &mp, 1).map(|n| n as usize),
                        ),
                        "percent_threshold" => {
                            let share = checker.number(mv, &mp);
                            if share.is_some_and(|s| !(0.0..=1.0).contains(&s)) {
                                checker.report(
                                    &mp,
                                    mv.at,
                                    "must be a fraction from 0 to 1, like 0.2",
                                );
                            } else {
                                set(&mut settings.meltdown.percent_threshold, share);
                            }
                        }
                        _ => set(
                            &mut settings.meltdown.time_threshold,
                            at_least_a_second(checker, mv, &mp),
                        ),
                    }
                }
            }
        }
    }
    enabled.then_some(settings)
}

fn at_least_a_second(checker: &mut Checker, node: &Node, path: &str) -> Option<Duration> {
    let time = duration(checker, node, path)?;
    if time < Duration::from_secs(1) {
        checker.report(path, node.at, "must be at least 1s");
        return None;
    }
    Some(time)
}

fn read_users(node: &Node, path: &str, checker: &mut Checker) -> Vec<ServeUser> {
    let mut users: Vec<ServeUser> = Vec::new();
    for (i, item) in checker.list(node, path).iter().enumerate() {
        let p = format!("{path}[{i}]");
        let (mut name, mut password) = (None, None);
        let mut scopes = vec!["bosh.admin".to_string()];
        for (k, v) in checker.map(item, &p, &["name", "password", "scopes"]) {
            let kp = join(&p, &k.name);
            if k.name == "scopes" {
                scopes = read_scopes(v, &kp, checker);
            } else if k.name == "name" {
                name = checker
                    .string(v, &kp)
                    .filter(|n| !n.is_empty() && !n.contains(':'));
                if name.is_none() {
                    checker.report(&kp, v.at, "must be a non-empty name without `:`");
                }
            } else {
                password = secret(checker, v, &kp).filter(|s| !s.expose().is_empty());
                if password.is_none() {
                    checker.report(&kp, v.at, "must be a non-empty string");
                }
            }
        }
        match (name, password) {
            (Some(name), Some(password)) => {
                if users.iter().any(|u| u.name == name) {
                    checker.report(&p, item.at, format!("user `{name}` is listed twice"));
                }
                users.push(ServeUser {
                    name,
                    password,
                    scopes,
                });
            }
            (None, _) if item.get("name").is_none() => {
                checker.report(&p, item.at, "a user needs a `name`")
            }
            (_, None) if item.get("password").is_none() => {
                checker.report(&p, item.at, "a user needs a `password`")
            }
            _ => {}
        }
    }
    users
}

/// A user's scopes: those the director honours that `serve` takes so far.
fn read_scopes(node: &Node, path: &str, checker: &mut Checker) -> Vec<String> {
    let mut scopes = Vec::new();
    let items = checker.list(node, path);
    for (i, item) in items.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let Some(scope) = checker.string(item, &p) else {
            continue;
        };
        match fleet_serve::scopes::check(&scope) {
            Ok(()) => scopes.push(scope),
            Err(why) => checker.report(&p, item.at, why),
        }
    }
    // Said once: an item already reported says what is wrong.
    if items.is_empty() && matches!(node.value, crate::yaml::Value::Seq(_)) {
        checker.report(path, node.at, "a user needs at least one scope");
    }
    scopes
}

fn listen(checker: &mut Checker, node: &Node, path: &str) -> Option<SocketAddr> {
    let text = checker.string(node, path)?;
    match text.parse::<SocketAddr>() {
        Ok(addr) => Some(addr),
        Err(_) => {
            checker.report(
                path,
                node.at,
                format!("`{text}` is not an address and port like `127.0.0.1:25555`"),
            );
            None
        }
    }
}
