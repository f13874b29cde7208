//! Command-line interface: arguments, wiring of configuration, inventory and engine, and
//! the exit-code contract (0 done, 1 instances failed/busy or interrupted, 2 bad usage or
//! configuration, 3 the inventory could not be listed).

mod listing;
mod serve;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use fleet_updater::clock::WallClock;
use fleet_updater::config::{Config, Format, InventoryKind, Overrides, StrategyKind, render};
use fleet_updater::fleet::{Access, DEMO_CONFIG};
use fleet_updater::inventory::Inventory;
use fleet_updater::inventory::broker_http::BrokerInventory;
use fleet_updater::inventory::director_http::DirectorInventory;
use fleet_updater::inventory::embedded::EmbeddedInventory;
use fleet_updater::inventory::scripted::load_scenario;
use fleet_updater::output::{TextOutput, plan_text, summary, write_json_file};
use fleet_updater::rollout::{PlanReport, RequestLimiter, Rollout, RolloutError};
use tokio::sync::watch;

pub(crate) const DONE: u8 = 0;
pub(crate) const INSTANCES_FAILED: u8 = 1;
pub(crate) const BAD_CONFIG: u8 = 2;
pub(crate) const LIST_FAILED: u8 = 3;

#[derive(Parser)]
#[command(
    name = "fleet-updater",
    version,
    about = "Brings a fleet of BOSH-deployed service instances up to date"
)]
struct Cli {
    /// Log filter for stderr (tracing syntax, e.g. `info` or `fleet_updater=debug`).
    #[arg(long, global = true, env = "FLEET_UPDATER_LOG", default_value = "warn")]
    log_level: String,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Update or recreate the fleet's service instances.
    Run(RunArgs),
    /// Validate a configuration and print it resolved, secrets redacted.
    CheckConfig(RunArgs),
    /// List the embedded fleet's service instances: state, versions, pending update, blocked.
    Fleet(listing::StateArgs),
    /// Show the embedded director's side: deployments, instances, tasks, a task's events.
    Director(listing::DirectorArgs),
    /// Serve the embedded fleet's director API (as a BOSH director) and broker API over
    /// HTTPS.
    Serve(serve::ServeArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Configuration file (YAML); without one, the built-in demo (config/demo.yml) applies.
    #[arg(short = 'c', long = "config", env = "FLEET_UPDATER_CONFIG")]
    config: Option<PathBuf>,
    /// Overrides `strategy.type`.
    #[arg(long, value_enum)]
    strategy: Option<StrategyArg>,
    /// Overrides the chosen strategy's `max_in_parallel`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_in_parallel: Option<u32>,
    /// Overrides the chosen strategy's `canaries`.
    #[arg(long)]
    canaries: Option<u32>,
    /// List and plan, print what would happen, trigger nothing.
    #[arg(long)]
    dry_run: bool,
    /// Overrides `output.format`: `json` prints the report on stdout and the event lines
    /// on stderr.
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// Overrides `output.report_file`: also write the JSON report to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Overrides `state_dir`, where the embedded fleet keeps its state.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum StrategyArg {
    Update,
    Recreate,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Text,
    Json,
}

impl RunArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            strategy: self.strategy.map(|s| match s {
                StrategyArg::Update => StrategyKind::Update,
                StrategyArg::Recreate => StrategyKind::Recreate,
            }),
            max_in_parallel: self
                .max_in_parallel
                .and_then(|n| std::num::NonZeroUsize::new(n as usize)),
            canaries: self.canaries.map(|n| n as usize),
            dry_run: self.dry_run,
            format: self.format.map(|f| match f {
                FormatArg::Text => Format::Text,
                FormatArg::Json => Format::Json,
            }),
            report_file: self.report.clone(),
            state_dir: self.state_dir.clone(),
        }
    }

    fn config(&self) -> Result<Config, ExitCode> {
        let mut config = load_config(self.config.as_deref())?;
        config.apply(&self.overrides());
        Ok(config)
    }
}

/// The configuration file, or the built-in demo configuration without one.
pub(crate) fn load_config(path: Option<&std::path::Path>) -> Result<Config, ExitCode> {
    let loaded = match path {
        Some(path) => Config::load(path),
        None => Config::parse(
            DEMO_CONFIG,
            "the built-in demo configuration",
            std::path::Path::new("."),
        ),
    };
    loaded.map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(BAD_CONFIG)
    })
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|e| {
        eprintln!("error: cannot start the async runtime: {e}");
        ExitCode::from(INSTANCES_FAILED)
    })
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    match cli.command {
        Command::CheckConfig(args) => match args.config() {
            Ok(config) => {
                print_text(&render(&config));
                ExitCode::from(DONE)
            }
            Err(code) => code,
        },
        Command::Run(args) => {
            let config = match args.config() {
                Ok(config) => config,
                Err(code) => return code,
            };
            let runtime = match runtime() {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            match runtime.block_on(run(config)) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::from(INSTANCES_FAILED)
                }
            }
        }
        Command::Fleet(args) => listing::fleet(&args),
        Command::Director(args) => listing::director(&args),
        Command::Serve(args) => serve::serve(&args),
    }
}

