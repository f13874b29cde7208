use serde::Deserialize;

use fleet_broker::{Catalog, Plan, StemcellVersion, Version, Versions};
use fleet_director::model::{Release, Stemcell};
use fleet_director::sim::{Fault, FaultKind, Latency, SimulationSettings};

/// The built-in demo fleet (`config/fleets/demo.yml`).
pub const DEMO: &str = include_str!("../../../config/fleets/demo.yml");

/// The built-in demo configuration (`config/demo.yml`), used when no `-c` is given.
pub const DEMO_CONFIG: &str = include_str!("../../../config/demo.yml");

#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    #[error("fleet definition: {0}")]
    Syntax(#[from] fleet_yaml::LoadError),
    #[error("fleet definition: {0}")]
    Invalid(String),
}

/// A simulated latency or fault that cannot be used; config files report it too.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimulationError {
    #[error("`{text}` is not a duration like `100ms`")]
    NotADuration { text: String },
    #[error("latency `{text}`: the minimum is above the maximum")]
    MinimumAboveMaximum { text: String },
    #[error("fault kind `{kind}` is unknown; use create_vm, unresponsive or job_start")]
    UnknownFaultKind { kind: String },
    #[error("fault probability {probability} is not between 0 and 1")]
    ProbabilityOutOfRange { probability: f64 },
}

/// An external CPI's settings that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CpiSettingsError {
    #[error("cpi.executable: is empty")]
    NoExecutable,
    #[error("cpi.timeout: `{0}` is not a duration like `10m`")]
    Timeout(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SimulationText {
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    cpi_latency: Option<String>,
    #[serde(default)]
    agent_latency: Option<String>,
    #[serde(default)]
    faults: Vec<FaultText>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultText {
    pub kind: String,
    #[serde(default)]
    pub deployment: String,
    #[serde(default)]
    pub instance_group: String,
    #[serde(default = "always")]
    pub probability: f64,
}

fn always() -> f64 {
    1.0
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanText {
    id: String,
    releases: Vec<Version>,
    stemcell: StemcellVersion,
    manifest: String,
}

/// Service instances created when the fleet is first used.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provision {
    pub plan: String,
    /// Ids are `<prefix>-01`, `<prefix>-02`, ...
    pub prefix: String,
    pub count: u32,
    /// The versions they start on; the plan's current ones when absent.
    #[serde(default)]
    pub releases: Option<Vec<Version>>,
    #[serde(default)]
    pub stemcell: Option<StemcellVersion>,
    /// The organization and space they belong to, by name: what the broker's `cf_org`
    /// and `cf_space` listing filters (and so a canary selection) match.
    #[serde(default)]
    pub org: Option<String>,
    #[serde(default)]
    pub space: Option<String>,
}

/// Where the fleet's VMs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Iaas {
    /// The simulated cloud: fast, seeded, with faults; nothing runs.
    #[default]
    Simulated,
    /// VMs are directories of this machine and jobs run as real processes.
    Processes,
}

/// What a VM of `iaas: processes` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Vms {
    /// A container where this machine allows one (root, `bwrap`), else a directory
    /// whose jobs run on this machine as plain processes, said once at start.
    Auto,
    /// Each VM a container: its own namespaces, address, limits and users.
    Containers,
    /// A directory; its jobs run on this machine as plain processes.
    #[default]
    Processes,
}

/// A release kept as source (see `fleet_release::build_from_source`), built and uploaded
/// in each version listed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseSource {
    /// Relative to the definition's directory.
    pub path: std::path::PathBuf,
    pub versions: Vec<String>,
}

/// An external CPI for the fleet's VMs, as the definition gives it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct CpiText {
    executable: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    properties: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    timeout: Option<String>,
}

