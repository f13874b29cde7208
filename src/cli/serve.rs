//! `fleet-updater serve`: the embedded fleet's director and broker APIs over HTTPS until
//! SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use fleet_updater::fleet::Access;
use fleet_updater::serve::{self, Addresses};

use super::listing::open_fleet;
use super::{BAD_CONFIG, DONE, INSTANCES_FAILED, LIST_FAILED, load_config, runtime, watch_signals};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Configuration file (YAML): its `serve` block, `state_dir` and `embedded` fleet.
    #[arg(short = 'c', long = "config", env = "FLEET_UPDATER_CONFIG")]
    config: Option<PathBuf>,
    /// Overrides `state_dir`.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Overrides `serve.director` (default 127.0.0.1:25555).
    #[arg(long)]
    director_listen: Option<SocketAddr>,
    /// Overrides `serve.broker` (default 127.0.0.1:25556).
    #[arg(long)]
    broker_listen: Option<SocketAddr>,
}

pub fn serve(args: &ServeArgs) -> ExitCode {
    let mut config = match load_config(args.config.as_deref()) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Some(dir) = &args.state_dir {
        config.state_dir = dir.clone();
    }
    let addresses = Addresses {
        director: args.director_listen.unwrap_or(config.serve.director_listen),
        broker: args.broker_listen.unwrap_or(config.serve.broker_listen),
    };
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let fleet = match open_fleet(&config, Access::Exclusive).await {
            Ok(fleet) => fleet,
            Err(code) => return code,
        };
        let serving = match serve::start(fleet, &config.serve, &config.state_dir, addresses).await {
            Ok(serving) => serving,
            Err(e @ serve::ServeError::Listen { .. }) => {
                eprintln!("error: {e}");
                return ExitCode::from(LIST_FAILED);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(BAD_CONFIG);
            }
        };
        println!("director API (BOSH director): https://{}", serving.director);
        println!("broker API (management API): https://{}", serving.broker);
        match &serving.ca {
            Some(ca) => println!("CA certificate: {}", ca.display()),
            None => println!("TLS certificate: as configured in serve.tls"),
        }
        match &serving.credentials {
            Some(file) => println!(
                "credentials: {} (readable by its owner only)",
                file.display()
            ),
            None => println!("credentials: the users configured in serve.users"),
        }
        println!("stop with Ctrl-C or SIGTERM");
        let mut signals = watch_signals();
        if signals.changed().await.is_err() {
            return ExitCode::from(INSTANCES_FAILED);
        }
        println!("stopping: no new requests; running tasks are cancelled at their next safe point");
        let cancelled = serving.shutdown(config.grace_period).await;
        if !cancelled.is_empty() {
            println!("cancelled tasks: {cancelled:?}");
        }
        ExitCode::from(DONE)
    })
}
