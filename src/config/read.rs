//! From the YAML tree to a [`Config`], collecting every problem in one walk.

use std::path::Path;
use std::time::Duration;

use super::model::{Config, Format, InventoryConfig, InventoryKind, StrategyKind};
use super::read_director::DirectorFields;
use super::read_schedule::read_schedule;
use super::read_serve::read_serve;
use super::read_value::{
    at_least, check_endpoint, check_pem, count, duration, path_value, positive, secret, set,
};
use crate::fleet::{FaultText, parse_fault};
use crate::inventory::Selection;
use crate::rollout::Rate;
use crate::yaml::{Checker, Node, Position, Value, join};
use fleet_inventory_broker::ServiceBroker;
use fleet_secret::Secret;

const TOP: &[&str] = &[
    "service_broker",
    "strategy",
    "busy_retry",
    "polling",
    "operation_timeout",
    "rate_limit",
    "shutdown_grace_period",
    "output",
    "inventory",
    "embedded",
    "state_dir",
    "director",
    "serve",
    "schedule",
    "store",
    "canary_selection",
    "selection",
    "canary_check",
];
const BROKER: &[&str] = &[
    "api_endpoint",
    "username",
    "password",
    "skip_ssl_validation",
    "ca",
    "timeout",
];
const STRATEGY: &[&str] = &["type", "update", "recreate"];
const UPDATE: &[&str] = &[
    "instance_type",
    "force_update",
    "max_in_parallel",
    "canaries",
];
const RECREATE: &[&str] = &["max_in_parallel", "canaries", "fix", "force"];
const INSTANCE_TYPES: &[&str] = &["outdated", "provisioned", "failed"];
/// One request every 1,000 s at the slowest; a million per second is no limit at all.
const MIN_RATE: f64 = 0.001;
const MAX_RATE: f64 = 1_000_000.0;
const INVENTORIES: &[&str] = &["embedded", "broker", "director", "scripted"];

