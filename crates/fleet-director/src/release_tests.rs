//! Releases uploaded in BOSH's format: kept as blobs and a record, an upload repeated
//! is a no-op, a changed one refused unless fixed, packages left out taken from the
//! director's own, and blobs deleted by clean-up once nothing names them.

use crate::model::Task;
use std::sync::Arc;

use fleet_release::{File, ReleaseBuilder, from_tarball, sha1_hex};

use super::cleanup::CleanUpOptions;
use super::model::{Stemcell, TaskState};
use super::sim::{SimulatedCloud, SimulationSettings};
use super::*;
use crate::agent::Agent;
use crate::cpi::Cpi;

fn f(path: &str, text: &str) -> File {
    (path.to_string(), text.as_bytes().to_vec())
}

/// The kv release; `server` is the server package's source, so that a change to it
/// changes that package's fingerprint alone.
fn kv(version: &str, server: &str) -> ReleaseBuilder {
    ReleaseBuilder::new("kv", version)
        .job(
            "kv",
            vec![
                f(
                    "job.MF",
                    "name: kv\ntemplates:\n  ctl.erb: bin/ctl\npackages: [kv-server]\nproperties:\n  kv.port:\n    default: 8080\n",
                ),
                f("monit", "check process kv\n"),
                f("templates/ctl.erb", "#!/bin/bash\n"),
            ],
        )
        .package(
            "kv-server",
            &["runtime"],
            vec![f("packaging", "cp kv.py $BOSH_INSTALL_TARGET\n"), f("kv.py", server)],
        )
        .package("runtime", &[], vec![f("packaging", "true\n")])
}

async fn director() -> Director {
    let store: Arc<dyn fleet_store::Store> = fleet_store::testing::store();
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
    .unwrap();
    director
        .upload_stemcell(&Stemcell {
            name: "bosh-jammy".into(),
            os: "jammy".into(),
            version: "1.0".into(),
            cid: None,
        })
        .await
        .unwrap();
    director
}

async fn upload(director: &Director, tarball: &[u8], fix: bool) -> Task {
    let archive = from_tarball(tarball).unwrap();
    let task = director.upload_release_archive(archive, fix).await.unwrap();
    director.wait(task.id).await.unwrap()
}

fn result(task: &Task) -> &str {
    task.result.as_deref().unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn an_uploaded_release_keeps_its_archives_and_specs() {
    let d = director().await;
    let tarball = kv("1", "v1").build();
    let task = upload(&d, &tarball, false).await;
    assert_eq!(task.state, TaskState::Done, "{}", result(&task));
    assert_eq!(result(&task), "Created release 'kv/1'");
    assert_eq!(task.description, "create release");
    let release = d.releases().await.unwrap().pop().unwrap();
    let job = &release.jobs[0];
    assert_eq!(job.templates["ctl.erb"], "bin/ctl");
    assert_eq!(
        job.properties["kv.port"].default,
        Some(serde_json::json!(8080))
    );
    // Each archive is kept as uploaded, under its SHA-1.
    let read = from_tarball(&tarball).unwrap();
    let blob = &job.archive.as_ref().unwrap().blob;
    assert_eq!(blob, &sha1_hex(&read.jobs[0].bytes));
    assert_eq!(d.blob(blob).await.unwrap().unwrap(), read.jobs[0].bytes);
    let server = release
        .packages
        .iter()
        .find(|p| p.name == "kv-server")
        .unwrap();
    assert_eq!(server.dependencies, ["runtime"]);
    let events = d.events(task.id).await.unwrap();
    let stages: Vec<&str> = events.iter().map(|e| e.stage.as_str()).collect();
    assert!(stages.contains(&"Creating new packages"), "{stages:?}");
    assert!(stages.contains(&"Creating new jobs"), "{stages:?}");

    // A deploy uses it as any release.
    let manifest = "name: kv-1
releases: [{name: kv, version: '1'}]
stemcells: [{alias: default, os: jammy, version: '1.0'}]
update: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}
networks: [{name: default, subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1}]}]
instance_groups:
- {name: kv, instances: 1, jobs: [{name: kv, release: kv}], vm_type: small, stemcell: default, networks: [{name: default}]}
";
    let deploy = d.deploy(manifest, DeployOptions::default()).await.unwrap();
    let deploy = d.wait(deploy.id).await.unwrap();
    assert_eq!(deploy.state, TaskState::Done, "{}", result(&deploy));
}

