//! What a director task does. It decides the task's lock and whether the task changes its
//! deployment (a read-only task is nobody's last operation), so nothing has to compare
//! descriptions. The store keeps each kind by the name and description declared here.

use fleet_store::{Task, TaskKindSpec};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskKind {
    CreateDeployment,
    UpdateDeployment,
    RecreateDeployment,
    StopDeployment,
    StartDeployment,
    RestartDeployment,
    DeleteDeployment,
    /// Asks every agent for its state (`bosh instances --details`, `bosh vms`).
    InstanceDetails,
    /// Cloud check's scan: finds missing VMs and unresponsive agents (`bosh cck`).
    ScanProblems,
    /// Applies the resolutions chosen for the problems a scan found.
    ResolveProblems,
    /// The resurrector's repair: recreates the VMs of the instances named whose agents
    /// do not answer or whose VMs are gone (`PUT /deployments/:d/scan_and_fix`).
    ScanAndFix,
    /// Deletes unused releases and stemcells and orphaned disks (`bosh clean-up`).
    CleanUp,
    /// Deletes one orphaned disk (`bosh delete-disk`).
    DeleteOrphanDisk,
    /// Keeps an uploaded release (`bosh upload-release`).
    UpdateRelease,
    /// Deletes a release's versions and the archives only they used (`bosh delete-release`).
    DeleteRelease,
    /// Runs an errand on its instances (`bosh run-errand`); its results are the task's
    /// result output.
    RunErrand,
    /// Packs instances' logs into a bundle kept for download (`bosh logs`); its result
    /// is the bundle's id.
    FetchLogs,
    /// Packs a release compiled for a stemcell into a compiled release kept for download
    /// (`bosh export-release`); its result output names the blob.
    ExportRelease,
    /// Sets up or cleans up SSH sessions' users on instances (`bosh ssh`, `bosh scp`);
    /// its result is what each session is reached at.
    Ssh,
}

impl TaskKind {
    pub const ALL: [TaskKind; 19] = [
        TaskKind::CreateDeployment,
        TaskKind::UpdateDeployment,
        TaskKind::RecreateDeployment,
        TaskKind::StopDeployment,
        TaskKind::StartDeployment,
        TaskKind::RestartDeployment,
        TaskKind::DeleteDeployment,
        TaskKind::InstanceDetails,
        TaskKind::ScanProblems,
        TaskKind::ResolveProblems,
        TaskKind::ScanAndFix,
        TaskKind::CleanUp,
        TaskKind::DeleteOrphanDisk,
        TaskKind::UpdateRelease,
        TaskKind::DeleteRelease,
        TaskKind::RunErrand,
        TaskKind::FetchLogs,
        TaskKind::ExportRelease,
        TaskKind::Ssh,
    ];

    /// Every kind as the store keeps it.
    pub const SPECS: [TaskKindSpec; 19] = {
        let mut specs = [TaskKind::CreateDeployment.spec(); 19];
        let mut i = 0;
        while i < 19 {
            specs[i] = TaskKind::ALL[i].spec();
            i += 1;
        }
        specs
    };

    /// The name the store keeps; tasks stored before this version have these names too.
    pub const fn name(self) -> &'static str {
        match self {
            TaskKind::CreateDeployment => "create_deployment",
            TaskKind::UpdateDeployment => "update_deployment",
            TaskKind::RecreateDeployment => "recreate_deployment",
            TaskKind::StopDeployment => "stop_deployment",
            TaskKind::StartDeployment => "start_deployment",
            TaskKind::RestartDeployment => "restart_deployment",
            TaskKind::DeleteDeployment => "delete_deployment",
            TaskKind::InstanceDetails => "instance_details",
            TaskKind::ScanProblems => "scan_problems",
            TaskKind::ResolveProblems => "resolve_problems",
            TaskKind::ScanAndFix => "scan_and_fix",
            TaskKind::CleanUp => "clean_up",
            TaskKind::DeleteOrphanDisk => "delete_orphan_disk",
            TaskKind::UpdateRelease => "update_release",
            TaskKind::DeleteRelease => "delete_release",
            TaskKind::RunErrand => "run_errand",
            TaskKind::FetchLogs => "fetch_logs",
            TaskKind::ExportRelease => "export_release",
            TaskKind::Ssh => "ssh",
        }
    }

    /// The description the director shows, as BOSH words it.
    pub const fn description(self) -> &'static str {
        match self {
            TaskKind::CreateDeployment => "create deployment",
            TaskKind::UpdateDeployment => "update deployment",
            TaskKind::RecreateDeployment => "recreate deployment",
            TaskKind::StopDeployment => "stop deployment",
            TaskKind::StartDeployment => "start deployment",
            TaskKind::RestartDeployment => "restart deployment",
            TaskKind::DeleteDeployment => "delete deployment",
            TaskKind::InstanceDetails => "retrieve vm-stats",
            TaskKind::ScanProblems => "scan cloud",
            TaskKind::ResolveProblems => "apply resolutions",
            TaskKind::ScanAndFix => "scan and fix",
            TaskKind::CleanUp => "clean up",
            TaskKind::DeleteOrphanDisk => "delete orphan disk",
            TaskKind::UpdateRelease => "create release",
            TaskKind::DeleteRelease => "delete release",
            TaskKind::RunErrand => "run errand",
            TaskKind::FetchLogs => "fetch logs",
            TaskKind::ExportRelease => "export release",
            TaskKind::Ssh => "ssh",
        }
    }

    /// Whether the task changes its deployment (and so can be its last operation); the
    /// others only look.
    pub const fn changes_deployment(self) -> bool {
        !matches!(
            self,
            TaskKind::InstanceDetails
                | TaskKind::ScanProblems
                | TaskKind::FetchLogs
                | TaskKind::ExportRelease
                | TaskKind::Ssh
        )
    }

    pub const fn spec(self) -> TaskKindSpec {
        TaskKindSpec {
            name: self.name(),
            description: self.description(),
            changes_deployment: self.changes_deployment(),
        }
    }

    /// The kind the store names `name`.
    pub fn from_name(name: &str) -> Option<TaskKind> {
        TaskKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The kind of a stored task; `None` for one no director kind names.
    pub fn of(task: &Task) -> Option<TaskKind> {
        TaskKind::from_name(&task.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_descriptions_are_unique_and_find_their_kind_again() {
        let names: std::collections::BTreeSet<&str> =
            TaskKind::ALL.iter().map(|k| k.name()).collect();
        let descriptions: std::collections::BTreeSet<&str> =
            TaskKind::ALL.iter().map(|k| k.description()).collect();
        assert_eq!((names.len(), descriptions.len()), (19, 19));
        for kind in TaskKind::ALL {
            assert_eq!(TaskKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(
            TaskKind::SPECS.map(|s| s.name),
            TaskKind::ALL.map(TaskKind::name)
        );
    }
}
