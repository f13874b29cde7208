//! The request sequences the official `bosh` CLI (v7) sends for each command, replayed
//! against `serve`, its answers decoded into the types the CLI decodes them into
//! (`bosh_cli_types`; the CLI itself is not installable here).

use fleet_updater::config::ServeLimits;
use reqwest::Method;
use serde_json::Value;

use crate::bosh_cli_types::{
    CleanUpResponse, CloudConfigResp, ConfigResp, DeploymentResp, EventResp, InfoResp, LockResp,
    OrphanDiskResp, Problem, ReleaseSeriesResp, StemcellResp, TaskResp,
};
use crate::served::Served;

const PG: &str = "service-instance_pg-03";
const RMQ: &str = "service-instance_rmq-01";

/// A `GET` answer decoded into the type the CLI decodes it into; a mismatch fails the
/// test as it would fail the command.
async fn decoded<T: serde::de::DeserializeOwned>(s: &Served, path: &str) -> T {
    serde_json::from_value(s.get_json(path).await).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `bosh deploy` of `manifest`; the finished task.
async fn deployed(s: &Served, manifest: String) -> Value {
    let response = s.send_yaml(Method::POST, "/deployments", manifest).await;
    s.wait_task(Served::task_of(&response)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn env_deployments_tasks_locks_releases_and_stemcells_decode_as_the_cli_expects() {
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
    let deployments: Vec<DeploymentResp> = decoded(&s, "/deployments?exclude_configs=true").await;
    assert_eq!(deployments.len(), 5, "{deployments:?}");
    for d in &deployments {
        assert!(!d.name.is_empty());
        assert!(!d.releases.is_empty() && !d.stemcells.is_empty(), "{d:?}");
        assert!(
            d.releases
                .iter()
                .all(|r| !r.name.is_empty() && !r.version.is_empty())
        );
        assert!(
            d.stemcells
                .iter()
                .all(|s| !s.name.is_empty() && !s.version.is_empty())
        );
    }
    // `bosh tasks` and `bosh tasks -r`
    let _current: Vec<TaskResp> = decoded(
        &s,
        "/tasks?state=processing%2Ccancelling%2Cqueued&verbose=2",
    )
    .await;
    let recent: Vec<TaskResp> = decoded(&s, "/tasks?limit=30&verbose=1").await;
    assert!(!recent.is_empty());
    for task in &recent {
        assert!(task.id > 0 && task.started_at > 0, "{task:?}");
        assert!(
            !task.state.is_empty() && !task.description.is_empty(),
            "{task:?}"
        );
    }
    // `bosh releases` and `bosh stemcells`
    let releases: Vec<ReleaseSeriesResp> = decoded(&s, "/releases").await;
    assert!(!releases.is_empty());
    assert!(releases.iter().all(|r| !r.versions.is_empty()));
    assert!(
        releases
            .iter()
            .flat_map(|r| &r.versions)
            .any(|v| v.currently_deployed)
    );
    let stemcells: Vec<StemcellResp> = decoded(&s, "/stemcells").await;
    assert!(!stemcells.is_empty());
    assert!(
        stemcells
            .iter()
            .all(|s| !s.operating_system.is_empty() && !s.cid.is_empty())
    );
    assert!(stemcells.iter().any(|s| !s.deployments.is_empty()));
    // `bosh locks`: timeout and task_id are strings. One VM at a time, each watched for
    // at least 300 ms: the lock is held while it is read.
    let id = Served::task_of(
        &s.put(&format!(
            "/deployments/{RMQ}/jobs/%2A?state=recreate&canaries=1&max_in_flight=1"
        ))
        .await,
    );
    let locks: Vec<LockResp> = decoded(&s, "/locks").await;
    assert_eq!(locks.len(), 1, "{locks:?}");
    assert_eq!(
        (locks[0].kind.as_str(), locks[0].resource.clone()),
        ("deployment", vec![RMQ.to_string()])
    );
    assert!(locks[0].timeout.parse::<f64>().is_ok(), "{locks:?}");
    assert_eq!(locks[0].task_id, id.to_string());
    let task: TaskResp = decoded(&s, &format!("/tasks/{id}")).await;
    assert_eq!(task.id, id as i64);
    s.wait_task(id).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn log_in_sees_its_user_and_clients_read_a_bosh_version_and_a_uuid() {
    let s = Served::start(ServeLimits::default()).await;
    let info = |request: reqwest::RequestBuilder| async move {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        serde_json::from_str::<InfoResp>(&response.text().await.unwrap()).unwrap()
    };
    // `bosh log-in` and `bosh env` send the credentials to /info and read `user`.
    let signed_in = info(s.director(Method::GET, "/info")).await;
    assert_eq!(signed_in.user, "admin");
    let anonymous = info(s.client.get(s.director_url("/info"))).await;
    assert_eq!(anonymous.user, "", "no credentials, no user");
    let wrong = info(
        s.client
            .get(s.director_url("/info"))
            .basic_auth("admin", Some("not-the-password")),
    )
    .await;
    assert_eq!(wrong.user, "", "wrong credentials name no user");
    // The ODB errands parse the first word as a semantic version and want 268.4.0 or later.
    let version = signed_in.version.split_whitespace().next().unwrap();
    let numbers: Vec<u64> = version.split('.').map(|n| n.parse().unwrap()).collect();
    assert_eq!(numbers.len(), 3, "{}", signed_in.version);
    assert!(numbers >= vec![268, 4, 0], "{}", signed_in.version);
    // A UUID, the same on every answer.
    let groups: Vec<usize> = signed_in.uuid.split('-').map(str::len).collect();
    assert_eq!(groups, [8, 4, 4, 4, 12], "{}", signed_in.uuid);
    assert_eq!(anonymous.uuid, signed_in.uuid);
    assert_eq!(signed_in.auth.kind, "basic");
    assert!(!signed_in.features.is_empty());
    // A task records who started it; `bosh tasks` shows it.
    let response = s
        .send(Method::GET, &format!("/deployments/{PG}/vms?format=full"))
        .await;
    let task = s.wait_task(Served::task_of(&response)).await;
    assert_eq!(task["user"], "admin");
    let listed = s.get_json("/tasks?limit=30&verbose=2").await;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == task["id"] && t["user"] == "admin"),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cloud_config_and_update_cloud_config_use_the_empty_name() {
    let s = Served::start(ServeLimits::default()).await;
    let shown: Vec<CloudConfigResp> = decoded(&s, "/cloud_configs?limit=1&name=").await;
    let text = shown[0].properties.clone();
    let changed = text.replace("cpu: 1,", "cpu: 2,");
    let diff: Value = s
        .send_yaml(Method::POST, "/cloud_configs/diff?name=", changed.clone())
        .await
        .json()
        .await
        .unwrap();
    let lines = diff["diff"].as_array().unwrap();
    assert!(lines.iter().all(|l| l.as_array().unwrap().len() == 2));
    assert!(lines.iter().any(|l| l[1] == "added"));
    assert!(lines.iter().any(|l| l[1].is_null()));
    let upload = s
        .send_yaml(Method::POST, "/cloud_configs?name=", changed.clone())
        .await;
    assert_eq!(upload.status(), 201);
    assert_eq!(
        s.get_json("/cloud_configs?limit=1&name=").await[0]["properties"],
        changed
    );
}

/// The same document in another form: JSON, which YAML reads too, with its own quoting,
/// layout and key order.
fn as_json(text: &str) -> String {
    let node = fleet_yaml::load_as_director(text, fleet_yaml::Limits::default()).unwrap();
    serde_json::to_string_pretty(&node.to_json()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_manifest_or_cloud_config_sent_back_in_another_form_shows_no_change() {
    let s = Served::start(ServeLimits::default()).await;
    let unchanged = |diff: Value| {
        let lines = diff["diff"].as_array().unwrap().clone();
        assert!(!lines.is_empty());
        assert!(lines.iter().all(|l| l[1].is_null()), "{lines:?}");
    };
    // `bosh deploy` of the deployment's own manifest.
    let manifest = s.get_json(&format!("/deployments/{PG}")).await["manifest"]
        .as_str()
        .unwrap()
        .to_string();
    let diff = s
        .send_yaml(
            Method::POST,
            &format!("/deployments/{PG}/diff?redact=true"),
            as_json(&manifest),
        )
        .await;
    unchanged(diff.json().await.unwrap());
    // `update-cloud-config` with what `bosh cloud-config` showed: no change, no new version.
    let shown = s.get_json("/cloud_configs?limit=1&name=").await[0]["properties"]
        .as_str()
        .unwrap()
        .to_string();
    let version = s.get_json("/configs?type=cloud&latest=true").await[0]["id"].clone();
    let diff = s
        .send_yaml(Method::POST, "/cloud_configs/diff?name=", as_json(&shown))
        .await;
    unchanged(diff.json().await.unwrap());
    let upload = s
        .send_yaml(Method::POST, "/cloud_configs?name=", as_json(&shown))
        .await;
    assert_eq!(upload.status(), 201);
    assert_eq!(
        s.get_json("/configs?type=cloud&latest=true").await[0]["id"],
        version
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
        .send_yaml(
            Method::POST,
            &format!("/deployments/{PG}/diff?redact=true"),
            manifest.clone(),
        )
        .await
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

    // `bosh task N --cpi` and `--debug`: the task's requests to the cloud and calls to
    // the agents, not its events again.
    let recreate = s
        .put(&format!("/deployments/{PG}/jobs/%2A?state=recreate"))
        .await;
    let recreate = Served::task_of(&recreate);
    s.wait_task(recreate).await;
    let cpi = s.output(recreate, "cpi").await;
    assert!(cpi.contains("request: create_vm"), "{cpi}");
    assert!(cpi.contains("request: delete_vm"), "{cpi}");
    assert!(!cpi.contains("Updating instance"), "{cpi}");
    let debug = s.output(recreate, "debug").await;
    assert!(debug.contains("DirectorJobRunner: agent"), "{debug}");
    assert!(debug.contains("CPI: request: create_vm"), "{debug}");
    assert!(debug.contains("Updating instance"), "{debug}");

    // `bosh errands`: none, as the director takes no errand instance groups.
    assert_eq!(
        s.get_json(&format!("/deployments/{PG}/errands")).await,
        serde_json::json!([])
    );
    assert_eq!(
        s.send(Method::GET, "/deployments/nope/errands")
            .await
            .status(),
        404
    );

    // `bosh instances` and `bosh vms`: a task whose result is one VMInfo per line.
    let uploaded: Vec<(String, String)> = s
        .get_json("/stemcells")
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["version"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(!uploaded.is_empty());
    for path in ["instances", "vms"] {
        let lines = s.vm_infos(PG, path).await;
        assert!(!lines.is_empty());
        for vm in &lines {
            assert_eq!(vm.job_name, "postgres");
            assert_eq!(vm.process_state, "running");
            assert_eq!(vm.active, Some(true));
            assert_eq!(vm.az, "z1");
            assert!(!vm.ips.is_empty() && !vm.vm_id.is_empty());
            // `--ps`: every process running, so the CLI shows the instance as running.
            assert!(!vm.processes.is_empty(), "{path}: no processes");
            assert!(vm.processes.iter().all(|p| p.state == "running"));
            assert!(vm.processes.iter().all(|p| p.uptime.seconds.is_some()));
            // The stemcell as an object, named as uploaded.
            assert!(
                uploaded.contains(&(vm.stemcell.name.clone(), vm.stemcell.version.clone())),
                "{:?} not in {uploaded:?}",
                vm.stemcell
            );
            // RFC 3339, as the CLI parses it: not in the future, not before 2020.
            let created = humantime::parse_rfc3339(&vm.vm_created_at_raw)
                .unwrap_or_else(|e| panic!("{e}: {:?}", vm.vm_created_at_raw));
            assert!(created <= std::time::SystemTime::now());
            assert!(created > humantime::parse_rfc3339("2020-01-01T00:00:00Z").unwrap());
            // `vms --vitals`.
            assert_eq!(vm.vitals.load.len(), 3);
            assert!(!vm.vitals.cpu.sys.is_empty() && !vm.vitals.mem.percent.is_empty());
            for disk in ["system", "ephemeral", "persistent"] {
                assert!(
                    vm.vitals
                        .disk
                        .get(disk)
                        .is_some_and(|d| !d.percent.is_empty()),
                    "{disk}: {:?}",
                    vm.vitals.disk
                );
            }
        }
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

#[tokio::test(flavor = "multi_thread")]
async fn cancel_tasks_cancels_what_its_filter_names_and_refusals_are_director_errors() {
    let s = Served::start(ServeLimits::default()).await;
    // One VM at a time, each watched for at least 300 ms: the task runs for a while.
    let id = Served::task_of(
        &s.put(&format!(
            "/deployments/{RMQ}/jobs/%2A?state=recreate&canaries=1&max_in_flight=1"
        ))
        .await,
    );
    let cancel = |body: &'static str| {
        s.director(Method::POST, "/tasks/cancel")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let state = || async { s.get_json(&format!("/tasks/{id}")).await["state"].clone() };
    // `bosh cancel-tasks` alone cancels queued tasks; this one is processing once it runs.
    for _ in 0..500 {
        if state().await != "queued" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(state().await, "processing");
    assert_eq!(cancel("{}").await.unwrap().status(), 204);
    assert_eq!(state().await, "processing");
    // Another type, another deployment: left alone.
    let other_type = r#"{"states":["processing"],"types":["delete_deployment"]}"#;
    assert_eq!(cancel(other_type).await.unwrap().status(), 204);
    let other_deployment = format!(r#"{{"states":["processing"],"deployment":"{PG}"}}"#);
    let answer = s
        .send_json(Method::POST, "/tasks/cancel", other_deployment)
        .await;
    assert_eq!(answer.status(), 204);
    assert_eq!(state().await, "processing");
    // Named by state, type and deployment: cancelled.
    let named = format!(
        r#"{{"states":["processing"],"types":["update_deployment"],"deployment":"{RMQ}"}}"#
    );
    let answer = s.send_json(Method::POST, "/tasks/cancel", named).await;
    assert_eq!(answer.status(), 204);
    assert_eq!(s.wait_task(id).await["state"], "cancelled");

    // A state no task is cancelled in: a director error naming it.
    let refused = cancel(r#"{"states":["done"]}"#).await.unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert!(body["code"].is_u64(), "{body}");
    assert!(
        body["description"].as_str().unwrap().contains("'done'"),
        "{body}"
    );
    // A method a path does not take: 405, in the director's error shape.
    let refused = s.send(Method::DELETE, "/tasks").await;
    assert_eq!(refused.status(), 405);
    let body: Value = refused.json().await.unwrap();
    assert!(body["code"].is_u64(), "{body}");
    assert!(
        body["description"].as_str().unwrap().contains("DELETE"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn configs_recent_one_by_id_diff_by_ids_and_a_stale_update_follow_the_cli() {
    let s = Served::start(ServeLimits::default()).await;
    let first = s
        .get_json("/configs?latest=true&limit=1&type=cloud&name=default")
        .await[0]
        .clone();
    let first_id = first["id"].as_str().unwrap().to_string();
    let changed = first["content"]
        .as_str()
        .unwrap()
        .replace("cpu: 1,", "cpu: 2,");
    assert_ne!(changed, first["content"].as_str().unwrap());
    // `bosh update-config`: the diff names the version it compares with, the update
    // expects it to be the latest.
    let post = |path: &'static str, body: Value| {
        s.director(Method::POST, path)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let diff: Value = post(
        "/configs/diff",
        serde_json::json!({"type": "cloud", "name": "default", "content": changed}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(diff["from"]["id"], first_id.as_str());
    let updated = post(
        "/configs",
        serde_json::json!({"type": "cloud", "name": "default", "content": changed, "expected_latest_id": first_id}),
    )
    .await
    .unwrap();
    assert_eq!(updated.status(), 201);
    let second: Value = updated.json().await.unwrap();
    let second_id = second["id"].as_str().unwrap().to_string();
    assert_ne!(second_id, first_id);
    // A second update that saw only the first version is refused: 412 with both ids.
    let stale = post(
        "/configs",
        serde_json::json!({"type": "cloud", "name": "default", "content": "vm_types: []\n", "expected_latest_id": first_id}),
    )
    .await
    .unwrap();
    assert_eq!(stale.status(), 412);
    let stale: Value = stale.json().await.unwrap();
    assert_eq!(stale["latest_id"], second_id.as_str());
    assert_eq!(stale["expected_latest_id"], first_id.as_str());

    // `bosh configs --recent=10`: both versions, newest first, only it current.
    let recent: Vec<ConfigResp> = decoded(&s, "/configs?latest=false&limit=10").await;
    let ids: Vec<&str> = recent.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, [second_id.as_str(), first_id.as_str()]);
    assert!(recent[0].current && !recent[1].current);
    assert!(
        recent
            .iter()
            .all(|c| c.kind == "cloud" && c.name == "default")
    );
    for config in &recent {
        let at = config.created_at.as_str();
        let rfc3339 = at.replacen(' ', "T", 1).replace(" UTC", "Z");
        assert!(humantime::parse_rfc3339(&rfc3339).is_ok(), "{at}");
    }
    assert_eq!(
        s.get_json("/configs?latest=false&limit=1")
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // `bosh config ID`.
    let old = s.get_json(&format!("/configs/{first_id}")).await;
    assert_eq!(old["content"], first["content"]);
    assert_eq!(old["current"], false);
    let missing = s.send(Method::GET, "/configs/9999").await;
    assert_eq!(missing.status(), 404);
    assert!(Served::description(missing).await.contains("9999"));
    // `bosh diff-config --from-id A --to-id B`.
    let diff: Value = post(
        "/configs/diff",
        serde_json::json!({"from": {"id": first_id}, "to": {"id": second_id}}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let lines = diff["diff"].as_array().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l[1] == "removed" && l[0].as_str().unwrap().contains("cpu: 1")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l[1] == "added" && l[0].as_str().unwrap().contains("cpu: 2")),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cck_scans_lists_and_resolves_as_the_cli_drives_it() {
    use fleet_director::cpi::Cpi;
    let s = Served::start(ServeLimits::default()).await;
    let fleet = s.serving.fleet();
    let mut instances = fleet.director().instances(RMQ).await.unwrap();
    instances.sort_by_key(|i| i.index);
    // A VM deleted behind the director's back, and an agent that stopped answering.
    fleet
        .cloud
        .delete_vm(instances[0].vm_cid.as_deref().unwrap())
        .await
        .unwrap();
    fleet
        .cloud
        .set_responsive(instances[1].agent_id.as_deref().unwrap(), false)
        .await
        .unwrap();

    // `bosh -d D cck`: a scan task, then the problems.
    let response = s
        .director(Method::POST, &format!("/deployments/{RMQ}/scans"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    let scan = s.wait_task(Served::task_of(&response)).await;
    assert_eq!(scan["state"], "done", "{scan}");
    let problems: Vec<Problem> =
        serde_json::from_value(s.get_json(&format!("/deployments/{RMQ}/problems")).await).unwrap();
    let kinds: Vec<&str> = problems.iter().map(|p| p.kind.as_str()).collect();
    assert_eq!(kinds, ["missing_vm", "unresponsive_agent"], "{problems:?}");
    for problem in &problems {
        assert_eq!(problem.instance_group, instances[0].group);
        assert!(!problem.description.is_empty());
        let names: Vec<&str> = problem
            .resolutions
            .iter()
            .filter_map(|r| r.name.as_deref())
            .collect();
        assert!(
            names.contains(&"ignore") && names.contains(&"recreate_vm"),
            "{names:?}"
        );
        assert!(names.contains(&"delete_vm_reference"), "{names:?}");
        assert!(problem.resolutions.iter().all(|r| !r.plan.is_empty()));
    }
    assert!(
        problems[1]
            .resolutions
            .iter()
            .any(|r| r.name.as_deref() == Some("reboot_vm"))
    );

    // `bosh cck --auto` sends `null` for each; an answer names its resolution.
    let body = serde_json::json!({
        "resolutions": { problems[0].id.to_string(): null, problems[1].id.to_string(): "recreate_vm" },
        "max_in_flight_overrides": {},
    });
    let response = s
        .send_json(
            Method::PUT,
            &format!("/deployments/{RMQ}/problems"),
            body.to_string(),
        )
        .await;
    let applied = s.wait_task(Served::task_of(&response)).await;
    assert_eq!(applied["state"], "done", "{applied}");
    assert!(
        s.get_json(&format!("/deployments/{RMQ}/problems"))
            .await
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Every VM is back and running.
    let vms = s.vm_infos(RMQ, "vms").await;
    assert_eq!(vms.len(), instances.len());
    assert!(vms.iter().all(|v| v.process_state == "running"), "{vms:?}");

    // A resolution that is not one: a director error naming it.
    let refused = s
        .send_json(
            Method::PUT,
            &format!("/deployments/{RMQ}/problems"),
            r#"{"resolutions": {"1": "fix_it"}}"#,
        )
        .await;
    assert_eq!(refused.status(), 400);
    assert!(Served::description(refused).await.contains("'fix_it'"));
}

#[tokio::test(flavor = "multi_thread")]
async fn orphaned_disks_and_clean_up_follow_the_cli() {
    let s = Served::start(ServeLimits::default()).await;
    // A bigger persistent disk: the old one is orphaned.
    let manifest = s.get_json(&format!("/deployments/{PG}")).await["manifest"]
        .as_str()
        .unwrap()
        .replace("persistent_disk: 10240", "persistent_disk: 20480");
    assert_eq!(deployed(&s, manifest).await["state"], "done");

    // `bosh disks --orphaned`.
    let orphaned: Vec<OrphanDiskResp> = serde_json::from_value(s.get_json("/disks").await).unwrap();
    assert_eq!(orphaned.len(), 1, "{orphaned:?}");
    let disk = &orphaned[0];
    assert_eq!((disk.deployment_name.as_str(), disk.size), (PG, 10240));
    assert!(disk.instance_name.starts_with("postgres/"), "{disk:?}");
    let rfc3339 = disk.orphaned_at.replacen(' ', "T", 1).replace(" UTC", "Z");
    assert!(humantime::parse_rfc3339(&rfc3339).is_ok(), "{disk:?}");

    // `bosh clean-up`: the dry run keeps orphaned disks, `--all` names them.
    let kept: CleanUpResponse = serde_json::from_value(
        s.get_json("/cleanup/dryrun?remove_all=false&keep_orphaned_disks=false")
            .await,
    )
    .unwrap();
    assert!(kept.orphaned_disks.is_empty());
    let all: CleanUpResponse = serde_json::from_value(
        s.get_json("/cleanup/dryrun?remove_all=true&keep_orphaned_disks=false")
            .await,
    )
    .unwrap();
    assert_eq!(all.orphaned_disks.len(), 1);
    assert_eq!(all.orphaned_disks[0].cid, disk.cid);
    let cleaned = s
        .send_json(
            Method::POST,
            "/cleanup",
            r#"{"config":{"remove_all":true,"keep_orphaned_disks":false}}"#,
        )
        .await;
    let task = s.wait_task(Served::task_of(&cleaned)).await;
    assert_eq!(task["state"], "done", "{task}");
    assert_eq!(s.get_json("/disks").await, serde_json::json!([]));
    // Every deployment still has what it deploys with.
    assert!(!s.get_json("/releases").await.as_array().unwrap().is_empty());

    // `bosh delete-disk` of a disk that is not an orphan.
    let refused = s
        .send(Method::DELETE, &format!("/disks/{}", disk.cid))
        .await;
    assert_eq!(refused.status(), 404);
    assert!(Served::description(refused).await.contains(&disk.cid));
    let bad = s
        .send(Method::GET, "/cleanup/dryrun?remove_all=maybe")
        .await;
    assert_eq!(bad.status(), 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn events_tell_who_did_what_and_filter_as_the_cli_asks() {
    let s = Served::start(ServeLimits::default()).await;
    let response = s
        .put(&format!("/deployments/{PG}/jobs/%2A?state=restart"))
        .await;
    let id = Served::task_of(&response);
    assert_eq!(s.wait_task(id).await["state"], "done");
    let s = &s;
    let events = |query: &str| {
        let path = format!("/events{query}");
        async move {
            let value = s.get_json(&path).await;
            serde_json::from_value::<Vec<EventResp>>(value).unwrap()
        }
    };

    // `bosh events`: newest first; the restart started and ended, by admin.
    let all = events("").await;
    assert!(all.len() >= 2, "{all:?}");
    let ids: Vec<u64> = all.iter().map(|e| e.id.parse().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    let deployment_events = events("?object_type=deployment").await;
    let (end, start) = (&deployment_events[0], &deployment_events[1]);
    assert_eq!(end.id, all[0].id, "the task's end is the newest event");
    assert_eq!(
        (end.action.as_str(), end.task_id.clone()),
        ("restart", id.to_string())
    );
    assert_eq!(end.parent_id, start.id);
    assert_eq!((end.user.as_str(), start.user.as_str()), ("admin", "admin"));
    assert_eq!(
        (end.object_type.as_str(), end.object_name.as_str()),
        ("deployment", PG)
    );
    assert!(end.timestamp >= start.timestamp && start.timestamp > 1_600_000_000);
    // Each instance restarted has its own start and end, under the task's start.
    let instances = s.serving.fleet().director().instances(PG).await.unwrap();
    assert!(!instances.is_empty());
    let restarted = events(&format!("?task={id}&object_type=instance")).await;
    assert_eq!(restarted.len(), 2 * instances.len(), "{restarted:?}");
    for instance in &instances {
        let name = format!("{}/{}", instance.group, instance.id);
        let its = events(&format!("?instance={name}")).await;
        let (its_end, its_start) = (&its[0], &its[1]);
        assert_eq!(
            (its_end.action.as_str(), its_end.instance.as_str()),
            ("restart", name.as_str())
        );
        assert_eq!(its_end.object_name, name);
        assert_eq!(its_end.parent_id, its_start.id);
        assert_eq!(its_start.parent_id, start.id);
        assert!(its.iter().all(|e| e.instance == name));
    }
    // The embedded fleet's provisioning created every deployment.
    let created = events("?action=create").await;
    assert!(!created.is_empty() && created.iter().all(|e| e.action == "create"));

    // `--deployment`, `--task`, `--before-id`, `--after`.
    let of_pg = events(&format!("?deployment={PG}")).await;
    assert!(!of_pg.is_empty() && of_pg.iter().all(|e| e.deployment_name == PG));
    let of_task = events(&format!("?task={id}")).await;
    assert_eq!(of_task.len(), 2 + 2 * instances.len());
    let older = events(&format!("?before_id={}", start.id)).await;
    assert!(!older.is_empty());
    assert!(
        older
            .iter()
            .all(|e| e.id.parse::<u64>().unwrap() < start.id.parse().unwrap())
    );
    assert!(events("?after_time=2999-01-01%2000:00:00").await.is_empty());
    let bad = s.send(Method::GET, "/events?before_time=yesterday").await;
    assert_eq!(bad.status(), 400);
    assert!(Served::description(bad).await.contains("before_time"));
}

#[tokio::test(flavor = "multi_thread")]
async fn ignore_and_unignore_set_an_instance_aside_as_the_cli_asks() {
    let s = Served::start(ServeLimits::default()).await;
    let instance = s.serving.fleet().director().instances(PG).await.unwrap()[0].clone();
    let set = |path: String, body: &'static str| {
        s.director(Method::PUT, &path)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let path = format!(
        "/deployments/{PG}/instance_groups/{}/{}/ignore",
        instance.group, instance.id
    );
    let ignored = |s: &Served| {
        let id = instance.id.clone();
        let fleet = s.serving.fleet().director().clone();
        async move {
            fleet
                .instances(PG)
                .await
                .unwrap()
                .into_iter()
                .find(|i| i.id == id)
                .unwrap()
                .ignore
        }
    };
    assert_eq!(
        set(path.clone(), r#"{"ignore":true}"#)
            .await
            .unwrap()
            .status(),
        200
    );
    assert!(ignored(&s).await);
    // `bosh vms` shows it.
    let vms = s.vm_infos(PG, "vms").await;
    assert!(
        vms.iter().any(|v| v.id == instance.id && v.ignore),
        "{vms:?}"
    );
    assert_eq!(
        set(path.clone(), r#"{"ignore":false}"#)
            .await
            .unwrap()
            .status(),
        200
    );
    assert!(!ignored(&s).await);
    let unknown = set(
        format!(
            "/deployments/{PG}/instance_groups/{}/nope/ignore",
            instance.group
        ),
        r#"{"ignore":true}"#,
    )
    .await
    .unwrap();
    assert_eq!(unknown.status(), 404);
    let bad = set(path, r#"{"ignore":"yes"}"#).await.unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn update_runtime_config_places_its_addons_and_configs_lists_every_kind() {
    let s = Served::start(ServeLimits::default()).await;
    let content = format!(
        "releases: [{{name: rabbitmq, version: 3.13.7}}]\naddons:\n- name: metrics\n  jobs: [{{name: rabbitmq-server, release: rabbitmq}}]\n  include: {{deployments: [{PG}]}}\n"
    );
    let body = serde_json::json!({ "type": "runtime", "name": "", "content": content });
    // `bosh update-runtime-config`: the diff, then the config.
    let diff: Value = s
        .send_json(Method::POST, "/configs/diff", body.to_string())
        .await
        .json()
        .await
        .unwrap();
    assert!(
        diff["diff"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l[1] == "added")
    );
    assert!(diff.get("from").is_none(), "nothing before: {diff}");
    let created = s
        .send_json(Method::POST, "/configs", body.to_string())
        .await;
    assert_eq!(created.status(), 201);
    let created: ConfigResp = serde_json::from_str(&created.text().await.unwrap()).unwrap();
    assert_eq!(
        (created.kind.as_str(), created.name.as_str()),
        ("runtime", "default")
    );
    assert!(created.current);
    // `bosh runtime-config` and `bosh configs`.
    let shown: Vec<ConfigResp> =
        decoded(&s, "/configs?latest=true&limit=1&name=default&type=runtime").await;
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].content, content);
    let every: Vec<ConfigResp> = decoded(&s, "/configs?latest=true").await;
    let kinds: Vec<&str> = every.iter().map(|c| c.kind.as_str()).collect();
    assert!(
        kinds.contains(&"cloud") && kinds.contains(&"runtime"),
        "{kinds:?}"
    );
    assert!(every.iter().all(|c| c.current));
    let ids: std::collections::BTreeSet<&str> = every.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids.len(), every.len(), "one id per config");

    // The next deploy of the included deployment runs the addon's job.
    let manifest = s.get_json(&format!("/deployments/{PG}")).await["manifest"]
        .as_str()
        .unwrap()
        .to_string();
    let task = deployed(&s, manifest).await;
    assert_eq!(task["state"], "done", "{task}");
    let vms = s.vm_infos(PG, "vms").await;
    assert!(!vms.is_empty());
    for vm in &vms {
        let names: Vec<&str> = vm.processes.iter().map(|p| p.name.as_str()).collect();
        assert!(names.contains(&"rabbitmq-server"), "{names:?}");
    }

    // A runtime config with a problem: refused, naming the key.
    let bad = serde_json::json!({ "type": "runtime", "name": "", "content": "addons:\n- name: x\n  jobs: [{name: y, release: nope}]\n" });
    let refused = s.send_json(Method::POST, "/configs", bad.to_string()).await;
    assert_eq!(refused.status(), 400);
    assert!(
        Served::description(refused)
            .await
            .contains("addons[0].jobs[0].release")
    );
}
