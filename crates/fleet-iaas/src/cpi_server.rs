//! The process-backed IaaS as an external CPI (`fleet-updater cpi`): one request in, one
//! response out, every method BOSH's director and `create-env` call. The IaaS's
//! directory is the `root` property of the request's context. A VM's processes are ended
//! with it through its supervisor process, and a reboot restarts them there. With
//! `vms: containers` each VM is a container running its own agent at its address.

use std::path::{Path, PathBuf};

use fleet_cpi::protocol::{Request, Response, kinds};
use serde_json::{Map, Value, json};

use super::networked_agent;
use fleet_vm::daemon::Daemon;
use fleet_vm::iaas::{
    AgentSettings, ContainerSettings, IaasError, OwnAgentSettings, ProcessIaas, VmRecord,
};
use fleet_vm::registry_client::Registry;
use fleet_vm::supervisor::Processes;

/// The protocol versions this CPI speaks.
pub const API_VERSION: u32 = 2;

/// The stemcell format this CPI takes: any image, since its VMs are directories.
pub const STEMCELL_FORMAT: &str = "fleet-process";

/// A failed call: the protocol's error type and message.
struct Failure {
    kind: &'static str,
    message: String,
}

impl From<IaasError> for Failure {
    fn from(e: IaasError) -> Self {
        let kind = match &e {
            IaasError::VmNotFound(_) => kinds::VM_NOT_FOUND,
            IaasError::DiskNotFound(_) => kinds::DISK_NOT_FOUND,
            IaasError::StemcellNotFound(_) => kinds::STEMCELL_NOT_FOUND,
            IaasError::Io { .. } | IaasError::Container { .. } => kinds::CLOUD_ERROR,
        };
        Failure {
            kind,
            message: e.to_string(),
        }
    }
}

fn cloud_error(message: String) -> Failure {
    Failure {
        kind: kinds::CLOUD_ERROR,
        message,
    }
}

/// The arguments of one call, each read by position with an error naming it.
struct Arguments<'a> {
    method: &'a str,
    values: &'a [Value],
}

impl Arguments<'_> {
    fn get(&self, index: usize, name: &str) -> Result<&Value, Failure> {
        self.values.get(index).ok_or_else(|| {
            cloud_error(format!(
                "{}: argument {} ({name}) is missing",
                self.method,
                index + 1
            ))
        })
    }

    fn string(&self, index: usize, name: &str) -> Result<&str, Failure> {
        self.get(index, name)?.as_str().ok_or_else(|| {
            cloud_error(format!(
                "{}: argument {} ({name}) must be a string",
                self.method,
                index + 1
            ))
        })
    }

    fn size(&self, index: usize, name: &str) -> Result<u64, Failure> {
        self.get(index, name)?.as_u64().ok_or_else(|| {
            cloud_error(format!(
                "{}: argument {} ({name}) must be a whole number of MiB",
                self.method,
                index + 1
            ))
        })
    }

    fn map(&self, index: usize, name: &str) -> Result<Map<String, Value>, Failure> {
        match self.values.get(index) {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(map)) => Ok(map.clone()),
            Some(_) => Err(cloud_error(format!(
                "{}: argument {} ({name}) must be a map",
                self.method,
                index + 1
            ))),
        }
    }

    fn optional(&self, index: usize) -> Value {
        self.values.get(index).cloned().unwrap_or(Value::Null)
    }
}

/// What this CPI's VMs are (its `vms` property, as a fleet definition names them):
/// directories of this machine (`processes`, the default), containers (`containers`),
/// or containers where this machine makes them and directories elsewhere (`auto`).
fn vms_are_containers(request: &Request) -> Result<bool, Failure> {
    let unavailable = fleet_vm::container::unavailable;
    let kind = match request.context.get("vms") {
        None | Some(Value::Null) => return Ok(false),
        Some(kind) => kind,
    };
    match kind.as_str() {
        Some("processes") => Ok(false),
        Some("auto") => Ok(unavailable().is_none()),
        Some("containers") => match unavailable() {
            None => Ok(true),
            Some(why) => Err(cloud_error(format!(
                "the CPI's `vms: containers` cannot be had here: {why}"
            ))),
        },
        other => Err(cloud_error(format!(
            "the CPI's `vms` is `{}`: expected `processes`, `containers` or `auto`",
            other.map_or_else(|| kind.to_string(), str::to_string)
        ))),
    }
}

