//! The request and response documents of the protocol.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What a CPI reads on stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub method: String,
    pub arguments: Vec<Value>,
    /// `director_uuid`, `request_id`, `vm` (the stemcell's API version) and the CPI's
    /// own properties, which a CPI run by a director reads its configuration from.
    pub context: Map<String, Value>,
    pub api_version: u32,
}

/// What a CPI writes on stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    #[serde(default)]
    pub result: Value,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    #[serde(default)]
    pub log: String,
}

/// A CPI's error: its type (`Bosh::Clouds::VMNotFound`, ...), message, and whether the
/// same call may succeed when made again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub ok_to_retry: bool,
}

/// The error types BOSH gives a meaning to.
pub mod kinds {
    pub const VM_NOT_FOUND: &str = "Bosh::Clouds::VMNotFound";
    pub const DISK_NOT_FOUND: &str = "Bosh::Clouds::DiskNotFound";
    pub const STEMCELL_NOT_FOUND: &str = "Bosh::Clouds::StemcellNotFound";
    pub const NOT_IMPLEMENTED: &str = "Bosh::Clouds::NotImplemented";
    pub const CLOUD_ERROR: &str = "Bosh::Clouds::CloudError";
    pub const VM_CREATION_FAILED: &str = "Bosh::Clouds::VMCreationFailed";
}

impl Response {
    /// A successful answer.
    pub fn ok(result: Value, log: String) -> Self {
        Response {
            result,
            error: None,
            log,
        }
    }

    /// A failed answer.
    pub fn failed(kind: &str, message: String, ok_to_retry: bool, log: String) -> Self {
        Response {
            result: Value::Null,
            error: Some(ErrorBody {
                kind: kind.to_string(),
                message,
                ok_to_retry,
            }),
            log,
        }
    }
}