/// Reads the document into `config` (which holds the defaults); `base` is the folder that
/// relative paths inside the file are resolved against.
pub fn read(root: &Node, base: &Path, config: &mut Config, checker: &mut Checker) {
    let mut broker = BrokerFields::default();
    let mut director = DirectorFields::default();
    let mut inventory_at = None;
    let mut kind = InventoryKind::Embedded;
    let mut scenario = None;
    for (key, node) in checker.map(root, "", TOP) {
        let path = key.name.as_str();
        match path {
            "service_broker" => broker.read(node, checker),
            "strategy" => read_strategy(node, config, checker),
            "busy_retry" => {
                for (k, v) in checker.map(node, path, &["attempts", "interval"]) {
                    let p = join(path, &k.name);
                    match k.name.as_str() {
                        "attempts" => {
                            if let Some(n) = at_least(checker, v, &p, 1) {
                                config.busy_attempts = u32::try_from(n).unwrap_or(u32::MAX);
                            }
                        }
                        _ => set(&mut config.busy_interval, duration(checker, v, &p)),
                    }
                }
            }
            "canary_selection" => {
                config.canary_selection = criteria(node, path, checker);
            }
            "selection" => read_selection(node, path, config, checker),
            "canary_check" => read_canary_check(node, path, base, config, checker),
            "polling" => {
                for (k, v) in checker.map(node, path, &["interval"]) {
                    set(
                        &mut config.poll_interval,
                        duration(checker, v, &join(path, &k.name)),
                    );
                }
            }
            "operation_timeout" => {
                set(&mut config.operation_timeout, duration(checker, node, path))
            }
            "shutdown_grace_period" => set(&mut config.grace_period, duration(checker, node, path)),
            "rate_limit" => {
                for (k, v) in checker.map(node, path, &["requests_per_second"]) {
                    let p = join(path, &k.name);
                    if let Some(rps) = checker.number(v, &p) {
                        if (MIN_RATE..=MAX_RATE).contains(&rps)
                            && let Ok(rate) = Rate::per_second(rps)
                        {
                            config.requests_per_second = rate;
                        } else {
                            checker.report(
                                &p,
                                v.at,
                                format!("must be between {MIN_RATE} and {MAX_RATE}, got {rps}"),
                            );
                        }
                    }
                }
            }
            "output" => {
                let keys = ["format", "report_file", "metrics_file"];
                for (k, v) in checker.map(node, path, &keys) {
                    let p = join(path, &k.name);
                    match k.name.as_str() {
                        "format" => match checker.choice(v, &p, &["text", "json"]) {
                            Some("json") => config.format = Format::Json,
                            Some(_) => config.format = Format::Text,
                            None => {}
                        },
                        "metrics_file" => config.metrics_file = path_value(checker, v, &p, None),
                        _ => config.report_file = path_value(checker, v, &p, None),
                    }
                }
            }
            "inventory" => {
                for (k, v) in checker.map(node, path, &["type", "scenario"]) {
                    let p = join(path, &k.name);
                    match k.name.as_str() {
                        "type" => {
                            inventory_at = Some(v.at);
                            kind = match checker.choice(v, &p, INVENTORIES) {
                                Some("broker") => InventoryKind::Broker,
                                Some("director") => InventoryKind::Director,
                                Some("scripted") => InventoryKind::Scripted,
                                _ => InventoryKind::Embedded,
                            };
                        }
                        _ => scenario = path_value(checker, v, &p, Some(base)),
                    }
                }
            }
            "embedded" => read_embedded(node, base, config, checker),
            "director" => director.read(node, checker),
            "serve" => read_serve(node, base, &mut config.serve, checker),
            "schedule" => config.schedule = read_schedule(node, checker),
            "state_dir" => {
                if let Some(dir) = path_value(checker, node, path, Some(base)) {
                    config.state_dir = dir;
                }
            }
            "store" => config.store = super::read_store::read_store(node, base, checker),
            _ => {}
        }
    }
    let broker = broker.resolve(checker);
    let director = director.resolve(checker);
    config.inventory = match (inventory_at, broker, director) {
        (None, Some(broker), None) => InventoryConfig::Broker(broker),
        (None, None, Some(director)) => InventoryConfig::Director(director),
        (None, Some(_), Some(_)) => {
            checker.report(
                "inventory.type",
                Position::default(),
                "both `service_broker` and `director` are given: say which one to update with \
             `inventory.type: broker` or `inventory.type: director`",
            );
            InventoryConfig::Embedded
        }
        (None, None, None) => InventoryConfig::Embedded,
        (Some(at), broker, director) => {
            // The chosen inventory, or the problem of its missing block.
            let mut chosen = |config: Option<InventoryConfig>, key: &str, problem: &str| {
                config.unwrap_or_else(|| {
                    checker.report(key, at, problem);
                    InventoryConfig::Embedded
                })
            };
            match kind {
                InventoryKind::Embedded => InventoryConfig::Embedded,
                InventoryKind::Broker => chosen(
                    broker.map(InventoryConfig::Broker),
                    "inventory.type",
                    "`broker` needs `service_broker.api_endpoint`, `username` and `password`",
                ),
                InventoryKind::Director => chosen(
                    director.map(InventoryConfig::Director),
                    "inventory.type",
                    "`director` needs `director.url` and its credentials",
                ),
                InventoryKind::Scripted => chosen(
                    scenario.map(|scenario| InventoryConfig::Scripted { scenario }),
                    "inventory.scenario",
                    "the scripted inventory needs a scenario file",
                ),
            }
        }
    };
    let errand = matches!(
        config.canary_check.as_ref().map(|c| &c.kind),
        Some(super::model::CanaryCheckKind::Errand(_))
    );
    if errand
        && matches!(
            config.inventory,
            InventoryConfig::Broker(_) | InventoryConfig::Scripted { .. }
        )
    {
        checker.report(
            "canary_check.errand",
            Position::default(),
            "an errand check runs through a director: use the embedded or director \
             inventory, or a `command`",
        );
    }
}

fn read_embedded(node: &Node, base: &Path, config: &mut Config, checker: &mut Checker) {
    for (key, value) in checker.map(node, "embedded", &["fleet", "faults"]) {
        let path = join("embedded", &key.name);
        if key.name == "fleet" {
            config.fleet = path_value(checker, value, &path, Some(base));
            continue;
        }
        for (i, item) in checker.list(value, &path).iter().enumerate() {
            let p = format!("{path}[{i}]");
            let mut fault = FaultText {
                kind: String::new(),
                deployment: String::new(),
                instance_group: String::new(),
                probability: 1.0,
            };
            let keys = ["kind", "deployment", "instance_group", "probability"];
            for (k, v) in checker.map(item, &p, &keys) {
                let kp = join(&p, &k.name);
                match k.name.as_str() {
                    "kind" => {
                        if let Some(kind) = checker.choice(
                            v,
                            &kp,
                            &["create_vm", "unresponsive", "job_start", "errand"],
                        ) {
                            fault.kind = kind.to_string();
                        }
                    }
                    "deployment" => set(&mut fault.deployment, checker.string(v, &kp)),
                    "instance_group" => set(&mut fault.instance_group, checker.string(v, &kp)),
                    _ => set(&mut fault.probability, checker.number(v, &kp)),
                }
            }
            if fault.kind.is_empty() {
                if item.get("kind").is_none() {
                    checker.report(&p, item.at, "a fault needs a `kind`");
                }
                continue;
            }
            match parse_fault(&fault) {
                Ok(f) => config.faults.push(f),
                Err(e) => checker.report(&p, item.at, e.to_string()),
            }
        }
    }
}

