//! Command-line interface: arguments, wiring of configuration, inventory and engine, and
//! the exit-code contract (0 done, 1 instances failed/busy or interrupted, 2 bad usage or
//! configuration, 3 the inventory could not be listed).

mod colour;
mod cpi;
mod error;
mod listing;
mod release_source;
mod run;
mod serve;
mod state;
mod tasks;
mod window;
mod wiring;

pub use error::CliError;
use error::DONE;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use fleet_updater::config::{Config, Format, Overrides, StrategyKind, render};
use fleet_updater::fleet::DEMO_CONFIG;
use tokio::sync::watch;

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
    Fleet(state::StateArgs),
    /// Show the embedded director's side: deployments, instances, tasks, a task's events.
    Director(listing::DirectorArgs),
    /// Serve the embedded fleet's director API (as a BOSH director) and broker API over
    /// HTTPS.
    Serve(serve::ServeArgs),
    /// Deploys one VM without a director (seed 002): the CPI installed from its release,
    /// the VM, its disk and its job made, everything kept in a deployment state file.
    CreateEnv(EnvArgs),
    /// Deletes what `create-env` made: the VM, its disks and stemcells, the CPI's
    /// installation, the state file.
    DeleteEnv(EnvArgs),
    /// The process-backed IaaS as an external BOSH CPI: reads one CPI request (JSON) on
    /// stdin, writes the response on stdout. Its properties name the IaaS's directory
    /// (`root`).
    Cpi {
        /// A JSON file of the CPI's properties (as a CPI job renders its configuration),
        /// for those the request's context does not give.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// A VM's networked agent (started by `fleet-updater cpi` for a VM whose settings give
    /// an mbus, as for `create-env`).
    #[command(hide = true)]
    VmAgent {
        /// The VM's directory.
        dir: PathBuf,
        /// For an agent inside its VM's container: the settings its IaaS handed it.
        #[arg(long)]
        settings: Option<PathBuf>,
    },
    /// A VM's supervisor process (started by the fleet, one per VM of `iaas: processes`).
    #[command(hide = true)]
    VmSupervisor {
        /// The VM's directory.
        dir: PathBuf,
    },
    /// A container VM's host port forwarding (its `ports` cloud property), started with
    /// its container.
    #[command(hide = true)]
    VmPorts {
        /// Each `HOST_PORT=VM_ADDRESS:PORT`.
        forwards: Vec<String>,
    },
}

#[derive(clap::Args)]
struct EnvArgs {
    /// The deployment manifest.
    manifest: PathBuf,
    /// The deployment state file; `MANIFEST-state.json` beside the manifest by default.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Where variables are read and generated ones kept; beside the state file
    /// (`...-vars.yml`) by default.
    #[arg(long)]
    vars_store: Option<PathBuf>,
    /// A variable, `NAME=VALUE`; repeatable.
    #[arg(short = 'v', long = "var")]
    vars: Vec<String>,
    /// Deploy even when neither the manifest, the releases nor the stemcell changed.
    #[arg(long)]
    recreate: bool,
}

impl EnvArgs {
    fn options(&self) -> fleet_updater::create_env::prepare::Options {
        fleet_updater::create_env::prepare::Options {
            manifest: self.manifest.clone(),
            state: self.state.clone(),
            vars_store: self.vars_store.clone(),
            vars: self.vars.clone(),
            recreate: self.recreate,
        }
    }
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
    /// Overrides `state_dir`, where the embedded fleet keeps its state and every run its
    /// journal.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Overrides `store`: keep the director's and broker's state in this PostgreSQL
    /// database (postgres://USER@HOST[:PORT]/DATABASE; the password from
    /// `store.password_file` or FLEET_STORE_PASSWORD) instead of SQLite in the state
    /// directory.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Overrides `output.metrics_file`: write the run's figures in Prometheus text format
    /// (for node_exporter's textfile collector) to this file.
    #[arg(long)]
    metrics_file: Option<PathBuf>,
    /// Start over: forget what earlier runs of the same rollout did (the journal).
    #[arg(long)]
    fresh: bool,
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
            metrics_file: self.metrics_file.clone(),
            state_dir: self.state_dir.clone(),
            store: self.store.clone(),
            fresh: self.fresh,
        }
    }

    fn config(&self) -> Result<Config, CliError> {
        let mut config = load_config(self.config.as_deref())?;
        config.apply(&self.overrides());
        Ok(config)
    }
}

/// The configuration file, or the built-in demo configuration without one.
pub(crate) fn load_config(path: Option<&std::path::Path>) -> Result<Config, CliError> {
    Ok(match path {
        Some(path) => Config::load(path),
        None => Config::parse(
            DEMO_CONFIG,
            "the built-in demo configuration",
            std::path::Path::new("."),
        ),
    }?)
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Runtime::new().map_err(CliError::Runtime)
}

