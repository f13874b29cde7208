//! Integration tests, compiled into one binary: the `fleet-updater` command as a user runs it.

mod check_config;
mod embedded;
mod errand;
mod run;
mod serve_bosh_cli;
mod serve_broker;
mod serve_director;
mod served;
mod support;
