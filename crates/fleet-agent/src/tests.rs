//! The agent served on loopback and spoken to by the client, as `create-env` speaks to
//! it: messages, tasks, blobs, a job applied and started from its blobstore, disks.

use std::sync::Arc;
use std::time::Duration;

use fleet_vm::supervisor::Timings;
use serde_json::json;

use super::actions::VmAgent;
use super::client::{AgentCallError, AgentClient};
use super::mbus::MbusUrl;
use super::protocol::{ApplySpec, BlobRef, JobRef, PackageRef, TemplateRef};
use super::server;

struct Served {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    client: AgentClient,
    url: MbusUrl,
    stop: tokio::sync::watch::Sender<bool>,
    agent: Arc<VmAgent>,
}

async fn served() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let vm = root.join("vms/vm-1");
    std::fs::create_dir_all(root.join("disks")).unwrap();
    let timings = Timings {
        check_every: Duration::from_millis(100),
        ..Timings::default()
    };
    // Made on a manual network and a dynamic one the IaaS gave an address on.
    let networks = json!({
        "private": {"type": "manual", "ip": "10.0.0.5", "netmask": "255.255.255.0", "gateway": "10.0.0.1"},
        "public": {"type": "dynamic", "ip": "10.254.9.7", "netmask": "255.255.255.0", "gateway": "10.254.9.1"},
    });
    let agent = VmAgent::open(
        &vm,
        "vm-1",
        "agent-1",
        &networks,
        &root.join("disks"),
        timings,
    )
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let url = MbusUrl::parse(&format!("https://mbus:pw-123@127.0.0.1:{port}")).unwrap();
    let tls = server::tls_config(None, "127.0.0.1").unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let served = Arc::clone(&agent);
    let serving_url = url.clone();
    tokio::spawn(async move { server::serve(listener, tls, served, &serving_url, stopped).await });
    Served {
        _dir: dir,
        root,
        client: AgentClient::new(url.clone(), None).unwrap(),
        url,
        stop,
        agent,
    }
}

