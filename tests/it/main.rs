//! Integration tests, compiled into one binary: the `fleet-updater` command as a user runs it.

mod bootstrap;
mod bosh_cli_types;
mod broker_http;
mod canary_check;
/// The chaos soak's driver, shared with `examples/chaos_soak.rs`.
#[path = "../../examples/shared/soak.rs"]
mod chaos;
mod check_config;
mod containers;
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
mod serve_full_disk;
mod serve_guard;
mod serve_health;
mod serve_logs;
mod serve_metrics;
mod serve_odb;
/// Where a started `serve` listens, read from its output; shared with
/// `examples/stack_bench.rs`.
#[path = "../../examples/shared/serve_output.rs"]
mod serve_output;
mod serve_releases;
mod serve_shared;
mod serve_teams;
mod served;
mod soak;
mod support;
