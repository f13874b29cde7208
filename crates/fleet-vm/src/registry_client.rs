//! A CPI's side of the registry (seed 002): a VM's agent settings written there when the
//! VM is made, its persistent disks added and removed as they are attached and detached,
//! the settings deleted with the VM. The registry is reached over HTTP on this machine
//! with the credentials the CPI's `registry` property gives.

use base64::Engine;
use serde_json::{Value, json};

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
    ) -> Result<Option<Registry>, String> {
        let Some(r) = context.get("registry") else {
            return Ok(None);
        };
        let text = |key: &str| {
            r.get(key)
                .and_then(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .ok_or_else(|| format!("the CPI's registry property has no {key}"))
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
    pub async fn put(&self, cid: &str, settings: &Value) -> Result<(), String> {
        let response = self
            .http
            .put(self.url(cid))
            .header(reqwest::header::AUTHORIZATION, &self.authorization)
            .body(settings.to_string())
            .send()
            .await
            .map_err(|e| format!("the registry at {}: {e}", self.base))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!(
                "the registry at {} answered {}",
                self.base,
                response.status()
            ))
        }
    }

    /// The VM's settings, or none kept.
    ///
    /// # Errors
    /// The registry cannot be reached or answers what is not settings.
    pub async fn get(&self, cid: &str) -> Result<Option<Value>, String> {
        get(&self.url_for_agents(), cid).await
    }

    /// # Errors
    /// The registry cannot be reached or refuses.
    pub async fn delete(&self, cid: &str) -> Result<(), String> {
        self.http
            .delete(self.url(cid))
            .header(reqwest::header::AUTHORIZATION, &self.authorization)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| format!("the registry at {}: {e}", self.base))
    }

    /// Adds or removes a persistent disk in the VM's settings.
    ///
    /// # Errors
    /// As [`Registry::get`] and [`Registry::put`].
    pub async fn set_disk(&self, cid: &str, disk: &str, hint: Option<&str>) -> Result<(), String> {
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
            .ok_or_else(|| "the VM's settings in the registry are not a mapping".to_string())?;
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

/// A VM's settings as the registry at `url` (`http://USER:PASSWORD@HOST:PORT`) keeps
/// them.
///
/// # Errors
/// The registry cannot be reached or answers what is not settings; never with the
/// password in the message.
pub async fn get(url: &str, cid: &str) -> Result<Option<Value>, String> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (credentials, address) = rest.rsplit_once('@').unwrap_or(("", rest));
    let base = format!("http://{address}");
    let response = client()
        .get(format!("{base}/instances/{cid}/settings"))
        .header(reqwest::header::AUTHORIZATION, basic(credentials))
        .send()
        .await
        .map_err(|e| format!("the registry at {base}: {}", e.without_url()))?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !response.status().is_success() {
        return Err(format!(
            "the registry at {base} answered {}",
            response.status()
        ));
    }
    let body: Value = response
        .json()
        .await
        .map_err(|e| format!("the registry at {base} answered what is not JSON: {e}"))?;
    let text = body
        .get("settings")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("the registry at {base} answered no settings"))?;
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| format!("the registry at {base} keeps settings that are not JSON: {e}"))
}
