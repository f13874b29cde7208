//! Per-request limits: body size and time. Connection limits live in the listener.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::rejection::{Flavor, rejection};

#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub flavor: Flavor,
    pub max_body_bytes: usize,
    pub timeout: Duration,
}

/// Refuses a declared body above the limit before reading it; a body without a declared
/// length is cut off at the limit by the router's body limit. Answers 408 when the
/// handler takes longer than the timeout.
pub async fn enforce(
    State(limits): State<RequestLimits>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes as u64) {
        return rejection(
            limits.flavor,
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the request body is larger than the limit of {} bytes",
                limits.max_body_bytes
            ),
        );
    }
    match tokio::time::timeout(limits.timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => rejection(
            limits.flavor,
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "the request took longer than the limit of {}",
                crate::config::format_duration(limits.timeout)
            ),
        ),
    }
}
