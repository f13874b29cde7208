//! The director inventory against a scripted director and UAA over real HTTPS: the
//! client-credentials flow with one refresh on 401, outdated deployments by their
//! versions, and a wrong secret.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use fleet_updater::config::{DirectorAuth, DirectorEndpoint, Secret};
use fleet_updater::inventory::director_http::DirectorInventory;
use fleet_updater::inventory::{InstanceId, Inventory, Selection};
use fleet_updater::rollout::RequestLimiter;
use fleet_updater::serve::Https;
use serde_json::json;

const SECRET: &str = "uaa-client-s3cret";

#[derive(Default)]
struct Uaa {
    /// Where the token endpoint is, known once the server has its port.
    url: OnceLock<String>,
    grants: AtomicUsize,
    /// Every request that reached the server, token grants included.
    requests: AtomicUsize,
}

fn bearer_ok(headers: &HeaderMap, uaa: &Uaa) -> bool {
    // The first token handed out is treated as expired: the client must get another.
    let current = format!("bearer token-{}", uaa.grants.load(Ordering::SeqCst));
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_lowercase();
    uaa.grants.load(Ordering::SeqCst) >= 2 && given == current
}

fn router(uaa: Arc<Uaa>) -> Router {
    Router::new()
        .route(
            "/info",
            get(|State(uaa): State<Arc<Uaa>>| async move {
                axum::Json(json!({
                    "name": "scripted",
                    "user_authentication": {
                        "type": "uaa",
                        "options": { "url": uaa.url.get().unwrap() }
                    }
                }))
            }),
        )
        .route(
            "/uaa/oauth/token",
            post(|State(uaa): State<Arc<Uaa>>, headers: HeaderMap, body: String| async move {
                use base64::Engine;
                let expected = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("updater:{SECRET}"))
                );
                let basic = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
                if basic != Some(expected.as_str()) || !body.contains("grant_type=client_credentials") {
                    return (StatusCode::UNAUTHORIZED, axum::Json(json!({"error": "unauthorized"})))
                        .into_response();
                }
                let n = uaa.grants.fetch_add(1, Ordering::SeqCst) + 1;
                axum::Json(json!({
                    "access_token": format!("token-{n}"),
                    "token_type": "bearer",
                    "expires_in": 3600
                }))
                .into_response()
            }),
        )
        .route(
            "/deployments",
            get(|State(uaa): State<Arc<Uaa>>, headers: HeaderMap| async move {
                if !bearer_ok(&headers, &uaa) {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                axum::Json(json!([
                    {"name": "svc-a", "releases": [{"name": "r", "version": "1.9"}],
                     "stemcells": [{"name": "s", "version": "621.99"}], "locked": false},
                    {"name": "svc-b", "releases": [{"name": "r", "version": "1.10"}],
                     "stemcells": [{"name": "s", "version": "621.125"}], "locked": false},
                    {"name": "cf", "releases": [{"name": "r", "version": "1.0"}],
                     "stemcells": [{"name": "s", "version": "1"}], "locked": false}
                ]))
                .into_response()
            }),
        )
        .route(
            "/stemcells",
            get(|State(uaa): State<Arc<Uaa>>, headers: HeaderMap| async move {
                if !bearer_ok(&headers, &uaa) {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                axum::Json(json!([
                    {"name": "s", "operating_system": "ubuntu-jammy", "version": "621.99"},
                    {"name": "s", "operating_system": "ubuntu-jammy", "version": "621.125"}
                ]))
                .into_response()
            }),
        )
        .route(
            "/releases",
            get(|State(uaa): State<Arc<Uaa>>, headers: HeaderMap| async move {
                if !bearer_ok(&headers, &uaa) {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                axum::Json(json!([
                    {"name": "r", "release_versions": [{"version": "1.9"}, {"version": "1.10"}, {"version": "1.0"}]}
                ]))
                .into_response()
            }),
        )
        .route(
            "/tasks",
            get(
                |State(uaa): State<Arc<Uaa>>,
                 headers: HeaderMap,
                 axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>| async move {
                    if !bearer_ok(&headers, &uaa) {
                        return StatusCode::UNAUTHORIZED.into_response();
                    }
                    // svc-a has a task queued that does not hold the lock yet.
                    if q.get("deployment").map(String::as_str) == Some("svc-a")
                        && q.get("state").is_some_and(|s| s.contains("queued"))
                    {
                        return axum::Json(json!([{"id": 41, "state": "queued", "description": "create deployment"}]))
                            .into_response();
                    }
                    axum::Json(json!([])).into_response()
                },
            ),
        )
        .route(
            "/locks",
            get(|State(uaa): State<Arc<Uaa>>, headers: HeaderMap| async move {
                if !bearer_ok(&headers, &uaa) {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                axum::Json(json!([])).into_response()
            }),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&uaa),
            |State(uaa): State<Arc<Uaa>>, request: axum::extract::Request, next: axum::middleware::Next| async move {
                uaa.requests.fetch_add(1, Ordering::SeqCst);
                next.run(request).await
            },
        ))
        .with_state(uaa)
}

async fn scripted() -> (Https, Arc<Uaa>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let uaa = Arc::new(Uaa::default());
    let https = Https::start(
        router(Arc::clone(&uaa)),
        dir.path(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    uaa.url.set(format!("https://{}/uaa", https.addr)).unwrap();
    (https, uaa, dir)
}

fn endpoint(https: &Https, secret: &str) -> DirectorEndpoint {
    DirectorEndpoint {
        url: format!("https://{}", https.addr),
        auth: DirectorAuth::Uaa {
            client: "updater".into(),
            client_secret: Secret::new(secret),
        },
        ca: Some(std::fs::read_to_string(&https.ca).unwrap()),
        skip_ssl_validation: false,
        timeout: Duration::from_secs(5),
        deployments: "svc-*".into(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn uaa_tokens_are_fetched_from_the_uaa_in_info_and_refreshed_once_on_401() {
    let (https, uaa, _dir) = scripted().await;
    let limiter = RequestLimiter::unlimited();
    let inventory = DirectorInventory::new(&endpoint(&https, SECRET), limiter.clone()).unwrap();
    assert!(inventory.limits_each_request());
    let all = inventory.list(Selection::All).await.unwrap();
    let requests = uaa.requests.load(Ordering::SeqCst);
    assert!(
        requests >= 6,
        "info, grants, a 401 and the listings: {requests}"
    );
    assert_eq!(
        limiter.taken(),
        requests as u64,
        "every request, token grants and the refused one included, takes a token"
    );
    assert_eq!(
        uaa.grants.load(Ordering::SeqCst),
        2,
        "one grant, one refresh after the 401"
    );
    let mut names: Vec<(String, bool)> = all
        .iter()
        .map(|i| (i.id.0.clone(), i.update_available))
        .collect();
    names.sort();
    // svc-a runs 1.9 and 621.99 while 1.10 and 621.125 are uploaded; svc-b runs the newest;
    // `cf` does not match the pattern.
    assert_eq!(
        names,
        vec![("svc-a".to_string(), true), ("svc-b".to_string(), false)]
    );
    let outdated = inventory.list(Selection::Outdated).await.unwrap();
    assert_eq!(outdated.len(), 1);
    assert_eq!(
        uaa.grants.load(Ordering::SeqCst),
        2,
        "the token is kept between requests"
    );

    // Read back after a lost answer: a queued task makes the deployment busy.
    let a = inventory
        .instance(&InstanceId("svc-a".into()))
        .await
        .unwrap()
        .unwrap();
    assert!(a.operation_in_progress());
    let b = inventory
        .instance(&InstanceId("svc-b".into()))
        .await
        .unwrap()
        .unwrap();
    assert!(!b.operation_in_progress());
    assert!(
        inventory
            .instance(&InstanceId("cf".into()))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_client_secret_fails_listing_clearly_without_showing_it() {
    let (https, _uaa, _dir) = scripted().await;
    let inventory = DirectorInventory::new(
        &endpoint(&https, "wrong-secret"),
        RequestLimiter::unlimited(),
    )
    .unwrap();
    let e = inventory.list(Selection::All).await.unwrap_err();
    assert!(!e.message.contains("wrong-secret"), "{e}");
    assert!(
        e.message.contains("401") || e.message.to_lowercase().contains("token"),
        "{e}"
    );
}
