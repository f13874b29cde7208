//! `fleet-updater serve`: the embedded fleet's director and broker APIs over HTTPS until
//! SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use fleet_updater::fleet::Access;
use fleet_updater::serve::{self, Addresses};

use super::error::{CliError, DONE, INSTANCES_FAILED};
use super::state::open_fleet;
use super::{load_config, runtime, watch_signals};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Configuration file (YAML): its `serve` block, `state_dir` and `embedded` fleet.
    #[arg(short = 'c', long = "config", env = "FLEET_UPDATER_CONFIG")]
    config: Option<PathBuf>,
    /// Overrides `state_dir`.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Overrides `store`: keep the director's and broker's state in this PostgreSQL
    /// database (postgres://USER@HOST[:PORT]/DATABASE; the password from
    /// `store.password_file` or FLEET_STORE_PASSWORD) instead of SQLite in the state
    /// directory.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Overrides `serve.director` (default 127.0.0.1:25555).
    #[arg(long)]
    director_listen: Option<SocketAddr>,
    /// Overrides `serve.broker` (default 127.0.0.1:25556).
    #[arg(long)]
    broker_listen: Option<SocketAddr>,
}

pub fn serve(args: &ServeArgs) -> Result<u8, CliError> {
    let mut config = load_config(args.config.as_deref())?;
    config.apply(&fleet_updater::config::Overrides {
        state_dir: args.state_dir.clone(),
        store: args.store.clone(),
        ..Default::default()
    });
    let addresses = Addresses {
        director: args.director_listen.unwrap_or(config.serve.director_listen),
        broker: args.broker_listen.unwrap_or(config.serve.broker_listen),
    };
    runtime()?.block_on(async move {
        let fleet = open_fleet(&config, Access::SERVE).await?;
        let serving = serve::start(fleet, &config.serve, &config.state_dir, addresses).await?;
        println!("director API (BOSH director): https://{}", serving.director);
        println!("broker API (management API): https://{}", serving.broker);
        if let Some(metrics) = serving.metrics {
            println!("metrics (Prometheus): http://{metrics}/metrics");
        }
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
            return Ok(INSTANCES_FAILED);
        }
        println!("stopping: no new requests; running tasks are cancelled at their next safe point");
        let cancelled = serving.shutdown(config.grace_period).await;
        if !cancelled.is_empty() {
            println!("cancelled tasks: {cancelled:?}");
        }
        Ok(DONE)
    })
}
