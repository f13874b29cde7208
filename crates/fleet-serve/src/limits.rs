//! Per-request limits: body size and time. Connection limits live in the listener.

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use super::rejection::{Flavor, rejection};

#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub flavor: Flavor,
    pub max_body_bytes: usize,
    pub timeout: Duration,
}

/// Wraps `router` in the limits: tower-http's body limit (a declared length above it is
/// refused before the body is read, an undeclared one is cut off there) and timeout, and
/// outside them [`shape`], which gives their bare answers the API's error shape.
pub fn apply(router: Router, limits: RequestLimits) -> Router {
    router
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(RequestBodyLimitLayer::new(limits.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.timeout,
        ))
        .layer(from_fn_with_state(limits, shape))
}

/// A 408 or 413 that is not already the API's JSON came from a limit: it is answered in
/// the API's own error shape, saying which limit.
async fn shape(State(limits): State<RequestLimits>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    match response.status() {
        StatusCode::REQUEST_TIMEOUT if !json => rejection(
            limits.flavor,
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "the request took longer than the limit of {}",
                humantime::format_duration(limits.timeout)
            ),
        ),
        StatusCode::PAYLOAD_TOO_LARGE if !json => rejection(
            limits.flavor,
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the request body is larger than the limit of {} bytes",
                limits.max_body_bytes
            ),
        ),
        _ => response,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::Request;
    use axum::routing::post;
    use tower::ServiceExt;

    use super::*;

    fn app() -> Router {
        let limits = RequestLimits {
            flavor: Flavor::Director,
            max_body_bytes: 1024,
            timeout: Duration::from_secs(60),
        };
        apply(
            Router::new().route(
                "/slow",
                post(|body: String| async move {
                    tokio::time::sleep(Duration::from_secs(120)).await;
                    body
                }),
            ),
            limits,
        )
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

    #[tokio::test(start_paused = true)]
    async fn an_undeclared_body_above_the_limit_is_refused_in_the_api_shape() {
        let request = Request::post("/slow")
            .body(Body::from(vec![b'x'; 1400]))
            .unwrap();
        let response = app().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let text = body_text(response).await;
        assert!(
            text.contains("\"code\"") && text.contains("1024 bytes"),
            "{text}"
        );
    }
}
