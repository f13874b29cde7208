//! The director facade against the simulated cloud, in virtual time.

use crate::model::{InstanceRecord, Task, TaskEvent, TaskFilter, TaskKind, VmRecord};
use crate::records::change;
use std::sync::Arc;
use std::time::Duration;

use super::model::{EventState, Package, Release, ReleaseJob, Stemcell, TaskState};
use super::sim::{Fault, FaultKind, Latency, SimulatedCloud, SimulationSettings};
use super::*;
use crate::agent::Agent;
use crate::cpi::Cpi;
use fleet_store::SqliteStore;

pub(crate) fn manifest(name: &str, instances: u32, stemcell: &str, disk: u64) -> String {
    format!(
        "name: {name}
releases: [{{name: nginx, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '{stemcell}'}}]
update: {{canaries: 1, max_in_flight: 2, canary_watch_time: 1000-5000, update_watch_time: 1000-5000}}
networks:
- name: default
  subnets:
  - {{range: 10.0.0.0/24, gateway: 10.0.0.1, azs: [z1, z2]}}
instance_groups:
- name: web
  instances: {instances}
  azs: [z1, z2]
  jobs: [{{name: nginx, release: nginx, properties: {{port: 80}}}}]
  vm_type: small
  stemcell: default
  persistent_disk: {disk}
  networks: [{{name: default}}]
"
    )
}

pub(crate) struct Fixture {
    pub(crate) director: Director,
    pub(crate) cloud: Arc<SimulatedCloud>,
}

pub(crate) async fn fixture(faults: Vec<Fault>) -> Fixture {
    fixture_on(fleet_store::testing::store(), faults).await
}

/// A director on `store`, which another director may share.
pub(crate) async fn fixture_on_shared(store: Arc<dyn fleet_store::Store>) -> Fixture {
    fixture_on(store, vec![]).await
}

async fn fixture_on(store: Arc<dyn fleet_store::Store>, faults: Vec<Fault>) -> Fixture {
    let latency = Latency {
        min: Duration::from_millis(100),
        max: Duration::from_millis(300),
    };
    let settings = SimulationSettings {
        seed: 7,
        cpi_latency: latency,
        agent_latency: latency,
        faults,
    };
    fixture_with(store, settings).await
}

/// A director on the SQLite store kept in `dir`, on a simulated cloud with no latency:
/// what a process opening that state finds.
async fn director_at(dir: &std::path::Path) -> Director {
    let store: Arc<dyn fleet_store::Store> = Arc::new(SqliteStore::open(dir).unwrap());
    let cloud = Arc::new(SimulatedCloud::new(
        Arc::clone(&store),
        SimulationSettings::default(),
    ));
    Director::new(
        store,
        Infrastructure::new(cloud.clone(), cloud),
        DirectorSettings::default(),
    )
    .await
    .unwrap()
}

/// A director with nginx and two jammy stemcells uploaded, on a simulated cloud.
pub(crate) async fn fixture_with(
    store: Arc<dyn fleet_store::Store>,
    settings: SimulationSettings,
) -> Fixture {
    fixture_rendering(store, settings, None).await
}

/// The same, its templates rendered by `renderer` when one is given.
pub(crate) async fn fixture_rendering(
    store: Arc<dyn fleet_store::Store>,
    settings: SimulationSettings,
    renderer: Option<Arc<dyn crate::templates::Renderer>>,
) -> Fixture {
    fixture_through(store, settings, renderer, |cloud| cloud as Arc<dyn Cpi>).await
}

/// The same, the director reaching the cloud through the CPI `through` makes of it.
pub(crate) async fn fixture_through(
    store: Arc<dyn fleet_store::Store>,
    settings: SimulationSettings,
    renderer: Option<Arc<dyn crate::templates::Renderer>>,
    through: impl FnOnce(Arc<SimulatedCloud>) -> Arc<dyn Cpi>,
) -> Fixture {
    let cloud = Arc::new(SimulatedCloud::new(Arc::clone(&store), settings));
    let mut infrastructure = Infrastructure::new(
        through(Arc::clone(&cloud)),
        Arc::clone(&cloud) as Arc<dyn Agent>,
    );
    if let Some(renderer) = renderer {
        infrastructure = infrastructure.rendering(renderer);
    }
    let director = Director::new(store, infrastructure, DirectorSettings::default())
        .await
        .unwrap();
    director
        .upload_release(&Release {
            name: "nginx".into(),
            version: "1".into(),
            jobs: vec![ReleaseJob {
                name: "nginx".into(),
                packages: vec!["nginx".into()],
                ..Default::default()
            }],
            packages: vec![Package {
                name: "nginx".into(),
                dependencies: vec![],
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    for version in ["1.0", "2.0"] {
        director
            .upload_stemcell(&Stemcell {
                name: "bosh-jammy".into(),
                os: "jammy".into(),
                version: version.into(),
                cid: None,
            })
            .await
            .unwrap();
    }
    Fixture { director, cloud }
}

pub(crate) async fn deploy(director: &Director, text: &str) -> Task {
    let task = director
        .deploy(text, DeployOptions::default())
        .await
        .unwrap();
    director.wait(task.id).await.unwrap()
}

/// The result of a task that must have failed.
pub(crate) fn failed(task: &Task) -> String {
    assert_eq!(task.state, TaskState::Error, "{:?}", task.result);
    task.result.clone().unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_deploy_creates_starts_and_records_every_instance() {
    let f = fixture(vec![]).await;
    let task = deploy(&f.director, &manifest("d", 3, "1.0", 1024)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    assert_eq!(task.description, "create deployment");
    let instances = f.director.instances("d").await.unwrap();
    assert_eq!(instances.len(), 3);
    assert!(
        instances
            .iter()
            .all(|i| i.vm_cid.is_some() && i.applied.is_some() && i.disk_cid.is_some())
    );
    assert_eq!(instances[1].az.as_deref(), Some("z2"));
    assert_eq!(f.director.vms("d").await.unwrap().len(), 3);
    assert_eq!(f.cloud.vms().await.len(), 3);
    assert!(
        f.director
            .deployment("d")
            .await
            .unwrap()
            .unwrap()
            .manifest
            .is_some()
    );
    let events = f.director.events(task.id).await.unwrap();
    let stages: Vec<&str> = events.iter().map(|e| e.stage.as_str()).collect();
    assert!(stages.contains(&"Preparing deployment"));
    assert!(stages.contains(&"Creating missing vms"));
    // A new deployment has nothing to bind; the next deploy binds what exists.
    let steps = |events: &[TaskEvent]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.stage == "Preparing deployment")
            .map(|e| e.task.clone())
            .collect()
    };
    assert!(
        steps(&events).iter().all(|t| t == "Preparing deployment"),
        "{:?}",
        steps(&events)
    );
    let again = deploy(&f.director, &manifest("d", 3, "1.0", 0)).await;
    let again = f.director.events(again.id).await.unwrap();
    assert!(
        steps(&again)
            .iter()
            .all(|t| t == "Binding existing deployment")
            && !steps(&again).is_empty(),
        "{:?}",
        steps(&again)
    );
    let updates: Vec<_> = events
        .iter()
        .filter(|e| e.stage == "Updating instance")
        .collect();
    assert_eq!(updates.len(), 6, "three started, three finished");
    assert!(updates[0].task.ends_with("(canary)"));
    assert_eq!(updates[0].total, 3);
    // The canary finished before anything else started.
    assert_eq!(updates[1].state, EventState::Finished);
    assert_eq!(updates[1].task, updates[0].task);
    assert!(
        f.director.locks().await.unwrap().is_empty(),
        "the lock was released"
    );
}

#[tokio::test(start_paused = true)]
async fn a_second_operation_on_a_locked_deployment_is_refused_naming_the_holder() {
    let f = fixture(vec![]).await;
    let first = f
        .director
        .deploy(&manifest("d", 2, "1.0", 0), DeployOptions::default())
        .await
        .unwrap();
    let refused = f
        .director
        .deploy(&manifest("d", 2, "1.0", 0), DeployOptions::default())
        .await;
    match refused {
        Err(DirectorError::Locked { deployment, task }) => {
            assert_eq!((deployment.as_str(), task), ("d", first.id));
        }
        other => panic!("expected a lock error, got {other:?}"),
    }
    assert_eq!(f.director.lock_holder("d").await.unwrap(), Some(first.id));
    assert!(
        f.director
            .deploy(&manifest("other", 1, "1.0", 0), DeployOptions::default())
            .await
            .is_ok()
    );
    f.director.wait(first.id).await.unwrap();
    assert!(
        f.director
            .recreate("d", RecreateOptions::default())
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn an_unchanged_redeploy_touches_nothing() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 2, "1.0", 0)).await;
    let before = f.cloud.vms().await;
    let task = deploy(&f.director, &manifest("d", 2, "1.0", 0)).await;
    assert_eq!(task.state, TaskState::Done);
    assert_eq!(task.description, "update deployment");
    assert!(
        task.result
            .as_deref()
            .unwrap()
            .contains("0 instances updated")
    );
    assert_eq!(f.cloud.vms().await, before);
    let events = f.director.events(task.id).await.unwrap();
    assert!(events.iter().all(|e| e.stage != "Updating instance"));
}

#[tokio::test(start_paused = true)]
async fn a_new_stemcell_replaces_every_vm_and_keeps_the_disks() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 2, "1.0", 1024)).await;
    let before = f.director.instances("d").await.unwrap();
    let task = deploy(&f.director, &manifest("d", 2, "2.0", 1024)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let after = f.director.instances("d").await.unwrap();
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(a.id, b.id);
        assert_ne!(a.vm_cid, b.vm_cid);
        assert_eq!(a.disk_cid, b.disk_cid);
        assert_eq!(a.applied.as_ref().unwrap().stemcell, "jammy/2.0");
    }
    assert_eq!(f.cloud.vms().await.len(), 2, "old VMs deleted");
}

#[tokio::test(start_paused = true)]
async fn scaling_down_deletes_vms_and_orphans_their_disks() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 3, "1.0", 1024)).await;
    let task = deploy(&f.director, &manifest("d", 1, "1.0", 1024)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    assert_eq!(f.director.instances("d").await.unwrap().len(), 1);
    assert_eq!(f.cloud.vms().await.len(), 1);
    let orphaned = f
        .director
        .disks("d")
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.orphaned)
        .count();
    assert_eq!(orphaned, 2);
}

#[tokio::test(start_paused = true)]
async fn a_create_vm_fault_fails_the_task_naming_the_step_and_instance() {
    let f = fixture(vec![]).await;
    // Packages compiled first, so that the fault meets an instance's VM.
    deploy(&f.director, &manifest("warm", 1, "1.0", 0)).await;
    f.cloud.set_faults(vec![Fault {
        kind: FaultKind::CreateVm,
        deployment: "broken".into(),
        instance_group: String::new(),
        probability: 1.0,
    }]);
    let task = deploy(&f.director, &manifest("broken", 1, "1.0", 0)).await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap();
    assert!(result.starts_with("create_vm for web/"), "{result}");
    assert!(result.contains("(0)"), "{result}");
    let failed = f
        .director
        .events(task.id)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.state == EventState::Failed);
    assert_eq!(failed.unwrap().stage, "Creating missing vms");
    assert!(f.director.locks().await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn jobs_that_do_not_start_fail_the_task_after_the_watch_time() {
    let f = fixture(vec![Fault {
        kind: FaultKind::JobStart,
        deployment: "flaky".into(),
        instance_group: String::new(),
        probability: 1.0,
    }])
    .await;
    let start = tokio::time::Instant::now();
    let task = deploy(&f.director, &manifest("flaky", 2, "1.0", 0)).await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap();
    assert!(
        result.contains("is not running after update. Review logs for failed jobs: nginx"),
        "{result}"
    );
    assert!(result.contains("web/"), "{result}");
    assert!(
        tokio::time::Instant::now() - start >= Duration::from_secs(5),
        "waited the watch time"
    );
    // The canary failed, so the second instance was never updated.
    let updated = f
        .director
        .events(task.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.stage == "Updating instance" && e.state == EventState::Started)
        .count();
    assert_eq!(updated, 1);
}

#[tokio::test(start_paused = true)]
async fn unresponsive_agents_fail_a_deploy_and_are_replaced_by_recreate_with_fix() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 2, "1.0", 1024)).await;
    let instances = f.director.instances("d").await.unwrap();
    let stuck = instances[0].agent_id.clone().unwrap();
    f.cloud.set_responsive(&stuck, false).await.unwrap();

    let task = deploy(&f.director, &manifest("d", 2, "2.0", 1024)).await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap();
    assert!(result.contains("Timed out sending get_state"), "{result}");
    assert!(result.contains(&instances[0].name()), "{result}");
    assert!(result.contains("cloud check"), "{result}");

    let recreate = f
        .director
        .recreate(
            "d",
            RecreateOptions {
                fix: true,
                ..RecreateOptions::default()
            },
        )
        .await
        .unwrap();
    let done = f.director.wait(recreate.id).await.unwrap();
    assert_eq!(done.state, TaskState::Done, "{:?}", done.result);
    let after = f.director.instances("d").await.unwrap();
    assert_ne!(after[0].agent_id.as_deref(), Some(stuck.as_str()));
    assert_ne!(
        after[1].vm_cid, instances[1].vm_cid,
        "recreate replaces every VM"
    );
    assert_eq!(
        after[0].disk_cid, instances[0].disk_cid,
        "the disk is re-attached"
    );
}

