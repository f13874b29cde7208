//! `bosh logs` and `bosh run-errand --download-logs` against `serve`'s director over
//! HTTPS, as the CLI sends them: the fetch is a task whose result is a bundle's id, the
//! bundle is downloaded from `/resources/ID`, and bad requests are refused in the
//! director's shape.

use fleet_updater::config::ServeLimits;
use reqwest::Method;
use serde_json::Value;

use crate::bosh_cli_types::TaskResp;
use crate::served::Served;

const RMQ: &str = "service-instance_rmq-01";

/// `GET /resources/ID`, as the CLI's `DownloadResourceUnchecked` asks it.
async fn download(s: &Served, id: &str) -> reqwest::Response {
    s.director(Method::GET, &format!("/resources/{id}"))
        .send()
        .await
        .unwrap()
}

/// Fetches as `Client.FetchLogs` does: the task ends, and its result is the bundle's id.
async fn fetch(s: &Served, path: &str) -> String {
    let id = Served::task_of(&s.send(Method::GET, path).await);
    let task: TaskResp = serde_json::from_value(s.wait_task(id).await).unwrap();
    assert_eq!(task.state, "done", "{}", task.result);
    task.result
}

#[tokio::test(flavor = "multi_thread")]
async fn bosh_logs_fetches_a_bundle_that_downloads_whole() {
    let s = Served::start(ServeLimits::default()).await;
    // `bosh logs -d RMQ`: every instance, each instance's bundle in one.
    let all = fetch(&s, &format!("/deployments/{RMQ}/jobs/*/*/logs?type=job")).await;
    let response = download(&s, &all).await;
    assert_eq!(response.status(), 200);
    let bytes = response.bytes().await.unwrap();
    let inner = fleet_release::tgz_paths(&bytes, 1 << 20).unwrap();
    assert_eq!(inner.len(), 3, "{inner:?}");
    assert!(
        inner
            .iter()
            .all(|p| p.starts_with("rabbitmq.") && p.ends_with(".tgz")),
        "{inner:?}"
    );
    // `bosh logs -d RMQ rabbitmq/0 --agent --only 'rabbitmq/*.log'`.
    let one = fetch(
        &s,
        &format!("/deployments/{RMQ}/jobs/rabbitmq/0/logs?filters=rabbitmq%2F%2A.log&type=agent"),
    )
    .await;
    assert_ne!(one, all);
    assert_eq!(download(&s, &one).await.status(), 200);

    // Refusals, in the director's shape, naming what is wrong; no task is started.
    for (path, status, named) in [
        (
            format!("/deployments/{RMQ}/jobs/*/*/logs?type=kernel"),
            400,
            "kernel",
        ),
        (
            format!("/deployments/{RMQ}/jobs/*/*/logs?filters=..%2Fsecrets"),
            400,
            "../secrets",
        ),
        (
            format!("/deployments/{RMQ}/jobs/rabbitmq/9/logs"),
            404,
            "rabbitmq/9",
        ),
        ("/deployments/nope/jobs/*/*/logs".to_string(), 404, "nope"),
    ] {
        let refused = s.send(Method::GET, &path).await;
        assert_eq!(refused.status(), status, "{path}");
        let body: Value = refused.json().await.unwrap();
        assert!(body["code"].is_u64(), "{body}");
        assert!(
            body["description"].as_str().unwrap().contains(named),
            "{path}: {body}"
        );
    }
    let missing = download(&s, "logs-0000").await;
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert!(body["description"].as_str().unwrap().contains("logs-0000"));
    // A fetch only reads: the deployment's tasks, as `bosh tasks -d` lists them, leave
    // it out unless asked for everything.
    let listed = s.get_json(&format!("/tasks?deployment={RMQ}")).await;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["description"] != "fetch logs"),
        "{listed}"
    );
    let everything = s
        .get_json(&format!("/tasks?deployment={RMQ}&verbose=2"))
        .await;
    assert!(
        everything
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["description"] == "fetch logs"),
        "{everything}"
    );
}