fn tgz(files: &[(&str, &str)]) -> Vec<u8> {
    let entries: Vec<(&str, &[u8])> = files.iter().map(|(p, t)| (*p, t.as_bytes())).collect();
    fleet_release::build_tgz(&entries)
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_tasks_and_blobs_travel_over_https_with_the_mbus_credentials() {
    let s = served().await;
    s.client
        .wait_until_ready(Duration::from_secs(10))
        .await
        .unwrap();
    let state = s.client.get_state().await.unwrap();
    assert_eq!(state["agent_id"], "agent-1");
    // Nothing to run: running, as monit watching nothing says.
    assert_eq!(state["job_state"], "running");
    assert_eq!(state["vm"]["name"], "vm-1");

    s.client
        .put_blob("ab/blob-1", b"hello".to_vec())
        .await
        .unwrap();
    assert_eq!(s.client.get_blob("blob-1").await.unwrap(), b"hello");
    assert!(s.client.get_blob("missing").await.is_err());

    let e = s.client.call("no_such_thing", vec![]).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "agent no_such_thing: unknown message no_such_thing"
    );

    let wrong = MbusUrl {
        password: "wrong".into(),
        ..s.url.clone()
    };
    let refused = AgentClient::new(wrong, None)
        .unwrap()
        .ping()
        .await
        .unwrap_err();
    assert!(
        matches!(refused, AgentCallError::Unauthorized { .. }),
        "{refused}"
    );
    assert!(
        !refused.to_string().contains("wrong"),
        "no credentials shown"
    );
    let _ = s.stop.send(true);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_is_compiled_applied_started_and_stopped_from_the_blobstore() {
    let s = served().await;
    // A package built by its packaging script on the agent, and a job whose process is
    // the package's program.
    let sources = tgz(&[(
        "packaging",
        "mkdir -p $BOSH_INSTALL_TARGET/bin\nprintf '#!/bin/sh\\necho $$ > %s\\nexec sleep 1000\\n' \"$BOSH_INSTALL_TARGET/../../sys/run/server.pid\" > $BOSH_INSTALL_TARGET/bin/server\nchmod +x $BOSH_INSTALL_TARGET/bin/server\n",
    )]);
    s.client.put_blob("src-1", sources.clone()).await.unwrap();
    let compiled = s
        .client
        .call(
            "compile_package",
            vec![
                json!("src-1"),
                json!(fleet_release::sha1_hex(&sources)),
                json!("server"),
                json!("1.0"),
                json!({}),
            ],
        )
        .await
        .unwrap();
    let blob = compiled["result"]["blobstore_id"]
        .as_str()
        .unwrap()
        .to_string();
    let sha1 = compiled["result"]["sha1"].as_str().unwrap().to_string();
    assert!(!s.client.get_blob(&blob).await.unwrap().is_empty());

    let pidfile = s.root.join("vms/vm-1/sys/run/server.pid");
    let rendered = tgz(&[
        (
            "web/monit",
            &format!(
                "check process server\n  with pidfile {}\n  start program \"/bin/sh -c '/var/vcap/packages/server/bin/server &'\"\n",
                pidfile.display()
            ),
        ),
        (
            "web/bin/pre-start",
            "#!/bin/sh\necho pre-start >> /var/vcap/sys/log/steps\n",
        ),
    ]);
    s.client
        .put_blob("rendered-1", rendered.clone())
        .await
        .unwrap();
    let spec = ApplySpec {
        deployment: "env".into(),
        name: "web".into(),
        index: Some(0),
        id: "0".into(),
        job: JobRef {
            name: Some("web".into()),
            templates: vec![TemplateRef {
                name: "web".into(),
                version: "1".into(),
            }],
        },
        packages: [(
            "server".to_string(),
            PackageRef {
                name: "server".into(),
                version: "1.0".into(),
                sha1,
                blobstore_id: blob,
            },
        )]
        .into(),
        rendered_templates_archive: Some(BlobRef {
            blobstore_id: "rendered-1".into(),
            sha1: format!("sha256:{}", sha256(&rendered)),
        }),
        configuration_hash: "hash-1".into(),
        ..ApplySpec::default()
    };
    let spec_value = serde_json::to_value(&spec).unwrap();
    assert_eq!(
        s.client
            .call("prepare", vec![spec_value.clone()])
            .await
            .unwrap(),
        "prepared"
    );
    let mut missing = spec_value;
    missing["packages"]["server"]["blobstore_id"] = json!("not-there");
    let e = s.client.call("prepare", vec![missing]).await.unwrap_err();
    assert!(e.to_string().contains("not-there"), "{e}");
    assert_eq!(s.client.call("stop", vec![]).await.unwrap(), "stopped");
    s.client.apply(&spec).await.unwrap();
    s.client.run_script("pre-start").await.unwrap();
    assert_eq!(s.client.call("start", vec![]).await.unwrap(), "started");
    let mut running = false;
    for _ in 0..100 {
        if s.client.get_state().await.unwrap()["job_state"] == "running" {
            running = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(running, "the job runs");
    let steps = std::fs::read_to_string(s.root.join("vms/vm-1/sys/log/steps")).unwrap();
    assert_eq!(steps, "pre-start\n");
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());

    // A tampered blob is refused by its digest.
    let mut bad = spec.clone();
    bad.rendered_templates_archive = Some(BlobRef {
        blobstore_id: "rendered-1".into(),
        sha1: "0".repeat(40),
    });
    let e = s.client.apply(&bad).await.unwrap_err();
    assert!(e.to_string().contains("rendered-1"), "{e}");

    assert_eq!(s.client.call("stop", vec![]).await.unwrap(), "stopped");
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |st| st.contains(") Z"))
    });
    assert!(gone, "the process ended with stop");
    s.agent.halt().await;
    let _ = s.stop.send(true);
}

