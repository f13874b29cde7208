//! `fleet-updater serve`: the embedded director's API (as a BOSH director) and the
//! embedded broker's management API, each on its own port, over TLS with basic
//! authentication and limits on what one client may ask.

mod access_log;
mod auth;
mod authorize;
pub mod broker_api;
mod clients;
mod credentials;
pub mod director_api;
mod files;
mod limits;
mod linger;
mod listener;
pub mod metrics;
mod ready;
mod rejection;
pub mod scopes;
mod settings;
mod shared_throttle;
mod throttle;
pub mod tls;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::middleware::from_fn_with_state;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use auth::Gate;
use fleet_embedded::EmbeddedFleet;
use limits::RequestLimits;
pub use rejection::Flavor;
pub use settings::{ServeConfig, ServeLimits, ServeUser};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("credentials: {0}")]
    Credentials(String),
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The APIs being served.
pub struct Serving {
    pub director: SocketAddr,
    pub broker: SocketAddr,
    /// Where `/metrics` is served over plain HTTP, when configured.
    pub metrics: Option<SocketAddr>,
    /// The generated CA that clients must trust; `None` with a configured certificate.
    pub ca: Option<PathBuf>,
    /// Where generated credentials are; `None` with configured users.
    pub credentials: Option<PathBuf>,
    fleet: Arc<EmbeddedFleet>,
    stop: watch::Sender<bool>,
    listeners: Vec<JoinHandle<()>>,
    monitor: Option<JoinHandle<()>>,
}

/// Where each API listens, so that tests can take any free port.
#[derive(Debug, Clone, Copy)]
pub struct Addresses {
    pub director: SocketAddr,
    pub broker: SocketAddr,
}

/// From the outside in: the access log, the API's error shape for what the framework
/// refuses on its own, limits, authentication, the API.
fn protect(router: Router, gate: Gate, limits: RequestLimits) -> Router {
    let flavor = limits.flavor;
    limits::apply(
        router.layer(from_fn_with_state(gate, auth::require)),
        limits,
    )
    .layer(from_fn_with_state(flavor, rejection::reshape))
    .layer(from_fn_with_state(flavor, access_log::log))
}

/// Where uploaded releases are spooled while they are read and kept, emptied of what an
/// earlier process left there (one killed mid-upload).
fn releases_spool(state_dir: &Path) -> Result<PathBuf, ServeError> {
    let spool = state_dir.join("uploads");
    let failed = |source| ServeError::File {
        path: spool.clone(),
        source,
    };
    match std::fs::remove_dir_all(&spool) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e)),
    }
    std::fs::create_dir_all(&spool).map_err(failed)?;
    Ok(spool)
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Listen { addr, source })
}

