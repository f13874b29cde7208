//! Per-request limits: body size and time. Connection limits live in the listener.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use http_body_util::Limited;

use super::linger::lingering;
use super::rejection::{Flavor, rejection};

#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub flavor: Flavor,
    pub max_body_bytes: usize,
    pub timeout: Duration,
    /// For uploads (a release tarball): larger bodies that take longer to send.
    pub max_upload_bytes: usize,
    pub upload_timeout: Duration,
}

/// The requests that upload an artifact rather than send a document.
fn is_upload(request: &Request) -> bool {
    request.method() == Method::POST && request.uri().path() == "/releases"
}

/// Wraps `router` in the limits: a body above its limit is refused, before it is read
/// when its length is declared, else where it crosses the limit; a request running past
/// its time is answered 408. Uploads have their own limits. Answers are in the API's
/// error shape, saying which limit.
pub fn apply(router: Router, limits: RequestLimits) -> Router {
    router
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(from_fn_with_state(limits, bound))
}

async fn bound(State(limits): State<RequestLimits>, request: Request, next: Next) -> Response {
    let (max, timeout) = if is_upload(&request) {
        (limits.max_upload_bytes, limits.upload_timeout)
    } else {
        (limits.max_body_bytes, limits.timeout)
    };
    // The connection is closed after the answer, so that no client sends its next request
    // on it; what is left of the body is read on for a while first (see `linger`).
    let too_large = || {
        let mut refused = rejection(
            limits.flavor,
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the request body is larger than the limit of {max} bytes"),
        );
        refused.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        refused
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        drop(lingering(request.into_body()));
        return too_large();
    }
    let request = request.map(|body| Body::new(Limited::new(lingering(body), max)));
    let response = match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            return rejection(
                limits.flavor,
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the request took longer than the limit of {}",
                    humantime::format_duration(timeout)
                ),
            );
        }
    };
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    // An extractor that met the limit answers 413 in its own words.
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE && !json {
        return too_large();
    }
    response
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
            max_upload_bytes: 4096,
            upload_timeout: Duration::from_secs(600),
        };
        let slow = |body: String| async move {
            tokio::time::sleep(Duration::from_secs(120)).await;
            body
        };
        apply(
            Router::new().route("/slow", post(slow)).route(
                "/releases",
                post(|body: Body| async move {
                    tokio::time::sleep(Duration::from_secs(120)).await;
                    let bytes = axum::body::to_bytes(body, usize::MAX).await;
                    match bytes {
                        Ok(b) => (StatusCode::OK, b.len().to_string()),
                        Err(_) => (StatusCode::PAYLOAD_TOO_LARGE, String::new()),
                    }
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
    async fn an_upload_has_its_own_larger_limits() {
        let request = Request::post("/releases")
            .body(Body::from(vec![b'x'; 3000]))
            .unwrap();
        let response = app().oneshot(request).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "slower and larger than a document may be"
        );
        assert_eq!(body_text(response).await, "3000");
        let over = Request::post("/releases")
            .body(Body::from(vec![b'x'; 5000]))
            .unwrap();
        let response = app().oneshot(over).await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(body_text(response).await.contains("4096 bytes"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_declared_body_above_the_limit_is_refused_before_it_is_read() {
        let request = Request::post("/slow")
            .header(header::CONTENT_LENGTH, "4096")
            .body(Body::from(vec![b'x'; 4096]))
            .unwrap();
        let response = app().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(response.headers()[header::CONNECTION], "close");
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
