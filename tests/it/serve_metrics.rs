//! `/metrics` over real HTTPS behind authentication and on the plain listener an operator
//! configures, in Prometheus' text format: requests by API, route, method and status,
//! failed logins, tasks by kind and state, locks held, the store's call latency.

use fleet_updater::config::ServeConfig;
use reqwest::Method;

use crate::served::{Served, small_fleet};

const RMQ: &str = "service-instance_rmq-01";

fn parse(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap()
}

/// The value of the first sample of `name` whose labels include `labels`.
fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let sample = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no {name} with {labels:?}"));
    match &sample.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => *v,
        prometheus_parse::Value::Histogram(_) | prometheus_parse::Value::Summary(_) => 1.0,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_requests_logins_tasks_and_store_calls() {
    let config = ServeConfig {
        users: crate::served::admin_and_reader(),
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        health_monitor: None,
        ..ServeConfig::default()
    };
    let s = Served::start_configured(tempfile::tempdir().unwrap(), &small_fleet(), &config).await;
    assert_eq!(s.send(Method::GET, "/deployments").await.status(), 200);
    let refused = s
        .director_as(Method::GET, "/deployments", "admin", "wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let restart = s
        .put(&format!("/deployments/{RMQ}/jobs/rabbitmq?state=restart"))
        .await;
    assert_eq!(
        s.wait_task(Served::task_of(&restart)).await["state"],
        "done"
    );

    let anonymous = s
        .client
        .get(s.director_url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        anonymous.status(),
        401,
        "behind authentication on the director API"
    );
    let by_reader = s
        .director_as(
            Method::GET,
            "/metrics",
            "auditor",
            crate::served::READER_PASSWORD,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(by_reader.status(), 200);
    let text = by_reader.text().await.unwrap();
    let scrape = parse(&text);
    assert!(
        value(
            &scrape,
            "fleet_serve_request_duration_seconds_count",
            &[
                ("api", "director"),
                ("route", "/deployments"),
                ("method", "GET"),
                ("status", "200")
            ]
        ) >= 1.0,
        "{text}"
    );
    assert!(
        value(
            &scrape,
            "fleet_serve_login_failures_total",
            &[("api", "director")]
        ) >= 1.0
    );
    assert!(
        value(
            &scrape,
            "fleet_director_tasks_total",
            &[("kind", "restart_deployment"), ("state", "done")]
        ) >= 1.0
    );
    assert_eq!(value(&scrape, "fleet_director_locks_held", &[]), 0.0);
    assert!(value(&scrape, "fleet_store_call_duration_seconds_count", &[]) > 0.0);
    assert!(
        text.contains("# HELP fleet_serve_request_duration_seconds"),
        "{text}"
    );

    let plain = format!("http://{}/metrics", s.serving.metrics.unwrap());
    let scraped = reqwest::get(&plain).await.unwrap();
    assert_eq!(scraped.status(), 200);
    let scrape = parse(&scraped.text().await.unwrap());
    assert!(
        value(
            &scrape,
            "fleet_serve_login_failures_total",
            &[("api", "director")]
        ) >= 1.0
    );
}
