//! The process-backed IaaS as a CPI sees it: VMs, persistent disks, snapshots and
//! stemcells as directories and records under its root, read and written on every call,
//! so that a CPI run as a process per call (`fleet-updater cpi`) and one inside the
//! director see the same cloud.
//!
//! ```text
//! ROOT/vms/CID/.records/      the IaaS's and the agent's records of a VM, which the VM
//!                             does not see: vm.json (its agent, stemcell, networks,
//!                             attached disks) and agent.json
//! ROOT/vms/CID/.disks/DISK/   an attached persistent disk's contents, inside its VM
//! ROOT/disks/CID/             a detached persistent disk's contents
//! ROOT/disks/CID.json         a disk's size and the VM it is attached to
//! ROOT/snapshots/CID/         a copy of a disk
//! ROOT/stemcells/CID.json     what create_stemcell was given
//! ROOT/containers, systems    the containers of container VMs (`crate::container`)
//! ```
//!
//! An attached disk moves into its VM's directory (a rename: its data stays where it
//! is on the machine's disk), so that a VM that is a container, which sees nothing of
//! the machine beyond its own directory, mounts it too; it moves back when detached or
//! when its VM is deleted.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::container::{ContainerError, ContainerRecord, ContainerSpec, Containers};
use super::sandbox::Sandbox;

#[derive(Debug, thiserror::Error)]
pub enum IaasError {
    #[error("VM {cid}: {source}")]
    Container {
        cid: String,
        #[source]
        source: ContainerError,
    },
    #[error("VM `{0}` not found")]
    VmNotFound(String),
    #[error("disk `{0}` not found")]
    DiskNotFound(String),
    #[error("stemcell `{0}` not found")]
    StemcellNotFound(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> IaasError {
    let what = what.into();
    move |source| IaasError::Io { what, source }
}

/// What the IaaS keeps of a VM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmRecord {
    pub cid: String,
    pub agent_id: String,
    pub stemcell: String,
    /// The networks as `create_vm` was given them, each with its `ip` where one is set.
    #[serde(default)]
    pub networks: Value,
    #[serde(default)]
    pub cloud_properties: Value,
    #[serde(default)]
    pub env: Value,
    /// The persistent disks attached, in the order they were.
    #[serde(default)]
    pub disks: Vec<String>,
    /// What `set_vm_metadata` set.
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// Where its agent is reached over HTTPS, for a VM whose creator talks to the agent
    /// itself (`create-env`): the VM's own settings, as a real VM keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSettings>,
    /// Where its agent reads its settings instead (`http://HOST:PORT`), for a CPI that
    /// keeps them in a registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// For a VM that is a container: what its container is made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerSettings>,
}

/// What a container VM's container is made of, kept to start it again after the
/// machine restarted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSettings {
    pub hostname: String,
    /// A compilation VM installs into `packages/`.
    #[serde(default)]
    pub compilation: bool,
    /// The VM runs its own networked agent inside (`create-env`'s VMs, whose creator
    /// talks to the agent at the VM's address), which places its jobs and packages
    /// itself.
    #[serde(default)]
    pub own_agent: bool,
}

/// What a VM that runs its own agent is told of itself, as an IaaS hands a BOSH agent
/// its settings: read by the agent inside from [`OWN_AGENT_SETTINGS`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnAgentSettings {
    pub agent_id: String,
    pub vm_cid: String,
    /// The networks with the VM's addresses (a dynamic network's as handed out).
    #[serde(default)]
    pub networks: Value,
    pub agent: AgentSettings,
}

/// Where a container VM finds the settings of its own agent: a directory only this
/// machine's side writes (its system directory's `settings/`), read-only inside.
pub const OWN_AGENT_DIR: &str = "/var/vcap/bosh/settings";

/// The settings file of a VM's own agent, inside the VM.
pub const OWN_AGENT_SETTINGS: &str = "/var/vcap/bosh/settings/agent.json";

