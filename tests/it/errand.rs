//! The BOSH errand in `errand/`: its templates, rendered as the director renders them (by
//! `errand/test/render.rb`, which needs `ruby`), give a configuration that `check-config`
//! accepts and an errand script that bash accepts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use predicates::prelude::*;

use crate::support::{Workspace, fleet_updater};

const JOB: &str = "errand/jobs/fleet-updater";
const RENDER: &str = "errand/test/render.rb";

/// The passwords in the sample properties under `errand/test/`; none may be printed.
const BROKER_PASSWORD: &str = "errand-test: \"quoted\" #secret";
const RECREATE_PASSWORD: &str = "errand-test-recreate-secret";
const DIRECTOR_PASSWORD: &str = "errand-test-director-secret";
const ORPHAN_PASSWORD: &str = "errand-test-orphan-secret";

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a tool that the errand tests need, failing (not skipping) when it is missing.
fn tool(program: &str, args: &[&str], install: &str) -> Output {
    match Command::new(program)
        .args(args)
        .current_dir(repository())
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`{program}` is not installed; the errand tests need it to render and check the \
             BOSH job templates ({install})"
        ),
        Err(e) => panic!("cannot run `{program}`: {e}"),
    }
}

/// `render.rb` on the errand job: `template` rendered with `properties` into `out`.
fn render_rb(template: &str, properties: &Path, out: &Path) -> Output {
    let properties = properties.to_str().expect("the path is UTF-8");
    let out = out.to_str().expect("the path is UTF-8");
    tool(
        "ruby",
        &[RENDER, JOB, template, properties, out],
        "Debian: apt-get install -y ruby",
    )
}

/// Renders `template` with `properties` into the workspace and returns the file, failing
/// with render.rb's message when the template does not render.
fn render(ws: &Workspace, template: &str, properties: &Path) -> PathBuf {
    let out = ws.path(template.trim_end_matches(".erb"));
    let output = render_rb(template, properties, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "render.rb failed on {template} with {}: {stderr}",
        properties.display()
    );
    assert!(
        !stderr.contains("not declared"),
        "{} sets properties the job does not declare: {stderr}",
        properties.display()
    );
    out
}

fn sample(name: &str) -> PathBuf {
    repository().join("errand/test").join(name)
}

#[test]
fn errand_config_renders_for_the_update_strategy_and_passes_check_config() {
    let ws = Workspace::new();
    let config = render(&ws, "config.yml.erb", &sample("broker.yml"));
    fleet_updater()
        .args(["check-config", "-c"])
        .arg(&config)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "api_endpoint: \"https://broker.service.internal:3000\"",
        ))
        .stdout(predicate::str::contains("password: \"<redacted>\""))
        .stdout(predicate::str::contains("ca: \"<PEM, 1 certificate(s)>\""))
        .stdout(predicate::str::contains("director: null"))
        .stdout(predicate::str::contains("  type: update\n"))
        .stdout(predicate::str::contains("max_in_parallel: 5"))
        .stdout(predicate::str::contains("canaries: 2"))
        .stdout(predicate::str::contains("interval: 2m"))
        .stdout(predicate::str::contains(
            "report_file: \"/var/vcap/sys/log/fleet-updater/report.json\"",
        ))
        .stdout(predicate::str::contains(
            "state_dir: \"/var/vcap/data/fleet-updater\"",
        ))
        .stdout(predicate::str::contains("  type: broker\n"))
        .stdout(predicate::str::contains(BROKER_PASSWORD).not())
        .stdout(predicate::str::contains("#secret").not())
        .stderr(predicate::str::contains("#secret").not());
}

