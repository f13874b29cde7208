use std::path::Path;
use std::time::Duration;

use super::*;
use crate::inventory::Selection;
use crate::rollout::Strategy;

const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBljCCATugAwIBAgIUYfSu8ezAmvoADjiPXIE78tuvfQAwCgYIKoZIzj0EAwIw
IDEeMBwGA1UEAwwVZmxlZXQtdXBkYXRlciB0ZXN0IENBMB4XDTI2MTEyMTE0MTcw
NFoXDTM2MTExODE0MTcwNFowIDEeMBwGA1UEAwwVZmxlZXQtdXBkYXRlciB0ZXN0
IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEdHa6slUfjJ2ZId2z7tTosPtX
VHNy5VkRkmeF7BUTbAgORuMqoyQ0bEvkZnZrXuzZ7DMqhoKewD53zY5v7TlksaNT
MFEwHQYDVR0OBBYEFFmChr8QG3bd/KBAeDJc86EwSA8eMB8GA1UdIwQYMBaAFFmC
hr8QG3bd/KBAeDJc86EwSA8eMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwID
SQAwRgIhAI5WJ/BP8MYijQtAWPdd9zi8tOZp0UL2bRPe6lftGiRBAiEAy4rDEURm
ror45EmiG8DtAt9Q9p3/hVzxOCptCVLVEwk=
-----END CERTIFICATE-----
";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, "fleet.yml", Path::new("/etc/fleet"))
}

fn problems(text: &str) -> Vec<String> {
    match parse(text) {
        Err(ConfigError::Invalid { problems, .. }) => problems
            .iter()
            .map(|p| format!("{}:{} {}: {}", p.at.line, p.at.column, p.path, p.message))
            .collect(),
        other => panic!("expected validation problems, got {other:?}"),
    }
}

#[test]
fn an_empty_file_gives_the_documented_defaults() {
    let config = parse("").unwrap();
    assert_eq!(config.strategy, StrategyKind::Update);
    assert_eq!(config.update.instance_type, Selection::Outdated);
    assert!(!config.update.force_update);
    assert_eq!(config.update.max_in_parallel.get(), 1);
    assert_eq!(config.update.canaries, 0);
    assert_eq!(config.busy_attempts, 5);
    assert_eq!(config.busy_interval, Duration::from_secs(60));
    assert_eq!(config.poll_interval, Duration::from_secs(10));
    assert_eq!(config.operation_timeout, Duration::from_secs(7200));
    assert_eq!(config.inventory, InventoryConfig::Embedded);
    assert_eq!(config.format, Format::Text);
}