/// An external CPI: the director creates and deletes the fleet's VMs and disks through
/// it, a process per call, while its agents stay this process's.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalCpiSettings {
    /// `fleet-updater` (this program, as `fleet-updater cpi`), or a path relative to the
    /// definition's directory.
    pub executable: CpiProgram,
    pub args: Vec<String>,
    /// Passed in every request's context; `root` (the IaaS's directory) is added when
    /// absent.
    pub properties: serde_json::Map<String, serde_json::Value>,
    /// How long one call may take.
    pub timeout: std::time::Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpiProgram {
    /// This program: the process-backed IaaS's own CPI (`fleet-updater cpi`).
    ThisProgram,
    Path(std::path::PathBuf),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DefinitionText {
    #[serde(default)]
    iaas: Iaas,
    /// What a VM is; `iaas: processes` only.
    #[serde(default)]
    vms: Option<Vms>,
    /// An external CPI; `iaas: processes` only.
    #[serde(default)]
    cpi: Option<CpiText>,
    #[serde(default)]
    simulation: Option<SimulationText>,
    /// How many instances a manifest may ask of the director.
    #[serde(default)]
    limits: fleet_director::InstanceLimits,
    /// Finished tasks the director keeps per kind.
    #[serde(default)]
    tasks_kept: Option<usize>,
    /// On a shared database: how long a director process's locks and tasks outlive its
    /// last renewal.
    #[serde(default)]
    lock_timeout: Option<String>,
    /// Whether the resurrector recreates VMs of instances with persistent disks too.
    #[serde(default)]
    auto_fix_stateful_nodes: bool,
    #[serde(default)]
    releases: Vec<Release>,
    #[serde(default)]
    release_sources: Vec<ReleaseSource>,
    stemcells: Vec<Stemcell>,
    /// The director's cloud config; changing it makes every instance outdated.
    #[serde(default)]
    cloud_config: Option<String>,
    plans: Vec<PlanText>,
    #[serde(default)]
    provision: Vec<Provision>,
    /// Instances whose owner blocked maintenance updates.
    #[serde(default)]
    blocked: Vec<String>,
    /// Instances that run a long operation when the fleet is first used.
    #[serde(default)]
    busy: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Definition {
    pub iaas: Iaas,
    pub vms: Vms,
    pub simulation: SimulationSettings,
    pub releases: Vec<Release>,
    /// Releases built from source and uploaded in BOSH's format; paths already resolved.
    pub release_sources: Vec<ReleaseSource>,
    /// With `iaas: processes`, the program that runs a VM's supervisor process
    /// (`fleet-updater vm-supervisor DIR`); without one, the process that opens the fleet
    /// supervises the jobs itself, and they live while it does.
    pub supervisor: Option<std::path::PathBuf>,
    pub cpi: Option<ExternalCpiSettings>,
    pub limits: fleet_director::InstanceLimits,
    pub tasks_kept: Option<usize>,
    pub lock_timeout: Option<std::time::Duration>,
    pub auto_fix_stateful_nodes: bool,
    pub stemcells: Vec<Stemcell>,
    pub cloud_config: Option<String>,
    pub catalog: Catalog,
    pub provision: Vec<Provision>,
    pub blocked: Vec<String>,
    pub busy: Vec<String>,
}

/// How long a CPI call may take unless the definition says.
/// The shortest lock timeout: renewals come every third of it.
const MIN_LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

const CPI_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10 * 60);

fn cpi_settings(
    c: CpiText,
    dir: &std::path::Path,
) -> Result<ExternalCpiSettings, CpiSettingsError> {
    if c.executable.trim().is_empty() {
        return Err(CpiSettingsError::NoExecutable);
    }
    let executable = if c.executable == "fleet-updater" {
        CpiProgram::ThisProgram
    } else {
        CpiProgram::Path(dir.join(&c.executable))
    };
    let timeout = match &c.timeout {
        None => CPI_TIMEOUT,
        Some(t) => humantime::parse_duration(t)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| CpiSettingsError::Timeout(t.clone()))?,
    };
    Ok(ExternalCpiSettings {
        executable,
        args: c.args,
        properties: c.properties,
        timeout,
    })
}

/// `100ms-400ms`, or one duration for a fixed latency.
pub fn parse_latency(text: &str) -> Result<Latency, SimulationError> {
    let parse = |t: &str| {
        humantime::parse_duration(t.trim()).map_err(|_| SimulationError::NotADuration {
            text: t.to_string(),
        })
    };
    let (min, max) = match text.split_once('-') {
        Some((a, b)) => (parse(a)?, parse(b)?),
        None => {
            let d = parse(text)?;
            (d, d)
        }
    };
    if min > max {
        return Err(SimulationError::MinimumAboveMaximum {
            text: text.to_string(),
        });
    }
    Ok(Latency { min, max })
}

