//! `delete-env`: with the CPI installed, the VM deleted (its jobs stopped first when its
//! agent answers), then every disk and stemcell the state file records, then the
//! installation and the state file itself.

use super::error::EnvError;
use super::prepare::{self, Options};
use super::state::StateFile;
use super::vm;

/// Whether there was anything to delete.
///
/// # Errors
/// Whatever step failed, named; the state file keeps what is left.
pub async fn delete_env(
    options: &Options,
    progress: &mut dyn FnMut(String),
) -> Result<bool, EnvError> {
    if !StateFile::exists(&options.state_path()) {
        progress("No deployment state file found.".into());
        return Ok(false);
    }
    let mut p = prepare::read(options).await?;
    progress(format!("Deployment state: '{}'", p.state.path().display()));
    p.load_cpi_release().await?;
    // The stemcell deployed last says which API version the CPI speaks to its VMs.
    let api_version = p
        .state
        .current_stemcell()
        .and_then(|s| s.api_version)
        .unwrap_or(1);
    let cpi = p.cpi(api_version, progress).await?;
    let _registry = p.registry(progress).await?;
    progress("Started deleting deployment".into());
    let agent = vm::agent(&p.manifest)?;
    vm::delete_current(&cpi, &agent, &mut p.state, progress).await?;
    let gone = |e: &fleet_cpi::CpiCallError| {
        use fleet_cpi::protocol::kinds;
        matches!(
            e.kind(),
            Some(kinds::DISK_NOT_FOUND | kinds::STEMCELL_NOT_FOUND)
        )
    };
    for disk in p.state.state.disks.clone() {
        progress(format!("Deleting disk '{}'", disk.cid));
        match cpi.delete_disk(&disk.cid).await {
            Err(e) if !gone(&e) => {
                return Err(EnvError::cpi(format!("delete_disk {}", disk.cid))(e));
            }
            _ => {}
        }
        p.state
            .change(|s| {
                s.disks.retain(|d| d.id != disk.id);
                if s.current_disk_id == disk.id {
                    s.current_disk_id.clear();
                }
            })
            .await?;
    }
    for stemcell in p.state.state.stemcells.clone() {
        progress(format!("Deleting stemcell '{}'", stemcell.cid));
        match cpi.delete_stemcell(&stemcell.cid).await {
            Err(e) if !gone(&e) => {
                return Err(EnvError::cpi(format!("delete_stemcell {}", stemcell.cid))(
                    e,
                ));
            }
            _ => {}
        }
        p.state
            .change(|s| s.stemcells.retain(|x| x.id != stemcell.id))
            .await?;
    }
    p.installation.remove().await;
    p.state.remove().await?;
    progress("Finished deleting deployment".into());
    Ok(true)
}