#[tokio::test(start_paused = true)]
async fn the_same_release_again_changes_nothing() {
    let d = director().await;
    upload(&d, &kv("1", "v1").build(), false).await;
    let before = d.releases().await.unwrap();
    let again = upload(&d, &kv("1", "v1").build(), false).await;
    assert_eq!(again.state, TaskState::Done);
    assert_eq!(result(&again), "Release 'kv/1' already exists");
    assert_eq!(d.releases().await.unwrap(), before);
}

#[tokio::test(start_paused = true)]
async fn the_same_version_with_other_contents_is_refused_unless_fixed() {
    let d = director().await;
    upload(&d, &kv("1", "v1").build(), false).await;
    let changed = upload(&d, &kv("1", "v2").build(), false).await;
    assert_eq!(changed.state, TaskState::Error);
    let message = result(&changed);
    assert!(
        message.contains("release kv/1 was uploaded before with other contents")
            && message.contains("package `kv-server` has fingerprint"),
        "{message}"
    );
    let fixed = upload(&d, &kv("1", "v2").build(), true).await;
    assert_eq!(fixed.state, TaskState::Done, "{}", result(&fixed));
    let read = from_tarball(&kv("1", "v2").build()).unwrap();
    let kept = d.releases().await.unwrap().pop().unwrap();
    let server = kept
        .packages
        .iter()
        .find(|p| p.name == "kv-server")
        .unwrap();
    assert_eq!(
        server.archive.as_ref().unwrap().fingerprint,
        read.packages[0].package.archive.fingerprint
    );
}

#[tokio::test(start_paused = true)]
async fn packages_left_out_come_from_the_director_or_fail_the_upload() {
    let d = director().await;
    upload(&d, &kv("1", "v1").build(), false).await;
    let fingerprints: Vec<String> = from_tarball(&kv("2", "v2").build())
        .unwrap()
        .packages
        .iter()
        .map(|p| p.package.archive.fingerprint.clone())
        .collect();
    // Only `runtime` is the same in version 2.
    let matching = d.matching_packages(&fingerprints).await.unwrap();
    assert_eq!(matching, [fingerprints[1].clone()]);

    let v2 = upload(&d, &kv("2", "v2").build_without(&["runtime"]), false).await;
    assert_eq!(v2.state, TaskState::Done, "{}", result(&v2));
    let releases = d.releases().await.unwrap();
    let runtime_blob = |version: &str| {
        let r = releases.iter().find(|r| r.version == version).unwrap();
        let p = r.packages.iter().find(|p| p.name == "runtime").unwrap();
        p.archive.as_ref().unwrap().blob.clone()
    };
    assert_eq!(runtime_blob("1"), runtime_blob("2"));

    let v3 = upload(&d, &kv("3", "v3").build_without(&["kv-server"]), false).await;
    assert_eq!(v3.state, TaskState::Error);
    assert!(
        result(&v3)
            .starts_with("packages/kv-server.tgz: is missing, and the director has no package"),
        "{}",
        result(&v3)
    );
    assert_eq!(d.releases().await.unwrap().len(), 2, "nothing of v3 kept");
}

