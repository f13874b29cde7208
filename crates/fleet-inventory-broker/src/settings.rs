use std::time::Duration;

use fleet_secret::Secret;

/// The a9s `service_broker` properties.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceBroker {
    pub api_endpoint: String,
    pub username: String,
    pub password: Secret,
    pub skip_ssl_validation: bool,
    /// PEM, already checked to hold at least one certificate.
    pub ca: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
}
