//! Prometheus metrics of `serve`, for an operator's scraper: requests by API, route,
//! method and status with their latencies, failed logins, tasks by kind and how they
//! ended, tasks running, locks held, agents by health, alerts and resurrections, and the
//! store's call latency. Counted where they happen (the `metrics` macros, in the
//! director, the store and here), rendered at `GET /metrics` on the director API and,
//! when configured, on a plain-HTTP listener of the operator's choosing.

use std::sync::OnceLock;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics::Unit;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use fleet_director::Director;

/// Latency buckets in seconds: a store call takes microseconds, a deploy request
/// milliseconds, an upload minutes.
const BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's recorder, installed by the first `serve` started in it; `None` when
/// another recorder was installed first (then nothing is rendered).
fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(BUCKETS)
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            describe();
            Some(handle)
        })
        .as_ref()
}

fn describe() {
    metrics::describe_histogram!(
        "fleet_serve_request_duration_seconds",
        Unit::Seconds,
        "Requests to the director and broker APIs, by API, route, method and status."
    );
    metrics::describe_counter!(
        "fleet_serve_login_failures_total",
        "Requests whose credentials were refused, by API."
    );
    metrics::describe_histogram!(
        "fleet_store_call_duration_seconds",
        Unit::Seconds,
        "Calls to the director's store."
    );
    metrics::describe_counter!(
        "fleet_director_tasks_total",
        "Director tasks ended, by kind and final state."
    );
    metrics::describe_gauge!(
        "fleet_director_tasks_running",
        "Director tasks this process runs, by kind."
    );
    metrics::describe_gauge!("fleet_director_locks_held", "Deployment locks held.");
    metrics::describe_gauge!(
        "fleet_director_agents",
        "Agents at the health monitor's last pass, by health (running, failing, unresponsive)."
    );
    metrics::describe_counter!(
        "fleet_director_alerts_total",
        "Alerts the health monitor raised, by severity."
    );
    metrics::describe_counter!(
        "fleet_director_resurrections_total",
        "Scan-and-fix tasks the health monitor started."
    );
}

/// Installs the recorder, so that what happens from now on is counted.
pub fn install() {
    let _ = handle();
}

/// `/metrics`, for a router whose state is the director.
pub fn router(director: Director) -> Router {
    Router::new()
        .route("/metrics", get(render))
        .with_state(director)
}

async fn render(State(director): State<Director>) -> impl IntoResponse {
    // Read at the scrape: what the store holds now.
    if let Ok(locks) = director.locks().await {
        metrics::gauge!("fleet_director_locks_held").set(locks.len() as f64);
    }
    let text = handle().map_or_else(String::new, |h| {
        h.run_upkeep();
        h.render()
    });
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}
