//! Reading one value of the configuration: secrets, durations, counts, paths, endpoints
//! and certificates, each problem reported with its key; shared by every block's reader.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::duration::parse_positive;
use crate::yaml::{Checker, Node, Value, describe};
use fleet_secret::Secret;

/// A secret string; never echoed: a wrong type is reported by kind only.
pub(super) fn secret(checker: &mut Checker, node: &Node, path: &str) -> Option<Secret> {
    match &node.value {
        Value::Str(s) => Some(Secret::new(s.clone())),
        other => {
            checker.report(
                path,
                node.at,
                format!("must be a string, found {}", other.kind()),
            );
            None
        }
    }
}

pub(super) fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

pub(super) fn duration(checker: &mut Checker, node: &Node, path: &str) -> Option<Duration> {
    match &node.value {
        Value::Str(text) => match parse_positive(text) {
            Ok(d) => Some(d),
            Err(refused) => {
                checker.report(path, node.at, refused.to_string());
                None
            }
        },
        other => {
            checker.report(
                path,
                node.at,
                format!(
                    "must be a duration like `30s`, `5m` or `2h`, found {}",
                    describe(other)
                ),
            );
            None
        }
    }
}

pub(super) fn at_least(checker: &mut Checker, node: &Node, path: &str, min: i64) -> Option<i64> {
    let n = checker.integer(node, path)?;
    if n < min {
        checker.report(path, node.at, format!("must be at least {min}, got {n}"));
        return None;
    }
    Some(n)
}

pub(super) fn count(checker: &mut Checker, node: &Node, path: &str, min: i64) -> Option<usize> {
    at_least(checker, node, path, min).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

pub(super) fn positive(checker: &mut Checker, node: &Node, path: &str) -> Option<NonZeroUsize> {
    count(checker, node, path, 1).and_then(NonZeroUsize::new)
}

pub(super) fn path_value(
    checker: &mut Checker,
    node: &Node,
    path: &str,
    base: Option<&Path>,
) -> Option<PathBuf> {
    let text = checker.string(node, path)?;
    if text.is_empty() {
        checker.report(path, node.at, "must not be empty");
        return None;
    }
    let p = PathBuf::from(text);
    Some(match base {
        Some(base) if p.is_relative() => base.join(p),
        _ => p,
    })
}

/// An endpoint the configuration refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("must not carry credentials; put them in `{block}.username` and `password`")]
    Credentials { block: String },
    /// Not echoed: it may hold a password in a form this check does not recognise.
    #[error("is not an http:// or https:// URL")]
    NotHttpWithSecret,
    #[error("`{0}` is not an http:// or https:// URL")]
    NotHttp(String),
}

/// A CA the configuration refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PemError {
    #[error("is not valid PEM: {0}")]
    Invalid(String),
    #[error("is not a PEM certificate: expected `-----BEGIN CERTIFICATE-----` blocks")]
    NoCertificate,
}

/// An http(s) URL with a host and no credentials in it (they belong in `username` and
/// `password` of `block`, where they are redacted); a URL with credentials is not echoed.
pub(super) fn check_endpoint(url: &str, block: &str) -> Result<(), EndpointError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let authority = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
    match authority {
        Some(a) if a.contains('@') => Err(EndpointError::Credentials {
            block: block.to_string(),
        }),
        Some(a) if !a.is_empty() && !url.contains(char::is_whitespace) => Ok(()),
        _ if url.contains('@') => Err(EndpointError::NotHttpWithSecret),
        _ => Err(EndpointError::NotHttp(url.to_string())),
    }
}

/// At least one certificate, and nothing in the PEM that fails to decode.
pub(super) fn check_pem(pem: &str) -> Result<(), PemError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut certificates = 0;
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        match cert {
            Ok(_) => certificates += 1,
            Err(e) => return Err(PemError::Invalid(e.to_string())),
        }
    }
    if certificates == 0 {
        return Err(PemError::NoCertificate);
    }
    Ok(())
}