#[tokio::test(start_paused = true)]
async fn an_invalid_manifest_fails_the_task_and_changes_nothing() {
    let f = fixture(vec![]).await;
    let task = deploy(&f.director, &manifest("d", 2, "9.9", 0)).await;
    assert!(
        failed(&task).contains("stemcells.default: `jammy/9.9` is not uploaded"),
        "{:?}",
        task.result
    );
    assert!(f.director.instances("d").await.unwrap().is_empty());
    assert!(
        f.director.deployments().await.unwrap().is_empty(),
        "a refused manifest leaves no empty deployment"
    );
    assert_eq!(
        f.director.tasks(TaskFilter::default()).await.unwrap().len(),
        1
    );
    assert!(matches!(
        f.director
            .deploy("not: [yaml", DeployOptions::default())
            .await,
        Err(DirectorError::Manifest(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn tasks_left_running_by_a_crash_are_errored_on_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    // The first process: its runtime is dropped with the task still queued, as a crash
    // would leave it.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let director = director_at(&path).await;
            director
                .upload_release(&Release {
                    name: "nginx".into(),
                    version: "1".into(),
                    jobs: vec![crate::model::ReleaseJob {
                        name: "nginx".into(),
                        packages: vec![],
                        ..Default::default()
                    }],
                    packages: vec![],
                    ..Default::default()
                })
                .await
                .unwrap();
            director
                .upload_stemcell(&Stemcell {
                    name: "s".into(),
                    os: "jammy".into(),
                    version: "1.0".into(),
                    cid: None,
                })
                .await
                .unwrap();
            director
                .deploy(&manifest("d", 1, "1.0", 0), DeployOptions::default())
                .await
                .unwrap();
        });
        drop(runtime);
    })
    .join()
    .unwrap();
    let director = director_at(dir.path()).await;
    let task = director.task(1).await.unwrap().unwrap();
    assert_eq!(task.state, TaskState::Error);
    assert_eq!(task.result.as_deref(), Some(RECOVERY_REASON));
    assert!(director.locks().await.unwrap().is_empty());
    let again = director
        .deploy(&manifest("d", 1, "1.0", 0), DeployOptions::default())
        .await
        .unwrap();
    assert_eq!(
        director.wait(again.id).await.unwrap().state,
        TaskState::Done
    );
}

/// As an older fleet-updater left them: tasks with a description and no kind.
#[tokio::test(start_paused = true)]
async fn a_director_names_the_tasks_stored_without_a_kind_by_their_description() {
    let dir = tempfile::tempdir().unwrap();
    drop(SqliteStore::open(dir.path()).unwrap());
    let connection = rusqlite::Connection::open(dir.path().join("fleet.db")).unwrap();
    for (description, deployment) in [("create deployment", "d"), ("retrieve vm-stats", "d")] {
        let body = serde_json::json!({
            "id": 0, "state": "done", "description": description, "deployment": deployment,
            "result": null, "started_at": 1, "finished_at": 2,
        });
        connection
            .execute(
                "INSERT INTO tasks (state, deployment, body) VALUES ('done', ?1, ?2)",
                [deployment, &body.to_string()],
            )
            .unwrap();
    }
    drop(connection);
    let director = director_at(dir.path()).await;
    let kinds: Vec<Option<TaskKind>> = director
        .tasks(TaskFilter {
            read_only: true,
            ..TaskFilter::default()
        })
        .await
        .unwrap()
        .iter()
        .map(TaskKind::of)
        .collect();
    assert_eq!(
        kinds,
        [
            Some(TaskKind::InstanceDetails),
            Some(TaskKind::CreateDeployment)
        ]
    );
    // The look-up only reads: the deployment's last operation is its deploy.
    let last = director.last_change("d").await.unwrap().unwrap();
    assert_eq!(TaskKind::of(&last), Some(TaskKind::CreateDeployment));
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_changes_nothing() {
    let f = fixture(vec![]).await;
    let task = f
        .director
        .deploy(
            &manifest("d", 2, "1.0", 0),
            DeployOptions {
                dry_run: true,
                ..DeployOptions::default()
            },
        )
        .await
        .unwrap();
    let task = f.director.wait(task.id).await.unwrap();
    assert_eq!(task.state, TaskState::Done);
    assert!(
        task.result
            .unwrap()
            .starts_with("dry run: 2 instances would be updated")
    );
    assert!(f.cloud.vms().await.is_empty());
    assert!(
        f.director.deployments().await.unwrap().is_empty(),
        "a dry run leaves no empty deployment"
    );
}

#[tokio::test(start_paused = true)]
async fn delete_removes_vms_and_the_deployment() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 2, "1.0", 1024)).await;
    let task = f.director.delete("d").await.unwrap();
    assert_eq!(
        f.director.wait(task.id).await.unwrap().state,
        TaskState::Done
    );
    assert!(f.director.deployment("d").await.unwrap().is_none());
    assert!(f.cloud.vms().await.is_empty());
    assert!(f.director.instances("d").await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_failure_in_one_parallel_group_stops_the_groups_beside_it() {
    let f = fixture(vec![Fault {
        kind: FaultKind::JobStart,
        deployment: String::new(),
        instance_group: "broken".into(),
        probability: 1.0,
    }])
    .await;
    let text = "name: side
releases: [{name: nginx, version: '1'}]
stemcells: [{alias: default, os: jammy, version: '1.0'}]
update: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000-5000, update_watch_time: 1000-5000, serial: false}
networks:
- name: default
  subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1, azs: [z1]}]
instance_groups:
- name: broken
  instances: 1
  azs: [z1]
  jobs: [{name: nginx, release: nginx}]
  vm_type: small
  stemcell: default
  networks: [{name: default}]
- name: healthy
  instances: 6
  azs: [z1]
  jobs: [{name: nginx, release: nginx}]
  vm_type: small
  stemcell: default
  networks: [{name: default}]
";
    let task = deploy(&f.director, text).await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap();
    assert!(result.contains("broken/"), "{result}");
    // The healthy group finished what it had in flight and started nothing more.
    let healthy = f
        .director
        .instances("side")
        .await
        .unwrap()
        .iter()
        .filter(|i| i.group == "healthy" && i.applied.is_some())
        .count();
    assert!(
        (1..6).contains(&healthy),
        "{healthy} healthy instances updated"
    );
}

#[tokio::test(start_paused = true)]
async fn an_unresponsive_fault_fails_the_task_naming_the_call_and_instance() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("warm", 1, "1.0", 0)).await;
    f.cloud.set_faults(vec![Fault {
        kind: FaultKind::Unresponsive,
        deployment: "ghost".into(),
        instance_group: String::new(),
        probability: 1.0,
    }]);
    let task = deploy(&f.director, &manifest("ghost", 1, "1.0", 1024)).await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap();
    assert!(result.starts_with("mount_disk for web/"), "{result}");
    assert!(
        result.contains("timed out sending mount_disk to agent"),
        "{result}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_update_cut_short_is_redone_by_the_next_deploy() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 1, "1.0", 1024)).await;
    // Compile for the new stemcell beforehand, so that the fault meets the instance.
    deploy(&f.director, &manifest("warm", 1, "2.0", 0)).await;
    let before = f.director.instances("d").await.unwrap().remove(0);
    f.cloud.set_faults(vec![Fault {
        kind: FaultKind::CreateVm,
        deployment: "d".into(),
        instance_group: String::new(),
        probability: 1.0,
    }]);
    let failed = deploy(&f.director, &manifest("d", 1, "2.0", 1024)).await;
    assert_eq!(failed.state, TaskState::Error);
    let broken = f.director.instances("d").await.unwrap().remove(0);
    assert!(
        broken.vm_cid.is_none(),
        "the old VM was deleted before create_vm failed"
    );
    assert!(
        broken.applied.is_none(),
        "the instance is marked unfinished"
    );

    f.cloud.set_faults(vec![]);
    // Even the old manifest repairs it: a missing VM is a change.
    let repaired = deploy(&f.director, &manifest("d", 1, "1.0", 1024)).await;
    assert_eq!(repaired.state, TaskState::Done, "{:?}", repaired.result);
    let after = f.director.instances("d").await.unwrap().remove(0);
    assert!(after.vm_cid.is_some());
    assert_eq!(
        after.disk_cid, before.disk_cid,
        "the same disk is attached again"
    );
    assert_eq!(f.director.vms("d").await.unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_resized_disk_is_migrated_and_the_old_one_orphaned() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 1, "1.0", 1024)).await;
    let before = f.director.instances("d").await.unwrap().remove(0);
    let task = deploy(&f.director, &manifest("d", 1, "1.0", 2048)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let after = f.director.instances("d").await.unwrap().remove(0);
    assert_ne!(after.disk_cid, before.disk_cid);
    assert_eq!(after.vm_cid, before.vm_cid, "a disk change keeps the VM");
    let disks = f.director.disks("d").await.unwrap();
    let orphaned: Vec<_> = disks.iter().filter(|d| d.orphaned).collect();
    assert_eq!(orphaned.len(), 1);
    assert_eq!(
        (orphaned[0].cid.as_str(), orphaned[0].size),
        (before.disk_cid.as_deref().unwrap(), 1024)
    );
}

#[tokio::test(start_paused = true)]
async fn a_retried_migration_reuses_the_disk_the_failed_attempt_created() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 1, "1.0", 1024)).await;
    let before = f.director.instances("d").await.unwrap().remove(0);
    // What a migration that failed after creating its disk leaves behind.
    let left = f
        .cloud
        .create_disk(2048, &Default::default(), before.vm_cid.as_deref().unwrap())
        .await
        .unwrap();
    let record = crate::model::DiskRecord {
        cid: left.clone(),
        deployment: "d".into(),
        instance_id: Some(before.id.clone()),
        size: 2048,
        cloud_properties: Default::default(),
        orphaned: false,
        orphaned_at: None,
        instance_name: None,
        az: None,
    };
    f.director
        .core
        .records
        .write(vec![change::disk(&record)])
        .await
        .unwrap();
    let task = deploy(&f.director, &manifest("d", 1, "1.0", 2048)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let after = f.director.instances("d").await.unwrap().remove(0);
    assert_eq!(after.disk_cid.as_deref(), Some(left.as_str()));
    let disks = f.director.disks("d").await.unwrap();
    assert_eq!(disks.len(), 2, "no third disk: {disks:?}");
}

#[tokio::test(start_paused = true)]
async fn a_disk_added_with_a_new_stemcell_is_created_once() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 1, "1.0", 0)).await;
    let task = deploy(&f.director, &manifest("d", 1, "2.0", 1024)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let disks = f.director.disks("d").await.unwrap();
    assert_eq!(disks.len(), 1, "{disks:?}");
    assert!(!disks[0].orphaned);
}

async fn deploy_duration(seed: u64) -> Duration {
    let store: Arc<dyn fleet_store::Store> = fleet_store::testing::store();
    let latency = Latency {
        min: Duration::from_millis(10),
        max: Duration::from_millis(500),
    };
    let settings = SimulationSettings {
        seed,
        cpi_latency: latency,
        agent_latency: latency,
        faults: vec![],
    };
    let cloud = Arc::new(SimulatedCloud::new(Arc::clone(&store), settings));
    let director = Director::new(
        store,
        Infrastructure::new(cloud.clone(), cloud),
        DirectorSettings::default(),
    )
    .await
    .unwrap();
    director
        .upload_release(&Release {
            name: "nginx".into(),
            version: "1".into(),
            jobs: vec![crate::model::ReleaseJob {
                name: "nginx".into(),
                packages: vec![],
                ..Default::default()
            }],
            packages: vec![],
            ..Default::default()
        })
        .await
        .unwrap();
    director
        .upload_stemcell(&Stemcell {
            name: "s".into(),
            os: "jammy".into(),
            version: "1.0".into(),
            cid: None,
        })
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    let task = director
        .deploy(&manifest("d", 5, "1.0", 1024), DeployOptions::default())
        .await
        .unwrap();
    director.wait(task.id).await.unwrap();
    tokio::time::Instant::now() - start
}

