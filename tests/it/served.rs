//! A `serve` of a small embedded fleet on free ports of 127.0.0.1, and an HTTPS client
//! that trusts its generated CA.

use std::path::PathBuf;
use std::time::Duration;

use fleet_updater::config::{ServeConfig, ServeLimits};
use fleet_updater::fleet::{self, Access, DEMO, Definition};
use fleet_updater::serve::{self, Addresses, Serving};
use reqwest::{Certificate, Client, Method, RequestBuilder};
use serde_json::Value;

use crate::bosh_cli_types::VmInfo;

pub struct Served {
    pub serving: Serving,
    pub state: tempfile::TempDir,
    pub password: String,
    pub ca: PathBuf,
    /// Follows no redirects, so that tests see them.
    pub client: Client,
}

/// Five service instances on older versions: pg-01..03 (pg-02 blocked by its owner),
/// rmq-01..02 (three VMs each), no latency.
pub fn small_fleet() -> Definition {
    let mut definition = Definition::parse(DEMO).unwrap().without_latency();
    definition.provision[0].count = 3;
    definition.provision[1].count = 2;
    // The RabbitMQ instances are the operator's own, in a space of canaries.
    definition.provision[1].org = Some("system".to_string());
    definition.provision[1].space = Some("canaries".to_string());
    definition.blocked = vec!["pg-02".to_string()];
    definition.busy = Vec::new();
    definition
}

/// The password of the reader [`admin_and_reader`] lists.
pub const READER_PASSWORD: &str = "Reader-Pw-1";

/// `admin` (a director admin) and `auditor` (`bosh.read`, [`READER_PASSWORD`]): the users
/// the scope tests sign in as.
pub fn admin_and_reader() -> Vec<fleet_updater::config::ServeUser> {
    use fleet_updater::config::{Secret, ServeUser};
    vec![
        ServeUser::admin("admin", Secret::new("Admin-Pw-1")),
        ServeUser {
            name: "auditor".into(),
            password: Secret::new(READER_PASSWORD),
            scopes: vec!["bosh.read".into()],
        },
    ]
}

pub fn client_trusting(ca: &std::path::Path) -> Client {
    client_from(ca, "127.0.0.1".parse().unwrap())
}

/// A client trusting `ca` that connects from `local`, another loopback address: another
/// client as `serve` counts clients.
pub fn client_from(ca: &std::path::Path, local: std::net::IpAddr) -> Client {
    client_waiting(ca, local, Duration::from_secs(30))
}

/// [`client_from`] waiting `timeout` for an answer.
pub fn client_waiting(ca: &std::path::Path, local: std::net::IpAddr, timeout: Duration) -> Client {
    let pem = std::fs::read(ca).unwrap();
    // reqwest is built without a provider of its own (the build uses ring throughout).
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder()
        .tls_certs_only([Certificate::from_pem(&pem).unwrap()])
        .local_address(local)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .build()
        .unwrap()
}

impl Served {
    pub async fn start(limits: ServeLimits) -> Served {
        Served::start_in(tempfile::tempdir().unwrap(), limits).await
    }

    pub async fn start_in(state: tempfile::TempDir, limits: ServeLimits) -> Served {
        Served::start_fleet(state, &small_fleet(), limits).await
    }

    /// `serve` of the fleet `definition` in `state`.
    pub async fn start_fleet(
        state: tempfile::TempDir,
        definition: &Definition,
        limits: ServeLimits,
    ) -> Served {
        // Without a health monitor, whose passes would act beside what a test checks.
        let config = ServeConfig {
            limits,
            health_monitor: None,
            ..ServeConfig::default()
        };
        Served::start_configured(state, definition, &config).await
    }

