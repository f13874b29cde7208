use std::path::PathBuf;
use std::time::Duration;

use fleet_secret::Secret;

/// A user of the APIs that `serve` offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeUser {
    pub name: String,
    pub password: Secret,
    /// What the user may do, as BOSH's UAA scopes name it (`bosh.admin`, `bosh.read`).
    pub scopes: Vec<String>,
}

impl ServeUser {
    /// A user who may do everything, as users without scopes given are.
    pub fn admin(name: &str, password: Secret) -> ServeUser {
        ServeUser {
            name: name.to_string(),
            password,
            scopes: vec!["bosh.admin".to_string()],
        }
    }
}

/// What one client may ask of `serve`, so that hostile input cannot exhaust it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// Largest request body; a manifest or cloud config above it is refused with 413.
    pub max_body_bytes: usize,
    /// A request that takes longer is answered with 408.
    pub request_timeout: Duration,
    /// Connections served at once; more are answered with 429 and closed.
    pub max_connections: usize,
    /// Connections one client address may hold open, handshaking or not; more are closed
    /// at once, so that one client cannot take the others' connections.
    pub max_connections_per_client: usize,
    /// Largest release tarball `POST /releases` takes; it is spooled to the state directory.
    pub max_upload_bytes: usize,
    /// How long sending and reading an upload may take.
    pub upload_timeout: Duration,
    /// What an uploaded release tarball may inflate to, how many files it may hold,
    /// and how many times its own size it may inflate to (past 64 MiB): checked while it
    /// is read, so that a compression bomb is refused before it takes the memory.
    pub max_unpacked_bytes: u64,
    pub max_release_files: usize,
    pub max_expansion: u64,
}

impl ServeLimits {
    /// The bounds a release upload is read within.
    pub fn unpacking(&self) -> fleet_release::UnpackLimits {
        fleet_release::UnpackLimits {
            max_bytes: self.max_unpacked_bytes,
            max_entries: self.max_release_files,
            max_expansion: self.max_expansion,
        }
    }
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_body_bytes: 4 * 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            max_connections: 256,
            max_connections_per_client: 32,
            max_upload_bytes: 2 * 1024 * 1024 * 1024,
            upload_timeout: Duration::from_secs(30 * 60),
            max_unpacked_bytes: 8 * 1024 * 1024 * 1024,
            max_release_files: fleet_release::UnpackLimits::default().max_entries,
            max_expansion: fleet_release::UnpackLimits::default().max_expansion,
        }
    }
}

/// The `serve` block: where the director and broker APIs listen, their certificate and
/// users.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    pub director_listen: std::net::SocketAddr,
    pub broker_listen: std::net::SocketAddr,
    /// A PEM certificate chain and its key; without them a CA and a server certificate are
    /// generated in the state directory.
    pub certificate: Option<PathBuf>,
    pub private_key: Option<PathBuf>,
    /// Without users, credentials are generated in the state directory.
    pub users: Vec<ServeUser>,
    /// The broker API's own users, when it is not to take the director's (a platform's
    /// broker credentials are not an operator's).
    pub broker_users: Vec<ServeUser>,
    pub limits: ServeLimits,
    /// Whether releases uploaded through the director API may run on a fleet whose VMs
    /// are plain processes of this machine (their jobs, packaging scripts and templates
    /// would run as the user `serve` runs as); refused unless set.
    pub releases_on_host: bool,
    /// A plain-HTTP listener for `/metrics` alone, without credentials, for a scraper;
    /// `/metrics` is on the director API behind authentication either way.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The health monitor and its resurrector; `None` turns it off.
    pub health_monitor: Option<fleet_director::health_monitor::HealthMonitorSettings>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            director_listen: std::net::SocketAddr::from(([127, 0, 0, 1], 25555)),
            broker_listen: std::net::SocketAddr::from(([127, 0, 0, 1], 25556)),
            certificate: None,
            private_key: None,
            users: Vec::new(),
            broker_users: Vec::new(),
            limits: ServeLimits::default(),
            releases_on_host: false,
            metrics_listen: None,
            health_monitor: Some(Default::default()),
        }
    }
}
