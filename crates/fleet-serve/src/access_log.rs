//! One line per request at `info` on the `fleet_serve::access` target: which API, the
//! client, the user who signed in, method, path, status and duration. Never the query
//! (it may carry what a client should not have put there), headers or bodies. Each
//! request is also counted, with its latency, for `/metrics`.

use tokio::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::auth::SignedIn;
use super::clients::ClientAddr;
use super::rejection::Flavor;

pub async fn log(State(flavor): State<Flavor>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    // The route's template (`/deployments/{name}`), not the path: a metric's labels must
    // stay few.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let client = request
        .extensions()
        .get::<ClientAddr>()
        .map(|c| c.0.to_string())
        .unwrap_or_default();
    let response = next.run(request).await;
    let user = response
        .extensions()
        .get::<SignedIn>()
        .map(|u| u.0.clone())
        .unwrap_or_else(|| "-".into());
    tracing::info!(
        target: "fleet_serve::access",
        api = flavor.name(),
        client = %client,
        user = %user,
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        millis = started.elapsed().as_millis() as u64,
        "request"
    );
    metrics::histogram!(
        "fleet_serve_request_duration_seconds",
        "api" => flavor.name(),
        "route" => route,
        "method" => method.to_string(),
        "status" => response.status().as_u16().to_string(),
    )
    .record(started.elapsed().as_secs_f64());
    response
}