#[test]
fn errand_config_renders_for_the_recreate_strategy_and_passes_check_config() {
    let ws = Workspace::new();
    let config = render(&ws, "config.yml.erb", &sample("recreate.yml"));
    fleet_updater()
        .args(["check-config", "-c"])
        .arg(&config)
        .assert()
        .success()
        .stdout(predicate::str::contains("  type: recreate\n"))
        .stdout(predicate::str::contains(
            "  recreate:\n    max_in_parallel: 3\n    canaries: 1\n    fix: true\n    force: true\n",
        ))
        .stdout(predicate::str::contains("timeout: 180"))
        .stdout(predicate::str::contains("attempts: 10"))
        .stdout(predicate::str::contains("operation_timeout: 1h"))
        .stdout(predicate::str::contains("  window: \"01:00-05:00\"\n  time_zone: \"Europe/Berlin\"\n  weekdays: [\"mon\", \"tue\", \"wed\", \"thu\", \"fri\"]\n  grace_period: 20m\n"))
        .stdout(predicate::str::contains("metrics_file: \"/var/vcap/data/fleet-updater/metrics.prom\""))
        .stdout(predicate::str::contains("password: \"<redacted>\""))
        .stdout(predicate::str::contains(RECREATE_PASSWORD).not())
        .stderr(predicate::str::contains(RECREATE_PASSWORD).not());
}

#[test]
fn errand_config_renders_for_a_director_fleet_and_passes_check_config() {
    let ws = Workspace::new();
    let config = render(&ws, "config.yml.erb", &sample("director.yml"));
    fleet_updater()
        .args(["check-config", "-c"])
        .arg(&config)
        .assert()
        .success()
        .stdout(predicate::str::contains("service_broker: null"))
        .stdout(predicate::str::contains("url: \"https://10.0.0.6:25555\""))
        .stdout(predicate::str::contains("username: \"admin\""))
        .stdout(predicate::str::contains("password: \"<redacted>\""))
        .stdout(predicate::str::contains("timeout: 30s"))
        .stdout(predicate::str::contains(
            "deployments: \"service-instance_*\"",
        ))
        .stdout(predicate::str::contains("  type: director\n"))
        .stdout(predicate::str::contains("requests_per_second: 5"))
        .stdout(predicate::str::contains(DIRECTOR_PASSWORD).not())
        .stderr(predicate::str::contains(DIRECTOR_PASSWORD).not());
}

#[test]
fn a_properties_file_without_the_endpoint_makes_check_config_fail_with_exit_2() {
    let ws = Workspace::new();
    let config = render(&ws, "config.yml.erb", &sample("no-endpoint.yml"));
    fleet_updater()
        .args(["check-config", "-c"])
        .arg(&config)
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains(
            "service_broker: credentials are given but `api_endpoint` is missing",
        ))
        .stderr(predicate::str::contains(ORPHAN_PASSWORD).not());
}

#[test]
fn errand_without_any_properties_never_falls_back_to_the_embedded_fleet() {
    let ws = Workspace::new();
    let properties = ws.write("properties.yml", "{}\n");
    let config = render(&ws, "config.yml.erb", &properties);
    fleet_updater()
        .args(["check-config", "-c"])
        .arg(&config)
        .assert()
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains(
            "inventory.type: `broker` needs `service_broker.api_endpoint`",
        ));
}

#[test]
fn errand_refuses_to_render_an_inventory_other_than_broker_or_director() {
    let ws = Workspace::new();
    let properties = ws.write("properties.yml", "inventory:\n  type: embedded\n");
    let out = ws.path("config.yml");
    let output = render_rb("config.yml.erb", &properties, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "render.rb: {stderr}");
    assert!(
        stderr.contains("inventory.type must be `broker` or `director`, got \"embedded\""),
        "render.rb: {stderr}"
    );
    assert!(!out.exists(), "nothing is written when the template fails");
}

#[test]
fn errand_script_renders_to_bash_that_runs_the_updater_with_the_rendered_config() {
    let ws = Workspace::new();
    let script = render(&ws, "run.erb", &sample("broker.yml"));
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.starts_with("#!/usr/bin/env bash\n"), "{text}");
    assert!(
        text.contains(
            "exec /var/vcap/packages/fleet-updater/bin/fleet-updater run \\\n  -c /var/vcap/jobs/fleet-updater/config/config.yml \\\n  --log-level warn\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("mkdir -p /var/vcap/sys/log/fleet-updater /var/vcap/data/fleet-updater\n"),
        "{text}"
    );
    assert!(!text.contains("--dry-run"), "{text}");
    let script = script.to_str().expect("the path is UTF-8");
    let bash = tool("bash", &["-n", script], "it comes with every Linux");
    assert!(
        bash.status.success(),
        "bash -n refuses the rendered script: {}\n{text}",
        String::from_utf8_lossy(&bash.stderr)
    );
}

