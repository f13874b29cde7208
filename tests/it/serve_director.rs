//! The director API of `serve` over real HTTPS on 127.0.0.1: shapes, status codes,
//! redirects to tasks, task output with ranges, cancellation, and refusals.

use fleet_updater::config::ServeLimits;
use reqwest::Method;
use serde_json::Value;

use crate::served::Served;

const PG: &str = "service-instance_pg-01";
const RMQ: &str = "service-instance_rmq-01";

#[tokio::test(flavor = "multi_thread")]
async fn info_is_open_and_every_other_route_wants_credentials() {
    let s = Served::start(ServeLimits::default()).await;
    let info: Value = s.info().await;
    assert_eq!(info["user_authentication"]["type"], "basic");
    assert!(info["version"].as_str().unwrap().contains("fleet-updater"));

    let anonymous = s
        .client
        .get(s.director_url("/deployments"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert!(
        anonymous.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic")
    );
    let body: Value = anonymous.json().await.unwrap();
    assert!(body["code"].is_number() && body["description"].is_string());

    let wrong = s
        .client
        .get(s.director_url("/tasks"))
        .basic_auth("admin", Some("not-the-password"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let broker = s
        .client
        .get(s.broker_url("/mgmt/service_instances"))
        .send()
        .await
        .unwrap();
    assert_eq!(broker.status(), 401);
    let body: Value = broker.json().await.unwrap();
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .contains("Not authorized")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn generated_credentials_and_ca_are_private_and_kept_for_the_next_start() {
    let s = Served::start(ServeLimits::default()).await;
    let credentials = s.serving.credentials.clone().unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&credentials), 0o600);
        assert_eq!(mode(&s.state.path().join("serve-ca.key")), 0o600);
    }
    let (password, ca) = (s.password.clone(), std::fs::read(&s.ca).unwrap());
    let state = s.state;
    s.serving.shutdown(std::time::Duration::from_secs(5)).await;
    let again = Served::start_in(state, ServeLimits::default()).await;
    assert_eq!(again.password, password);
    assert_eq!(std::fs::read(&again.ca).unwrap(), ca);
    // The old CA still verifies the new server certificate.
    let tasks = again.director(Method::GET, "/tasks").send().await.unwrap();
    assert_eq!(tasks.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn listings_have_the_director_shapes() {
    let s = Served::start(ServeLimits::default()).await;
    let deployments = s.get_json("/deployments").await;
    let pg = deployments
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == PG)
        .unwrap();
    assert_eq!(pg["releases"][0]["name"], "postgres");
    assert_eq!(pg["releases"][0]["version"], "15.8");
    assert_eq!(pg["stemcells"][0]["version"], "1.500");
    assert_eq!(pg["cloud_config"], "latest");
    assert_eq!(pg["locked"], false);
    assert_eq!(deployments.as_array().unwrap().len(), 5);

    let manifest = s.get_json(&format!("/deployments/{PG}")).await;
    assert!(
        manifest["manifest"]
            .as_str()
            .unwrap()
            .contains("name: postgres")
    );

    let instances = s.get_json(&format!("/deployments/{RMQ}/instances")).await;
    assert_eq!(instances.as_array().unwrap().len(), 3);
    for i in instances.as_array().unwrap() {
        assert_eq!(i["job"], "rabbitmq");
        assert!(i["id"].is_string() && i["cid"].is_string() && i["agent_id"].is_string());
        assert_eq!(i["ips"].as_array().unwrap().len(), 1);
        assert_eq!(i["expects_vm"], true);
    }
    let vms = s.get_json(&format!("/deployments/{RMQ}/vms")).await;
    assert_eq!(vms.as_array().unwrap().len(), 3);

    let releases = s.get_json("/releases").await;
    let postgres = releases
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "postgres")
        .unwrap();
    let versions: Vec<(&str, bool)> = postgres["release_versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_str().unwrap(),
                v["currently_deployed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert!(versions.contains(&("15.8", true)) && versions.contains(&("16.4", false)));
    let stemcells = s.get_json("/stemcells").await;
    assert!(
        stemcells
            .as_array()
            .unwrap()
            .iter()
            .all(|st| st["operating_system"] == "ubuntu-jammy")
    );

    let configs = s
        .get_json("/configs?type=cloud&name=default&latest=true")
        .await;
    assert_eq!(configs[0]["type"], "cloud");
    assert!(configs[0]["content"].as_str().unwrap().contains("vm_types"));
    assert_eq!(
        s.get_json("/configs?type=runtime").await,
        serde_json::json!([])
    );
    assert!(s.get_json("/cloud_configs?limit=1").await[0]["properties"].is_string());
    assert_eq!(s.get_json("/locks").await, serde_json::json!([]));

    let missing = s.send(Method::GET, "/deployments/nope").await;
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.json::<Value>().await.unwrap()["code"], 70000);
    let unknown = s.send(Method::GET, "/nothing/here").await;
    assert_eq!(unknown.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_redirects_to_its_task_whose_output_can_be_tailed_by_range() {
    let s = Served::start(ServeLimits::default()).await;
    let manifest = s.get_json(&format!("/deployments/{PG}")).await["manifest"]
        .as_str()
        .unwrap()
        .replace("15.8", "16.4");
    let diff = s
        .send_yaml(
            Method::POST,
            &format!("/deployments/{PG}/diff"),
            manifest.clone(),
        )
        .await
        .json::<Value>()
        .await
        .unwrap();
    let lines = diff["diff"].as_array().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l[1] == "added" && l[0].as_str().unwrap().contains("16.4"))
    );
    assert!(
        lines
            .iter()
            .any(|l| l[1] == "removed" && l[0].as_str().unwrap().contains("15.8"))
    );

    let response = s
        .send_yaml(
            Method::POST,
            "/deployments?canaries=1&max_in_flight=50%25",
            manifest,
        )
        .await;
    let id = Served::task_of(&response);
    let task = s.wait_task(id).await;
    assert_eq!(task["state"], "done", "{task}");
    assert_eq!(task["deployment"], PG);
    assert!(task["timestamp"].is_u64());

    let events = s.output(id, "event").await;
    let parsed: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        parsed
            .iter()
            .any(|e| e["stage"] == "Updating instance" && e["state"] == "finished")
    );
    let tail = s
        .director(Method::GET, &format!("/tasks/{id}/output?type=event"))
        .header("range", "bytes=10-")
        .send()
        .await
        .unwrap();
    assert_eq!(tail.status(), 206);
    assert_eq!(
        tail.headers()["content-range"].to_str().unwrap(),
        format!("bytes 10-{}/{}", events.len() - 1, events.len())
    );
    assert_eq!(tail.text().await.unwrap(), events[10..]);
    let nothing_new = s
        .director(Method::GET, &format!("/tasks/{id}/output?type=event"))
        .header("range", format!("bytes={}-", events.len()))
        .send()
        .await
        .unwrap();
    assert_eq!(nothing_new.status(), 416);
    let result = s.output(id, "result").await;
    assert!(result.contains(PG));

    let after = s.get_json("/deployments").await;
    let pg = after
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == PG)
        .unwrap();
    assert_eq!(pg["releases"][0]["version"], "16.4");
    let listed = s.get_json(&format!("/tasks?deployment={PG}&limit=1")).await;
    assert_eq!(listed[0]["id"], id);
    let done = s.get_json("/tasks?state=processing,queued").await;
    assert_eq!(done, serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_manifests_are_refused_before_any_task_exists() {
    let s = Served::start(ServeLimits::default()).await;
    let before = s
        .get_json("/tasks?verbose=2")
        .await
        .as_array()
        .unwrap()
        .len();
    let cases = [
        ("", 440001),
        ("name: [unclosed", 440001),
        ("- a list", 440001),
        ("releases: []", 40001),
    ];
    for (body, code) in cases {
        let response = s.send_yaml(Method::POST, "/deployments", body).await;
        assert_eq!(response.status(), 400, "{body:?}");
        assert_eq!(
            response.json::<Value>().await.unwrap()["code"],
            code,
            "{body:?}"
        );
    }
    let json = s
        .director(Method::POST, "/deployments")
        .header("content-type", "application/json")
        .body("name: d")
        .send()
        .await
        .unwrap();
    assert_eq!(json.status(), 415);
    let bad_count = s
        .send_yaml(Method::POST, "/deployments?canaries=two", "name: d")
        .await;
    assert_eq!(bad_count.status(), 400);
    assert!(Served::description(bad_count).await.contains("canaries"));
    let after = s
        .get_json("/tasks?verbose=2")
        .await
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after);
}

/// A billion-laughs manifest: a few hundred bytes that expand to 10^9 nodes.
fn alias_bomb() -> String {
    let mut bomb = String::from("name: boom\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    bomb
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_bodies_are_refused_with_a_clear_4xx() {
    let s = Served::start(ServeLimits {
        max_body_bytes: 4096,
        ..ServeLimits::default()
    })
    .await;
    let bomb = s
        .send_yaml(Method::POST, "/deployments", alias_bomb())
        .await;
    assert_eq!(bomb.status(), 400);
    let description = Served::description(bomb).await.to_string();
    assert!(description.contains("Incorrect YAML"), "{description}");

    let deep = format!("name: deep\nx: {}{}", "[".repeat(200), "]".repeat(200));
    let deep = s.send_yaml(Method::POST, "/deployments", deep).await;
    assert_eq!(deep.status(), 400);

    let large = format!("name: big\npad: \"{}\"\n", "x".repeat(10_000));
    let too_large = s
        .send_yaml(Method::POST, "/deployments", large.clone())
        .await;
    assert_eq!(too_large.status(), 413);
    assert!(Served::description(too_large).await.contains("4096 bytes"));
    // Without a declared length the body is cut off at the limit too.
    let stream = futures_stream(large);
    let chunked = s
        .broker(
            Method::PATCH,
            "/mgmt/service_instances/pg-01?operation_type=upgrade",
        )
        .body(stream)
        .send()
        .await
        .unwrap();
    assert_eq!(chunked.status(), 413);
}

fn futures_stream(text: String) -> reqwest::Body {
    reqwest::Body::from(text)
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_above_the_limit_are_answered_with_429() {
    let s = Served::start(ServeLimits {
        max_connections: 1,
        ..ServeLimits::default()
    })
    .await;
    // The first client keeps its connection open in its pool.
    let first = s.send(Method::GET, "/tasks").await;
    assert_eq!(first.status(), 200);
    let second = crate::served::client_trusting(&s.ca)
        .get(s.director_url("/tasks"))
        .basic_auth("admin", Some(&s.password))
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 429);
    assert!(second.text().await.unwrap().contains("connections"));
}

#[tokio::test(flavor = "multi_thread")]
async fn state_changes_act_on_the_named_group_or_instance_only() {
    let s = Served::start(ServeLimits::default()).await;
    let stop = s
        .put(&format!("/deployments/{RMQ}/jobs/rabbitmq/1?state=stopped"))
        .await;
    let task = s.wait_task(Served::task_of(&stop)).await;
    assert_eq!(task["state"], "done", "{task}");

    let details = s
        .send(
            Method::GET,
            &format!("/deployments/{RMQ}/instances?format=full"),
        )
        .await;
    let id = Served::task_of(&details);
    assert_eq!(s.wait_task(id).await["state"], "done");
    let lines = s.output(id, "result").await;
    let states: Vec<(u64, String)> = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            (
                v["index"].as_u64().unwrap(),
                v["process_state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        states,
        vec![
            (0, "running".into()),
            (1, "stopped".into()),
            (2, "running".into())
        ]
    );
    // The details task only reads: it is hidden from the default listing.
    let listed = s.get_json("/tasks").await;
    assert!(listed.as_array().unwrap().iter().all(|t| t["id"] != id));

    let start = s
        .put(&format!("/deployments/{RMQ}/jobs/*?state=started"))
        .await;
    assert_eq!(s.wait_task(Served::task_of(&start)).await["state"], "done");
    let restart = s
        .put(&format!("/deployments/{RMQ}/jobs/rabbitmq?state=restart"))
        .await;
    assert_eq!(
        s.wait_task(Served::task_of(&restart)).await["state"],
        "done"
    );

    let unknown_group = s
        .put(&format!("/deployments/{RMQ}/jobs/nope?state=recreate"))
        .await;
    assert_eq!(unknown_group.status(), 404);
    assert_eq!(unknown_group.json::<Value>().await.unwrap()["code"], 70009);
    let unknown_instance = s
        .put(&format!(
            "/deployments/{RMQ}/jobs/rabbitmq/7?state=recreate"
        ))
        .await;
    assert_eq!(unknown_instance.status(), 404);
    let bad_state = s
        .put(&format!("/deployments/{RMQ}/jobs/*?state=sleeping"))
        .await;
    assert_eq!(bad_state.status(), 400);
    // A dry run of a stop is refused, not ignored.
    let dry = s
        .put(&format!(
            "/deployments/{RMQ}/jobs/*?dry_run=true&state=stopped"
        ))
        .await;
    assert_eq!(dry.status(), 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_task_holds_the_lock_and_can_be_cancelled() {
    let s = Served::start(ServeLimits::default()).await;
    // One VM at a time, each watched for at least 300 ms: long enough to cancel.
    let recreate = s
        .put(&format!(
            "/deployments/{RMQ}/jobs/*?state=recreate&canaries=1&max_in_flight=1"
        ))
        .await;
    let id = Served::task_of(&recreate);
    let locks = s.get_json("/locks").await;
    assert_eq!(locks[0]["resource"][0], RMQ);
    assert_eq!(locks[0]["task_id"], id.to_string());
    let second = s.send(Method::DELETE, &format!("/deployments/{RMQ}")).await;
    assert_eq!(second.status(), 409);
    assert!(
        Served::description(second)
            .await
            .contains(&format!("task {id}"))
    );

    let cancel = s.send(Method::DELETE, &format!("/task/{id}")).await;
    assert_eq!(cancel.status(), 204);
    let task = s.wait_task(id).await;
    assert_eq!(task["state"], "cancelled", "{task}");
    let events = s.output(id, "event").await;
    let updated = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["stage"] == "Updating instance" && e["state"] == "started")
        .count();
    assert!(updated < 3, "cancelled after {updated} of 3 instances");
    assert!(events.lines().last().unwrap().contains("\"error\""));
    let again = s.send(Method::DELETE, &format!("/task/{id}")).await;
    assert_eq!(again.status(), 400);
    assert!(
        Served::description(again)
            .await
            .contains("Cannot cancel task")
    );
    assert_eq!(s.get_json("/locks").await, serde_json::json!([]));
    let missing = s.send(Method::DELETE, "/task/9999").await;
    assert_eq!(missing.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cloud_config_is_diffed_and_updated_through_configs() {
    let s = Served::start(ServeLimits::default()).await;
    let current = s
        .get_json("/configs?type=cloud&name=default&latest=true")
        .await[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let changed = current.replace("ram: 2048", "ram: 3072");
    let body = serde_json::json!({ "type": "cloud", "name": "default", "content": changed });
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
            .any(|l| l[1] == "added")
    );
    let updated = s
        .send_json(Method::POST, "/configs", body.to_string())
        .await;
    assert_eq!(updated.status(), 201);
    let now = s.get_json("/configs?type=cloud&latest=true").await;
    assert!(now[0]["content"].as_str().unwrap().contains("ram: 3072"));
    let deployments = s.get_json("/deployments").await;
    assert!(
        deployments
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["cloud_config"] == "outdated")
    );

    let not_yaml = serde_json::json!({ "type": "cloud", "name": "default", "content": "a: [" });
    let refused = s
        .send_json(Method::POST, "/configs", not_yaml.to_string())
        .await;
    assert_eq!(refused.status(), 400);
    // A bad network is refused at upload, naming its key; the config in force stays.
    let bad_network = current.replace(
        "compilation:",
        "- name: broken\n  subnets:\n  - {range: 10.9.0.0/24, gateway: 10.8.0.1}\ncompilation:",
    );
    let bad = serde_json::json!({ "type": "cloud", "name": "default", "content": bad_network });
    let refused = s.send_json(Method::POST, "/configs", bad.to_string()).await;
    assert_eq!(refused.status(), 400);
    let description = Served::description(refused).await;
    assert!(
        description.contains("networks.broken.subnets[0].gateway"),
        "{description}"
    );
    let now = s.get_json("/configs?type=cloud&latest=true").await;
    assert!(now[0]["content"].as_str().unwrap().contains("ram: 3072"));
    let cpi = serde_json::json!({ "type": "cpi", "name": "default", "content": "cpis: []" });
    let refused = s.send_json(Method::POST, "/configs", cpi.to_string()).await;
    assert_eq!(refused.status(), 400);
    assert!(Served::description(refused).await.contains("'cpi'"));
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_cancels_running_tasks_and_ends_them() {
    let s = Served::start(ServeLimits::default()).await;
    let recreate = s
        .put(&format!(
            "/deployments/{RMQ}/jobs/*?state=recreate&canaries=1&max_in_flight=1"
        ))
        .await;
    let id = Served::task_of(&recreate);
    let director = s.serving.fleet().director().clone();
    let cancelled = s.serving.shutdown(std::time::Duration::from_secs(20)).await;
    assert_eq!(cancelled, vec![id]);
    let task = director.task(id).await.unwrap().unwrap();
    assert_eq!(task.state.as_str(), "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_manifest_asking_for_a_trillion_instances_fails_its_task_and_serve_lives_on() {
    let s = Served::start(ServeLimits::default()).await;
    let manifest = s.get_json(&format!("/deployments/{PG}")).await["manifest"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(manifest.contains("instances: 1\n"), "{manifest}");
    for (count, reason) in [
        ("1000000000000", "more instances than any director can run"),
        ("4000000000", "at most 5000 per instance group"),
        ("1000000", "at most 5000 per instance group"),
    ] {
        let huge = manifest.replace("instances: 1\n", &format!("instances: {count}\n"));
        let response = s.send_yaml(Method::POST, "/deployments", huge).await;
        let id = Served::task_of(&response);
        let task = s.wait_task(id).await;
        assert_eq!(task["state"], "error", "{task}");
        let result = s.output(id, "result").await;
        assert!(result.contains(reason), "{count}: {result}");
        // Still answering, and the deployment is as it was.
        assert!(s.info().await["uuid"].is_string());
        let vms = s.get_json(&format!("/deployments/{PG}/vms")).await;
        assert_eq!(vms.as_array().unwrap().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_deployment_names_are_refused_before_any_task_exists() {
    let s = Served::start(ServeLimits::default()).await;
    let before = s
        .get_json("/tasks?verbose=2")
        .await
        .as_array()
        .unwrap()
        .len();
    let long = "a".repeat(200);
    for name in [
        "db\u{1b}]0;owned\u{7}",
        "../../etc",
        "a;reboot",
        long.as_str(),
    ] {
        let body = format!("name: {}\n", serde_json::to_string(name).unwrap());
        let response = s.send_yaml(Method::POST, "/deployments", body).await;
        assert_eq!(response.status(), 400, "{name:?}");
        let description = Served::description(response).await;
        assert!(description.contains("`name`"), "{description}");
        assert!(!description.contains('\u{1b}'), "{description}");
    }
    let after = s
        .get_json("/tasks?verbose=2")
        .await
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after);
}
