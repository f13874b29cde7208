//! Prints how fast `serve` answers broker polls; run with
//! `cargo run --release --example serve_bench [-- without-health-monitor]` (the health
//! monitor, on by default as in `serve`, passes over the 10,000 instances meanwhile).
//!
//! A 10,000-instance embedded fleet (6,000 single-VM, 4,000 three-node clusters, zero
//! latency) is provisioned, then served over HTTPS on 127.0.0.1. 50 clients, each on one
//! keep-alive connection opened beforehand, send 1,000 `last_operation` polls in all, each
//! for an instance's own provisioning task, as the updater's broker inventory does.
//! Target: p99 under 50 ms.

// Latency is what this measures, so it reads the real clock.
#![allow(clippy::disallowed_types)]

use std::time::{Duration, Instant};

use fleet_updater::config::ServeConfig;
use fleet_updater::fleet::{self, Access, DEMO, Definition};
use fleet_updater::serve::{self, Addresses};
use reqwest::{Certificate, Client};

const CLIENTS: usize = 50;
const POLLS: usize = 1_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut definition = Definition::parse(DEMO)
        .expect("the demo fleet is valid")
        .without_latency();
    definition.provision[0].count = 6_000;
    definition.provision[1].count = 4_000;
    definition.busy = Vec::new();
    definition.cloud_config = definition
        .cloud_config
        .map(|c| c.replace("10.244.0.0/20", "10.240.0.0/12"));
    let started = Instant::now();
    let fleet = fleet::open(
        dir.path(),
        &definition,
        Access::SERVE,
        &fleet_updater::store::StoreLocation::Sqlite,
        &mut |_| {},
    )
    .await
    .expect("the fleet opens");
    let polls: Vec<(String, u64)> = fleet
        .broker
        .instances()
        .await
        .expect("the broker lists its instances")
        .into_iter()
        .filter_map(|v| Some((v.instance.id.clone(), v.last_task?.id)))
        .collect();
    println!(
        "{} instances provisioned in {:.1}s",
        polls.len(),
        started.elapsed().as_secs_f64()
    );
    let any = "127.0.0.1:0".parse().expect("an address");
    // Every client connects from 127.0.0.1, as a platform behind one egress address
    // does: the per-client connection limit must admit them all.
    let mut config = ServeConfig::default();
    config.limits.max_connections_per_client =
        config.limits.max_connections_per_client.max(CLIENTS);
    if std::env::args().any(|a| a == "without-health-monitor") {
        config.health_monitor = None;
        println!("without the health monitor");
    }
    let serving = serve::start(
        fleet,
        &config,
        dir.path(),
        Addresses {
            director: any,
            broker: any,
        },
    )
    .await
    .expect("serve starts");
    let credentials = std::fs::read_to_string(serving.credentials.as_ref().expect("generated"))
        .expect("the credentials file");
    let password = credentials
        .lines()
        .find_map(|l| l.strip_prefix("password: "))
        .expect("a password")
        .to_string();
    let ca = std::fs::read(serving.ca.as_ref().expect("a generated CA")).expect("the CA");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = format!("https://{}", serving.broker);

    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let client = Client::builder()
            .tls_certs_only([Certificate::from_pem(&ca).expect("PEM")])
            .pool_max_idle_per_host(1)
            .build()
            .expect("a client");
        let mine: Vec<(String, u64)> = polls
            .iter()
            .skip(c)
            .step_by(polls.len() / (POLLS / CLIENTS))
            .take(POLLS / CLIENTS)
            .cloned()
            .collect();
        let (base, password) = (base.clone(), password.clone());
        clients.spawn(async move {
            // Each connection is opened (TCP and TLS) before the clock starts: what is
            // measured is a poll on a keep-alive connection, as the updater sends them.
            let (id, task) = &mine[0];
            client
                .get(format!("{base}/v2/service_instances/{id}/last_operation"))
                .query(&[("operation", format!("{{\"BoshTaskID\":{task}}}"))])
                .basic_auth("admin", Some(&password))
                .send()
                .await
                .expect("the connection opens");
            let mut latencies = Vec::new();
            for (id, task) in mine {
                let url = format!("{base}/v2/service_instances/{id}/last_operation");
                let operation = format!("{{\"BoshTaskID\":{task}}}");
                let sent = Instant::now();
                let answer = client
                    .get(&url)
                    .query(&[("operation", operation.as_str())])
                    .basic_auth("admin", Some(&password))
                    .header("X-Broker-API-Version", "2.13")
                    .send()
                    .await
                    .expect("an answer");
                assert!(answer.status().is_success(), "{}", answer.status());
                answer.bytes().await.expect("a body");
                latencies.push(sent.elapsed());
            }
            latencies
        });
    }
    let mut latencies: Vec<Duration> = Vec::new();
    while let Some(done) = clients.join_next().await {
        latencies.extend(done.expect("a client finished"));
    }
    latencies.sort();
    println!(
        "{} last_operation polls over {CLIENTS} keep-alive connections: p50 {:.1} ms, p99 {:.1} ms (target < 50 ms), max {:.1} ms",
        latencies.len(),
        percentile(&latencies, 0.50).as_secs_f64() * 1000.0,
        percentile(&latencies, 0.99).as_secs_f64() * 1000.0,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1000.0,
    );
    serving.shutdown(Duration::from_secs(1)).await;
}
