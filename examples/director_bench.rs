//! Prints the director's figures; run with `cargo run --release --example director_bench`.
//!
//! (a) Parsing, validating and planning a deployment of 1,000 instances in 50 instance
//!     groups, against 1,000 existing instances (target under 100 ms).
//! (b) Deploying it from scratch with zero simulated latency, on SQLite in a temporary
//!     folder; watch times elapse in virtual time (target under 2 s of wall time).

// Wall time is what this measures, so it reads the real clock.
#![allow(clippy::disallowed_types)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use fleet_updater::director::agent::Agent;
use fleet_updater::director::cloud_properties::CloudProperties;
use fleet_updater::director::cpi::Cpi;
use fleet_updater::director::manifest::parse;
use fleet_updater::director::model::{
    DesiredState, InstanceRecord, Package, Release, ReleaseJob, Stemcell, TaskState,
};
use fleet_updater::director::plan::{PlanOptions, desired_spec, plan};
use fleet_updater::director::sim::{SimulatedCloud, SimulationSettings};
use fleet_updater::director::validate::{CloudFacts, Uploaded, problems};
use fleet_updater::director::{DeployOptions, Director, DirectorSettings, Infrastructure};
use fleet_updater::store::SqliteStore;

const CLOUD: &str = "azs: [{name: z1}, {name: z2}, {name: z3}]
vm_types: [{name: small}]
networks:
- name: default
  subnets: [{range: 10.0.0.0/16, gateway: 10.0.0.1, azs: [z1, z2, z3]}]
compilation: {workers: 4, network: default, vm_type: small, reuse_compilation_vms: true}
";

fn manifest() -> String {
    let mut text = String::from(
        "name: big
releases: [{name: app, version: '1'}]
stemcells: [{alias: default, os: jammy, version: '1.0'}]
update: {canaries: 1, max_in_flight: 25%, canary_watch_time: 1000-5000, update_watch_time: 1000-5000, serial: false}
instance_groups:
",
    );
    for g in 0..50 {
        text.push_str(&format!(
            "- name: group-{g:02}
  instances: 20
  azs: [z1, z2, z3]
  jobs: [{{name: app, release: app, properties: {{group: {g}}}}}]
  vm_type: small
  stemcell: default
  persistent_disk: 1024
  networks: [{{name: default}}]
"
        ));
    }
    text
}

fn release() -> Release {
    Release {
        name: "app".into(),
        version: "1".into(),
        jobs: vec![ReleaseJob {
            name: "app".into(),
            packages: vec!["app".into()],
            ..Default::default()
        }],
        packages: vec![
            Package {
                name: "app".into(),
                dependencies: vec!["runtime".into()],
                ..Default::default()
            },
            Package {
                name: "runtime".into(),
                dependencies: vec![],
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

fn planning() {
    let text = manifest();
    let root = fleet_updater::yaml::load(CLOUD, fleet_updater::yaml::Limits::default())
        .expect("cloud config");
    let facts = CloudFacts::from_cloud_config(&root, BTreeSet::from(["default".to_string()]));
    let uploaded = Uploaded {
        releases: BTreeSet::from(["app/1".to_string()]),
        stemcells: BTreeSet::from(["jammy/1.0".to_string()]),
    };
    // Existing instances on an older stemcell, so that every instance changes.
    let m = parse(&text).expect("valid");
    let existing: Vec<InstanceRecord> = m
        .instance_groups
        .iter()
        .flat_map(|g| {
            let mut spec = desired_spec(&m, g);
            spec.stemcell = "jammy/0.9".into();
            (0..g.instances).map(move |i| InstanceRecord {
                id: format!("{}-{i}", g.name),
                deployment: "big".into(),
                group: g.name.clone(),
                index: i,
                az: None,
                vm_cid: Some(format!("vm-{}-{i}", g.name)),
                agent_id: Some(format!("agent-{}-{i}", g.name)),
                vm_stemcell: Some("jammy/0.9".into()),
                vm_type: Some("small".into()),
                vm_networks: Vec::new(),
                disk_cid: None,
                applied: Some(spec.clone()),
                state: DesiredState::Started,
                ignore: false,
            })
        })
        .collect();
    let started = Instant::now();
    let manifest = parse(&text).expect("valid");
    let found = problems(&manifest, &facts, &uploaded);
    assert!(found.is_empty(), "{found:?}");
    let planned = plan(
        &manifest,
        existing,
        &CloudProperties::default(),
        &PlanOptions::default(),
    );
    let elapsed = started.elapsed();
    assert_eq!(planned.changed_instances(), 1000);
    println!(
        "(a) parse + validate + plan, 1,000 instances in 50 groups: {:.1} ms (target < 100 ms)",
        elapsed.as_secs_f64() * 1000.0
    );
}

fn deploying() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let started = Instant::now();
    let state = runtime.block_on(async {
        let store: Arc<dyn fleet_updater::store::Store> =
            Arc::new(SqliteStore::open(dir.path()).expect("store"));
        let cloud = Arc::new(SimulatedCloud::new(
            Arc::clone(&store),
            SimulationSettings::default(),
        ));
        let director = Director::new(
            store,
            Infrastructure::new(Arc::clone(&cloud) as Arc<dyn Cpi>, cloud as Arc<dyn Agent>),
            DirectorSettings::default(),
        )
        .await
        .expect("director");
        director.upload_release(&release()).await.expect("release");
        director
            .upload_stemcell(&Stemcell {
                name: "s".into(),
                os: "jammy".into(),
                version: "1.0".into(),
                cid: None,
            })
            .await
            .expect("stemcell");
        director
            .update_cloud_config(CLOUD)
            .await
            .expect("cloud config");
        let task = director
            .deploy(&manifest(), DeployOptions::default())
            .await
            .expect("started");
        let done = director.wait(task.id).await.expect("task");
        assert_eq!(
            director.instances("big").await.expect("instances").len(),
            1000
        );
        done
    });
    let elapsed = started.elapsed();
    assert_eq!(state.state, TaskState::Done, "{:?}", state.result);
    println!(
        "(b) deploying 1,000 instances in 50 groups from scratch, zero latency: {:.2} s wall time (target < 2 s)",
        elapsed.as_secs_f64()
    );
}

fn main() {
    planning();
    deploying();
}
