use std::sync::Arc;
use std::time::Duration;

use super::*;
use fleet_director::model::{Release, Stemcell};
use fleet_director::sim::{Latency, SimulatedCloud, SimulationSettings};
use fleet_director::{DirectorSettings, Infrastructure, agent::Agent, cpi::Cpi};
use fleet_store::Store;

const TEMPLATE: &str =
    "update: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}
networks:
- name: default
  subnets:
  - {range: 10.1.0.0/24, gateway: 10.1.0.1}
instance_groups:
- name: db
  instances: 1
  jobs: [{name: postgres, release: postgres}]
  vm_type: small
  stemcell: default
  persistent_disk: 1024
  networks: [{name: default}]
";

fn versions(release: &str, stemcell: &str) -> Versions {
    Versions {
        releases: vec![Version {
            name: "postgres".into(),
            version: release.into(),
        }],
        stemcell: StemcellVersion {
            os: "jammy".into(),
            version: stemcell.into(),
        },
    }
}

async fn broker() -> Broker {
    let store: Arc<dyn Store> = fleet_store::testing::store();
    let latency = Latency {
        min: Duration::from_millis(50),
        max: Duration::from_millis(100),
    };
    let cloud = Arc::new(SimulatedCloud::new(
        Arc::clone(&store),
        SimulationSettings {
            cpi_latency: latency,
            agent_latency: latency,
            ..SimulationSettings::default()
        },
    ));
    let director = Director::new(
        Arc::clone(&store),
        Infrastructure::new(Arc::clone(&cloud) as Arc<dyn Cpi>, cloud as Arc<dyn Agent>),
        DirectorSettings::default(),
    )
    .await
    .unwrap();
    for v in ["15", "16"] {
        director
            .upload_release(&Release {
                name: "postgres".into(),
                version: v.into(),
                jobs: vec![fleet_director::model::ReleaseJob {
                    name: "postgres".into(),
                    packages: vec![],
                    ..Default::default()
                }],
                packages: vec![],
                ..Default::default()
            })
            .await
            .unwrap();
    }
    for v in ["1.0", "2.0"] {
        director
            .upload_stemcell(&Stemcell {
                name: "s".into(),
                os: "jammy".into(),
                version: v.into(),
                cid: None,
            })
            .await
            .unwrap();
    }
    let catalog = Catalog {
        plans: vec![Plan {
            id: "small".into(),
            manifest: TEMPLATE.into(),
            current: versions("16", "2.0"),
        }],
    };
    Broker::new(director, store, catalog)
}

async fn provisioned(broker: &Broker, id: &str) {
    let task = broker
        .provision(
            id,
            "small",
            Some(&versions("15", "1.0")),
            false,
            &Default::default(),
        )
        .await
        .unwrap();
    let task = broker.director().wait(task.id).await.unwrap();
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
}

#[tokio::test(start_paused = true)]
async fn an_outdated_instance_is_upgraded_then_up_to_date() {
    let broker = broker().await;
    provisioned(&broker, "a").await;
    let view = broker.instance("a").await.unwrap().unwrap();
    assert!(view.update_available);
    assert_eq!(view.state, State::Provisioned);
    assert_eq!(view.running.unwrap().describe(), "postgres/15, jammy/1.0");

    let Answer::Accepted { task } = broker.upgrade("a", false).await.unwrap() else {
        panic!("expected the upgrade to start");
    };
    assert_eq!(
        broker.instance("a").await.unwrap().unwrap().state,
        State::Deploying
    );
    assert_eq!(
        broker.upgrade("a", false).await.unwrap(),
        Answer::Busy,
        "busy while the lock is held"
    );
    assert_eq!(
        broker.operation(task).await.unwrap(),
        OperationStatus::InProgress
    );
    broker.director().wait(task).await.unwrap();
    assert_eq!(
        broker.operation(task).await.unwrap(),
        OperationStatus::Succeeded
    );
    let view = broker.instance("a").await.unwrap().unwrap();
    assert!(!view.update_available);
    assert_eq!(view.running.unwrap().describe(), "postgres/16, jammy/2.0");
    assert_eq!(broker.upgrade("a", false).await.unwrap(), Answer::UpToDate);
}