/// A networked agent's settings: its mbus URL (with the credentials clients must bring)
/// and, when given, the certificate it serves with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSettings {
    pub mbus: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<String>,
}

impl VmRecord {
    /// The VM's address on each network, as the director reads them back.
    pub fn addresses(&self) -> Vec<(String, std::net::Ipv4Addr)> {
        let Some(networks) = self.networks.as_object() else {
            return Vec::new();
        };
        networks
            .iter()
            .filter_map(|(name, n)| {
                let ip = n.get("ip")?.as_str()?.parse().ok()?;
                Some((name.clone(), ip))
            })
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DiskRecord {
    size_mib: u64,
    #[serde(default)]
    cloud_properties: Value,
    /// The VM it is attached to, in whose directory it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vm: Option<String>,
}

/// Where an attached disk is in its VM's directory.
pub const ATTACHED_DISKS: &str = ".disks";

/// Where a VM's directory keeps the records that are not the VM's own.
pub const RECORDS: &str = ".records";

/// A VM's record file.
pub const VM_RECORD: &str = ".records/vm.json";

/// What the agent keeps of the VM it runs on, to find it again after a restart.
pub const AGENT_RECORD: &str = ".records/agent.json";

/// The pidfile of a VM's networked agent process, in the VM's directory.
pub const AGENT_PIDFILE: &str = "sys/run/agent.pid";

/// Whether `cid` is one this IaaS makes with `prefix` (`vm-` and 16 hex digits): any
/// other is none of its own, and never a path (`..`, `/home`) to act on.
pub fn is_cid(prefix: &str, cid: &str) -> bool {
    cid.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `prefix` and 16 random hex digits, what [`is_cid`] accepts.
fn new_id(prefix: &str) -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &random[..16])
}

#[derive(Debug, Clone)]
pub struct ProcessIaas {
    root: PathBuf,
    /// The program bound into container VMs, which their supervisors run as.
    program: Option<PathBuf>,
}

impl ProcessIaas {
    /// The IaaS under `root`, made absolute (scripts run elsewhere and disks are
    /// linked), its directories made when missing.
    ///
    /// # Errors
    /// When `root` cannot be made.
    pub fn open(root: &Path) -> Result<Self, IaasError> {
        let root = std::path::absolute(root).map_err(io(root.display().to_string()))?;
        for dir in [
            "vms",
            "disks",
            "snapshots",
            "stemcells",
            "containers",
            "systems",
        ] {
            let at = root.join(dir);
            std::fs::create_dir_all(&at).map_err(io(at.display().to_string()))?;
        }
        move_records(&root.join("vms"));
        Ok(ProcessIaas {
            root,
            program: None,
        })
    }

    /// The same IaaS, binding `program` into the containers it starts.
    pub fn with_program(mut self, program: &Path) -> Self {
        self.program = Some(program.to_path_buf());
        self
    }

    /// Its containers.
    pub fn containers(&self) -> Containers {
        Containers::new(&self.root, self.program.as_deref())
    }

    /// The VM `cid` as its processes are run: in its container, for a container VM.
    ///
    /// # Errors
    /// When its directory cannot be made.
    pub fn sandbox(&self, cid: &str) -> std::io::Result<Sandbox> {
        let sandbox = Sandbox::create(&self.vm_dir(cid))?;
        Ok(match self.vm(cid) {
            Ok(VmRecord {
                container: Some(_), ..
            }) => sandbox.in_container(self.containers(), cid),
            _ => sandbox,
        })
    }

