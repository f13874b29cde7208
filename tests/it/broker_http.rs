//! The broker inventory against scripted brokers over real HTTPS on 127.0.0.1: every
//! status of the management API, failures before and after a request is sent, broken
//! answers, redirects and credentials.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use fleet_updater::clock::WallClock;
use fleet_updater::config::{Secret, ServiceBroker};
use fleet_updater::inventory::broker_http::BrokerInventory;
use fleet_updater::inventory::{
    Action, ErrorKind, Instance, InstanceId, Inventory, Operation, OperationState, Selection,
    Triggered,
};
use fleet_updater::rollout::{Backoff, RequestLimiter, Rollout, Settings};
use fleet_updater::serve::Https;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

const PASSWORD: &str = "broker-s3cret";

#[derive(Default)]
struct Counts {
    lists: AtomicUsize,
    patches: AtomicUsize,
}

type Params = std::collections::HashMap<String, String>;

fn authorized(headers: &HeaderMap) -> bool {
    use base64::Engine;
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("admin:{PASSWORD}"))
    );
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(expected.as_str())
        && headers.get("x-broker-api-version").is_some()
}

/// A broker whose answers are chosen by the instance id: `s204` answers 204, and so on.
fn scripted(counts: Arc<Counts>) -> Router {
    Router::new()
        .route(
            "/mgmt/service_instances",
            get(|State(c): State<Arc<Counts>>, headers: HeaderMap| async move {
                if !authorized(&headers) {
                    return StatusCode::UNAUTHORIZED.into_response();
                }
                // The first listing fails: a read is retried.
                if c.lists.fetch_add(1, Ordering::SeqCst) == 0 {
                    return (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response();
                }
                // A plain ODB: no filter support, no extra fields.
                axum::Json(json!([
                    {"service_instance_id": "a", "plan_id": "p", "unknown": {"x": 1}},
                    {"service_instance_id": "b", "plan_id": "p", "update_available": false},
                    {"service_instance_id": "c", "plan_id": "p", "state": "failed"}
                ]))
                .into_response()
            }),
        )
        .route(
            "/mgmt/service_instances/{id}",
            get(|| async { StatusCode::NOT_FOUND }).patch(
                |State(c): State<Arc<Counts>>, Path(id): Path<String>, headers: HeaderMap| async move {
                    c.patches.fetch_add(1, Ordering::SeqCst);
                    if !authorized(&headers) {
                        return StatusCode::UNAUTHORIZED.into_response();
                    }
                    let status = |s: u16| StatusCode::from_u16(s).unwrap();
                    match id.as_str() {
                        "s202" => (status(202), axum::Json(json!({"BoshTaskID": 7}))).into_response(),
                        "s202-empty" => status(202).into_response(),
                        "s204" => status(204).into_response(),
                        "s404" => status(404).into_response(),
                        "s409" => status(409).into_response(),
                        "s410" => status(410).into_response(),
                        "s204-blocked" => (status(204), [("x-broker-error", "MaintenanceUpdatesBlocked")]).into_response(),
                        "s422" => (status(422), axum::Json(json!({"error": "MaintenanceUpdatesBlocked"}))).into_response(),
                        "s422-other" => (status(422), axum::Json(json!({"error": "Unprocessable", "description": "plan mismatch"}))).into_response(),
                        "s400" => (status(400), axum::Json(json!({"description": "bad operation type"}))).into_response(),
                        "s500" => (status(500), axum::Json(json!({"description": "bosh is down"}))).into_response(),
                        "slow" => {
                            tokio::time::sleep(Duration::from_secs(5)).await;
                            status(202).into_response()
                        }
                        _ => status(418).into_response(),
                    }
                },
            ),
        )
        .route(
            "/v2/service_instances/{id}/last_operation",
            get(|Path(id): Path<String>, Query(q): Query<Params>| async move {
                assert!(q.contains_key("operation"));
                match id.as_str() {
                    "running" => (
                        [(header::RETRY_AFTER, "7")],
                        axum::Json(json!({"state": "in progress"})),
                    )
                        .into_response(),
                    "done" => axum::Json(json!({"state": "succeeded"})).into_response(),
                    "broken" => axum::Json(json!({"state": "failed", "description": "disk full"})).into_response(),
                    "gone" => StatusCode::NOT_FOUND.into_response(),
                    "orphan" => StatusCode::GONE.into_response(),
                    "garbled" => (StatusCode::OK, "{\"state\": ").into_response(),
                    _ => (StatusCode::OK, vec![b' '; 9 * 1024 * 1024]).into_response(),
                }
            }),
        )
        .with_state(counts)
}

fn config(url: String, ca: &std::path::Path, timeout: Duration) -> ServiceBroker {
    ServiceBroker {
        api_endpoint: url,
        username: "admin".into(),
        password: Secret::new(PASSWORD),
        skip_ssl_validation: false,
        ca: Some(std::fs::read_to_string(ca).unwrap()),
        timeout,
    }
}

struct Scripted {
    https: Https,
    counts: Arc<Counts>,
    _dir: tempfile::TempDir,
}

impl Scripted {
    async fn start() -> Scripted {
        let dir = tempfile::tempdir().unwrap();
        let counts = Arc::new(Counts::default());
        let https = Https::start(
            scripted(Arc::clone(&counts)),
            dir.path(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        Scripted {
            https,
            counts,
            _dir: dir,
        }
    }

    fn inventory(&self, timeout: Duration) -> BrokerInventory {
        BrokerInventory::new(
            &config(
                format!("https://{}", self.https.addr),
                &self.https.ca,
                timeout,
            ),
            RequestLimiter::unlimited(),
        )
        .unwrap()
    }
}

fn instance(id: &str) -> Instance {
    Instance::new(id, "p")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_odb_listing_is_read_with_defaults_filtered_here_and_retried_once_on_503() {
    let s = Scripted::start().await;
    let limiter = RequestLimiter::unlimited();
    let inventory = Arc::new(
        BrokerInventory::new(
            &config(
                format!("https://{}", s.https.addr),
                &s.https.ca,
                Duration::from_secs(5),
            ),
            limiter.clone(),
        )
        .unwrap(),
    );
    // The engine is the one retry layer: the 503 comes back transient and is retried
    // there, each attempt taking a token.
    let settings = Settings {
        backoff: Backoff {
            attempts: 3,
            initial: Duration::from_millis(10),
            max: Duration::from_millis(10),
        },
        ..Settings::default()
    };
    let plan = Rollout::new(Arc::clone(&inventory), settings, WallClock::new())
        .plan()
        .await
        .unwrap();
    let mut ids: Vec<&str> = plan
        .order
        .iter()
        .map(|c| c.instance.id.0.as_str())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["a", "c"]);
    assert_eq!(
        s.counts.lists.load(Ordering::SeqCst),
        2,
        "the 503 was retried once"
    );
    assert_eq!(limiter.taken(), 2, "each attempt took a token");
    let outdated = inventory.list(Selection::Outdated).await.unwrap();
    let ids: Vec<&str> = outdated.iter().map(|i| i.id.0.as_str()).collect();
    assert_eq!(ids, ["a", "c"]);
    let failed = inventory.list(Selection::Failed).await.unwrap();
    assert_eq!(failed.len(), 1);
    // No single-instance route: found through the listing.
    let found = inventory
        .instance(&InstanceId("b".into()))
        .await
        .unwrap()
        .unwrap();
    assert!(!found.update_available);
    assert!(
        inventory
            .instance(&InstanceId("zz".into()))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_trigger_status_has_the_meaning_the_api_gives_it() {
    let s = Scripted::start().await;
    let inventory = s.inventory(Duration::from_secs(5));
    let trigger = |id: &'static str| {
        let inventory = &inventory;
        async move {
            inventory
                .trigger(&instance(id), Action::Update, false)
                .await
        }
    };
    match trigger("s202").await.unwrap() {
        Triggered::Accepted(op) => assert_eq!(op.data, json!({"BoshTaskID": 7})),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        trigger("s202-empty").await.unwrap(),
        Triggered::Accepted(_)
    ));
    assert_eq!(trigger("s204").await.unwrap(), Triggered::UpToDate);
    assert_eq!(trigger("s404").await.unwrap(), Triggered::Deleted);
    assert_eq!(trigger("s409").await.unwrap(), Triggered::Busy);
    assert_eq!(trigger("s410").await.unwrap(), Triggered::Orphaned);
    assert_eq!(trigger("s422").await.unwrap(), Triggered::Blocked);
    assert_eq!(trigger("s204-blocked").await.unwrap(), Triggered::Blocked);
    let other = trigger("s422-other").await.unwrap_err();
    assert_eq!(other.kind, ErrorKind::Permanent);
    assert!(other.message.contains("plan mismatch"), "{other}");
    let bad = trigger("s400").await.unwrap_err();
    assert_eq!(bad.kind, ErrorKind::Permanent);
    assert!(bad.message.contains("bad operation type"), "{bad}");
    let before = s.counts.patches.load(Ordering::SeqCst);
    let failed = trigger("s500").await.unwrap_err();
    assert_eq!(failed.kind, ErrorKind::Permanent);
    assert!(failed.message.contains("bosh is down"), "{failed}");
    assert_eq!(
        s.counts.patches.load(Ordering::SeqCst),
        before + 1,
        "a PATCH is never repeated"
    );
    assert!(!failed.message.contains(PASSWORD));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_after_the_trigger_was_sent_is_ambiguous_and_not_repeated() {
    let s = Scripted::start().await;
    let inventory = s.inventory(Duration::from_millis(500));
    let e = inventory
        .trigger(&instance("slow"), Action::Recreate { fix: true }, true)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Ambiguous, "{e}");
    assert_eq!(s.counts.patches.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn polling_reads_progress_pace_failure_and_disappearance() {
    let s = Scripted::start().await;
    let inventory = s.inventory(Duration::from_secs(5));
    let op = |id: &str| Operation {
        instance: InstanceId(id.into()),
        data: json!({"BoshTaskID": 7, "OperationType": "upgrade"}),
    };
    assert_eq!(
        inventory.poll(&op("running")).await.unwrap(),
        OperationState::InProgress {
            retry_after: Some(Duration::from_secs(7))
        }
    );
    assert_eq!(
        inventory.poll(&op("done")).await.unwrap(),
        OperationState::Succeeded
    );
    assert_eq!(
        inventory.poll(&op("broken")).await.unwrap(),
        OperationState::Failed {
            reason: "disk full".into()
        }
    );
    assert_eq!(
        inventory.poll(&op("gone")).await.unwrap(),
        OperationState::Deleted
    );
    assert_eq!(
        inventory.poll(&op("orphan")).await.unwrap(),
        OperationState::Orphaned
    );
    let garbled = inventory.poll(&op("garbled")).await.unwrap_err();
    assert_eq!(garbled.kind, ErrorKind::Permanent, "{garbled}");
    let huge = inventory.poll(&op("huge")).await.unwrap_err();
    assert_eq!(huge.kind, ErrorKind::Permanent, "{huge}");
    assert!(
        huge.message.contains("larger") || huge.message.contains("limit"),
        "{huge}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_connection_is_transient() {
    // Bound and not listening: connections are refused, and no other test's server can
    // take the port meanwhile (as one could a port closed again).
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = reserved.local_addr().unwrap();
    let s = Scripted::start().await;
    let inventory = BrokerInventory::new(
        &config(
            format!("https://{port}"),
            &s.https.ca,
            Duration::from_secs(2),
        ),
        RequestLimiter::unlimited(),
    )
    .unwrap();
    let e = inventory.list(Selection::All).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    let e = inventory
        .trigger(&instance("a"), Action::Update, false)
        .await
        .unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Transient,
        "a trigger that never left is safe to retry: {e}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_never_answers_the_handshake_times_out_before_sending() {
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let s = Scripted::start().await;
    let inventory = BrokerInventory::new(
        &config(
            format!("https://{addr}"),
            &s.https.ca,
            Duration::from_millis(500),
        ),
        RequestLimiter::unlimited(),
    )
    .unwrap();
    let e = inventory
        .trigger(&instance("a"), Action::Update, false)
        .await
        .unwrap_err();
    assert_ne!(e.kind, ErrorKind::Ambiguous, "nothing was sent: {e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_reset_after_the_request_makes_a_trigger_ambiguous() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let identity = fleet_updater::serve::tls::identity(dir.path(), None, None, &[addr]).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(identity.config);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut buf = vec![0u8; 64 * 1024];
                // Read the whole request, then drop the connection without an answer.
                let _ = tokio::time::timeout(Duration::from_millis(300), tls.read(&mut buf)).await;
                drop(tls);
            });
        }
    });
    let inventory = BrokerInventory::new(
        &config(
            format!("https://{addr}"),
            &identity.ca.unwrap(),
            Duration::from_secs(5),
        ),
        RequestLimiter::unlimited(),
    )
    .unwrap();
    let e = inventory
        .trigger(&instance("a"), Action::Update, false)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Ambiguous, "{e}");
    let e = inventory.list(Selection::All).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn redirects_are_followed_to_the_same_host_only() {
    let dir = tempfile::tempdir().unwrap();
    let router = Router::new()
        .route(
            "/mgmt/service_instances",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/moved")]).into_response() }),
        )
        .route(
            "/moved",
            get(|headers: HeaderMap| async move {
                if authorized(&headers) {
                    axum::Json(json!([{"service_instance_id": "m", "plan_id": "p"}]))
                        .into_response()
                } else {
                    StatusCode::UNAUTHORIZED.into_response()
                }
            }),
        )
        .route(
            "/v2/service_instances/{id}/last_operation",
            get(|| async {
                (
                    StatusCode::FOUND,
                    [(header::LOCATION, "https://203.0.113.9/steal")],
                )
                    .into_response()
            }),
        );
    let https = Https::start(router, dir.path(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let inventory = BrokerInventory::new(
        &config(
            format!("https://{}", https.addr),
            &https.ca,
            Duration::from_secs(5),
        ),
        RequestLimiter::unlimited(),
    )
    .unwrap();
    let listed = inventory.list(Selection::All).await.unwrap();
    assert_eq!(listed[0].id.0, "m", "followed with the same credentials");
    let op = Operation {
        instance: InstanceId("m".into()),
        data: json!({}),
    };
    let e = inventory.poll(&op).await.unwrap_err();
    assert!(e.message.contains("203.0.113.9"), "{e}");
}

/// A broker whose instances each give one answer, for the whole run through the binary.
fn policy_broker(patches: Arc<Counts>) -> Router {
    let listing = json!([
        {"service_instance_id": "a-ok", "plan_id": "p"},
        {"service_instance_id": "b-current", "plan_id": "p"},
        {"service_instance_id": "c-blocked", "plan_id": "p", "maintenance_updates_blocked": true},
        {"service_instance_id": "d-busy", "plan_id": "p"},
        {"service_instance_id": "e-orphaned", "plan_id": "p"},
        {"service_instance_id": "f-deleted", "plan_id": "p"},
        {"service_instance_id": "g-broken", "plan_id": "p"},
        {"service_instance_id": "h-never", "plan_id": "p"}
    ]);
    Router::new()
        .route(
            "/mgmt/service_instances",
            get(move || {
                let listing = listing.clone();
                async move { axum::Json(listing) }
            }),
        )
        .route(
            "/mgmt/service_instances/{id}",
            axum::routing::patch(
                |State(c): State<Arc<Counts>>, Path(id): Path<String>| async move {
                    c.patches.fetch_add(1, Ordering::SeqCst);
                    let status = |s: u16| StatusCode::from_u16(s).unwrap();
                    match id.as_str() {
                        "a-ok" => {
                            (status(202), axum::Json(json!({"BoshTaskID": 1}))).into_response()
                        }
                        "b-current" => status(204).into_response(),
                        "c-blocked" => (
                            status(422),
                            axum::Json(json!({"error": "MaintenanceUpdatesBlocked"})),
                        )
                            .into_response(),
                        "d-busy" => status(409).into_response(),
                        "e-orphaned" => status(410).into_response(),
                        "f-deleted" => status(404).into_response(),
                        "g-broken" => (
                            status(500),
                            axum::Json(json!({"description": "bosh is down"})),
                        )
                            .into_response(),
                        _ => (status(202), axum::Json(json!({"BoshTaskID": 2}))).into_response(),
                    }
                },
            ),
        )
        .route(
            "/v2/service_instances/{id}/last_operation",
            get(|| async { axum::Json(json!({"state": "succeeded"})) }),
        )
        .with_state(patches)
}

#[tokio::test(flavor = "multi_thread")]
async fn each_answer_of_a_scripted_broker_gets_the_outcome_the_policy_prescribes() {
    let dir = tempfile::tempdir().unwrap();
    let counts = Arc::new(Counts::default());
    let https = Https::start(
        policy_broker(Arc::clone(&counts)),
        dir.path(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let ca: String = std::fs::read_to_string(&https.ca)
        .unwrap()
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    let w = crate::support::Workspace::new();
    let config = w.write(
        "fleet.yml",
        &format!(
            "service_broker:\n  api_endpoint: https://{}\n  username: admin\n  password: {PASSWORD}\n  ca: |\n{ca}strategy:\n  update: {{max_in_parallel: 1, canaries: 0}}\nbusy_retry:\n  attempts: 2\n  interval: 100ms\npolling:\n  interval: 50ms\nrate_limit:\n  requests_per_second: 1000\n",
            https.addr
        ),
    );
    let report = w.path("report.json");
    let mut cmd = crate::support::fleet_updater();
    cmd.args(["run", "-c"])
        .arg(&config)
        .arg("--report")
        .arg(&report);
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let report = crate::support::json(&report);
    let outcome = |id: &str| {
        report["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == id)
            .map(|i| i["outcome"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(outcome("a-ok"), "updated");
    assert_eq!(outcome("b-current"), "skipped_up_to_date");
    assert_eq!(outcome("c-blocked"), "skipped_blocked");
    assert_eq!(outcome("e-orphaned"), "orphaned");
    assert_eq!(outcome("f-deleted"), "deleted");
    assert_eq!(outcome("g-broken"), "failed");
    // After the failure nothing new starts: h is never triggered, d is not retried.
    assert_eq!(outcome("h-never"), "not_started");
    assert!(["busy", "not_started"].contains(&outcome("d-busy").as_str()));
    assert!(stdout.contains("bosh is down"), "{stdout}");
    assert!(!stdout.contains(PASSWORD));
}

/// An ODB whose instance lister is Cloud Foundry: `null` for no instances, and a 400 for
/// the state filter it does not know.
#[tokio::test(flavor = "multi_thread")]
async fn an_empty_odb_listing_is_an_empty_fleet_and_a_refused_filter_is_not_sent_again() {
    let filtered = Arc::new(AtomicUsize::new(0));
    let router = Router::new()
        .route(
            "/mgmt/service_instances",
            get(
                |State(filtered): State<Arc<AtomicUsize>>, Query(q): Query<Params>| async move {
                    if q.contains_key("state") {
                        filtered.fetch_add(1, Ordering::SeqCst);
                        return (StatusCode::BAD_REQUEST, "unknown parameter: state")
                            .into_response();
                    }
                    ([(header::CONTENT_TYPE, "application/json")], "null").into_response()
                },
            ),
        )
        .with_state(Arc::clone(&filtered));
    let dir = tempfile::tempdir().unwrap();
    let https = Https::start(router, dir.path(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let inventory = Arc::new(
        BrokerInventory::new(
            &config(
                format!("https://{}", https.addr),
                &https.ca,
                Duration::from_secs(5),
            ),
            RequestLimiter::unlimited(),
        )
        .unwrap(),
    );
    assert!(inventory.list(Selection::All).await.unwrap().is_empty());
    assert!(
        inventory
            .list(Selection::Outdated)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(inventory.list(Selection::Failed).await.unwrap().is_empty());
    assert_eq!(
        filtered.load(Ordering::SeqCst),
        1,
        "the refused filter was asked for once"
    );
    let plan = Rollout::new(
        Arc::clone(&inventory),
        Settings::default(),
        WallClock::new(),
    )
    .plan()
    .await
    .unwrap();
    assert!(plan.order.is_empty());
}