#[tokio::test(start_paused = true)]
async fn the_simulation_is_reproducible_under_a_seed() {
    let first = deploy_duration(11).await;
    assert_eq!(deploy_duration(11).await, first);
    assert_ne!(deploy_duration(12).await, first);
}

pub(crate) mod addresses {
    use super::*;

    /// A cloud config with two networks over two AZs, statics on `default`.
    pub(crate) const CLOUD: &str = "azs: [{name: z1}, {name: z2}]
vm_types: [{name: small}]
networks:
- name: default
  subnets:
  - {range: 10.10.0.0/24, gateway: 10.10.0.1, static: [10.10.0.200 - 10.10.0.210], azs: [z1, z2]}
- name: other
  subnets:
  - {range: 10.20.0.0/24, gateway: 10.20.0.1, azs: [z1, z2]}
";

    /// A manifest on the cloud config's networks (no `networks` of its own).
    pub(crate) fn on(name: &str, instances: u32, network: &str, static_ips: &[&str]) -> String {
        let statics = if static_ips.is_empty() {
            String::new()
        } else {
            format!(", static_ips: [{}]", static_ips.join(", "))
        };
        format!(
            "name: {name}
releases: [{{name: nginx, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '1.0'}}]
update: {{canaries: 1, max_in_flight: 2, canary_watch_time: 1000, update_watch_time: 1000}}
instance_groups:
- name: web
  instances: {instances}
  azs: [z1, z2]
  jobs: [{{name: nginx, release: nginx}}]
  vm_type: small
  stemcell: default
  networks: [{{name: {network}{statics}}}]
"
        )
    }

    async fn global() -> Fixture {
        let f = fixture(vec![]).await;
        f.director.update_cloud_config(CLOUD).await.unwrap();
        f
    }

    async fn addresses(f: &Fixture, deployment: &str) -> Vec<String> {
        f.director
            .instances(deployment)
            .await
            .unwrap()
            .iter()
            .map(|i| i.applied.as_ref().unwrap().networks.join(","))
            .collect()
    }

