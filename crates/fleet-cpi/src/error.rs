//! How a call to an external CPI fails, always naming the method.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum CpiCallError {
    #[error("CPI '{method}': cannot run {executable}: {source}")]
    Spawn {
        method: String,
        executable: String,
        source: std::io::Error,
    },
    #[error("CPI '{method}' did not answer within {}", humanize(*after))]
    TimedOut { method: String, after: Duration },
    /// Its output is not a response document.
    #[error(
        "CPI '{method}' answered with something that is not a CPI response ({problem}): `{output}`{}",
        stderr_note(stderr)
    )]
    Unreadable {
        method: String,
        problem: String,
        /// The start of what it printed.
        output: String,
        stderr: String,
    },
    /// The CPI answered with an error.
    #[error("CPI '{method}' method responded with error {kind}: {message}{}", if *ok_to_retry { " (ok to retry)" } else { "" })]
    Cloud {
        method: String,
        kind: String,
        message: String,
        ok_to_retry: bool,
    },
    /// A result of another shape than the method's.
    #[error("CPI '{method}' returned an unexpected result: {result}")]
    UnexpectedResult { method: String, result: String },
}

impl CpiCallError {
    /// The CPI's own error type, when it answered with one.
    pub fn kind(&self) -> Option<&str> {
        match self {
            CpiCallError::Cloud { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// Whether the CPI said the call may succeed if made again.
    pub fn ok_to_retry(&self) -> bool {
        matches!(
            self,
            CpiCallError::Cloud {
                ok_to_retry: true,
                ..
            }
        )
    }
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

fn stderr_note(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends: {stderr}")
    }
}
