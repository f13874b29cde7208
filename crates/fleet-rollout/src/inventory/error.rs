/// How a failed inventory request may be handled; the adapter knows whether a request
/// could have reached the server, the engine decides what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request certainly had no effect (connection refused, timeout before sending,
    /// 5xx on a read): retrying with backoff is safe.
    Transient,
    /// Retrying will not help (4xx, 5xx on a trigger, a malformed answer).
    Permanent,
    /// A trigger may have reached the server (timeout or reset after sending): it must not
    /// be sent again before the instance has been read back.
    Ambiguous,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InventoryError {
    pub kind: ErrorKind,
    pub message: String,
}

impl InventoryError {
    pub fn transient(message: impl Into<String>) -> Self {
        InventoryError {
            kind: ErrorKind::Transient,
            message: message.into(),
        }
    }

    pub fn permanent(message: impl Into<String>) -> Self {
        InventoryError {
            kind: ErrorKind::Permanent,
            message: message.into(),
        }
    }

    pub fn ambiguous(message: impl Into<String>) -> Self {
        InventoryError {
            kind: ErrorKind::Ambiguous,
            message: message.into(),
        }
    }

    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Transient
    }
}
