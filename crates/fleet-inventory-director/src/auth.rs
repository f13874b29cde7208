//! Signing in to a director: basic credentials on every request, or a UAA token from
//! client credentials, fetched from the UAA the director's `/info` names, kept, and
//! fetched again once when the director answers 401.

use reqwest::{Method, RequestBuilder};
use tokio::sync::Mutex;

use super::wire::{Info, Token};
use crate::settings::DirectorAuth;
use fleet_http_client::{Call, Endpoint, HttpClient};
use fleet_rollout::inventory::InventoryError;
use fleet_secret::Secret;

pub struct Auth {
    kind: DirectorAuth,
    /// `Authorization` header value; the token is never logged.
    token: Mutex<Option<Secret>>,
}

impl Auth {
    pub fn new(kind: DirectorAuth) -> Auth {
        Auth {
            kind,
            token: Mutex::new(None),
        }
    }

    pub fn is_uaa(&self) -> bool {
        matches!(self.kind, DirectorAuth::Uaa { .. })
    }

    /// The header for the next request; with UAA, a token fetched when none is kept.
    pub async fn header(
        &self,
        director: &HttpClient,
        endpoint: &Endpoint<'_>,
    ) -> Result<Secret, InventoryError> {
        match &self.kind {
            DirectorAuth::Basic { username, password } => {
                use base64::Engine;
                let encoded = base64::engine::general_purpose::STANDARD
                    .encode(format!("{username}:{}", password.expose()));
                Ok(Secret::new(format!("Basic {encoded}")))
            }
            DirectorAuth::Uaa {
                client,
                client_secret,
            } => {
                let mut kept = self.token.lock().await;
                if let Some(token) = kept.as_ref() {
                    return Ok(token.clone());
                }
                let token = fetch_token(director, endpoint, client, client_secret).await?;
                *kept = Some(token.clone());
                Ok(token)
            }
        }
    }

    /// Forgets the kept token after a 401, so that the next request fetches a new one.
    pub async fn forget(&self) {
        *self.token.lock().await = None;
    }
}

pub fn authorize(request: RequestBuilder, header: &Secret) -> RequestBuilder {
    request.header(reqwest::header::AUTHORIZATION, header.expose())
}

/// `POST <uaa>/oauth/token` with `grant_type=client_credentials`, the client's
/// credentials as basic authentication, with the director's TLS settings.
async fn fetch_token(
    director: &HttpClient,
    endpoint: &Endpoint<'_>,
    client: &str,
    secret: &Secret,
) -> Result<Secret, InventoryError> {
    let info = director
        .send(&Call::get(director.url("/info")), |r| r)
        .await?;
    if !info.status.is_success() {
        return Err(info.failure());
    }
    let info: Info = info.json()?;
    let uaa_url = info
        .user_authentication
        .filter(|a| a.kind == "uaa")
        .and_then(|a| a.options.url)
        .ok_or_else(|| {
            InventoryError::permanent(
                "the director does not use UAA (its /info names no UAA URL); configure \
                 `director.username` and `director.password` instead",
            )
        })?;
    // The client secret goes to this URL: never in clear text when the director itself
    // is reached over TLS.
    if endpoint.url.starts_with("https://") && !uaa_url.starts_with("https://") {
        return Err(InventoryError::permanent(format!(
            "the director names the UAA `{uaa_url}`, which is not https; the client secret \
             is not sent there"
        )));
    }
    let uaa = HttpClient::new(&Endpoint {
        url: &uaa_url,
        ..*endpoint
    })?;
    let call = Call::read(Method::POST, uaa.url("/oauth/token"));
    let answer = uaa
        .send(&call, |request| {
            request
                .basic_auth(client, Some(secret.expose()))
                .form(&[("grant_type", "client_credentials")])
        })
        .await?;
    if !answer.status.is_success() {
        let mut e = answer.failure();
        e.message = format!(
            "cannot get a UAA token for client `{client}`: {}",
            e.message
        );
        return Err(e);
    }
    let token: Token = answer.json()?;
    let kind = token.token_type.unwrap_or_else(|| "bearer".to_string());
    Ok(Secret::new(format!("{kind} {}", token.access_token)))
}
