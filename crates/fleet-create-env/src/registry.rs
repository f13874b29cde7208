//! The registry seed 002 describes: a small HTTP service on this machine, alive while
//! `create-env` runs, where a CPI that uses one keeps a VM's settings (`PUT
//! /instances/ID/settings`, with the registry's credentials) for the VM's agent to read
//! (`GET`, open, answered `{"settings": "...", "status": "ok"}`) when its IaaS's
//! metadata cannot change after the VM is made.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use subtle::ConstantTimeEq;

/// Where the registry listens and who may write to it, as `cloud_provider.properties.
/// registry` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrySettings {
    pub host: IpAddr,
    pub port: u16,
    pub username: String,
    pub password: String,
}

#[derive(Clone)]
struct Registry {
    settings: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    expected: Arc<Vec<u8>>,
}

/// The running registry; it stops when this is dropped.
pub struct RunningRegistry {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub port: u16,
}

impl Drop for RunningRegistry {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn get_settings(
    State(r): State<Registry>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    // The settings hold the agent's password: readers bring the credentials too.
    if !authorized(&r, &headers) {
        return unauthorized();
    }
    let found = r
        .settings
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .cloned();
    match found {
        Some(bytes) => {
            let body = serde_json::json!({
                "settings": String::from_utf8_lossy(&bytes),
                "status": "ok",
            });
            (StatusCode::OK, axum::Json(body)).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn authorized(r: &Registry, headers: &HeaderMap) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    given.ct_eq(&r.expected).into()
}

fn unauthorized() -> Response {
    let mut refused = StatusCode::UNAUTHORIZED.into_response();
    refused.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Basic realm=\"Bosh Registry\""),
    );
    refused
}

async fn put_settings(
    State(r): State<Registry>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&r, &headers) {
        return unauthorized();
    }
    let replaced = r
        .settings
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, body.to_vec());
    if replaced.is_some() {
        StatusCode::OK.into_response()
    } else {
        StatusCode::CREATED.into_response()
    }
}

async fn delete_settings(
    State(r): State<Registry>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&r, &headers) {
        return unauthorized();
    }
    r.settings
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id);
    StatusCode::OK.into_response()
}

/// Why the registry did not start.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "cloud_provider.properties.registry.host: {host} is not a loopback address; the registry listens on this machine only"
    )]
    NotLoopback { host: IpAddr },
    #[error("cannot start the registry on {host}:{port}: {source}")]
    Bind {
        host: IpAddr,
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Port(std::io::Error),
}

/// Starts the registry on its loopback address.
///
/// # Errors
/// A host that is not loopback (the registry holds credentials and is open to read), or
/// a port that cannot be bound.
pub async fn start(settings: &RegistrySettings) -> Result<RunningRegistry, RegistryError> {
    if !settings.host.is_loopback() {
        return Err(RegistryError::NotLoopback {
            host: settings.host,
        });
    }
    let credentials = format!("{}:{}", settings.username, settings.password);
    let registry = Registry {
        settings: Arc::default(),
        expected: Arc::new(
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(credentials)
            )
            .into_bytes(),
        ),
    };
    let app = Router::new()
        .route(
            "/instances/{id}/settings",
            get(get_settings).put(put_settings).delete(delete_settings),
        )
        .with_state(registry);
    let listener = tokio::net::TcpListener::bind((settings.host, settings.port))
        .await
        .map_err(|source| RegistryError::Bind {
            host: settings.host,
            port: settings.port,
            source,
        })?;
    let port = listener.local_addr().map_err(RegistryError::Port)?.port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
    });
    Ok(RunningRegistry {
        stop: Some(stop),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_vm::registry_client::{Registry as Client, get};

    #[tokio::test(flavor = "multi_thread")]
    async fn settings_are_written_and_read_with_the_registrys_credentials_only() {
        let settings = RegistrySettings {
            host: "127.0.0.1".parse().unwrap(),
            port: 0,
            username: "registry".into(),
            password: "s3cret".into(),
        };
        let running = start(&settings).await.unwrap();
        let context = |password: &str| {
            let mut context = serde_json::Map::new();
            context.insert(
                "registry".into(),
                serde_json::json!({"host": "127.0.0.1", "port": running.port, "username": "registry", "password": password}),
            );
            Client::from_context(&context).unwrap().unwrap()
        };
        let client = context("s3cret");
        client
            .put("vm-1", &serde_json::json!({"mbus": "https://x"}))
            .await
            .unwrap();
        client.set_disk("vm-1", "disk-1", Some("/d")).await.unwrap();
        assert!(
            get(client.base(), "vm-1")
                .await
                .unwrap_err()
                .to_string()
                .contains("401"),
            "no credentials"
        );
        let read = get(&client.url_for_agents(), "vm-1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read["mbus"], "https://x");
        assert_eq!(read["disks"]["persistent"]["disk-1"], "/d");
        let e = context("wrong")
            .put("vm-1", &serde_json::json!({}))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("401") && !e.contains("wrong"), "{e}");
        client.delete("vm-1").await.unwrap();
        assert_eq!(get(&client.url_for_agents(), "vm-1").await.unwrap(), None);
        let elsewhere = RegistrySettings {
            host: "10.0.0.1".parse().unwrap(),
            ..settings
        };
        assert!(
            start(&elsewhere)
                .await
                .err()
                .unwrap()
                .to_string()
                .contains("not a loopback")
        );
    }
}
