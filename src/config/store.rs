//! From the configured `store` to where the store is: the password read from its file or
//! the environment, the URL checked.

use std::path::PathBuf;

use super::model::StoreConfig;
use fleet_secret::Secret;
use fleet_store::{PostgresLocation, StoreLocation};

/// The environment variable a PostgreSQL store's password is read from when the
/// configuration names no `store.password_file`.
pub const PASSWORD_VARIABLE: &str = "FLEET_STORE_PASSWORD";

#[derive(Debug, thiserror::Error)]
pub enum StoreConfigError {
    #[error("store.password_file: cannot read {}: {source}", path.display())]
    PasswordFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("store.password_file: {} is empty", .0.display())]
    EmptyPassword(PathBuf),
    #[error("store.ca_file: {} does not exist", .0.display())]
    NoCaFile(PathBuf),
    #[error(transparent)]
    Location(#[from] fleet_store::LocationError),
}

impl StoreConfig {
    /// Where the store is.
    ///
    /// # Errors
    /// A password file that cannot be read or is empty, a CA file that does not exist,
    /// or a URL that is not a usable PostgreSQL URL.
    pub fn location(&self) -> Result<StoreLocation, StoreConfigError> {
        let Some(url) = &self.url else {
            return Ok(StoreLocation::Sqlite);
        };
        let password = match &self.password_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| {
                    StoreConfigError::PasswordFile {
                        path: path.clone(),
                        source,
                    }
                })?;
                let text = text.trim_end_matches(['\n', '\r']);
                if text.is_empty() {
                    return Err(StoreConfigError::EmptyPassword(path.clone()));
                }
                Some(Secret::new(text))
            }
            None => std::env::var(PASSWORD_VARIABLE)
                .ok()
                .filter(|p| !p.is_empty())
                .map(Secret::new),
        };
        if let Some(ca) = &self.ca_file
            && !ca.exists()
        {
            return Err(StoreConfigError::NoCaFile(ca.clone()));
        }
        Ok(StoreLocation::Postgres(PostgresLocation::parse(
            url,
            password,
            self.ca_file.clone(),
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_comes_from_its_file_and_never_from_the_url() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let config = StoreConfig {
            url: Some("postgres://fleet@db/fleet".into()),
            password_file: Some(file.clone()),
            ca_file: None,
        };
        let StoreLocation::Postgres(at) = config.location().unwrap() else {
            panic!("not PostgreSQL");
        };
        assert_eq!(at.url(), "postgres://fleet@db/fleet");
        assert!(!format!("{at:?}").contains("s3cret"));
        std::fs::write(&file, "\n").unwrap();
        assert!(matches!(
            config.location(),
            Err(StoreConfigError::EmptyPassword(_))
        ));
        let missing_ca = StoreConfig {
            ca_file: Some(dir.path().join("nope.pem")),
            password_file: None,
            ..config
        };
        assert_eq!(
            missing_ca.location().unwrap_err().to_string(),
            format!(
                "store.ca_file: {} does not exist",
                dir.path().join("nope.pem").display()
            )
        );
        assert!(matches!(
            StoreConfig::default().location(),
            Ok(StoreLocation::Sqlite)
        ));
    }
}
