//! The cloud config's cloud properties reach the CPI with each VM and disk, and a deploy
//! replaces what was made with cloud properties that changed since, as the BOSH director
//! does; against the simulated cloud in virtual time.

use serde_json::{Value, json};

use super::model::{InstanceRecord, TaskState};
use super::tests::{Fixture, deploy, fixture};

const CLOUD: &str = "azs:
- {name: z1, cloud_properties: {zone: eu-1a, tier: zonal}}
vm_types:
- {name: small, cloud_properties: {instance_type: t3.small, tier: general}}
vm_extensions:
- {name: lb, cloud_properties: {elbs: [web]}}
disk_types:
- {name: fast, disk_size: 2048, cloud_properties: {type: gp3}}
networks:
- name: default
  subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1, azs: [z1]}]
compilation: {workers: 1, network: default, az: z1, cloud_properties: {instance_type: c5.large}}
";

const MANIFEST: &str = "name: d
releases: [{name: nginx, version: '1'}]
stemcells: [{alias: default, os: jammy, version: '1.0'}]
update: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}
instance_groups:
- name: web
  instances: 1
  azs: [z1]
  jobs: [{name: nginx, release: nginx}]
  vm_type: small
  vm_extensions: [lb]
  stemcell: default
  persistent_disk_type: fast
  networks: [{name: default}]
";

async fn deployed(f: &Fixture, cloud: &str) -> InstanceRecord {
    f.director.update_cloud_config(cloud).await.unwrap();
    let task = deploy(&f.director, MANIFEST).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    f.director.instances("d").await.unwrap().remove(0)
}

/// What the simulated cloud was asked to make `cid` with.
async fn made_with(f: &Fixture, cid: Option<&str>) -> Value {
    Value::Object(f.cloud.cloud_properties(cid.unwrap()).await.unwrap())
}

#[tokio::test(start_paused = true)]
async fn vms_and_disks_are_made_with_the_cloud_properties_of_their_az_types_and_extensions() {
    let f = fixture(vec![]).await;
    let web = deployed(&f, CLOUD).await;
    assert_eq!(
        made_with(&f, web.vm_cid.as_deref()).await,
        json!({"zone": "eu-1a", "instance_type": "t3.small", "tier": "general", "elbs": ["web"]})
    );
    assert_eq!(
        made_with(&f, web.disk_cid.as_deref()).await,
        json!({"type": "gp3"})
    );

    let again = deployed(&f, CLOUD).await;
    assert_eq!(
        (again.vm_cid, again.disk_cid),
        (web.vm_cid, web.disk_cid),
        "nothing changed, nothing is made again"
    );
}

#[tokio::test(start_paused = true)]
async fn changed_vm_cloud_properties_make_a_new_vm_and_changed_disk_ones_a_new_disk() {
    let f = fixture(vec![]).await;
    let web = deployed(&f, CLOUD).await;

    let larger = CLOUD.replace("instance_type: t3.small", "instance_type: t3.large");
    let resized = deployed(&f, &larger).await;
    assert_ne!(resized.vm_cid, web.vm_cid, "a VM of the new type");
    assert_eq!(resized.disk_cid, web.disk_cid, "the disk moves over");
    assert_eq!(
        made_with(&f, resized.vm_cid.as_deref()).await["instance_type"],
        "t3.large"
    );

    let faster = larger.replace("type: gp3", "type: io2");
    let migrated = deployed(&f, &faster).await;
    assert_eq!(
        migrated.vm_cid, resized.vm_cid,
        "a disk change keeps the VM"
    );
    assert_ne!(
        migrated.disk_cid, resized.disk_cid,
        "a disk of the new type"
    );
    assert_eq!(
        made_with(&f, migrated.disk_cid.as_deref()).await,
        json!({"type": "io2"})
    );
    let orphaned: Vec<String> = f
        .director
        .orphaned_disks()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.cid)
        .collect();
    assert_eq!(
        orphaned,
        [resized.disk_cid.unwrap()],
        "the old disk is kept"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deploy_with_an_unknown_vm_extension_fails_naming_it() {
    let f = fixture(vec![]).await;
    f.director.update_cloud_config(CLOUD).await.unwrap();
    let task = deploy(&f.director, &MANIFEST.replace("[lb]", "[lb, public-ip]")).await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap_or_default();
    assert!(
        result.contains("instance_groups.web.vm_extensions: unknown VM extension `public-ip`"),
        "{result}"
    );
    assert!(f.director.instances("d").await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_cloud_config_whose_cloud_properties_are_not_a_map_is_refused() {
    let f = fixture(vec![]).await;
    let bad = CLOUD.replace("cloud_properties: {elbs: [web]}", "cloud_properties: [web]");
    let e = f.director.update_cloud_config(&bad).await.unwrap_err();
    assert!(
        e.to_string().contains("vm_extensions.lb.cloud_properties"),
        "{e}"
    );
}
