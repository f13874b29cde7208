//! `serve` on PostgreSQL: two processes on one database, one killed with SIGKILL while its
//! deploys run, the other erroring them once their lease runs out; one process whose
//! database goes down under its deploys and comes back. Either way, the updater brings
//! the fleet up to date afterwards. Runs where `FLEET_TEST_POSTGRES` names a database
//! (`.ci/run`'s second pass).

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fleet_updater::fleet::DEMO;
use fleet_updater::store::testing;
use serde_json::Value;

const PASSWORD: &str = "Shared-Serve-Pw-1";

/// A `serve` process and where it answers.
pub(super) struct Server {
    pub(super) child: Child,
    pub(super) director: String,
    pub(super) broker: String,
    pub(super) ca: PathBuf,
}

/// A server the test did not end itself (it failed halfway) is ended with it: no `serve`
/// outlives its test.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `serve` of `config` on free ports, its state in `state` (and `store`, when given).
pub(super) fn start(config: &Path, state: &Path, store: Option<&str>) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fleet-updater"));
    command
        .args(["serve", "-c"])
        .arg(config)
        .arg("--state-dir")
        .arg(state);
    if let Some(store) = store {
        command.args(["--store", store]);
    }
    let mut child = command
        .args([
            "--director-listen",
            "127.0.0.1:0",
            "--broker-listen",
            "127.0.0.1:0",
        ])
        .env_remove("FLEET_UPDATER_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let listening = crate::serve_output::listening(&mut stdout);
    // Its further lines are not read; they must not block it.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    Server {
        child,
        director: listening.director,
        broker: listening.broker,
        ca: listening.ca,
    }
}

async fn get(client: &reqwest::Client, url: String) -> Value {
    get_as(client, url, PASSWORD).await
}

/// `url`'s JSON, asked as `admin` with `password`; it must succeed.
pub(super) async fn get_as(client: &reqwest::Client, url: String, password: &str) -> Value {
    let response = client
        .get(url)
        .basic_auth("admin", Some(password))
        .header("X-Broker-API-Version", "2.13")
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.unwrap()
}

