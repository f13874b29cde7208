//! The types the official `bosh` CLI (v7) decodes the director's answers into, written
//! after its public source (`director/info.go`, `director/vms.go`), decoded the way Go's
//! `encoding/json` does: unknown fields are ignored, a missing field or a `null` leaves the
//! zero value, and a value of the wrong type fails the whole answer.

use serde::{Deserialize, Deserializer};

/// Go leaves a field at its zero value when the JSON says `null`.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `director.InfoResp`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct InfoResp {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub uuid: String,
    #[serde(deserialize_with = "nullable")]
    pub version: String,
    #[serde(deserialize_with = "nullable")]
    pub user: String,
    #[serde(rename = "user_authentication", deserialize_with = "nullable")]
    pub auth: UserAuthenticationResp,
    #[serde(deserialize_with = "nullable")]
    pub features: std::collections::BTreeMap<String, InfoFeatureResp>,
    #[serde(deserialize_with = "nullable")]
    pub cpi: String,
    #[serde(deserialize_with = "nullable")]
    pub stemcell_os: String,
    #[serde(deserialize_with = "nullable")]
    pub stemcell_version: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UserAuthenticationResp {
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct InfoFeatureResp {
    #[serde(deserialize_with = "nullable")]
    pub status: bool,
}

/// `director.VMInfo`, one line of an instances or vms task's result.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VmInfo {
    #[serde(deserialize_with = "nullable")]
    pub agent_id: String,
    #[serde(deserialize_with = "nullable")]
    pub job_name: String,
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    pub index: Option<i64>,
    #[serde(rename = "job_state", deserialize_with = "nullable")]
    pub process_state: String,
    pub active: Option<bool>,
    #[serde(deserialize_with = "nullable")]
    pub bootstrap: bool,
    #[serde(deserialize_with = "nullable")]
    pub ips: Vec<String>,
    #[serde(rename = "deployment_name", deserialize_with = "nullable")]
    pub deployment: String,
    #[serde(deserialize_with = "nullable")]
    pub az: String,
    #[serde(deserialize_with = "nullable")]
    pub state: String,
    #[serde(rename = "vm_cid", deserialize_with = "nullable")]
    pub vm_id: String,
    #[serde(deserialize_with = "nullable")]
    pub vm_type: String,
    #[serde(rename = "disk_cid", deserialize_with = "nullable")]
    pub disk_id: String,
    #[serde(deserialize_with = "nullable")]
    pub ignore: bool,
    #[serde(rename = "disk_cids", deserialize_with = "nullable")]
    pub disk_ids: Vec<String>,
    #[serde(rename = "vm_created_at", deserialize_with = "nullable")]
    pub vm_created_at_raw: String,
    #[serde(deserialize_with = "nullable")]
    pub processes: Vec<VmInfoProcess>,
    #[serde(deserialize_with = "nullable")]
    pub vitals: VmInfoVitals,
    #[serde(deserialize_with = "nullable")]
    pub resurrection_paused: bool,
    #[serde(deserialize_with = "nullable")]
    pub stemcell: VmInfoStemcell,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VmInfoStemcell {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub version: String,
    #[serde(deserialize_with = "nullable")]
    pub api_version: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VmInfoProcess {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub state: String,
    #[serde(deserialize_with = "nullable")]
    pub cpu: VitalsCpu,
    #[serde(deserialize_with = "nullable")]
    pub mem: VitalsMemIntSize,
    #[serde(deserialize_with = "nullable")]
    pub uptime: VitalsUptime,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VmInfoVitals {
    #[serde(deserialize_with = "nullable")]
    pub cpu: VitalsCpu,
    #[serde(deserialize_with = "nullable")]
    pub mem: VitalsMemSize,
    #[serde(deserialize_with = "nullable")]
    pub swap: VitalsMemSize,
    #[serde(deserialize_with = "nullable")]
    pub uptime: VitalsUptime,
    #[serde(deserialize_with = "nullable")]
    pub load: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub disk: std::collections::BTreeMap<String, VitalsDiskSize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VitalsCpu {
    pub total: Option<f64>,
    #[serde(deserialize_with = "nullable")]
    pub sys: String,
    #[serde(deserialize_with = "nullable")]
    pub user: String,
    #[serde(deserialize_with = "nullable")]
    pub wait: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VitalsDiskSize {
    #[serde(deserialize_with = "nullable")]
    pub inode_percent: String,
    #[serde(deserialize_with = "nullable")]
    pub percent: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VitalsMemSize {
    #[serde(deserialize_with = "nullable")]
    pub kb: String,
    #[serde(deserialize_with = "nullable")]
    pub percent: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VitalsMemIntSize {
    pub kb: Option<u64>,
    pub percent: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VitalsUptime {
    #[serde(rename = "secs")]
    pub seconds: Option<u64>,
}

/// `director.Problem`, one entry of `GET /deployments/NAME/problems`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Problem {
    #[serde(deserialize_with = "nullable")]
    pub id: i64,
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    #[serde(deserialize_with = "nullable")]
    pub instance_group: String,
    #[serde(deserialize_with = "nullable")]
    pub resolutions: Vec<ProblemResolution>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProblemResolution {
    pub name: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub plan: String,
}

/// `director.OrphanDiskResp`, one entry of `GET /disks`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct OrphanDiskResp {
    #[serde(rename = "disk_cid", deserialize_with = "nullable")]
    pub cid: String,
    #[serde(deserialize_with = "nullable")]
    pub size: u64,
    #[serde(deserialize_with = "nullable")]
    pub deployment_name: String,
    #[serde(deserialize_with = "nullable")]
    pub instance_name: String,
    #[serde(deserialize_with = "nullable")]
    pub az: String,
    #[serde(deserialize_with = "nullable")]
    pub orphaned_at: String,
}

/// `director.CleanUpResponse`, the answer of `GET /cleanup/dryrun`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CleanUpResponse {
    #[serde(deserialize_with = "nullable")]
    pub releases: Vec<CleanableRelease>,
    #[serde(deserialize_with = "nullable")]
    pub orphaned_disks: Vec<OrphanDiskResp>,
    #[serde(deserialize_with = "nullable")]
    pub exported_releases: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub dns_blobs: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CleanableRelease {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub versions: Vec<String>,
}

/// `director.EventResp`, one entry of `GET /events`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct EventResp {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    #[serde(deserialize_with = "nullable")]
    pub timestamp: i64,
    #[serde(deserialize_with = "nullable")]
    pub user: String,
    #[serde(deserialize_with = "nullable")]
    pub action: String,
    #[serde(deserialize_with = "nullable")]
    pub object_type: String,
    #[serde(deserialize_with = "nullable")]
    pub object_name: String,
    #[serde(rename = "task", deserialize_with = "nullable")]
    pub task_id: String,
    #[serde(rename = "deployment", deserialize_with = "nullable")]
    pub deployment_name: String,
    #[serde(deserialize_with = "nullable")]
    pub instance: String,
    #[serde(deserialize_with = "nullable")]
    pub parent_id: String,
    #[serde(deserialize_with = "nullable")]
    pub context: std::collections::BTreeMap<String, serde_json::Value>,
    #[serde(deserialize_with = "nullable")]
    pub error: String,
}

/// The ODB errands' `service.Instance`, one entry of `GET /mgmt/service_instances`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct OdbInstance {
    #[serde(rename = "service_instance_id", deserialize_with = "nullable")]
    pub guid: String,
    #[serde(rename = "plan_id", deserialize_with = "nullable")]
    pub plan_unique_id: String,
    #[serde(deserialize_with = "nullable")]
    pub space_guid: String,
}

/// The ODB errands' `broker.OperationData`, the body of a 202. Go matches the field
/// names case-insensitively and sends the whole struct back, its deprecated errand fields
/// included, in `last_operation`'s `operation` parameter.
#[derive(Debug, Default, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct OdbOperationData {
    #[serde(rename = "BoshTaskID", deserialize_with = "nullable")]
    pub bosh_task_id: i64,
    #[serde(rename = "OperationType", deserialize_with = "nullable")]
    pub operation_type: String,
    #[serde(rename = "PostDeployErrand")]
    pub post_deploy_errand: serde_json::Map<String, serde_json::Value>,
    #[serde(rename = "PreDeleteErrand")]
    pub pre_delete_errand: serde_json::Map<String, serde_json::Value>,
}

/// `domain.LastOperation` of the broker API library the ODB errands use.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct OdbLastOperation {
    #[serde(deserialize_with = "nullable")]
    pub state: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
}

/// `director.DeploymentResp`, one entry of `GET /deployments`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct DeploymentResp {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub manifest: String,
    #[serde(deserialize_with = "nullable")]
    pub releases: Vec<NameVersion>,
    #[serde(deserialize_with = "nullable")]
    pub stemcells: Vec<NameVersion>,
    #[serde(deserialize_with = "nullable")]
    pub teams: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub cloud_config: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NameVersion {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub version: String,
}

/// `director.TaskResp`, one entry of `GET /tasks` or the answer of `GET /tasks/ID`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TaskResp {
    #[serde(deserialize_with = "nullable")]
    pub id: i64,
    #[serde(deserialize_with = "nullable")]
    pub started_at: i64,
    #[serde(rename = "timestamp", deserialize_with = "nullable")]
    pub finished_at: i64,
    #[serde(deserialize_with = "nullable")]
    pub state: String,
    #[serde(deserialize_with = "nullable")]
    pub user: String,
    #[serde(deserialize_with = "nullable")]
    pub deployment: String,
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    #[serde(deserialize_with = "nullable")]
    pub result: String,
    #[serde(deserialize_with = "nullable")]
    pub context_id: String,
}

/// `director.LockResp`, one entry of `GET /locks`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct LockResp {
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    #[serde(deserialize_with = "nullable")]
    pub resource: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub timeout: String,
    #[serde(deserialize_with = "nullable")]
    pub task_id: String,
}

/// `director.ReleaseSeriesResp`, one entry of `GET /releases`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ReleaseSeriesResp {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(rename = "release_versions", deserialize_with = "nullable")]
    pub versions: Vec<ReleaseVersionResp>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ReleaseVersionResp {
    #[serde(deserialize_with = "nullable")]
    pub version: String,
    #[serde(deserialize_with = "nullable")]
    pub currently_deployed: bool,
    #[serde(deserialize_with = "nullable")]
    pub commit_hash: String,
    #[serde(deserialize_with = "nullable")]
    pub uncommitted_changes: bool,
}

/// `director.StemcellResp`, one entry of `GET /stemcells`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StemcellResp {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub version: String,
    #[serde(deserialize_with = "nullable")]
    pub operating_system: String,
    #[serde(deserialize_with = "nullable")]
    pub cid: String,
    #[serde(deserialize_with = "nullable")]
    pub cpi: String,
    #[serde(deserialize_with = "nullable")]
    pub deployments: Vec<serde_json::Value>,
}

