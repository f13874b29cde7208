//! What a signed-in user may do, as the BOSH director's UAA scopes say: `bosh.admin`
//! everything; `bosh.read` reads deployments, instances, VMs, errands, releases,
//! stemcells, tasks (their event and result output), events, configs and locks, but not a
//! task's debug output, a deployment's variables, logs, SSH, or any change. On the broker
//! API, a reader lists and polls, and triggers nothing. (Teams, the director-UUID forms and
//! the upload scopes are not taken yet: a configuration naming them is refused.)

use axum::http::Method;

/// A user's scopes, reduced to what they allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
    Read,
}

/// The scopes a configured user may have.
pub const KNOWN: &[&str] = &["bosh.admin", "bosh.read"];

impl Role {
    /// The most a user with `scopes` may do; none for scopes that allow nothing.
    pub fn of(scopes: &[String]) -> Option<Role> {
        if scopes.iter().any(|s| s == "bosh.admin") {
            Some(Role::Admin)
        } else if scopes.iter().any(|s| s == "bosh.read") {
            Some(Role::Read)
        } else {
            None
        }
    }
}

/// Whether a director API request is one `bosh.read` allows; `query` is the request's.
pub fn reader_may(method: &Method, path: &str, query: Option<&str>) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if method == Method::POST {
        // A diff of configs changes nothing.
        return segments == ["configs", "diff"];
    }
    if method != Method::GET && method != Method::HEAD {
        return false;
    }
    match segments.as_slice() {
        ["info"]
        | ["deployments"]
        | ["deployments", _]
        | [
            "deployments",
            _,
            "vms" | "instances" | "errands" | "certificate_expiry",
        ]
        | ["releases"]
        | ["releases", _]
        | ["stemcells"]
        | ["tasks"]
        | ["tasks", _]
        | ["events"]
        | ["events", _]
        | ["configs"]
        | ["configs", _]
        | ["cloud_configs"]
        | ["runtime_configs"]
        | ["locks"]
        | ["ready"]
        | ["metrics"] => true,
        // A task's event and result output; its debug and CPI output is an admin's.
        // Every `type` the query gives counts (the handler takes one of them), decoded
        // as the handler decodes it.
        ["tasks", _, "output"] => {
            let types: Vec<String> = query
                .unwrap_or("")
                .split('&')
                .filter_map(|pair| {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    (decoded(key) == "type").then(|| decoded(value))
                })
                .collect();
            !types.is_empty() && types.iter().all(|t| t == "event" || t == "result")
        }
        _ => false,
    }
}

/// A query's key or value as a form decodes it: `+` a space, escapes decoded.
fn decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(&text.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// Whether a broker API request is one a reader may make: listings and polls.
pub fn broker_reader_may(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// What a refused reader is told, in the director's words.
pub const REFUSED: &str = "Require one of the scopes: bosh.admin";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_reads_and_changes_nothing() {
        let get = Method::GET;
        for path in [
            "/deployments",
            "/deployments/d",
            "/deployments/d/instances",
            "/tasks/3",
            "/releases/kv",
            "/events",
            "/locks",
        ] {
            assert!(reader_may(&get, path, None), "{path}");
        }
        assert!(reader_may(&get, "/tasks/3/output", Some("type=event")));
        assert!(reader_may(&get, "/tasks/3/output", Some("type=result")));
        assert!(!reader_may(&get, "/tasks/3/output", Some("type=debug")));
        assert!(!reader_may(&get, "/tasks/3/output", None));
        for sneaky in [
            "type=event&type=debug",
            "type=event&typ%65=cpi",
            "typ%65=debug",
        ] {
            assert!(
                !reader_may(&get, "/tasks/3/output", Some(sneaky)),
                "{sneaky}"
            );
        }
        assert!(reader_may(
            &get,
            "/tasks/3/output",
            Some("type=result&type=event")
        ));
        for path in [
            "/deployments/d/variables",
            "/deployments/d/jobs/kv/0/logs",
            "/resources/abc",
        ] {
            assert!(!reader_may(&get, path, None), "{path}");
        }
        assert!(reader_may(&Method::POST, "/configs/diff", None));
        for (method, path) in [
            (Method::POST, "/deployments"),
            (Method::POST, "/releases"),
            (Method::DELETE, "/deployments/d"),
            (Method::PUT, "/deployments/d/jobs/kv"),
            (Method::POST, "/deployments/d/ssh"),
            (Method::DELETE, "/task/3"),
        ] {
            assert!(!reader_may(&method, path, None), "{method} {path}");
        }
        assert_eq!(Role::of(&["bosh.read".into()]), Some(Role::Read));
        assert_eq!(
            Role::of(&["bosh.read".into(), "bosh.admin".into()]),
            Some(Role::Admin)
        );
        assert!(broker_reader_may(&Method::GET));
        assert!(!broker_reader_may(&Method::PATCH));
    }
}
