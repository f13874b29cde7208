//! The links API (`/link_providers`, `/links`, `/link_address`, `/link_consumers`), which
//! the ODB asks for a plan with `binding_with_dns`. This director's jobs neither provide
//! nor consume links and it runs no BOSH DNS, so every call is refused in the director's
//! error shape, saying so, rather than answered with something a binding would trust.

use axum::http::{StatusCode, Uri};

use super::error::{ApiError, code};

pub async fn refuse(uri: Uri) -> ApiError {
    ApiError {
        status: StatusCode::NOT_IMPLEMENTED,
        code: code::GENERIC,
        description: format!(
            "'{}': links are not supported by this director: its jobs neither provide nor \
             consume links and it runs no BOSH DNS, so it has no link provider, consumer or \
             DNS address to give. Bind without DNS addresses (an ODB plan without \
             `binding_with_dns`)",
            uri.path()
        ),
    }
}