fn read_strategy(node: &Node, config: &mut Config, checker: &mut Checker) {
    for (key, value) in checker.map(node, "strategy", STRATEGY) {
        let path = join("strategy", &key.name);
        match key.name.as_str() {
            "type" => match checker.choice(value, &path, &["update", "recreate"]) {
                Some("recreate") => config.strategy = StrategyKind::Recreate,
                Some(_) => config.strategy = StrategyKind::Update,
                None => {}
            },
            "update" => {
                for (k, v) in checker.map(value, &path, UPDATE) {
                    let p = join(&path, &k.name);
                    let update = &mut config.update;
                    match k.name.as_str() {
                        "instance_type" => match checker.choice(v, &p, INSTANCE_TYPES) {
                            Some("provisioned") => update.instance_type = Selection::Provisioned,
                            Some("failed") => update.instance_type = Selection::Failed,
                            Some(_) => update.instance_type = Selection::Outdated,
                            None => {}
                        },
                        "force_update" => set(&mut update.force_update, checker.boolean(v, &p)),
                        "max_in_parallel" => {
                            set(&mut update.max_in_parallel, positive(checker, v, &p))
                        }
                        _ => set(&mut update.canaries, count(checker, v, &p, 0)),
                    }
                }
            }
            _ => {
                for (k, v) in checker.map(value, &path, RECREATE) {
                    let p = join(&path, &k.name);
                    let recreate = &mut config.recreate;
                    match k.name.as_str() {
                        "max_in_parallel" => {
                            set(&mut recreate.max_in_parallel, positive(checker, v, &p))
                        }
                        "canaries" => set(&mut recreate.canaries, count(checker, v, &p, 0)),
                        "fix" => set(&mut recreate.fix, checker.boolean(v, &p)),
                        _ => set(&mut recreate.force, checker.boolean(v, &p)),
                    }
                }
            }
        }
    }
}

/// The `service_broker` keys as written; checked together once all are read, because
/// an endpoint needs its credentials.
#[derive(Default)]
struct BrokerFields {
    at: Option<Position>,
    /// The key was written, valid or not: an invalid endpoint is reported once, not again
    /// as missing.
    endpoint_written: bool,
    api_endpoint: Option<(String, Position)>,
    username: Option<String>,
    password: Option<Secret>,
    skip_ssl_validation: bool,
    ca: Option<String>,
    timeout: Option<Duration>,
}

impl BrokerFields {
    fn read(&mut self, node: &Node, checker: &mut Checker) {
        self.at = Some(node.at);
        for (key, value) in checker.map(node, "service_broker", BROKER) {
            let path = join("service_broker", &key.name);
            match key.name.as_str() {
                "api_endpoint" => {
                    self.endpoint_written = true;
                    if let Some(url) = checker.string(value, &path) {
                        match check_endpoint(&url, "service_broker") {
                            Ok(()) => self.api_endpoint = Some((url, value.at)),
                            Err(refused) => checker.report(&path, value.at, refused.to_string()),
                        }
                    }
                }
                "username" => self.username = checker.string(value, &path),
                "password" => self.password = secret(checker, value, &path),
                "skip_ssl_validation" => {
                    set(&mut self.skip_ssl_validation, checker.boolean(value, &path))
                }
                "ca" => {
                    if let Some(pem) = checker.string(value, &path) {
                        match check_pem(&pem) {
                            Ok(()) => self.ca = Some(pem),
                            Err(refused) => checker.report(&path, value.at, refused.to_string()),
                        }
                    }
                }
                _ => {
                    self.timeout = match &value.value {
                        Value::Int(s) if *s >= 1 => Some(Duration::from_secs(*s as u64)),
                        Value::Int(s) => {
                            checker.report(
                                &path,
                                value.at,
                                format!("must be at least 1 second, got {s}"),
                            );
                            None
                        }
                        _ => duration(checker, value, &path),
                    }
                }
            }
        }
    }

