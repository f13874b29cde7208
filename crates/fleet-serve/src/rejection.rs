//! Refusals made before a request reaches an API (authentication, limits), in the error
//! shape of the API that was asked: the director's `{"code", "description"}` or the
//! broker's `{"error", "description"}`.

use axum::Json;
use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Director,
    Broker,
}

impl Flavor {
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Director => "director",
            Flavor::Broker => "broker",
        }
    }
}

pub fn rejection(flavor: Flavor, status: StatusCode, description: &str) -> Response {
    let body = match flavor {
        // The director's generic error code.
        Flavor::Director => json!({ "code": 100, "description": description }),
        Flavor::Broker => json!({
            "error": status.canonical_reason().unwrap_or("Error").replace(' ', ""),
            "description": description,
        }),
    };
    (status, Json(body)).into_response()
}

/// Puts an error the framework answered on its own (a body that is not UTF-8 or not JSON,
/// an unknown route, a method a route does not take) into the API's error shape, keeping
/// its status and saying what it said. A 416 stays bare: clients tailing a task's output
/// read it as "nothing new".
pub async fn reshape(State(flavor): State<Flavor>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if status.as_u16() < 400 || is_json || status == StatusCode::RANGE_NOT_SATISFIABLE {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = to_bytes(body, 16 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let description = if text.is_empty() {
        status.canonical_reason().unwrap_or("Error").to_string()
    } else {
        text
    };
    let mut reshaped = rejection(flavor, status, &description);
    for name in [
        header::ALLOW,
        header::WWW_AUTHENTICATE,
        header::CONNECTION,
        header::RETRY_AFTER,
    ] {
        if let Some(value) = parts.headers.get(&name) {
            reshaped.headers_mut().insert(name, value.clone());
        }
    }
    reshaped
}