#[test]
fn when_one_of_two_serves_is_killed_the_other_errors_its_tasks_and_the_fleet_converges() {
    let Some(database) = testing::postgres() else {
        eprintln!(
            "skipped: {} names no PostgreSQL database",
            testing::POSTGRES_VARIABLE
        );
        return;
    };
    let store = testing::fresh_schema(&database).url().to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = small_fleet(dir.path());
    let mut first = start(&config, &dir.path().join("one"), Some(&store));
    let second = start(&config, &dir.path().join("two"), Some(&store));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (killed, survivor) = (first.child.id(), second.child.id());
    let orphaned: Vec<u64> = runtime.block_on(async {
        let client = crate::served::client_trusting(&first.ca);
        // Failed logins on the first slow the same guesser on the second.
        let guess = |server: &Server| {
            let client = crate::served::client_trusting(&server.ca);
            let url = format!("https://{}/deployments", server.director);
            async move {
                let started = tokio::time::Instant::now();
                let response = client
                    .get(url)
                    .basic_auth("admin", Some("wrong"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 401);
                started.elapsed()
            }
        };
        for _ in 0..4 {
            guess(&first).await;
        }
        let waited = guess(&second).await;
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        // Upgrades started through the first, each a deploy that takes a few seconds.
        let tasks = upgrade_three(&client, &first).await;
        // The second sees them running and locked.
        let other = crate::served::client_trusting(&second.ca);
        // (A task is queued for a moment before the first's runner takes it up.)
        for task in &tasks {
            let mut seen = Value::Null;
            for _ in 0..200 {
                seen = get(&other, format!("https://{}/tasks/{task}", second.director)).await;
                if seen["state"] != "queued" {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            assert_eq!(seen["state"], "processing", "{seen}");
        }
        let locks = get(&other, format!("https://{}/locks", second.director)).await;
        assert_eq!(locks.as_array().unwrap().len(), 3, "{locks}");
        tasks
    });
    // SIGKILL: no shutdown, no release of anything.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert_ne!(killed, survivor);
    runtime.block_on(async {
        let client = crate::served::client_trusting(&second.ca);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        for task in &orphaned {
            loop {
                let seen = get(&client, format!("https://{}/tasks/{task}", second.director)).await;
                if seen["state"] == "error" {
                    assert!(
                        seen["result"]
                            .as_str()
                            .unwrap()
                            .contains("stopped renewing"),
                        "{seen}"
                    );
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "task {task} is still {seen}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let locks = get(&client, format!("https://{}/locks", second.director)).await;
        assert_eq!(locks, serde_json::json!([]));
    });
    // The updater, pointed at the survivor's broker, updates every instance, those the
    // killed process left half done included.
    let run = update_all(dir.path(), &second);
    drop(second);
    all_updated(&run, dir.path());
}

/// The demo fleet, small: five instances, none blocked or busy; locks expire 2 s after
/// their process's last renewal. Returns `serve`'s configuration.
fn small_fleet(dir: &Path) -> PathBuf {
    let fleet = DEMO
        .replace("count: 18", "count: 3")
        .replace("count: 12", "count: 2")
        .replace("blocked: [pg-05, rmq-04]", "blocked: []")
        .replace("busy: [rmq-01]", "busy: []")
        + "lock_timeout: 2s\n";
    std::fs::write(dir.join("fleet.yml"), fleet).unwrap();
    let config = dir.join("config.yml");
    std::fs::write(
        &config,
        format!(
            "embedded: {{fleet: fleet.yml}}\nserve:\n  users: [{{name: admin, password: {PASSWORD}}}]\n"
        ),
    )
    .unwrap();
    config
}

/// Upgrades of three instances started through `server`'s broker: their tasks.
async fn upgrade_three(client: &reqwest::Client, server: &Server) -> Vec<u64> {
    let mut tasks = Vec::new();
    for id in ["pg-01", "pg-02", "rmq-01"] {
        let response = client
            .patch(format!(
                "https://{}/mgmt/service_instances/{id}?operation_type=upgrade",
                server.broker
            ))
            .basic_auth("admin", Some(PASSWORD))
            .header("X-Broker-API-Version", "2.13")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "{id}");
        let operation: Value = response.json().await.unwrap();
        tasks.push(operation["BoshTaskID"].as_u64().unwrap());
    }
    tasks
}

/// `fleet-updater run` against `server`'s broker, its report in `dir`.
fn update_all(dir: &Path, server: &Server) -> std::process::Output {
    let run_config = dir.join("run.yml");
    std::fs::write(
        &run_config,
        format!(
            "service_broker:\n  api_endpoint: https://{}\n  username: admin\n  password: {PASSWORD}\n  ca: |\n{}\npolling:\n  interval: 1s\n",
            server.broker,
            std::fs::read_to_string(&server.ca)
                .unwrap()
                .lines()
                .map(|l| format!("    {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_fleet-updater"))
        .args(["run", "-c"])
        .arg(&run_config)
        .arg("--state-dir")
        .arg(dir.join("updater"))
        .arg("--report")
        .arg(dir.join("report.json"))
        .env_remove("FLEET_UPDATER_CONFIG")
        .output()
        .unwrap()
}

/// The run succeeded and updated all five instances.
fn all_updated(run: &std::process::Output, dir: &Path) {
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let report = crate::support::json(&dir.join("report.json"));
    assert_eq!(report["counts"]["failed"], 0, "{report}");
    assert_eq!(report["counts"]["updated"], 5, "{report}");
}

/// The status `serve`'s `GET /ready` answers.
async fn readiness(client: &reqwest::Client, server: &Server) -> u16 {
    client
        .get(format!("https://{}/ready", server.director))
        .basic_auth("admin", Some(PASSWORD))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[test]
fn when_the_database_goes_down_under_its_deploys_serve_answers_and_recovers_after() {
    let Some(database) = testing::postgres() else {
        eprintln!(
            "skipped: {} names no PostgreSQL database",
            testing::POSTGRES_VARIABLE
        );
        return;
    };
    let (store, outage) = testing::fresh_database(&database);
    let dir = tempfile::tempdir().unwrap();
    let config = small_fleet(dir.path());
    let server = start(&config, &dir.path().join("state"), Some(store.url()));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = crate::served::client_trusting(&server.ca);
        assert_eq!(readiness(&client, &server).await, 200);
        let tasks = upgrade_three(&client, &server).await;
        outage.begin();
        // Down for longer than the lock timeout: serve answers meanwhile, and says it
        // is not ready.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut seen = Vec::new();
        while tokio::time::Instant::now() < deadline {
            seen.push(readiness(&client, &server).await);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(seen.contains(&503), "{seen:?}");
        // What needs the database is refused as unavailable, which clients try again.
        let listing = client
            .get(format!("https://{}/mgmt/service_instances", server.broker))
            .basic_auth("admin", Some(PASSWORD))
            .header("X-Broker-API-Version", "2.13")
            .send()
            .await
            .unwrap();
        assert_eq!(listing.status(), 503);
        let tasks_listing = client
            .get(format!("https://{}/tasks", server.director))
            .basic_auth("admin", Some(PASSWORD))
            .send()
            .await
            .unwrap();
        assert_eq!(tasks_listing.status(), 503);
        outage.end();
        // Every deploy ends (the store failed under it, or it finished), recorded once
        // the database answers again; none is left processing, no lock is left.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        for task in &tasks {
            loop {
                let seen = get(&client, format!("https://{}/tasks/{task}", server.director)).await;
                if ["done", "error", "cancelled"].contains(&seen["state"].as_str().unwrap()) {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "task {task} is still {seen}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let locks = get(&client, format!("https://{}/locks", server.director)).await;
        assert_eq!(locks, serde_json::json!([]));
        assert_eq!(readiness(&client, &server).await, 200);
    });
    // The updater brings every instance up to date, those cut off halfway included.
    let run = update_all(dir.path(), &server);
    drop(server);
    all_updated(&run, dir.path());
}
