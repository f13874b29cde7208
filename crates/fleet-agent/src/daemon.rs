//! A VM's networked agent as a process of its own (`fleet-updater vm-agent VM_DIR`),
//! started by the process-backed CPI for a VM whose settings give an mbus: it serves the
//! agent there until told to end (SIGTERM, as `delete_vm` does) or its VM is gone, and
//! stops the VM's processes as it ends. Started again (after the machine restarted), it
//! brings back the jobs that ran, no lifecycle script run.
//!
//! A VM that is a directory of this machine has its agent on this machine's loopback,
//! its settings in the IaaS's record. A VM that is a container runs its agent inside,
//! as a BOSH VM does (`vm-agent --settings FILE /var/vcap`): at the VM's own address,
//! told who it is by the settings its IaaS handed it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleet_vm::iaas::{
    AGENT_PIDFILE as PIDFILE, ATTACHED_DISKS, AgentSettings, IaasError, OwnAgentSettings,
    ProcessIaas,
};
use fleet_vm::registry_client::RegistryError;
use fleet_vm::supervisor::Timings;

use super::actions::VmAgent;
use super::mbus::{MbusError, MbusUrl};
use super::server::{self, TlsError};

/// Why a VM's agent process cannot serve; the process that started it shows this.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The VM's directory as given cannot be made absolute.
    #[error(transparent)]
    Directory(std::io::Error),
    #[error("{} is not a VM's directory", .0.display())]
    NotAVm(PathBuf),
    #[error(transparent)]
    Iaas(#[from] IaasError),
    #[error("VM {cid} has no networked agent settings")]
    NoAgentSettings { cid: String },
    #[error("cannot read the agent's settings {}: {source}", path.display())]
    SettingsFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the agent's settings {} are not what an IaaS hands an agent: {source}", path.display())]
    BadSettingsFile {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("the registry at {registry} has no settings for VM {cid}")]
    NoSettings { registry: String, cid: String },
    /// The settings read from the registry, or kept from it, are not JSON.
    #[error(transparent)]
    Settings(serde_json::Error),
    #[error("VM {cid}'s settings in the registry have no mbus")]
    NoMbus { cid: String },
    #[error(transparent)]
    Mbus(#[from] MbusError),
    #[error(
        "the agent of VM {cid} would listen on {mbus}: a process-backed VM's agent listens on \
         this machine's loopback only"
    )]
    NotLoopback { cid: String, mbus: String },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("cannot listen on {mbus}: {source}")]
    Listen {
        mbus: String,
        #[source]
        source: std::io::Error,
    },
    /// The VM's agent state cannot be opened, or its pidfile written.
    #[error(transparent)]
    Vm(std::io::Error),
    #[error(transparent)]
    Signal(std::io::Error),
}

/// How often the agent looks whether its VM still exists.
const VM_CHECK: Duration = Duration::from_secs(2);

/// Where the agent keeps the settings it read from the registry, to start again without
/// it (the registry lives while `create-env` runs).
const CACHED_SETTINGS: &str = "bosh/settings.json";

/// How long the agent waits for the registry to answer.
const REGISTRY_WAIT: Duration = Duration::from_secs(60);