pub fn parse_fault(f: &FaultText) -> Result<Fault, SimulationError> {
    let kind = match f.kind.as_str() {
        "create_vm" => FaultKind::CreateVm,
        "unresponsive" => FaultKind::Unresponsive,
        "job_start" => FaultKind::JobStart,
        "errand" => FaultKind::Errand,
        other => {
            return Err(SimulationError::UnknownFaultKind {
                kind: other.to_string(),
            });
        }
    };
    if !(0.0..=1.0).contains(&f.probability) {
        return Err(SimulationError::ProbabilityOutOfRange {
            probability: f.probability,
        });
    }
    Ok(Fault {
        kind,
        deployment: f.deployment.clone(),
        instance_group: f.instance_group.clone(),
        probability: f.probability,
    })
}

impl Definition {
    /// # Errors
    /// Text that is not YAML, unknown keys, unknown plans, latencies or faults.
    pub fn parse(text: &str) -> Result<Definition, DefinitionError> {
        Definition::parse_in(text, std::path::Path::new("."))
    }

    /// [`Definition::parse`] for a definition kept in `dir`, which its relative paths
    /// start from.
    ///
    /// # Errors
    /// As [`Definition::parse`].
    pub fn parse_in(text: &str, dir: &std::path::Path) -> Result<Definition, DefinitionError> {
        let root = fleet_yaml::load(text, fleet_yaml::Limits::default())?;
        let raw: DefinitionText = serde_json::from_value(root.to_json())
            .map_err(|e| DefinitionError::Invalid(e.to_string()))?;
        let invalid = DefinitionError::Invalid;
        let mut simulation = SimulationSettings::default();
        if let Some(sim) = raw.simulation {
            simulation.seed = sim.seed;
            if let Some(l) = &sim.cpi_latency {
                simulation.cpi_latency = parse_latency(l).map_err(|e| invalid(e.to_string()))?;
            }
            if let Some(l) = &sim.agent_latency {
                simulation.agent_latency = parse_latency(l).map_err(|e| invalid(e.to_string()))?;
            }
            for f in &sim.faults {
                simulation
                    .faults
                    .push(parse_fault(f).map_err(|e| invalid(e.to_string()))?);
            }
        }
        let plans = raw
            .plans
            .into_iter()
            .map(|p| Plan {
                id: p.id,
                manifest: p.manifest,
                current: Versions {
                    releases: p.releases,
                    stemcell: p.stemcell,
                },
            })
            .collect();
        let catalog = Catalog { plans };
        for p in &raw.provision {
            if catalog.plan(&p.plan).is_none() {
                return Err(invalid(format!(
                    "provision names unknown plan `{}`",
                    p.plan
                )));
            }
        }
        let mut release_sources = raw.release_sources;
        for source in &mut release_sources {
            source.path = dir.join(&source.path);
            if source.versions.is_empty() {
                return Err(invalid(format!(
                    "release_sources: {} lists no versions",
                    source.path.display()
                )));
            }
        }
        if raw.tasks_kept == Some(0) {
            return Err(invalid(
                "tasks_kept: must be at least 1, or every task would go as it ends".into(),
            ));
        }
        let lock_timeout = match &raw.lock_timeout {
            None => None,
            Some(text) => match humantime::parse_duration(text.trim()) {
                Ok(d) if d >= MIN_LOCK_TIMEOUT => Some(d),
                Ok(_) => {
                    return Err(invalid(format!(
                        "lock_timeout: `{text}` is shorter than a second; a process renews \
                         every third of it"
                    )));
                }
                Err(_) => {
                    return Err(invalid(format!(
                        "lock_timeout: `{text}` is not a duration like `10s`"
                    )));
                }
            },
        };
        let cpi = match raw.cpi {
            None => None,
            Some(_) if raw.iaas == Iaas::Simulated => {
                return Err(invalid(
                    "cpi: an external CPI needs `iaas: processes`, whose agents reach the VMs it \
                     makes"
                        .into(),
                ));
            }
            Some(c) => Some(cpi_settings(c, dir).map_err(|e| invalid(e.to_string()))?),
        };
        let vms = match (raw.vms, raw.iaas, &cpi) {
            (Some(_), Iaas::Simulated, _) => {
                return Err(invalid(
                    "vms: needs `iaas: processes`; the simulated cloud makes no VM".into(),
                ));
            }
            (Some(Vms::Containers), _, Some(_)) => {
                return Err(invalid(
                    "vms: an external CPI makes the VMs itself; `cpi` takes `vms: processes`"
                        .into(),
                ));
            }
            // An external CPI's VMs are what it makes: directories of this machine.
            (_, _, Some(_)) => Vms::Processes,
            (vms, _, _) => vms.unwrap_or_default(),
        };
        if raw.iaas == Iaas::Simulated && !release_sources.is_empty() {
            return Err(invalid(
                "release_sources need `iaas: processes`; the simulated cloud runs no release"
                    .into(),
            ));
        }
        Ok(Definition {
            iaas: raw.iaas,
            vms,
            simulation,
            releases: raw.releases,
            release_sources,
            supervisor: None,
            cpi,
            limits: raw.limits,
            tasks_kept: raw.tasks_kept,
            lock_timeout,
            auto_fix_stateful_nodes: raw.auto_fix_stateful_nodes,
            stemcells: raw.stemcells,
            cloud_config: raw.cloud_config,
            catalog,
            provision: raw.provision,
            blocked: raw.blocked,
            busy: raw.busy,
        })
    }

