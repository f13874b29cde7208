use std::collections::BTreeMap;
use std::time::Duration;

/// `canaries` and `max_in_flight`: a number of instances or a percentage of the changed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Fixed(u32),
    Percent(u32),
}

impl Count {
    /// The number for `changed` instances, percentages rounded down.
    pub fn of(self, changed: usize) -> usize {
        match self {
            Count::Fixed(n) => n as usize,
            Count::Percent(p) => changed * p as usize / 100,
        }
    }
}

/// How long to wait for jobs to run: `get_state` is polled from `min` until `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchTime {
    pub min: Duration,
    pub max: Duration,
}

impl WatchTime {
    /// The pauses before each `get_state`, as the BOSH director schedules them: the
    /// minimum, then steps of (max - min) / 9 clamped to 1 to 15 seconds, as many as fit
    /// before the maximum (a remainder smaller than a step is dropped).
    pub fn schedule(&self) -> Vec<Duration> {
        // Whole milliseconds, as the director computes them.
        let span = self.max.saturating_sub(self.min).as_millis() as u64;
        let step_ms = (span / 9).clamp(1000, 15_000);
        let step = Duration::from_millis(step_ms);
        let steps = (span / step_ms) as usize;
        std::iter::once(self.min)
            .chain(std::iter::repeat_n(step, steps))
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdatePolicy {
    pub canaries: Count,
    pub max_in_flight: Count,
    pub canary_watch_time: WatchTime,
    pub update_watch_time: WatchTime,
    /// Update this group alone, after the groups before it finished.
    pub serial: bool,
}

impl Default for UpdatePolicy {
    fn default() -> Self {
        let watch = WatchTime {
            min: Duration::from_secs(1),
            max: Duration::from_secs(30),
        };
        UpdatePolicy {
            canaries: Count::Fixed(1),
            max_in_flight: Count::Fixed(1),
            canary_watch_time: watch,
            update_watch_time: watch,
            serial: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRef {
    pub name: String,
    pub version: String,
    /// `exported_from`: the stemcells (`os/version`) a compiled release's packages were
    /// compiled for; they are used from there, and nothing of it is compiled.
    pub exported_from: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StemcellRef {
    pub alias: String,
    pub os: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobRef {
    pub name: String,
    pub release: String,
    pub properties: serde_json::Value,
    /// The manifest's `provides`, by the link's name in the job's spec.
    pub provides: BTreeMap<String, ProvideRef>,
    /// The manifest's `consumes`, by the link's name in the job's spec: the explicit
    /// consumers; the others are linked implicitly, by type.
    pub consumes: BTreeMap<String, ConsumeRef>,
    /// `custom_provider_definitions`: links the job provides that its spec does not name.
    pub custom_providers: Vec<CustomProvider>,
}

/// A link provider the manifest adds to a job (`custom_provider_definitions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomProvider {
    pub name: String,
    pub link_type: String,
    /// The job's properties it exports, by dotted name.
    pub properties: Vec<String>,
}

/// A job's `provides.NAME` in a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvideRef {
    /// `nil`: the link is provided to no one.
    Blocked,
    Provide {
        /// `as`: the name consumers find it by (the spec's name by default).
        alias: Option<String>,
        /// Consumable from other deployments.
        shared: bool,
    },
}

/// A job's `consumes.NAME` in a manifest.
#[derive(Debug, Clone, PartialEq)]
pub enum ConsumeRef {
    /// `nil`: the link is left unset (the consumer must be optional).
    Blocked,
    From {
        /// The provider's name (`as`), the consumer's own name by default.
        from: Option<String>,
        /// Another deployment, whose provider must be `shared`.
        deployment: Option<String>,
        network: Option<String>,
        ip_addresses: Option<bool>,
    },
    /// `instances`, `properties` and `address` given verbatim in the manifest.
    Manual(serde_json::Value),
}

/// A network an instance group is on, with the static addresses of its instances (the
/// n-th instance gets the n-th address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkRef {
    pub name: String,
    pub static_ips: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InstanceGroup {
    pub name: String,
    pub instances: u32,
    pub azs: Vec<String>,
    pub jobs: Vec<JobRef>,
    pub vm_type: Option<String>,
    /// Cloud config VM extensions, whose cloud properties add to the VM type's.
    pub vm_extensions: Vec<String>,
    /// A stemcell alias of the manifest.
    pub stemcell: String,
    /// Persistent disk size in MB, 0 for none.
    pub persistent_disk: u64,
    /// A disk type of the cloud config; its size replaces `persistent_disk`.
    pub persistent_disk_type: Option<String>,
    pub networks: Vec<NetworkRef>,
    pub update: UpdatePolicy,
    pub lifecycle: Lifecycle,
}

/// Whether a group's jobs run all the time, or run to an end when asked (`bosh
/// run-errand`): an errand group's instances get VMs only while their errand runs, unless
/// it is kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lifecycle {
    #[default]
    Service,
    Errand,
}

impl InstanceGroup {
    pub fn is_errand(&self) -> bool {
        self.lifecycle == Lifecycle::Errand
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub name: String,
    /// Networks defined in the manifest itself (used when there is no cloud config).
    pub networks: Option<Vec<crate::network::Network>>,
    pub releases: Vec<ReleaseRef>,
    pub stemcells: Vec<StemcellRef>,
    pub update: UpdatePolicy,
    pub instance_groups: Vec<InstanceGroup>,
    /// The `variables:` section as given, `null` without one: the config server checks
    /// and generates what it declares.
    pub variables: serde_json::Value,
}

impl Manifest {
    pub fn release(&self, name: &str) -> Option<&ReleaseRef> {
        self.releases.iter().find(|r| r.name == name)
    }

    pub fn stemcell(&self, alias: &str) -> Option<&StemcellRef> {
        self.stemcells.iter().find(|s| s.alias == alias)
    }
}
