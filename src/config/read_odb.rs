//! The On-Demand Service Broker's errand configuration (`upgrade-all-service-instances`
//! and `recreate-all-service-instances`, their `-configPath` file), read unchanged, with
//! the job spec's defaults and meanings: durations in seconds, `attempt_limit` as the
//! triggers per busy instance, `max_in_flight` for both strategies, `canaries` and
//! `canary_selection_params` for the update. `bosh`, `cf` and `maintenance_info_present`
//! are accepted and not used: the updater upgrades through the broker alone (see
//! docs/migrating-from-odb.md). A file is this kind when it has `broker_api`.

use std::num::NonZeroUsize;
use std::time::Duration;

use super::model::{Config, InventoryConfig};
use super::read_value::check_pem;
use crate::yaml::{Checker, Node, Value, join};
use fleet_inventory_broker::ServiceBroker;
use fleet_secret::Secret;

const TOP: &[&str] = &[
    "broker_api",
    "polling_interval",
    "attempt_interval",
    "attempt_limit",
    "request_timeout",
    "max_in_flight",
    "canaries",
    "canary_selection_params",
    "bosh",
    "cf",
    "maintenance_info_present",
    // Older ODB releases wrote it; the errands never used it.
    "service_instances_api",
];

/// Whether `root` is an ODB errand's configuration.
pub fn is_odb(root: &Node) -> bool {
    root.get("broker_api").is_some()
}

/// A whole number of seconds, or count, at least `min`.
fn number(checker: &mut Checker, node: &Node, path: &str, min: i64) -> Option<u64> {
    match node.value {
        Value::Int(n) if n >= min => u64::try_from(n).ok(),
        Value::Int(n) => {
            let what = if min > 0 {
                "must be greater than zero"
            } else {
                "cannot be negative"
            };
            checker.report(path, node.at, format!("{what}, got {n}"));
            None
        }
        ref other => {
            checker.report(
                path,
                node.at,
                format!("must be a whole number, found {}", other.kind()),
            );
            None
        }
    }
}

fn text(checker: &mut Checker, node: Option<&Node>, path: &str) -> Option<String> {
    node.and_then(|n| checker.string(n, path))
        .filter(|s| !s.is_empty())
}

pub fn read(root: &Node, config: &mut Config, checker: &mut Checker) {
    // The job spec's defaults; the errand's Go code has none of its own.
    config.poll_interval = Duration::from_secs(60);
    config.busy_interval = Duration::from_secs(60);
    config.busy_attempts = 5;
    let mut timeout = Duration::from_secs(120);
    let mut max_in_flight = NonZeroUsize::MIN;
    let mut canaries = 0;
    let mut broker = None;
    for (key, node) in checker.map(root, "", TOP) {
        let path = key.name.as_str();
        match path {
            "broker_api" => broker = Some(node),
            "polling_interval" => {
                if let Some(s) = number(checker, node, path, 1) {
                    config.poll_interval = Duration::from_secs(s);
                }
            }
            "attempt_interval" => {
                if let Some(s) = number(checker, node, path, 1) {
                    config.busy_interval = Duration::from_secs(s);
                }
            }
            "attempt_limit" => {
                if let Some(n) = number(checker, node, path, 1) {
                    config.busy_attempts = u32::try_from(n).unwrap_or(u32::MAX);
                }
            }
            // 0 is no limit to ODB's HTTP client; a day stands for it here.
            "request_timeout" => match number(checker, node, path, 0) {
                Some(0) => timeout = Duration::from_secs(86_400),
                Some(s) => timeout = Duration::from_secs(s),
                None => {}
            },
            "max_in_flight" => {
                if let Some(n) = number(checker, node, path, 1)
                    .and_then(|n| usize::try_from(n).ok().and_then(NonZeroUsize::new))
                {
                    max_in_flight = n;
                }
            }
            "canaries" => {
                if let Some(n) = number(checker, node, path, 0) {
                    canaries = usize::try_from(n).unwrap_or(usize::MAX);
                }
            }
            "canary_selection_params" if !matches!(node.value, Value::Null) => {
                config.canary_selection = super::read::criteria(node, path, checker);
            }
            "maintenance_info_present" => {
                checker.boolean(node, path);
            }
            // What the errand needs for its CF pass and its director version check.
            _ => {}
        }
    }
    config.update.max_in_parallel = max_in_flight;
    config.update.canaries = canaries;
    config.recreate.max_in_parallel = max_in_flight;
    // ODB's recreate-all takes no canaries (and so no canary selection).
    config.recreate.canaries = 0;
    config.recreate_selects_canaries = false;
    if let Some(found) = broker.and_then(|node| broker_api(node, timeout, checker)) {
        config.inventory = InventoryConfig::Broker(found);
    }
}

/// `broker_api: {url, authentication: {basic: {username, password}}, tls: {ca_cert,
/// disable_ssl_cert_verification}}`.
fn broker_api(node: &Node, timeout: Duration, checker: &mut Checker) -> Option<ServiceBroker> {
    let path = "broker_api";
    checker.map(node, path, &["url", "authentication", "tls"]);
    let url = text(checker, node.get("url"), &join(path, "url"));
    let basic = node.get("authentication").and_then(|a| {
        checker.map(a, &join(path, "authentication"), &["basic", "uaa"]);
        a.get("basic")
    });
    let credentials = basic.map(|b| {
        let at = "broker_api.authentication.basic";
        checker.map(b, at, &["username", "password"]);
        (
            text(checker, b.get("username"), &join(at, "username")),
            b.get("password")
                .and_then(|p| checker.string(p, &join(at, "password")))
                .filter(|p| !p.is_empty()),
        )
    });
    let mut ca = None;
    let mut skip = false;
    if let Some(tls) = node.get("tls") {
        let at = "broker_api.tls";
        checker.map(tls, at, &["ca_cert", "disable_ssl_cert_verification"]);
        if let Some(pem) = text(checker, tls.get("ca_cert"), &join(at, "ca_cert")) {
            match check_pem(&pem) {
                Ok(()) => ca = Some(pem),
                Err(refused) => checker.report(&join(at, "ca_cert"), tls.at, refused.to_string()),
            }
        }
        if let Some(b) = tls.get("disable_ssl_cert_verification") {
            skip = checker
                .boolean(b, &join(at, "disable_ssl_cert_verification"))
                .unwrap_or(false);
        }
    }
    match (url, credentials) {
        (Some(url), Some((Some(username), Some(password)))) => {
            if let Err(e) = super::read_value::check_endpoint(&url, path) {
                checker.report(&join(path, "url"), node.at, e.to_string());
                return None;
            }
            Some(ServiceBroker {
                api_endpoint: url,
                username,
                password: Secret::new(password),
                skip_ssl_validation: skip,
                ca,
                timeout,
            })
        }
        _ => {
            checker.report(
                path,
                node.at,
                "the broker's `url` and `authentication.basic.username` and `password` are \
                 required",
            );
            None
        }
    }
}
