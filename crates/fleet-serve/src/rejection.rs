//! Refusals made before a request reaches an API (authentication, limits), in the error
//! shape of the API that was asked: the director's `{"code", "description"}` or the
//! broker's `{"error", "description"}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Director,
    Broker,
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
