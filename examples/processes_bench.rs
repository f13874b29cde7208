//! Prints what real processes cost; run with `cargo run --release --example
//! processes_bench`. Needs `cc` and `ruby`.
//!
//! Deploys 20 instances of the demo kv release (config/releases/kv) in one deployment,
//! five at a time, on the process-backed IaaS: the server compiled with `cc`, templates
//! rendered through Ruby, each instance's lifecycle scripts and server run as processes.
//! Then the same with every VM a container (as root with bubblewrap; this program is
//! the VMs' supervisor, as `fleet-updater vm-supervisor` is), then on the simulated cloud
//! with no latency (watch times elapse in real time there too), and the overhead per
//! instance of each (target: containers at most 0.2 s per instance over plain processes).

// Wall time is what this measures, so it reads the real clock.
#![allow(clippy::disallowed_types)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet_updater::director::agent::Agent;
use fleet_updater::director::cpi::Cpi;
use fleet_updater::director::model::{Stemcell, TaskState};
use fleet_updater::director::sim::{Latency, SimulatedCloud, SimulationSettings};
use fleet_updater::director::{DeployOptions, Director, DirectorSettings, Infrastructure};
use fleet_updater::iaas::cloud::{ProcessCloud, Supervision};
use fleet_updater::release::{build_from_source, from_tarball};
use fleet_updater::store::{SqliteStore, Store};
use fleet_updater::vm::supervisor::Timings;

const INSTANCES: u32 = 20;

fn manifest() -> String {
    format!(
        "name: kv-bench
releases: [{{name: kv, version: '1'}}]
stemcells: [{{alias: default, os: local, version: '1'}}]
update: {{canaries: 1, max_in_flight: 5, canary_watch_time: 100-10000, update_watch_time: 100-10000}}
networks: [{{name: default, subnets: [{{range: 10.248.0.0/24, gateway: 10.248.0.1}}]}}]
instance_groups:
- name: kv
  instances: {INSTANCES}
  jobs: [{{name: kv, release: kv}}]
  vm_type: small
  stemcell: default
  persistent_disk: 16
  networks: [{{name: default}}]
"
    )
}

async fn director(store: Arc<dyn Store>, infrastructure: Infrastructure) -> Director {
    let settings = DirectorSettings {
        agent_timeout: Duration::from_secs(600),
        ..DirectorSettings::default()
    };
    let director = Director::new(store, infrastructure, settings)
        .await
        .unwrap();
    director
        .upload_stemcell(&Stemcell {
            name: "bosh-local".into(),
            os: "local".into(),
            version: "1".into(),
            cid: None,
        })
        .await
        .unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/releases/kv");
    let archive = from_tarball(&build_from_source(&source, "1").unwrap()).unwrap();
    let task = director
        .upload_release_archive(archive, false)
        .await
        .unwrap();
    assert_eq!(director.wait(task.id).await.unwrap().state, TaskState::Done);
    director
}

async fn deploy(director: &Director) -> Duration {
    let started = Instant::now();
    let task = director
        .deploy(&manifest(), DeployOptions::default())
        .await
        .unwrap();
    let task = director.wait(task.id).await.unwrap();
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    started.elapsed()
}

/// The real deployment on VMs supervised as `supervision` says: how long it took and
/// how many servers ran.
async fn real(dir: &Path, supervision: Supervision) -> (Duration, usize) {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.join("store")).unwrap());
    let cloud = Arc::new(
        ProcessCloud::open(
            &dir.join("iaas"),
            store.clone().into(),
            Timings::default(),
            supervision,
        )
        .unwrap(),
    );
    let real = director(store, cloud.infrastructure()).await;
    let took = deploy(&real).await;
    let running = cloud.pids().await.len();
    cloud.halt().await;
    (took, running)
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Started as a container VM's supervisor.
    let args: Vec<String> = std::env::args().collect();
    if let [_, verb, vm] = args.as_slice()
        && verb == "vm-supervisor"
    {
        runtime
            .block_on(fleet_updater::vm::daemon::serve(
                Path::new(vm),
                Timings::default(),
            ))
            .unwrap();
        return;
    }
    runtime.block_on(bench());
}

async fn bench() {
    let dir = tempfile::tempdir().unwrap();
    let (processes, running) = real(&dir.path().join("processes"), Supervision::InProcess).await;

    let containers = match fleet_updater::vm::container::unavailable() {
        Some(why) => Err(why),
        None => {
            let at = dir.path().join("containers");
            let program = std::env::current_exe().unwrap();
            let measured = real(&at, Supervision::Containers { program }).await;
            fleet_updater::vm::container::Containers::new(&at.join("iaas"), None).clean_up(&[]);
            Ok(measured)
        }
    };

    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.path().join("simulated")).unwrap());
    let settings = SimulationSettings {
        cpi_latency: Latency::ZERO,
        agent_latency: Latency::ZERO,
        ..SimulationSettings::default()
    };
    let sim = Arc::new(SimulatedCloud::new(Arc::clone(&store), settings));
    let infrastructure = Infrastructure::new(
        Arc::clone(&sim) as Arc<dyn Cpi>,
        Arc::clone(&sim) as Arc<dyn Agent>,
    );
    let simulated = director(store, infrastructure).await;
    let simulation = deploy(&simulated).await;

    let overhead = processes.saturating_sub(simulation) / INSTANCES;
    println!("deploy {INSTANCES} kv instances, 5 at a time (compile included):");
    println!("  real processes: {processes:.2?} ({running} servers ran)");
    match containers {
        Ok((took, running)) => {
            println!("  containers:     {took:.2?} ({running} servers ran)");
            let more = took.as_secs_f64() - processes.as_secs_f64();
            println!(
                "  containers over plain processes per instance: {:.3} s (target at most 0.2 s)",
                more / f64::from(INSTANCES)
            );
        }
        Err(why) => println!("  containers:     not measured: {why}"),
    }
    println!("  simulation:     {simulation:.2?}");
    println!("  overhead per instance (plain processes over simulation): {overhead:.2?}");
}