    /// The addresses a dry run's events show, as `network/address`.
    async fn dry_run_addresses(f: &Fixture, task: u64) -> Vec<String> {
        let mut shown: Vec<String> = f
            .director
            .events(task)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.stage == "Planning (dry run)" && e.state == EventState::Finished)
            .flat_map(|e| {
                let (_, addresses) = e.task.rsplit_once("; ").unwrap();
                addresses
                    .split(", ")
                    .map(|a| a.replacen(' ', "/", 1))
                    .collect::<Vec<_>>()
            })
            .collect();
        shown.sort();
        shown
    }

    async fn dry_run(f: &Fixture, manifest: &str) -> Task {
        let task = f
            .director
            .deploy(
                manifest,
                DeployOptions {
                    dry_run: true,
                    ..DeployOptions::default()
                },
            )
            .await
            .unwrap();
        let task = f.director.wait(task.id).await.unwrap();
        assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
        task
    }

    /// A dry run decides the addresses against the store as the deploy does, and claims
    /// none: it shows exactly the addresses the deploy then takes, never another
    /// deployment's, and a second dry run shows the same.
    #[tokio::test(start_paused = true)]
    async fn a_dry_run_shows_the_addresses_the_deploy_then_takes_and_claims_none() {
        let f = global().await;
        deploy(&f.director, &on("a", 2, "default", &[])).await;
        let taken = addresses(&f, "a").await;
        let manifest = on("b", 3, "default", &[]);
        let task = dry_run(&f, &manifest).await;
        assert_eq!(
            task.result.as_deref(),
            Some(
                "dry run: 3 instances would be updated and 0 deleted, 3 addresses claimed and \
                 0 released, 0 disks created and 0 orphaned, 0 packages compiled; nothing was changed"
            )
        );
        let shown = dry_run_addresses(&f, task.id).await;
        assert_eq!(shown.len(), 3, "{shown:?}");
        assert!(
            shown.iter().all(|a| a.starts_with("default/10.10.0.")),
            "{shown:?}"
        );
        assert!(
            !shown.iter().any(|a| taken.contains(a)),
            "{shown:?} {taken:?}"
        );
        assert!(f.director.instances("b").await.unwrap().is_empty());
        let again = dry_run(&f, &manifest).await;
        assert_eq!(
            dry_run_addresses(&f, again.id).await,
            shown,
            "nothing was claimed"
        );

        deploy(&f.director, &manifest).await;
        let mut deployed = addresses(&f, "b").await;
        deployed.sort();
        assert_eq!(deployed, shown);
    }

    /// Scaling down in a dry run shows the instances that would go and the addresses they
    /// would give back, and gives back none.
    #[tokio::test(start_paused = true)]
    async fn a_dry_run_of_a_scale_down_counts_the_addresses_released() {
        let f = global().await;
        deploy(&f.director, &on("b", 3, "default", &[])).await;
        let before = addresses(&f, "b").await;
        let task = dry_run(&f, &on("b", 1, "default", &[])).await;
        assert_eq!(
            task.result.as_deref(),
            Some(
                "dry run: 0 instances would be updated and 2 deleted, 0 addresses claimed and \
                 2 released, 0 disks created and 0 orphaned, 0 packages compiled; nothing was changed"
            )
        );
        let shown = dry_run_addresses(&f, task.id).await;
        assert_eq!(shown.len(), 1);
        assert!(before.contains(&shown[0]), "{shown:?} {before:?}");
        assert_eq!(addresses(&f, "b").await, before);
    }

    /// Plans are made against the addresses claimed when they start and applied if none
    /// was taken meanwhile: many deploys starting at once must not keep losing to each
    /// other until they give up.
    #[tokio::test(start_paused = true)]
    async fn thirty_deploys_at_once_all_get_addresses() {
        // Without latency every deploy plans at the same moment.
        let store = fleet_store::testing::store();
        let f = fixture_with(store, SimulationSettings::default()).await;
        f.director.update_cloud_config(CLOUD).await.unwrap();
        let mut started = tokio::task::JoinSet::new();
        for n in 0..30 {
            let director = f.director.clone();
            let manifest = on(&format!("d{n}"), 2, "other", &[]);
            started.spawn(async move {
                let task = director.deploy(&manifest, DeployOptions::default()).await;
                director.wait(task.unwrap().id).await.unwrap()
            });
        }
        while let Some(done) = started.join_next().await {
            let done = done.unwrap();
            assert_eq!(done.state, TaskState::Done, "{:?}", done.result);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn deployments_share_the_cloud_configs_address_space_without_overlap() {
        let f = global().await;
        let (a, b) = (
            f.director
                .deploy(&on("a", 3, "default", &[]), DeployOptions::default())
                .await
                .unwrap(),
            f.director
                .deploy(&on("b", 3, "default", &[]), DeployOptions::default())
                .await
                .unwrap(),
        );
        // Both deploy at once.
        assert_eq!(f.director.wait(a.id).await.unwrap().state, TaskState::Done);
        assert_eq!(f.director.wait(b.id).await.unwrap().state, TaskState::Done);
        let mut all: Vec<String> = addresses(&f, "a").await;
        all.extend(addresses(&f, "b").await);
        let unique: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(unique.len(), 6, "{all:?}");
        assert!(
            all.iter().all(|a| a.starts_with("default/10.10.0.")),
            "{all:?}"
        );
        assert!(
            !all.iter().any(|a| a.ends_with(".1") || a.ends_with(".0")),
            "no gateway or network address: {all:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn deleting_a_deployment_returns_its_addresses() {
        let f = global().await;
        deploy(&f.director, &on("a", 2, "default", &[])).await;
        let mut freed = addresses(&f, "a").await;
        freed.sort();
        let task = f.director.delete("a").await.unwrap();
        assert_eq!(
            f.director.wait(task.id).await.unwrap().state,
            TaskState::Done
        );
        assert!(f.director.core.store.ips_of("a").await.unwrap().is_empty());
        deploy(&f.director, &on("b", 2, "default", &[])).await;
        let mut reused = addresses(&f, "b").await;
        reused.sort();
        assert_eq!(reused, freed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_redeploy_keeps_addresses_and_scaling_down_releases_them() {
        let f = global().await;
        deploy(&f.director, &on("a", 3, "default", &[])).await;
        let before = addresses(&f, "a").await;
        let again = deploy(&f.director, &on("a", 3, "default", &[])).await;
        assert!(again.result.unwrap().contains("0 instances updated"));
        assert_eq!(addresses(&f, "a").await, before);
        deploy(&f.director, &on("a", 1, "default", &[])).await;
        // The released addresses go to the next deployment that asks.
        deploy(&f.director, &on("b", 2, "default", &[])).await;
        let mut reused = addresses(&f, "b").await;
        reused.sort();
        let mut freed = before[1..].to_vec();
        freed.sort();
        assert_eq!(reused, freed);
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_keeps_its_address_while_its_vm_is_gone() {
        let f = global().await;
        deploy(&f.director, &on("a", 1, "default", &[])).await;
        let before = f.director.instances("a").await.unwrap().remove(0);
        // Someone deletes the VM in the IaaS console.
        f.cloud
            .delete_vm(before.vm_cid.as_deref().unwrap())
            .await
            .unwrap();
        // Meanwhile another deployment cannot take the address.
        deploy(&f.director, &on("b", 1, "default", &[])).await;
        assert_ne!(addresses(&f, "b").await, addresses(&f, "a").await);
        // Recreating with fix (what cloud check does) brings the instance back on it.
        let task = f
            .director
            .recreate(
                "a",
                RecreateOptions {
                    fix: true,
                    ..RecreateOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(
            f.director.wait(task.id).await.unwrap().state,
            TaskState::Done
        );
        let after = f.director.instances("a").await.unwrap().remove(0);
        assert_ne!(after.vm_cid, before.vm_cid);
        assert_eq!(
            after.applied.unwrap().networks,
            before.applied.unwrap().networks
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_detached_instance_keeps_its_address_and_gets_it_back_when_started() {
        let f = global().await;
        deploy(&f.director, &on("a", 2, "default", &[])).await;
        let before = f.director.instances("a").await.unwrap();
        let stop = f.director.stop("a", true).await.unwrap();
        assert_eq!(
            f.director.wait(stop.id).await.unwrap().state,
            TaskState::Done
        );
        let detached = f.director.instances("a").await.unwrap();
        assert!(
            detached
                .iter()
                .all(|i| i.vm_cid.is_none() && i.state == model::DesiredState::Detached)
        );
        assert!(
            f.cloud.vms().await.is_empty(),
            "stop --hard deletes the VMs"
        );
        // The addresses stay reserved while the instances have no VM.
        deploy(&f.director, &on("b", 2, "default", &[])).await;
        let b = addresses(&f, "b").await;
        assert!(
            before
                .iter()
                .all(|i| !b.contains(&i.applied.as_ref().unwrap().networks.join(",")))
        );
        // A deploy leaves detached instances alone; start brings them back on their addresses.
        let unchanged = deploy(&f.director, &on("a", 2, "default", &[])).await;
        assert!(unchanged.result.unwrap().contains("0 instances updated"));
        let start = f.director.start("a").await.unwrap();
        let started = f.director.wait(start.id).await.unwrap();
        assert_eq!(started.state, TaskState::Done, "{:?}", started.result);
        let after = f.director.instances("a").await.unwrap();
        for (b, a) in before.iter().zip(&after) {
            assert!(a.vm_cid.is_some());
            assert_eq!(a.state, model::DesiredState::Started);
            assert_eq!(
                a.applied.as_ref().unwrap().networks,
                b.applied.as_ref().unwrap().networks
            );
            assert_eq!(a.disk_cid, b.disk_cid);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_moved_to_a_renamed_network_stays_reserved() {
        let f = global().await;
        let renamed = format!(
            "{CLOUD}- name: renamed\n  subnets:\n  - {{range: 10.10.0.0/24, gateway: 10.10.0.1, static: [10.10.0.200 - 10.10.0.210], azs: [z1, z2]}}\n"
        );
        f.director.update_cloud_config(&renamed).await.unwrap();
        deploy(&f.director, &on("a", 1, "default", &["10.10.0.200"])).await;
        let moved = deploy(&f.director, &on("a", 1, "renamed", &["10.10.0.200"])).await;
        assert_eq!(moved.state, TaskState::Done, "{:?}", moved.result);
        // Releasing the old (default, .200) must not free (renamed, .200).
        let taken = deploy(&f.director, &on("b", 1, "renamed", &["10.10.0.200"])).await;
        assert!(
            failed(&taken).contains("NetworkReservationAlreadyInUse"),
            "{:?}",
            taken.result
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_claimed_by_a_failed_plan_is_released_when_the_change_is_reverted() {
        let f = global().await;
        deploy(&f.director, &on("a", 1, "default", &["10.10.0.200"])).await;
        // The first instance claims .201 before the second fails to reserve.
        let failed = deploy(
            &f.director,
            &on("a", 2, "default", &["10.10.0.201", "10.99.0.1"]),
        )
        .await;
        assert_eq!(failed.state, TaskState::Error);
        let reverted = deploy(&f.director, &on("a", 1, "default", &["10.10.0.200"])).await;
        assert_eq!(reverted.state, TaskState::Done, "{:?}", reverted.result);
        assert!(reverted.result.unwrap().contains("0 instances updated"));
        let free = deploy(&f.director, &on("b", 1, "default", &["10.10.0.201"])).await;
        assert_eq!(
            free.state,
            TaskState::Done,
            ".201 was released: {:?}",
            free.result
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_static_address_that_became_reserved_is_refused() {
        let f = global().await;
        deploy(&f.director, &on("a", 1, "default", &["10.10.0.200"])).await;
        f.director
            .update_cloud_config(&CLOUD.replace(
                "static: [10.10.0.200 - 10.10.0.210]",
                "reserved: [10.10.0.200], static: [10.10.0.201 - 10.10.0.210]",
            ))
            .await
            .unwrap();
        let refused = deploy(&f.director, &on("a", 1, "default", &["10.10.0.200"])).await;
        assert!(
            failed(&refused).contains("NetworkReservationIpReserved"),
            "{:?}",
            refused.result
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dynamic_network_never_pins_an_address_nor_recreates_vms() {
        let f = fixture(vec![]).await;
        let manifest = |name: &str| {
            format!(
                "name: {name}
releases: [{{name: nginx, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '1.0'}}]
update: {{canaries: 1, max_in_flight: 2, canary_watch_time: 1000, update_watch_time: 1000}}
networks:
- name: iaas
  type: dynamic
instance_groups:
- name: web
  instances: 2
  jobs: [{{name: nginx, release: nginx}}]
  stemcell: default
  networks: [{{name: iaas}}]
"
            )
        };
        deploy(&f.director, &manifest("d")).await;
        assert!(addresses(&f, "d").await.iter().all(|a| a == "iaas"));
        let again = deploy(&f.director, &manifest("d")).await;
        assert!(again.result.unwrap().contains("0 instances updated"));
    }

    #[tokio::test(start_paused = true)]
    async fn swapping_static_addresses_is_refused() {
        let f = global().await;
        deploy(
            &f.director,
            &on("a", 2, "default", &["10.10.0.200", "10.10.0.201"]),
        )
        .await;
        let swapped = deploy(
            &f.director,
            &on("a", 2, "default", &["10.10.0.201", "10.10.0.200"]),
        )
        .await;
        assert!(
            failed(&swapped).contains("swapping static IPs between instances is not supported"),
            "{:?}",
            swapped.result
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_static_address_moves_the_instance_and_frees_the_old_one() {
        let f = global().await;
        deploy(&f.director, &on("a", 1, "default", &["10.10.0.200"])).await;
        let before = f.director.instances("a").await.unwrap().remove(0);
        assert_eq!(
            before.applied.as_ref().unwrap().networks,
            ["default/10.10.0.200"]
        );
        let moved = deploy(&f.director, &on("a", 1, "default", &["10.10.0.201"])).await;
        assert_eq!(moved.state, TaskState::Done, "{:?}", moved.result);
        let after = f.director.instances("a").await.unwrap().remove(0);
        assert_eq!(
            after.applied.as_ref().unwrap().networks,
            ["default/10.10.0.201"]
        );
        assert_ne!(after.vm_cid, before.vm_cid, "a new address needs a new VM");
        // The old address is free again.
        let taken = deploy(&f.director, &on("b", 1, "default", &["10.10.0.200"])).await;
        assert_eq!(taken.state, TaskState::Done, "{:?}", taken.result);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_move_holds_both_addresses_until_the_next_deploy() {
        let f = global().await;
        deploy(&f.director, &on("a", 1, "default", &["10.10.0.200"])).await;
        f.cloud.set_faults(vec![Fault {
            kind: FaultKind::CreateVm,
            deployment: "a".into(),
            instance_group: String::new(),
            probability: 1.0,
        }]);
        let failed = deploy(&f.director, &on("a", 1, "default", &["10.10.0.201"])).await;
        assert_eq!(failed.state, TaskState::Error);
        // Both are held: neither can be taken by another deployment.
        for ip in ["10.10.0.200", "10.10.0.201"] {
            let other = deploy(&f.director, &on(&format!("x{ip}"), 1, "default", &[ip])).await;
            assert_eq!(other.state, TaskState::Error, "{ip} was free");
            assert!(
                other
                    .result
                    .unwrap()
                    .contains("NetworkReservationAlreadyInUse")
            );
        }
        f.cloud.set_faults(vec![]);
        let settled = deploy(&f.director, &on("a", 1, "default", &["10.10.0.201"])).await;
        assert_eq!(settled.state, TaskState::Done, "{:?}", settled.result);
        let freed = deploy(&f.director, &on("b", 1, "default", &["10.10.0.200"])).await;
        assert_eq!(
            freed.state,
            TaskState::Done,
            "the old address was released: {:?}",
            freed.result
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_on_a_removed_network_is_released() {
        let f = global().await;
        deploy(&f.director, &on("a", 1, "other", &[])).await;
        let old = addresses(&f, "a").await;
        assert!(old[0].starts_with("other/10.20.0."));
        f.director.update_cloud_config(&CLOUD.replace("- name: other\n  subnets:\n  - {range: 10.20.0.0/24, gateway: 10.20.0.1, azs: [z1, z2]}\n", "")).await.unwrap();
        let moved = deploy(&f.director, &on("a", 1, "default", &[])).await;
        assert_eq!(moved.state, TaskState::Done, "{:?}", moved.result);
        assert!(addresses(&f, "a").await[0].starts_with("default/"));
        let ip = old[0].trim_start_matches("other/");
        let n = crate::network::to_u32(ip.parse().unwrap());
        assert!(
            f.director
                .core
                .store
                .blocking()
                .ips_in(n, n)
                .unwrap()
                .is_empty(),
            "{ip} is still reserved"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reservation_errors_fail_the_deploy_naming_instance_network_and_address() {
        let f = global().await;
        let outside = deploy(&f.director, &on("a", 1, "default", &["10.99.0.5"])).await;
        let text = outside.result.unwrap();
        assert!(
            text.contains("NetworkReservationIpOutsideSubnet")
                && text.contains("10.99.0.5")
                && text.contains("'default'")
                && text.contains("'a'"),
            "{text}"
        );
        let full = deploy(&f.director, &on("big", 300, "other", &[])).await;
        assert!(
            full.result
                .unwrap()
                .contains("NetworkReservationNotEnoughCapacity")
        );
        // The addresses claimed before the network ran out are free again.
        assert!(
            f.director
                .core
                .store
                .ips_of("big")
                .await
                .unwrap()
                .is_empty()
        );
        let fits = deploy(&f.director, &on("small", 250, "other", &[])).await;
        assert_eq!(fits.state, TaskState::Done, "{:?}", fits.result);
        let unknown = deploy(&f.director, &on("c", 1, "nowhere", &[])).await;
        assert!(
            unknown
                .result
                .unwrap()
                .contains("instance_groups.web.networks.nowhere: unknown network")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_cloud_config_each_deployment_has_its_own_address_space() {
        let f = fixture(vec![]).await;
        deploy(&f.director, &manifest("a", 2, "1.0", 0)).await;
        deploy(&f.director, &manifest("b", 2, "1.0", 0)).await;
        // The manifest's own network: the same addresses in both, rebuilt from the agents.
        assert_eq!(addresses(&f, "a").await, addresses(&f, "b").await);
        assert!(
            f.director
                .core
                .store
                .blocking()
                .ips_in(0, u32::MAX)
                .unwrap()
                .is_empty(),
            "nothing stored"
        );
        let again = deploy(&f.director, &manifest("a", 2, "1.0", 0)).await;
        assert!(again.result.unwrap().contains("0 instances updated"));
    }
}

mod compilation {
    use super::*;

    async fn diamond(director: &Director, cycle: bool) {
        let package = |name: &str, deps: &[&str]| Package {
            name: name.into(),
            dependencies: deps.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        };
        let base = if cycle {
            package("base", &["app"])
        } else {
            package("base", &[])
        };
        director
            .upload_release(&Release {
                name: "diamond".into(),
                version: "1".into(),
                jobs: vec![ReleaseJob {
                    name: "app".into(),
                    packages: vec!["app".into()],
                    ..Default::default()
                }],
                packages: vec![
                    package("app", &["left", "right"]),
                    package("left", &["base"]),
                    package("right", &["base"]),
                    base,
                ],
                ..Default::default()
            })
            .await
            .unwrap();
    }

    fn manifest(name: &str, stemcell: &str) -> String {
        format!(
            "name: {name}
releases: [{{name: diamond, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '{stemcell}'}}]
update: {{canaries: 1, max_in_flight: 2, canary_watch_time: 1000, update_watch_time: 1000}}
compilation: {{workers: 2, network: default, reuse_compilation_vms: false}}
networks:
- name: default
  subnets: [{{range: 10.0.0.0/24, gateway: 10.0.0.1}}]
instance_groups:
- name: app
  instances: 2
  jobs: [{{name: app, release: diamond}}]
  vm_type: small
  stemcell: default
  networks: [{{name: default}}]
"
        )
    }

    #[tokio::test(start_paused = true)]
    async fn compilation_vms_are_recorded_while_they_live_and_leftovers_go_with_the_next_deploy() {
        let f = fixture(vec![]).await;
        diamond(&f.director, false).await;
        let task = f
            .director
            .deploy(&manifest("d", "1.0"), DeployOptions::default())
            .await
            .unwrap();
        // While compiling, every compilation VM that exists is recorded.
        let mut seen = Vec::new();
        while seen.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            seen = f.director.records().compilation_vms("d").await.unwrap();
        }
        let cloud_vms = f.cloud.vms().await;
        assert!(seen.iter().all(|v| cloud_vms.iter().any(|c| c.0 == v.cid)));
        let done = f.director.wait(task.id).await.unwrap();
        assert_eq!(done.state, TaskState::Done, "{:?}", done.result);
        assert!(
            f.director
                .records()
                .compilation_vms("d")
                .await
                .unwrap()
                .is_empty()
        );

        // What a crash in the middle leaves: a compilation VM and its record.
        let leftover = seen[0].clone();
        let request = crate::cpi::VmRequest {
            agent_id: leftover.agent_id.clone(),
            stemcell: "jammy/1.0".into(),
            stemcell_cid: None,
            vm_type: None,
            deployment: "d".into(),
            instance: "compilation-left".into(),
            networks: Vec::new(),
            network_settings: serde_json::Value::Null,
            cloud_properties: Default::default(),
            instance_id: None,
            az: None,
        };
        let cid = f.cloud.create_vm(&request).await.unwrap();
        let left = VmRecord {
            cid: cid.clone(),
            ..leftover
        };
        f.director
            .records()
            .write(vec![change::compilation_vm(&left)])
            .await
            .unwrap();
        let again = deploy(&f.director, &manifest("d", "1.0")).await;
        assert_eq!(again.state, TaskState::Done, "{:?}", again.result);
        assert!(
            !f.cloud.vms().await.iter().any(|v| v.0 == cid),
            "the leftover VM is deleted"
        );
        assert!(
            f.director
                .records()
                .compilation_vms("d")
                .await
                .unwrap()
                .is_empty()
        );
        let events = f.director.events(again.id).await.unwrap();
        assert!(
            events
                .iter()
                .any(|e| e.stage == "Deleting leftover compilation VMs")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_diamond_compiles_each_package_once_dependencies_first_within_the_workers() {
        let f = fixture(vec![]).await;
        diamond(&f.director, false).await;
        let task = deploy(&f.director, &manifest("d", "1.0")).await;
        assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
        let compiled = f.cloud.compiled();
        assert_eq!(compiled.len(), 4, "{compiled:?}");
        let at = |p: &str| compiled.iter().position(|c| c.ends_with(p)).unwrap();
        assert_eq!(at("/base"), 0);
        assert!(at("/left") < at("/app") && at("/right") < at("/app"));
        assert_eq!(
            f.cloud.peak_compilations(),
            2,
            "left and right compile together, no more"
        );
        assert_eq!(
            f.cloud.vms().await.len(),
            2,
            "the compilation VMs were deleted"
        );
        let events = f.director.events(task.id).await.unwrap();
        let compiling: Vec<_> = events
            .iter()
            .filter(|e| e.stage == "Compiling packages")
            .collect();
        assert_eq!(compiling.len(), 8);
        assert_eq!(compiling[0].total, 4);

        // A redeploy finds everything compiled; a new stemcell compiles again.
        deploy(&f.director, &manifest("d", "1.0")).await;
        assert_eq!(f.cloud.compiled().len(), 4, "the cache was hit");
        let bumped = deploy(&f.director, &manifest("d", "2.0")).await;
        assert_eq!(bumped.state, TaskState::Done, "{:?}", bumped.result);
        assert_eq!(
            f.cloud.compiled().len(),
            8,
            "compiled once more for the new stemcell"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_package_cycle_fails_the_deploy_naming_it() {
        let f = fixture(vec![]).await;
        diamond(&f.director, true).await;
        let task = deploy(&f.director, &manifest("d", "1.0")).await;
        assert_eq!(task.state, TaskState::Error);
        let result = task.result.unwrap();
        assert!(
            result.contains("package dependency cycle in release diamond/1"),
            "{result}"
        );
        assert!(f.cloud.vms().await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_package_cycle_is_found_before_the_deploy_changes_anything() {
        let f = fixture(vec![]).await;
        diamond(&f.director, false).await;
        deploy(&f.director, &manifest("d", "1.0")).await;
        diamond(&f.director, true).await;
        f.cloud.take_calls();
        let shrunk = manifest("d", "2.0").replace("instances: 2", "instances: 1");
        let task = deploy(&f.director, &shrunk).await;
        assert!(
            failed(&task).contains("package dependency cycle"),
            "{:?}",
            task.result
        );
        assert_eq!(f.director.instances("d").await.unwrap().len(), 2);
        assert_eq!(f.cloud.take_calls(), Vec::<String>::new());
    }

    #[tokio::test(start_paused = true)]
    async fn compilation_vms_are_deleted_and_their_addresses_released_when_compiling_fails() {
        let f = fixture(vec![Fault {
            kind: FaultKind::Unresponsive,
            deployment: "broken".into(),
            instance_group: String::new(),
            probability: 1.0,
        }])
        .await;
        diamond(&f.director, false).await;
        f.director
            .update_cloud_config("vm_types: [{name: small}]\nnetworks:\n- name: default\n  subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1}]\ncompilation: {workers: 2, network: default, reuse_compilation_vms: true}\n")
            .await.unwrap();
        let task = deploy(&f.director, &manifest("broken", "1.0")).await;
        assert!(
            failed(&task).contains("compiling diamond/1/base"),
            "{:?}",
            task.result
        );
        assert!(
            f.cloud.vms().await.is_empty(),
            "compilation VMs deleted after the failure"
        );
        let held = f.director.core.store.ips_of("broken").await.unwrap();
        assert!(
            held.iter()
                .all(|r| !r.owner.instance.starts_with("compilation")),
            "{held:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn azs_are_updated_one_after_another_with_canaries_only_in_the_first() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 4, "1.0", 0)).await;
    let task = deploy(&f.director, &manifest("d", 4, "2.0", 0)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let events: Vec<_> = f
        .director
        .events(task.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.stage == "Updating instance")
        .collect();
    let index = |task: &str| -> u32 {
        let start = task.find('(').unwrap() + 1;
        task[start..start + 1].parse().unwrap()
    };
    // Indexes 0 and 2 are in z1, 1 and 3 in z2 (the bootstrap, index 0, is in z1).
    let last_z1_finish = events
        .iter()
        .rposition(|e| e.state == EventState::Finished && index(&e.task) % 2 == 0)
        .unwrap();
    let first_z2_start = events
        .iter()
        .position(|e| e.state == EventState::Started && index(&e.task) % 2 == 1)
        .unwrap();
    assert!(last_z1_finish < first_z2_start, "{events:#?}");
    let canaries: Vec<_> = events
        .iter()
        .filter(|e| e.state == EventState::Started && e.task.ends_with("(canary)"))
        .collect();
    assert_eq!(canaries.len(), 1);
    assert_eq!(index(&canaries[0].task), 0);
}

mod sequences {
    use super::*;

    /// A deploy's calls up to its `post-deploy` scripts, which every started instance runs
    /// at once when it ends.
    async fn run(f: &Fixture, text: &str) -> Vec<String> {
        f.cloud.take_calls();
        let task = deploy(&f.director, text).await;
        assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
        let mut calls = f.cloud.take_calls();
        let last = calls
            .iter()
            .position(|c| c.starts_with("run_script post-deploy"))
            .unwrap_or(calls.len());
        assert!(
            calls[last..]
                .iter()
                .all(|c| c.starts_with("run_script post-deploy")),
            "{calls:?}"
        );
        calls.truncate(last);
        calls
    }

    fn calls(list: &[&str]) -> Vec<String> {
        list.iter().map(|c| c.to_string()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn restart_goes_instance_by_instance_under_canaries_and_max_in_flight() {
        let f = fixture(vec![]).await;
        run(&f, &manifest("d", 3, "1.0", 0)).await;
        let before = f.director.instances("d").await.unwrap();
        // One instance stopped beforehand is started by the restart, as BOSH does.
        let stop = f
            .director
            .stop_instances(
                "d",
                false,
                Target {
                    only: Some([before[2].id.clone()].into()),
                    ..Target::default()
                },
                false,
            )
            .await
            .unwrap();
        f.director.wait(stop.id).await.unwrap();
        f.cloud.take_calls();
        f.cloud.take_drain_kinds();
        let task = f
            .director
            .restart("d", Target::default(), false)
            .await
            .unwrap();
        let done = f.director.wait(task.id).await.unwrap();
        assert_eq!(done.state, TaskState::Done, "{:?}", done.result);
        let calls = f.cloud.take_calls();
        let at = |call: &str| {
            calls
                .iter()
                .position(|c| c == call)
                .unwrap_or_else(|| panic!("no `{call}` in {calls:?}"))
        };
        assert!(
            !calls
                .iter()
                .any(|c| c.starts_with("create_vm") || c.starts_with("delete_vm"))
        );
        // The canary is back up before any other instance stops.
        assert!(at("start d/web/0") < at("stop d/web/1"), "{calls:?}");
        assert!(at("stop d/web/1") < at("start d/web/1"));
        assert!(at("start d/web/2") > at("start d/web/0"));
        assert!(
            !calls.contains(&"stop d/web/2".to_string()),
            "it was stopped already"
        );
        let drains = f.cloud.take_drain_kinds();
        assert_eq!(
            drains.len(),
            2,
            "the two running instances drain: {drains:?}"
        );
        assert!(drains.iter().all(|k| k.ends_with(" update")), "{drains:?}");
        let after = f.director.instances("d").await.unwrap();
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(b.vm_cid, a.vm_cid, "restarted in place");
            assert_eq!(a.state, crate::model::DesiredState::Started);
        }
        let events = f.director.events(task.id).await.unwrap();
        assert!(!events.iter().any(|e| e.stage == "Stopping instances"));
        let first = events
            .iter()
            .find(|e| e.stage == "Updating instance")
            .unwrap();
        assert!(first.task.ends_with("(canary)"), "{}", first.task);
    }

    #[tokio::test(start_paused = true)]
    async fn each_kind_of_deploy_makes_exactly_the_directors_calls() {
        let f = fixture(vec![]).await;
        let first = run(&f, &manifest("d", 1, "1.0", 1024)).await;
        assert_eq!(
            first,
            calls(&[
                "create_vm d/compilation-1",
                "compile_package d/compilation-1",
                "delete_vm d/compilation-1",
                "create_vm d/web/0",
                "create_disk d/web/0",
                "attach_disk d/web/0",
                "mount_disk d/web/0",
                "apply d/web/0",
                "start d/web/0",
                "get_state d/web/0",
                "run_script post-start d/web/0",
            ])
        );
        let unchanged = run(&f, &manifest("d", 1, "1.0", 1024)).await;
        assert_eq!(
            unchanged,
            calls(&["get_state d/web/0"]),
            "nothing beyond get_state"
        );

        let up = run(&f, &manifest("d", 2, "1.0", 1024)).await;
        assert_eq!(
            up,
            calls(&[
                "get_state d/web/0",
                "create_vm d/web/1",
                "create_disk d/web/1",
                "attach_disk d/web/1",
                "mount_disk d/web/1",
                "apply d/web/1",
                "start d/web/1",
                "get_state d/web/1",
                "run_script post-start d/web/1",
            ])
        );

        let down = run(&f, &manifest("d", 1, "1.0", 1024)).await;
        let (bind, rest) = down.split_at(2);
        let mut bind = bind.to_vec();
        bind.sort();
        assert_eq!(bind, calls(&["get_state d/web/0", "get_state d/web/1"]));
        assert_eq!(
            rest,
            calls(&[
                "drain d/web/1",
                "stop d/web/1",
                "unmount_disk d/web/1",
                "detach_disk d/web/1",
                "delete_vm d/web/1"
            ])
        );
        let orphaned: Vec<_> = f
            .director
            .disks("d")
            .await
            .unwrap()
            .into_iter()
            .filter(|d| d.orphaned)
            .collect();
        assert_eq!(
            orphaned.len(),
            1,
            "the removed instance's disk is orphaned, not deleted"
        );

        let stemcell = run(&f, &manifest("d", 1, "2.0", 1024)).await;
        assert_eq!(
            stemcell,
            calls(&[
                "get_state d/web/0",
                "create_vm d/compilation-1",
                "compile_package d/compilation-1",
                "delete_vm d/compilation-1",
                "drain d/web/0",
                "stop d/web/0",
                "unmount_disk d/web/0",
                "detach_disk d/web/0",
                "delete_vm d/web/0",
                "create_vm d/web/0",
                "attach_disk d/web/0",
                "mount_disk d/web/0",
                "apply d/web/0",
                "start d/web/0",
                "get_state d/web/0",
                "run_script post-start d/web/0",
            ])
        );

        let disk = run(&f, &manifest("d", 1, "2.0", 2048)).await;
        assert_eq!(
            disk,
            calls(&[
                "get_state d/web/0",
                "prepare d/web/0",
                "drain d/web/0",
                "stop d/web/0",
                "create_disk d/web/0",
                "attach_disk d/web/0",
                "mount_disk d/web/0",
                "migrate_disk d/web/0",
                "unmount_disk d/web/0",
                "detach_disk d/web/0",
                "apply d/web/0",
                "start d/web/0",
                "get_state d/web/0",
                "run_script post-start d/web/0",
            ])
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_whose_update_failed_is_drained_and_stopped_before_the_next() {
        let f = fixture(vec![]).await;
        run(&f, &manifest("d", 1, "1.0", 0)).await;
        let agent = f.director.instances("d").await.unwrap()[0]
            .agent_id
            .clone()
            .unwrap();
        f.cloud.set_job_start_fails(&agent, true).await.unwrap();
        let changed = manifest("d", 1, "1.0", 0).replace("port: 80", "port: 81");
        let failed = deploy(&f.director, &changed).await;
        assert_eq!(failed.state, TaskState::Error);
        let record = &f.director.instances("d").await.unwrap()[0];
        assert!(record.applied.is_none(), "its update did not finish");
        f.cloud.set_job_start_fails(&agent, false).await.unwrap();
        let again = run(&f, &changed).await;
        assert_eq!(
            again,
            calls(&[
                "get_state d/web/0",
                "prepare d/web/0",
                "drain d/web/0",
                "stop d/web/0",
                "apply d/web/0",
                "start d/web/0",
                "get_state d/web/0",
                "run_script post-start d/web/0",
            ]),
            "drained and stopped first, as BOSH's director does"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_network_change_recreates_the_vm_and_updates_dns() {
        let f = fixture(vec![]).await;
        let cloud = "vm_types: [{name: small}]\nnetworks:\n- name: default\n  subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1, static: [10.0.0.100 - 10.0.0.110]}]\n";
        f.director.update_cloud_config(cloud).await.unwrap();
        let text = |ip: &str| {
            format!(
                "name: d
releases: [{{name: nginx, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '1.0'}}]
update: {{canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}}
instance_groups:
- name: web
  instances: 1
  jobs: [{{name: nginx, release: nginx}}]
  vm_type: small
  stemcell: default
  networks: [{{name: default, static_ips: [{ip}]}}]
"
            )
        };
        run(&f, &text("10.0.0.100")).await;
        let moved = run(&f, &text("10.0.0.101")).await;
        assert_eq!(
            moved,
            calls(&[
                "get_state d/web/0",
                "drain d/web/0",
                "stop d/web/0",
                "delete_vm d/web/0",
                "create_vm d/web/0",
                "apply d/web/0",
                "start d/web/0",
                "get_state d/web/0",
                "run_script post-start d/web/0",
            ])
        );
        let id = f.director.instances("d").await.unwrap()[0].id.clone();
        let dns: Option<String> = fleet_store::get(
            &**f.director.core.store.blocking(),
            crate::collections::DNS,
            &format!("{id}.web.default.d.bosh"),
        )
        .unwrap();
        assert_eq!(dns.as_deref(), Some("10.0.0.101"));
    }

    #[tokio::test(start_paused = true)]
    async fn recreate_with_fix_skips_the_unresponsive_agent_and_without_fix_fails() {
        let f = fixture(vec![]).await;
        run(&f, &manifest("d", 1, "1.0", 1024)).await;
        let agent = f.director.instances("d").await.unwrap()[0]
            .agent_id
            .clone()
            .unwrap();
        f.cloud.set_responsive(&agent, false).await.unwrap();
        f.cloud.take_calls();
        let failed = f
            .director
            .recreate("d", RecreateOptions::default())
            .await
            .unwrap();
        assert_eq!(
            f.director.wait(failed.id).await.unwrap().state,
            TaskState::Error
        );
        assert_eq!(
            f.cloud.take_calls(),
            calls(&["get_state d/web/0"]),
            "nothing touched without fix"
        );
        let fixed = f
            .director
            .recreate(
                "d",
                RecreateOptions {
                    fix: true,
                    ..RecreateOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(
            f.director.wait(fixed.id).await.unwrap().state,
            TaskState::Done
        );
        assert_eq!(
            f.cloud.take_calls(),
            calls(&[
                "get_state d/web/0",
                "detach_disk d/web/0",
                "delete_vm d/web/0",
                "create_vm d/web/0",
                "attach_disk d/web/0",
                "mount_disk d/web/0",
                "apply d/web/0",
                "start d/web/0",
                "get_state d/web/0",
                "run_script post-start d/web/0",
                "run_script post-deploy d/web/0",
            ]),
            "no drain, stop or unmount on an agent that does not answer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_canary_touches_no_further_instance() {
        let f = fixture(vec![]).await;
        run(&f, &manifest("d", 3, "1.0", 0)).await;
        f.cloud.set_faults(vec![Fault {
            kind: FaultKind::JobStart,
            deployment: "d".into(),
            instance_group: String::new(),
            probability: 1.0,
        }]);
        f.cloud.take_calls();
        let task = deploy(&f.director, &manifest("d", 3, "2.0", 0)).await;
        assert_eq!(task.state, TaskState::Error);
        let touched: std::collections::BTreeSet<String> = f
            .cloud
            .take_calls()
            .into_iter()
            .filter(|c| !c.starts_with("get_state") && !c.contains("compilation"))
            .map(|c| c.split_whitespace().nth(1).unwrap().to_string())
            .collect();
        assert_eq!(touched.len(), 1, "only the canary: {touched:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn dynamic_drain_waits_and_asks_again() {
        let f = fixture(vec![]).await;
        run(&f, &manifest("d", 1, "1.0", 0)).await;
        f.cloud.script_drains([-5, -3, 2]);
        let start = tokio::time::Instant::now();
        let sequence = run(&f, &manifest("d", 1, "2.0", 0)).await;
        let drains: Vec<&String> = sequence.iter().filter(|c| c.starts_with("drain")).collect();
        assert_eq!(
            drains,
            [
                "drain d/web/0",
                "drain_status d/web/0",
                "drain_status d/web/0"
            ]
        );
        assert!(
            tokio::time::Instant::now() - start >= std::time::Duration::from_secs(10),
            "5 s + 3 s + 2 s"
        );
    }

    /// A director with `settings`, nginx and two jammy stemcells, on a simulated cloud
    /// without latency.
    async fn director_with(settings: DirectorSettings) -> (Director, Arc<SimulatedCloud>) {
        let store: Arc<dyn fleet_store::Store> = fleet_store::testing::store();
        let cloud = Arc::new(SimulatedCloud::new(
            Arc::clone(&store),
            SimulationSettings::default(),
        ));
        let director = Director::new(
            store,
            Infrastructure::new(cloud.clone(), cloud.clone()),
            settings,
        )
        .await
        .unwrap();
        director
            .upload_release(&Release {
                name: "nginx".into(),
                version: "1".into(),
                jobs: vec![ReleaseJob {
                    name: "nginx".into(),
                    packages: vec![],
                    ..Default::default()
                }],
                packages: vec![],
                ..Default::default()
            })
            .await
            .unwrap();
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
        (director, cloud)
    }

    #[tokio::test(start_paused = true)]
    async fn snapshots_are_taken_before_the_change_when_enabled() {
        let (director, cloud) = director_with(DirectorSettings {
            snapshots: true,
            ..DirectorSettings::default()
        })
        .await;
        deploy(&director, &manifest("d", 1, "1.0", 1024)).await;
        cloud.take_calls();
        deploy(&director, &manifest("d", 1, "2.0", 1024)).await;
        let sequence = cloud.take_calls();
        let stop = sequence.iter().position(|c| c == "stop d/web/0").unwrap();
        assert_eq!(sequence[stop + 1], "snapshot_disk d/web/0");
    }

    #[tokio::test(start_paused = true)]
    async fn finished_tasks_beyond_those_kept_per_kind_are_pruned_as_tasks_end() {
        let (director, _) = director_with(DirectorSettings {
            tasks_kept: 2,
            ..DirectorSettings::default()
        })
        .await;
        let mut ids = Vec::new();
        for _ in 0..4 {
            ids.push(deploy(&director, &manifest("d", 1, "1.0", 0)).await.id);
        }
        director.idle().await;
        // The first is the only `create deployment`; of three updates the oldest goes.
        assert!(director.task(ids[0]).await.unwrap().is_some());
        assert!(
            director.task(ids[1]).await.unwrap().is_none(),
            "the oldest update is pruned"
        );
        assert!(director.events(ids[1]).await.unwrap().is_empty());
        assert!(director.task(ids[3]).await.unwrap().is_some());
        assert!(director.task(ids[2]).await.unwrap().is_some());
    }
}

mod store_faults {
    //! A store that fails some writes, to show that a task's end is not lost to them.

    use std::sync::atomic::{AtomicU32, Ordering};

    use fleet_ipset::IpSet;
    use fleet_store::{
        Collection, IpClaim, IpHolder, IpRecord, IpRelease, Store, StoreError, Write,
    };

    use super::*;

    /// Delegates to SQLite, but the first `put_task` and `release_lock` calls after
    /// arming fail as a busy database does. It notes the tasks recorded as ended while
    /// they still held their deployment's lock.
    struct FlakyStore {
        inner: Arc<dyn Store>,
        put_task_failures: AtomicU32,
        release_failures: AtomicU32,
        /// Writes that record an instance's VM.
        vm_record_failures: AtomicU32,
        /// The simulated cloud's deletions of a VM.
        cloud_delete_failures: AtomicU32,
        ended_while_locked: std::sync::Mutex<Vec<u64>>,
    }

    fn busy() -> StoreError {
        let code = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY);
        StoreError::from(rusqlite::Error::SqliteFailure(code, None))
    }

    fn take(counter: &AtomicU32) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    impl Store for FlakyStore {
        fn get(&self, c: Collection, key: &str) -> Result<Option<String>, StoreError> {
            self.inner.get(c, key)
        }
        fn list(&self, c: Collection, scope: Option<&str>) -> Result<Vec<String>, StoreError> {
            self.inner.list(c, scope)
        }
        fn keys(&self, c: Collection) -> Result<Vec<String>, StoreError> {
            self.inner.keys(c)
        }
        fn write(&self, batch: Vec<Write>) -> Result<(), StoreError> {
            let touches = |collection: Collection, put: bool| {
                batch.iter().any(|w| match w {
                    Write::Put { collection: c, .. } => put && *c == collection,
                    Write::Delete { collection: c, .. } => !put && *c == collection,
                })
            };
            if (touches(crate::collections::VMS, true) && take(&self.vm_record_failures))
                || (touches(crate::sim::CLOUD_VMS, false) && take(&self.cloud_delete_failures))
            {
                return Err(busy());
            }
            self.inner.write(batch)
        }
        fn insert(
            &self,
            c: Collection,
            key: &str,
            scope: &str,
            body: &str,
        ) -> Result<bool, StoreError> {
            self.inner.insert(c, key, scope, body)
        }
        fn create_task(
            &self,
            kind: fleet_store::TaskKindSpec,
            deployment: Option<&str>,
            lock: Option<&str>,
            user: Option<&str>,
            lease: fleet_store::Lease,
        ) -> Result<Result<Task, u64>, StoreError> {
            self.inner.create_task(kind, deployment, lock, user, lease)
        }
        fn request_cancel(&self, id: u64) -> Result<Option<Task>, StoreError> {
            self.inner.request_cancel(id)
        }
        fn runner(&self) -> &str {
            self.inner.runner()
        }
        fn shared(&self) -> bool {
            self.inner.shared()
        }
        fn leads(&self, now: u64) -> Result<bool, StoreError> {
            self.inner.leads(now)
        }
        fn renew(&self, lease: fleet_store::Lease) -> Result<fleet_store::Renewal, StoreError> {
            self.inner.renew(lease)
        }
        fn put_task(&self, task: &Task) -> Result<(), StoreError> {
            if take(&self.put_task_failures) {
                return Err(busy());
            }
            if let (false, Some(deployment)) = (task.state.is_running(), &task.deployment)
                && self.inner.lock_holder(&runner::lock_name(deployment))? == Some(task.id)
            {
                self.ended_while_locked.lock().unwrap().push(task.id);
            }
            self.inner.put_task(task)
        }
        fn task(&self, id: u64) -> Result<Option<Task>, StoreError> {
            self.inner.task(id)
        }
        fn tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError> {
            self.inner.tasks(filter)
        }
        fn last_change(&self, deployment: &str) -> Result<Option<Task>, StoreError> {
            self.inner.last_change(deployment)
        }
        fn last_changes(&self) -> Result<Vec<Task>, StoreError> {
            self.inner.last_changes()
        }
        fn append_events(&self, task: u64, events: &[TaskEvent]) -> Result<(), StoreError> {
            self.inner.append_events(task, events)
        }
        fn events(&self, task: u64) -> Result<Vec<TaskEvent>, StoreError> {
            self.inner.events(task)
        }
        fn lock_holder(&self, lock: &str) -> Result<Option<u64>, StoreError> {
            self.inner.lock_holder(lock)
        }
        fn release_lock(&self, lock: &str, task: u64) -> Result<(), StoreError> {
            if take(&self.release_failures) {
                return Err(busy());
            }
            self.inner.release_lock(lock, task)
        }
        fn locks(&self) -> Result<Vec<(String, u64)>, StoreError> {
            self.inner.locks()
        }
        fn release_ip(
            &self,
            address: u32,
            network: &str,
            owner: &IpHolder,
        ) -> Result<(), StoreError> {
            self.inner.release_ip(address, network, owner)
        }
        fn ips_in(&self, lo: u32, hi: u32) -> Result<Vec<u32>, StoreError> {
            self.inner.ips_in(lo, hi)
        }
        fn claimed(&self) -> Result<std::sync::Arc<IpSet>, StoreError> {
            self.inner.claimed()
        }
        fn ip_holders(&self, addresses: &[u32]) -> Result<Vec<IpRecord>, StoreError> {
            self.inner.ip_holders(addresses)
        }
        fn apply_ips(
            &self,
            claims: &[IpClaim],
            releases: &[IpRelease],
        ) -> Result<Result<(), IpRecord>, StoreError> {
            self.inner.apply_ips(claims, releases)
        }
        fn ips_of(&self, deployment: &str) -> Result<Vec<IpRecord>, StoreError> {
            self.inner.ips_of(deployment)
        }
        fn put_blob(&self, id: &str, bytes: &[u8]) -> Result<(), StoreError> {
            self.inner.put_blob(id, bytes)
        }
        fn blob(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
            self.inner.blob(id)
        }
        fn blob_ids(&self) -> Result<Vec<String>, StoreError> {
            self.inner.blob_ids()
        }
        fn delete_blob(&self, id: &str) -> Result<(), StoreError> {
            self.inner.delete_blob(id)
        }
        fn recover(
            &self,
            reason: &str,
            now: u64,
            recovery: fleet_store::Recovery,
        ) -> Result<Vec<u64>, StoreError> {
            self.inner.recover(reason, now, recovery)
        }
        fn prune_tasks(
            &self,
            kind: fleet_store::TaskKindSpec,
            keep: usize,
            attached: &[Collection],
        ) -> Result<Vec<u64>, StoreError> {
            self.inner.prune_tasks(kind, keep, attached)
        }
        fn name_unnamed_tasks(
            &self,
            kinds: &[fleet_store::TaskKindSpec],
            fallback: fleet_store::TaskKindSpec,
        ) -> Result<usize, StoreError> {
            self.inner.name_unnamed_tasks(kinds, fallback)
        }
    }

    async fn flaky() -> (Arc<FlakyStore>, Fixture) {
        let store = Arc::new(FlakyStore {
            inner: fleet_store::testing::store(),
            put_task_failures: AtomicU32::new(0),
            release_failures: AtomicU32::new(0),
            vm_record_failures: AtomicU32::new(0),
            cloud_delete_failures: AtomicU32::new(0),
            ended_while_locked: std::sync::Mutex::default(),
        });
        let f = fixture_on(Arc::clone(&store) as Arc<dyn Store>, vec![]).await;
        (store, f)
    }

    /// A client that sees a task ended may start the next task on its deployment at once
    /// (the ODB runs a lifecycle errand right after its deploy): the lock is gone first.
    #[tokio::test(start_paused = true)]
    async fn no_task_is_shown_ended_while_it_holds_its_deployments_lock() {
        let (store, f) = flaky().await;
        for instances in 1..=2 {
            let task = deploy(&f.director, &manifest("d", instances, "1.0", 0)).await;
            assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
        }
        assert_eq!(*store.ended_while_locked.lock().unwrap(), Vec::<u64>::new());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_release_that_fails_is_tried_again_so_the_deployment_is_not_left_locked() {
        let (store, f) = flaky().await;
        store.release_failures.store(3, Ordering::SeqCst);
        let task = deploy(&f.director, &manifest("d", 1, "1.0", 0)).await;
        assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
        f.director.idle().await;
        assert_eq!(store.release_failures.load(Ordering::SeqCst), 0);
        assert!(
            f.director.locks().await.unwrap().is_empty(),
            "the lock was released"
        );
        let again = deploy(&f.director, &manifest("d", 2, "1.0", 0)).await;
        assert_eq!(again.state, TaskState::Done, "{:?}", again.result);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_whose_start_and_end_meet_a_busy_store_still_ends_recorded() {
        let (store, f) = flaky().await;
        store.put_task_failures.store(2, Ordering::SeqCst);
        let task = deploy(&f.director, &manifest("d", 1, "1.0", 0)).await;
        assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
        assert!(task.finished_at.is_some());
        assert!(f.director.locks().await.unwrap().is_empty());
    }

    /// A store that takes no writes for a while (a full disk): the task's end and the
    /// release of its lock are tried again until the store heals, and the director says
    /// it is not ready meanwhile; then it goes on by itself.
    #[tokio::test(start_paused = true)]
    async fn a_task_whose_end_cannot_be_recorded_ends_recorded_once_the_store_heals() {
        let (store, f) = flaky().await;
        let task = f
            .director
            .deploy(&manifest("d", 1, "1.0", 0), DeployOptions::default())
            .await
            .unwrap();
        while f.director.task(task.id).await.unwrap().unwrap().state != TaskState::Processing {
            tokio::task::yield_now().await;
        }
        store
            .put_task_failures
            .store(crate::runner::PERSIST_ATTEMPTS + 10, Ordering::SeqCst);
        let waiting = tokio::spawn({
            let director = f.director.clone();
            async move { director.wait(task.id).await }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        let readiness = f.director.readiness().await;
        assert_eq!(readiness.awaiting_store, vec![task.id]);
        assert!(!readiness.ready());
        assert_eq!(
            f.director.task(task.id).await.unwrap().unwrap().state,
            TaskState::Processing,
            "its end is not recorded yet"
        );
        let ended = tokio::time::timeout(Duration::from_secs(3600), waiting)
            .await
            .expect("the store healed and the task ended")
            .unwrap()
            .unwrap();
        assert_eq!(ended.state, TaskState::Done, "{:?}", ended.result);
        assert!(f.director.locks().await.unwrap().is_empty(), "released");
        assert!(f.director.readiness().await.ready());
        let again = deploy(&f.director, &manifest("d", 2, "1.0", 0)).await;
        assert_eq!(again.state, TaskState::Done, "{:?}", again.result);
    }

    /// The store refused the record of a VM the cloud made, and the cloud then refused
    /// its deletion: the task fails, and the VM goes before its deployment's lock does.
    #[tokio::test(start_paused = true)]
    async fn a_vm_whose_record_the_store_refused_is_deleted_when_its_task_ends() {
        let (store, f) = flaky().await;
        let first = deploy(&f.director, &manifest("d", 1, "1.0", 0)).await;
        assert_eq!(first.state, TaskState::Done, "{:?}", first.result);
        let before = f.cloud.vms().await;
        store.vm_record_failures.store(1, Ordering::SeqCst);
        store.cloud_delete_failures.store(1, Ordering::SeqCst);
        let task = deploy(&f.director, &manifest("d", 2, "1.0", 0)).await;
        assert!(failed(&task).contains("busy"), "{:?}", task.result);
        assert_eq!(store.cloud_delete_failures.load(Ordering::SeqCst), 0);
        assert_eq!(f.cloud.vms().await, before, "the new VM is gone");
        assert!(
            f.director
                .records()
                .unsettled_vms(None)
                .await
                .unwrap()
                .is_empty()
        );
        let again = deploy(&f.director, &manifest("d", 2, "1.0", 0)).await;
        assert_eq!(again.state, TaskState::Done, "{:?}", again.result);
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_never_records_the_start_fails_the_task_without_running_it() {
        let (store, f) = flaky().await;
        // Every try at the start fails; the end is recorded once the store answers again.
        store
            .put_task_failures
            .store(crate::runner::PERSIST_ATTEMPTS, Ordering::SeqCst);
        let task = deploy(&f.director, &manifest("d", 1, "1.0", 0)).await;
        assert!(
            failed(&task).contains("cannot record the start of the task"),
            "{:?}",
            task.result
        );
        assert!(f.cloud.vms().await.is_empty(), "the job did not run");
        assert!(f.director.locks().await.unwrap().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn a_cloud_config_with_a_bad_network_is_refused_at_upload_and_the_one_in_force_stays() {
    let f = fixture(vec![]).await;
    let good = "networks:\n- name: default\n  subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1}]\n";
    let version = f.director.update_cloud_config(good).await.unwrap();
    let bad = "networks:\n- name: default\n  subnets: [{range: 10.0.0.0/24, gateway: 10.1.0.1}]\n- name: other\n  subnets: [{range: 10.2.0.0/33, gateway: 10.2.0.1}]\n";
    match f.director.update_cloud_config(bad).await {
        Err(DirectorError::CloudConfig(e)) => {
            assert_eq!(e.problems.len(), 2, "{e}");
            assert!(
                e.to_string()
                    .contains("networks.default.subnets[0].gateway"),
                "{e}"
            );
            assert!(
                e.to_string().contains("networks.other.subnets[0].range"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    let current = f.director.cloud_config().await.unwrap().unwrap();
    assert_eq!((current.version, current.text.as_str()), (version, good));
}

/// `bosh cloud-config` prints the config its own way; sending that back is no change, and
/// so no new version to mark every deployment outdated.
#[tokio::test(start_paused = true)]
async fn the_same_cloud_config_written_another_way_is_no_new_version() {
    let f = fixture(vec![]).await;
    let first = "# ours\nnetworks:\n- name: default\n  subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1}]\nvm_types: [{name: small, cloud_properties: {ephemeral: yes}}]\n";
    let version = f.director.update_cloud_config(first).await.unwrap();
    let reprinted = "vm_types:\n- cloud_properties:\n    ephemeral: true\n  name: small\nnetworks:\n- name: default\n  subnets:\n  - gateway: 10.0.0.1\n    range: 10.0.0.0/24\n";
    assert_eq!(
        f.director.update_cloud_config(reprinted).await.unwrap(),
        version
    );
    let kept = f.director.cloud_config().await.unwrap().unwrap();
    assert_eq!((kept.version, kept.text.as_str()), (version, first));
    let changed = reprinted.replace("ephemeral: true", "ephemeral: false");
    assert_eq!(
        f.director.update_cloud_config(&changed).await.unwrap(),
        version + 1
    );
}

/// The cloud outlives the process: a new simulated cloud over the same store finds every
/// VM the last one made, though the last one read them from memory.
#[tokio::test(start_paused = true)]
async fn the_simulated_cloud_reads_its_state_back_from_the_store() {
    let store: Arc<dyn fleet_store::Store> = fleet_store::testing::store();
    let f = fixture_on(Arc::clone(&store), vec![]).await;
    deploy(&f.director, &manifest("d", 2, "1.0", 0)).await;
    let again = SimulatedCloud::new(store, SimulationSettings::default());
    assert_eq!(again.vms().await.len(), 2);
    assert_eq!(again.vms().await, f.cloud.vms().await);
}

mod cloud_check {
    use super::*;
    use crate::cloud_check::{ProblemKind, Resolution};

    /// Three instances: the first's agent stops answering, the second's VM is deleted
    /// behind the director's back, the third is fine.
    async fn broken() -> (Fixture, Vec<InstanceRecord>) {
        let f = fixture(vec![]).await;
        deploy(&f.director, &manifest("d", 3, "1.0", 1024)).await;
        let mut instances = f.director.instances("d").await.unwrap();
        instances.sort_by_key(|i| i.index);
        f.cloud
            .set_responsive(instances[0].agent_id.as_deref().unwrap(), false)
            .await
            .unwrap();
        f.cloud
            .delete_vm(instances[1].vm_cid.as_deref().unwrap())
            .await
            .unwrap();
        (f, instances)
    }

    async fn scan(f: &Fixture) -> Vec<crate::cloud_check::Problem> {
        let task = f.director.scan("d").await.unwrap();
        let task = f.director.wait(task.id).await.unwrap();
        assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
        f.director.problems("d").await.unwrap()
    }

    async fn resolve(f: &Fixture, choices: &[(u64, Resolution)]) -> Task {
        let task = f.director.resolve("d", choices).await.unwrap();
        f.director.wait(task.id).await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_scan_finds_the_unresponsive_agent_and_the_missing_vm_and_nothing_else() {
        let (f, instances) = broken().await;
        let problems = scan(&f).await;
        let found: Vec<(ProblemKind, &str)> = problems
            .iter()
            .map(|p| (p.kind, p.instance_id.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (ProblemKind::UnresponsiveAgent, instances[0].id.as_str()),
                (ProblemKind::MissingVm, instances[1].id.as_str()),
            ]
        );
        assert_eq!(problems.iter().map(|p| p.id).collect::<Vec<_>>(), [1, 2]);
        assert!(problems[1].description.contains("missing"), "{problems:?}");
        // A scan only reads: it is nobody's last operation.
        let last = f.director.last_change("d").await.unwrap().unwrap();
        assert_eq!(TaskKind::of(&last), Some(TaskKind::CreateDeployment));
    }

    #[tokio::test(start_paused = true)]
    async fn recreate_vm_gives_both_instances_working_vms_and_leaves_the_third_alone() {
        let (f, instances) = broken().await;
        scan(&f).await;
        let task = resolve(
            &f,
            &[(1, Resolution::RecreateVm), (2, Resolution::RecreateVm)],
        )
        .await;
        assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
        let mut after = f.director.instances("d").await.unwrap();
        after.sort_by_key(|i| i.index);
        assert_ne!(after[0].vm_cid, instances[0].vm_cid, "recreated");
        assert_ne!(after[1].vm_cid, instances[1].vm_cid, "recreated");
        assert!(after[1].vm_cid.is_some());
        assert_eq!(after[2].vm_cid, instances[2].vm_cid, "left alone");
        assert_eq!(after[1].disk_cid, instances[1].disk_cid, "its disk kept");
        assert_eq!(f.cloud.vms().await.len(), 3);
        assert!(f.director.problems("d").await.unwrap().is_empty());
        assert!(scan(&f).await.is_empty(), "nothing left to find");
    }

    #[tokio::test(start_paused = true)]
    async fn reboot_delete_reference_and_ignore_do_what_they_say() {
        let (f, instances) = broken().await;
        scan(&f).await;
        f.cloud.take_calls();
        let task = resolve(
            &f,
            &[
                (1, Resolution::RebootVm),
                (2, Resolution::DeleteVmReference),
            ],
        )
        .await;
        assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
        let calls = f.cloud.take_calls();
        assert!(
            calls.iter().any(|c| c.starts_with("reboot_vm")),
            "{calls:?}"
        );
        let mut after = f.director.instances("d").await.unwrap();
        after.sort_by_key(|i| i.index);
        assert_eq!(
            after[0].vm_cid, instances[0].vm_cid,
            "rebooted, not replaced"
        );
        assert_eq!(after[1].vm_cid, None, "the reference is gone");
        assert_eq!(f.director.vms("d").await.unwrap().len(), 2);
        // The agent that did not answer still does not: scanned again, it is found again,
        // and `ignore` only drops the problem.
        let again = scan(&f).await;
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(again[0].kind, ProblemKind::UnresponsiveAgent);
        let task = resolve(&f, &[(1, Resolution::Ignore)]).await;
        assert_eq!(task.state, TaskState::Done);
        assert!(f.director.problems("d").await.unwrap().is_empty());
        assert_eq!(f.director.vms("d").await.unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resolution_that_does_not_fit_or_an_unknown_problem_is_refused_before_anything() {
        let (f, _) = broken().await;
        scan(&f).await;
        match f
            .director
            .resolve("d", &[(2, Resolution::RebootVm), (9, Resolution::Ignore)])
            .await
        {
            Err(DirectorError::Invalid(message)) => {
                assert!(message.contains("problem 2 (missing_vm)"), "{message}");
                assert!(message.contains("`recreate_vm`"), "{message}");
                assert!(message.contains("problem 9"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(f.director.problems("d").await.unwrap().len(), 2);
        assert!(matches!(
            f.director.scan("nope").await,
            Err(DirectorError::NotFound { .. })
        ));
    }
}

/// `bosh disks --orphaned`, `bosh clean-up` and `bosh clean-up --all`.
#[tokio::test(start_paused = true)]
async fn clean_up_keeps_what_is_used_and_the_newest_unused_and_all_removes_the_rest() {
    use crate::cleanup::CleanUpOptions;
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 1, "1.0", 1024)).await;
    let before = f.director.instances("d").await.unwrap().remove(0);
    deploy(&f.director, &manifest("d", 1, "1.0", 2048)).await;
    let orphaned = f.director.orphaned_disks().await.unwrap();
    assert_eq!(orphaned.len(), 1);
    assert_eq!(Some(&orphaned[0].cid), before.disk_cid.as_ref());
    assert_eq!(
        orphaned[0].instance_name.as_deref(),
        Some(format!("{}/{}", before.group, before.id).as_str())
    );
    assert!(orphaned[0].orphaned_at.is_some());
    let used: Vec<Release> = f.director.releases().await.unwrap();
    for version in ["2", "3", "4"] {
        let mut release = used[0].clone();
        release.version = version.to_string();
        f.director.upload_release(&release).await.unwrap();
    }
    let versions = |releases: Vec<Release>| {
        let mut v: Vec<String> = releases.into_iter().map(|r| r.version).collect();
        v.sort();
        v
    };

    let run = |options| {
        let director = f.director.clone();
        async move {
            let task = director.clean_up(options).await.unwrap();
            let task = director.wait(task.id).await.unwrap();
            assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
        }
    };
    run(CleanUpOptions::default()).await;
    assert_eq!(
        versions(f.director.releases().await.unwrap()),
        ["1", "3", "4"]
    );
    assert_eq!(
        f.director.orphaned_disks().await.unwrap().len(),
        1,
        "disks stay"
    );

    let all = CleanUpOptions {
        remove_all: true,
        keep_orphaned_disks: false,
    };
    assert_eq!(f.director.clean_up_plan(all).await.unwrap().disks.len(), 1);
    f.cloud.take_calls();
    run(all).await;
    assert_eq!(
        versions(f.director.releases().await.unwrap()),
        ["1"],
        "the used one stays"
    );
    assert!(f.director.orphaned_disks().await.unwrap().is_empty());
    let calls = f.cloud.take_calls();
    assert!(
        calls.iter().any(|c| c.starts_with("delete_disk")),
        "the cloud deleted it: {calls:?}"
    );
    assert!(matches!(
        f.director
            .delete_orphaned_disk(before.disk_cid.as_deref().unwrap())
            .await,
        Err(DirectorError::NotFound { .. })
    ));
    // The deployment still works on what was kept.
    let task = deploy(&f.director, &manifest("d", 2, "1.0", 2048)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
}

/// `bosh ignore`: deploys, recreates and scale-downs leave the instance as it is, until
/// `bosh unignore`.
#[tokio::test(start_paused = true)]
async fn an_ignored_instance_is_left_as_it_is_until_unignored() {
    let f = fixture(vec![]).await;
    deploy(&f.director, &manifest("d", 2, "1.0", 0)).await;
    let before = f.director.instances("d").await.unwrap();
    f.director
        .set_ignore("d", "web", &before[0].id, true)
        .await
        .unwrap();
    let task = deploy(&f.director, &manifest("d", 2, "2.0", 0)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let after = f.director.instances("d").await.unwrap();
    assert_eq!(after[0].vm_cid, before[0].vm_cid, "ignored: not touched");
    assert_eq!(after[0].vm_stemcell.as_deref(), Some("jammy/1.0"));
    assert_eq!(after[1].vm_stemcell.as_deref(), Some("jammy/2.0"));
    let recreate = f
        .director
        .recreate("d", RecreateOptions::default())
        .await
        .unwrap();
    f.director.wait(recreate.id).await.unwrap();
    assert_eq!(
        f.director.instances("d").await.unwrap()[0].vm_cid,
        before[0].vm_cid
    );
    // Scaling the ignored instance away is refused, naming it.
    f.director.set_ignore("d", "web", "1", true).await.unwrap();
    let refused = deploy(&f.director, &manifest("d", 1, "2.0", 0)).await;
    assert!(
        failed(&refused).contains("bosh ignore"),
        "{:?}",
        refused.result
    );
    assert!(matches!(
        f.director.set_ignore("d", "web", "7", true).await,
        Err(DirectorError::UnknownInstance { .. })
    ));
    // Unignored, the next deploy brings it up to date.
    f.director
        .set_ignore("d", "web", &before[0].id, false)
        .await
        .unwrap();
    let task = deploy(&f.director, &manifest("d", 2, "2.0", 0)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    assert_eq!(
        f.director.instances("d").await.unwrap()[0]
            .vm_stemcell
            .as_deref(),
        Some("jammy/2.0")
    );
}

/// `bosh task --cpi` and `--debug`: what a task asked of the cloud and the agents, kept
/// with the task; a spec's properties, which may hold credentials, are not in it.
#[tokio::test(start_paused = true)]
async fn a_task_keeps_its_cpi_and_agent_calls_and_no_properties() {
    let f = fixture(vec![]).await;
    let text = manifest("d", 2, "1.0", 1024).replace(
        "properties: {port: 80}",
        "properties: {port: 80, password: hunter2-secret}",
    );
    assert!(
        text.contains("hunter2-secret"),
        "the manifest carries the property"
    );
    let task = deploy(&f.director, &text).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let trace = f.director.trace(task.id).await.unwrap();
    let cpi: Vec<&str> = trace
        .iter()
        .filter(|l| l.channel == crate::trace::Channel::Cpi)
        .map(|l| l.text.as_str())
        .collect();
    let requests = |method: &str| {
        cpi.iter()
            .filter(|l| l.starts_with(&format!("request: {method} ")))
            .count()
    };
    let answers = |method: &str| {
        cpi.iter()
            .filter(|l| l.starts_with(&format!("response: {method} result")))
            .count()
    };
    // Two instances and a compilation VM, which is deleted again.
    assert_eq!(
        (requests("create_vm"), answers("create_vm")),
        (3, 3),
        "{cpi:?}"
    );
    assert_eq!(
        (requests("delete_vm"), answers("delete_vm")),
        (1, 1),
        "{cpi:?}"
    );
    assert_eq!(
        (requests("create_disk"), answers("create_disk")),
        (2, 2),
        "{cpi:?}"
    );
    assert!(
        trace
            .iter()
            .any(|l| l.channel == crate::trace::Channel::Debug
                && l.text.contains(": apply answered")),
        "{trace:?}"
    );
    assert!(
        !trace.iter().any(|l| l.text.contains("hunter2")),
        "{trace:?}"
    );
    // Another task has its own.
    let other = deploy(&f.director, &text).await;
    let again = f.director.trace(other.id).await.unwrap();
    assert!(
        !again
            .iter()
            .any(|l| l.text.starts_with("request: create_vm")),
        "{again:?}"
    );
}

/// `bosh update-runtime-config`: its addon jobs go onto the instance groups it picks at
/// the next deploy, with its release; a config with a problem is refused at upload.
#[tokio::test(start_paused = true)]
async fn a_runtime_config_places_its_addons_at_the_next_deploy() {
    let f = fixture(vec![]).await;
    f.director
        .upload_release(&Release {
            name: "os-conf".into(),
            version: "22".into(),
            jobs: vec![ReleaseJob {
                name: "user_add".into(),
                packages: vec![],
                ..Default::default()
            }],
            packages: vec![],
            ..Default::default()
        })
        .await
        .unwrap();
    deploy(&f.director, &manifest("d", 2, "1.0", 0)).await;
    deploy(&f.director, &manifest("other", 1, "1.0", 0)).await;
    let config = "releases: [{name: os-conf, version: '22'}]
addons:
- name: users
  jobs: [{name: user_add, release: os-conf, properties: {users: [ops]}}]
  include: {deployments: [d]}
";
    let version = f
        .director
        .update_runtime_config("default", config)
        .await
        .unwrap();
    let reprinted = "addons:\n- include:\n    deployments: [d]\n  jobs:\n  - {name: user_add, properties: {users: [ops]}, release: os-conf}\n  name: users\nreleases:\n- {version: '22', name: os-conf}\n";
    assert_eq!(
        f.director
            .update_runtime_config("default", reprinted)
            .await
            .unwrap(),
        version,
        "the same config written another way is no new version"
    );
    for name in ["d", "other"] {
        let text = manifest(name, if name == "d" { 2 } else { 1 }, "1.0", 0);
        let task = deploy(&f.director, &text).await;
        assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    }
    let jobs = |instances: Vec<InstanceRecord>| -> Vec<Vec<String>> {
        instances
            .into_iter()
            .map(|i| i.applied.map(|a| a.jobs).unwrap_or_default())
            .collect()
    };
    assert_eq!(
        jobs(f.director.instances("d").await.unwrap()),
        vec![vec!["nginx".to_string(), "user_add".to_string()]; 2]
    );
    assert_eq!(
        jobs(f.director.instances("other").await.unwrap()),
        vec![vec!["nginx".to_string()]],
        "not included"
    );
    match f
        .director
        .update_runtime_config(
            "default",
            "addons:\n- name: x\n  jobs: [{name: y, release: nope}]\n",
        )
        .await
    {
        Err(DirectorError::RuntimeConfig(e)) => {
            assert!(e.to_string().contains("addons[0].jobs[0].release"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(f.director.runtime_configs().await.unwrap().len(), 1);
}