#[tokio::test(start_paused = true)]
async fn a_blocked_instance_is_upgraded_only_with_force() {
    let broker = broker().await;
    provisioned(&broker, "a").await;
    broker.set_blocked("a", true).await.unwrap();
    assert_eq!(broker.upgrade("a", false).await.unwrap(), Answer::Blocked);
    assert!(matches!(
        broker.upgrade("a", true).await.unwrap(),
        Answer::Accepted { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn unknown_and_orphaned_instances_are_reported_as_such() {
    let broker = broker().await;
    assert_eq!(
        broker.upgrade("nobody", false).await.unwrap(),
        Answer::Deleted
    );
    provisioned(&broker, "a").await;
    let task = broker
        .director()
        .delete(&deployment_name("a"))
        .await
        .unwrap();
    broker.director().wait(task.id).await.unwrap();
    assert_eq!(broker.upgrade("a", false).await.unwrap(), Answer::Orphaned);
    assert_eq!(
        broker.recreate("a", false, true).await.unwrap(),
        Answer::Orphaned
    );
}

#[tokio::test(start_paused = true)]
async fn recreate_replaces_the_vms_with_fix() {
    let broker = broker().await;
    provisioned(&broker, "a").await;
    let before = broker.director().vms(&deployment_name("a")).await.unwrap();
    let Answer::Accepted { task } = broker.recreate("a", false, true).await.unwrap() else {
        panic!("expected the recreate to start");
    };
    let done = broker.director().wait(task).await.unwrap();
    assert_eq!(done.description, "recreate deployment");
    assert_eq!(done.state, TaskState::Done, "{:?}", done.result);
    let after = broker.director().vms(&deployment_name("a")).await.unwrap();
    assert_ne!(before[0].cid, after[0].cid);
    assert!(
        broker
            .instance("a")
            .await
            .unwrap()
            .unwrap()
            .update_available,
        "recreate changes no versions"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_operation_is_reported_with_its_task() {
    let broker = broker().await;
    provisioned(&broker, "a").await;
    // A release the director does not have makes the deploy fail inside its task.
    let mut plan = broker.catalog.plans[0].clone();
    plan.current = versions("99", "2.0");
    let broken = Broker::new(
        broker.director.clone(),
        broker.instances.store().clone(),
        Catalog { plans: vec![plan] },
    );
    let Answer::Accepted { task } = broken.upgrade("a", false).await.unwrap() else {
        panic!("expected the upgrade to start");
    };
    broken.director().wait(task).await.unwrap();
    let OperationStatus::Failed(reason) = broken.operation(task).await.unwrap() else {
        panic!("expected a failure");
    };
    assert!(
        reason.contains(&format!("bosh task {task} error")),
        "{reason}"
    );
    assert!(
        reason.contains("releases.postgres: version `99` is not uploaded"),
        "{reason}"
    );
    assert_eq!(
        broken.instance("a").await.unwrap().unwrap().state,
        State::Failed
    );
}

#[tokio::test(start_paused = true)]
async fn a_never_deployed_instance_is_recreated_from_its_plan() {
    let broker = broker().await;
    // A release the director lacks makes provisioning fail: nothing was ever deployed.
    let task = broker
        .provision(
            "a",
            "small",
            Some(&versions("99", "1.0")),
            false,
            &Default::default(),
        )
        .await
        .unwrap();
    broker.director().wait(task.id).await.unwrap();
    assert_eq!(
        broker.instance("a").await.unwrap().unwrap().state,
        State::Failed
    );
    let Answer::Accepted { task } = broker.recreate("a", false, true).await.unwrap() else {
        panic!("expected the recreate to start");
    };
    let done = broker.director().wait(task).await.unwrap();
    assert_eq!(done.state, TaskState::Done, "{:?}", done.result);
    assert_eq!(
        broker.instance("a").await.unwrap().unwrap().state,
        State::Provisioned
    );
}

fn cloud_config(vm_type: &str) -> String {
    format!(
        "vm_types: [{{name: small, cloud_properties: {{flavor: {vm_type}}}}}]\nnetworks:\n- name: default\n  subnets: [{{range: 10.2.0.0/24, gateway: 10.2.0.1}}]\n"
    )
}

#[tokio::test(start_paused = true)]
async fn a_new_cloud_config_makes_every_instance_outdated() {
    let broker = broker().await;
    broker
        .director()
        .update_cloud_config(&cloud_config("small"))
        .await
        .unwrap();
    provisioned(&broker, "a").await;
    let Answer::Accepted { task } = broker.upgrade("a", false).await.unwrap() else {
        panic!("expected the upgrade to start");
    };
    broker.director().wait(task).await.unwrap();
    assert!(!outdated(&broker).await);
    assert_eq!(
        broker
            .director()
            .update_cloud_config(&cloud_config("small"))
            .await
            .unwrap(),
        1,
        "the same text is no new version"
    );
    assert_eq!(
        broker
            .director()
            .update_cloud_config(&cloud_config("large"))
            .await
            .unwrap(),
        2
    );
    assert!(outdated(&broker).await);
    assert!(matches!(
        broker.upgrade("a", false).await.unwrap(),
        Answer::Accepted { .. }
    ));
}

/// An addon added, changed or removed reaches every deployment only through a redeploy:
/// upgrade-all must not find them up to date.
#[tokio::test(start_paused = true)]
async fn a_new_runtime_config_makes_every_instance_outdated() {
    let broker = broker().await;
    provisioned(&broker, "a").await;
    upgrade(&broker).await;
    assert!(!outdated(&broker).await);
    let addon = "addons:\n- name: extra\n  jobs: [{name: postgres, release: postgres}]\nreleases: [{name: postgres, version: '16'}]\n";
    let version = broker
        .director()
        .update_runtime_config("extra", addon)
        .await
        .unwrap();
    assert!(outdated(&broker).await, "a new runtime config is in force");
    upgrade(&broker).await;
    assert!(!outdated(&broker).await);
    let record = broker
        .director()
        .deployment("service-instance_a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.runtime_configs, [version]);
    assert_eq!(
        broker
            .director()
            .update_runtime_config("extra", addon)
            .await
            .unwrap(),
        version,
        "the same text is no new version"
    );
    assert!(!outdated(&broker).await);
    assert!(matches!(
        broker.upgrade("a", false).await.unwrap(),
        Answer::UpToDate
    ));
}

async fn upgrade(broker: &Broker) {
    let Answer::Accepted { task } = broker.upgrade("a", false).await.unwrap() else {
        panic!("expected the upgrade to start");
    };
    let task = broker.director().wait(task).await.unwrap();
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
}

async fn outdated(broker: &Broker) -> bool {
    broker
        .instance("a")
        .await
        .unwrap()
        .unwrap()
        .update_available
}