    /// Makes the VM a container and starts it, with the limits its cloud properties
    /// set and its addresses on its networks.
    ///
    /// # Errors
    /// Bad cloud properties or networks, or a container that does not start.
    pub fn start_container(
        &self,
        cid: &str,
        settings: ContainerSettings,
    ) -> Result<ContainerRecord, IaasError> {
        let vm = self.change(cid, |vm| vm.container = Some(settings.clone()))?;
        let container = |source| IaasError::Container {
            cid: cid.to_string(),
            source,
        };
        let limits = super::container::limits(&vm.cloud_properties).map_err(container)?;
        let forwards =
            super::container::ports::forwards(&vm.cloud_properties).map_err(container)?;
        let dir = self.vm_dir(cid);
        let record = self
            .containers()
            .start(&ContainerSpec {
                cid,
                hostname: &settings.hostname,
                vm_dir: &dir,
                networks: &vm.networks,
                limits,
                compilation: settings.compilation,
                own_agent: settings.own_agent,
                forwards,
            })
            .map_err(container)?;
        // A dynamic network's address is the one handed out, from now on: the agent
        // reports it, and the VM keeps it when its container starts again.
        self.change(cid, |vm| {
            for nic in &record.nics {
                if let Some(network) = vm.networks.get_mut(&nic.network)
                    && let Some(settings) = network.as_object_mut()
                    && !settings.contains_key("ip")
                {
                    settings.insert("ip".into(), nic.address.to_string().into());
                    settings.insert("netmask".into(), "255.255.255.0".into());
                    if let Some(gateway) = nic.gateway {
                        settings.insert("gateway".into(), gateway.to_string().into());
                    }
                }
            }
        })?;
        Ok(record)
    }

    /// Starts the container of every container VM whose container does not run (the
    /// machine restarted), after ending the containers of VMs that are gone.
    ///
    /// # Errors
    /// When the VMs cannot be read; a container that does not start is logged.
    pub fn restart_containers(&self) -> Result<(), IaasError> {
        let vms = self.vms()?;
        let containers = self.containers();
        containers.clean_up(&vms.iter().map(|v| v.cid.clone()).collect::<Vec<_>>());
        for vm in vms {
            let Some(settings) = vm.container.clone() else {
                continue;
            };
            if containers.running(&vm.cid).is_none()
                && let Err(e) = self.start_container(&vm.cid, settings)
            {
                tracing::warn!(vm = %vm.cid, error = %e, "a VM's container did not start again");
            }
        }
        Ok(())
    }
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn vm_dir(&self, cid: &str) -> PathBuf {
        self.root.join("vms").join(cid)
    }

    /// Where the disk `cid` is: in its VM's directory while attached, else under
    /// `disks/`.
    pub fn disk_dir(&self, cid: &str) -> PathBuf {
        let detached = self.detached_disk_dir(cid);
        match self.disk_vm(cid) {
            Some(vm) => {
                let attached = self.attached_disk_dir(&vm, cid);
                if attached.is_dir() {
                    attached
                } else {
                    detached
                }
            }
            None => detached,
        }
    }

    /// The disk `cid`'s directory as a root its files are reached within; an attached
    /// disk's found within its VM's directory, whose links a VM's jobs may have made.
    ///
    /// # Errors
    /// When it is not a directory where the IaaS keeps it.
    pub fn disk_root(&self, cid: &str) -> std::io::Result<crate::beneath::Root> {
        if let Some(vm) = self.disk_vm(cid)
            && self.attached_disk_dir(&vm, cid).is_dir()
        {
            return crate::beneath::Root::open(&self.vm_dir(&vm))?
                .below(&Path::new(ATTACHED_DISKS).join(cid));
        }
        crate::beneath::Root::open(&self.detached_disk_dir(cid))
    }

    fn detached_disk_dir(&self, cid: &str) -> PathBuf {
        self.root.join("disks").join(cid)
    }

    fn attached_disk_dir(&self, vm: &str, cid: &str) -> PathBuf {
        self.vm_dir(vm).join(ATTACHED_DISKS).join(cid)
    }

    fn disk(&self, cid: &str) -> Result<DiskRecord, IaasError> {
        let path = self.disk_record(cid);
        let text =
            std::fs::read_to_string(&path).map_err(|_| IaasError::DiskNotFound(cid.to_string()))?;
        serde_json::from_str(&text).map_err(|e| IaasError::Io {
            what: path.display().to_string(),
            source: std::io::Error::other(e),
        })
    }