/// The agent's settings as the registry keeps them: the mbus, and the certificate of
/// `env.bosh.mbus.cert`; those read before when the registry is gone.
async fn from_registry(
    registry: &str,
    cid: &str,
    vm_dir: &Path,
) -> Result<AgentSettings, DaemonError> {
    let cached = vm_dir.join(CACHED_SETTINGS);
    let started = tokio::time::Instant::now();
    let settings = loop {
        match fleet_vm::registry_client::get(registry, cid).await {
            Ok(Some(settings)) => {
                let _ = tokio::fs::create_dir_all(vm_dir.join("bosh")).await;
                let text = serde_json::to_vec(&settings).map_err(DaemonError::Settings)?;
                let path = cached.clone();
                tokio::task::spawn_blocking(move || fleet_vm::iaas::write_atomically(&path, &text))
                    .await
                    .map_err(|e| DaemonError::Vm(std::io::Error::other(e)))??;
                break settings;
            }
            outcome if started.elapsed() >= REGISTRY_WAIT || cached.exists() => {
                let text = tokio::fs::read(&cached).await.map_err(|_| match outcome {
                    Err(e) => DaemonError::Registry(e),
                    _ => DaemonError::NoSettings {
                        // The URL carries the registry's password.
                        registry: fleet_vm::registry_client::without_credentials(registry),
                        cid: cid.to_string(),
                    },
                })?;
                break serde_json::from_slice(&text).map_err(DaemonError::Settings)?;
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let text = |pointer: &str| {
        settings
            .pointer(pointer)
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
    };
    Ok(AgentSettings {
        mbus: text("/mbus").ok_or_else(|| DaemonError::NoMbus {
            cid: cid.to_string(),
        })?,
        certificate: text("/env/bosh/mbus/cert/certificate"),
        private_key: text("/env/bosh/mbus/cert/private_key"),
    })
}

/// Who the agent is and what it serves: read from the IaaS's record of a VM that is a
/// directory of this machine, or from the settings handed to a VM that runs its own.
struct Identity {
    cid: String,
    agent_id: String,
    settings: AgentSettings,
    /// The networks the VM was made on.
    networks: serde_json::Value,
    /// Where the VM's persistent disks are, each a directory named by its CID.
    disks: PathBuf,
    /// The IaaS whose record of the VM says whether it still exists; none inside a
    /// container, which ends with its VM.
    iaas: Option<ProcessIaas>,
}

async fn of_record(vm_dir: &Path) -> Result<Identity, DaemonError> {
    let (iaas, cid) =
        ProcessIaas::of_vm(vm_dir).ok_or_else(|| DaemonError::NotAVm(vm_dir.to_path_buf()))?;
    let record = iaas.vm(&cid)?;
    let settings = match (&record.agent, &record.registry) {
        (Some(settings), _) => settings.clone(),
        (None, Some(registry)) => from_registry(registry, &cid, vm_dir).await?,
        (None, None) => return Err(DaemonError::NoAgentSettings { cid }),
    };
    let mbus = MbusUrl::parse(&settings.mbus)?;
    // On this machine's network, another address would be this machine's.
    if !mbus.is_loopback() {
        return Err(DaemonError::NotLoopback {
            cid,
            mbus: mbus.without_credentials(),
        });
    }
    Ok(Identity {
        cid,
        agent_id: record.agent_id,
        settings,
        networks: record.networks,
        disks: iaas.root().join("disks"),
        iaas: Some(iaas),
    })
}

async fn of_settings(vm_dir: &Path, path: &Path) -> Result<Identity, DaemonError> {
    let text = tokio::fs::read(path)
        .await
        .map_err(|source| DaemonError::SettingsFile {
            path: path.to_path_buf(),
            source,
        })?;
    let own: OwnAgentSettings =
        serde_json::from_slice(&text).map_err(|source| DaemonError::BadSettingsFile {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Identity {
        cid: own.vm_cid,
        agent_id: own.agent_id,
        settings: own.agent,
        networks: own.networks,
        disks: vm_dir.join(ATTACHED_DISKS),
        iaas: None,
    })
}

/// Serves the agent of the VM in `vm_dir` until it is told to end or the VM is gone;
/// `settings`, for a VM that runs its own agent, is the file its IaaS handed it.
///
/// # Errors
/// A VM without networked agent settings, an mbus that cannot be bound, a certificate
/// that cannot be used.
pub async fn serve(
    vm_dir: &Path,
    settings: Option<&Path>,
    timings: Timings,
) -> Result<(), DaemonError> {
    let vm_dir = std::path::absolute(vm_dir).map_err(DaemonError::Directory)?;
    let Identity {
        cid,
        agent_id,
        settings,
        networks,
        disks,
        iaas,
    } = match settings {
        Some(path) => of_settings(&vm_dir, path).await?,
        None => of_record(&vm_dir).await?,
    };
    let AgentSettings {
        mbus,
        certificate,
        private_key,
    } = settings;
    let mbus = MbusUrl::parse(&mbus)?;
    let cert = certificate.as_deref().zip(private_key.as_deref());
    let tls = server::tls_config(cert, &mbus.host)?;
    let listener = server::bind(&mbus)
        .await
        .map_err(|source| DaemonError::Listen {
            mbus: mbus.without_credentials(),
            source,
        })?;
    let agent = VmAgent::open(&vm_dir, &cid, &agent_id, &networks, &disks, timings)
        .await
        .map_err(DaemonError::Vm)?;
    tokio::fs::write(vm_dir.join(PIDFILE), std::process::id().to_string())
        .await
        .map_err(DaemonError::Vm)?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn({
        let agent = std::sync::Arc::clone(&agent);
        async move { server::serve(listener, tls, agent, &mbus, stopped).await }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(DaemonError::Signal)?;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::time::sleep(VM_CHECK), if iaas.is_some() => {
                let (iaas, cid) = (iaas.clone(), cid.clone());
                let there = tokio::task::spawn_blocking(move || {
                    iaas.is_none_or(|iaas| iaas.has_vm(&cid))
                })
                .await;
                if !there.unwrap_or(true) {
                    break;
                }
            }
        }
    }
    let _ = stop.send(true);
    let _ = serving.await;
    agent.halt().await;
    let _ = tokio::fs::remove_file(vm_dir.join(PIDFILE)).await;
    Ok(())
}
