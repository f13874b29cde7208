//! A process that dies between a cloud call and the record of what it did leaks no VM:
//! each test stops a director at such a point (its CPI never answers again, as a killed
//! process never does), starts another on the same state, and looks at the cloud.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::model::TaskState;
use super::sim::{SimulatedCloud, SimulationSettings};
use super::tests::{deploy, fixture, fixture_through, manifest};
use super::*;
use crate::agent::Agent;
use crate::cpi::{Cpi, CpiError, VmRequest};
use crate::records::change;
use crate::unsettled::UnsettledVm;
use fleet_store::SqliteStore;

/// Where the process dies.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Death {
    /// Once the cloud made a VM: a compilation's, or an instance's.
    AfterCreate { compilation: bool },
    /// As it is about to ask the cloud to delete a VM.
    BeforeDelete,
}

/// The simulated cloud, reached by a process that dies at `death`.
struct Dying {
    cloud: Arc<SimulatedCloud>,
    death: Arc<Mutex<Option<Death>>>,
}

impl Dying {
    async fn dies_at(&self, here: Death) {
        if *self.death.lock().unwrap() == Some(here) {
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait]
impl Cpi for Dying {
    fn name(&self) -> String {
        self.cloud.name()
    }
    async fn create_vm(&self, request: &VmRequest) -> Result<String, CpiError> {
        let cid = self.cloud.create_vm(request).await?;
        let compilation = request.instance_id.is_none();
        self.dies_at(Death::AfterCreate { compilation }).await;
        Ok(cid)
    }
    async fn vm_of_agent(&self, agent_id: &str) -> Result<Option<String>, CpiError> {
        self.cloud.vm_of_agent(agent_id).await
    }
    async fn delete_vm(&self, cid: &str) -> Result<(), CpiError> {
        self.dies_at(Death::BeforeDelete).await;
        self.cloud.delete_vm(cid).await
    }
    async fn has_vm(&self, cid: &str) -> Result<bool, CpiError> {
        self.cloud.has_vm(cid).await
    }
    async fn reboot_vm(&self, cid: &str) -> Result<(), CpiError> {
        self.cloud.reboot_vm(cid).await
    }
    async fn create_disk(
        &self,
        size: u64,
        cloud_properties: &serde_json::Map<String, serde_json::Value>,
        vm_cid: &str,
    ) -> Result<String, CpiError> {
        self.cloud.create_disk(size, cloud_properties, vm_cid).await
    }
    async fn delete_disk(&self, disk_cid: &str) -> Result<(), CpiError> {
        self.cloud.delete_disk(disk_cid).await
    }
    async fn attach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        self.cloud.attach_disk(vm_cid, disk_cid).await
    }
    async fn detach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiError> {
        self.cloud.detach_disk(vm_cid, disk_cid).await
    }
    async fn snapshot_disk(&self, disk_cid: &str) -> Result<String, CpiError> {
        self.cloud.snapshot_disk(disk_cid).await
    }
}

/// A director on the SQLite state in `dir` whose CPI dies where `death` says.
async fn dying_director(
    dir: &std::path::Path,
    death: Arc<Mutex<Option<Death>>>,
) -> (Director, Arc<SimulatedCloud>) {
    let store: Arc<dyn fleet_store::Store> = Arc::new(SqliteStore::open(dir).unwrap());
    let f = fixture_through(store, SimulationSettings::default(), None, |cloud| {
        Arc::new(Dying { cloud, death }) as Arc<dyn Cpi>
    })
    .await;
    (f.director, f.cloud)
}

/// Another process starting on the state in `dir`: the VMs its cloud has then.
async fn restarted(dir: &std::path::Path) -> (Director, Vec<(String, String)>) {
    let store: Arc<dyn fleet_store::Store> = Arc::new(SqliteStore::open(dir).unwrap());
    let cloud = Arc::new(SimulatedCloud::new(
        Arc::clone(&store),
        SimulationSettings::default(),
    ));
    let director = Director::new(
        store,
        Infrastructure::new(
            cloud.clone() as Arc<dyn Cpi>,
            cloud.clone() as Arc<dyn Agent>,
        ),
        DirectorSettings::default(),
    )
    .await
    .unwrap();
    let vms = cloud.vms().await;
    (director, vms)
}

/// The VMs the director's records name, instances' and compilations'.
async fn recorded_vms(director: &Director, deployment: &str) -> Vec<String> {
    let mut named: Vec<String> = director
        .instances(deployment)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|i| i.vm_cid)
        .collect();
    let compiling = director.compilation_vms(deployment).await.unwrap();
    named.extend(compiling.into_iter().map(|vm| vm.cid));
    named.sort();
    named
}

fn cids(vms: &[(String, String)]) -> Vec<String> {
    vms.iter().map(|(cid, _)| cid.clone()).collect()
}