    fn save_disk(&self, cid: &str, record: &DiskRecord) -> Result<(), IaasError> {
        write_atomically(
            &self.disk_record(cid),
            &serde_json::to_vec_pretty(record).expect("a record serializes"),
        )
    }

    fn disk_vm(&self, cid: &str) -> Option<String> {
        if !is_cid("disk", cid) {
            return None;
        }
        self.disk(cid).ok()?.vm
    }

    /// Moves the disk between `disks/` and its VM's directory, and records where it is.
    fn move_disk(&self, cid: &str, to_vm: Option<&str>) -> Result<(), IaasError> {
        let mut record = self.disk(cid)?;
        if record.vm.as_deref() == to_vm {
            return Ok(());
        }
        // Each side's directory as a descriptor: a VM's `.disks/` is reached within the
        // VM's directory, so a link its jobs put there leads nowhere else.
        let side = |vm: Option<&str>| -> std::io::Result<std::fs::File> {
            match vm {
                Some(vm) => {
                    let within = crate::beneath::Root::open(&self.vm_dir(vm))?;
                    within.create_dir_all(Path::new(ATTACHED_DISKS))?;
                    within.open_at(
                        Path::new(ATTACHED_DISKS),
                        libc::O_PATH | libc::O_DIRECTORY,
                        0,
                    )
                }
                None => std::fs::File::open(self.root.join("disks")),
            }
        };
        let moved = (|| -> std::io::Result<()> {
            let from = match record.vm.as_deref() {
                // Where a move that did not finish left it.
                Some(vm) if !self.attached_disk_dir(vm, cid).is_dir() => side(None)?,
                other => side(other)?,
            };
            let to = side(to_vm)?;
            crate::beneath::rename_between(&from, cid, &to, cid)
        })();
        moved.map_err(io(format!("disk {cid}")))?;
        record.vm = to_vm.map(str::to_string);
        self.save_disk(cid, &record)
    }

    fn disk_record(&self, cid: &str) -> PathBuf {
        self.root.join("disks").join(format!("{cid}.json"))
    }

    fn stemcell_record(&self, cid: &str) -> PathBuf {
        self.root.join("stemcells").join(format!("{cid}.json"))
    }

