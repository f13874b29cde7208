//! Talking to an agent over its mbus, as `create-env` does: a message per request, long
//! actions followed with `get_task` until they end, blobs put and got. Without a CA for
//! the agent's certificate it is not verified, as BOSH's CLI does (the agent makes its own
//! when its settings give none).

use std::time::Duration;

use base64::Engine;
use reqwest::{Certificate, Client, StatusCode};
use serde_json::{Value, json};

use super::mbus::MbusUrl;
use super::protocol::{Answer, ApplySpec, Request};

#[derive(Debug, thiserror::Error)]
pub enum AgentCallError {
    #[error("cannot reach the agent at {address} for {method}: {message}")]
    Unreachable {
        address: String,
        method: String,
        message: String,
    },
    #[error("the agent at {address} refused the mbus credentials ({method})")]
    Unauthorized { address: String, method: String },
    #[error("agent {method}: {message}")]
    Failed { method: String, message: String },
    #[error("agent {method} answered what is not an answer: {message}")]
    Unreadable { method: String, message: String },
    #[error("{0}")]
    Setup(String),
}

pub struct AgentClient {
    http: Client,
    mbus: MbusUrl,
    authorization: String,
    /// How often a running task is asked after.
    poll: Duration,
}

fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl AgentClient {
    /// # Errors
    /// A CA that is not PEM, or an HTTPS setup that cannot be made.
    pub fn new(mbus: MbusUrl, ca: Option<&str>) -> Result<AgentClient, AgentCallError> {
        install_crypto_provider();
        let mut builder = Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .timeout(Duration::from_secs(30 * 60));
        builder = match ca {
            Some(pem) => {
                let certificates = Certificate::from_pem_bundle(pem.as_bytes())
                    .map_err(|e| AgentCallError::Setup(format!("the mbus CA is not PEM: {e}")))?;
                builder.tls_certs_only(certificates)
            }
            None => builder.tls_danger_accept_invalid_certs(true),
        };
        let http = builder.build().map_err(|e| {
            AgentCallError::Setup(format!("cannot set up HTTPS for the agent: {e}"))
        })?;
        let credentials = format!("{}:{}", mbus.user, mbus.password);
        Ok(AgentClient {
            http,
            authorization: format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(credentials)
            ),
            mbus,
            poll: Duration::from_millis(250),
        })
    }

    fn unreachable(&self, method: &str, e: impl std::fmt::Display) -> AgentCallError {
        AgentCallError::Unreachable {
            address: self.mbus.without_credentials(),
            method: method.to_string(),
            message: e.to_string(),
        }
    }

    /// Sends one message; its answer, exceptions included.
    async fn send(&self, method: &str, arguments: Vec<Value>) -> Result<Answer, AgentCallError> {
        let request = Request {
            method: method.to_string(),
            arguments,
            reply_to: Some("fleet-updater".into()),
        };
        let response = self
            .http
            .post(format!("{}/agent", self.mbus.without_credentials()))
            .header(reqwest::header::AUTHORIZATION, &self.authorization)
            .json(&request)
            .send()
            .await
            .map_err(|e| self.unreachable(method, e))?;
        if response.status() == StatusCode::UNAUTHORIZED {
            return Err(AgentCallError::Unauthorized {
                address: self.mbus.without_credentials(),
                method: method.to_string(),
            });
        }
        if !response.status().is_success() {
            return Err(self.unreachable(method, format!("HTTP {}", response.status())));
        }
        response
            .json::<Answer>()
            .await
            .map_err(|e| AgentCallError::Unreadable {
                method: method.to_string(),
                message: e.to_string(),
            })
    }

    /// Sends `method` and, when it runs as a task, asks after it until it ends; its value.
    ///
    /// # Errors
    /// The agent cannot be reached, or answers an exception.
    pub async fn call(&self, method: &str, arguments: Vec<Value>) -> Result<Value, AgentCallError> {
        let mut answer = self.send(method, arguments).await?;
        while let Some(task) = answer.running_task().map(str::to_string) {
            tokio::time::sleep(self.poll).await;
            answer = self.send("get_task", vec![json!(task)]).await?;
        }
        match answer {
            Answer {
                exception: Some(e), ..
            } => Err(AgentCallError::Failed {
                method: method.to_string(),
                message: e.message,
            }),
            Answer { value, .. } => Ok(value.unwrap_or(Value::Null)),
        }
    }

    /// # Errors
    /// As [`AgentClient::call`].
    pub async fn ping(&self) -> Result<(), AgentCallError> {
        self.call("ping", Vec::new()).await.map(|_| ())
    }

    /// Pings until the agent answers or `limit` passes.
    ///
    /// # Errors
    /// The last failure, once `limit` passed.
    pub async fn wait_until_ready(&self, limit: Duration) -> Result<(), AgentCallError> {
        let started = tokio::time::Instant::now();
        loop {
            match self.ping().await {
                Ok(()) => return Ok(()),
                Err(e @ AgentCallError::Unauthorized { .. }) => return Err(e),
                Err(e) if started.elapsed() >= limit => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// # Errors
    /// As [`AgentClient::call`].
    pub async fn get_state(&self) -> Result<Value, AgentCallError> {
        self.call("get_state", Vec::new()).await
    }

    /// # Errors
    /// As [`AgentClient::call`].
    pub async fn apply(&self, spec: &ApplySpec) -> Result<(), AgentCallError> {
        let spec = serde_json::to_value(spec).expect("a spec serializes");
        self.call("apply", vec![spec]).await.map(|_| ())
    }

    /// # Errors
    /// As [`AgentClient::call`].
    pub async fn run_script(&self, name: &str) -> Result<(), AgentCallError> {
        self.call("run_script", vec![json!(name), json!({"env": {}})])
            .await
            .map(|_| ())
    }

    /// # Errors
    /// As [`AgentClient::call`].
    pub async fn list_disk(&self) -> Result<Vec<String>, AgentCallError> {
        let value = self.call("list_disk", Vec::new()).await?;
        Ok(value
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|d| d.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    fn blob_url(&self, id: &str) -> String {
        format!("{}/blobs/{id}", self.mbus.without_credentials())
    }

    /// # Errors
    /// The agent cannot be reached or refuses the blob.
    pub async fn put_blob(&self, id: &str, bytes: Vec<u8>) -> Result<(), AgentCallError> {
        let response = self
            .http
            .put(self.blob_url(id))
            .header(reqwest::header::AUTHORIZATION, &self.authorization)
            .body(bytes)
            .send()
            .await
            .map_err(|e| self.unreachable("put blob", e))?;
        match response.status() {
            StatusCode::CREATED | StatusCode::NO_CONTENT | StatusCode::OK => Ok(()),
            status => Err(self.unreachable("put blob", format!("HTTP {status}"))),
        }
    }

    /// # Errors
    /// The agent cannot be reached or has no such blob.
    pub async fn get_blob(&self, id: &str) -> Result<Vec<u8>, AgentCallError> {
        let response = self
            .http
            .get(self.blob_url(id))
            .header(reqwest::header::AUTHORIZATION, &self.authorization)
            .send()
            .await
            .map_err(|e| self.unreachable("get blob", e))?;
        if !response.status().is_success() {
            return Err(self.unreachable("get blob", format!("HTTP {}", response.status())));
        }
        Ok(response
            .bytes()
            .await
            .map_err(|e| self.unreachable("get blob", e))?
            .to_vec())
    }
}
