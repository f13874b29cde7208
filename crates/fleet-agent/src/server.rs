//! The agent served over HTTPS, as BOSH's agent serves its mbus: `POST /agent` takes a
//! message, `PUT` and `GET /blobs/.../ID` keep and give blobs; every request needs the
//! mbus URL's credentials (basic authentication, compared in constant time).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, Request as HttpRequest, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::actions::VmAgent;
use super::mbus::MbusUrl;
use super::protocol::{Answer, Request};

/// The largest blob taken: a compiled package or a release's package sources.
const MAX_BLOB: usize = 2 * 1024 * 1024 * 1024;

/// Why the agent has no certificate to serve its mbus with.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the mbus certificate is not PEM: {0}")]
    CertificateNotPem(#[source] rustls_pki_types::pem::Error),
    #[error("the mbus private key is not PEM: {0}")]
    KeyNotPem(#[source] rustls_pki_types::pem::Error),
    #[error("cannot make the agent's certificate: {0}")]
    Generate(#[source] rcgen::Error),
    #[error("cannot use the agent's key: {0}")]
    GeneratedKey(&'static str),
    #[error(transparent)]
    Protocols(rustls::Error),
    #[error("the mbus certificate and key do not fit: {0}")]
    Mismatch(#[source] rustls::Error),
}

#[derive(Clone)]
struct App {
    agent: Arc<VmAgent>,
    /// `Basic base64(user:password)`, what every request must bring.
    expected: Arc<Vec<u8>>,
}

/// The TLS certificate and key the agent serves with: the ones its VM's settings give
/// (`env.bosh.mbus.cert`), or one made for the mbus host.
///
/// # Errors
/// A certificate or key that cannot be read, or one that cannot be made.
pub fn tls_config(cert: Option<(&str, &str)>, host: &str) -> Result<Arc<ServerConfig>, TlsError> {
    let (chain, key) = match cert {
        Some((certificate, private_key)) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(certificate.as_bytes())
                    .collect::<Result<_, _>>()
                    .map_err(TlsError::CertificateNotPem)?;
            let key = PrivateKeyDer::from_pem_slice(private_key.as_bytes())
                .map_err(TlsError::KeyNotPem)?;
            (chain, key)
        }
        None => {
            let names = vec![host.to_string(), "localhost".into(), "127.0.0.1".into()];
            let made = rcgen::generate_simple_self_signed(names).map_err(TlsError::Generate)?;
            let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
                .map_err(TlsError::GeneratedKey)?;
            (vec![made.cert.der().clone()], key)
        }
    };
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Protocols)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(TlsError::Mismatch)?;
    Ok(Arc::new(config))
}

async fn authenticate(State(app): State<App>, request: HttpRequest, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    if given.ct_eq(&app.expected).into() {
        next.run(request).await
    } else {
        let mut refused = StatusCode::UNAUTHORIZED.into_response();
        refused.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"\""),
        );
        refused
    }
}

async fn message(State(app): State<App>, body: Bytes) -> Response {
    let answer = match serde_json::from_slice::<Request>(&body) {
        Ok(request) => {
            tracing::info!("agent message {}", request.method);
            app.agent.handle(request).await
        }
        Err(e) => Answer::exception(format!("the message is not an agent request: {e}")),
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = serde_json::to_vec(&answer).expect("an answer serializes");
    (StatusCode::OK, headers, body).into_response()
}

/// The blob id is the path's last part, as BOSH's clients put a prefix before it.
fn blob_id(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or_default()
}

async fn put_blob(State(app): State<App>, UrlPath(path): UrlPath<String>, body: Bytes) -> Response {
    match app
        .agent
        .blobs()
        .put_off_runtime(blob_id(&path), body)
        .await
    {
        Ok(()) => StatusCode::CREATED.into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}

async fn get_blob(State(app): State<App>, UrlPath(path): UrlPath<String>) -> Response {
    match app.agent.blobs().get_off_runtime(blob_id(&path)).await {
        Ok(Some(bytes)) => (StatusCode::OK, Body::from(bytes)).into_response(),
        Ok(None) => StatusCode::NOT_FOUND.into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}

fn router(agent: Arc<VmAgent>, mbus: &MbusUrl) -> Router {
    let credentials = format!("{}:{}", mbus.user, mbus.password);
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    );
    let app = App {
        agent,
        expected: Arc::new(expected.into_bytes()),
    };
    Router::new()
        .route("/agent", post(message))
        .route("/blobs/{*path}", get(get_blob).put(put_blob))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BLOB))
        .layer(from_fn_with_state(app.clone(), authenticate))
        .with_state(app)
}

/// Binds the mbus address.
///
/// # Errors
/// When the address is taken or cannot be bound.
pub async fn bind(mbus: &MbusUrl) -> std::io::Result<TcpListener> {
    TcpListener::bind((mbus.host.as_str(), mbus.port)).await
}

/// Serves the agent on `listener` until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    agent: Arc<VmAgent>,
    mbus: &MbusUrl,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let app = router(agent, mbus);
    loop {
        let (stream, peer): (_, SocketAddr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = async { let _ = stop.wait_for(|s| *s).await; } => return,
        };
        let (acceptor, service) = (acceptor.clone(), TowerToHyperService::new(app.clone()));
        tokio::spawn(async move {
            let handshake = acceptor.accept(stream);
            let Ok(Ok(tls)) =
                tokio::time::timeout(std::time::Duration::from_secs(10), handshake).await
            else {
                tracing::debug!(%peer, "TLS handshake failed");
                return;
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service);
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
