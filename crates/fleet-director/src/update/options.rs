//! How a deploy's options change the way each instance is updated (the order they are
//! updated in is [`crate::update_order`]'s).

/// Options of one deploy that change how instances are updated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateOptions {
    pub skip_drain: bool,
    /// Reservations live in the store (a cloud config): release old addresses there.
    pub global_addresses: bool,
}