#[tokio::test(start_paused = true)]
async fn clean_up_deletes_the_blobs_nothing_names_any_more() {
    let d = director().await;
    upload(&d, &kv("1", "v1").build(), false).await;
    upload(&d, &kv("2", "v2").build(), false).await;
    let blobs = |d: &Director| {
        let store = d.store().clone();
        async move { store.run(|s| s.blob_ids()).await.unwrap() }
    };
    // The job and the runtime alike in both, so kept once each; two servers.
    assert_eq!(blobs(&d).await.len(), 4);
    // A blob an upload cut short left behind, named by nothing.
    d.store().run(|s| s.put_blob("stray", b"x")).await.unwrap();
    let options = CleanUpOptions {
        remove_all: true,
        keep_orphaned_disks: false,
    };
    let task = d.clean_up(options).await.unwrap();
    let task = d.wait(task.id).await.unwrap();
    assert_eq!(task.state, TaskState::Done, "{}", result(&task));
    assert!(d.releases().await.unwrap().is_empty());
    assert_eq!(blobs(&d).await, Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn a_release_in_use_stays_and_one_deleted_takes_only_its_own_archives() {
    let d = director().await;
    upload(&d, &kv("1", "v1").build(), false).await;
    upload(&d, &kv("2", "v2").build(), false).await;
    let manifest = "name: kv-1
releases: [{name: kv, version: '2'}]
stemcells: [{alias: default, os: jammy, version: '1.0'}]
update: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}
networks: [{name: default, subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1}]}]
instance_groups:
- {name: kv, instances: 1, jobs: [{name: kv, release: kv}], vm_type: small, stemcell: default, networks: [{name: default}]}
";
    let deploy = d.deploy(manifest, DeployOptions::default()).await.unwrap();
    assert_eq!(d.wait(deploy.id).await.unwrap().state, TaskState::Done);

    let in_use = d.delete_release("kv", Some("2")).await.unwrap_err();
    assert_eq!(
        in_use.to_string(),
        "release `kv/2` is still in use by a deployment"
    );
    let everything = d.delete_release("kv", None).await.unwrap_err();
    assert!(everything.to_string().contains("kv/2"), "{everything}");
    let unknown = d.delete_release("kv", Some("9")).await.unwrap_err();
    assert_eq!(unknown.to_string(), "release `kv/9` not found");

    let task = d.delete_release("kv", Some("1")).await.unwrap();
    let task = d.wait(task.id).await.unwrap();
    assert_eq!(task.state, TaskState::Done, "{}", result(&task));
    let left = d.releases().await.unwrap();
    assert_eq!(left.len(), 1);
    // What version 2 shares with version 1 stays; version 1's own server is gone.
    let kept = d.store().run(|s| s.blob_ids()).await.unwrap();
    let named: Vec<String> = left[0].blobs().map(str::to_string).collect();
    let mut expected = named.clone();
    expected.sort();
    expected.dedup();
    assert_eq!(kept, expected);
}

/// The kv release as a compiled release for `jammy/1.0`: its packages have no sources.
fn kv_compiled() -> ReleaseBuilder {
    let job = vec![
        f(
            "job.MF",
            "name: kv\ntemplates:\n  ctl.erb: bin/ctl\npackages: [kv-server]\nproperties:\n  kv.port:\n    default: 8080\n",
        ),
        f("monit", "check process kv\n"),
        f("templates/ctl.erb", "#!/bin/bash\n"),
    ];
    ReleaseBuilder::new("kv", "1")
        .job("kv", job)
        .compiled(
            "kv-server",
            &["runtime"],
            "jammy/1.0",
            vec![f("bin/kv", "#!/bin/sh\n")],
        )
        .compiled("runtime", &[], "jammy/1.0", vec![f("lib/rt", "")])
}

fn kv_manifest(stemcell: &str) -> String {
    format!(
        "name: kv-c
releases: [{{name: kv, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '{stemcell}'}}]
update: {{canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}}
networks: [{{name: default, subnets: [{{range: 10.0.0.0/24, gateway: 10.0.0.1}}]}}]
instance_groups:
- {{name: kv, instances: 1, jobs: [{{name: kv, release: kv}}], vm_type: small, stemcell: default, networks: [{{name: default}}]}}
"
    )
}

