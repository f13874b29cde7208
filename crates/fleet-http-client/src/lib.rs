//! The HTTP transport that the broker and director inventories share.
//!
//! Both talk to servers that start long operations on a request, so one place decides the
//! things that must not differ between them: which CA is trusted, which redirects are
//! followed, how large an answer may grow, which failures are retried, and whether a
//! failed trigger may have reached the server (the engine must never send such a trigger
//! twice blindly).

mod answer;
mod classify;
mod client;
mod effect;
mod path;
mod redirect;

pub use answer::Answer;
pub use client::{Call, Endpoint, HttpClient};
pub use path::segment;
