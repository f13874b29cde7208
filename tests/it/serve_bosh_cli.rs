//! The request sequences the official `bosh` CLI (v7) sends for each command, replayed
//! against `serve` with the shapes it decodes (the CLI itself is not installable here).

use fleet_updater::config::ServeLimits;
use reqwest::Method;
use serde_json::Value;

use crate::served::Served;

const PG: &str = "service-instance_pg-03";
const RMQ: &str = "service-instance_rmq-01";

fn is_task_line(v: &Value) -> bool {
    v["id"].is_u64()
        && v["state"].is_string()
        && v["description"].is_string()
        && (v["started_at"].is_null() || v["started_at"].is_u64())
        && (v["timestamp"].is_null() || v["timestamp"].is_u64())
}

#[tokio::test(flavor = "multi_thread")]
async fn env_deployments_tasks_and_locks_decode_as_the_cli_expects() {
    let s = Served::start(ServeLimits::default()).await;
    // `bosh env`: /info without credentials; every `features` value an object.
    let info: Value = s.info().await;
    assert!(
        info["features"]
            .as_object()
            .unwrap()
            .values()
            .all(Value::is_object)
    );
    // `bosh deployments`
    let deployments = s.get_json("/deployments?exclude_configs=true").await;
    let deployments = deployments.as_array().unwrap();
    assert_eq!(deployments.len(), 5, "{deployments:?}");
    for d in deployments {
        let releases = d["releases"].as_array().unwrap();
        assert!(!releases.is_empty(), "{d}");
        for r in releases {
            assert!(!r["version"].as_str().unwrap().is_empty());
        }
    }
    // `bosh tasks` and `bosh tasks -r`
    let current = s
        .get_json("/tasks?state=processing%2Ccancelling%2Cqueued&verbose=2")
        .await;
    assert!(current.as_array().unwrap().iter().all(is_task_line));
    let recent = s.get_json("/tasks?limit=30&verbose=1").await;
    assert!(!recent.as_array().unwrap().is_empty());
    assert!(recent.as_array().unwrap().iter().all(is_task_line));
    // `bosh locks`: timeout and task_id are strings. One VM at a time, each watched for
    // at least 300 ms: the lock is held while it is read.
    let id = Served::task_of(
        &s.put(&format!(
            "/deployments/{RMQ}/jobs/%2A?state=recreate&canaries=1&max_in_flight=1"
        ))
        .await,
    );
    let locks = s.get_json("/locks").await;
    let locks = locks.as_array().unwrap();
    assert_eq!(locks.len(), 1, "{locks:?}");
    assert!(locks[0]["timeout"].is_string());
    assert_eq!(locks[0]["task_id"], id.to_string());
    s.wait_task(id).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cloud_config_and_update_cloud_config_use_the_empty_name() {
    let s = Served::start(ServeLimits::default()).await;
    let shown = s.get_json("/cloud_configs?limit=1&name=").await;
    let text = shown[0]["properties"].as_str().unwrap().to_string();
    let changed = text.replace("cpu: 1,", "cpu: 2,");
    let diff: Value = s
        .director(Method::POST, "/cloud_configs/diff?name=")
        .header("content-type", "text/yaml")
        .body(changed.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let lines = diff["diff"].as_array().unwrap();
    assert!(lines.iter().all(|l| l.as_array().unwrap().len() == 2));
    assert!(lines.iter().any(|l| l[1] == "added"));
    assert!(lines.iter().any(|l| l[1].is_null()));
    let upload = s
        .director(Method::POST, "/cloud_configs?name=")
        .header("content-type", "text/yaml")
        .body(changed.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), 201);
    assert_eq!(
        s.get_json("/cloud_configs?limit=1&name=").await[0]["properties"],
        changed
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_instances_vms_recreate_stop_start_and_delete_follow_the_cli_sequences() {
    let s = Served::start(ServeLimits::default()).await;
    // `bosh deploy`: deploy configs (empty here), the diff, then the deploy with a context.
    assert_eq!(
        s.get_json("/configs?latest=true&limit=1&type=deploy").await,
        serde_json::json!([])
    );
    let manifest = s.get_json(&format!("/deployments/{PG}")).await["manifest"]
        .as_str()
        .unwrap()
        .replace("max_connections: 200", "max_connections: 300");
    let diff: Value = s
        .director(Method::POST, &format!("/deployments/{PG}/diff?redact=true"))
        .header("content-type", "text/yaml")
        .body(manifest.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let context = diff["context"].to_string();
    let deploy = s
        .director(Method::POST, "/deployments")
        .query(&[("context", context.as_str())])
        .header("content-type", "text/yaml")
        .body(manifest)
        .send()
        .await
        .unwrap();
    let id = Served::task_of(&deploy);
    assert_eq!(s.wait_task(id).await["state"], "done");
    // The CLI tails the events by offset: every line is JSON with integer times.
    let events = s
        .director(Method::GET, &format!("/tasks/{id}/output?type=event"))
        .header("range", "bytes=0-")
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 206);
    let events = events.text().await.unwrap();
    assert!(events.lines().count() > 1, "{events}");
    for line in events.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert!(v["time"].is_u64() && v["index"].is_u64() && v["progress"].is_u64());
    }

    // `bosh instances` and `bosh vms`: a task whose result is one VMInfo per line.
    for path in ["instances", "vms"] {
        let response = s
            .send(
                Method::GET,
                &format!("/deployments/{PG}/{path}?format=full"),
            )
            .await;
        let id = Served::task_of(&response);
        assert_eq!(s.wait_task(id).await["state"], "done");
        let result = s.output(id, "result").await;
        let line: Value = serde_json::from_str(result.lines().next().unwrap()).unwrap();
        assert_eq!(line["job_name"], "postgres");
        assert_eq!(line["job_state"], "running");
        assert_eq!(line["vm_created_at"], "");
        assert!(line["active"].is_boolean() && line["ips"].is_array() && line["az"] == "z1");
    }

    // `bosh recreate --fix`, `stop --hard`, `start`, `restart`: empty PUTs, keys sorted.
    for query in [
        "fix=true&state=recreate",
        "state=detached",
        "state=started",
        "state=restart",
        "skip_drain=true&state=stopped",
    ] {
        let response = s.put(&format!("/deployments/{PG}/jobs/%2A?{query}")).await;
        let task = s.wait_task(Served::task_of(&response)).await;
        assert_eq!(task["state"], "done", "{query}: {task}");
    }

    // `bosh delete-deployment`: a trailing `?`.
    let delete = s.send(Method::DELETE, &format!("/deployments/{PG}?")).await;
    assert_eq!(s.wait_task(Served::task_of(&delete)).await["state"], "done");
    let names: Vec<String> = s
        .get_json("/deployments")
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!names.contains(&PG.to_string()));
}
