//! A director bootstrapped as BOSH directors are: `create-env` deploys the demo's
//! `config/create-env/director.yml` (the fleet-updater release's fleet-director job, this
//! program added to it as a blob, as `bosh add-blob` adds it) onto a container VM; then,
//! over HTTPS at the VM's address with the generated CA and admin password, the kv
//! release is uploaded and deployed onto that director; `fleet-updater run` deploys,
//! through its broker, the service instances whose first deploy failed for want of the
//! release, and recreates the deployment through the director; and `delete-env` leaves
//! no container, VM or process.
//!
//! Needs root, `bwrap`, `nsenter` and `ip` (CI); elsewhere it says why it did not run.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::{Client, Method};
use serde_json::Value;

use crate::support::Workspace;

/// The subnet the director's VM is on in this test (the demo's is 10.245.2.0/24).
const NET: &str = "10.246.20.";

struct Director {
    w: Workspace,
}

impl Director {
    fn iaas(&self) -> std::path::PathBuf {
        self.w.path("iaas")
    }

    fn env(&self, verb: &str) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_fleet-updater"))
            .env("FLEET_UPDATER_HOME", self.w.path("home"))
            .current_dir(self.w.path(""))
            .args([verb, "director.yml", "--state", "state.json"])
            .output()
            .unwrap()
    }

    /// `fleet-updater run` with `config`, which must succeed; what it printed.
    fn run(&self, config: &str) -> String {
        let run = Command::new(env!("CARGO_BIN_EXE_fleet-updater"))
            .current_dir(self.w.path(""))
            .args(["run", "-c", config, "--state-dir"])
            .arg(format!("{config}-state"))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&run.stdout).into_owned();
        assert!(
            run.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&run.stderr)
        );
        said
    }

    /// A variable from the store create-env generated.
    fn variable(&self, path: &[&str]) -> String {
        let text = std::fs::read_to_string(self.w.path("state-vars.yml")).unwrap();
        let mut value = fleet_yaml::load(&text, fleet_yaml::Limits::default())
            .unwrap()
            .to_json();
        for key in path {
            value = value[*key].clone();
        }
        value.as_str().unwrap().to_string()
    }
}

impl Drop for Director {
    fn drop(&mut self) {
        fleet_updater::vm::container::Containers::new(&self.iaas(), None).clean_up(&[]);
    }
}

/// The fleet-updater release as the demo's manifest names it, with this program as its
/// blob (without its symbols, where `strip` is at hand: smaller to pack and unpack).
fn release_with_program(w: &Workspace) {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    let release = w.path("errand");
    crate::support::copy_tree(&repository.join("errand"), &release);
    let blob = release.join("blobs/fleet-updater/fleet-updater");
    std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
    let program = env!("CARGO_BIN_EXE_fleet-updater");
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(&blob)
        .arg(program)
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        std::fs::copy(program, &blob).unwrap();
    }
    let bytes = std::fs::read(&blob).unwrap();
    std::fs::write(
        release.join("config/blobs.yml"),
        format!(
            "fleet-updater/fleet-updater:\n  size: {}\n  sha: sha256:{}\n",
            bytes.len(),
            fleet_updater::release::sha256_hex(&bytes)
        ),
    )
    .unwrap();
}

