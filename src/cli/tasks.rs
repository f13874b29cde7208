//! The embedded director's tasks from the command line, with the fleet opened to change
//! it: `upload-release`, `delete-release`, and `stop`, `start`, `restart [--reboot]` and
//! `delete-deployment` of a deployment.

use std::path::PathBuf;

use fleet_updater::director::model::{Task, TaskState};
use fleet_updater::fleet::Access;
use fleet_updater::release::{build_from_source, from_path, from_tarball, is_release_source};

use super::error::{CliError, DONE, INSTANCES_FAILED};
use super::release_source::{SourceVersion, choose};
use super::state::{StateArgs, open_fleet, settings_of};
use super::{print_text, runtime};

#[derive(clap::Args)]
pub struct UploadArgs {
    /// The release tarball, a directory holding what it would, or a release source in
    /// BOSH's layout (`config/final.yml`, `jobs/`, `packages/`, `src/`), built here as `bosh
    /// create-release` builds it.
    path: PathBuf,
    /// The version to build a release source as; by default, the uploaded version with
    /// the same jobs and packages, else the next dev version (`0+dev.N`).
    #[arg(long)]
    version: Option<String>,
    /// Replace a version uploaded before with other contents, and write every archive
    /// again (repairs a damaged one).
    #[arg(long)]
    fix: bool,
}

pub fn upload(state: &StateArgs, args: &UploadArgs) -> Result<u8, CliError> {
    let config = settings_of(state)?;
    let source = is_release_source(&args.path);
    let unreadable = |e| CliError::Release {
        path: args.path.clone(),
        source: e,
    };
    let build = |version: &str| {
        build_from_source(&args.path, version)
            .and_then(|tarball| from_tarball(&tarball))
            .map_err(unreadable)
    };
    // Read (or built) and checked before the fleet is opened: a bad release changes
    // nothing.
    let mut archive = if source {
        build(args.version.as_deref().unwrap_or("0+dev.0"))?
    } else {
        from_path(&args.path).map_err(unreadable)?
    };
    runtime()?.block_on(async {
        let fleet = open_fleet(&config, Access::SERVE).await?;
        let director = fleet.director();
        if source {
            let uploaded = match director.releases().await {
                Ok(releases) => releases,
                Err(e) => {
                    fleet.close().await;
                    return Err(e.into());
                }
            };
            match choose(&archive, &uploaded, args.version.as_deref()) {
                SourceVersion::Uploaded(version) => {
                    fleet.close().await;
                    print_text(&format!(
                        "release {}/{version} has these sources already\n",
                        archive.manifest.name
                    ));
                    return Ok(DONE);
                }
                SourceVersion::New(version) => match build(&version) {
                    Ok(built) => archive = built,
                    Err(e) => {
                        fleet.close().await;
                        return Err(e);
                    }
                },
            }
        }
        let ended = match director.upload_release_archive(archive, args.fix).await {
            Ok(task) => director.wait(task.id).await,
            Err(e) => Err(e),
        };
        fleet.close().await;
        Ok(report(ended?))
    })
}

pub fn delete(state: &StateArgs, release: &str) -> Result<u8, CliError> {
    let config = settings_of(state)?;
    let (name, version) = match release.split_once('/') {
        Some((name, version)) => (name, Some(version)),
        None => (release, None),
    };
    runtime()?.block_on(async {
        let fleet = open_fleet(&config, Access::SERVE).await?;
        let director = fleet.director();
        let ended = match director.delete_release(name, version).await {
            Ok(task) => director.wait(task.id).await,
            Err(e) => Err(e),
        };
        fleet.close().await;
        Ok(report(ended?))
    })
}

/// What to do to a deployment.
pub enum DeploymentChange {
    Stop { hard: bool },
    Start,
    Restart,
    Delete,
}

pub fn change_deployment(
    state: &StateArgs,
    deployment: &str,
    change: DeploymentChange,
) -> Result<u8, CliError> {
    let config = settings_of(state)?;
    runtime()?.block_on(async {
        let fleet = open_fleet(&config, Access::SERVE).await?;
        let director = fleet.director();
        let started = match change {
            DeploymentChange::Stop { hard } => director.stop(deployment, hard).await,
            DeploymentChange::Start => director.start(deployment).await,
            DeploymentChange::Restart => {
                let all = fleet_updater::director::Target::all();
                director.restart(deployment, all, false).await
            }
            DeploymentChange::Delete => director.delete(deployment).await,
        };
        let ended = match started {
            Ok(task) => director.wait(task.id).await,
            Err(e) => Err(e),
        };
        fleet.close().await;
        Ok(report(ended?))
    })
}

/// Reboots every VM of `deployment` through the fleet's cloud.
pub fn reboot(state: &StateArgs, deployment: &str) -> Result<u8, CliError> {
    use fleet_updater::director::cpi::Cpi;
    let config = settings_of(state)?;
    runtime()?.block_on(async {
        let fleet = open_fleet(&config, Access::SERVE).await?;
        let cpi: &dyn Cpi = match &fleet.processes {
            Some(p) => &**p,
            None => &*fleet.cloud,
        };
        let mut rebooted = Vec::new();
        let mut failed = None;
        match fleet.director().instances(deployment).await {
            Ok(instances) if !instances.is_empty() => {
                for instance in instances {
                    let Some(cid) = &instance.vm_cid else {
                        continue;
                    };
                    match cpi.reboot_vm(cid).await {
                        Ok(()) => rebooted.push(instance.name()),
                        Err(e) => {
                            failed = Some(format!("rebooting {}: {e}", instance.name()));
                            break;
                        }
                    }
                }
            }
            Ok(_) => failed = Some(format!("deployment `{deployment}` has no instances")),
            Err(e) => failed = Some(e.to_string()),
        }
        fleet.close().await;
        if let Some(e) = failed {
            return Err(CliError::Show(e));
        }
        print_text(&format!("rebooted {}\n", rebooted.join(", ")));
        Ok(DONE)
    })
}

/// Prints how the task ended; its exit code.
fn report(task: Task) -> u8 {
    let result = task.result.as_deref().unwrap_or("-");
    print_text(&format!(
        "task {} {}: {result}\n",
        task.id,
        task.state.as_str()
    ));
    if task.state == TaskState::Done {
        DONE
    } else {
        INSTANCES_FAILED
    }
}