fn init_logging(cli: &Cli) {
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn run(config: Config) -> anyhow::Result<ExitCode> {
    match config.inventory {
        InventoryKind::Scripted => {
            let path = config
                .scenario
                .as_deref()
                .expect("validation requires a scenario for the scripted inventory");
            match load_scenario(path) {
                Ok(inventory) => drive(Arc::new(inventory), &config).await,
                Err(e) => {
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(BAD_CONFIG))
                }
            }
        }
        InventoryKind::Embedded => {
            let fleet = match listing::open_fleet(&config, Access::Exclusive).await {
                Ok(fleet) => fleet,
                Err(code) => return Ok(code),
            };
            drive(
                Arc::new(EmbeddedInventory::new(Arc::clone(&fleet.broker))),
                &config,
            )
            .await
        }
        InventoryKind::Broker => {
            let broker = config
                .service_broker
                .as_ref()
                .expect("validation requires `service_broker` for the broker inventory");
            match BrokerInventory::new(broker, RequestLimiter::new(config.requests_per_second)) {
                Ok(inventory) => drive(Arc::new(inventory), &config).await,
                Err(e) => {
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(BAD_CONFIG))
                }
            }
        }
        InventoryKind::Director => {
            let director = config
                .director
                .as_ref()
                .expect("validation requires `director` for the director inventory");
            match DirectorInventory::new(director, RequestLimiter::new(config.requests_per_second))
            {
                Ok(inventory) => drive(Arc::new(inventory), &config).await,
                Err(e) => {
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(BAD_CONFIG))
                }
            }
        }
    }
}

/// Turns SIGINT and SIGTERM into a count the engine watches.
pub(crate) fn watch_signals() -> watch::Receiver<u32> {
    let (sender, receiver) = watch::channel(0);
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler can be installed");
        loop {
            #[cfg(unix)]
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            #[cfg(not(unix))]
            let _ = tokio::signal::ctrl_c().await;
            sender.send_modify(|n| *n += 1);
        }
    });
    receiver
}

async fn drive<I: Inventory>(inventory: Arc<I>, config: &Config) -> anyhow::Result<ExitCode> {
    let settings = config.settings();
    let max_in_parallel = settings.max_in_parallel;
    let rollout = Rollout::new(inventory, settings, WallClock::new());
    let mut interrupts = watch_signals();
    let plan = tokio::select! {
        planned = rollout.plan() => match planned {
            Ok(plan) => plan,
            Err(e @ RolloutError::List(_)) => {
                eprintln!("error: {e}; nothing was triggered");
                return Ok(ExitCode::from(LIST_FAILED));
            }
        },
        _ = interrupts.changed() => {
            eprintln!("interrupted while listing the fleet; nothing was triggered");
            return Ok(ExitCode::from(INSTANCES_FAILED));
        }
    };
    let json = config.format == Format::Json;
    if config.dry_run {
        let report = PlanReport::new(&plan, max_in_parallel.get());
        if let Some(path) = &config.report_file {
            write_json_file(path, &report)
                .with_context(|| format!("cannot write the plan to {}", path.display()))?;
        }
        if json {
            print_json(&report);
        } else {
            print_text(&plan_text(&report));
        }
        return Ok(ExitCode::from(DONE));
    }
    let report = if json {
        let mut observer = TextOutput::new(std::io::stderr());
        rollout.execute(plan, &mut observer, interrupts).await
    } else {
        let mut observer = TextOutput::new(std::io::stdout());
        rollout.execute(plan, &mut observer, interrupts).await
    };
    // The report file first: a closed stdout must not lose it.
    let written = config.report_file.as_ref().map(|path| {
        write_json_file(path, &report)
            .with_context(|| format!("cannot write the report to {}", path.display()))
    });
    if json {
        eprint!("{}", summary(&report));
        print_json(&report);
    } else {
        print_text(&summary(&report));
    }
    if let Some(Err(e)) = written {
        eprintln!("error: {e:#}");
        return Ok(ExitCode::from(INSTANCES_FAILED));
    }
    Ok(ExitCode::from(if report.succeeded() {
        DONE
    } else {
        INSTANCES_FAILED
    }))
}

/// Writes to stdout, ignoring a closed pipe (`fleet-updater run | head`): the exit code
/// and the report file still tell the result.
fn print_text(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

fn print_json(value: &impl serde::Serialize) {
    let mut stdout = std::io::stdout().lock();
    if serde_json::to_writer_pretty(&mut stdout, value).is_ok() {
        let _ = writeln!(stdout);
    }
    let _ = stdout.flush();
}
