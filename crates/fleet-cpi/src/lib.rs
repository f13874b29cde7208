//! The external CPI protocol, as BOSH CPIs speak it: a CPI is an executable that reads
//! one JSON request on stdin (`method`, `arguments`, `context`, `api_version`) and writes
//! one JSON response on stdout (`result`, `error`, `log`). [`ExternalCpi`] calls one, a
//! process per call with a time limit, and [`ExternalCpi`]'s methods give each CPI method
//! its arguments and the type of its result; every failure names the method.

mod client;
mod error;
mod methods;
pub mod protocol;

pub use client::{Answer, CallRecord, CpiCommand, ExternalCpi, LogSink};
pub use error::CpiCallError;
pub use methods::{CpiInfo, CreatedVm};

#[cfg(test)]
mod tests;