/// Dies where `death` says during a deploy of two instances; returns the VMs the cloud
/// had when it died and the state's directory.
async fn die_deploying(death: Death) -> (tempfile::TempDir, Vec<(String, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let (director, cloud) = dying_director(dir.path(), Arc::new(Mutex::new(Some(death)))).await;
    director
        .deploy(&manifest("d", 2, "1.0", 0), DeployOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
    let vms = cloud.vms().await;
    (dir, vms)
}

#[tokio::test(start_paused = true)]
async fn a_vm_made_for_an_instance_just_before_a_crash_is_deleted_at_the_next_start() {
    let (dir, at_death) = die_deploying(Death::AfterCreate { compilation: false }).await;
    assert!(!at_death.is_empty(), "the cloud made a VM before the crash");
    let (director, vms) = restarted(dir.path()).await;
    assert_eq!(cids(&vms), recorded_vms(&director, "d").await);
    assert!(
        director
            .records()
            .unsettled_vms(None)
            .await
            .unwrap()
            .is_empty()
    );
    // And the deployment goes on from there.
    let done = deploy(&director, &manifest("d", 2, "1.0", 0)).await;
    assert_eq!(done.state, TaskState::Done, "{:?}", done.result);
}

#[tokio::test(start_paused = true)]
async fn a_compilation_vm_made_just_before_a_crash_is_deleted_at_the_next_start() {
    let (dir, at_death) = die_deploying(Death::AfterCreate { compilation: true }).await;
    assert!(
        !at_death.is_empty(),
        "the cloud made a compilation VM first"
    );
    let (director, vms) = restarted(dir.path()).await;
    assert_eq!(cids(&vms), recorded_vms(&director, "d").await);
    assert!(vms.is_empty(), "{vms:?}");
}

#[tokio::test(start_paused = true)]
async fn a_vm_forgotten_for_its_deletion_when_a_crash_came_is_deleted_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let death = Arc::new(Mutex::new(None));
    let (director, cloud) = dying_director(dir.path(), Arc::clone(&death)).await;
    let done = deploy(&director, &manifest("d", 2, "1.0", 0)).await;
    assert_eq!(done.state, TaskState::Done, "{:?}", done.result);
    *death.lock().unwrap() = Some(Death::BeforeDelete);
    director
        .deploy(&manifest("d", 1, "1.0", 0), DeployOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(
        cloud.vms().await.len(),
        2,
        "the scale-down died before deleting"
    );
    assert_eq!(recorded_vms(&director, "d").await.len(), 1, "it forgot one");
    let (director, vms) = restarted(dir.path()).await;
    assert_eq!(vms.len(), 1, "{vms:?}");
    assert_eq!(cids(&vms), recorded_vms(&director, "d").await);
}

/// On a database shared with other directors no start deletes anything; the next deploy
/// of the deployment, under its lock, deletes the VMs its notes name that no record does,
/// and leaves other deployments' notes to theirs.
#[tokio::test(start_paused = true)]
async fn the_next_deploy_of_a_deployment_deletes_the_vms_a_crash_left_unrecorded_in_it() {
    let f = fixture(vec![]).await;
    let done = deploy(&f.director, &manifest("d", 1, "1.0", 0)).await;
    assert_eq!(done.state, TaskState::Done, "{:?}", done.result);
    let kept = recorded_vms(&f.director, "d").await;
    let made = |agent: &str, deployment: &str| VmRequest {
        agent_id: agent.into(),
        stemcell: "jammy/1.0".into(),
        stemcell_cid: None,
        vm_type: None,
        deployment: deployment.into(),
        instance: "web/9".into(),
        networks: Vec::new(),
        network_settings: serde_json::Value::Null,
        cloud_properties: serde_json::Map::new(),
        instance_id: Some("x".into()),
        az: None,
    };
    let note = |agent: &str, cid: Option<&String>| UnsettledVm {
        agent_id: agent.into(),
        instance: "web/9 (x)".into(),
        cid: cid.cloned(),
    };
    let being_made = f.cloud.create_vm(&made("agent-made", "d")).await.unwrap();
    let being_deleted = f.cloud.create_vm(&made("agent-gone", "d")).await.unwrap();
    let elsewhere = f.cloud.create_vm(&made("agent-other", "e")).await.unwrap();
    let instance = f.director.instances("d").await.unwrap().remove(0);
    f.director
        .records()
        .write(vec![
            change::vm_unsettled("d", &note("agent-made", None)),
            change::vm_unsettled("d", &note("agent-gone", Some(&being_deleted))),
            change::vm_unsettled("e", &note("agent-other", None)),
            // Noted, and never made (the cloud refused, or the crash came first).
            change::vm_unsettled("d", &note("agent-never", None)),
            // A note whose VM a record names: the VM is kept.
            change::vm_unsettled(
                "d",
                &note(
                    instance.agent_id.as_ref().unwrap(),
                    instance.vm_cid.as_ref(),
                ),
            ),
        ])
        .await
        .unwrap();
    let again = deploy(&f.director, &manifest("d", 1, "1.0", 0)).await;
    assert_eq!(again.state, TaskState::Done, "{:?}", again.result);
    let vms = cids(&f.cloud.vms().await);
    assert!(
        !vms.contains(&being_made) && !vms.contains(&being_deleted),
        "{vms:?}"
    );
    assert!(vms.contains(&elsewhere));
    assert!(kept.iter().all(|cid| vms.contains(cid)), "{vms:?} {kept:?}");
    let left = f.director.records().unsettled_vms(None).await.unwrap();
    assert_eq!(left, vec![note("agent-other", None)]);
}
