//! Resurrection over the director API as `bosh update-resurrection`, a health monitor's
//! `scan_and_fix` and `bosh update-config --type resurrection` drive it, over real HTTPS.

use fleet_updater::config::ServeConfig;
use reqwest::Method;
use serde_json::Value;

use crate::served::{Served, small_fleet};

const RMQ: &str = "service-instance_rmq-01";

#[tokio::test(flavor = "multi_thread")]
async fn resurrection_is_paused_and_resumed_and_scan_and_fix_acts_on_what_it_names() {
    let config = ServeConfig {
        users: crate::served::admin_and_reader(),
        health_monitor: None,
        ..ServeConfig::default()
    };
    let s = Served::start_configured(tempfile::tempdir().unwrap(), &small_fleet(), &config).await;
    assert_eq!(
        s.get_json("/resurrection").await,
        serde_json::json!({"resurrection": true})
    );
    let by_reader = s
        .director_as(
            Method::PUT,
            "/resurrection",
            "auditor",
            crate::served::READER_PASSWORD,
        )
        .header("content-type", "application/json")
        .body(r#"{"resurrection_paused": true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(by_reader.status(), 403, "a reader changes nothing");
    let paused = s
        .send_json(
            Method::PUT,
            "/resurrection",
            r#"{"resurrection_paused": true}"#,
        )
        .await;
    assert_eq!(paused.status(), 200);
    assert_eq!(s.get_json("/resurrection").await["resurrection"], false);

    let scan_and_fix = format!("/deployments/{RMQ}/scan_and_fix");
    let refused = s
        .send_json(
            Method::PUT,
            &scan_and_fix,
            r#"{"jobs": {"rabbitmq": ["0"]}}"#,
        )
        .await;
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], 410004, "{body}");
    assert_eq!(body["description"], "Resurrector is paused");

    s.send_json(
        Method::PUT,
        "/resurrection",
        r#"{"resurrection_paused": false}"#,
    )
    .await;
    let started = s
        .send_json(
            Method::PUT,
            &scan_and_fix,
            r#"{"jobs": {"rabbitmq": ["0", "1"]}}"#,
        )
        .await;
    let task = s.wait_task(Served::task_of(&started)).await;
    assert_eq!(task["state"], "done", "{task}");
    assert_eq!(task["description"], "scan and fix");
    assert_eq!(
        task["result"], "scan and fix complete: 0 VMs recreated",
        "{task}"
    );
    let unknown = s
        .send_json(
            Method::PUT,
            &scan_and_fix,
            r#"{"jobs": {"rabbitmq": ["9"]}}"#,
        )
        .await;
    assert_eq!(unknown.status(), 404);
    let garbled = s.send_json(Method::PUT, &scan_and_fix, "nope").await;
    assert_eq!(garbled.status(), 400);
    assert!(Served::description(garbled).await.contains("\"jobs\""));
    let retired = s
        .put(&format!("/deployments/{RMQ}/jobs/rabbitmq/0/resurrection"))
        .await;
    assert_eq!(retired.status(), 410);
    assert!(
        Served::description(retired)
            .await
            .contains("--type resurrection")
    );

    let invalid = s
        .send_json(
            Method::POST,
            "/configs",
            r#"{"type": "resurrection", "name": "quiet", "content": "rules: [{include: {}}]"}"#,
        )
        .await;
    assert_eq!(invalid.status(), 400);
    let said = Served::description(invalid).await;
    assert!(said.contains("rules[0].enabled"), "{said}");
    let kept = s
        .send_json(
            Method::POST,
            "/configs",
            r#"{"type": "resurrection", "name": "quiet", "content": "rules:\n- enabled: false\n  include: {deployments: [x]}\n"}"#,
        )
        .await;
    assert_eq!(kept.status(), 201);
    let listed = s.get_json("/configs?type=resurrection&latest=true").await;
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["name"], "quiet");
    assert_eq!(listed[0]["current"], true);
}
