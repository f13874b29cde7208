//! `serve` against hostile clients over real TLS on loopback: idle sockets of one client
//! do not starve another, every refusal is in the API's own error shape, failed logins
//! are logged and slowed without locking the right user out, and every request is in the
//! access log.

use std::io::BufReader;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command as Process, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use fleet_updater::config::ServeLimits;
use reqwest::Method;
use serde_json::Value;

use crate::served::{Served, client_from};

async fn idle_socket(from: IpAddr, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    socket.connect(to).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_sockets_of_one_client_do_not_starve_another() {
    let s = Served::start(ServeLimits {
        max_connections: 8,
        max_connections_per_client: 4,
        ..ServeLimits::default()
    })
    .await;
    let hostile: IpAddr = "127.0.0.2".parse().unwrap();
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(idle_socket(hostile, s.serving.director).await);
    }
    // The other client is served at once.
    let answer = s.send(Method::GET, "/tasks").await;
    assert_eq!(answer.status(), 200);
    // The hostile client's sockets over its limit were closed without a word.
    let mut closed = 0;
    for socket in &mut idle {
        let mut byte = [0u8; 1];
        use tokio::io::AsyncReadExt;
        if let Ok(Ok(0)) =
            tokio::time::timeout(Duration::from_millis(200), socket.read(&mut byte)).await
        {
            closed += 1;
        }
    }
    assert!(closed >= 16, "only {closed} of 20 idle sockets were closed");
    drop(idle);
    // Its next request, once the server has seen its sockets close, is served too. The
    // closes reach the server's handshake tasks asynchronously, so a request sent at the
    // same moment may still find the client at its limit and be closed: ask until the
    // slots are back. A slot that leaked would never come back, and the loop fails.
    let client = client_from(&s.ca, hostile);
    let deadline = Instant::now() + Duration::from_secs(15);
    let again = loop {
        match client
            .get(s.director_url("/tasks"))
            .basic_auth("admin", Some(&s.password))
            .send()
            .await
        {
            Ok(answer) => break answer,
            Err(e) if Instant::now() < deadline => {
                assert!(e.is_connect() || e.is_request(), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the client's slots did not come back after its sockets closed: {e}"),
        }
    };
    assert_eq!(again.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_refusal_is_in_the_apis_own_error_shape() {
    let s = Served::start(ServeLimits::default()).await;
    let not_utf8 = vec![b'n', b'a', b'm', b'e', b':', b' ', 0xff, 0xfe, b'\n'];
    let director = s
        .director(Method::POST, "/deployments")
        .header("content-type", "text/yaml")
        .body(not_utf8.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(director.status(), 400);
    let body: Value = director.json().await.unwrap();
    assert!(body["code"].is_u64(), "{body}");
    assert!(body["description"].is_string(), "{body}");
    let utf16: Vec<u8> = "{\"service_id\": \"x\"}"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    for bytes in [not_utf8, utf16] {
        let broker = s
            .broker(
                Method::PATCH,
                "/mgmt/service_instances/pg-01?operation_type=upgrade",
            )
            .header("content-type", "application/json")
            .body(bytes)
            .send()
            .await
            .unwrap();
        assert!(broker.status().is_client_error(), "{}", broker.status());
        let body: Value = broker.json().await.unwrap();
        assert!(body["error"].is_string(), "{body}");
        assert!(body.get("code").is_none(), "{body}");
    }
    for (response, field) in [
        (s.send(Method::GET, "/no/such/route").await, "code"),
        (s.send(Method::PATCH, "/info").await, "code"),
        (
            s.broker(Method::GET, "/no/such/route")
                .send()
                .await
                .unwrap(),
            "error",
        ),
    ] {
        assert!(response.status().is_client_error());
        let body: Value = response.json().await.unwrap();
        assert!(body[field].is_number() || body[field].is_string(), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_brokers_429_is_in_the_brokers_shape() {
    let s = Served::start(ServeLimits {
        max_connections: 1,
        ..ServeLimits::default()
    })
    .await;
    let held = s
        .broker(Method::GET, "/mgmt/service_instances")
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), 200);
    let refused = crate::served::client_trusting(&s.ca)
        .get(s.broker_url("/mgmt/service_instances"))
        .basic_auth("admin", Some(&s.password))
        .header("X-Broker-API-Version", "2.13")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "TooManyConnections");
    assert!(body.get("code").is_none(), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_logins_are_slowed_per_address_and_the_right_user_still_gets_in() {
    let s = Served::start(ServeLimits::default()).await;
    let guesser = client_from(&s.ca, "127.0.0.3".parse().unwrap());
    let started = Instant::now();
    for _ in 0..6 {
        let answer = guesser
            .get(s.director_url("/tasks"))
            .basic_auth("admin", Some("guess"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 401);
    }
    // Three free failures, then turns 250 ms and 500 ms apart.
    assert!(started.elapsed() >= Duration::from_millis(700));
    // Another address is not slowed; the right password from the guesser's gets in.
    assert_eq!(s.send(Method::GET, "/tasks").await.status(), 200);
    let right = guesser
        .get(s.director_url("/tasks"))
        .basic_auth("admin", Some(&s.password))
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);
}

#[test]
fn serve_logs_every_request_and_each_failed_login_without_credentials() {
    let state = tempfile::tempdir().unwrap();
    let mut child = Process::new(env!("CARGO_BIN_EXE_fleet-updater"))
        .args(["serve", "--state-dir"])
        .arg(state.path())
        .args([
            "--director-listen",
            "127.0.0.1:0",
            "--broker-listen",
            "127.0.0.1:0",
        ])
        .env_remove("FLEET_UPDATER_LOG")
        .env_remove("FLEET_UPDATER_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let crate::serve_output::Listening { director, ca, .. } =
        crate::serve_output::listening(&mut stdout);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = crate::served::client_trusting(&ca);
        let wrong = client
            .get(format!("https://{director}/deployments"))
            .basic_auth("admin", Some("NotThePassword-42"))
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401);
        // A password typed into the name field is not logged as a name.
        let misplaced = client
            .get(format!("https://{director}/deployments"))
            .basic_auth("Typed-Password-77", Some(""))
            .send()
            .await
            .unwrap();
        assert_eq!(misplaced.status(), 401);
        let info = client
            .get(format!("https://{director}/info"))
            .send()
            .await
            .unwrap();
        assert_eq!(info.status(), 200);
    });
    terminate(child.id());
    let _ = child.wait();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("failed login"), "{stderr}");
    assert!(stderr.contains("user=admin"), "{stderr}");
    assert!(stderr.contains("(not a user)"), "{stderr}");
    assert!(!stderr.contains("Typed-Password-77"), "{stderr}");
    assert!(
        stderr.contains("/deployments") && stderr.contains("401"),
        "{stderr}"
    );
    assert!(
        stderr.contains("/info") && stderr.contains("200"),
        "{stderr}"
    );
    assert!(!stderr.contains("NotThePassword"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a non-terminal stderr: {stderr}"
    );
}

/// SIGTERM, as an operator stops `serve`.
fn terminate(pid: u32) {
    let _ = Process::new("kill").arg(pid.to_string()).status();
}

/// Users with scopes, as BOSH's UAA scopes: `bosh.read` reads deployments, tasks and
/// their event output over real HTTPS, and gets 403 (the director's code 600000) on a
/// change, a task's debug output, variables and logs; on the broker API it lists and
/// triggers nothing. An admin does all of it.
#[tokio::test(flavor = "multi_thread")]
async fn a_reader_reads_and_is_refused_every_change() {
    use fleet_updater::config::ServeConfig;
    let s = served_with(ServeConfig {
        users: crate::served::admin_and_reader(),
        ..ServeConfig::default()
    })
    .await;
    let as_reader = |method: Method, path: &str| {
        s.director_as(method, path, "auditor", crate::served::READER_PASSWORD)
    };
    let deployments: Value = as_reader(Method::GET, "/deployments")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let name = deployments[0]["name"].as_str().unwrap().to_string();
    for path in [
        format!("/deployments/{name}"),
        format!("/deployments/{name}/instances"),
        "/tasks".to_string(),
        "/releases".to_string(),
    ] {
        let response = as_reader(Method::GET, &path).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    let tasks: Value = as_reader(Method::GET, "/tasks")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task = tasks[0]["id"].as_u64().unwrap();
    let events = as_reader(Method::GET, &format!("/tasks/{task}/output?type=event"))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let refused = [
        (Method::GET, format!("/tasks/{task}/output?type=debug")),
        (Method::GET, format!("/deployments/{name}/variables")),
        (Method::GET, format!("/deployments/{name}/jobs/*/*/logs")),
        (Method::DELETE, format!("/deployments/{name}")),
        (Method::POST, "/deployments".to_string()),
    ];
    for (method, path) in refused {
        let response = as_reader(method.clone(), &path).send().await.unwrap();
        assert_eq!(response.status(), 403, "{method} {path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], 600000, "{body}");
        assert!(body["description"].as_str().unwrap().contains("bosh.admin"));
    }
    // Nothing was deleted: the admin still sees the deployment, and may read the debug
    // output the reader may not.
    let seen = s.send(Method::GET, &format!("/deployments/{name}")).await;
    assert_eq!(seen.status(), 200);
    let debug = s
        .send(Method::GET, &format!("/tasks/{task}/output?type=debug"))
        .await;
    assert_eq!(debug.status(), 200);

    let broker = |method: Method, path: &str| {
        s.broker_as(method, path, "auditor", crate::served::READER_PASSWORD)
            .send()
    };
    let list = broker(Method::GET, "/mgmt/service_instances")
        .await
        .unwrap();
    assert_eq!(list.status(), 200);
    let trigger = broker(
        Method::PATCH,
        "/mgmt/service_instances/pg-01?operation_type=upgrade",
    )
    .await
    .unwrap();
    assert_eq!(trigger.status(), 403);
}

/// `serve` of the small fleet configured as `config`.
async fn served_with(config: fleet_updater::config::ServeConfig) -> Served {
    Served::start_configured(
        tempfile::tempdir().unwrap(),
        &super::served::small_fleet(),
        &config,
    )
    .await
}

/// The broker API's own users (`serve.broker_users`): a platform's broker credentials
/// open nothing of the director, and the director's users nothing of the broker.
#[tokio::test(flavor = "multi_thread")]
async fn the_broker_takes_its_own_users_when_it_has_them() {
    use fleet_updater::config::{Secret, ServeConfig, ServeUser};
    let s = served_with(ServeConfig {
        users: vec![ServeUser::admin("admin", Secret::new("Admin-Pw-2"))],
        broker_users: vec![ServeUser::admin("platform", Secret::new("Platform-Pw-2"))],
        ..ServeConfig::default()
    })
    .await;
    let status = |request: reqwest::RequestBuilder| async move {
        request.send().await.unwrap().status().as_u16()
    };
    let listing = "/mgmt/service_instances";
    let broker = |user, password| s.broker_as(Method::GET, listing, user, password);
    let director = |user, password| s.director_as(Method::GET, "/deployments", user, password);
    assert_eq!(status(broker("platform", "Platform-Pw-2")).await, 200);
    assert_eq!(status(broker("admin", "Admin-Pw-2")).await, 401);
    assert_eq!(status(director("admin", "Admin-Pw-2")).await, 200);
    assert_eq!(status(director("platform", "Platform-Pw-2")).await, 401);
}
