//! What the agent of one process-backed VM does for each message, as BOSH's agent does:
//! `apply` places the rendered jobs and compiled packages its blobstore holds, `start`
//! and `stop` start and stop the processes, `run_script` runs a lifecycle script of every
//! job, `drain` follows the drain protocol, disks are mounted, unmounted and migrated, and
//! packages compiled. What it applied and whether its jobs run is kept in the VM's
//! `bosh/` directory, so that the agent started again after a reboot brings the jobs back
//! without any lifecycle script.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fleet_vm::jobs;
use fleet_vm::lifecycle::{Lifecycle, StopContext};
use fleet_vm::place::{self, PackageToPlace};
use fleet_vm::sandbox::Sandbox;
use fleet_vm::supervisor::{ProcessState, Supervisor, Timings};
use serde_json::{Value, json};

use super::blobstore::Blobstore;
use super::error::ActionError;
use super::protocol::{Answer, ApplySpec, PackageRef, Request};
use super::tasks::{TaskState, Tasks};

const SPEC: &str = "bosh/spec.json";
const STARTED: &str = "bosh/started";

#[derive(Default)]
struct State {
    spec: ApplySpec,
    /// The spec as it was applied, every field the client sent (its networks filled in
    /// from the settings): what `get_state` answers with.
    applied: Value,
    supervisor: Option<Arc<Supervisor>>,
    started: bool,
}

pub struct VmAgent {
    pub(crate) vm: Sandbox,
    cid: String,
    agent_id: String,
    /// The networks the VM was made on, with the addresses the IaaS gave it.
    networks: serde_json::Map<String, Value>,
    /// Where the IaaS keeps persistent disks, each a directory named by its CID.
    pub(crate) disks: PathBuf,
    pub(crate) blobs: Blobstore,
    timings: Timings,
    state: tokio::sync::Mutex<State>,
    tasks: Tasks,
}

/// The arguments of one message, each read by position with an error naming it.
pub(crate) struct Arguments<'a>(pub(crate) &'a [Value]);

impl Arguments<'_> {
    pub(crate) fn string(&self, index: usize, name: &str) -> Result<String, ActionError> {
        self.0
            .get(index)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| ActionError::NotAString {
                position: index + 1,
                name: name.to_string(),
            })
    }

    pub(crate) fn value<T: serde::de::DeserializeOwned>(
        &self,
        index: usize,
        name: &str,
    ) -> Result<T, ActionError> {
        let value = self.0.get(index).cloned().unwrap_or(Value::Null);
        serde_json::from_value(value).map_err(|source| ActionError::BadArgument {
            position: index + 1,
            name: name.to_string(),
            source,
        })
    }
}

impl VmAgent {
    /// The agent of the VM in `vm_dir`, made on `networks` (as `create_vm` was given
    /// them), whose disks are in `disks`; what it applied before is read back, and jobs
    /// that ran are started again, no script run.
    ///
    /// # Errors
    /// When the VM's directories cannot be made.
    pub async fn open(
        vm_dir: &Path,
        cid: &str,
        agent_id: &str,
        networks: &Value,
        disks: &Path,
        timings: Timings,
    ) -> std::io::Result<Arc<VmAgent>> {
        let vm = Sandbox::create(vm_dir)?;
        let blobs = Blobstore::open(&vm.root().join("data/blobs"))?;
        std::fs::create_dir_all(vm.root().join("bosh"))?;
        let agent = Arc::new(VmAgent {
            vm,
            cid: cid.to_string(),
            agent_id: agent_id.to_string(),
            networks: networks.as_object().cloned().unwrap_or_default(),
            disks: disks.to_path_buf(),
            blobs,
            timings,
            state: tokio::sync::Mutex::new(State::default()),
            tasks: Tasks::default(),
        });
        agent.restore().await;
        Ok(agent)
    }

    pub fn blobs(&self) -> &Blobstore {
        &self.blobs
    }

    async fn restore(&self) {
        let Ok(text) = tokio::fs::read(self.vm.root().join(SPEC)).await else {
            return;
        };
        let Ok(applied) = serde_json::from_slice::<Value>(&text) else {
            return;
        };
        let Ok(spec) = serde_json::from_value::<ApplySpec>(applied.clone()) else {
            return;
        };
        let mut state = self.state.lock().await;
        let started = self.vm.root().join(STARTED).exists();
        state.supervisor = self.supervisor_for(&spec).ok().map(Arc::new);
        state.spec = spec;
        state.applied = applied;
        if started && let Some(s) = &state.supervisor {
            s.start().await;
            state.started = true;
        }
    }

