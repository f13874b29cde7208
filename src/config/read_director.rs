//! The `director` block: a BOSH director whose deployments are the instances.

use std::time::Duration;

use super::read_value::{check_endpoint, check_pem, duration, secret, set};
use crate::yaml::{Checker, Node, Position, join};
use fleet_inventory_director::{DirectorAuth, DirectorEndpoint};
use fleet_secret::Secret;

const KEYS: &[&str] = &[
    "url",
    "ca",
    "skip_ssl_validation",
    "username",
    "password",
    "client",
    "client_secret",
    "timeout",
    "deployments",
];

#[derive(Default)]
pub struct DirectorFields {
    at: Option<Position>,
    url: Option<String>,
    url_written: bool,
    ca: Option<String>,
    skip_ssl_validation: bool,
    username: Option<String>,
    password: Option<Secret>,
    client: Option<String>,
    client_secret: Option<Secret>,
    timeout: Option<Duration>,
    deployments: Option<String>,
}

impl DirectorFields {
    pub fn read(&mut self, node: &Node, checker: &mut Checker) {
        self.at = Some(node.at);
        for (key, value) in checker.map(node, "director", KEYS) {
            let path = join("director", &key.name);
            match key.name.as_str() {
                "url" => {
                    self.url_written = true;
                    if let Some(url) = checker.string(value, &path) {
                        match check_endpoint(&url, "director") {
                            Ok(()) => self.url = Some(url.trim_end_matches('/').to_string()),
                            Err(refused) => checker.report(&path, value.at, refused.to_string()),
                        }
                    }
                }
                "ca" => {
                    if let Some(pem) = checker.string(value, &path) {
                        match check_pem(&pem) {
                            Ok(()) => self.ca = Some(pem),
                            Err(refused) => checker.report(&path, value.at, refused.to_string()),
                        }
                    }
                }
                "skip_ssl_validation" => {
                    set(&mut self.skip_ssl_validation, checker.boolean(value, &path))
                }
                "username" => self.username = checker.string(value, &path),
                "password" => self.password = secret(checker, value, &path),
                "client" => self.client = checker.string(value, &path),
                "client_secret" => self.client_secret = secret(checker, value, &path),
                "timeout" => self.timeout = duration(checker, value, &path),
                _ => {
                    if let Some(pattern) = checker.string(value, &path) {
                        if pattern.is_empty() {
                            checker.report(&path, value.at, "must not be empty");
                        } else {
                            self.deployments = Some(pattern);
                        }
                    }
                }
            }
        }
    }

    /// The endpoint, when the block was given and is complete; what is missing is reported.
    pub fn resolve(self, checker: &mut Checker) -> Option<DirectorEndpoint> {
        let at = self.at?;
        let Some(url) = self.url else {
            if !self.url_written {
                checker.report("director", at, "`director.url` is missing");
            }
            return None;
        };
        let basic = self.username.is_some() || self.password.is_some();
        let uaa = self.client.is_some() || self.client_secret.is_some();
        let auth = match (basic, uaa) {
            (true, true) => {
                checker.report(
                    "director",
                    at,
                    "give either `username` and `password` (basic) or `client` and \
                     `client_secret` (UAA), not both",
                );
                return None;
            }
            (false, false) => {
                checker.report(
                    "director",
                    at,
                    "credentials are missing: `username` and `password` (basic) or `client` \
                     and `client_secret` (UAA)",
                );
                return None;
            }
            (true, false) => match (self.username, self.password) {
                (Some(username), Some(password)) => DirectorAuth::Basic { username, password },
                (None, _) => return missing(checker, at, "director.username"),
                (_, None) => return missing(checker, at, "director.password"),
            },
            (false, true) => match (self.client, self.client_secret) {
                (Some(client), Some(client_secret)) => DirectorAuth::Uaa {
                    client,
                    client_secret,
                },
                (None, _) => return missing(checker, at, "director.client"),
                (_, None) => return missing(checker, at, "director.client_secret"),
            },
        };
        Some(DirectorEndpoint {
            url,
            auth,
            ca: self.ca,
            skip_ssl_validation: self.skip_ssl_validation,
            timeout: self.timeout.unwrap_or(Duration::from_secs(30)),
            deployments: self.deployments.unwrap_or_else(|| "*".to_string()),
        })
    }
}

fn missing<T>(checker: &mut Checker, at: Position, key: &str) -> Option<T> {
    checker.report(key, at, format!("`{key}` is missing"));
    None
}
