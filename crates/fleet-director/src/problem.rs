//! What a cloud check finds and what may be done about each finding, as BOSH's director
//! names them; kept in the director's records, so it sits below both the scan and the
//! records.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// The director has a VM for the instance that the cloud does not.
    MissingVm,
    /// The VM is there and its agent does not answer (an expired NATS certificate, a
    /// stopped agent, a VM that does not boot).
    UnresponsiveAgent,
}

impl ProblemKind {
    /// The name the director's API uses.
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::MissingVm => "missing_vm",
            ProblemKind::UnresponsiveAgent => "unresponsive_agent",
        }
    }

    /// What `bosh cck --auto` applies.
    pub fn auto_resolution(self) -> Resolution {
        Resolution::RecreateVm
    }

    /// What may be done about it.
    pub fn resolutions(self) -> &'static [Resolution] {
        match self {
            ProblemKind::MissingVm => &[
                Resolution::Ignore,
                Resolution::RecreateVm,
                Resolution::DeleteVmReference,
            ],
            ProblemKind::UnresponsiveAgent => &[
                Resolution::Ignore,
                Resolution::RebootVm,
                Resolution::RecreateVm,
                Resolution::DeleteVmReference,
            ],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    Ignore,
    RebootVm,
    RecreateVm,
    DeleteVmReference,
}

impl Resolution {
    pub const ALL: [Resolution; 4] = [
        Resolution::Ignore,
        Resolution::RebootVm,
        Resolution::RecreateVm,
        Resolution::DeleteVmReference,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Resolution::Ignore => "ignore",
            Resolution::RebootVm => "reboot_vm",
            Resolution::RecreateVm => "recreate_vm",
            Resolution::DeleteVmReference => "delete_vm_reference",
        }
    }

    /// What it does, in the words `bosh cck` offers it with.
    pub fn plan(self) -> &'static str {
        match self {
            Resolution::Ignore => "Skip for now",
            Resolution::RebootVm => "Reboot VM",
            Resolution::RecreateVm => "Recreate VM and wait for processes to start",
            Resolution::DeleteVmReference => "Delete VM reference",
        }
    }

    pub fn parse(name: &str) -> Option<Resolution> {
        Resolution::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// One problem a scan found, kept until it is resolved or the next scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Numbered from 1 within the deployment's last scan.
    pub id: u64,
    pub kind: ProblemKind,
    pub deployment: String,
    pub group: String,
    pub instance_id: String,
    pub index: u32,
    pub vm_cid: String,
    pub description: String,
}