#[test]
fn errand_script_passes_dry_run_and_quotes_what_the_properties_give() {
    let ws = Workspace::new();
    let properties = ws.write(
        "properties.yml",
        "dry_run: true\nlog_level: \"fleet_updater=debug\"\noutput:\n  report_file: \"/var/vcap/sys/log/fleet updater/report.json\"\n",
    );
    let script = render(&ws, "run.erb", &properties);
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(
        text.contains("--log-level fleet_updater\\=debug --dry-run\n"),
        "{text}"
    );
    assert!(
        text.contains("mkdir -p /var/vcap/sys/log/fleet\\ updater /var/vcap/data/fleet-updater\n"),
        "{text}"
    );
    let script = script.to_str().expect("the path is UTF-8");
    let bash = tool("bash", &["-n", script], "it comes with every Linux");
    assert!(
        bash.status.success(),
        "bash -n refuses the rendered script: {}\n{text}",
        String::from_utf8_lossy(&bash.stderr)
    );
}

/// Renders `template` of the ODB-compatible job `job` with `properties` and the broker
/// link ODB's broker job provides.
fn render_odb(ws: &Workspace, job: &str, template: &str, properties: &str) -> String {
    let properties = ws.write(&format!("{job}-properties.yml"), properties);
    let links = ws.write(
        "links.yml",
        "broker:\n  instances: [{address: 10.0.8.5, index: 0, id: b0, name: broker}]\n  properties:\n    port: 8080\n    username: broker\n    password: \"odb: #secret\"\n    tls: {certificate: CERT}\n",
    );
    let out = ws.path(&format!("{job}-{}", template.trim_end_matches(".erb")));
    let output = tool(
        "ruby",
        &[
            RENDER,
            &format!("errand/jobs/{job}"),
            template,
            properties.to_str().unwrap(),
            out.to_str().unwrap(),
            links.to_str().unwrap(),
        ],
        "Debian: apt-get install -y ruby",
    );
    assert!(
        output.status.success(),
        "render.rb failed on {job}/{template}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn the_odb_compatible_errands_render_the_odb_configuration_from_the_broker_link() {
    let ws = Workspace::new();
    let config = render_odb(
        &ws,
        "upgrade-all-service-instances",
        "config.yml.erb",
        "max_in_flight: 3\ncanaries: 1\ncanary_selection_params: {cf_org: system, cf_space: canaries}\n",
    );
    let path = ws.write("upgrade.yml", &config);
    let shown = fleet_updater()
        .args(["check-config", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(
        text.contains("api_endpoint: \"https://10.0.8.5:8080\""),
        "{text}"
    );
    assert!(text.contains("max_in_parallel: 3"), "{text}");
    assert!(
        text.contains(r#"canary_selection: {"cf_org":"system","cf_space":"canaries"}"#),
        "{text}"
    );
    assert!(!text.contains("#secret"), "the password is not printed");

    let recreate = render_odb(
        &ws,
        "recreate-all-service-instances",
        "config.yml.erb",
        "{}\n",
    );
    assert!(recreate.contains("canaries: 0"), "{recreate}");
    let path = ws.write("recreate.yml", &recreate);
    let shown = fleet_updater()
        .args(["check-config", "--strategy", "recreate", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );

    for job in [
        "upgrade-all-service-instances",
        "recreate-all-service-instances",
    ] {
        let script = render_odb(&ws, job, "run.erb", "{}\n");
        assert!(script.contains(&format!("/var/vcap/jobs/{job}/config/config.yml")));
        let file = ws.write(&format!("{job}-run"), &script);
        let bash = tool(
            "bash",
            &["-n", file.to_str().unwrap()],
            "it comes with every Linux",
        );
        assert!(bash.status.success(), "{script}");
    }
    let bad = ws.write("bad.yml", "max_in_flight: 0\n");
    let out = ws.path("bad-out");
    let refused = tool(
        "ruby",
        &[
            RENDER,
            "errand/jobs/upgrade-all-service-instances",
            "config.yml.erb",
            bad.to_str().unwrap(),
            out.to_str().unwrap(),
            ws.path("links.yml").to_str().unwrap(),
        ],
        "Debian: apt-get install -y ruby",
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("max_in_flight must be greater than zero")
    );
}
