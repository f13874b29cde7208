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
                humantime::format_duration(limits.timeout)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::middleware::from_fn_with_state;
    use axum::routing::post;
    use tower::ServiceExt;

    use super::*;

    fn app() -> Router {
        let limits = RequestLimits {
            flavor: Flavor::Director,
            max_body_bytes: 1024,
            timeout: Duration::from_secs(60),
        };
        Router::new()
            .route(
                "/slow",
                post(|| async {
                    tokio::time::sleep(Duration::from_secs(120)).await;
                    "late"
                }),
            )
            .layer(from_fn_with_state(limits, enforce))
    }

    async fn body_text(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_running_past_the_timeout_is_answered_408() {
        let request = Request::post("/slow").body(Body::empty()).unwrap();
        let response = app().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
        assert!(
            body_text(response)
                .await
                .contains("longer than the limit of 1m")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_declared_body_above_the_limit_is_refused_before_it_is_read() {
        let request = Request::post("/slow")
            .header(header::CONTENT_LENGTH, "4096")
            .body(Body::from(vec![b'x'; 4096]))
            .unwrap();
        let response = app().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(body_text(response).await.contains("1024 bytes"));
    }
}
