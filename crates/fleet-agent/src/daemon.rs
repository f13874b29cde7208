//! A VM's networked agent as a process of its own (`fleet-updater vm-agent VM_DIR`),
//! started by the process-backed CPI for a VM whose settings give an mbus: it serves the
//! agent there until told to end (SIGTERM, as `delete_vm` does) or its VM is gone, and
//! stops the VM's processes as it ends. Started again (after the machine restarted), it
//! brings back the jobs that ran, no lifecycle script run.

use std::path::Path;
use std::time::Duration;

use fleet_vm::iaas::{AGENT_PIDFILE as PIDFILE, AgentSettings, ProcessIaas};
use fleet_vm::supervisor::Timings;

use super::actions::VmAgent;
use super::mbus::MbusUrl;
use super::server;

/// How often the agent looks whether its VM still exists.
const VM_CHECK: Duration = Duration::from_secs(2);

/// Where the agent keeps the settings it read from the registry, to start again without
/// it (the registry lives while `create-env` runs).
const CACHED_SETTINGS: &str = "bosh/settings.json";

/// How long the agent waits for the registry to answer.
const REGISTRY_WAIT: Duration = Duration::from_secs(60);

/// The agent's settings as the registry keeps them: the mbus, and the certificate of
/// `env.bosh.mbus.cert`; those read before when the registry is gone.
async fn from_registry(registry: &str, cid: &str, vm_dir: &Path) -> Result<AgentSettings, String> {
    let cached = vm_dir.join(CACHED_SETTINGS);
    let started = tokio::time::Instant::now();
    let settings = loop {
        match fleet_vm::registry_client::get(registry, cid).await {
            Ok(Some(settings)) => {
                let _ = std::fs::create_dir_all(vm_dir.join("bosh"));
                let text = serde_json::to_vec(&settings).map_err(|e| e.to_string())?;
                fleet_vm::iaas::write_atomically(&cached, &text).map_err(|e| e.to_string())?;
                break settings;
            }
            outcome if started.elapsed() >= REGISTRY_WAIT || cached.exists() => {
                let text = std::fs::read(&cached).map_err(|_| match outcome {
                    Err(e) => e,
                    _ => format!("the registry at {registry} has no settings for VM {cid}"),
                })?;
                break serde_json::from_slice(&text).map_err(|e| e.to_string())?;
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
        mbus: text("/mbus")
            .ok_or_else(|| format!("VM {cid}'s settings in the registry have no mbus"))?,
        certificate: text("/env/bosh/mbus/cert/certificate"),
        private_key: text("/env/bosh/mbus/cert/private_key"),
    })
}

/// Serves the agent of the VM in `vm_dir` until it is told to end or the VM is gone.
///
/// # Errors
/// A VM without networked agent settings, an mbus that cannot be bound, a certificate
/// that cannot be used.
pub async fn serve(vm_dir: &Path, timings: Timings) -> Result<(), String> {
    let vm_dir = std::path::absolute(vm_dir).map_err(|e| e.to_string())?;
    let (iaas, cid) = ProcessIaas::of_vm(&vm_dir)
        .ok_or_else(|| format!("{} is not a VM's directory", vm_dir.display()))?;
    let record = iaas.vm(&cid).map_err(|e| e.to_string())?;
    let AgentSettings {
        mbus,
        certificate,
        private_key,
    } = match (&record.agent, &record.registry) {
        (Some(settings), _) => settings.clone(),
        (None, Some(registry)) => from_registry(registry, &cid, &vm_dir).await?,
        (None, None) => return Err(format!("VM {cid} has no networked agent settings")),
    };
    let mbus = MbusUrl::parse(&mbus).map_err(|e| e.to_string())?;
    if !mbus.is_loopback() {
        return Err(format!(
            "the agent of VM {cid} would listen on {}: a process-backed VM's agent listens on \
             this machine's loopback only",
            mbus.without_credentials()
        ));
    }
    let cert = certificate.as_deref().zip(private_key.as_deref());
    let tls = server::tls_config(cert, &mbus.host)?;
    let listener = server::bind(&mbus)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", mbus.without_credentials()))?;
    let disks = iaas.root().join("disks");
    let agent = VmAgent::open(&vm_dir, &cid, &record.agent_id, &disks, timings)
        .await
        .map_err(|e| e.to_string())?;
    std::fs::write(vm_dir.join(PIDFILE), std::process::id().to_string())
        .map_err(|e| e.to_string())?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn({
        let agent = std::sync::Arc::clone(&agent);
        async move { server::serve(listener, tls, agent, &mbus, stopped).await }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::time::sleep(VM_CHECK) => {
                if !iaas.has_vm(&cid) {
                    break;
                }
            }
        }
    }
    let _ = stop.send(true);
    let _ = serving.await;
    agent.halt().await;
    let _ = std::fs::remove_file(vm_dir.join(PIDFILE));
    Ok(())
}