fn client(ca: &str) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.as_bytes()).unwrap()])
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// What `url` answers `admin` (a broker's or the director's).
async fn get(client: &Client, url: &str, password: &str) -> Value {
    client
        .get(url)
        .basic_auth("admin", Some(password))
        .header("X-Broker-API-Version", "2.13")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Follows the task a director call answered with to its end.
async fn task(
    client: &Client,
    director: &str,
    password: &str,
    response: reqwest::Response,
) -> Value {
    assert_eq!(response.status(), 302, "{}", response.text().await.unwrap());
    let location = response.headers()["location"].to_str().unwrap().to_string();
    for _ in 0..1200 {
        let task = get(client, &format!("{director}{location}"), password).await;
        if !["queued", "processing"].contains(&task["state"].as_str().unwrap()) {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{location} did not end in 2 minutes");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_director_bootstrapped_by_create_env_deploys_kv_and_a_run_updates_it_through_it() {
    if let Some(why) = fleet_updater::vm::container::unavailable() {
        eprintln!("not run: {why}");
        return;
    }
    let w = Workspace::new();
    release_with_program(&w);
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/create-env");
    let manifest = std::fs::read_to_string(demo.join("director.yml"))
        .unwrap()
        .replace(
            "file://../../errand",
            &format!("file://{}", w.path("errand").display()),
        )
        .replace(
            "file://cpi-release",
            &format!("file://{}", demo.join("cpi-release").display()),
        )
        .replace(
            "file://stemcell",
            &format!("file://{}", demo.join("stemcell").display()),
        )
        .replace("root: .fleet-updater-env", "root: iaas")
        .replace("10.245.2.", NET);
    w.write("director.yml", &manifest);
    let director = Director { w };

    let out = director.env("create-env");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ca, password) = (
        director.variable(&["default_ca", "ca"]),
        director.variable(&["admin_password"]),
    );
    let url = format!("https://{NET}10:25555");
    let http = client(&ca);
    let info = get(&http, &format!("{url}/info"), &password).await;
    // Its own fleet's VMs are processes inside it: it may make no containers there.
    assert_eq!(info["cpi"], "processes", "{info}");

    let kv = fleet_updater::release::build_from_source(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("config/releases/kv"),
        "1",
    )
    .unwrap();
    let uploaded = http
        .post(format!("{url}/releases"))
        .basic_auth("admin", Some(&password))
        .header("content-type", "application/x-compressed")
        .body(kv)
        .send()
        .await
        .unwrap();
    let uploaded = task(&http, &url, &password, uploaded).await;
    assert_eq!(uploaded["state"], "done", "{uploaded}");
    let deployment = std::fs::read_to_string(demo.join("kv-on-director.yml")).unwrap();
    let deployed = http
        .request(Method::POST, format!("{url}/deployments"))
        .basic_auth("admin", Some(&password))
        .header("content-type", "text/yaml")
        .body(deployment)
        .send()
        .await
        .unwrap();
    let deployed = task(&http, &url, &password, deployed).await;
    assert_eq!(deployed["state"], "done", "{deployed}");

    let ca_block: String = ca.lines().map(|l| format!("    {l}\n")).collect();
    // The broker's two instances, provisioned at first start before the kv release was
    // there, failed; a run over the failed instances through the bootstrapped broker
    // deploys them.
    let broker = format!("https://{NET}10:25556");
    let listed = get(
        &http,
        &format!("{broker}/mgmt/service_instances"),
        &password,
    )
    .await;
    let states: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["failed", "failed"], "{listed}");
    director.w.write(
        "broker-run.yml",
        &format!(
            "service_broker:\n  api_endpoint: {broker}\n  username: admin\n  password: \"{password}\"\n  ca: |\n{ca_block}strategy:\n  type: update\n  update: {{instance_type: failed, max_in_parallel: 2}}\npolling: {{interval: 1s}}\n"
        ),
    );
    let said = director.run("broker-run.yml");
    assert!(said.contains("updated 2"), "{said}");
    assert!(!said.contains(&password), "the password is never shown");
    let listed = get(
        &http,
        &format!("{broker}/mgmt/service_instances"),
        &password,
    )
    .await;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["state"] == "provisioned"),
        "{listed}"
    );

    // A run through the bootstrapped director: the deployment recreated.
    director.w.write(
        "run.yml",
        &format!(
            "director:\n  url: {url}\n  username: admin\n  password: \"{password}\"\n  ca: |\n{ca_block}  deployments: \"kv-*\"\nstrategy:\n  type: recreate\npolling: {{interval: 1s}}\n"
        ),
    );
    let said = director.run("run.yml");
    assert!(said.contains("recreated 1"), "{said}");
    assert!(!said.contains(&password), "the password is never shown");

    let out = director.env("delete-env");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let containers = fleet_updater::vm::container::Containers::new(&director.iaas(), None);
    assert!(containers.records().is_empty(), "no container is left");
    let vms: Vec<_> = std::fs::read_dir(director.iaas().join("vms"))
        .unwrap()
        .collect();
    assert!(vms.is_empty(), "no VM is left");
    let left = Command::new("pgrep")
        .args(["-f", &director.iaas().display().to_string()])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "no process of the environment is left"
    );
}
