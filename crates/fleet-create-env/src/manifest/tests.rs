use super::*;
use serde_json::Value as Json;
use std::net::Ipv4Addr;

const VALID: &str = r#"
name: env
releases:
- {name: kv, url: "file://../releases/kv", version: "1"}
- {name: cpi, url: "file://cpi-release", version: "1"}
networks:
- name: default
  type: manual
  subnets:
  - {range: 10.0.0.0/24, gateway: 10.0.0.1, dns: [8.8.8.8]}
resource_pools:
- name: vms
  network: default
  stemcell: {url: "file://stemcell"}
  env: {bosh: {password: x}}
disk_pools:
- {name: disks, disk_size: 1024}
jobs:
- name: kv
  instances: 1
  templates: [{name: kv, release: kv}]
  resource_pool: vms
  persistent_disk_pool: disks
  networks: [{name: default, static_ips: [10.0.0.5]}]
  properties: {kv: {port: 1}}
properties: {kv: {port: 2, password: p}}
cloud_provider:
  template: {name: process-cpi, release: cpi}
  mbus: https://mbus:pw@127.0.0.1:6868
  properties: {root: /tmp}
"#;

fn read(text: &str) -> Result<EnvManifest, ManifestError> {
    parse(&fleet_yaml::load(text, fleet_yaml::Limits::default()).unwrap())
}

#[test]
fn a_valid_manifest_reads_whole() {
    let m = read(VALID).unwrap();
    assert_eq!(m.name, "env");
    assert_eq!(m.job.templates[0].release, "kv");
    assert_eq!(
        m.job.networks[0].static_ips,
        ["10.0.0.5".parse::<Ipv4Addr>().unwrap()]
    );
    assert_eq!(m.disk(), (1024, Json::Null));
    assert_eq!(m.resource_pool().stemcell_url, "file://stemcell");
    assert_eq!(m.cloud_provider.job, "process-cpi");
    assert_eq!(
        m.job_properties(&m.job.templates[0]),
        serde_json::json!({"kv": {"port": 1, "password": "p"}}),
        "the instance group's over the global"
    );
    assert_eq!(m.watch_time_ms, 300_000);
}

#[test]
fn every_problem_is_named_with_its_key() {
    let broken = VALID
        .replace("static_ips: [10.0.0.5]", "static_ips: [10.1.0.5]")
        .replace("resource_pool: vms", "resource_pool: nothing")
        .replace("release: cpi}", "release: none}")
        .replace("https://mbus:pw@127.0.0.1:6868", "http://127.0.0.1")
        .replace("disk_size: 1024", "disk_size: 0")
        .replace("gateway: 10.0.0.1", "gateway: 10.0.1.1")
        .replace("name: env\n", "name: env\nextra: 1\n");
    let e = read(&broken).unwrap_err();
    let text = e.to_string();
    for expected in [
        "jobs[0].networks[0].static_ips[0]: static ip '10.1.0.5' must be within subnet range",
        "jobs[0].resource_pool: must be the name of a resource pool",
        "cloud_provider.template.release: 'none' must refer to a release in releases",
        "cloud_provider.mbus: mbus URL `(not shown)` must start with https://",
        "disk_pools[0].disk_size: must be > 0",
        "networks[0].subnets[0].gateway: must be within the range",
        "extra: unknown key",
    ] {
        assert!(text.contains(expected), "{expected} in:\n{text}");
    }
    let two = VALID.replace(
        "jobs:\n- name: kv",
        "jobs:\n- name: other\n  resource_pool: vms\n  networks: [{name: default}]\n  templates: []\n- name: kv",
    );
    assert!(
        read(&two)
            .unwrap_err()
            .to_string()
            .contains("jobs: must be of size 1, found 2")
    );
    let both = format!("{VALID}instance_groups: []\n");
    assert!(
        read(&both)
            .unwrap_err()
            .to_string()
            .contains("both jobs and instance_groups")
    );
}