#[tokio::test(flavor = "multi_thread")]
async fn disks_are_mounted_listed_migrated_and_unmounted() {
    let s = served().await;
    for d in ["disk-1", "disk-2"] {
        std::fs::create_dir_all(s.root.join("disks").join(d)).unwrap();
    }
    std::fs::write(s.root.join("disks/disk-1/data"), "kept").unwrap();
    s.client
        .call("mount_disk", vec![json!("disk-1")])
        .await
        .unwrap();
    assert_eq!(s.client.list_disk().await.unwrap(), ["disk-1"]);
    s.client
        .call("mount_disk", vec![json!("disk-2")])
        .await
        .unwrap();
    s.client.call("migrate_disk", vec![]).await.unwrap();
    assert_eq!(s.client.list_disk().await.unwrap(), ["disk-2"]);
    assert_eq!(
        std::fs::read_to_string(s.root.join("vms/vm-1/store/data")).unwrap(),
        "kept"
    );
    let answer = s
        .client
        .call("unmount_disk", vec![json!("disk-2")])
        .await
        .unwrap();
    assert_eq!(answer["message"], "Unmounted partition of disk disk-2");
    assert!(s.client.list_disk().await.unwrap().is_empty());
    // A hint says where a disk is; without it, the IaaS's disks.
    let elsewhere = s.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("data"), "hinted").unwrap();
    let hint = json!(elsewhere.display().to_string());
    s.client
        .call("add_persistent_disk", vec![json!("disk-9"), hint])
        .await
        .unwrap();
    s.client
        .call("mount_disk", vec![json!("disk-9")])
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(s.root.join("vms/vm-1/store/data")).unwrap(),
        "hinted"
    );
    s.client
        .call("unmount_disk", vec![json!("disk-9")])
        .await
        .unwrap();
    s.client
        .call("remove_persistent_disk", vec![json!("disk-9")])
        .await
        .unwrap();
    let e = s
        .client
        .call("mount_disk", vec![json!("disk-9")])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not attached"), "{e}");
    let e = s
        .client
        .call("mount_disk", vec![json!("../etc")])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is not a disk CID"), "{e}");
    let _ = s.stop.send(true);
}

fn sha256(bytes: &[u8]) -> String {
    fleet_release::sha256_hex(bytes)
}

/// `create-env`'s initial apply (as bosh-cli's `BuildInitialState` makes it: no jobs, no
/// packages, an archive with no blob, a configuration hash) is accepted: what was placed
/// before is removed, the networks are the settings' (a dynamic one's address filled
/// in), `get_state` answers them with every field sent, and who the instance is is
/// written; a network the VM was not made on is refused as BOSH's agent refuses it.
#[tokio::test(flavor = "multi_thread")]
async fn create_envs_initial_apply_empties_the_vm_and_get_state_reports_its_networks() {
    let s = served().await;
    let vm = s.root.join("vms/vm-1");
    for left in ["jobs/old/monit", "packages/old/bin/x"] {
        let path = vm.join(left);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
    }
    let initial = json!({
        "deployment": "env", "name": "kv", "index": 0, "id": "0", "az": "unknown",
        "packages": {},
        "networks": {
            "private": {"type": "manual", "ip": "10.0.0.5", "netmask": "255.255.255.0", "gateway": "10.0.0.1", "default": ["dns", "gateway"], "cloud_properties": {}},
            "public": {"type": "dynamic", "cloud_properties": {}},
        },
        "job": {"name": "kv", "templates": []},
        "rendered_templates_archive": {"blobstore_id": "", "sha1": ""},
        "configuration_hash": "unused-configuration-hash",
    });
    assert_eq!(
        s.client.call("apply", vec![initial.clone()]).await.unwrap(),
        "applied"
    );
    assert!(!vm.join("jobs/old").exists() && !vm.join("packages/old").exists());
    let state = s.client.get_state().await.unwrap();
    assert_eq!(state["networks"]["private"], initial["networks"]["private"]);
    assert_eq!(state["networks"]["public"]["ip"], "10.254.9.7");
    assert_eq!(state["networks"]["public"]["gateway"], "10.254.9.1");
    assert_eq!(state["resource_pool"], json!({}));
    assert_eq!(state["configuration_hash"], "unused-configuration-hash");
    assert_eq!(state["az"], "unknown");
    assert_eq!(state["job_state"], "running", "nothing to run is running");
    assert_eq!(state["agent_id"], "agent-1");
    assert_eq!(
        std::fs::read_to_string(vm.join("instance/deployment")).unwrap(),
        "env"
    );
    assert_eq!(
        std::fs::read_to_string(vm.join("instance/id")).unwrap(),
        "0"
    );

    let mut elsewhere = initial;
    elsewhere["networks"]["other"] = json!({"type": "manual", "ip": "10.9.0.5"});
    let e = s.client.call("apply", vec![elsewhere]).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("Network 'other' is not found in settings"),
        "{e}"
    );
    assert_eq!(
        s.client
            .call("drain", vec![json!("status"), json!({})])
            .await
            .unwrap(),
        0
    );
    let _ = s.stop.send(true);
}