#[test]
fn a_complete_a9s_style_configuration_is_accepted() {
    let text = format!(
        "service_broker:
  api_endpoint: https://broker.service.internal:3000
  username: admin
  password: s3cret
  skip_ssl_validation: false
  ca: |
{}
  timeout: 60
strategy:
  type: update
  update:
    instance_type: provisioned
    force_update: true
    max_in_parallel: 4
    canaries: 2
  recreate:
    max_in_parallel: 2
    canaries: 1
busy_retry:
  attempts: 3
  interval: 2m
polling:
  interval: 15s
operation_timeout: 90m
rate_limit:
  requests_per_second: 2.5
shutdown_grace_period: 1m
output:
  format: json
  report_file: /var/vcap/sys/log/fleet-updater/report.json
",
        CA.lines()
            .map(|l| format!("    {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let config = parse(&text).unwrap();
    let InventoryConfig::Broker(broker) = &config.inventory else {
        panic!("{:?}", config.inventory)
    };
    assert_eq!(broker.api_endpoint, "https://broker.service.internal:3000");
    assert_eq!(broker.password.expose(), "s3cret");
    assert_eq!(broker.timeout, Duration::from_secs(60));
    assert!(broker.ca.as_deref().unwrap().contains("BEGIN CERTIFICATE"));
    assert_eq!(config.inventory.kind(), InventoryKind::Broker);
    assert_eq!(config.requests_per_second.get(), Some(2.5));
    let settings = config.settings();
    assert_eq!(
        settings.strategy,
        Strategy::Update {
            instance_type: Selection::Provisioned,
            force: true
        }
    );
    assert_eq!((settings.max_in_parallel.get(), settings.canaries), (4, 2));
    assert_eq!(settings.busy_attempts, 3);
    assert_eq!(settings.busy_interval, Duration::from_secs(120));
    assert_eq!(settings.poll_interval, Duration::from_secs(15));
    assert_eq!(settings.operation_timeout, Duration::from_secs(5400));
}

#[test]
fn every_problem_is_reported_in_one_pass_with_key_and_line() {
    let found = problems(
        "strategy:
  type: rolling
  update:
    max_in_paralel: 3
    max_in_parallel: 0
    canaries: -1
    force_update: yes please
busy_retry:
  interval: 0s
polling:
  interval: 30
operation_timeout: -5m
rate_limit:
  requests_per_second: 0
colour: blue
",
    );
    let expected = [
        "2:9 strategy.type: `rolling` is not allowed; use one of `update`, `recreate`",
        "4:5 strategy.update.max_in_paralel: unknown key; did you mean `max_in_parallel`?",
        "5:22 strategy.update.max_in_parallel: must be at least 1, got 0",
        "6:15 strategy.update.canaries: must be at least 0, got -1",
        "7:19 strategy.update.force_update: must be true or false, found the string `yes please`",
        "9:13 busy_retry.interval: `0s` is zero; durations must be positive",
        "11:13 polling.interval: must be a duration like `30s`, `5m` or `2h`, found `30`",
        "12:20 operation_timeout: `-5m` is negative; durations must be positive",
        "14:24 rate_limit.requests_per_second: must be between 0.001 and 1000000, got 0",
        "15:1 colour: unknown key; known keys are `service_broker`, `strategy`, `busy_retry`, `polling`, `operation_timeout`, `rate_limit`, `shutdown_grace_period`, `output`, `inventory`, `embedded`, `state_dir`, `director`, `serve`, `schedule`, `store`, `canary_selection`, `selection`, `canary_check`",
    ];
    assert_eq!(found, expected);
}

#[test]
fn a_broker_endpoint_without_credentials_is_refused() {
    let found =
        problems("service_broker:\n  api_endpoint: https://broker:3000\n  username: admin\n");
    assert_eq!(
        found,
        [
            "2:17 service_broker.api_endpoint: a broker endpoint needs `service_broker.username` and `service_broker.password`"
        ]
    );
}

#[test]
fn credentials_in_the_endpoint_are_refused_without_echoing_them() {
    let found = problems(
        "service_broker:\n  api_endpoint: https://admin:hunter2@broker:3000\n  username: u\n  password: p\n",
    );
    assert_eq!(
        found,
        [
            "2:17 service_broker.api_endpoint: must not carry credentials; put them in `service_broker.username` and `password`"
        ]
    );
    let found =
        problems("service_broker:\n  api_endpoint: broker:3000\n  username: u\n  password: p\n");
    assert_eq!(
        found,
        ["2:17 service_broker.api_endpoint: `broker:3000` is not an http:// or https:// URL"]
    );
}

#[test]
fn absurd_rates_and_durations_are_refused() {
    let found =
        problems("rate_limit:\n  requests_per_second: 1.0e-9\noperation_timeout: 100000h\n");
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].contains("must be between 0.001 and 1000000"),
        "{found:?}"
    );
    assert!(
        found[1].contains("longer than the limit of 365 days"),
        "{found:?}"
    );
}

#[test]
fn a_ca_that_is_not_pem_is_refused() {
    let found = problems(
        "service_broker:\n  api_endpoint: https://b\n  username: u\n  password: p\n  ca: not a certificate\n",
    );
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("5:7 service_broker.ca: is not a PEM certificate"),
        "{found:?}"
    );
}

#[test]
fn a_wrongly_typed_password_is_reported_without_its_value() {
    let found =
        problems("service_broker:\n  api_endpoint: https://b\n  username: u\n  password: 123456\n");
    assert!(
        found
            .iter()
            .any(|p| p == "4:13 service_broker.password: must be a string, found an integer"),
        "{found:?}"
    );
    assert!(found.iter().all(|p| !p.contains("123456")), "{found:?}");
}

