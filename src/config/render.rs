//! The resolved configuration as YAML, every default filled in and every secret
//! redacted: what `check-config` prints.

use std::fmt::Write;
use std::path::Path;

use super::duration::format;
use super::model::Config;

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

fn path(p: &Path) -> Item {
    text(&p.display().to_string())
}

pub fn render(config: &Config) -> String {
    let broker = match &config.service_broker {
        None => plain("null"),
        Some(b) => Item::Map(vec![
            ("api_endpoint", text(&b.api_endpoint)),
            ("username", text(&b.username)),
            ("password", text(&b.password.to_string())),
            ("skip_ssl_validation", plain(b.skip_ssl_validation)),
            (
                "ca",
                match &b.ca {
                    None => plain("null"),
                    Some(pem) => text(&format!(
                        "<PEM, {} certificate(s)>",
                        pem.matches("-----BEGIN CERTIFICATE-----").count()
                    )),
                },
            ),
            ("timeout", plain(b.timeout.as_secs())),
        ]),
    };
    let root = Item::Map(vec![
        ("service_broker", broker),
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
            "output",
            Item::Map(vec![
                ("format", plain(config.format.as_str())),
                (
                    "report_file",
                    config.report_file.as_deref().map_or(plain("null"), path),
                ),
            ]),
        ),
        (
            "inventory",
            Item::Map(vec![
                ("type", plain(config.inventory.as_str())),
                (
                    "scenario",
                    config.scenario.as_deref().map_or(plain("null"), path),
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
