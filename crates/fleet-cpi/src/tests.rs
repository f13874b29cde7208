//! The protocol against scripted CPI executables in temporary directories: each script
//! records the requests it reads and answers what the test wrote for it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::*;

struct Scripted {
    dir: tempfile::TempDir,
}

impl Scripted {
    /// A CPI that answers `info` with `info` and every other method with `answer.json`.
    fn new(info: &str) -> Scripted {
        let dir = tempfile::tempdir().unwrap();
        let script = format!(
            "#!/bin/sh\nreq=$(cat)\nprintf '%s\\n' \"$req\" >> {d}/requests\necho $$ > {d}/pid\ncase \"$req\" in\n  *'\"method\":\"info\"'*) printf '%s' '{info}';;\n  *) cat {d}/answer.json;;\nesac\n",
            d = dir.path().display()
        );
        let path = dir.path().join("cpi");
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scripted { dir }
    }

    fn v2() -> Scripted {
        Scripted::new(
            r#"{"result":{"stemcell_formats":["warden-tar"],"api_version":2},"error":null,"log":""}"#,
        )
    }

    fn answer(&self, text: &str) {
        std::fs::write(self.dir.path().join("answer.json"), text).unwrap();
    }

    fn executable(&self) -> PathBuf {
        self.dir.path().join("cpi")
    }

    fn cpi(&self, timeout: Duration) -> ExternalCpi {
        let mut properties = Map::new();
        properties.insert("root".into(), json!("/srv/iaas"));
        ExternalCpi::new(
            CpiCommand {
                executable: self.executable(),
                args: Vec::new(),
                env: Vec::new(),
                timeout,
            },
            "director-1",
            properties,
        )
    }

    /// Every request the CPI read, in order, each with its request id checked and
    /// taken out (it differs per call).
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("requests"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let mut request: Value = serde_json::from_str(l).unwrap();
                let id = request["context"]
                    .as_object_mut()
                    .unwrap()
                    .remove("request_id")
                    .unwrap();
                assert!(id.as_str().unwrap().starts_with("cpi-"), "{id}");
                request
            })
            .collect()
    }

    fn last_request(&self) -> Value {
        self.requests().pop().unwrap()
    }
}

fn ok(result: Value) -> String {
    json!({"result": result, "error": null, "log": "did it"}).to_string()
}

fn context() -> Value {
    json!({"director_uuid": "director-1", "root": "/srv/iaas"})
}

#[tokio::test]
async fn each_method_sends_its_arguments_in_the_protocols_order() {
    let s = Scripted::v2();
    let cpi = s.cpi(Duration::from_secs(30));
    let props = Map::from_iter([("size".to_string(), json!("small"))]);
    let meta = Map::from_iter([("deployment".to_string(), json!("d"))]);
    let cases: Vec<(Value, &str, Value)> = vec![
        (
            json!("stemcell-1"),
            "create_stemcell",
            json!(["/tmp/image", {"size": "small"}]),
        ),
        (Value::Null, "delete_stemcell", json!(["stemcell-1"])),
        (
            json!(["vm-1", {"default": {"ip": "10.0.0.5"}}]),
            "create_vm",
            json!(["agent-1", "stemcell-1", {"cpu": 1}, {"default": {"type": "manual"}}, ["disk-1"], {"bosh": {"group": "g"}}]),
        ),
        (Value::Null, "delete_vm", json!(["vm-1"])),
        (json!(true), "has_vm", json!(["vm-1"])),
        (Value::Null, "reboot_vm", json!(["vm-1"])),
        (
            Value::Null,
            "set_vm_metadata",
            json!(["vm-1", {"deployment": "d"}]),
        ),
        (
            json!("disk-1"),
            "create_disk",
            json!([1024, {"type": "ssd"}, "vm-1"]),
        ),
        (Value::Null, "delete_disk", json!(["disk-1"])),
        (json!("/dev/sdc"), "attach_disk", json!(["vm-1", "disk-1"])),
        (Value::Null, "detach_disk", json!(["vm-1", "disk-1"])),
        (json!(false), "has_disk", json!(["disk-1"])),
        (
            json!("snap-1"),
            "snapshot_disk",
            json!(["disk-1", {"deployment": "d"}]),
        ),
        (Value::Null, "delete_snapshot", json!(["snap-1"])),
        (Value::Null, "resize_disk", json!(["disk-1", 2048])),
    ];
    for (result, method, arguments) in cases {
        s.answer(&ok(result.clone()));
        match method {
            "create_stemcell" => {
                assert_eq!(
                    cpi.create_stemcell("/tmp/image", &props).await.unwrap(),
                    "stemcell-1"
                )
            }
            "delete_stemcell" => cpi.delete_stemcell("stemcell-1").await.unwrap(),
            "create_vm" => {
                let vm = cpi
                    .create_vm(
                        "agent-1",
                        "stemcell-1",
                        &json!({"cpu": 1}),
                        &json!({"default": {"type": "manual"}}),
                        &["disk-1".to_string()],
                        &json!({"bosh": {"group": "g"}}),
                    )
                    .await
                    .unwrap();
                assert_eq!(vm.cid, "vm-1");
                assert_eq!(vm.networks, Some(json!({"default": {"ip": "10.0.0.5"}})));
            }
            "delete_vm" => cpi.delete_vm("vm-1").await.unwrap(),
            "has_vm" => assert!(cpi.has_vm("vm-1").await.unwrap()),
            "reboot_vm" => cpi.reboot_vm("vm-1").await.unwrap(),
            "set_vm_metadata" => cpi.set_vm_metadata("vm-1", &meta).await.unwrap(),
            "create_disk" => assert_eq!(
                cpi.create_disk(1024, &json!({"type": "ssd"}), Some("vm-1"))
                    .await
                    .unwrap(),
                "disk-1"
            ),
            "delete_disk" => cpi.delete_disk("disk-1").await.unwrap(),
            "attach_disk" => assert_eq!(
                cpi.attach_disk("vm-1", "disk-1").await.unwrap(),
                json!("/dev/sdc")
            ),
            "detach_disk" => cpi.detach_disk("vm-1", "disk-1").await.unwrap(),
            "has_disk" => assert!(!cpi.has_disk("disk-1").await.unwrap()),
            "snapshot_disk" => {
                assert_eq!(cpi.snapshot_disk("disk-1", &meta).await.unwrap(), "snap-1")
            }
            "delete_snapshot" => cpi.delete_snapshot("snap-1").await.unwrap(),
            "resize_disk" => cpi.resize_disk("disk-1", 2048).await.unwrap(),
            other => unreachable!("{other}"),
        }
        assert_eq!(
            s.last_request(),
            json!({"method": method, "arguments": arguments, "context": context(), "api_version": 2}),
            "{method}"
        );
    }
    let requests = s.requests();
    let infos = requests.iter().filter(|r| r["method"] == "info").count();
    assert_eq!(infos, 1, "info is asked once");
    assert_eq!(requests[0]["api_version"], 1, "info is asked at version 1");
    assert_eq!(
        cpi.info().await.unwrap(),
        CpiInfo {
            stemcell_formats: vec!["warden-tar".into()],
            api_version: 2
        }
    );
}