/// `director.CloudConfig`, one entry of `GET /cloud_configs`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CloudConfigResp {
    #[serde(deserialize_with = "nullable")]
    pub properties: String,
}

/// `director.Config`, one entry of `GET /configs` or the answer of `GET /configs/ID`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ConfigResp {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    #[serde(deserialize_with = "nullable")]
    pub created_at: String,
    #[serde(deserialize_with = "nullable")]
    pub team: String,
    #[serde(deserialize_with = "nullable")]
    pub content: String,
    #[serde(deserialize_with = "nullable")]
    pub current: bool,
}

/// `boshdirector.Info` of the ODB recreate-all errand, which checks the director's version
/// before it starts. Go matches its `Version` field to `version` whatever the case.
#[derive(Debug, Deserialize)]
pub struct OdbDirectorInfo {
    pub version: String,
}

/// `director.Errand`, one entry of `GET /deployments/NAME/errands`. Go matches field
/// names case-insensitively: `name` fills `Name`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Errand {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
}

/// `director.ErrandRunResp`, one JSON value of an errand task's result output.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrandRunResp {
    #[serde(deserialize_with = "nullable")]
    pub instance: ErrandInstance,
    #[serde(deserialize_with = "nullable")]
    pub exit_code: i64,
    #[serde(deserialize_with = "nullable")]
    pub stdout: String,
    #[serde(deserialize_with = "nullable")]
    pub stderr: String,
    #[serde(deserialize_with = "nullable")]
    pub logs: ErrandLogs,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrandInstance {
    #[serde(deserialize_with = "nullable")]
    pub group: String,
    #[serde(deserialize_with = "nullable")]
    pub id: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrandLogs {
    #[serde(deserialize_with = "nullable")]
    pub blobstore_id: String,
    #[serde(deserialize_with = "nullable")]
    pub sha1: String,
}
