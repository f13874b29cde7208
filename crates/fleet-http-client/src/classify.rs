//! What a failed request means for the engine: may it be retried, and may it have had an
//! effect?
//!
//! reqwest reports a failure before any byte of the request left (refused connection,
//! DNS, TLS handshake, connect timeout) as `is_connect()`. Everything else (a reset or a
//! timeout once connected, a broken answer body) may happen after the server received the
//! request, and a plain `is_timeout()` does not say when the deadline struck. So a read
//! fails transiently in every transport case, since reading twice harms nothing, while a
//! trigger is transient only when `is_connect()` proves it never left, and ambiguous
//! otherwise. The connect timeout is kept shorter than the request timeout so that a slow
//! connect surfaces as a connect error rather than as an ambiguous timeout.

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use reqwest::{StatusCode, Url};

use super::effect::Effect;
use fleet_rollout::inventory::{ErrorKind, InventoryError};

/// How an answer's status must be treated before the adapter looks at it, `None` when
/// the adapter decides (success, redirects and client errors carry meaning per route).
///
/// A 5xx on a read is worth another try. On a trigger the server answered and said that
/// it failed, except that a gateway's 502 or 504 speaks for a server that may have
/// received the request and still be working on it. A 429 means the request was turned
/// away before anything happened.
pub fn status_kind(status: StatusCode, effect: Effect) -> Option<ErrorKind> {
    if status == StatusCode::TOO_MANY_REQUESTS {
        return Some(ErrorKind::Transient);
    }
    if !status.is_server_error() {
        return None;
    }
    Some(match effect {
        Effect::Read => ErrorKind::Transient,
        Effect::Write
            if matches!(
                status,
                StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT
            ) =>
        {
            ErrorKind::Ambiguous
        }
        Effect::Write => ErrorKind::Permanent,
    })
}

/// What reqwest says about a transport failure, reduced to what decides its kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// The connection was never established: the request certainly did not leave.
    pub connect: bool,
    /// The server's certificate was rejected; retrying cannot change that.
    pub certificate: bool,
    /// The request could not be built, or a redirect was refused: a fault of ours or of
    /// the server's configuration, not of the network.
    pub refused: bool,
}

pub fn transport_kind(effect: Effect, facts: Facts) -> ErrorKind {
    if facts.certificate || facts.refused {
        return ErrorKind::Permanent;
    }
    match effect {
        Effect::Read => ErrorKind::Transient,
        Effect::Write if facts.connect => ErrorKind::Transient,
        Effect::Write => ErrorKind::Ambiguous,
    }
}

/// The error for a request that got no complete answer. `what` is `METHOD /path`; the URL
/// is used for its origin only, so that neither a query nor credentials reach a message.
pub fn transport_error(
    error: reqwest::Error,
    effect: Effect,
    what: &str,
    url: &Url,
    timeout: Option<Duration>,
) -> InventoryError {
    let error = error.without_url();
    let origin = url.origin().ascii_serialization();
    let errors = chain(&error);
    let problem = certificate_problem(&errors);
    let facts = Facts {
        connect: error.is_connect(),
        certificate: problem.is_some(),
        refused: error.is_builder() || error.is_redirect(),
    };
    let kind = transport_kind(effect, facts);
    let cause = describe(&errors);
    let mut message = if let Some(problem) = problem {
        format!(
            "{what}: TLS certificate of {origin} not trusted: {problem} (give the CA that \
             signed it in `ca`, or set `skip_ssl_validation` if you accept the risk)"
        )
    } else if facts.connect {
        format!("{what}: cannot connect to {origin}: {cause}")
    } else if error.is_timeout() {
        match timeout {
            Some(limit) => format!(
                "{what}: {origin} did not answer within {}",
                humantime::format_duration(limit)
            ),
            None => format!("{what}: {origin} did not answer in time: {cause}"),
        }
    } else {
        format!("{what}: request to {origin} failed: {cause}")
    };
    if kind == ErrorKind::Ambiguous {
        message.push_str("; the request may have reached the server");
    }
    InventoryError { kind, message }
}

/// The errors behind `error`, outermost first. `io::Error` hides the error it wraps from
/// `source()` (it returns the wrapped error's source instead), and TLS failures arrive
/// wrapped in one, so it is opened explicitly.
pub fn chain<'a>(error: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut errors: Vec<&'a (dyn StdError + 'static)> = Vec::new();
    let mut next = Some(error);
    while let Some(current) = next {
        errors.push(current);
        if errors.len() >= 16 {
            break;
        }
        next = match current
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => current.source(),
        };
    }
    errors
}

