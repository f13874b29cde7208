//! The reqwest clients for one endpoint and the request loop around them.

use std::time::Duration;

use reqwest::header::ACCEPT;
use reqwest::redirect::Policy;
use reqwest::{Certificate, Client, Method, RequestBuilder, Response, Url};

use super::answer::Answer;
use super::classify::{chain, describe, transport_error};
use super::effect::Effect;
use super::redirect::same_origin;
use fleet_rollout::RequestLimiter;
use fleet_rollout::inventory::InventoryError;

/// Larger answers are refused: the biggest legitimate one is a fleet listing or a
/// manifest, and a server that streams without end must not exhaust our memory.
pub const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// Upper bound for establishing a connection; see [`connect_timeout`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how to connect, as the configuration gives it.
#[derive(Clone, Copy)]
pub struct Endpoint<'a> {
    /// `http(s)://host[:port][/prefix]`.
    pub url: &'a str,
    /// PEM; when given, only these certificates are trusted, not the platform's roots,
    /// because an operator who names a CA means that one.
    pub ca: Option<&'a str>,
    pub skip_ssl_validation: bool,
    /// Per request, from connecting to the last byte of the answer; zero means none, as
    /// in the ODB errands' `request_timeout`.
    pub timeout: Duration,
    /// The run's limiter: every request takes a token.
    pub limiter: &'a RequestLimiter,
}

/// One request's method, URL and effect; the caller adds headers and body per attempt.
#[derive(Debug, Clone)]
pub struct Call {
    method: Method,
    url: Url,
    effect: Effect,
}

impl Call {
    pub fn get(url: Url) -> Call {
        Call {
            method: Method::GET,
            url,
            effect: Effect::Read,
        }
    }

    /// A request that is not a GET but may be repeated, like a token grant.
    pub fn read(method: Method, url: Url) -> Call {
        Call {
            method,
            url,
            effect: Effect::Read,
        }
    }

    pub fn write(method: Method, url: Url) -> Call {
        Call {
            method,
            url,
            effect: Effect::Write,
        }
    }

    /// `METHOD /path` for messages: never the query, which may carry opaque operation
    /// data, and never the host's user info.
    pub fn what(&self) -> String {
        format!("{} {}", self.method, self.url.path())
    }
}

/// The clients for one endpoint. GETs go through a client that follows redirects back to
/// the endpoint; everything else through one that follows none, so that a director's
/// "303 see /tasks/N" reaches the adapter and a trigger is never re-sent as a GET or
/// repeated by a 307.
pub struct HttpClient {
    base: Url,
    follow: Client,
    direct: Client,
    timeout: Option<Duration>,
    limiter: RequestLimiter,
}

impl HttpClient {
    /// # Errors
    /// Permanent errors for a URL that is not http(s), a CA that is not PEM, or a TLS
    /// setup that reqwest refuses.
    pub fn new(endpoint: &Endpoint<'_>) -> Result<HttpClient, InventoryError> {
        install_crypto_provider();
        let base = Url::parse(endpoint.url).map_err(|e| {
            InventoryError::permanent(format!("`{}` is not a valid URL: {e}", endpoint.url))
        })?;
        if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
            return Err(InventoryError::permanent(format!(
                "`{}` is not an http:// or https:// URL",
                endpoint.url
            )));
        }
        let origin = base.origin().ascii_serialization();
        let certificates = match endpoint.ca {
            Some(pem) => Some(Certificate::from_pem_bundle(pem.as_bytes()).map_err(|e| {
                InventoryError::permanent(format!(
                    "the CA given for {origin} is not usable: {}",
                    describe(&chain(&e))
                ))
            })?),
            None => None,
        };
        let timeout = (!endpoint.timeout.is_zero()).then_some(endpoint.timeout);
        let build = |policy: Policy| -> Result<Client, InventoryError> {
            let mut builder = Client::builder()
                .redirect(policy)
                .connect_timeout(connect_timeout(timeout));
            if let Some(limit) = timeout {
                builder = builder.timeout(limit);
            }
            if let Some(certificates) = &certificates {
                builder = builder.tls_certs_only(certificates.iter().cloned());
            }
            if endpoint.skip_ssl_validation {
                builder = builder.tls_danger_accept_invalid_certs(true);
            }
            builder.build().map_err(|e| {
                InventoryError::permanent(format!(
                    "cannot set up HTTPS for {origin}: {}",
                    describe(&chain(&e))
                ))
            })
        };
        Ok(HttpClient {
            follow: build(same_origin(base.clone()))?,
            direct: build(Policy::none())?,
            base,
            timeout,
            limiter: endpoint.limiter.clone(),
        })
    }

    /// The endpoint's URL with `path` (already percent-encoded, starting with `/`) after
    /// its own path prefix.
    pub fn url(&self, path: &str) -> Url {
        append_path(&self.base, path)
    }

    /// Sends the request once, after taking a token of the run's limiter. Retries are
    /// the engine's alone (one layer, each attempt paced): a read that fails transiently
    /// (a transport fault, a 5xx, a 429) comes back as such, and a write is never
    /// repeated here. `build` adds headers and body.
    ///
    /// Every status comes back as an [`Answer`], so that an adapter can give meaning to
    /// 404 or 409 on its routes; the adapter turns the statuses it does not expect into
    /// an error with [`Answer::failure`].
    ///
    /// # Errors
    /// The request got no complete answer (see the `classify` module for its kind), or
    /// the answer is above [`BODY_LIMIT`].
    pub async fn send<F>(&self, call: &Call, build: F) -> Result<Answer, InventoryError>
    where
        F: Fn(RequestBuilder) -> RequestBuilder + Send + Sync,
    {
        self.limiter.acquire().await;
        self.attempt(call, &build).await
    }

    async fn attempt<F>(&self, call: &Call, build: &F) -> Result<Answer, InventoryError>
    where
        F: Fn(RequestBuilder) -> RequestBuilder + Sync,
    {
        let client = if call.method == Method::GET {
            &self.follow
        } else {
            &self.direct
        };
        let what = call.what();
        let request = client
            .request(call.method.clone(), call.url.clone())
            .header(ACCEPT, "application/json");
        let mut response = build(request)
            .send()
            .await
            .map_err(|e| transport_error(e, call.effect, &what, &call.url, self.timeout))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = match read_capped(&mut response, BODY_LIMIT).await {
            Ok(body) => body,
            Err(BodyFailure::Transport(e)) => {
                return Err(transport_error(
                    e,
                    call.effect,
                    &what,
                    &call.url,
                    self.timeout,
                ));
            }
            Err(BodyFailure::TooLarge) => {
                // A trigger the server accepted has started even if we cannot read the
                // answer; only the instance, read back, can say what runs now.
                let accepted = status.is_success() || status.is_redirection();
                let message = format!(
                    "{what}: the answer ({status}) is larger than the limit of {} MiB",
                    BODY_LIMIT / (1024 * 1024)
                );
                return Err(if call.effect == Effect::Write && accepted {
                    InventoryError::ambiguous(message)
                } else {
                    InventoryError::permanent(message)
                });
            }
        };
        Ok(Answer::new(status, headers, body, what, call.effect))
    }
}

