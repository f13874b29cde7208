//! HTTP basic authentication in front of both APIs. A refusal says what is missing in the
//! API's own error shape, and never echoes what was sent. A failed login is logged (who
//! it claimed to be and from where, never the password) and slows further attempts from
//! its address (see [`crate::throttle`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use ring::digest;
use subtle::ConstantTimeEq;

use super::clients::ClientAddr;
use super::rejection::{Flavor, rejection};
use super::shared_throttle::SharedFailures;
use super::throttle::LoginThrottle;
use crate::authorize::{self, Decision};
use crate::scopes::{self, Access};
use crate::settings::ServeUser;

/// A signed-in user whose scopes do not allow the request: 403, in the API's shape (the
/// director's code for it, 600000).
fn refused(flavor: Flavor) -> Response {
    match flavor {
        Flavor::Director => (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({"code": 600000, "description": scopes::REFUSED})),
        )
            .into_response(),
        Flavor::Broker => rejection(flavor, StatusCode::FORBIDDEN, scopes::REFUSED),
    }
}

#[derive(Clone)]
pub struct Gate {
    /// Each user with what its scopes allow, read once rather than at every request.
    users: Arc<Vec<(ServeUser, Access)>>,
    flavor: Flavor,
    /// Paths anyone may read: the director's `/info` tells clients how to sign in.
    open: &'static [&'static str],
    throttle: Arc<LoginThrottle>,
    /// The failures other `serve` processes on the database counted, when it is shared.
    shared: Option<Arc<SharedFailures>>,
    /// The director API's director: a team user's requests are decided by its
    /// deployments' teams.
    director: Option<fleet_director::Director>,
}

impl Gate {
    /// Both APIs share one `throttle`: their users are usually the same, so are the
    /// guesses.
    pub fn new(
        users: Vec<ServeUser>,
        flavor: Flavor,
        open: &'static [&'static str],
        throttle: Arc<LoginThrottle>,
    ) -> Self {
        Gate {
            users: Arc::new(
                users
                    .into_iter()
                    .map(|u| {
                        let access = Access::of(&u.scopes, "");
                        (u, access)
                    })
                    .collect(),
            ),
            flavor,
            open,
            throttle,
            shared: None,
            director: None,
        }
    }

    /// This gate, sharing its failed logins with the other `serve` processes on the
    /// database through `shared`.
    pub fn with_shared_failures(mut self, shared: Option<Arc<SharedFailures>>) -> Self {
        self.shared = shared;
        self
    }

    /// This gate, deciding team users' requests by `director`'s deployments, whose
    /// UUID is `uuid`.
    pub fn with_director(mut self, director: fleet_director::Director, uuid: String) -> Self {
        let users = self
            .users
            .iter()
            .map(|(u, _)| (u.clone(), Access::of(&u.scopes, &uuid)))
            .collect();
        self.users = Arc::new(users);
        self.director = Some(director);
        self
    }

    /// The listed user the credentials name, when its password matches, with what it
    /// may do.
    fn admits(&self, authorization: Option<&HeaderValue>) -> Option<(String, Access)> {
        let encoded = authorization.and_then(|v| v.to_str().ok()).and_then(|v| {
            v.strip_prefix("Basic ")
                .or_else(|| v.strip_prefix("basic "))
        })?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (name, password) = decoded.split_once(':')?;
        // Every user is compared, each in constant time, so timing tells nothing.
        let found = self.users.iter().fold(None, |found, (user, access)| {
            let matches = same(user.name.as_bytes(), name.as_bytes())
                & same(user.password.expose().as_bytes(), password.as_bytes());
            if matches { Some(access) } else { found }
        });
        found.map(|access| (name.to_string(), access.clone()))
    }
}

/// Who signed a request in, for handlers that record or report it (the director's
/// `/info` and the tasks a request starts).
#[derive(Clone, Debug)]
pub struct SignedIn(pub String);

/// Equality whose time tells nothing, not even a length: both sides are hashed to the
/// same size first, and the digests compared in constant time.
fn same(a: &[u8], b: &[u8]) -> bool {
    let a = digest::digest(&digest::SHA256, a);
    let b = digest::digest(&digest::SHA256, b);
    bool::from(a.as_ref().ct_eq(b.as_ref()))
}

/// The user name credentials claim: never the password, and not more than a name needs.
fn claimed_user(authorization: Option<&HeaderValue>) -> String {
    authorization
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.get(6..))
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
        .and_then(|d| String::from_utf8(d).ok())
        .and_then(|d| {
            d.split_once(':')
                .map(|(name, _)| name.chars().take(64).collect())
        })
        .unwrap_or_default()
}