/// Binds both APIs and serves them until [`Serving::shutdown`].
///
/// # Errors
/// When a port cannot be bound, or the certificate or credentials cannot be set up.
pub async fn start(
    fleet: EmbeddedFleet,
    config: &ServeConfig,
    state_dir: &Path,
    addresses: Addresses,
) -> Result<Serving, ServeError> {
    crate::metrics::install();
    let director_listener = bind(addresses.director).await?;
    let broker_listener = bind(addresses.broker).await?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let bound = [
        director_listener.local_addr().unwrap_or(addresses.director),
        broker_listener.local_addr().unwrap_or(addresses.broker),
    ];
    let identity = tls::identity(
        state_dir,
        config.certificate.as_deref(),
        config.private_key.as_deref(),
        &bound,
    )?;
    let credentials = credentials::credentials(state_dir, &config.users)?;
    // What `bosh.UUID.admin` names; a director whose UUID cannot be read takes none.
    let uuid = fleet.director().uuid().await.unwrap_or_default();
    let acceptor = TlsAcceptor::from(identity.config);
    let fleet = Arc::new(fleet);
    let throttle = Arc::new(throttle::LoginThrottle::default());
    // Processes sharing a database share their failed logins; one alone keeps them.
    let shared_failures = fleet
        .store()
        .blocking()
        .shared()
        .then(|| Arc::new(shared_throttle::SharedFailures::new(fleet.store().clone())));
    // A release uploaded to a fleet of plain-process VMs would run on this machine.
    let uploads = if fleet.releases_run_on_host() && !config.releases_on_host {
        crate::director_api::Uploads::RefusedOnHost
    } else {
        crate::director_api::Uploads::Taken {
            spool: releases_spool(state_dir)?,
        }
    };
    let director_api = protect(
        crate::director_api::router(fleet.director().clone(), uploads, config.limits.unpacking())
            .merge(ready::router(
                fleet.director().clone(),
                state_dir.to_path_buf(),
            ))
            .merge(metrics::router(fleet.director().clone())),
        Gate::new(
            credentials.users.clone(),
            Flavor::Director,
            crate::director_api::OPEN_PATHS,
            Arc::clone(&throttle),
        )
        .with_shared_failures(shared_failures.clone())
        .with_director(fleet.director().clone(), uuid.clone()),
        RequestLimits {
            flavor: Flavor::Director,
            max_body_bytes: config.limits.max_body_bytes,
            timeout: config.limits.request_timeout,
            max_upload_bytes: config.limits.max_upload_bytes,
            upload_timeout: config.limits.upload_timeout,
        },
    );
    let broker_api = protect(
        crate::broker_api::router(Arc::clone(&fleet.broker)),
        Gate::new(
            if config.broker_users.is_empty() {
                credentials.users.clone()
            } else {
                config.broker_users.clone()
            },
            Flavor::Broker,
            &[],
            throttle,
        )
        .with_shared_failures(shared_failures),
        RequestLimits {
            flavor: Flavor::Broker,
            max_body_bytes: config.limits.max_body_bytes,
            timeout: config.limits.request_timeout,
            max_upload_bytes: config.limits.max_upload_bytes,
            upload_timeout: config.limits.upload_timeout,
        },
    );
    let (stop, stopped) = watch::channel(false);
    let connections = |flavor| listener::ConnectionLimits {
        max: config.limits.max_connections,
        per_client: config.limits.max_connections_per_client,
        flavor,
    };
    let metrics_address = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
    let mut listeners = vec![
        tokio::spawn(listener::serve(
            director_listener,
            acceptor.clone(),
            director_api,
            connections(Flavor::Director),
            stopped.clone(),
        )),
        tokio::spawn(listener::serve(
            broker_listener,
            acceptor,
            broker_api,
            connections(Flavor::Broker),
            stopped,
        )),
    ];
    if let Some(listener) = metrics_listener {
        // Plain HTTP and no credentials, at an address the operator chose for a scraper:
        // the figures name no secret.
        let app = metrics::router(fleet.director().clone());
        let mut stopping = stop.subscribe();
        listeners.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopping.wait_for(|stop| *stop).await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::warn!("the metrics listener stopped: {e}");
            }
        }));
    }
    let monitor = config
        .health_monitor
        .map(|settings| fleet_director::health_monitor::spawn(fleet.director().clone(), settings));
    Ok(Serving {
        director: bound[0],
        broker: bound[1],
        metrics: metrics_address,
        ca: identity.ca,
        credentials: credentials.file,
        fleet,
        stop,
        listeners,
        monitor,
    })
}

/// One router over TLS with the identity `serve` would use for `state_dir`, without
/// authentication or limits: for servers other than the fleet's, such as scripted
/// brokers and directors in tests.
pub struct Https {
    pub addr: SocketAddr,
    pub ca: PathBuf,
    stop: watch::Sender<bool>,
    listener: JoinHandle<()>,
}

impl Https {
    /// # Errors
    /// When the port cannot be bound or the identity cannot be made.
    pub async fn start(
        router: Router,
        state_dir: &Path,
        addr: SocketAddr,
    ) -> Result<Https, ServeError> {
        let listener = bind(addr).await?;
        let addr = listener.local_addr().unwrap_or(addr);
        let identity = tls::identity(state_dir, None, None, &[addr])?;
        let (stop, stopped) = watch::channel(false);
        let listener = tokio::spawn(listener::serve(
            listener,
            TlsAcceptor::from(identity.config),
            router,
            listener::ConnectionLimits {
                max: 1024,
                per_client: 1024,
                flavor: Flavor::Director,
            },
            stopped,
        ));
        Ok(Https {
            addr,
            ca: identity.ca.unwrap_or_default(),
            stop,
            listener,
        })
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.listener.await;
    }
}

impl Serving {
    pub fn fleet(&self) -> &EmbeddedFleet {
        &self.fleet
    }

    /// Stops accepting connections, lets requests in flight finish, cancels running tasks
    /// and gives them `grace` to reach a safe point. A task still running after that is
    /// cut off with the process and marked as errored by the next start.
    pub async fn shutdown(self, grace: Duration) -> Vec<u64> {
        if let Some(monitor) = &self.monitor {
            monitor.abort();
        }
        let _ = self.stop.send(true);
        for listener in self.listeners {
            let _ = listener.await;
        }
        let director = self.fleet.director();
        let cancelled = director.cancel_running().await;
        if tokio::time::timeout(grace, director.idle()).await.is_err() {
            tracing::warn!("tasks still running after the grace period are left to recovery");
        }
        self.fleet.close().await;
        cancelled
    }
}
