//! How a deploy's options change the way its instances are updated.

use super::super::manifest::Count;

/// Options of one deploy that change how instances are updated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateOptions {
    pub skip_drain: bool,
    /// Override the manifest's `canaries` / `max_in_flight`.
    pub canaries: Option<Count>,
    pub max_in_flight: Option<Count>,
    /// Reservations live in the store (a cloud config): release old addresses there.
    pub global_addresses: bool,
}