pub async fn require(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    let authorization = request.headers().get(header::AUTHORIZATION).cloned();
    let client = request.extensions().get::<ClientAddr>().map(|c| c.0);
    let claimed = claimed_user(authorization.as_ref());
    let known = gate.users.iter().any(|(u, _)| u.name == claimed);
    // Failures as a name that is no user are this process's alone.
    let shared = gate.shared.as_ref().filter(|_| known);
    if let (Some(_), Some(client), Some(shared)) = (&authorization, client, shared) {
        match shared.recent(client.ip(), &claimed).await {
            Ok(Some(failures)) => {
                let now = tokio::time::Instant::now();
                gate.throttle.adopt(client.ip(), &claimed, failures, now);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the failed logins other processes counted cannot be read")
            }
        }
    }
    if let (Some(_), Some(client)) = (&authorization, client) {
        let wait = gate
            .throttle
            .wait(client.ip(), &claimed, tokio::time::Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
    let user = gate.admits(authorization.as_ref());
    if let (Some(_), Some(client)) = (&authorization, client) {
        let failed_before = gate.throttle.failures(client.ip(), &claimed);
        let mut failures = gate.throttle.record(
            client.ip(),
            &claimed,
            user.is_some(),
            tokio::time::Instant::now(),
        );
        if let Some(shared) = shared {
            let counted = if user.is_some() {
                if failed_before > 0 {
                    shared.cleared(client.ip(), &claimed).await.map(|()| 0)
                } else {
                    Ok(0)
                }
            } else {
                shared.failed(client.ip(), &claimed).await
            };
            match counted {
                Ok(counted) if counted > failures => {
                    let now = tokio::time::Instant::now();
                    gate.throttle.adopt(client.ip(), &claimed, counted, now);
                    failures = counted;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "the failed login cannot be shared with other processes")
                }
            }
        }
        if user.is_none() {
            metrics::counter!("fleet_serve_login_failures_total", "api" => gate.flavor.name())
                .increment(1);
            // A name that is no user may be a password typed in the wrong field.
            tracing::warn!(
                target: "fleet_serve::access",
                client = %client,
                user = %if known { claimed.as_str() } else { "(not a user)" },
                path = %request.uri().path(),
                failures,
                "failed login"
            );
        }
    }
    let open = gate.open.contains(&request.uri().path());
    if let Some((user, access)) = user {
        if !open {
            let asked = authorize::Asked::of(&request);
            let decision =
                authorize::decide(gate.flavor, &access, &asked, gate.director.as_ref()).await;
            match decision {
                Decision::Refused => {
                    tracing::warn!(
                        target: "fleet_serve::access",
                        user = %user,
                        method = %request.method(),
                        path = %request.uri().path(),
                        "refused: the user's scopes do not allow it"
                    );
                    return refused(gate.flavor);
                }
                Decision::Allowed { visible, teams } => {
                    if let Some(visible) = visible {
                        request.extensions_mut().insert(visible);
                    }
                    if let Some(teams) = teams {
                        request.extensions_mut().insert(teams);
                    }
                }
            }
        }
        request.extensions_mut().insert(SignedIn(user.clone()));
        let mut response = next.run(request).await;
        response.extensions_mut().insert(SignedIn(user));
        return response;
    }
    if open {
        return next.run(request).await;
    }
    let path = request.uri().path().to_string();
    let mut response = rejection(
        gate.flavor,
        StatusCode::UNAUTHORIZED,
        &format!("Not authorized: '{path}': give a user and password (HTTP basic authentication)"),
    )
    .into_response();
    let realm = match gate.flavor {
        Flavor::Director => "Basic realm=\"BOSH Director\"",
        Flavor::Broker => "Basic realm=\"fleet-updater broker\"",
    };
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(realm));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_secret::Secret;

    fn basic(user: &str, password: &str) -> HeaderValue {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {encoded}")).unwrap()
    }

    #[test]
    fn only_a_listed_user_with_its_password_is_admitted() {
        let gate = Gate::new(
            vec![
                ServeUser::admin("admin", Secret::new("s3cret")),
                ServeUser {
                    name: "auditor".into(),
                    password: Secret::new("r3ad"),
                    scopes: vec!["bosh.read".into()],
                },
            ],
            Flavor::Broker,
            &[],
            Arc::default(),
        );
        let admitted = |user: &str, password: &str| {
            gate.admits(Some(&basic(user, password)))
                .map(|(name, access)| (name, access.admin, access.read))
        };
        assert_eq!(
            admitted("admin", "s3cret"),
            Some(("admin".to_string(), true, false))
        );
        assert_eq!(
            admitted("auditor", "r3ad"),
            Some(("auditor".to_string(), false, true))
        );
        assert_eq!(gate.admits(Some(&basic("auditor", "s3cret"))), None);
        assert_eq!(gate.admits(Some(&basic("admin", "s3cret!"))), None);
        assert_eq!(gate.admits(Some(&basic("admin", "s3cre"))), None);
        assert_eq!(gate.admits(Some(&basic("root", "s3cret"))), None);
        assert_eq!(
            gate.admits(Some(&HeaderValue::from_static("Bearer abc"))),
            None
        );
        assert_eq!(
            gate.admits(Some(&HeaderValue::from_static("Basic !!!"))),
            None
        );
        assert_eq!(gate.admits(None), None);
    }
}
