//! Where the store lives: an SQLite file in the state directory (the default), or a
//! PostgreSQL database that several director processes may share.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use fleet_secret::Secret;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocationError {
    #[error(
        "store: `{0}` is not a PostgreSQL URL (postgres://USER@HOST[:PORT]/DATABASE); leave \
         `store` out for SQLite in the state directory"
    )]
    NotPostgres(String),
    #[error("store: {0}")]
    Invalid(String),
    #[error(
        "store: the URL carries a password; give it in `store_password_file` or the \
         FLEET_STORE_PASSWORD environment variable, where process listings and logs do not \
         show it"
    )]
    PasswordInUrl,
    #[error("store: the URL names no user (postgres://USER@HOST/DATABASE)")]
    NoUser,
    #[error("store: the URL names no database (postgres://USER@HOST/DATABASE)")]
    NoDatabase,
    #[error(
        "store: `sslmode` is set by `store_ca_file`: with it the connection is TLS and the \
         server's certificate is checked against that CA; without it, no TLS"
    )]
    SslMode,
}

/// Where the director and broker keep their state.
#[derive(Debug, Clone)]
pub enum StoreLocation {
    /// `fleet.db` in the state directory: one process at a time.
    Sqlite,
    Postgres(PostgresLocation),
}

/// A PostgreSQL database: its URL (never with a password), the password, and the CA that
/// signs the server's certificate when the connection is TLS.
#[derive(Clone)]
pub struct PostgresLocation {
    url: String,
    password: Option<Secret>,
    ca_file: Option<PathBuf>,
}

impl fmt::Debug for PostgresLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresLocation")
            .field("url", &self.url)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl PostgresLocation {
    /// Reads `url` (`postgres://USER@HOST[:PORT]/DATABASE`, or with `?host=/socket/dir`
    /// for a Unix socket). The password comes apart from it, and a CA file makes the
    /// connection TLS with the server's certificate and name checked.
    ///
    /// # Errors
    /// A URL that is not PostgreSQL's, carries a password, lacks a user or database, or
    /// sets `sslmode` itself.
    pub fn parse(
        url: &str,
        password: Option<Secret>,
        ca_file: Option<PathBuf>,
    ) -> Result<Self, LocationError> {
        let url = url.trim();
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(LocationError::NotPostgres(url.to_string()));
        }
        if url.contains("sslmode=") {
            return Err(LocationError::SslMode);
        }
        let config = ::postgres::Config::from_str(url)
            .map_err(|e| LocationError::Invalid(hide_password(&e.to_string())))?;
        if config.get_password().is_some() {
            return Err(LocationError::PasswordInUrl);
        }
        if config.get_user().is_none_or(str::is_empty) {
            return Err(LocationError::NoUser);
        }
        if config.get_dbname().is_none_or(str::is_empty) {
            return Err(LocationError::NoDatabase);
        }
        Ok(PostgresLocation {
            url: url.to_string(),
            password,
            ca_file,
        })
    }

    /// The URL as given: safe to show, it holds no password.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn ca_file(&self) -> Option<&std::path::Path> {
        self.ca_file.as_deref()
    }

    /// The client's configuration, password included.
    pub(crate) fn config(&self) -> ::postgres::Config {
        let mut config =
            ::postgres::Config::from_str(&self.url).expect("the URL was parsed when made");
        if let Some(password) = &self.password {
            config.password(password.expose());
        }
        config.application_name("fleet-updater");
        config.connect_timeout(std::time::Duration::from_secs(10));
        config.ssl_mode(if self.ca_file.is_some() {
            ::postgres::config::SslMode::Require
        } else {
            ::postgres::config::SslMode::Disable
        });
        config
    }

    /// Another database, `name`, on the same server, reached the same way.
    pub fn in_database(&self, name: &str) -> PostgresLocation {
        let authority = self.url.find("://").map_or(0, |i| i + 3);
        let query = self.url.find('?').unwrap_or(self.url.len());
        let path = self.url[authority..query]
            .find('/')
            .map_or(query, |i| authority + i);
        PostgresLocation {
            url: format!("{}/{name}{}", &self.url[..path], &self.url[query..]),
            ..self.clone()
        }
    }

    /// The same database with connections that use `schema` instead of `public`: how
    /// tests get a database of their own on one server.
    pub fn in_schema(&self, schema: &str) -> PostgresLocation {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        PostgresLocation {
            url: format!("{}{separator}options=-c%20search_path%3D{schema}", self.url),
            ..self.clone()
        }
    }
}

impl fmt::Display for PostgresLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

/// A parser's message with anything after `password=` cut, should one quote it.
fn hide_password(message: &str) -> String {
    match message.find("password") {
        Some(at) => format!("{}…", &message[..at]),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_read_with_its_password_kept_apart() {
        let at = PostgresLocation::parse(
            "postgres://fleet@db.example.com:5433/director",
            Some(Secret::new("s3cret")),
            None,
        )
        .unwrap();
        assert_eq!(at.url(), "postgres://fleet@db.example.com:5433/director");
        assert!(!format!("{at:?} {at}").contains("s3cret"));
        let config = at.config();
        assert_eq!(config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(config.get_dbname(), Some("director"));
        assert_eq!(config.get_ports(), [5433]);
    }

    #[test]
    fn bad_urls_are_refused_by_what_is_wrong() {
        let parse = |url| PostgresLocation::parse(url, None, None).unwrap_err();
        assert_eq!(
            parse("sqlite:///tmp/x"),
            LocationError::NotPostgres("sqlite:///tmp/x".into())
        );
        assert_eq!(
            parse("postgres://fleet:hunter2@db/director"),
            LocationError::PasswordInUrl
        );
        assert_eq!(parse("postgres://db/director"), LocationError::NoUser);
        assert_eq!(parse("postgres://fleet@db"), LocationError::NoDatabase);
        assert_eq!(
            parse("postgres://fleet@db/director?sslmode=require"),
            LocationError::SslMode
        );
        let invalid = parse("postgres://fleet@db/director?password=hunter2&bogus=1");
        assert!(!invalid.to_string().contains("hunter2"), "{invalid}");
    }

    #[test]
    fn a_unix_socket_url_is_read() {
        let at = PostgresLocation::parse(
            "postgresql:///fleet?host=/tmp/pg&port=5432&user=postgres",
            None,
            None,
        )
        .unwrap();
        assert_eq!(at.config().get_user(), Some("postgres"));
        let schema = at.in_schema("t1");
        assert_eq!(
            schema.config().get_options(),
            Some("-c search_path=t1"),
            "{}",
            schema.url()
        );
    }

    #[test]
    fn another_database_on_the_same_server_is_reached_the_same_way() {
        for (url, expected) in [
            (
                "postgresql:///fleet?host=/tmp/pg&port=5432&user=postgres",
                "postgresql:///other?host=/tmp/pg&port=5432&user=postgres",
            ),
            (
                "postgres://fleet@db:5433/director",
                "postgres://fleet@db:5433/other",
            ),
            (
                "postgres://fleet@db/director?connect_timeout=3",
                "postgres://fleet@db/other?connect_timeout=3",
            ),
        ] {
            let other = PostgresLocation::parse(url, None, None)
                .unwrap()
                .in_database("other");
            assert_eq!(other.url(), expected);
            assert_eq!(other.config().get_dbname(), Some("other"));
        }
    }
}
