//! What a request does on the server, which decides whether it may be sent again.

/// Whether a request may be repeated: the engine must never send a trigger twice blindly,
/// so only reads are retried and only triggers can fail ambiguously.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Repeating it harms nothing (any GET, and a UAA token grant).
    Read,
    /// It starts something on the server.
    Write,
}