/// The networked agent a VM gets: the mbus of its `env` (`bosh.mbus.urls`), or of the
/// CPI's `agent.mbus` property, as BOSH's CPIs give it to the agents they start; the
/// certificate it serves with from `env.bosh.mbus.cert`. None without an mbus: the
/// director's agents are its own.
fn agent_settings(request: &Request, env: &Value) -> Result<Option<AgentSettings>, Failure> {
    let mbus = env
        .pointer("/bosh/mbus/urls/0")
        .or_else(|| request.context.get("agent").and_then(|a| a.get("mbus")))
        .or_else(|| request.context.get("agent.mbus"));
    let Some(mbus) = mbus else {
        return Ok(None);
    };
    let mbus = mbus
        .as_str()
        .ok_or_else(|| cloud_error("create_vm: the agent's mbus must be a URL".into()))?;
    let cert = env.pointer("/bosh/mbus/cert");
    let field = |name: &str| {
        cert.and_then(|c| c.get(name))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    Ok(Some(AgentSettings {
        mbus: mbus.to_string(),
        certificate: field("certificate"),
        private_key: field("private_key"),
    }))
}

/// Gives the VM a networked agent when its settings ask for one: the settings kept in the
/// registry when the CPI uses one, else in the VM's record, then the agent started and
/// awaited.
#[allow(clippy::too_many_arguments)]
async fn start_agent(
    request: &Request,
    program: &Path,
    iaas: &ProcessIaas,
    cid: &str,
    agent_id: &str,
    networks: &Value,
    env: &Value,
    log: &mut Vec<String>,
) -> Result<(), Failure> {
    let Some(settings) = agent_settings(request, env)? else {
        return Ok(());
    };
    match Registry::from_context(&request.context).map_err(|e| cloud_error(e.to_string()))? {
        // The agent reads its settings from the registry, as it would on an IaaS whose
        // metadata cannot change after the VM is made.
        Some(registry) => {
            let document = json!({
                "agent_id": agent_id,
                "vm": {"name": cid},
                "mbus": settings.mbus,
                "networks": networks,
                "disks": {"persistent": {}},
                "env": env,
            });
            registry
                .put(cid, &document)
                .await
                .map_err(|e| cloud_error(e.to_string()))?;
            iaas.set_registry(cid, &registry.url_for_agents())?;
            log.push(format!("VM {cid}: its settings are in the registry"));
        }
        None => iaas.set_agent(cid, settings)?,
    }
    networked_agent::start(program, &iaas.vm_dir(cid))
        .await
        .map_err(|e| cloud_error(e.to_string()))?;
    log.push(format!("VM {cid}: its agent started"));
    Ok(())
}

/// Makes the new VM `cid` a container that runs its own agent, handed its settings as
/// an IaaS hands a BOSH agent its own, and waits until the agent listens at the VM's
/// address. The registry is not used: the VM reads its settings from itself.
async fn start_container_agent(
    request: &Request,
    iaas: &ProcessIaas,
    vm: &VmRecord,
    env: &Value,
    log: &mut Vec<String>,
) -> Result<VmRecord, Failure> {
    let settings = agent_settings(request, env)?.ok_or_else(|| {
        cloud_error(
            "create_vm: a container VM of this CPI runs its own agent, which needs an mbus \
             (the VM's env.bosh.mbus.urls or the CPI's agent.mbus)"
                .into(),
        )
    })?;
    let (cid, hostname) = (vm.cid.clone(), vm.agent_id.clone());
    let started = off_runtime(iaas, move |iaas| {
        iaas.start_container(
            &cid,
            ContainerSettings {
                hostname,
                compilation: false,
                own_agent: true,
            },
        )?;
        // With a dynamic network's address as the container was given it.
        iaas.vm(&cid)
    })
    .await?;
    let own = OwnAgentSettings {
        agent_id: vm.agent_id.clone(),
        vm_cid: vm.cid.clone(),
        networks: started.networks.clone(),
        agent: settings,
    };
    let path = iaas.containers().own_agent_settings(&vm.cid);
    let text = serde_json::to_vec_pretty(&own).map_err(|e| cloud_error(e.to_string()))?;
    fleet_file::write(&path, &text, fleet_file::Mode::Private)
        .map_err(|e| cloud_error(format!("VM {}: its agent's settings: {e}", vm.cid)))?;
    log.push(format!("VM {}: its container started", vm.cid));
    agent_inside(iaas, &vm.cid).await?;
    log.push(format!("VM {}: its agent started inside it", vm.cid));
    Ok(started)
}

/// Starts the agent of the container VM `cid` inside it, and waits until it listens.
async fn agent_inside(iaas: &ProcessIaas, cid: &str) -> Result<(), Failure> {
    let sandbox = iaas
        .sandbox(cid)
        .map_err(|e| cloud_error(format!("VM {cid}: {e}")))?;
    networked_agent::start_inside(&sandbox)
        .await
        .map_err(|e| cloud_error(e.to_string()))
}

/// The registry, for a VM whose settings are kept there.
fn registry_of(
    request: &Request,
    iaas: &ProcessIaas,
    vm: &str,
) -> Result<Option<Registry>, Failure> {
    if !iaas.vm(vm).is_ok_and(|r| r.registry.is_some()) {
        return Ok(None);
    }
    Registry::from_context(&request.context).map_err(|e| cloud_error(e.to_string()))
}

/// Copies or removes a whole tree of the IaaS (a VM, a disk, a snapshot) on the blocking
/// pool.
async fn off_runtime<T: Send + 'static>(
    iaas: &ProcessIaas,
    work: impl FnOnce(&ProcessIaas) -> Result<T, IaasError> + Send + 'static,
) -> Result<T, Failure> {
    crate::blocking::on_iaas(iaas, work)
        .await
        .map_err(|e| cloud_error(format!("internal error: {e}")))?
        .map_err(Failure::from)
}