#[tokio::test(start_paused = true)]
async fn a_compiled_release_deploys_on_its_stemcells_major_version_without_compiling_and_is_refused_on_another()
 {
    let d = director().await;
    let task = upload(&d, &kv_compiled().build(), false).await;
    assert_eq!(task.state, TaskState::Done, "{}", result(&task));
    let release = d.releases().await.unwrap().pop().unwrap();
    let server = release
        .packages
        .iter()
        .find(|p| p.name == "kv-server")
        .unwrap();
    assert_eq!(server.compiled_for, ["jammy/1.0"]);
    assert_eq!(server.dependencies, ["runtime"]);
    // The same upload again changes nothing.
    let again = upload(&d, &kv_compiled().build(), false).await;
    assert_eq!(result(&again), "Release 'kv/1' already exists");

    let deploy = d
        .deploy(&kv_manifest("1.0"), DeployOptions::default())
        .await
        .unwrap();
    let deploy = d.wait(deploy.id).await.unwrap();
    assert_eq!(deploy.state, TaskState::Done, "{}", result(&deploy));
    let stages: Vec<String> = d
        .events(deploy.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.stage)
        .collect();
    assert!(
        !stages.iter().any(|s| s == "Compiling packages"),
        "nothing is compiled: {stages:?}"
    );

    d.upload_stemcell(&Stemcell {
        name: "bosh-jammy".into(),
        os: "jammy".into(),
        version: "1.1".into(),
        cid: None,
    })
    .await
    .unwrap();
    // Another version of the OS with the same major version takes what was compiled.
    let sibling = d
        .deploy(&kv_manifest("1.1"), DeployOptions::default())
        .await
        .unwrap();
    let sibling = d.wait(sibling.id).await.unwrap();
    assert_eq!(sibling.state, TaskState::Done, "{}", result(&sibling));
    let compiled_again = d
        .events(sibling.id)
        .await
        .unwrap()
        .iter()
        .any(|e| e.stage == "Compiling packages");
    assert!(!compiled_again);
    d.upload_stemcell(&Stemcell {
        name: "bosh-jammy".into(),
        os: "jammy".into(),
        version: "2.0".into(),
        cid: None,
    })
    .await
    .unwrap();
    let refused = d
        .deploy(&kv_manifest("2.0"), DeployOptions::default())
        .await
        .unwrap();
    let refused = d.wait(refused.id).await.unwrap();
    assert_eq!(refused.state, TaskState::Error);
    assert_eq!(
        result(&refused),
        "Can't use release 'kv/1'. It references packages without source code and are not \
         compiled against stemcell 'jammy/2.0':\n - 'kv-server'\n - 'runtime'"
    );
}

/// Whether the task compiled anything.
async fn compiled(d: &Director, task: &Task) -> bool {
    d.events(task.id)
        .await
        .unwrap()
        .iter()
        .any(|e| e.stage == "Compiling packages")
}

async fn deployed(d: &Director, text: &str) -> Task {
    let task = d.deploy(text, DeployOptions::default()).await.unwrap();
    d.wait(task.id).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_release_exported_from_a_stemcell_takes_its_packages_from_there_and_never_compiles() {
    let d = director().await;
    assert_eq!(
        upload(&d, &kv("1", "print(1)").build(), false).await.state,
        TaskState::Done
    );
    for version in ["1.1", "2.0"] {
        d.upload_stemcell(&Stemcell {
            name: "bosh-jammy".into(),
            os: "jammy".into(),
            version: version.into(),
            cid: None,
        })
        .await
        .unwrap();
    }
    // Compiled on jammy/1.0 by a first deployment.
    let first = deployed(&d, &kv_manifest("1.0")).await;
    assert_eq!(first.state, TaskState::Done, "{}", result(&first));
    assert!(compiled(&d, &first).await);

    let exported = |stemcell: &str, from: &str| {
        kv_manifest(stemcell)
            .replace("name: kv-c", "name: kv-e")
            .replace(
                "{name: kv, version: '1'}",
                &format!("{{name: kv, version: '1', exported_from: [{from}]}}"),
            )
    };
    // On jammy/1.1, sources and all, nothing is compiled: jammy/1.0's packages serve.
    let on_sibling = deployed(&d, &exported("1.1", "{os: jammy, version: '1.0'}")).await;
    assert_eq!(on_sibling.state, TaskState::Done, "{}", result(&on_sibling));
    assert!(!compiled(&d, &on_sibling).await, "taken from jammy/1.0");

    // Exported from a stemcell nothing was compiled for: refused, naming it.
    let missing = deployed(&d, &exported("1.1", "{os: jammy, version: '1.2'}")).await;
    assert_eq!(missing.state, TaskState::Error);
    assert_eq!(
        result(&missing),
        "Can't use release 'kv/1':\nPackages must be exported from stemcell 'jammy/1.2', but \
         some packages are not compiled for this stemcell:\n - 'kv-server'\n - 'runtime'"
    );

    // A stemcell no export serves: the instance group is refused before anything.
    let other = deployed(&d, &exported("2.0", "{os: jammy, version: '1.0'}")).await;
    assert_eq!(other.state, TaskState::Error);
    assert!(
        result(&other).contains(
            "Invalid release detected in instance group 'kv' using stemcell 'jammy/2.0': release \
             'kv' must be exported from stemcell 'jammy/2.0'. Release 'kv' is exported from: \
             'jammy/1.0'."
        ),
        "{}",
        result(&other)
    );
}