    fn supervisor_for(&self, spec: &ApplySpec) -> Result<Supervisor, ActionError> {
        let processes = jobs::processes(&self.vm, &spec.job_names())?;
        Ok(Supervisor::new(self.vm.clone(), processes, self.timings))
    }

    async fn remember_started(&self, started: bool) -> Result<(), ActionError> {
        let path = self.vm.root().join(STARTED);
        let outcome = if started {
            tokio::fs::write(&path, "").await
        } else {
            match tokio::fs::remove_file(&path).await {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        };
        outcome.map_err(ActionError::io("keep whether the jobs are started"))
    }

    /// Stops every process, as the agent ends (its VM is deleted).
    pub async fn halt(&self) {
        let state = self.state.lock().await;
        if let Some(s) = &state.supervisor {
            s.stop().await;
        }
    }

    /// Answers one message; a long action answers the task to poll.
    pub async fn handle(self: &Arc<Self>, request: Request) -> Answer {
        let method = request.method.as_str();
        let args = Arguments(&request.arguments);
        let failed =
            |e: &dyn std::fmt::Display| Answer::exception(format!("Action Failed {method}: {e}"));
        let synchronous = match method {
            "ping" => Some(Ok(json!("pong"))),
            "info" => Some(Ok(json!({"api_version": 1}))),
            "get_state" => Some(Ok(self.get_state().await)),
            "start" => Some(self.start().await.map(|()| json!("started"))),
            "list_disk" => Some(Ok(json!(self.mounted_disks()))),
            "get_task" => {
                return match args.string(0, "task_id") {
                    Err(e) => failed(&e),
                    Ok(id) => match self.tasks.state(&id) {
                        None => failed(&format!("Task with id {id} could not be found")),
                        Some(TaskState::Running) => Answer::running(&id),
                        Some(TaskState::Done(value)) => Answer::value(value),
                        Some(TaskState::Failed(e)) => failed(&format!("Task {id} result: {e}")),
                    },
                };
            }
            _ => None,
        };
        if let Some(outcome) = synchronous {
            return match outcome {
                Ok(value) => Answer::value(value),
                Err(e) => failed(&e),
            };
        }
        let agent = Arc::clone(self);
        let arguments = request.arguments.clone();
        let work: std::pin::Pin<Box<dyn Future<Output = Result<Value, ActionError>> + Send>> =
            match method {
                "apply" | "prepare" => {
                    let spec: ApplySpec = match args.value(0, "apply_spec") {
                        Ok(spec) => spec,
                        Err(e) => return failed(&e),
                    };
                    if method == "prepare" {
                        Box::pin(
                            async move { agent.prepare(&spec).await.map(|()| json!("prepared")) },
                        )
                    } else {
                        let sent = arguments.first().cloned().unwrap_or_default();
                        Box::pin(
                            async move { agent.apply(sent, spec).await.map(|()| json!("applied")) },
                        )
                    }
                }
                "stop" => Box::pin(async move { agent.stop().await.map(|()| json!("stopped")) }),
                "drain" => {
                    Box::pin(async move { agent.drain(&arguments).await.map(|()| json!(0)) })
                }
                "run_script" => {
                    let name = match args.string(0, "script_name") {
                        Ok(name) => name,
                        Err(e) => return failed(&e),
                    };
                    let env: Vec<(String, String)> = arguments
                        .get(1)
                        .and_then(|o| o.get("env"))
                        .and_then(Value::as_object)
                        .map(|m| {
                            m.iter()
                                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().into()))
                                .collect()
                        })
                        .unwrap_or_default();
                    Box::pin(async move { agent.run_script(&name, &env).await.map(|()| json!({})) })
                }
                "mount_disk" | "unmount_disk" => {
                    let cid = match args.string(0, "disk_cid") {
                        Ok(cid) => cid,
                        Err(e) => return failed(&e),
                    };
                    if method == "mount_disk" {
                        Box::pin(blocking(move || agent.mount(&cid).map(|()| json!({}))))
                    } else {
                        Box::pin(blocking(move || agent.unmount(&cid)))
                    }
                }
                "migrate_disk" => {
                    Box::pin(async move { agent.migrate().await.map(|()| json!({})) })
                }
                "add_persistent_disk" | "remove_persistent_disk" => {
                    let cid = match args.string(0, "disk_cid") {
                        Ok(cid) => cid,
                        Err(e) => return failed(&e),
                    };
                    let adding = method == "add_persistent_disk";
                    let hint = arguments.get(1).and_then(Value::as_str).map(str::to_string);
                    Box::pin(blocking(move || match (adding, hint) {
                        (true, Some(hint)) => agent.set_hint(&cid, Some(&hint)).map(|()| json!({})),
                        // A hint that is no path (another CPI's map) says nothing this
                        // agent can use: where the disk is stays as it was known.
                        (true, None) => Ok(json!({})),
                        (false, _) => agent.set_hint(&cid, None).map(|()| json!({})),
                    }))
                }
                "compile_package" => Box::pin(async move { agent.compile(&arguments).await }),
                other => return Answer::exception(format!("unknown message {other}")),
            };
        Answer::running(&self.tasks.start(work))
    }

    async fn get_state(&self) -> Value {
        let state = self.state.lock().await;
        let statuses = state
            .supervisor
            .as_ref()
            .map(|s| s.statuses())
            .unwrap_or_default();
        // A VM with no processes to run is running, as monit with nothing to watch says;
        // one whose jobs' supervisor could not be made again runs none of them.
        let job_state = if statuses.is_empty() {
            if state.supervisor.is_none() && !state.spec.job_names().is_empty() {
                "failing"
            } else {
                "running"
            }
        } else if !state.started {
            "stopped"
        } else if statuses.iter().all(|s| s.state == ProcessState::Running) {
            "running"
        } else if statuses.iter().any(|s| s.state == ProcessState::Failing) {
            "failing"
        } else {
            "starting"
        };
        let mut value = match &state.applied {
            Value::Object(_) => state.applied.clone(),
            _ => json!({}),
        };
        let processes: Vec<Value> = statuses
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "state": s.state.as_str(),
                    "uptime": {"secs": s.uptime.map(|u| u.as_secs()).unwrap_or(0)},
                })
            })
            .collect();
        if let Some(map) = value.as_object_mut() {
            // BOSH's agent answers these as empty maps, never null.
            for key in ["networks", "resource_pool", "packages"] {
                if map.get(key).is_none_or(Value::is_null) {
                    map.insert(key.into(), json!({}));
                }
            }
            map.insert("agent_id".into(), json!(self.agent_id));
            map.insert("job_state".into(), json!(job_state));
            map.insert("vm".into(), json!({"name": self.cid}));
            if !processes.is_empty() {
                map.insert("processes".into(), json!(processes));
            }
        }
        value
    }

    /// What `apply` will need is all here (BOSH's agent fetches it ahead): every blob the
    /// spec names, with its digest.
    async fn prepare(&self, spec: &ApplySpec) -> Result<(), ActionError> {
        if let Some(archive) = &spec.rendered_templates_archive {
            self.blobs
                .fetch_off_runtime(&archive.blobstore_id, &archive.sha1)
                .await?;
        }
        for package in spec.packages.values() {
            self.blobs
                .fetch_off_runtime(&package.blobstore_id, &package.sha1)
                .await?;
        }
        Ok(())
    }

    /// BOSH's apply: the networks checked against the settings; then, when the spec has
    /// a configuration hash, its jobs and packages placed and only those kept (the
    /// initial apply of `create-env` names none, and an empty archive: the VM is left
    /// with nothing); the spec kept, and who the instance is written to `instance/`.
    async fn apply(&self, sent: Value, mut spec: ApplySpec) -> Result<(), ActionError> {
        super::networks::resolve(&mut spec.networks, &self.networks)?;
        let mut applied = match sent {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        applied.insert("networks".into(), Value::Object(spec.networks.clone()));
        let mut state = self.state.lock().await;
        if !spec.configuration_hash.is_empty() {
            let archive = spec
                .rendered_templates_archive
                .as_ref()
                .filter(|a| !a.blobstore_id.is_empty());
            let rendered = match archive {
                Some(archive) => {
                    let bytes = self
                        .blobs
                        .fetch_off_runtime(&archive.blobstore_id, &archive.sha1)
                        .await?;
                    tokio::task::spawn_blocking(move || fleet_render::unpack(&bytes))
                        .await
                        .map_err(|e| {
                            ActionError::io("unpack the rendered templates")(std::io::Error::other(
                                e,
                            ))
                        })??
                }
                None => Default::default(),
            };
            let mut packages = Vec::new();
            for PackageRef {
                name,
                sha1,
                blobstore_id,
                ..
            } in spec.packages.values()
            {
                let compiled = self.blobs.fetch_off_runtime(blobstore_id, sha1).await?;
                packages.push(PackageToPlace {
                    name: name.clone(),
                    compiled,
                });
            }
            if let Some(old) = state.supervisor.take() {
                old.stop().await;
            }
            place::place(&self.vm, &rendered, packages).await?;
            // The new jobs are supervised from here on, whatever else fails.
            state.supervisor = Some(Arc::new(self.supervisor_for(&spec)?));
            state.started = false;
            self.remember_started(false).await?;
            // Packages are placed under their names, whatever the spec's keys.
            let (vm, jobs, names) = (
                self.vm.clone(),
                rendered.keys().cloned().collect::<Vec<_>>(),
                spec.packages
                    .values()
                    .map(|p| p.name.clone())
                    .collect::<Vec<_>>(),
            );
            blocking(move || {
                place::keep_only(&vm, &jobs, &names).map_err(ActionError::io(
                    "remove the jobs and packages no longer applied",
                ))
            })
            .await?;
        }
        let applied = Value::Object(applied);
        let text = serde_json::to_vec_pretty(&applied).map_err(|source| ActionError::Encode {
            what: "the applied spec",
            source,
        })?;
        let (path, instance, who) = (
            self.vm.root().join(SPEC),
            self.vm.root().join("instance"),
            [
                ("id", spec.id.clone()),
                ("az", spec.az.clone()),
                ("name", spec.name.clone()),
                ("deployment", spec.deployment.clone()),
            ],
        );
        // Who the instance is, then the spec a restarted agent restores: a failure leaves
        // the spec applied before.
        blocking(move || {
            std::fs::create_dir_all(&instance)
                .map_err(ActionError::io("write who the instance is"))?;
            for (file, value) in who {
                fleet_vm::iaas::write_atomically(&instance.join(file), value.as_bytes())?;
            }
            fleet_vm::iaas::write_atomically(&path, &text)?;
            Ok(())
        })
        .await?;
        state.spec = spec;
        state.applied = applied;
        Ok(())
    }

    async fn start(&self) -> Result<(), ActionError> {
        let mut state = self.state.lock().await;
        if let Some(s) = &state.supervisor {
            s.start().await;
        }
        state.started = true;
        self.remember_started(true).await
    }

    async fn stop(&self) -> Result<(), ActionError> {
        let mut state = self.state.lock().await;
        if let Some(s) = &state.supervisor {
            s.stop().await;
        }
        state.started = false;
        self.remember_started(false).await
    }

    async fn run_script(&self, name: &str, env: &[(String, String)]) -> Result<(), ActionError> {
        let state = self.state.lock().await;
        let Some(supervisor) = &state.supervisor else {
            return Ok(());
        };
        let names = state.spec.job_names();
        let lifecycle = Lifecycle::new(&self.vm, &names, &**supervisor);
        Ok(lifecycle.run_hooks(name, env).await?)
    }

    /// BOSH's drain types: `shutdown`, or `update` with the spec to come; `status` is the
    /// agent's own business.
    async fn drain(&self, arguments: &[Value]) -> Result<(), ActionError> {
        let kind = arguments
            .first()
            .and_then(Value::as_str)
            .unwrap_or_default();
        let state = self.state.lock().await;
        let context = match kind {
            // The scripts ran to their end with `shutdown` or `update`: nothing is left
            // to wait for.
            "status" => return Ok(()),
            "shutdown" => StopContext::shutdown(Vec::new()),
            "update" => {
                let next: ApplySpec = Arguments(arguments).value(1, "new_spec")?;
                let hash = if state.spec.configuration_hash.is_empty() {
                    "hash_new"
                } else if state.spec.configuration_hash == next.configuration_hash {
                    "hash_unchanged"
                } else {
                    "hash_changed"
                };
                let updated_packages = next
                    .packages
                    .values()
                    .filter(|p| state.spec.packages.get(&p.name).map(|o| &o.sha1) != Some(&p.sha1))
                    .map(|p| p.name.clone())
                    .collect();
                StopContext {
                    job_change: if state.spec.job_names().is_empty() {
                        "job_new"
                    } else {
                        "job_changed"
                    }
                    .into(),
                    hash_change: hash.into(),
                    updated_packages,
                    drain_env: Vec::new(),
                    pre_stop_env: Vec::new(),
                }
            }
            other => return Err(ActionError::DrainType(other.to_string())),
        };
        let Some(supervisor) = &state.supervisor else {
            return Ok(());
        };
        let names = state.spec.job_names();
        let lifecycle = Lifecycle::new(&self.vm, &names, &**supervisor);
        Ok(lifecycle.drain_only(&context).await?)
    }
}

/// File work of an action (state written and synced, disks linked) on tokio's blocking
/// pool, off the workers that answer the director.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ActionError> + Send + 'static,
) -> Result<T, ActionError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(ActionError::io("finish a file action")(
            std::io::Error::other(e),
        ))
    })
}
