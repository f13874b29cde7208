//! What a deploy is asked to do beyond its manifest: recreate, fix, start, restart, the
//! instances it targets, and canaries and in-flight limits that override the manifest's.

use crate::manifest::Count;
use crate::target::Target;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeployOptions {
    /// Recreate every VM.
    pub recreate: bool,
    /// Replace VMs whose agents do not answer instead of failing.
    pub fix: bool,
    pub skip_drain: bool,
    pub canaries: Option<Count>,
    pub max_in_flight: Option<Count>,
    /// Plan and report, change nothing.
    pub dry_run: bool,
    /// Start stopped and detached instances.
    pub start: bool,
    /// Restart running instances in place (and start stopped ones), canaries first.
    pub restart: bool,
    /// The instances `recreate` and `start` apply to.
    pub target: Target,
    /// The teams a deployment this deploy creates belongs to (BOSH's teams of the user
    /// who created it); a deployment keeps the teams it was created with.
    pub teams: Vec<String>,
}