    fn resolve(self, checker: &mut Checker) -> Option<ServiceBroker> {
        let at = self.at?;
        let Some((api_endpoint, endpoint_at)) = self.api_endpoint else {
            if !self.endpoint_written && (self.username.is_some() || self.password.is_some()) {
                checker.report(
                    "service_broker",
                    at,
                    "credentials are given but `api_endpoint` is missing",
                );
            }
            return None;
        };
        let (Some(username), Some(password)) = (self.username, self.password) else {
            checker.report(
                "service_broker.api_endpoint",
                endpoint_at,
                "a broker endpoint needs `service_broker.username` and `service_broker.password`",
            );
            return None;
        };
        Some(ServiceBroker {
            api_endpoint,
            username,
            password,
            skip_ssl_validation: self.skip_ssl_validation,
            ca: self.ca,
            timeout: self.timeout.unwrap_or(Duration::from_secs(120)),
        })
    }
}

/// A map of listing criteria: each value a string (a number or boolean is taken as
/// written), as a broker's query parameters carry them.
pub(super) fn criteria(
    node: &Node,
    path: &str,
    checker: &mut Checker,
) -> crate::rollout::inventory::Criteria {
    let mut found = crate::rollout::inventory::Criteria::new();
    let Value::Map(entries) = &node.value else {
        checker.report(
            path,
            node.at,
            "must be a mapping of listing parameters to values, e.g. {cf_org: system, \
             cf_space: canaries}",
        );
        return found;
    };
    for (key, value) in entries {
        let text = match &value.value {
            Value::Str(s) if !s.is_empty() => Some(s.clone()),
            Value::Int(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Float(f) => Some(f.to_string()),
            _ => None,
        };
        match text {
            Some(text) => {
                found.insert(key.name.clone(), text);
            }
            None => checker.report(
                &join(path, &key.name),
                value.at,
                "must be a non-empty string, number or boolean",
            ),
        }
    }
    found
}

/// `selection: {include: {...}, exclude: {...}, first: [ids]}`: which instances a run may
/// touch, and which go right after the canaries.
fn read_selection(node: &Node, path: &str, config: &mut Config, checker: &mut Checker) {
    for (key, value) in checker.map(node, path, &["include", "exclude", "first"]) {
        let here = join(path, &key.name);
        match key.name.as_str() {
            "first" => config.filter.first = strings(value, &here, checker),
            side => {
                let target = if side == "include" {
                    &mut config.filter.include
                } else {
                    &mut config.filter.exclude
                };
                for (k, v) in checker.map(value, &here, &["plans", "instances", "orgs", "spaces"]) {
                    let at = join(&here, &k.name);
                    let list = strings(v, &at, checker);
                    match k.name.as_str() {
                        "plans" => target.plans = list,
                        "instances" => {
                            for pattern in &list {
                                if let Err(e) = crate::rollout::filter::pattern(pattern) {
                                    checker.report(&at, v.at, e.to_string());
                                }
                            }
                            target.instances = list;
                        }
                        "orgs" => target.orgs = list,
                        _ => target.spaces = list,
                    }
                }
            }
        }
    }
}

/// A list of non-empty strings.
fn strings(node: &Node, path: &str, checker: &mut Checker) -> Vec<String> {
    checker
        .list(node, path)
        .iter()
        .filter_map(|item| checker.string(item, path))
        .filter(|s| !s.is_empty())
        .collect()
}

/// `canary_check: {command: [PROGRAM, ARG...] | errand: NAME, timeout: DURATION}`.
fn read_canary_check(
    node: &Node,
    path: &str,
    base: &Path,
    config: &mut Config,
    checker: &mut Checker,
) {
    use super::model::{CANARY_CHECK_TIMEOUT, CanaryCheckConfig, CanaryCheckKind};
    let mut kind = None;
    let mut timeout = CANARY_CHECK_TIMEOUT;
    let entries = checker.map(node, path, &["command", "errand", "timeout"]);
    for (key, value) in &entries {
        let here = join(path, &key.name);
        match key.name.as_str() {
            "command" => {
                let mut words = strings(value, &here, checker).into_iter();
                match words.next() {
                    Some(program) => {
                        kind = Some(CanaryCheckKind::Command {
                            program: base.join(program),
                            args: words.collect(),
                        })
                    }
                    None => checker.report(&here, value.at, "must name a program to run"),
                }
            }
            "errand" => {
                if let Some(name) = checker.string(value, &here).filter(|n| !n.is_empty()) {
                    kind = Some(CanaryCheckKind::Errand(name));
                }
            }
            _ => set(&mut timeout, duration(checker, value, &here)),
        }
    }
    let given = entries
        .iter()
        .filter(|(k, _)| k.name == "command" || k.name == "errand")
        .count();
    if given != 1 {
        checker.report(path, node.at, "give either `command` or `errand`");
        return;
    }
    config.canary_check = kind.map(|kind| CanaryCheckConfig { kind, timeout });
}