/// `base` with `path` (percent-encoded, starting with `/`) after its path prefix; query
/// and fragment of `base` are dropped.
pub fn append_path(base: &Url, path: &str) -> Url {
    let mut url = base.clone();
    let prefix = base.path().trim_end_matches('/');
    url.set_path(&format!("{prefix}{path}"));
    url.set_query(None);
    url.set_fragment(None);
    url
}

/// Shorter than the request timeout so that a connect that cannot finish fails as a
/// connect error, which proves the request never left, instead of racing the request
/// timeout and surfacing as a timeout of unknown effect.
fn connect_timeout(timeout: Option<Duration>) -> Duration {
    match timeout {
        Some(limit) => CONNECT_TIMEOUT.min(limit / 2),
        None => CONNECT_TIMEOUT,
    }
}

enum BodyFailure {
    TooLarge,
    Transport(reqwest::Error),
}

async fn read_capped(response: &mut Response, limit: usize) -> Result<Vec<u8>, BodyFailure> {
    let limit_bytes = u64::try_from(limit).unwrap_or(u64::MAX);
    if response
        .content_length()
        .is_some_and(|length| length > limit_bytes)
    {
        return Err(BodyFailure::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyFailure::Transport)? {
        if body.len() + chunk.len() > limit {
            return Err(BodyFailure::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// reqwest is built without a crypto provider of its own, so that the whole build uses
/// ring (no C toolchain for aws-lc); rustls then needs the process default set before the
/// first client. Another part of the process may have set it already, which is as good.
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_goes_after_the_endpoints_prefix() {
        let base = Url::parse("https://broker.example:3000/prefix/").unwrap();
        assert_eq!(
            append_path(&base, "/mgmt/service_instances").as_str(),
            "https://broker.example:3000/prefix/mgmt/service_instances"
        );
        let bare = Url::parse("https://director.example:25555").unwrap();
        assert_eq!(
            append_path(&bare, "/deployments/a%20b/jobs/*").as_str(),
            "https://director.example:25555/deployments/a%20b/jobs/*"
        );
    }

    #[test]
    fn the_connect_timeout_stays_below_the_request_timeout() {
        assert_eq!(
            connect_timeout(Some(Duration::from_secs(120))),
            CONNECT_TIMEOUT
        );
        assert_eq!(
            connect_timeout(Some(Duration::from_secs(4))),
            Duration::from_secs(2)
        );
        assert_eq!(connect_timeout(None), CONNECT_TIMEOUT);
    }

    #[test]
    fn a_call_names_method_and_path_but_not_the_query() {
        let url = Url::parse("https://b.example/v2/x/last_operation?operation=%7B%7D").unwrap();
        assert_eq!(Call::get(url).what(), "GET /v2/x/last_operation");
    }

    #[test]
    fn a_url_that_is_not_http_is_refused() {
        let endpoint = Endpoint {
            url: "ftp://broker.example",
            ca: None,
            skip_ssl_validation: false,
            timeout: Duration::from_secs(1),
            limiter: &RequestLimiter::unlimited(),
        };
        assert!(HttpClient::new(&endpoint).is_err());
    }

    #[test]
    fn a_ca_that_is_not_pem_is_refused() {
        let endpoint = Endpoint {
            url: "https://broker.example",
            ca: Some("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"),
            skip_ssl_validation: false,
            timeout: Duration::from_secs(1),
            limiter: &RequestLimiter::unlimited(),
        };
        assert!(HttpClient::new(&endpoint).is_err());
    }
}
