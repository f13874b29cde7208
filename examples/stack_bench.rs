//! Prints the whole stack at scale: two `serve` processes sharing one PostgreSQL database,
//! and `fleet-updater run` against one's broker with 100 operations in flight and a 100 ms
//! poll, as an operator runs it against a fleet of 10,000 service instances:
//!
//!     cargo build --release --examples --bins
//!     scripts/with-postgres target/release/examples/stack_bench [INSTANCES]
//!
//! The database is the one `FLEET_TEST_POSTGRES` names (a schema of its own); the fleet is
//! the demo's, 6 in 10 single-VM and 4 in 10 three-node clusters (10,000 by default), on
//! the simulated IaaS with short latencies (1-5 ms an agent call, 5-10 ms a cloud call)
//! and the demo's watch times. The first `serve` provisions it; the second starts on the
//! same database. Before the run, two upgrades of each plan, one at a time, give each
//! plan's unloaded operation time; the ideal makespan is one canary of the slower plan
//! and then every other operation's unloaded time spread over 100 lanes. Printed: the
//! makespan against that ideal (target at least 0.8), the broker requests per second,
//! the latency of `last_operation` polls a probe sends beside the run (p50, p99; target
//! p99 under 100 ms), and both processes' peak memory.

// Wall time is what this measures, so it reads the real clock.
#![allow(clippy::disallowed_types)]

#[path = "shared/serve_output.rs"]
mod serve_output;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fleet_updater::fleet::DEMO;
use fleet_updater::store::testing;
use reqwest::{Certificate, Client};
use serde_json::Value;

const PASSWORD: &str = "Stack-Bench-Pw-1";
const IN_FLIGHT: usize = 100;

/// A `serve` process, where it answers, and how many broker requests it logged.
struct Server {
    child: Child,
    director: String,
    broker: String,
    ca: PathBuf,
    broker_requests: Arc<AtomicU64>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// The most memory the process has held, from `/proc`.
    fn peak_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    }
}

