//! The agent's address as BOSH writes it: `https://USER:PASSWORD@HOST:PORT`. The
//! credentials are those of HTTP basic authentication on every request; they are never
//! shown.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct MbusUrl {
    pub user: String,
    pub password: String,
    pub host: String,
    pub port: u16,
}

impl fmt::Debug for MbusUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.without_credentials())
    }
}

/// What is wrong with an mbus URL; the URL is shown without its credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mbus URL `{shown}` {problem}")]
pub struct MbusError {
    /// What follows the credentials, or nothing when a password may be all of it.
    pub shown: String,
    pub problem: &'static str,
}

impl MbusUrl {
    /// # Errors
    /// A URL that is not `https://USER:PASSWORD@HOST:PORT`, named without its password.
    pub fn parse(text: &str) -> Result<MbusUrl, MbusError> {
        let shown = |problem: &'static str| MbusError {
            shown: match text.rsplit_once('@') {
                Some((_, host)) => format!("...@{host}"),
                None => "(not shown)".to_string(),
            },
            problem,
        };
        let rest = text
            .strip_prefix("https://")
            .ok_or_else(|| shown("must start with https://"))?;
        let (credentials, address) = rest
            .rsplit_once('@')
            .ok_or_else(|| shown("has no USER:PASSWORD@"))?;
        let (user, password) = credentials
            .split_once(':')
            .ok_or_else(|| shown("has no password after the user"))?;
        let address = address.trim_end_matches('/');
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| shown("has no port"))?;
        let port = port
            .parse::<u16>()
            .map_err(|_| shown("has a port that is not a number"))?;
        if user.is_empty() || password.is_empty() || host.is_empty() {
            return Err(shown("has an empty user, password or host"));
        }
        // As Go's URL parser (the bosh CLI's) reads them: percent-escapes decoded.
        let decoded = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8()
                .map(|t| t.into_owned())
                .map_err(|_| shown("has a user or password that is not UTF-8 once decoded"))
        };
        Ok(MbusUrl {
            user: decoded(user)?,
            password: decoded(password)?,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
        })
    }

    /// Whether it names this machine's loopback, the only place a process-backed VM's
    /// agent listens.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost"
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// `https://HOST:PORT`, for messages and requests (credentials go in a header).
    pub fn without_credentials(&self) -> String {
        if self.host.contains(':') {
            format!("https://[{}]:{}", self.host, self.port)
        } else {
            format!("https://{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mbus_url_is_read_and_never_shows_its_password() {
        let url = MbusUrl::parse("https://mbus:s3cret@127.0.0.1:6868").unwrap();
        assert_eq!((url.user.as_str(), url.port), ("mbus", 6868));
        assert_eq!(format!("{url:?}"), "https://127.0.0.1:6868");
        let e = MbusUrl::parse("https://mbus:s3cret127.0.0.1:6868")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cret"), "a URL without @ is not shown: {e}");
        let e = MbusUrl::parse("http://mbus:s3cret@127.0.0.1:6868")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cret") && e.contains("https://"), "{e}");
        let e = MbusUrl::parse("https://mbus:s3cret@127.0.0.1")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cret") && e.contains("no port"), "{e}");
        assert!(MbusUrl::parse("https://127.0.0.1:6868").is_err());
        // Escapes are decoded, as the bosh CLI's URL parser decodes them.
        let escaped = MbusUrl::parse("https://mbus:p%40ss%3Aword@127.0.0.1:6868").unwrap();
        assert_eq!(escaped.password, "p@ss:word");
    }
}