#[test]
fn syntax_errors_name_file_line_and_column() {
    let err = parse("strategy: [update\n").unwrap_err().to_string();
    assert!(err.starts_with("fleet.yml:"), "{err}");
}

#[test]
fn a_scripted_inventory_needs_its_scenario_resolved_against_the_config_folder() {
    let config = parse("inventory:\n  type: scripted\n  scenario: fleet.yml\n").unwrap();
    assert_eq!(
        config.inventory,
        InventoryConfig::Scripted {
            scenario: Path::new("/etc/fleet/fleet.yml").to_path_buf()
        }
    );
    let found = problems("inventory:\n  type: scripted\n");
    assert_eq!(
        found,
        ["2:9 inventory.scenario: the scripted inventory needs a scenario file"]
    );
}

#[test]
fn the_broker_inventory_needs_a_broker() {
    let found = problems("inventory:\n  type: broker\n");
    assert_eq!(found.len(), 1);
    assert!(found[0].contains("needs `service_broker.api_endpoint`"));
}

#[test]
fn command_line_overrides_win_for_the_chosen_strategy() {
    let mut config = parse("strategy:\n  update:\n    max_in_parallel: 3\n").unwrap();
    config.apply(&Overrides {
        strategy: Some(StrategyKind::Recreate),
        max_in_parallel: std::num::NonZeroUsize::new(7),
        canaries: Some(2),
        dry_run: true,
        format: Some(Format::Json),
        report_file: None,
        metrics_file: None,
        state_dir: None,
        store: None,
        fresh: false,
    });
    let settings = config.settings();
    assert_eq!(
        settings.strategy,
        Strategy::Recreate {
            fix: true,
            force: true
        }
    );
    assert_eq!((settings.max_in_parallel.get(), settings.canaries), (7, 2));
    assert_eq!(config.update.max_in_parallel.get(), 3);
    assert!(config.dry_run);
    assert_eq!(config.format, Format::Json);
}

#[test]
fn the_rendered_configuration_redacts_secrets_and_reparses() {
    let text =
        "service_broker:\n  api_endpoint: https://b:3000\n  username: admin\n  password: hunter2\n";
    let config = parse(text).unwrap();
    let rendered = render(&config);
    assert!(!rendered.contains("hunter2"), "{rendered}");
    assert!(rendered.contains("password: \"<redacted>\""), "{rendered}");
    assert!(rendered.contains("operation_timeout: 2h"), "{rendered}");
    let again = parse(&rendered).unwrap();
    assert_eq!(again.update, config.update);
    assert_eq!(again.operation_timeout, config.operation_timeout);
}

#[test]
fn a_director_block_selects_the_director_inventory_with_either_kind_of_credentials() {
    let basic = parse(
        "director:\n  url: https://10.0.0.6:25555/\n  username: admin\n  password: pw\n  deployments: service-instance_*\n",
    )
    .unwrap();
    let InventoryConfig::Director(d) = basic.inventory else {
        panic!("{:?}", basic.inventory)
    };
    assert_eq!(d.url, "https://10.0.0.6:25555");
    assert_eq!(d.deployments, "service-instance_*");
    assert_eq!(d.timeout, Duration::from_secs(30));
    assert!(matches!(d.auth, DirectorAuth::Basic { .. }));
    let uaa = parse(&format!(
        "director:\n  url: https://d:25555\n  client: updater\n  client_secret: s\n  timeout: 10s\n  ca: |\n{}",
        CA.lines().map(|l| format!("    {l}\n")).collect::<String>()
    ))
    .unwrap()
    .inventory;
    let InventoryConfig::Director(uaa) = uaa else {
        panic!("{uaa:?}")
    };
    assert!(matches!(uaa.auth, DirectorAuth::Uaa { ref client, .. } if client == "updater"));
    assert_eq!(uaa.timeout, Duration::from_secs(10));
    assert!(uaa.ca.is_some());
}