/// Counts the access log's broker requests in `output`, to its end.
fn count_broker_requests(output: impl Read + Send + 'static, count: Arc<AtomicU64>) {
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines() {
            let Ok(line) = line else { break };
            if line.contains("fleet_serve::access") && line.contains("api=\"broker\"") {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
}

/// `serve` of `config`, its state in `state`, its store `store`; waits for it to listen.
fn start(binary: &Path, config: &Path, state: &Path, store: &str) -> Server {
    let mut child = Command::new(binary)
        .args(["serve", "-c"])
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .args(["--store", store])
        .args([
            "--director-listen",
            "127.0.0.1:0",
            "--broker-listen",
            "127.0.0.1:0",
        ])
        .env_remove("FLEET_UPDATER_CONFIG")
        .env("RUST_LOG", "fleet_serve::access=info,warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let broker_requests = Arc::new(AtomicU64::new(0));
    count_broker_requests(
        child.stderr.take().expect("stderr"),
        Arc::clone(&broker_requests),
    );
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let listening = serve_output::listening(&mut stdout);
    count_broker_requests(stdout, Arc::clone(&broker_requests));
    Server {
        child,
        director: listening.director,
        broker: listening.broker,
        ca: listening.ca,
        broker_requests,
    }
}

fn client(server: &Server) -> Client {
    let ca = std::fs::read(&server.ca).expect("the CA");
    Client::builder()
        .tls_certs_only([Certificate::from_pem(&ca).expect("PEM")])
        .build()
        .expect("a client")
}

async fn broker_get(client: &Client, server: &Server, path: &str) -> (u16, Value) {
    let answer = client
        .get(format!("https://{}{path}", server.broker))
        .basic_auth("admin", Some(PASSWORD))
        .header("X-Broker-API-Version", "2.13")
        .send()
        .await
        .expect("an answer");
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// Upgrades `id` through `server`'s broker and polls every 100 ms until it ends: how long
/// it took, and the operation the broker named.
async fn upgrade_alone(client: &Client, server: &Server, id: &str) -> (Duration, String) {
    let started = Instant::now();
    let answer = client
        .patch(format!(
            "https://{}/mgmt/service_instances/{id}?operation_type=upgrade",
            server.broker
        ))
        .basic_auth("admin", Some(PASSWORD))
        .header("X-Broker-API-Version", "2.13")
        .send()
        .await
        .expect("an answer");
    assert_eq!(answer.status(), 202, "upgrading {id}");
    let operation: Value = answer.json().await.expect("an operation");
    let operation = serde_json::to_string(&operation).expect("JSON");
    let url = format!(
        "https://{}/v2/service_instances/{id}/last_operation",
        server.broker
    );
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let state: Value = client
            .get(&url)
            .query(&[("operation", operation.as_str())])
            .basic_auth("admin", Some(PASSWORD))
            .header("X-Broker-API-Version", "2.13")
            .send()
            .await
            .expect("an answer")
            .json()
            .await
            .expect("JSON");
        match state["state"].as_str() {
            Some("in progress") => continue,
            Some("succeeded") => return (started.elapsed(), operation),
            _ => panic!("upgrading {id}: {state}"),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The demo fleet at `instances`, every instance free to update, short latencies.
fn fleet(instances: usize) -> String {
    // Both counts are replaced at once: one's new value may begin with the other's old.
    DEMO.replace("count: 18", "count: SINGLES")
        .replace("count: 12", "count: CLUSTERS")
        .replace("SINGLES", &(instances * 6 / 10).to_string())
        .replace("CLUSTERS", &(instances * 4 / 10).to_string())
        .replace("blocked: [pg-05, rmq-04]", "blocked: []")
        .replace("busy: [rmq-01]", "busy: []")
        .replace("cpi_latency: 60ms-180ms", "cpi_latency: 5ms-10ms")
        .replace("agent_latency: 10ms-50ms", "agent_latency: 1ms-5ms")
        .replace("10.244.0.0/20", "10.240.0.0/12")
}

fn main() {
    let Some(database) = testing::postgres() else {
        eprintln!(
            "{} names no PostgreSQL database: run under scripts/with-postgres",
            testing::POSTGRES_VARIABLE
        );
        std::process::exit(2);
    };
    let instances: usize = std::env::args()
        .nth(1)
        .map_or(10_000, |n| n.parse().expect("INSTANCES is a number"));
    let binary = std::env::current_exe()
        .expect("this program's path")
        .parent()
        .and_then(Path::parent)
        .expect("target/release")
        .join("fleet-updater");
    assert!(
        binary.exists(),
        "{} is missing: cargo build --release --examples --bins",
        binary.display()
    );
    let store = testing::fresh_schema(&database).url().to_string();
    let dir = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(dir.path().join("fleet.yml"), fleet(instances)).expect("fleet.yml");
    let config = dir.path().join("serve.yml");
    std::fs::write(
        &config,
        format!(
            "embedded: {{fleet: fleet.yml}}\nserve:\n  users: [{{name: admin, password: {PASSWORD}}}]\n  limits: {{max_connections_per_client: 256}}\n"
        ),
    )
    .expect("serve.yml");

    let started = Instant::now();
    let first = start(&binary, &config, &dir.path().join("one"), &store);
    println!(
        "{instances} instances provisioned by the first serve on PostgreSQL in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let second = start(&binary, &config, &dir.path().join("two"), &store);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let http = client(&first);

    // Each plan's operation, alone.
    let ids: Vec<(String, String)> = runtime.block_on(async {
        let (status, listing) = broker_get(&http, &first, "/mgmt/service_instances").await;
        assert_eq!(status, 200, "{listing}");
        listing
            .as_array()
            .expect("a listing")
            .iter()
            .map(|i| {
                (
                    i["service_instance_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    i["plan_id"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    });
    let mut plans: Vec<String> = ids.iter().map(|(_, p)| p.clone()).collect();
    plans.sort();
    plans.dedup();
    // The last of them is the probe's: an instance the run finds up to date.
    let mut probed = (String::new(), String::new());
    let alone: Vec<(String, Duration)> = runtime.block_on(async {
        let mut alone = Vec::new();
        for plan in &plans {
            let mut took = Duration::ZERO;
            for (id, _) in ids.iter().filter(|(_, p)| p == plan).take(2) {
                let (one, operation) = upgrade_alone(&http, &first, id).await;
                took += one;
                probed = (id.clone(), operation);
            }
            alone.push((plan.clone(), took / 2));
        }
        alone
    });
    let of_plan = |plan: &str| {
        alone
            .iter()
            .find(|(p, _)| p == plan)
            .map_or(Duration::ZERO, |(_, d)| *d)
    };
    for (plan, took) in &alone {
        println!(
            "{plan}: {:.2}s an operation alone (polled every 100 ms)",
            took.as_secs_f64()
        );
    }
    let total: Duration = ids.iter().map(|(_, p)| of_plan(p)).sum::<Duration>()
        - alone.iter().map(|(_, d)| *d * 2).sum::<Duration>();
    let longest = alone.iter().map(|(_, d)| *d).max().unwrap_or_default();
    let ideal = longest + (total / IN_FLIGHT as u32).max(longest);

    // The run, and a probe beside it.
    let run_config = dir.path().join("run.yml");
    std::fs::write(
        &run_config,
        format!(
            "service_broker:\n  api_endpoint: https://{}\n  username: admin\n  password: {PASSWORD}\n  ca: |\n{}\nstrategy:\n  type: update\n  update: {{canaries: 1, max_in_parallel: {IN_FLIGHT}}}\npolling:\n  interval: 100ms\nrate_limit:\n  requests_per_second: 100000\n",
            first.broker,
            std::fs::read_to_string(&first.ca)
                .expect("the CA")
                .lines()
                .map(|l| format!("    {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    )
    .expect("run.yml");
    let requests_before = first.broker_requests.load(Ordering::Relaxed);
    let done = Arc::new(AtomicBool::new(false));
    let probe = {
        let (http, done) = (http.clone(), Arc::clone(&done));
        let (id, operation) = probed.clone();
        let url = format!(
            "https://{}/v2/service_instances/{id}/last_operation",
            first.broker
        );
        runtime.spawn(async move {
            let mut latencies = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let answer = http
                    .get(&url)
                    .query(&[("operation", operation.as_str())])
                    .basic_auth("admin", Some(PASSWORD))
                    .header("X-Broker-API-Version", "2.13")
                    .send()
                    .await;
                if let Ok(answer) = answer {
                    let _ = answer.bytes().await;
                    latencies.push(sent.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            latencies
        })
    };
    let started = Instant::now();
    let run = Command::new(&binary)
        .args(["run", "-c"])
        .arg(&run_config)
        .arg("--state-dir")
        .arg(dir.path().join("updater"))
        .arg("--report")
        .arg(dir.path().join("report.json"))
        .env_remove("FLEET_UPDATER_CONFIG")
        .output()
        .expect("the updater runs");
    let makespan = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let mut latencies = runtime.block_on(probe).expect("the probe ends");
    latencies.sort();
    let requests = first.broker_requests.load(Ordering::Relaxed) - requests_before;
    let report: Value = std::fs::read(dir.path().join("report.json"))
        .ok()
        .and_then(|r| serde_json::from_slice(&r).ok())
        .unwrap_or(Value::Null);
    println!(
        "fleet-updater run (exit {:?}): {}",
        run.status.code(),
        report["counts"]
    );
    println!(
        "makespan {:.1}s, ideal {:.1}s: {:.2} of the ideal (target at least 0.8)",
        makespan.as_secs_f64(),
        ideal.as_secs_f64(),
        ideal.as_secs_f64() / makespan.as_secs_f64()
    );
    println!(
        "{requests} broker requests: {:.0} per second",
        requests as f64 / makespan.as_secs_f64()
    );
    if !latencies.is_empty() {
        println!(
            "{} last_operation probes beside the run: p50 {:.1} ms, p99 {:.1} ms (target < 100 ms)",
            latencies.len(),
            percentile(&latencies, 0.50).as_secs_f64() * 1000.0,
            percentile(&latencies, 0.99).as_secs_f64() * 1000.0,
        );
    }
    println!(
        "peak memory: first serve {:.0} MiB, second serve {:.0} MiB (director {}, {})",
        first.peak_mib(),
        second.peak_mib(),
        first.director,
        second.director,
    );
    if !run.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&run.stderr));
    }
}
