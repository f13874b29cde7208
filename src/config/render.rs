//! The resolved configuration as YAML, every default filled in and every secret
//! redacted: what `check-config` prints.

use std::fmt::Write;
use std::path::Path;

use super::duration::format;
use super::model::{CanaryCheckKind, Config, InventoryConfig};
use fleet_inventory_director::DirectorAuth;
use fleet_rollout::filter::Criteria as FilterCriteria;

enum Item {
    Scalar(String),
    Map(Vec<(&'static str, Item)>),
}

fn text(s: &str) -> Item {
    // A JSON string literal is a valid YAML double-quoted scalar.
    Item::Scalar(serde_json::to_string(s).expect("strings serialize"))
}

fn plain(s: impl ToString) -> Item {
    Item::Scalar(s.to_string())
}

/// A CA bundle is shown by its size, not its text.
fn pem(pem: Option<&str>) -> Item {
    match pem {
        None => plain("null"),
        Some(pem) => text(&format!(
            "<PEM, {} certificate(s)>",
            pem.matches("-----BEGIN CERTIFICATE-----").count()
        )),
    }
}

fn path(p: &Path) -> Item {
    text(&p.display().to_string())
}

/// One side of a selection, each list as a JSON array (a YAML flow sequence).
fn criteria(c: &FilterCriteria) -> Item {
    let list = |l: &Vec<String>| plain(serde_json::to_string(l).expect("strings serialize"));
    Item::Map(vec![
        ("plans", list(&c.plans)),
        ("instances", list(&c.instances)),
        ("orgs", list(&c.orgs)),
        ("spaces", list(&c.spaces)),
    ])
}

pub fn render(config: &Config) -> String {
    let broker = match &config.inventory {
        InventoryConfig::Broker(b) => Item::Map(vec![
            ("api_endpoint", text(&b.api_endpoint)),
            ("username", text(&b.username)),
            ("password", text(&b.password.to_string())),
            ("skip_ssl_validation", plain(b.skip_ssl_validation)),
            ("ca", pem(b.ca.as_deref())),
            ("timeout", plain(b.timeout.as_secs())),
        ]),
        _ => plain("null"),
    };
    let director = match &config.inventory {
        InventoryConfig::Director(d) => {
            let mut entries = vec![("url", text(&d.url))];
            match &d.auth {
                DirectorAuth::Basic { username, password } => {
                    entries.push(("username", text(username)));
                    entries.push(("password", text(&password.to_string())));
                }
                DirectorAuth::Uaa {
                    client,
                    client_secret,
                } => {
                    entries.push(("client", text(client)));
                    entries.push(("client_secret", text(&client_secret.to_string())));
                }
            }
            entries.extend([
                ("ca", pem(d.ca.as_deref())),
                ("skip_ssl_validation", plain(d.skip_ssl_validation)),
                ("timeout", plain(format(d.timeout))),
                ("deployments", text(&d.deployments)),
            ]);
            Item::Map(entries)
        }
        _ => plain("null"),
    };
    let serve = &config.serve;
    let listed = |users: &[fleet_serve::ServeUser]| {
        plain(format!(
            "[{}]",
            users
                .iter()
                .map(|u| format!(
                    "{{name: {}, password: {}, scopes: [{}]}}",
                    serde_json::to_string(&u.name).expect("strings serialize"),
                    serde_json::to_string(&u.password.to_string()).expect("strings serialize"),
                    u.scopes.join(", ")
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    let users = if serve.users.is_empty() {
        plain("[]  # generated in the state directory")
    } else {
        listed(&serve.users)
    };
    let broker_users = if serve.broker_users.is_empty() {
        plain("[]  # the director's")
    } else {
        listed(&serve.broker_users)
    };
    let serve = Item::Map(vec![
        ("director", text(&serve.director_listen.to_string())),
        ("broker", text(&serve.broker_listen.to_string())),
        (
            "tls",
            Item::Map(vec![
                (
                    "certificate",
                    serve.certificate.as_deref().map_or(
                        plain(
                            "null  # a CA and a certificate are generated in the state directory",
                        ),
                        path,
                    ),
                ),
                (
                    "private_key",
                    serve.private_key.as_deref().map_or(plain("null"), path),
                ),
            ]),
        ),
        ("users", users),
        ("broker_users", broker_users),
        (
            "limits",
            Item::Map(vec![
                ("max_body_bytes", plain(serve.limits.max_body_bytes)),
                (
                    "request_timeout",
                    plain(format(serve.limits.request_timeout)),
                ),
                ("max_connections", plain(serve.limits.max_connections)),
                (
                    "max_connections_per_client",
                    plain(serve.limits.max_connections_per_client),
                ),
                ("max_upload_bytes", plain(serve.limits.max_upload_bytes)),
                ("upload_timeout", plain(format(serve.limits.upload_timeout))),
                ("max_unpacked_bytes", plain(serve.limits.max_unpacked_bytes)),
                ("max_release_files", plain(serve.limits.max_release_files)),
                ("max_expansion", plain(serve.limits.max_expansion)),
            ]),
        ),
        ("releases_on_host", plain(serve.releases_on_host)),
        (
            "metrics",
            serve
                .metrics_listen
                .map_or(plain("null  # /metrics on the director API only"), |a| {
                    text(&a.to_string())
                }),
        ),
        (
            "health_monitor",
            match &serve.health_monitor {
                None => Item::Map(vec![("enabled", plain(false))]),
                Some(m) => Item::Map(vec![
                    ("enabled", plain(true)),
                    ("interval", plain(format(m.interval))),
                    ("agent_timeout", plain(format(m.agent_timeout))),
                    ("check_timeout", plain(format(m.check_timeout))),
                    ("resurrector", plain(m.resurrector)),
                    (
                        "meltdown",
                        Item::Map(vec![
                            ("minimum_down", plain(m.meltdown.minimum_down)),
                            ("percent_threshold", plain(m.meltdown.percent_threshold)),
                            ("time_threshold", plain(format(m.meltdown.time_threshold))),
                        ]),
                    ),
                ]),
            },
        ),
    ]);
    let root = Item::Map(vec![
        ("service_broker", broker),
        ("director", director),
        (
            "strategy",
            Item::Map(vec![
                ("type", plain(config.strategy.as_str())),
                (
                    "update",
                    Item::Map(vec![
                        ("instance_type", plain(config.update.instance_type.as_str())),
                        ("force_update", plain(config.update.force_update)),
                        ("max_in_parallel", plain(config.update.max_in_parallel)),
                        ("canaries", plain(config.update.canaries)),
                    ]),
                ),
                (
                    "recreate",
                    Item::Map(vec![
                        ("max_in_parallel", plain(config.recreate.max_in_parallel)),
                        ("canaries", plain(config.recreate.canaries)),
                        ("fix", plain(config.recreate.fix)),
                        ("force", plain(config.recreate.force)),
                    ]),
                ),
            ]),
        ),
        (
            "busy_retry",
            Item::Map(vec![
                ("attempts", plain(config.busy_attempts)),
                ("interval", plain(format(config.busy_interval))),
            ]),
        ),
        (
            "polling",
            Item::Map(vec![("interval", plain(format(config.poll_interval)))]),
        ),
        ("operation_timeout", plain(format(config.operation_timeout))),
        (
            "rate_limit",
            Item::Map(vec![(
                "requests_per_second",
                plain(config.requests_per_second),
            )]),
        ),
        ("shutdown_grace_period", plain(format(config.grace_period))),
        (
            "selection",
            Item::Map(vec![
                ("include", criteria(&config.filter.include)),
                ("exclude", criteria(&config.filter.exclude)),
                (
                    "first",
                    plain(serde_json::to_string(&config.filter.first).expect("strings serialize")),
                ),
            ]),
        ),
        (
            "canary_check",
            match &config.canary_check {
                None => plain("null"),
                Some(check) => Item::Map(vec![
                    match &check.kind {
                        CanaryCheckKind::Command { program, args } => {
                            let mut words = vec![program.display().to_string()];
                            words.extend(args.iter().cloned());
                            (
                                "command",
                                plain(serde_json::to_string(&words).expect("strings serialize")),
                            )
                        }
                        CanaryCheckKind::Errand(name) => ("errand", text(name)),
                    },
                    ("timeout", plain(format(check.timeout))),
                ]),
            },
        ),
        (
            // A JSON object is a YAML flow mapping.
            "canary_selection",
            plain(serde_json::to_string(&config.canary_selection).expect("strings serialize")),
        ),
        (
            "output",
            Item::Map(vec![
                ("format", plain(config.format.as_str())),
                (
                    "report_file",
                    config.report_file.as_deref().map_or(plain("null"), path),
                ),
                (
                    "metrics_file",
                    config.metrics_file.as_deref().map_or(plain("null"), path),
                ),
            ]),
        ),
        (
            "schedule",
            match &config.schedule {
                None => plain("null  # no window: a run may start at any time"),
                Some(s) => Item::Map(vec![
                    ("window", text(&s.text)),
                    ("time_zone", text(&s.time_zone)),
                    (
                        "weekdays",
                        plain(format!(
                            "[{}]",
                            s.weekdays
                                .iter()
                                .map(|d| serde_json::to_string(d).expect("strings serialize"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                    ),
                    ("grace_period", plain(format(s.grace_period))),
                ]),
            },
        ),
        (
            "inventory",
            Item::Map(vec![
                ("type", plain(config.inventory.kind().as_str())),
                (
                    "scenario",
                    match &config.inventory {
                        InventoryConfig::Scripted { scenario } => path(scenario),
                        _ => plain("null"),
                    },
                ),
            ]),
        ),
        (
            "embedded",
            Item::Map(vec![
                (
                    "fleet",
                    config
                        .fleet
                        .as_deref()
                        .map_or(plain("null  # the built-in demo fleet"), path),
                ),
                (
                    "faults",
                    if config.faults.is_empty() {
                        plain("[]")
                    } else {
                        plain(format!(
                            "[{}]",
                            config
                                .faults
                                .iter()
                                .map(|f| format!(
                                    "{{kind: {}, deployment: {}, probability: {}}}",
                                    f.kind.as_str(),
                                    serde_json::to_string(&f.deployment)
                                        .expect("strings serialize"),
                                    f.probability
                                ))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    },
                ),
            ]),
        ),
        ("state_dir", path(&config.state_dir)),
        (
            "store",
            match &config.store {
                None => plain("null  # SQLite in the state directory"),
                Some(store) => Item::Map(vec![
                    ("url", text(store.url.as_deref().unwrap_or_default())),
                    (
                        "password_file",
                        store.password_file.as_deref().map_or(
                            plain("null  # the FLEET_STORE_PASSWORD environment variable"),
                            path,
                        ),
                    ),
                    (
                        "ca_file",
                        store
                            .ca_file
                            .as_deref()
                            .map_or(plain("null  # no TLS"), path),
                    ),
                ]),
            },
        ),
        ("serve", serve),
    ]);
    let mut out = String::new();
    write_item(&mut out, &root, 0);
    out
}

fn write_item(out: &mut String, item: &Item, indent: usize) {
    let Item::Map(entries) = item else {
        return;
    };
    for (key, value) in entries {
        match value {
            Item::Scalar(s) => {
                let _ = writeln!(out, "{:indent$}{key}: {s}", "");
            }
            Item::Map(_) => {
                let _ = writeln!(out, "{:indent$}{key}:", "");
                write_item(out, value, indent + 2);
            }
        }
    }
}