    /// The VM `cid`'s record.
    ///
    /// # Errors
    /// [`IaasError::VmNotFound`] for a VM there is no record of.
    pub fn vm(&self, cid: &str) -> Result<VmRecord, IaasError> {
        if !is_cid("vm", cid) {
            return Err(IaasError::VmNotFound(cid.to_string()));
        }
        let path = self.vm_dir(cid).join(VM_RECORD);
        let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => IaasError::VmNotFound(cid.to_string()),
            _ => io(path.display().to_string())(e),
        })?;
        serde_json::from_str(&text).map_err(|e| IaasError::Io {
            what: path.display().to_string(),
            source: std::io::Error::other(e),
        })
    }

    /// Every VM's record.
    ///
    /// # Errors
    /// When the VMs' directory cannot be read.
    pub fn vms(&self) -> Result<Vec<VmRecord>, IaasError> {
        let dir = self.root.join("vms");
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io(dir.display().to_string()))? {
            let Ok(entry) = entry else { continue };
            let Some(cid) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if let Ok(vm) = self.vm(&cid) {
                found.push(vm);
            }
        }
        found.sort_by(|a, b| a.cid.cmp(&b.cid));
        Ok(found)
    }

    /// Every disk the IaaS keeps, attached or not, by CID in order.
    ///
    /// # Errors
    /// When the disks' directory cannot be read.
    pub fn disk_cids(&self) -> Result<Vec<String>, IaasError> {
        let dir = self.root.join("disks");
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io(dir.display().to_string()))? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(cid) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if self.has_disk(cid) {
                found.push(cid.to_string());
            }
        }
        found.sort();
        Ok(found)
    }

    /// The VM whose agent is `agent_id`.
    ///
    /// # Errors
    /// When the VMs cannot be read.
    pub fn vm_of_agent(&self, agent_id: &str) -> Result<Option<VmRecord>, IaasError> {
        Ok(self.vms()?.into_iter().find(|v| v.agent_id == agent_id))
    }

    fn save(&self, vm: &VmRecord) -> Result<(), IaasError> {
        let path = self.vm_dir(&vm.cid).join(VM_RECORD);
        write_atomically(
            &path,
            &serde_json::to_vec_pretty(vm).expect("a record serializes"),
        )
    }

    /// The IaaS of the VM whose directory is `vm_dir` (`ROOT/vms/CID`), and the VM's CID.
    pub fn of_vm(vm_dir: &Path) -> Option<(ProcessIaas, String)> {
        let cid = vm_dir.file_name()?.to_str()?.to_string();
        let root = vm_dir.parent()?.parent()?.to_path_buf();
        Some((
            ProcessIaas {
                root,
                program: None,
            },
            cid,
        ))
    }

    fn change(&self, cid: &str, change: impl FnOnce(&mut VmRecord)) -> Result<VmRecord, IaasError> {
        let mut vm = self.vm(cid)?;
        change(&mut vm);
        self.save(&vm)?;
        Ok(vm)
    }

    /// # Errors
    /// When the record cannot be written.
    pub fn create_stemcell(
        &self,
        image_path: &str,
        cloud_properties: &Value,
    ) -> Result<String, IaasError> {
        let cid = new_id("stemcell");
        let record =
            serde_json::json!({"image_path": image_path, "cloud_properties": cloud_properties});
        write_atomically(
            &self.stemcell_record(&cid),
            &serde_json::to_vec_pretty(&record).expect("a record serializes"),
        )?;
        Ok(cid)
    }

    /// # Errors
    /// [`IaasError::StemcellNotFound`], or the record cannot be removed.
    pub fn delete_stemcell(&self, cid: &str) -> Result<(), IaasError> {
        if !is_cid("stemcell", cid) {
            return Err(IaasError::StemcellNotFound(cid.to_string()));
        }
        match std::fs::remove_file(self.stemcell_record(cid)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(IaasError::StemcellNotFound(cid.to_string()))
            }
            other => other.map_err(io(format!("stemcell {cid}"))),
        }
    }

    /// Makes a VM: its directory laid out as `/var/vcap`, its record written last, so
    /// that a VM without a record is one whose creation did not finish.
    ///
    /// # Errors
    /// When the directory or record cannot be written.
    pub fn create_vm(
        &self,
        agent_id: &str,
        stemcell: &str,
        cloud_properties: &Value,
        networks: &Value,
        env: &Value,
    ) -> Result<VmRecord, IaasError> {
        let cid = new_id("vm");
        let dir = self.vm_dir(&cid);
        Sandbox::create(&dir).map_err(io(format!("VM {cid}")))?;
        std::fs::create_dir_all(dir.join(RECORDS)).map_err(io(format!("VM {cid}")))?;
        let vm = VmRecord {
            cid,
            agent_id: agent_id.to_string(),
            stemcell: stemcell.to_string(),
            networks: networks.clone(),
            cloud_properties: cloud_properties.clone(),
            env: env.clone(),
            disks: Vec::new(),
            metadata: Map::new(),
            agent: None,
            registry: None,
            container: None,
        };
        self.save(&vm)?;
        Ok(vm)
    }

    /// Names the registry the VM's agent reads its settings from.
    ///
    /// # Errors
    /// [`IaasError::VmNotFound`], or the record cannot be written.
    pub fn set_registry(&self, cid: &str, url: &str) -> Result<(), IaasError> {
        self.change(cid, |vm| vm.registry = Some(url.to_string()))
            .map(|_| ())
    }

    /// Gives the VM a networked agent's settings.
    ///
    /// # Errors
    /// [`IaasError::VmNotFound`], or the record cannot be written.
    pub fn set_agent(&self, cid: &str, settings: AgentSettings) -> Result<(), IaasError> {
        self.change(cid, |vm| vm.agent = Some(settings)).map(|_| ())
    }

    /// Removes the VM's directory, its record first. The caller has ended its processes.
    ///
    /// # Errors
    /// [`IaasError::VmNotFound`], or the directory cannot be removed.
    pub fn delete_vm(&self, cid: &str) -> Result<(), IaasError> {
        if !is_cid("vm", cid) {
            return Err(IaasError::VmNotFound(cid.to_string()));
        }
        let dir = self.vm_dir(cid);
        if !dir.join(VM_RECORD).exists() {
            // What an unfinished creation left goes too.
            let _ = std::fs::remove_dir_all(&dir);
            return Err(IaasError::VmNotFound(cid.to_string()));
        }
        let record = self.vm(cid)?;
        if record.container.is_some() {
            self.containers().stop(cid);
        }
        let _ = Sandbox::create(&dir).and_then(|s| s.unmount());
        // Its disks outlive it, as an IaaS's disks do.
        for disk in &record.disks {
            self.move_disk(disk, None)?;
        }
        std::fs::remove_file(dir.join(VM_RECORD)).map_err(io(format!("VM {cid}")))?;
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(format!("VM {cid}"))(e)),
            _ => Ok(()),
        }
    }

    pub fn has_vm(&self, cid: &str) -> bool {
        is_cid("vm", cid) && self.vm_dir(cid).join(VM_RECORD).exists()
    }

    /// # Errors
    /// [`IaasError::VmNotFound`], or the record cannot be written.
    pub fn set_vm_metadata(
        &self,
        cid: &str,
        metadata: &Map<String, Value>,
    ) -> Result<(), IaasError> {
        self.change(cid, |vm| vm.metadata = metadata.clone())
            .map(|_| ())
    }

    /// # Errors
    /// When the disk's directory or record cannot be made.
    pub fn create_disk(
        &self,
        size_mib: u64,
        cloud_properties: &Value,
    ) -> Result<String, IaasError> {
        let cid = new_id("disk");
        // A new disk is no VM's yet.
        let dir = self.detached_disk_dir(&cid);
        std::fs::create_dir_all(&dir).map_err(io(format!("disk {cid}")))?;
        let record = DiskRecord {
            size_mib,
            cloud_properties: cloud_properties.clone(),
            vm: None,
        };
        self.save_disk(&cid, &record)?;
        Ok(cid)
    }

    /// # Errors
    /// [`IaasError::DiskNotFound`], or the disk cannot be removed.
    pub fn delete_disk(&self, cid: &str) -> Result<(), IaasError> {
        if !self.has_disk(cid) {
            return Err(IaasError::DiskNotFound(cid.to_string()));
        }
        let dir = self.disk_dir(cid);
        let _ = std::fs::remove_file(self.disk_record(cid));
        std::fs::remove_dir_all(dir).map_err(io(format!("disk {cid}")))
    }

    pub fn has_disk(&self, cid: &str) -> bool {
        is_cid("disk", cid) && self.disk_dir(cid).is_dir()
    }

    /// Attaches the disk; its hint is where it appears (its directory).
    ///
    /// # Errors
    /// The VM or the disk is not found, or the record cannot be written.
    pub fn attach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<String, IaasError> {
        if !self.has_disk(disk_cid) {
            return Err(IaasError::DiskNotFound(disk_cid.to_string()));
        }
        self.change(vm_cid, |vm| {
            if !vm.disks.iter().any(|d| d == disk_cid) {
                vm.disks.push(disk_cid.to_string());
            }
        })?;
        self.move_disk(disk_cid, Some(vm_cid))?;
        Ok(self.disk_dir(disk_cid).display().to_string())
    }

    /// Detaches the disk, unmounting it where the VM has it mounted.
    ///
    /// # Errors
    /// The VM is not found, or the record cannot be written.
    pub fn detach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), IaasError> {
        self.vm(vm_cid)?;
        let sandbox = Sandbox::create(&self.vm_dir(vm_cid)).map_err(io(format!("VM {vm_cid}")))?;
        let _ = sandbox.unmount_disk(&self.disk_dir(disk_cid));
        if self.disk_vm(disk_cid).as_deref() == Some(vm_cid) {
            self.move_disk(disk_cid, None)?;
        }
        self.change(vm_cid, |vm| vm.disks.retain(|d| d != disk_cid))
            .map(|_| ())
    }

    /// A disk's size is what its record says; its directory holds what fits.
    ///
    /// # Errors
    /// [`IaasError::DiskNotFound`], or the record cannot be written.
    pub fn resize_disk(&self, cid: &str, size_mib: u64) -> Result<(), IaasError> {
        if !self.has_disk(cid) {
            return Err(IaasError::DiskNotFound(cid.to_string()));
        }
        let mut record = self.disk(cid)?;
        record.size_mib = size_mib;
        self.save_disk(cid, &record)
    }

    /// # Errors
    /// [`IaasError::DiskNotFound`], or the copy fails.
    pub fn snapshot_disk(&self, disk_cid: &str) -> Result<String, IaasError> {
        if !self.has_disk(disk_cid) {
            return Err(IaasError::DiskNotFound(disk_cid.to_string()));
        }
        let cid = new_id("snap");
        let at = self.root.join("snapshots").join(&cid);
        (|| {
            std::fs::create_dir_all(&at)?;
            crate::beneath::copy_between(
                &self.disk_root(disk_cid)?,
                &crate::beneath::Root::open(&at)?,
            )
        })()
        .map_err(io(format!("snapshot of disk {disk_cid}")))?;
        Ok(cid)
    }

    /// # Errors
    /// When the snapshot cannot be removed.
    pub fn delete_snapshot(&self, cid: &str) -> Result<(), IaasError> {
        if !is_cid("snap", cid) {
            return Ok(());
        }
        match std::fs::remove_dir_all(self.root.join("snapshots").join(cid)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io(format!("snapshot {cid}"))(e))
            }
            _ => Ok(()),
        }
    }
}

