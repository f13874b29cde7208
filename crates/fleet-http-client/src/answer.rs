//! A server's complete answer and the readings both adapters need from it.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, LOCATION, RETRY_AFTER};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::classify::status_kind;
use super::effect::Effect;
use fleet_rollout::inventory::{ErrorKind, InventoryError};

/// How much of a server's error text goes into a message: enough for a BOSH error
/// description, not a whole HTML error page.
const DETAIL_CHARS: usize = 300;

/// Deliberately not `Debug`: the body may hold a token or a manifest with credentials.
pub struct Answer {
    pub status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
    /// `METHOD /path`, for messages.
    what: String,
    effect: Effect,
}

impl Answer {
    pub(super) fn new(
        status: StatusCode,
        headers: HeaderMap,
        body: Vec<u8>,
        what: String,
        effect: Effect,
    ) -> Answer {
        Answer {
            status,
            headers,
            body,
            what,
            effect,
        }
    }

    pub fn code(&self) -> u16 {
        self.status.as_u16()
    }

    /// # Errors
    /// A permanent error naming the request, the status and serde's line and column: a
    /// server that answers malformed JSON will answer it again.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, InventoryError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            InventoryError::permanent(format!(
                "{}: the answer ({}) is not the expected JSON: {e}",
                self.what, self.status
            ))
        })
    }

    /// The body as text, for answers that are not JSON (a task's output).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON, or `{}` when it is empty or not JSON: for opaque data that is
    /// passed back to the server as it is.
    pub fn json_or_empty(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| Value::Object(Default::default()))
    }

    /// `Retry-After` in seconds; the HTTP-date form is not used by brokers and is ignored.
    pub fn retry_after(&self) -> Option<Duration> {
        let value = self.headers.get(RETRY_AFTER)?.to_str().ok()?;
        value.trim().parse::<u64>().ok().map(Duration::from_secs)
    }

    pub fn location(&self) -> Option<&str> {
        self.headers.get(LOCATION)?.to_str().ok()
    }

    /// The broker's CamelCase `error` code, as in `MaintenanceUpdatesBlocked`: from the
    /// JSON body, or from the `X-Broker-Error` header of an answer that has no body (204).
    pub fn error_code(&self) -> Option<String> {
        let from_body = serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|body| body.get("error")?.as_str().map(str::to_string));
        from_body.or_else(|| {
            let header = self.headers.get("x-broker-error")?.to_str().ok()?;
            Some(header.trim().to_string())
        })
    }

    /// The server's own words about a failure: `error`/`code` and `description` (broker
    /// and director) or `error_description` (UAA) from a JSON body, else the start of the
    /// text body.
    pub fn detail(&self) -> Option<String> {
        detail(&self.body)
    }

    /// The error for a status the route does not expect. Its kind follows the status (a
    /// 5xx on a read is transient, see `classify::status_kind`), else it is permanent.
    pub fn failure(&self) -> InventoryError {
        let kind = status_kind(self.status, self.effect).unwrap_or(ErrorKind::Permanent);
        let mut message = format!("{} answered {}", self.what, self.status);
        if let Some(detail) = self.detail() {
            message.push_str(": ");
            message.push_str(&detail);
        }
        match self.status {
            StatusCode::UNAUTHORIZED => message.push_str(" (check the configured credentials)"),
            StatusCode::FORBIDDEN => {
                message.push_str(" (the configured user lacks the permission)");
            }
            _ => {}
        }
        if kind == ErrorKind::Ambiguous {
            message.push_str("; the request may have reached the server");
        }
        InventoryError { kind, message }
    }

    /// `METHOD /path`, for adapters that phrase their own messages.
    pub fn what(&self) -> &str {
        &self.what
    }
}

fn detail(body: &[u8]) -> Option<String> {
    if let Ok(json) = serde_json::from_slice::<Value>(body) {
        let text = |key: &str| json.get(key).and_then(Value::as_str).map(str::trim);
        let label = match (text("error"), json.get("code").and_then(Value::as_i64)) {
            (Some(error), _) if !error.is_empty() => Some(error.to_string()),
            (_, Some(code)) => Some(format!("error {code}")),
            _ => None,
        };
        let description = text("description")
            .or_else(|| text("error_description"))
            .filter(|d| !d.is_empty());
        let joined = match (label, description) {
            (Some(label), Some(description)) => format!("{label}: {description}"),
            (Some(label), None) => label,
            (None, Some(description)) => description.to_string(),
            (None, None) => return None,
        };
        return Some(shorten(&joined));
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| shorten(text))
}

