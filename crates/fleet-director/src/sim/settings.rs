use std::time::Duration;

/// A uniform range of call latencies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    pub min: Duration,
    pub max: Duration,
}

impl Latency {
    pub const ZERO: Latency = Latency {
        min: Duration::ZERO,
        max: Duration::ZERO,
    };

    pub fn at(self, fraction: f64) -> Duration {
        self.min + (self.max.saturating_sub(self.min)).mul_f64(fraction)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The CPI refuses to create the VM.
    CreateVm,
    /// The new VM's agent never answers.
    Unresponsive,
    /// The jobs do not reach running after start.
    JobStart,
    /// An errand run on the instance exits 1.
    Errand,
}

impl FaultKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::CreateVm => "create_vm",
            FaultKind::Unresponsive => "unresponsive",
            FaultKind::JobStart => "job_start",
            FaultKind::Errand => "errand",
        }
    }
}

/// A configured fault: for instances of deployments whose name contains `deployment`
/// (all when empty), in the instance group named `instance_group` (any when empty), with
/// the given probability; decided from the seed per instance, and per VM of an instance for
/// `Unresponsive`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub kind: FaultKind,
    pub deployment: String,
    pub instance_group: String,
    pub probability: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SimulationSettings {
    pub seed: u64,
    pub cpi_latency: Latency,
    pub agent_latency: Latency,
    pub faults: Vec<Fault>,
}

impl Default for SimulationSettings {
    fn default() -> Self {
        SimulationSettings {
            seed: 1,
            cpi_latency: Latency::ZERO,
            agent_latency: Latency::ZERO,
            faults: Vec::new(),
        }
    }
}