/// The rustls verdict on the server's certificate, if that is why the request failed.
fn certificate_problem(chain: &[&(dyn StdError + 'static)]) -> Option<String> {
    chain
        .iter()
        .find_map(|error| match error.downcast_ref::<rustls::Error>() {
            Some(tls @ rustls::Error::InvalidCertificate(_)) => Some(tls.to_string()),
            _ => None,
        })
}

/// The causes joined into one line. The outermost error is reqwest's generic "error
/// sending request", which the message already says in its own words; an `io::Error` and
/// the error it wraps print the same text, which is said once.
pub fn describe(chain: &[&(dyn StdError + 'static)]) -> String {
    let causes = if chain.len() > 1 { &chain[1..] } else { chain };
    let mut parts: Vec<String> = Vec::new();
    for cause in causes {
        let text = cause.to_string();
        if parts.last() != Some(&text) && !text.is_empty() {
            parts.push(text);
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_error_on_a_read_is_retried_and_on_a_trigger_is_final() {
        let status = StatusCode::INTERNAL_SERVER_ERROR;
        assert_eq!(
            status_kind(status, Effect::Read),
            Some(ErrorKind::Transient)
        );
        assert_eq!(
            status_kind(status, Effect::Write),
            Some(ErrorKind::Permanent)
        );
    }

    #[test]
    fn a_gateway_timeout_on_a_trigger_may_have_reached_the_server() {
        for status in [StatusCode::GATEWAY_TIMEOUT, StatusCode::BAD_GATEWAY] {
            assert_eq!(
                status_kind(status, Effect::Write),
                Some(ErrorKind::Ambiguous)
            );
            assert_eq!(
                status_kind(status, Effect::Read),
                Some(ErrorKind::Transient)
            );
        }
    }

    #[test]
    fn too_many_requests_is_transient_for_reads_and_triggers() {
        for effect in [Effect::Read, Effect::Write] {
            assert_eq!(
                status_kind(StatusCode::TOO_MANY_REQUESTS, effect),
                Some(ErrorKind::Transient)
            );
        }
    }

    #[test]
    fn success_redirects_and_client_errors_are_left_to_the_adapter() {
        for status in [
            StatusCode::OK,
            StatusCode::ACCEPTED,
            StatusCode::NO_CONTENT,
            StatusCode::FOUND,
            StatusCode::NOT_FOUND,
            StatusCode::CONFLICT,
            StatusCode::GONE,
            StatusCode::UNPROCESSABLE_ENTITY,
        ] {
            assert_eq!(status_kind(status, Effect::Write), None, "{status}");
        }
    }

    #[test]
    fn a_trigger_that_never_connected_is_transient() {
        let facts = Facts {
            connect: true,
            ..Facts::default()
        };
        assert_eq!(transport_kind(Effect::Write, facts), ErrorKind::Transient);
        assert_eq!(transport_kind(Effect::Read, facts), ErrorKind::Transient);
    }

    #[test]
    fn a_trigger_that_failed_once_connected_is_ambiguous_but_a_read_is_transient() {
        let facts = Facts::default();
        assert_eq!(transport_kind(Effect::Write, facts), ErrorKind::Ambiguous);
        assert_eq!(transport_kind(Effect::Read, facts), ErrorKind::Transient);
    }

    #[test]
    fn certificate_and_configuration_faults_are_permanent() {
        for facts in [
            Facts {
                connect: true,
                certificate: true,
                ..Facts::default()
            },
            Facts {
                refused: true,
                ..Facts::default()
            },
        ] {
            assert_eq!(transport_kind(Effect::Read, facts), ErrorKind::Permanent);
            assert_eq!(transport_kind(Effect::Write, facts), ErrorKind::Permanent);
        }
    }

    #[test]
    fn a_certificate_error_wrapped_in_io_errors_is_found() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let wrapped = io::Error::other(io::Error::new(io::ErrorKind::InvalidData, tls));
        let errors = chain(&wrapped);
        let problem = certificate_problem(&errors).expect("the rustls error is found");
        assert!(problem.contains("invalid peer certificate"), "{problem}");
    }

    #[test]
    fn other_io_errors_are_no_certificate_problem() {
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
        assert_eq!(certificate_problem(&chain(&refused)), None);
    }

    #[test]
    fn repeated_cause_texts_are_said_once() {
        let inner = io::Error::new(io::ErrorKind::ConnectionReset, "connection reset");
        let outer = io::Error::other(inner);
        let top = io::Error::other(outer);
        assert_eq!(describe(&chain(&top)), "connection reset");
    }
}
