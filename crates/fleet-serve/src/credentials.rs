//! Who may call the APIs: the configured users, or one user whose password is generated
//! on first start and kept in a file only the owner can read.

use std::path::{Path, PathBuf};

use base64::Engine;

use super::ServeError;
use super::files::{read, write_private};
use crate::settings::ServeUser;
use fleet_secret::Secret;

const FILE: &str = "serve-credentials.yml";
const GENERATED_USER: &str = "admin";

pub struct Credentials {
    pub users: Vec<ServeUser>,
    /// Where generated credentials are kept; `None` with configured users.
    pub file: Option<PathBuf>,
}

fn generate_password() -> Result<String, ServeError> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes)
        .map_err(|e| ServeError::Tls(format!("no randomness for a password: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Reads `user: ...` and `password: ...` from the generated file.
fn parse(path: &Path, text: &str) -> Result<ServeUser, ServeError> {
    let root = fleet_yaml::load(text, fleet_yaml::Limits::default())
        .map_err(|e| ServeError::Credentials(format!("{} is not YAML: {e}", path.display())))?;
    let field = |key: &str| {
        root.get(key)
            .and_then(|n| n.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| ServeError::Credentials(format!("{} has no `{key}`", path.display())))
    };
    Ok(ServeUser::admin(
        &field("user")?,
        Secret::new(field("password")?),
    ))
}

/// # Errors
/// When the generated file cannot be read, parsed or written.
pub fn credentials(state_dir: &Path, configured: &[ServeUser]) -> Result<Credentials, ServeError> {
    if !configured.is_empty() {
        return Ok(Credentials {
            users: configured.to_vec(),
            file: None,
        });
    }
    let path = state_dir.join(FILE);
    let user = if path.exists() {
        parse(&path, &read(&path)?)?
    } else {
        let password = generate_password()?;
        write_private(
            &path,
            &format!(
                "# The user of `fleet-updater serve`'s director and broker APIs.\n\
                 user: {GENERATED_USER}\npassword: {password}\n"
            ),
        )?;
        ServeUser::admin(GENERATED_USER, Secret::new(password))
    };
    Ok(Credentials {
        users: vec![user],
        file: Some(path),
    })
}