/// Moves the records of VMs made before they had a directory of their own
/// (`vm.json` and `agent.json` beside the VM's files) into it.
fn move_records(vms: &Path) {
    let Ok(entries) = std::fs::read_dir(vms) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        for (old, new) in [("vm.json", VM_RECORD), ("agent.json", AGENT_RECORD)] {
            if dir.join(old).is_file() && !dir.join(new).exists() {
                let _ = std::fs::create_dir_all(dir.join(RECORDS));
                let _ = std::fs::rename(dir.join(old), dir.join(new));
            }
        }
    }
}

/// Writes `path` through a file beside it renamed into place, so that a reader never
/// sees half a record.
/// The file is readable by its owner alone: a VM's settings hold its agent's credentials.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), IaasError> {
    fleet_file::write(path, bytes, fleet_file::Mode::Private)
        .map_err(io(path.display().to_string()))
}

/// Copies a tree as [`crate::beneath::copy_tree`] does: its links copied as links,
/// nothing outside either tree followed, whatever a VM does to them meanwhile.
///
/// # Errors
/// When a file cannot be read or written.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    crate::beneath::copy_tree(from, to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_disk_attached_to_a_vm_whose_disks_directory_is_a_link_stays_inside() {
        let dir = tempfile::tempdir().unwrap();
        let iaas = ProcessIaas::open(&dir.path().join("iaas")).unwrap();
        let vm = iaas
            .create_vm("agent-1", "stemcell-1", &json!({}), &json!({}), &json!({}))
            .unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        // A job replaced the VM's `.disks` with a link to this machine's directory.
        std::os::unix::fs::symlink(&outside, iaas.vm_dir(&vm.cid).join(".disks")).unwrap();
        let disk = iaas.create_disk(16, &json!({})).unwrap();
        let _ = iaas.attach_disk(&vm.cid, &disk);
        assert!(
            std::fs::read_dir(&outside).unwrap().next().is_none(),
            "the disk was not moved outside the VM"
        );
        assert!(iaas.has_disk(&disk), "nor lost");
    }

    #[test]
    fn a_vm_and_its_disks_are_records_any_process_reads() {
        let dir = tempfile::tempdir().unwrap();
        let iaas = ProcessIaas::open(dir.path()).unwrap();
        let networks = json!({"default": {"type": "manual", "ip": "10.0.0.5"}});
        let vm = iaas
            .create_vm("agent-1", "stemcell-1", &json!({}), &networks, &json!({}))
            .unwrap();
        let again = ProcessIaas::open(dir.path()).unwrap();
        assert_eq!(again.vm(&vm.cid).unwrap(), vm);
        assert_eq!(again.vm_of_agent("agent-1").unwrap().unwrap().cid, vm.cid);
        assert_eq!(
            vm.addresses(),
            [("default".to_string(), "10.0.0.5".parse().unwrap())]
        );
        let disk = iaas.create_disk(1024, &json!({})).unwrap();
        assert_eq!(
            iaas.attach_disk(&vm.cid, &disk).unwrap(),
            iaas.disk_dir(&disk).display().to_string()
        );
        iaas.attach_disk(&vm.cid, &disk).unwrap();
        assert_eq!(again.vm(&vm.cid).unwrap().disks, vec![disk.clone()], "once");
        assert_eq!(
            again.disk_cids().unwrap(),
            vec![disk.clone()],
            "listed attached"
        );
        std::fs::write(iaas.disk_dir(&disk).join("data"), "kept").unwrap();
        let snap = iaas.snapshot_disk(&disk).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("snapshots").join(&snap).join("data")).unwrap(),
            "kept"
        );
        iaas.delete_snapshot(&snap).unwrap();
        iaas.detach_disk(&vm.cid, &disk).unwrap();
        assert!(iaas.vm(&vm.cid).unwrap().disks.is_empty());
        iaas.resize_disk(&disk, 2048).unwrap();
        assert_eq!(
            again.disk_cids().unwrap(),
            vec![disk.clone()],
            "and detached"
        );
        iaas.delete_disk(&disk).unwrap();
        assert!(again.disk_cids().unwrap().is_empty());
        assert!(matches!(
            iaas.delete_disk(&disk),
            Err(IaasError::DiskNotFound(_))
        ));
        iaas.delete_vm(&vm.cid).unwrap();
        assert!(!iaas.has_vm(&vm.cid));
        // What is not one of its own CIDs names nothing, and never a path.
        std::fs::create_dir_all(dir.path().join("keep")).unwrap();
        for cid in ["", "..", "../keep", "/tmp", "vm-../../keep"] {
            assert!(
                matches!(iaas.delete_vm(cid), Err(IaasError::VmNotFound(_))),
                "{cid}"
            );
            assert!(
                matches!(iaas.delete_disk(cid), Err(IaasError::DiskNotFound(_))),
                "{cid}"
            );
            assert!(iaas.detach_disk(cid, "disk-0000000000000000").is_err());
        }
        assert!(dir.path().join("keep").is_dir() && dir.path().join("vms").is_dir());
        assert!(matches!(
            iaas.delete_vm(&vm.cid),
            Err(IaasError::VmNotFound(_))
        ));
        assert!(matches!(
            iaas.attach_disk(&vm.cid, &iaas.create_disk(1, &json!({})).unwrap()),
            Err(IaasError::VmNotFound(_))
        ));
    }
}
