//! Errors as the BOSH director sends them: an HTTP status and `{"code", "description"}`
//! with the director's numeric codes.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use fleet_director::{DirectorError, LinkError};

/// The director's codes for the errors this API raises.
pub mod code {
    pub const GENERIC: u32 = 100;
    pub const TASK_NOT_FOUND: u32 = 10_000;
    pub const VALIDATION_INVALID_TYPE: u32 = 40_000;
    pub const VALIDATION_MISSING_FIELD: u32 = 40_001;
    pub const DEPLOYMENT_NOT_FOUND: u32 = 70_000;
    pub const INSTANCE_NOT_FOUND: u32 = 70_001;
    pub const JOB_NOT_FOUND: u32 = 70_009;
    pub const BAD_MANIFEST: u32 = 440_001;
    /// BOSH's `CloudcheckResurrectionPaused`.
    pub const RESURRECTION_PAUSED: u32 = 410_004;
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: u32,
    pub description: String,
}

impl ApiError {
    pub fn bad_request(code: u32, description: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code,
            description: description.into(),
        }
    }

    /// The director's error on what it did to deployment `name`: a deployment not
    /// found is answered in BOSH's words for it.
    pub fn of_deployment(name: &str) -> impl FnOnce(DirectorError) -> ApiError + '_ {
        move |e| match e {
            DirectorError::NotFound { .. } => ApiError::deployment_not_found(name),
            other => other.into(),
        }
    }

    pub fn not_found(code: u32, description: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code,
            description: description.into(),
        }
    }

    pub fn deployment_not_found(name: &str) -> Self {
        ApiError::not_found(
            code::DEPLOYMENT_NOT_FOUND,
            format!("Deployment '{name}' doesn't exist"),
        )
    }

    pub fn task_not_found(id: u64) -> Self {
        ApiError::not_found(
            code::TASK_NOT_FOUND,
            format!("Task {id} could not be found"),
        )
    }
}

impl From<DirectorError> for ApiError {
    fn from(e: DirectorError) -> Self {
        let description = e.to_string();
        match e {
            // One operation per deployment: refused at once, and a client can tell it
            // from a bad request.
            DirectorError::Locked { .. } => ApiError {
                status: StatusCode::CONFLICT,
                code: code::GENERIC,
                description,
            },
            DirectorError::NotFound { .. } => ApiError::not_found(code::GENERIC, description),
            DirectorError::Manifest(_) => ApiError::bad_request(code::BAD_MANIFEST, description),
            DirectorError::Invalid(_)
            | DirectorError::Release(_)
            | DirectorError::CloudConfig(_)
            | DirectorError::RuntimeConfig(_)
            | DirectorError::ResurrectionConfig(_)
            | DirectorError::NotDeployed { .. } => {
                ApiError::bad_request(code::GENERIC, description)
            }
            DirectorError::NotPermitted(_) => ApiError {
                status: StatusCode::FORBIDDEN,
                code: 600_000,
                description,
            },
            DirectorError::ResurrectionPaused => {
                ApiError::bad_request(code::RESURRECTION_PAUSED, description)
            }
            DirectorError::UnknownGroup { .. } => {
                ApiError::not_found(code::JOB_NOT_FOUND, description)
            }
            DirectorError::UnknownInstance { .. } => {
                ApiError::not_found(code::INSTANCE_NOT_FOUND, description)
            }
            DirectorError::Link(link) => link_error(&link, description),
            DirectorError::Store(e) => {
                tracing::error!(error = %description, "director store error");
                ApiError {
                    status: crate::ready::store_failure_status(&e),
                    code: 500_000,
                    description,
                }
            }
        }
    }
}

impl From<LinkError> for ApiError {
    fn from(e: LinkError) -> Self {
        DirectorError::from(e).into()
    }
}

/// The links API's errors with BOSH's codes and statuses.
fn link_error(e: &LinkError, description: String) -> ApiError {
    let (status, code) = match e {
        LinkError::DeploymentRequired => (StatusCode::BAD_REQUEST, 190_024),
        LinkError::Invalid(_) => (StatusCode::BAD_REQUEST, 810_001),
        LinkError::UnknownProvider(_) => (StatusCode::NOT_FOUND, 810_002),
        LinkError::Network { .. } => (StatusCode::NOT_FOUND, 810_003),
        LinkError::NotShared => (StatusCode::FORBIDDEN, 810_009),
        LinkError::UnknownLink(_) => (StatusCode::NOT_FOUND, 810_000),
        LinkError::NotExternal => (StatusCode::INTERNAL_SERVER_ERROR, 810_004),
        LinkError::LinkIdRequired => (StatusCode::BAD_REQUEST, 810_006),
        LinkError::Status => (StatusCode::BAD_REQUEST, 810_007),
    };
    ApiError {
        status,
        code,
        description,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "code": self.code, "description": self.description })),
        )
            .into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