    /// The organization and space the instance `id` is provisioned in.
    pub fn placement(&self, id: &str) -> fleet_broker::Placement {
        self.provision
            .iter()
            .find(|p| {
                id.strip_prefix(p.prefix.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| (1..=p.count).contains(&n))
            })
            .map(|p| fleet_broker::Placement {
                organization_name: p.org.clone(),
                space_name: p.space.clone(),
            })
            .unwrap_or_default()
    }

    /// The ids and starting versions of the instances to provision, in order.
    pub fn instances(&self) -> Vec<(String, String, Versions)> {
        let mut out = Vec::new();
        for p in &self.provision {
            let plan = self.catalog.plan(&p.plan).expect("checked when parsed");
            for n in 1..=p.count {
                let versions = Versions {
                    releases: p
                        .releases
                        .clone()
                        .unwrap_or_else(|| plan.current.releases.clone()),
                    stemcell: p
                        .stemcell
                        .clone()
                        .unwrap_or_else(|| plan.current.stemcell.clone()),
                };
                out.push((format!("{}-{n:02}", p.prefix), p.plan.clone(), versions));
            }
        }
        out
    }

    /// The same fleet with every latency removed, for benchmarks.
    pub fn without_latency(mut self) -> Self {
        self.simulation.cpi_latency = Latency::ZERO;
        self.simulation.agent_latency = Latency::ZERO;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_demo_definition_is_valid() {
        let d = Definition::parse(DEMO).unwrap();
        assert_eq!(d.catalog.plans.len(), 2);
        let instances = d.instances();
        assert!((25..=35).contains(&instances.len()), "{}", instances.len());
        assert_eq!(d.blocked.len(), 2);
        assert_eq!(d.busy.len(), 1);
        for (id, plan, versions) in &instances {
            let current = &d.catalog.plan(plan).unwrap().current;
            assert_ne!(versions, current, "{id} starts outdated");
        }
    }

    #[test]
    fn latencies_and_faults_are_checked() {
        assert_eq!(
            parse_latency("100ms-300ms").unwrap().max,
            Duration::from_millis(300)
        );
        assert!(parse_latency("300ms-100ms").is_err());
        let bad = FaultText {
            kind: "meteor".into(),
            deployment: String::new(),
            instance_group: String::new(),
            probability: 1.0,
        };
        assert!(
            parse_fault(&bad)
                .unwrap_err()
                .to_string()
                .contains("unknown")
        );
        let err =
            Definition::parse("releases: []\nstemcells: []\nplans: []\ncolour: red\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `colour`"), "{err}");
    }
}
