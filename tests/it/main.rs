//! Integration tests, compiled into one binary: the `fleet-updater` command as a user runs it.

mod check_config;
mod embedded;
mod run;
mod support;
