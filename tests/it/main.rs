//! Integration tests, compiled into one binary: the `fleet-updater` command as a user runs it.

mod bosh_cli_types;
mod broker_http;
mod check_config;
mod create_env;
mod director_http;
mod embedded;
mod embedded_in_process;
mod errand;
mod external_cpi;
mod layers;
mod over_http;
mod processes;
mod release_sources;
mod releases_cli;
mod run;
mod schedule;
mod serve_bosh_cli;
mod serve_broker;
mod serve_director;
mod serve_guard;
mod serve_logs;
mod serve_odb;
mod serve_releases;
mod serve_shared;
mod served;
mod support;