/// Answers one request.
pub async fn handle(request: &Request, program: &Path) -> Response {
    let mut log = Vec::new();
    match answer(request, program, &mut log).await {
        Ok(result) => Response::ok(result, log.join("\n")),
        Err(f) => Response::failed(f.kind, f.message, false, log.join("\n")),
    }
}

fn root(request: &Request) -> Result<PathBuf, Failure> {
    request
        .context
        .get("root")
        .and_then(Value::as_str)
        .map(PathBuf::from)
        .ok_or_else(|| {
            cloud_error(
                "the process CPI needs `root`, the IaaS's directory, in its properties".into(),
            )
        })
}

async fn answer(
    request: &Request,
    program: &Path,
    log: &mut Vec<String>,
) -> Result<Value, Failure> {
    let method = request.method.as_str();
    let args = Arguments {
        method,
        values: &request.arguments,
    };
    if method == "info" {
        return Ok(json!({"stemcell_formats": [STEMCELL_FORMAT], "api_version": API_VERSION}));
    }
    let iaas = ProcessIaas::open(&root(request)?)?.with_program(program);
    let version = request.api_version;
    match method {
        "create_stemcell" => {
            let image = args.string(0, "image_path")?;
            let properties = Value::Object(args.map(1, "cloud_properties")?);
            let cid = iaas.create_stemcell(image, &properties)?;
            log.push(format!("stemcell {cid} made from `{image}`"));
            Ok(json!(cid))
        }
        "delete_stemcell" => {
            iaas.delete_stemcell(args.string(0, "stemcell_cid")?)?;
            Ok(Value::Null)
        }
        "create_vm" => {
            let agent_id = args.string(0, "agent_id")?;
            let stemcell = args.string(1, "stemcell_cid")?;
            let properties = Value::Object(args.map(2, "cloud_properties")?);
            let networks = Value::Object(args.map(3, "networks")?);
            let env = Value::Object(args.map(5, "env")?);
            let containers = vms_are_containers(request)?;
            let mut vm = iaas.create_vm(agent_id, stemcell, &properties, &networks, &env)?;
            log.push(format!("VM {} made for agent {agent_id}", vm.cid));
            // A VM whose agent cannot be set up is deleted again: a VM whose CID the
            // caller never learns would be leaked.
            let agent = if containers {
                // With a dynamic network's address, as the container was given it.
                start_container_agent(request, &iaas, &vm, &env, log)
                    .await
                    .map(Some)
            } else {
                start_agent(
                    request, program, &iaas, &vm.cid, agent_id, &networks, &env, log,
                )
                .await
                .map(|()| None)
            };
            match agent {
                Ok(Some(started)) => vm = started,
                Ok(None) => {}
                Err(failure) => {
                    if !containers {
                        networked_agent::end(&iaas.vm_dir(&vm.cid)).await;
                    }
                    let gone = vm.cid.clone();
                    let _ = off_runtime(&iaas, move |iaas| iaas.delete_vm(&gone)).await;
                    return Err(failure);
                }
            }
            Ok(if version >= 2 {
                json!([vm.cid, vm.networks])
            } else {
                json!(vm.cid)
            })
        }
        "delete_vm" => {
            let cid = args.string(0, "vm_cid")?;
            if !fleet_vm::iaas::is_cid("vm", cid) {
                return Err(IaasError::VmNotFound(cid.to_string()).into());
            }
            // The VM's processes end with it, and its settings; a container's end with
            // its container.
            if !matches!(iaas.vm(cid), Ok(vm) if vm.container.is_some()) {
                Daemon::new(&iaas.vm_dir(cid), program).exit().await;
                networked_agent::end(&iaas.vm_dir(cid)).await;
            }
            if let Some(registry) =
                Registry::from_context(&request.context).map_err(|e| cloud_error(e.to_string()))?
                && iaas.vm(cid).is_ok_and(|vm| vm.registry.is_some())
            {
                registry
                    .delete(cid)
                    .await
                    .map_err(|e| cloud_error(e.to_string()))?;
            }
            let gone = cid.to_string();
            off_runtime(&iaas, move |iaas| iaas.delete_vm(&gone)).await?;
            log.push(format!("VM {cid} deleted"));
            Ok(Value::Null)
        }
        "has_vm" => Ok(json!(iaas.has_vm(args.string(0, "vm_cid")?))),
        "reboot_vm" => {
            let cid = args.string(0, "vm_cid")?;
            let record = iaas.vm(cid)?;
            if let Some(settings) = record.container {
                // Its container ends and starts again, with its agent, which brings back
                // the jobs that ran.
                let again = cid.to_string();
                off_runtime(&iaas, move |iaas| {
                    iaas.containers().halt(&again);
                    iaas.start_container(&again, settings).map(|_| ())
                })
                .await?;
                agent_inside(&iaas, cid).await?;
                log.push(format!("VM {cid} rebooted"));
                return Ok(Value::Null);
            }
            let supervisor = Daemon::new(&iaas.vm_dir(cid), program);
            if supervisor.running().await {
                supervisor
                    .stop()
                    .await
                    .map_err(|e| cloud_error(e.to_string()))?;
                supervisor
                    .start()
                    .await
                    .map_err(|e| cloud_error(e.to_string()))?;
            }
            log.push(format!("VM {cid} rebooted"));
            Ok(Value::Null)
        }
        "set_vm_metadata" => {
            iaas.set_vm_metadata(args.string(0, "vm_cid")?, &args.map(1, "metadata")?)?;
            Ok(Value::Null)
        }
        "create_disk" => {
            let size = args.size(0, "size")?;
            let properties = args.optional(1);
            let cid = iaas.create_disk(size, &properties)?;
            log.push(format!("disk {cid} of {size} MiB made"));
            Ok(json!(cid))
        }
        "delete_disk" => {
            let disk = args.string(0, "disk_cid")?.to_string();
            off_runtime(&iaas, move |iaas| iaas.delete_disk(&disk)).await?;
            Ok(Value::Null)
        }
        "has_disk" => Ok(json!(iaas.has_disk(args.string(0, "disk_cid")?))),
        "attach_disk" => {
            let (vm, disk) = (args.string(0, "vm_cid")?, args.string(1, "disk_cid")?);
            let hint = iaas.attach_disk(vm, disk)?;
            if let Some(registry) = registry_of(request, &iaas, vm)? {
                registry
                    .set_disk(vm, disk, Some(&hint))
                    .await
                    .map_err(|e| cloud_error(e.to_string()))?;
            }
            Ok(if version >= 2 {
                json!(hint)
            } else {
                Value::Null
            })
        }
        "detach_disk" => {
            let (vm, disk) = (args.string(0, "vm_cid")?, args.string(1, "disk_cid")?);
            iaas.detach_disk(vm, disk)?;
            if let Some(registry) = registry_of(request, &iaas, vm)? {
                registry
                    .set_disk(vm, disk, None)
                    .await
                    .map_err(|e| cloud_error(e.to_string()))?;
            }
            Ok(Value::Null)
        }
        "snapshot_disk" => {
            let disk = args.string(0, "disk_cid")?.to_string();
            Ok(json!(
                off_runtime(&iaas, move |iaas| iaas.snapshot_disk(&disk)).await?
            ))
        }
        "delete_snapshot" => {
            let snapshot = args.string(0, "snapshot_cid")?.to_string();
            off_runtime(&iaas, move |iaas| iaas.delete_snapshot(&snapshot)).await?;
            Ok(Value::Null)
        }
        "resize_disk" => {
            iaas.resize_disk(args.string(0, "disk_cid")?, args.size(1, "new_size")?)?;
            Ok(Value::Null)
        }
        // Disks here carry no metadata; there is nothing to set.
        "set_disk_metadata" => {
            args.string(0, "disk_cid")?;
            Ok(Value::Null)
        }
        other => Err(Failure {
            kind: kinds::NOT_IMPLEMENTED,
            message: format!("Invalid Method: {other}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(root: &Path, method: &str, arguments: Value) -> Request {
        let mut context = Map::new();
        context.insert("director_uuid".into(), json!("d"));
        context.insert("root".into(), json!(root.display().to_string()));
        Request {
            method: method.into(),
            arguments: arguments.as_array().unwrap().clone(),
            context,
            api_version: 2,
        }
    }

    #[tokio::test]
    async fn every_method_answers_in_the_protocols_shapes() {
        let dir = tempfile::tempdir().unwrap();
        let program = Path::new("/nonexistent/fleet-updater");
        let call = |method: &str, args: Value| {
            let request = request(dir.path(), method, args);
            async move { handle(&request, program).await }
        };
        let info = call("info", json!([])).await;
        assert_eq!(
            info.result,
            json!({"stemcell_formats": ["fleet-process"], "api_version": 2})
        );
        let stemcell = call("create_stemcell", json!(["/img", {"name": "s"}])).await;
        let stemcell = stemcell.result.as_str().unwrap().to_string();
        let vm = call(
            "create_vm",
            json!(["agent-1", stemcell, {}, {"default": {"type": "manual", "ip": "10.0.0.9"}}, [], {}]),
        )
        .await;
        assert!(vm.error.is_none(), "{vm:?}");
        let cid = vm.result[0].as_str().unwrap().to_string();
        assert_eq!(vm.result[1]["default"]["ip"], "10.0.0.9");
        assert!(vm.log.contains("made for agent agent-1"));
        assert_eq!(call("has_vm", json!([cid])).await.result, json!(true));
        let disk = call("create_disk", json!([512, {}, cid])).await.result;
        let hint = call("attach_disk", json!([cid, disk])).await.result;
        assert!(hint.as_str().unwrap().ends_with(disk.as_str().unwrap()));
        assert_eq!(call("has_disk", json!([disk])).await.result, json!(true));
        assert!(call("reboot_vm", json!([cid])).await.error.is_none());
        assert!(
            call("set_vm_metadata", json!([cid, {"deployment": "d"}]))
                .await
                .error
                .is_none()
        );
        let snapshot = call("snapshot_disk", json!([disk, {}])).await.result;
        assert!(
            call("delete_snapshot", json!([snapshot]))
                .await
                .error
                .is_none()
        );
        assert!(
            call("resize_disk", json!([disk, 1024]))
                .await
                .error
                .is_none()
        );
        assert!(
            call("detach_disk", json!([cid, disk]))
                .await
                .error
                .is_none()
        );
        assert!(call("delete_disk", json!([disk])).await.error.is_none());
        assert!(call("delete_vm", json!([cid])).await.error.is_none());
        let gone = call("delete_vm", json!([cid])).await.error.unwrap();
        assert_eq!(gone.kind, kinds::VM_NOT_FOUND);
        let gone = call("delete_disk", json!([disk])).await.error.unwrap();
        assert_eq!(gone.kind, kinds::DISK_NOT_FOUND);
        assert!(
            call("delete_stemcell", json!([stemcell]))
                .await
                .error
                .is_none()
        );

        let bad = call("create_disk", json!(["big"])).await.error.unwrap();
        assert_eq!(
            bad.message,
            "create_disk: argument 1 (size) must be a whole number of MiB"
        );
        let unknown = call("calculate_vm_cloud_properties", json!([{}]))
            .await
            .error
            .unwrap();
        assert_eq!(
            (unknown.kind.as_str(), unknown.message.as_str()),
            (
                kinds::NOT_IMPLEMENTED,
                "Invalid Method: calculate_vm_cloud_properties"
            )
        );
        let mut rootless = request(dir.path(), "has_vm", json!(["x"]));
        rootless.context.remove("root");
        let e = handle(&rootless, program).await.error.unwrap();
        assert!(e.message.contains("needs `root`"), "{}", e.message);
    }
}