/// Parses the arguments and runs the command; the exit code of a command that ran, or
/// the error that stopped it (whose [`CliError::exit_code`] the binary returns).
pub fn run() -> Result<ExitCode, CliError> {
    let cli = Cli::parse();
    init_logging(&cli);
    let code = match cli.command {
        Command::CheckConfig(args) => {
            print_text(&render(&args.config()?));
            DONE
        }
        Command::Run(args) => {
            let config = args.config()?;
            runtime()?.block_on(wiring::run(config))?
        }
        Command::Fleet(args) => listing::fleet(&args)?,
        Command::Director(args) => listing::director(&args)?,
        Command::Serve(args) => serve::serve(&args)?,
        Command::CreateEnv(args) => {
            let mut print = |line: String| notice(&line);
            runtime()?.block_on(fleet_updater::create_env::create::create_env(
                &args.options(),
                &mut print,
            ))?;
            DONE
        }
        Command::DeleteEnv(args) => {
            let mut print = |line: String| notice(&line);
            runtime()?.block_on(fleet_updater::create_env::delete::delete_env(
                &args.options(),
                &mut print,
            ))?;
            DONE
        }
        Command::Cpi { config } => runtime()?.block_on(cpi::serve_one(config.as_deref()))?,
        Command::VmAgent { dir, settings } => {
            let timings = fleet_updater::vm::supervisor::Timings::default();
            runtime()?
                .block_on(fleet_updater::agent::daemon::serve(
                    &dir,
                    settings.as_deref(),
                    timings,
                ))
                .map_err(|e| CliError::Show(format!("vm-agent {}: {e}", dir.display())))?;
            DONE
        }
        Command::VmPorts { forwards } => {
            let mut parsed = Vec::new();
            for text in &forwards {
                let forward = fleet_updater::vm::container::ports::parse_argument(text)
                    .ok_or_else(|| {
                        CliError::Show(format!("vm-ports: `{text}` is not HOST_PORT=ADDRESS:PORT"))
                    })?;
                parsed.push(forward);
            }
            runtime()?
                .block_on(fleet_updater::vm::container::ports::forward(parsed))
                .map_err(|e| CliError::Show(format!("vm-ports: {e}")))?;
            DONE
        }
        Command::VmSupervisor { dir } => {
            let timings = fleet_updater::vm::supervisor::Timings::default();
            runtime()?
                .block_on(fleet_updater::vm::daemon::serve(&dir, timings))
                .map_err(|e| CliError::Show(format!("vm-supervisor {}: {e}", dir.display())))?;
            DONE
        }
    };
    Ok(ExitCode::from(code))
}

/// The filter `serve` starts from when none is given: warnings, and its access log.
const SERVE_DEFAULT_LOG: &str = "warn,fleet_serve::access=info";

/// Whether stderr carries JSON lines (`--log-format json`): then every line this program
/// writes there is one, its own notices included.
static JSON_LOGS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// A line for the person (or the log collector) reading stderr: plain, or as a JSON log
/// line like tracing's, and never with terminal control characters.
pub(crate) fn notice(text: &str) {
    line_at("INFO", text);
}

/// [`notice`] for the error a command ends with.
pub(crate) fn error_line(text: &str) {
    line_at("ERROR", text);
}

fn line_at(level: &str, text: &str) {
    let text = fleet_updater::output::printable(text.trim_end_matches('\n'));
    let mut stderr = std::io::stderr().lock();
    if *JSON_LOGS.get().unwrap_or(&false) {
        for line in text.lines() {
            let entry = serde_json::json!({
                "timestamp": fleet_updater::clock::rfc3339(std::time::SystemTime::now()),
                "level": level,
                "fields": { "message": line },
                "target": "fleet_updater",
            });
            let _ = writeln!(stderr, "{entry}");
        }
    } else {
        let _ = writeln!(stderr, "{text}");
    }
}

/// Stderr as a writer whose every complete line goes out through [`notice`].
#[derive(Default)]
pub(crate) struct StderrLines {
    pending: Vec<u8>,
}

impl Write for StderrLines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            notice(&String::from_utf8_lossy(&line));
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn init_logging(cli: &Cli) {
    let _ = JSON_LOGS.set(matches!(cli.log_format, LogFormat::Json));
    let wanted = match &cli.command {
        Command::Serve(_) if cli.log_level == "warn" => SERVE_DEFAULT_LOG,
        _ => cli.log_level.as_str(),
    };
    let filter = tracing_subscriber::EnvFilter::try_new(wanted)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour::on_stderr())
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
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

/// Writes to stdout, ignoring a closed pipe (`fleet-updater run | head`): the exit code
/// and the report file still tell the result.
pub(crate) fn print_text(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(fleet_updater::output::printable(text).as_bytes());
    let _ = stdout.flush();
}

pub(crate) fn print_json(value: &impl serde::Serialize) {
    let mut stdout = std::io::stdout().lock();
    if serde_json::to_writer_pretty(&mut stdout, value).is_ok() {
        let _ = writeln!(stdout);
    }
    let _ = stdout.flush();
}