fn shorten(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    let mut short: String = line.chars().take(DETAIL_CHARS).collect();
    if short.len() < line.len() || text.lines().nth(1).is_some() {
        short.push_str(" ...");
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn answer(status: u16, body: &str, effect: Effect) -> Answer {
        Answer::new(
            StatusCode::from_u16(status).unwrap(),
            HeaderMap::new(),
            body.as_bytes().to_vec(),
            "PATCH /mgmt/service_instances/a".to_string(),
            effect,
        )
    }

    #[test]
    fn a_broker_error_body_gives_code_and_description() {
        let a = answer(
            422,
            r#"{"error":"MaintenanceUpdatesBlocked","description":"the owner said no"}"#,
            Effect::Write,
        );
        assert_eq!(a.error_code().as_deref(), Some("MaintenanceUpdatesBlocked"));
        assert_eq!(
            a.detail().as_deref(),
            Some("MaintenanceUpdatesBlocked: the owner said no")
        );
    }

    #[test]
    fn a_director_error_body_gives_its_numeric_code() {
        let a = answer(
            404,
            r#"{"code":70000,"description":"Deployment 'x' doesn't exist"}"#,
            Effect::Read,
        );
        assert_eq!(
            a.detail().as_deref(),
            Some("error 70000: Deployment 'x' doesn't exist")
        );
        assert_eq!(a.error_code(), None);
    }

    #[test]
    fn a_text_body_gives_its_first_line() {
        let a = answer(401, "Not authorized: '/deployments'\n", Effect::Read);
        assert_eq!(
            a.detail().as_deref(),
            Some("Not authorized: '/deployments'")
        );
        let failure = a.failure();
        assert_eq!(failure.kind, ErrorKind::Permanent);
        assert!(failure.message.contains("401 Unauthorized"), "{failure}");
        assert!(failure.message.contains("credentials"), "{failure}");
    }

    #[test]
    fn a_long_body_is_shortened() {
        let long = "x".repeat(1000);
        let detail = answer(500, &long, Effect::Read).detail().unwrap();
        assert!(detail.len() < 400, "{}", detail.len());
        assert!(detail.ends_with(" ..."));
    }

    #[test]
    fn the_failure_kind_follows_status_and_effect() {
        assert_eq!(
            answer(500, "", Effect::Read).failure().kind,
            ErrorKind::Transient
        );
        assert_eq!(
            answer(500, "", Effect::Write).failure().kind,
            ErrorKind::Permanent
        );
        assert_eq!(
            answer(504, "", Effect::Write).failure().kind,
            ErrorKind::Ambiguous
        );
        assert_eq!(
            answer(400, "", Effect::Read).failure().kind,
            ErrorKind::Permanent
        );
    }

    #[test]
    fn malformed_json_names_the_position() {
        let a = answer(200, "[{\"a\": }]", Effect::Read);
        let error = a.json::<Value>().unwrap_err();
        assert_eq!(error.kind, ErrorKind::Permanent);
        assert!(error.message.contains("line 1 column"), "{error}");
    }

    #[test]
    fn an_empty_or_non_json_body_is_an_empty_object() {
        assert_eq!(
            answer(202, "", Effect::Write).json_or_empty(),
            serde_json::json!({})
        );
        assert_eq!(
            answer(202, "accepted", Effect::Write).json_or_empty(),
            serde_json::json!({})
        );
        assert_eq!(
            answer(202, r#"{"BoshTaskID":7}"#, Effect::Write).json_or_empty(),
            serde_json::json!({"BoshTaskID": 7})
        );
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static(" 15 "));
        let a = Answer::new(
            StatusCode::OK,
            headers,
            Vec::new(),
            "GET /".into(),
            Effect::Read,
        );
        assert_eq!(a.retry_after(), Some(Duration::from_secs(15)));
        assert_eq!(answer(200, "", Effect::Read).retry_after(), None);
    }
}
