//! Whether the director can do its work now: its store takes writes, and no task's end
//! waits for the store to heal. What a readiness probe and an operator ask.

use fleet_store::put;

use super::Director;

/// What [`Director::readiness`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Why the store did not take a write; `None` when it did.
    pub store_error: Option<String>,
    /// Tasks whose end the store could not record yet (their deployments stay locked
    /// until it can).
    pub awaiting_store: Vec<u64>,
}

impl Readiness {
    pub fn ready(&self) -> bool {
        self.store_error.is_none() && self.awaiting_store.is_empty()
    }
}

/// Where the probe's write goes: a fact of the director's own, rewritten each time.
const PROBE: &str = "readiness_probe";

impl Director {
    /// Writes to the store (a full disk or a database gone away fails it) and reports
    /// the tasks waiting for it.
    pub async fn readiness(&self) -> Readiness {
        let probe = put(
            crate::collections::DIRECTOR,
            PROBE,
            "",
            &self.core.unix_now(),
        );
        let store_error = self
            .records()
            .write(vec![probe])
            .await
            .err()
            .map(|e| e.to_string());
        Readiness {
            store_error,
            awaiting_store: self.runner.unrecorded(),
        }
    }
}