#[test]
fn director_credentials_must_be_complete_and_of_one_kind() {
    let mixed = problems(
        "director:\n  url: https://d:25555\n  username: a\n  password: b\n  client: c\n  client_secret: d\n",
    );
    assert!(mixed[0].contains("not both"), "{mixed:?}");
    let none = problems("director:\n  url: https://d:25555\n");
    assert!(none[0].contains("credentials are missing"), "{none:?}");
    let half = problems("director:\n  url: https://d:25555\n  username: a\n");
    assert!(half[0].contains("director.password"), "{half:?}");
    let url = problems("director:\n  url: ftp://d\n  username: a\n  password: b\n");
    assert!(url[0].contains("director.url"), "{url:?}");
    let both = problems(
        "service_broker:\n  api_endpoint: https://b\n  username: u\n  password: p\ndirector:\n  url: https://d\n  username: a\n  password: b\n",
    );
    assert!(both[0].contains("inventory.type"), "{both:?}");
    let typed = problems("inventory:\n  type: director\n");
    assert!(typed[0].contains("director.url"), "{typed:?}");
}

#[test]
fn the_serve_block_names_each_bad_value() {
    let config = parse(
        "serve:\n  director: 0.0.0.0:25555\n  broker: 127.0.0.1:8443\n  releases_on_host: true\n  users: [{name: ops, password: pw}]\n  limits: {max_body_bytes: 65536, request_timeout: 5s, max_connections: 8, max_connections_per_client: 4, max_upload_bytes: 1048576, upload_timeout: 10m, max_unpacked_bytes: 1073741824, max_expansion: 4, max_release_files: 500}\n",
    )
    .unwrap();
    assert_eq!(config.serve.limits.max_upload_bytes, 1 << 20);
    let unpacking = config.serve.limits.unpacking();
    assert_eq!(
        (
            unpacking.max_bytes,
            unpacking.max_expansion,
            unpacking.max_entries
        ),
        (1 << 30, 4, 500)
    );
    let scoped = parse(
        "serve:\n  users: [{name: ops, password: pw}, {name: auditor, password: pw2, scopes: [bosh.read]}]\n",
    )
    .unwrap();
    assert_eq!(
        scoped.serve.users[0].scopes,
        ["bosh.admin"],
        "admin by default"
    );
    assert_eq!(scoped.serve.users[1].scopes, ["bosh.read"]);
    assert!(
        scoped.serve.broker_users.is_empty(),
        "the director's by default"
    );
    let separate =
        parse("serve:\n  broker_users: [{name: cf, password: pw, scopes: [bosh.admin]}]\n")
            .unwrap();
    assert_eq!(separate.serve.broker_users[0].name, "cf");
    let unknown = parse(
        "serve:\n  users: [{name: t, password: pw, scopes: [bosh.teams.x.write]}, {name: u, password: pw, scopes: []}]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        unknown
            .contains("serve.users[0].scopes[0]: `bosh.teams.x.write` is not a scope serve takes"),
        "{unknown}"
    );
    assert!(
        unknown.contains("serve.users[1].scopes: a user needs at least one scope"),
        "{unknown}"
    );
    let bad = parse("serve:\n  limits: {max_expansion: 0, max_unpacked_bytes: 10}\n")
        .unwrap_err()
        .to_string();
    assert!(
        bad.contains("serve.limits.max_expansion: must be at least 1"),
        "{bad}"
    );
    assert!(
        bad.contains("serve.limits.max_unpacked_bytes: must be at least 1048576"),
        "{bad}"
    );
    assert!(config.serve.releases_on_host);
    assert!(
        !parse("serve: {}\n").unwrap().serve.releases_on_host,
        "refused by default"
    );
    assert_eq!(config.serve.limits.upload_timeout, Duration::from_secs(600));
    assert_eq!(config.serve.director_listen.port(), 25555);
    assert_eq!(config.serve.broker_listen.port(), 8443);
    assert_eq!(config.serve.users[0].name, "ops");
    assert_eq!(config.serve.limits.max_connections, 8);
    assert_eq!(config.serve.limits.max_connections_per_client, 4);
    assert_eq!(config.serve.limits.request_timeout, Duration::from_secs(5));
    let bad = problems(
        "serve:\n  director: localhost\n  releases_on_host: sometimes\n  tls: {certificate: cert.pem}\n  users: [{name: a}, {name: b, password: x}, {name: b, password: y}]\n  limits: {max_connections: 0}\n",
    );
    let all = bad.join("\n");
    assert!(
        all.contains("serve.director: `localhost` is not an address"),
        "{all}"
    );
    assert!(all.contains("serve.tls: give both"), "{all}");
    assert!(all.contains("serve.releases_on_host"), "{all}");
    assert!(
        all.contains("serve.users[0]: a user needs a `password`"),
        "{all}"
    );
    assert!(all.contains("user `b` is listed twice"), "{all}");
    assert!(
        all.contains("serve.limits.max_connections: must be at least 1"),
        "{all}"
    );
    // Passwords are redacted when the configuration is shown.
    assert!(!render(&config).contains("pw"));
}

