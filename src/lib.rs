//! `fleet-updater` brings a fleet of BOSH-deployed service instances up to date.
//!
//! Layers, top to bottom: the CLI (binary) wires a validated [`config`] to an
//! [`inventory`] and runs the [`rollout`] engine, whose events the [`output`] layer prints.
//! The engine sees only the inventory trait, a clock and a rate limiter.

pub mod broker;
pub mod clock;
pub mod config;
pub mod director;
pub mod fleet;
pub mod inventory;
pub mod ipset;
pub mod output;
pub mod rollout;
pub mod serve;
pub mod store;
pub mod yaml;
