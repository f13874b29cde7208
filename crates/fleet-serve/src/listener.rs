//! The TLS accept loop: a bounded number of connections per client address (a connection
//! over it is closed at once) and in all (counted once the TLS handshake is done: a client
//! that never shakes hands holds no slot of the others), a deadline for the handshake and
//! for request headers (so a slow client cannot hold a connection open), and a graceful
//! end that lets requests in flight finish.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;

use super::clients::{ClientAddr, ClientSlots};
use super::rejection::Flavor;

/// How many connections are served, in all and per client address.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max: usize,
    pub per_client: usize,
    pub flavor: Flavor,
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long requests in flight may take to finish once shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The answer to a connection above the limit, written as plain HTTP over the established
/// TLS session.
fn too_many(limit: usize, flavor: Flavor) -> String {
    let description = format!("more than {limit} connections are open; try again later");
    let body = match flavor {
        Flavor::Director => serde_json::json!({ "code": 100, "description": description }),
        Flavor::Broker => {
            serde_json::json!({ "error": "TooManyConnections", "description": description })
        }
    }
    .to_string();
    format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\
         connection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Reads the request head (a client does not expect an answer before it asked), then
/// answers 429 and closes.
async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(mut tls: S, limits: ConnectionLimits) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    let read_head = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match tls.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buffer[..n]),
            }
        }
    };
    if tokio::time::timeout(HEADER_TIMEOUT, read_head)
        .await
        .is_err()
    {
        return;
    }
    let _ = tls
        .write_all(too_many(limits.max, limits.flavor).as_bytes())
        .await;
    let _ = tls.shutdown().await;
}

pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    limits: ConnectionLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(limits.max));
    let clients = ClientSlots::new(limits.per_client);
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(slot) = clients.take(peer.ip()) else {
            tracing::warn!(
                target: "fleet_serve::access",
                client = %peer,
                limit = limits.per_client,
                "connection refused: the client has its limit of connections open"
            );
            drop(stream);
            continue;
        };
        let permits = Arc::clone(&permits);
        let acceptor = acceptor.clone();
        let service =
            TowerToHyperService::new(app.clone().layer(axum::Extension(ClientAddr(peer))));
        let http = http.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let _slot = slot;
            let Ok(_permit) = permits.try_acquire_owned() else {
                refuse(tls, limits).await;
                return;
            };
            let connection = http.serve_connection(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(connection).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still running after the drain timeout were cut off");
    }
}