    /// `serve` of the fleet `definition` in `state`, configured as `config` says (its
    /// listen addresses aside).
    pub async fn start_configured(
        state: tempfile::TempDir,
        definition: &Definition,
        config: &ServeConfig,
    ) -> Served {
        let fleet = fleet::open(
            state.path(),
            definition,
            Access::SERVE,
            &fleet_updater::store::StoreLocation::Sqlite,
            &mut |_| {},
        )
        .await
        .unwrap();
        let any = "127.0.0.1:0".parse().unwrap();
        let serving = serve::start(
            fleet,
            config,
            state.path(),
            Addresses {
                director: any,
                broker: any,
            },
        )
        .await
        .unwrap();
        // The generated user's, or the first configured user's (named `admin`).
        let password = match &serving.credentials {
            Some(file) => std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("password: "))
                .unwrap()
                .to_string(),
            None => config.users[0].password.expose().to_string(),
        };
        let ca = serving.ca.clone().unwrap();
        Served {
            client: client_trusting(&ca),
            serving,
            state,
            password,
            ca,
        }
    }

    pub fn director_url(&self, path: &str) -> String {
        format!("https://{}{path}", self.serving.director)
    }

    pub fn broker_url(&self, path: &str) -> String {
        format!("https://{}{path}", self.serving.broker)
    }

    /// A request to the director API with credentials.
    pub fn director(&self, method: Method, path: &str) -> RequestBuilder {
        self.director_as(method, path, "admin", &self.password)
    }

    /// A request to the director API as `user`.
    pub fn director_as(
        &self,
        method: Method,
        path: &str,
        user: &str,
        password: &str,
    ) -> RequestBuilder {
        self.client
            .request(method, self.director_url(path))
            .basic_auth(user, Some(password))
    }

    pub fn broker(&self, method: Method, path: &str) -> RequestBuilder {
        self.broker_as(method, path, "admin", &self.password)
    }

    /// A request to the broker API as `user`, with the API version clients send.
    pub fn broker_as(
        &self,
        method: Method,
        path: &str,
        user: &str,
        password: &str,
    ) -> RequestBuilder {
        self.client
            .request(method, self.broker_url(path))
            .basic_auth(user, Some(password))
            .header("X-Broker-API-Version", "2.13")
    }

    /// A director request with a JSON body.
    pub async fn send_json(
        &self,
        method: Method,
        path: &str,
        body: impl Into<String>,
    ) -> reqwest::Response {
        self.send_body(method, path, "application/json", body.into())
            .await
    }

    /// A director request with a YAML body (a manifest, a cloud config).
    pub async fn send_yaml(
        &self,
        method: Method,
        path: &str,
        body: impl Into<String>,
    ) -> reqwest::Response {
        self.send_body(method, path, "text/yaml", body.into()).await
    }

    async fn send_body(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: String,
    ) -> reqwest::Response {
        self.director(method, path)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// A director request without a body.
    pub async fn send(&self, method: Method, path: &str) -> reqwest::Response {
        self.director(method, path).send().await.unwrap()
    }

    /// `GET /info`, without credentials as clients ask it.
    pub async fn info(&self) -> Value {
        let response = self
            .client
            .get(self.director_url("/info"))
            .send()
            .await
            .unwrap();
        response.json().await.unwrap()
    }

    /// The `description` of an error answer.
    pub async fn description(response: reqwest::Response) -> String {
        let body: Value = response.json().await.unwrap();
        body["description"].as_str().unwrap().to_string()
    }

    /// A state change or another director request with an empty YAML body.
    pub async fn put(&self, path: &str) -> reqwest::Response {
        self.director(Method::PUT, path)
            .header("content-type", "text/yaml")
            .send()
            .await
            .unwrap()
    }

    /// A task's output of `kind`, whole.
    pub async fn output(&self, id: u64, kind: &str) -> String {
        self.director(Method::GET, &format!("/tasks/{id}/output?type={kind}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn broker_json(&self, path: &str) -> Value {
        let response = self.broker(Method::GET, path).send().await.unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
        response.json().await.unwrap()
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let response = self.director(Method::GET, path).send().await.unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
        response.json().await.unwrap()
    }

    /// `bosh -d D vms` (`resource` `vms`) or `bosh -d D instances` (`instances`), and the
    /// ODB's bind: the task's result, one `VMInfo` per line, after it is done.
    pub async fn vm_infos(&self, deployment: &str, resource: &str) -> Vec<VmInfo> {
        let response = self
            .send(
                Method::GET,
                &format!("/deployments/{deployment}/{resource}?format=full"),
            )
            .await;
        let id = Served::task_of(&response);
        assert_eq!(self.wait_task(id).await["state"], "done");
        self.output(id, "result")
            .await
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Follows a task redirect: the task's id.
    pub fn task_of(response: &reqwest::Response) -> u64 {
        assert_eq!(response.status(), 302, "expected a redirect to a task");
        let location = response.headers()["location"].to_str().unwrap();
        location.strip_prefix("/tasks/").unwrap().parse().unwrap()
    }

    /// Polls the task until it ends; its final JSON.
    pub async fn wait_task(&self, id: u64) -> Value {
        for _ in 0..600 {
            let task = self.get_json(&format!("/tasks/{id}")).await;
            let state = task["state"].as_str().unwrap().to_string();
            if !["queued", "processing", "cancelling"].contains(&state.as_str()) {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("task {id} did not end in 30 s");
    }
}
