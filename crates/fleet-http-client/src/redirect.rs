//! Which redirects a read may follow.
//!
//! reqwest keeps the `Authorization` header when a redirect stays on the same scheme, host
//! and port, so following a redirect elsewhere would either leak nothing and fail
//! confusingly, or, through a proxy that rewrites hosts, reach a server we were never
//! told to trust with the credentials. Only redirects back to the configured endpoint are
//! followed; anything else stops with an error that names where the server pointed.

use reqwest::Url;
use reqwest::redirect::{Attempt, Policy};

/// As many hops as reqwest allows by default and the BOSH CLI follows.
pub const MAX_REDIRECTS: usize = 10;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("refused to follow a redirect to {location}: only redirects to {base} are followed")]
    OtherOrigin { location: String, base: String },
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooMany,
}

/// The policy for requests that may follow redirects.
pub fn same_origin(base: Url) -> Policy {
    Policy::custom(move |attempt: Attempt<'_>| {
        match judge(&base, attempt.url(), attempt.previous().len()) {
            Ok(()) => attempt.follow(),
            Err(refusal) => attempt.error(refusal),
        }
    })
}

/// `requested` counts the URLs already requested in this chain, the first one included.
pub fn judge(base: &Url, next: &Url, requested: usize) -> Result<(), Refusal> {
    let same = next.scheme() == base.scheme()
        && next.host_str() == base.host_str()
        && next.port_or_known_default() == base.port_or_known_default();
    if !same {
        return Err(Refusal::OtherOrigin {
            // Only origin and path: a query could carry something that is not ours to print.
            location: format!("{}{}", next.origin().ascii_serialization(), next.path()),
            base: base.origin().ascii_serialization(),
        });
    }
    if requested > MAX_REDIRECTS {
        return Err(Refusal::TooMany);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    #[test]
    fn a_redirect_to_another_path_of_the_endpoint_is_followed() {
        let base = url("https://director.example:25555");
        assert_eq!(
            judge(&base, &url("https://director.example:25555/tasks/7"), 1),
            Ok(())
        );
    }

    #[test]
    fn the_default_port_written_out_is_the_same_origin() {
        let base = url("https://broker.example");
        assert_eq!(
            judge(&base, &url("https://broker.example:443/x"), 1),
            Ok(())
        );
    }

    #[test]
    fn another_host_port_or_scheme_is_refused_and_named() {
        let base = url("https://director.example:25555");
        for next in [
            "https://evil.example:25555/tasks/7",
            "https://director.example:8443/tasks/7",
            "http://director.example:25555/tasks/7",
        ] {
            let refusal = judge(&base, &url(next), 1).unwrap_err();
            assert!(
                refusal.to_string().contains("/tasks/7"),
                "{refusal} should name the location"
            );
            assert!(matches!(refusal, Refusal::OtherOrigin { .. }));
        }
    }

    #[test]
    fn the_query_of_a_refused_location_is_not_printed() {
        let base = url("https://director.example");
        let refusal = judge(&base, &url("https://other.example/x?token=abc"), 1).unwrap_err();
        assert!(!refusal.to_string().contains("token"));
    }

    #[test]
    fn a_chain_longer_than_the_limit_stops() {
        let base = url("https://director.example");
        let next = url("https://director.example/again");
        assert_eq!(judge(&base, &next, MAX_REDIRECTS), Ok(()));
        assert_eq!(
            judge(&base, &next, MAX_REDIRECTS + 1),
            Err(Refusal::TooMany)
        );
    }
}