#[test]
fn an_unknown_key_gets_one_error_and_its_value_is_never_shown() {
    let blocks = [
        "service_broker:\n  pasword: TypoSecret-1234\n",
        "busy_retry:\n  atempts: TypoSecret-1234\n",
        "polling:\n  intervall: TypoSecret-1234\n",
        "strategy:\n  update:\n    canaryes: TypoSecret-1234\n",
        "strategy:\n  recreate:\n    forse: TypoSecret-1234\n",
        "serve:\n  limits:\n    max_conections: TypoSecret-1234\n",
        "serve:\n  director_lisen: TypoSecret-1234\n",
        "embedded:\n  fleeet: TypoSecret-1234\n",
        "output:\n  formatt: TypoSecret-1234\n",
        "inventory:\n  scenari: TypoSecret-1234\n",
    ];
    for text in blocks {
        let found = problems(text);
        assert_eq!(found.len(), 1, "{text}: {found:?}");
        assert!(found[0].contains("unknown key"), "{text}: {found:?}");
        assert!(!found[0].contains("TypoSecret"), "{text}: {found:?}");
        let shown = match parse(text) {
            Err(e) => format!("{e} {e:?}"),
            Ok(_) => unreachable!(),
        };
        assert!(!shown.contains("TypoSecret"), "{text}: {shown}");
    }
}

