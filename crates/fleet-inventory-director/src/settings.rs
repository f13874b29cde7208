use std::time::Duration;

use fleet_secret::Secret;

/// How the updater signs in to a BOSH director.
#[derive(Debug, Clone, PartialEq)]
pub enum DirectorAuth {
    /// HTTP basic authentication with a director user.
    Basic { username: String, password: Secret },
    /// UAA client credentials; the token endpoint is the UAA that the director's `/info`
    /// names.
    Uaa {
        client: String,
        client_secret: Secret,
    },
}

/// The `director` properties: a BOSH director whose deployments are the instances.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectorEndpoint {
    /// `https://host:25555`, without a path.
    pub url: String,
    pub auth: DirectorAuth,
    /// PEM, already checked to hold at least one certificate.
    pub ca: Option<String>,
    pub skip_ssl_validation: bool,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Which deployments are instances: a name pattern where `*` stands for any text.
    pub deployments: String,
}