#[tokio::test]
async fn a_cpi_whose_info_fails_is_spoken_to_at_version_1() {
    let s = Scripted::new(
        r#"{"result":null,"error":{"type":"Bosh::Clouds::NotImplemented","message":"Invalid Method: info","ok_to_retry":false},"log":""}"#,
    );
    let cpi = s.cpi(Duration::from_secs(30));
    s.answer(&ok(json!("vm-7")));
    let vm = cpi
        .create_vm("a", "s", &json!({}), &json!({}), &[], &json!({}))
        .await
        .unwrap();
    assert_eq!((vm.cid.as_str(), vm.networks), ("vm-7", None));
    assert_eq!(s.last_request()["api_version"], 1);
}

#[tokio::test]
async fn a_cpi_error_keeps_its_type_message_and_retry_advice_and_names_the_method() {
    let s = Scripted::v2();
    let logs: Arc<Mutex<Vec<(String, String, bool)>>> = Arc::default();
    let seen = Arc::clone(&logs);
    let cpi = s
        .cpi(Duration::from_secs(30))
        .logging_to(Arc::new(move |call| {
            seen.lock().unwrap().push((
                call.method.to_string(),
                call.log.to_string(),
                call.outcome.is_ok(),
            ));
        }));
    s.answer(
        r#"{"result":null,"error":{"type":"Bosh::Clouds::VMNotFound","message":"VM `vm-9' not found","ok_to_retry":true},"log":"looked everywhere"}"#,
    );
    let e = cpi.delete_vm("vm-9").await.unwrap_err();
    assert_eq!(e.kind(), Some("Bosh::Clouds::VMNotFound"));
    assert!(e.ok_to_retry());
    assert_eq!(
        e.to_string(),
        "CPI 'delete_vm' method responded with error Bosh::Clouds::VMNotFound: VM `vm-9' not found (ok to retry)"
    );
    let logs = logs.lock().unwrap().clone();
    assert!(
        logs.contains(&("delete_vm".into(), "looked everywhere".into(), false)),
        "the log of a failed call is kept: {logs:?}"
    );
    s.answer(&ok(json!(42)));
    let e = cpi.has_vm("vm-1").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "CPI 'has_vm' returned an unexpected result: 42"
    );
}

#[tokio::test]
async fn a_cpi_that_hangs_is_ended_at_the_time_limit() {
    let s = Scripted::v2();
    let cpi = s.cpi(Duration::from_millis(500));
    // Answer info first, then hang on the next method.
    cpi.info().await.unwrap();
    std::fs::write(
        s.executable(),
        format!(
            "#!/bin/sh\necho $$ > {}/pid\nsleep 1000\n",
            s.dir.path().display()
        ),
    )
    .unwrap();
    let e = cpi.create_disk(10, &json!({}), None).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "CPI 'create_disk' did not answer within 500 ms"
    );
    let pid: i32 = std::fs::read_to_string(s.dir.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z"))
    });
    assert!(gone, "the hanging CPI was killed");
}

#[tokio::test]
async fn a_cpi_that_prints_garbage_is_named_with_what_it_printed() {
    let s = Scripted::v2();
    let cpi = s.cpi(Duration::from_secs(30));
    cpi.info().await.unwrap();
    std::fs::write(
        s.executable(),
        "#!/bin/sh\ncat >/dev/null\necho 'panic: nil pointer'\necho 'goroutine 1 [running]' >&2\nexit 2\n",
    )
    .unwrap();
    let e = cpi.has_disk("disk-1").await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with("CPI 'has_disk' answered with something that is not a CPI response")
            && text.contains("`panic: nil pointer`")
            && text.ends_with("its stderr ends: goroutine 1 [running]"),
        "{text}"
    );
    let missing = ExternalCpi::new(
        CpiCommand {
            executable: s.dir.path().join("nothing-here"),
            args: Vec::new(),
            env: Vec::new(),
            timeout: Duration::from_secs(1),
        },
        "d",
        Map::new(),
    );
    let e = missing.delete_disk("x").await.unwrap_err();
    assert!(
        e.to_string().starts_with("CPI 'delete_disk': cannot run "),
        "{e}"
    );
}
