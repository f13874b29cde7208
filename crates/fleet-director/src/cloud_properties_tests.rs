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

#[tokio::test(start_paused = true)]
async fn placeholders_in_the_cloud_config_and_the_manifests_structure_are_resolved_when_a_deploy_starts()
 {
    let f = fixture(vec![]).await;
    let cloud = CLOUD.replace(
        "tier: general}",
        "tier: general, api_key: '((/iaas/api_key))'}",
    );
    f.director.update_cloud_config(&cloud).await.unwrap();
    let manifest = MANIFEST.replace(
        "vm_extensions: [lb]",
        "vm_extensions: ['((extension.username))']",
    ) + "variables:\n- {name: /iaas/api_key, type: password}\n- {name: extension, type: user, options: {username: lb}}\n";
    let task = deploy(&f.director, &manifest).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let web = f.director.instances("d").await.unwrap().remove(0);
    let made = made_with(&f, web.vm_cid.as_deref()).await;
    let key = made["api_key"].as_str().unwrap().to_string();
    assert_eq!(key.len(), 20, "the generated password: {made}");
    assert_eq!(
        made["elbs"],
        json!(["web"]),
        "the extension the variable names"
    );
    // The documents keep their placeholders; the value is nowhere else.
    let kept = f.director.cloud_config().await.unwrap().unwrap().text;
    assert!(kept.contains("((/iaas/api_key))") && !kept.contains(&key));
    let record = f.director.deployment("d").await.unwrap().unwrap();
    assert!(!record.manifest.unwrap().contains(&key));
    let events = serde_json::to_string(&f.director.events(task.id).await.unwrap()).unwrap();
    assert!(!events.contains(&key));

    // The same value on the next deploy: nothing is made again.
    let again = deploy(&f.director, &manifest).await;
    assert_eq!(again.state, TaskState::Done, "{:?}", again.result);
    let same = f.director.instances("d").await.unwrap().remove(0);
    assert_eq!(same.vm_cid, web.vm_cid);

    // A key made anew on every deploy reaches the cloud config in the same deploy: the
    // VM is made again with it.
    let rotating = manifest.replace(
        "{name: /iaas/api_key, type: password}",
        "{name: /iaas/api_key, type: password, update_mode: overwrite}",
    );
    let task = deploy(&f.director, &rotating).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let rotated = f.director.instances("d").await.unwrap().remove(0);
    assert_ne!(rotated.vm_cid, web.vm_cid);
    let made = made_with(&f, rotated.vm_cid.as_deref()).await;
    let new_key = made["api_key"].as_str().unwrap();
    assert_ne!(new_key, key);
    let stored = f
        .director
        .core
        .records
        .variable("/iaas/api_key")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.value, new_key, "the value kept is the value used");
}

#[tokio::test(start_paused = true)]
async fn a_cloud_or_runtime_config_may_use_only_absolute_names_and_each_must_resolve() {
    let f = fixture(vec![]).await;
    let relative = CLOUD.replace("tier: general}", "tier: general, key: ((key))}");
    f.director.update_cloud_config(&relative).await.unwrap();
    let task = deploy(&f.director, MANIFEST).await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap();
    assert!(
        result.contains("Relative paths are not allowed in this context")
            && result.contains("'key'"),
        "{result}"
    );
    assert!(
        f.director.deployment("d").await.unwrap().is_none(),
        "nothing recorded"
    );

    let unknown = CLOUD.replace("tier: general}", "tier: general, key: ((/nowhere))}");
    f.director.update_cloud_config(&unknown).await.unwrap();
    let task = deploy(&f.director, MANIFEST).await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap();
    assert!(
        result.contains("Failed to find variables from config server: '/nowhere'"),
        "{result}"
    );

    f.director.update_cloud_config(CLOUD).await.unwrap();
    f.director
        .update_runtime_config(
            "addons",
            "releases: [{name: nginx, version: '1'}]\naddons:\n- name: a\n  jobs: [{name: nginx, release: nginx}]\n  include: {deployments: ['((target))']}\n",
        )
        .await
        .unwrap();
    let task = deploy(&f.director, MANIFEST).await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap();
    assert!(
        result.contains("runtime config `addons`") && result.contains("'target'"),
        "{result}"
    );
}
