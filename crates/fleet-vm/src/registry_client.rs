//! A CPI's side of the registry (seed 002): a VM's agent settings written there when the
//! VM is made, its persistent disks added and removed as they are attached and detached,
//! the settings deleted with the VM. The registry is reached over HTTP on this machine
//! with the credentials the CPI's `registry` property gives.

use base64::Engine;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Why the registry did not keep or give a VM's settings; never with its password.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("the registry at {base}: {source}")]
    Unreachable {
        base: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the registry at {base} answered {status}")]
    Refused { base: String, status: StatusCode },
    #[error("the registry at {base} answered what is not JSON: {source}")]
    NotJson {
        base: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the registry at {base} answered no settings")]
    NoSettings { base: String },
    #[error("the registry at {base} keeps settings that are not JSON: {source}")]
    SettingsNotJson {
        base: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the VM's settings in the registry are not a mapping")]
    NotAMapping,
    #[error("the CPI's registry property has no {0}")]
    Incomplete(&'static str),
}

/// reqwest's TLS needs a provider even for plain HTTP: the process's default is set once.
fn client() -> reqwest::Client {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::new()
}

/// The registry as the CPI's properties give it.
pub struct Registry {
    base: String,
    credentials: String,
    authorization: String,
    http: reqwest::Client,
}

impl Registry {
    /// The registry the context's `registry` property names, if any.
    ///
    /// # Errors
    /// A property without host, port, username or password.
    pub fn from_context(
        context: &serde_json::Map<String, Value>,
    ) -> Result<Option<Registry>, RegistryError> {
        let Some(r) = context.get("registry") else {
            return Ok(None);
        };
        let text = |key: &'static str| {
            r.get(key)
                .and_then(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .ok_or(RegistryError::Incomplete(key))
        };
        let credentials = format!("{}:{}", text("username")?, text("password")?);
        Ok(Some(Registry {
            base: format!("http://{}:{}", text("host")?, text("port")?),
            authorization: basic(&credentials),
            credentials,
            http: client(),
        }))
    }

    /// The registry's address, without credentials.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The address an agent reads its settings from, with the credentials the registry
    /// asks of every reader: it hands out passwords.
    pub fn url_for_agents(&self) -> String {
        self.base
            .replacen("http://", &format!("http://{}@", self.credentials), 1)
    }

    fn url(&self, cid: &str) -> String {
        format!("{}/instances/{cid}/settings", self.base)
    }

    /// # Errors
    /// The registry cannot be reached or refuses.
    pub async fn put(&self, cid: &str, settings: &Value) -> Result<(), RegistryError> {
        let response = self
            .http
            .put(self.url(cid))
            .header(reqwest::header::AUTHORIZATION, &self.authorization)
            .body(settings.to_string())
            .send()
            .await
            .map_err(|source| self.unreachable(source))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(RegistryError::Refused {
                base: self.base.clone(),
                status: response.status(),
            })
        }
    }

    fn unreachable(&self, source: reqwest::Error) -> RegistryError {
        RegistryError::Unreachable {
            base: self.base.clone(),
            source,
        }
    }

    /// The VM's settings, or none kept.
    ///
    /// # Errors
    /// The registry cannot be reached or answers what is not settings.
    pub async fn get(&self, cid: &str) -> Result<Option<Value>, RegistryError> {
        get(&self.url_for_agents(), cid).await
    }

    /// # Errors
    /// The registry cannot be reached or refuses.
    pub async fn delete(&self, cid: &str) -> Result<(), RegistryError> {
        self.http
            .delete(self.url(cid))
            .header(reqwest::header::AUTHORIZATION, &self.authorization)
            .send()
            .await
            .map(|_| ())
            .map_err(|source| self.unreachable(source))
    }

    /// Adds or removes a persistent disk in the VM's settings.
    ///
    /// # Errors
    /// As [`Registry::get`] and [`Registry::put`].
    pub async fn set_disk(
        &self,
        cid: &str,
        disk: &str,
        hint: Option<&str>,
    ) -> Result<(), RegistryError> {
        let mut settings = self.get(cid).await?.unwrap_or_else(|| json!({}));
        let disks = settings
            .as_object_mut()
            .map(|m| {
                m.entry("disks")
                    .or_insert_with(|| json!({"persistent": {}}))
            })
            .and_then(|d| {
                d.as_object_mut()
                    .map(|m| m.entry("persistent").or_insert_with(|| json!({})))
            })
            .and_then(Value::as_object_mut)
            .ok_or(RegistryError::NotAMapping)?;
        match hint {
            Some(hint) => {
                disks.insert(disk.to_string(), json!(hint));
            }
            None => {
                disks.remove(disk);
            }
        }
        self.put(cid, &settings).await
    }
}

fn basic(credentials: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
}

/// A registry URL as it may be shown: `http://USER:PASSWORD@HOST:PORT` as
/// `http://HOST:PORT`.
pub fn without_credentials(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let address = rest.rsplit_once('@').map_or(rest, |(_, address)| address);
    format!("http://{address}")
}

/// A VM's settings as the registry at `url` (`http://USER:PASSWORD@HOST:PORT`) keeps
/// them.
///
/// # Errors
/// The registry cannot be reached or answers what is not settings; never with the
/// password in the message.
pub async fn get(url: &str, cid: &str) -> Result<Option<Value>, RegistryError> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let credentials = rest
        .rsplit_once('@')
        .map_or("", |(credentials, _)| credentials);
    let base = without_credentials(url);
    let response = client()
        .get(format!("{base}/instances/{cid}/settings"))
        .header(reqwest::header::AUTHORIZATION, basic(credentials))
        .send()
        .await
        .map_err(|e| RegistryError::Unreachable {
            base: base.clone(),
            source: e.without_url(),
        })?;
    if response.status() == StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !response.status().is_success() {
        return Err(RegistryError::Refused {
            base,
            status: response.status(),
        });
    }
    let body: Value = response
        .json()
        .await
        .map_err(|source| RegistryError::NotJson {
            base: base.clone(),
            source,
        })?;
    let text = body
        .get("settings")
        .and_then(Value::as_str)
        .ok_or_else(|| RegistryError::NoSettings { base: base.clone() })?;
    serde_json::from_str(text)
        .map(Some)
        .map_err(|source| RegistryError::SettingsNotJson { base, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_registry_url_has_no_password() {
        assert_eq!(
            without_credentials("http://admin:s3cr@t@127.0.0.1:6901"),
            "http://127.0.0.1:6901"
        );
        assert_eq!(
            without_credentials("http://127.0.0.1:6901"),
            "http://127.0.0.1:6901"
        );
    }
}