#[test]
fn a_schedule_reads_its_window_zone_days_and_grace_and_names_each_bad_one() {
    let config = parse(
        "schedule:\n  window: 01:00-05:00\n  time_zone: Europe/Berlin\n  weekdays: [mon, tue]\n  grace_period: 10m\noutput:\n  metrics_file: /var/fleet.prom\n",
    )
    .unwrap();
    let schedule = config.schedule.as_ref().unwrap();
    assert_eq!(
        schedule.window.to_string(),
        "01:00-05:00 Europe/Berlin on mon, tue"
    );
    assert_eq!(schedule.grace_period, Duration::from_secs(600));
    assert_eq!(
        config.metrics_file.as_deref(),
        Some(Path::new("/var/fleet.prom"))
    );
    let rendered = render(&config);
    assert!(rendered.contains("window: \"01:00-05:00\""), "{rendered}");
    assert_eq!(parse(&rendered).unwrap().schedule, config.schedule);
    let found =
        problems("schedule:\n  window: 1am-5am\n  time_zone: Mars/Base\n  weekdays: [funday]\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("schedule.window"), "{found:?}");
    let found = problems("schedule:\n  window: 01:00-05:00\n  time_zone: Mars/Base\n");
    assert!(found[0].contains("schedule.time_zone") && found[0].contains("Mars/Base"));
    let found = problems("schedule:\n  time_zone: UTC\n");
    assert!(
        found[0].contains("schedule.window: is required"),
        "{found:?}"
    );
}

#[test]
fn the_intent_names_strategy_options_and_inventory() {
    let update = parse("").unwrap();
    let recreate = parse("strategy:\n  type: recreate\n").unwrap();
    assert_ne!(update.intent(), recreate.intent());
    assert!(recreate.intent().contains("recreate fix=true force=true"));
    assert!(update.intent().contains("embedded demo"));
}

#[test]
fn the_store_is_a_postgres_url_or_a_block_and_a_bad_one_is_named() {
    let config = parse("store: postgres://fleet@db.example.com/fleet\n").unwrap();
    assert_eq!(
        config.store.unwrap().url.as_deref(),
        Some("postgres://fleet@db.example.com/fleet")
    );
    let config =
        parse("store:\n  url: postgres://fleet@db/fleet\n  password_file: pw\n  ca_file: ca.pem\n")
            .unwrap();
    let store = config.store.unwrap();
    assert!(store.password_file.unwrap().ends_with("pw"));
    assert!(store.ca_file.unwrap().ends_with("ca.pem"));
    let refused = parse("store: postgres://fleet:hunter2@db/fleet\n")
        .unwrap_err()
        .to_string();
    assert!(refused.contains("store"), "{refused}");
    assert!(refused.contains("password"), "{refused}");
    assert!(!refused.contains("hunter2"), "{refused}");
    let refused = parse("store:\n  url: mysql://db/x\n  passwd: x\n")
        .unwrap_err()
        .to_string();
    assert!(refused.contains("store.passwd"), "{refused}");
    assert!(refused.contains("not a PostgreSQL URL"), "{refused}");
    let mut config = parse("store:\n  url: postgres://a@db/one\n  password_file: pw\n").unwrap();
    config.apply(&Overrides {
        store: Some("postgres://b@db/two".into()),
        ..Overrides::default()
    });
    let store = config.store.unwrap();
    assert_eq!(store.url.as_deref(), Some("postgres://b@db/two"));
    assert!(
        store.password_file.is_some(),
        "the file still gives the password"
    );
}

#[test]
fn a_canary_selection_is_read_as_listing_criteria_and_shown() {
    let config =
        parse("canary_selection: {cf_org: system, cf_space: canaries, size: 3}\n").unwrap();
    let wanted: Vec<(&str, &str)> = config
        .canary_selection
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        wanted,
        [
            ("cf_org", "system"),
            ("cf_space", "canaries"),
            ("size", "3")
        ]
    );
    assert_eq!(config.settings().canary_selection, config.canary_selection);
    let shown = super::render::render(&config);
    assert!(
        shown.contains(r#"canary_selection: {"cf_org":"system","cf_space":"canaries","size":"3"}"#),
        "{shown}"
    );
    let e = parse("canary_selection: [system]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("canary_selection: must be a mapping"), "{e}");
    let e = parse("canary_selection: {cf_org: ''}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("canary_selection.cf_org: must be a non-empty"),
        "{e}"
    );
}

#[test]
fn a_selection_is_read_checked_shown_and_part_of_the_runs_intent() {
    let text = "selection:
  include: {plans: [small], instances: ['pg-*'], orgs: [system], spaces: [prod]}
  exclude: {instances: ['pg-0?-legacy']}
  first: [pg-02]
";
    let config = parse(text).unwrap();
    let filter = &config.filter;
    assert_eq!(filter.include.plans, ["small"]);
    assert_eq!(filter.include.instances, ["pg-*"]);
    assert_eq!(filter.include.orgs, ["system"]);
    assert_eq!(filter.exclude.instances, ["pg-0?-legacy"]);
    assert_eq!(filter.first, ["pg-02"]);
    assert_eq!(&config.settings().filter, filter);
    assert_ne!(
        config.intent(),
        parse("").unwrap().intent(),
        "another intent"
    );
    let shown = super::render::render(&config);
    assert!(shown.contains(r#"instances: ["pg-*"]"#), "{shown}");
    assert!(shown.contains(r#"first: ["pg-02"]"#), "{shown}");
    let e = parse("selection: {include: {instances: ['pg-['], colour: [x]}}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("`pg-[` is not an instance id pattern"), "{e}");
    assert!(e.contains("selection.include.colour: unknown key"), "{e}");
}

#[test]
fn a_canary_check_is_a_command_or_an_errand_with_a_time_limit() {
    let config = parse("canary_check: {command: [smoke, --fast], timeout: 2m}\n").unwrap();
    let check = config.canary_check.clone().unwrap();
    assert_eq!(check.timeout, std::time::Duration::from_secs(120));
    assert!(matches!(
        &check.kind,
        super::CanaryCheckKind::Command { program, args }
            if program.ends_with("smoke") && args == &["--fast"]
    ));
    let shown = super::render::render(&config);
    assert!(shown.contains("timeout: 2m"), "{shown}");
    let errand = parse("canary_check: {errand: smoke-tests}\n").unwrap();
    assert_eq!(
        errand.canary_check.unwrap().kind,
        super::CanaryCheckKind::Errand("smoke-tests".into())
    );
    let e = parse("canary_check: {errand: a, command: [b]}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("give either `command` or `errand`"), "{e}");
    let e = parse(
        "service_broker: {api_endpoint: 'https://b', username: u, password: p}\ncanary_check: {errand: smoke-tests}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("an errand check runs through a director"), "{e}");
}

#[test]
fn an_odb_errand_configuration_is_read_with_its_defaults_and_meanings() {
    let config = parse(
        "broker_api:
  url: https://broker.internal:8080
  authentication: {basic: {username: broker, password: s3cret}}
  tls: {ca_cert: '', disable_ssl_cert_verification: true}
attempt_limit: 3
max_in_flight: 4
canaries: 2
canary_selection_params: {cf_org: system}
cf: {url: 'https://api.sys'}
bosh: {url: 'https://director:25555'}
maintenance_info_present: true
service_instances_api: {url: 'https://siapi'}
",
    )
    .unwrap();
    let InventoryConfig::Broker(broker) = &config.inventory else {
        panic!("{:?}", config.inventory)
    };
    assert_eq!(broker.api_endpoint, "https://broker.internal:8080");
    assert_eq!(broker.username, "broker");
    assert!(broker.skip_ssl_validation && broker.ca.is_none());
    assert_eq!(broker.timeout, std::time::Duration::from_secs(120));
    assert_eq!(config.poll_interval, std::time::Duration::from_secs(60));
    assert_eq!(config.busy_interval, std::time::Duration::from_secs(60));
    assert_eq!(config.busy_attempts, 3);
    assert_eq!(config.update.max_in_parallel.get(), 4);
    assert_eq!(config.update.canaries, 2);
    assert_eq!(config.recreate.max_in_parallel.get(), 4);
    assert_eq!(
        config.recreate.canaries, 0,
        "recreate-all takes no canaries"
    );
    assert_eq!(config.canary_selection["cf_org"], "system");

    let problems = problems(
        "broker_api: {url: 'https://b', authentication: {basic: {username: u}}}\nmax_in_flight: 0\ncanaries: -1\npolling_interval: 0\n",
    );
    let all = problems.join("\n");
    assert!(all.contains("broker_api: the broker's `url`"), "{all}");
    assert!(
        all.contains("max_in_flight: must be greater than zero, got 0"),
        "{all}"
    );
    assert!(
        all.contains("canaries: cannot be negative, got -1"),
        "{all}"
    );
    assert!(
        all.contains("polling_interval: must be greater than zero"),
        "{all}"
    );
}

#[test]
fn the_health_monitor_is_on_with_boshs_defaults_and_each_key_is_checked() {
    let monitor = parse("serve: {}\n").unwrap().serve.health_monitor.unwrap();
    assert_eq!(monitor.interval, Duration::from_secs(30));
    assert_eq!(monitor.meltdown.minimum_down, 5);
    let config = parse(
        "serve:\n  health_monitor:\n    interval: 5s\n    agent_timeout: 20s\n    resurrector: false\n    meltdown: {minimum_down: 2, percent_threshold: 0.5, time_threshold: 5m}\n",
    )
    .unwrap();
    let monitor = config.serve.health_monitor.unwrap();
    assert_eq!(
        (monitor.interval, monitor.agent_timeout, monitor.resurrector),
        (Duration::from_secs(5), Duration::from_secs(20), false)
    );
    assert_eq!(monitor.meltdown.minimum_down, 2);
    assert_eq!(monitor.meltdown.percent_threshold, 0.5);
    assert_eq!(monitor.meltdown.time_threshold, Duration::from_secs(300));
    let off = parse("serve:\n  health_monitor: {enabled: false}\n").unwrap();
    assert!(off.serve.health_monitor.is_none());
    let all = problems(
        "serve:\n  health_monitor:\n    interval: 10ms\n    resurector: true\n    meltdown: {percent_threshold: 5, minimum_down: 0}\n",
    )
    .join("\n");
    for key in [
        "serve.health_monitor.interval",
        "serve.health_monitor.resurector",
        "serve.health_monitor.meltdown.percent_threshold",
        "serve.health_monitor.meltdown.minimum_down",
    ] {
        assert!(all.contains(key), "{key}: {all}");
    }
}
