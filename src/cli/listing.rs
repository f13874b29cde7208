//! `fleet` and `director`: what the embedded fleet and its director hold, for a user who
//! has no other tools.

use clap::{Args, Subcommand};
use fleet_updater::broker::State;
use fleet_updater::clock::rfc3339;
use fleet_updater::director::manifest;
use fleet_updater::director::model::TaskFilter;
use fleet_updater::fleet::{Access, EmbeddedFleet};
use fleet_updater::output::table;

use super::error::{CliError, DONE};
use super::state::{StateArgs, open_fleet, settings_of};
use super::tasks::DeploymentChange;
use super::{print_text, runtime};

#[derive(Args)]
pub struct DirectorArgs {
    #[command(flatten)]
    state: StateArgs,
    #[command(subcommand)]
    what: DirectorCommand,
}

#[derive(Subcommand)]
enum DirectorCommand {
    /// Deployments with their releases, stemcell, instances and lock.
    Deployments,
    /// Instances with their VMs, disks and what they run.
    Instances {
        /// Only this deployment.
        deployment: Option<String>,
    },
    /// Tasks, newest first.
    Tasks {
        /// Only this deployment's tasks.
        #[arg(long)]
        deployment: Option<String>,
        /// How many to show.
        #[arg(long, default_value_t = 30)]
        limit: usize,
    },
    /// One task and its event log; with `--cpi` its requests to the cloud (and the
    /// CPI's own log), with `--debug` those and its agent calls, as `bosh task` shows them.
    Task {
        id: u64,
        #[arg(long, conflicts_with = "debug")]
        cpi: bool,
        #[arg(long)]
        debug: bool,
    },
    /// Releases with their versions and jobs.
    Releases,
    /// Uploads a release in BOSH's format: a tarball, or a directory holding `release.MF`,
    /// `jobs/*.tgz` and `packages/*.tgz`.
    UploadRelease(super::tasks::UploadArgs),
    /// Deletes a release version (`NAME/VERSION`), or every version (`NAME`), unless a
    /// deployment uses it.
    DeleteRelease {
        /// `NAME/VERSION` or `NAME`.
        release: String,
    },
    /// Stops a deployment's jobs (drained, scripts run); `--hard` deletes its VMs too,
    /// keeping disks and addresses.
    Stop {
        deployment: String,
        #[arg(long)]
        hard: bool,
    },
    /// Starts a stopped deployment's jobs again.
    Start { deployment: String },
    /// Deletes a deployment: its instances are drained and stopped, VMs deleted, disks
    /// orphaned.
    DeleteDeployment { deployment: String },
    /// Restarts a deployment's jobs (stop and start, scripts run); with `--reboot`, reboots
    /// its VMs as the IaaS would instead: processes start again, no lifecycle script runs,
    /// the director is not asked.
    Restart {
        deployment: String,
        #[arg(long)]
        reboot: bool,
    },
}

fn with_fleet(
    args: &StateArgs,
    show: impl AsyncFnOnce(&EmbeddedFleet) -> Result<String, String>,
) -> Result<u8, CliError> {
    let config = settings_of(args)?;
    let text = runtime()?.block_on(async {
        let fleet = open_fleet(&config, Access::ReadOnly).await?;
        show(&fleet).await.map_err(CliError::Show)
    })?;
    print_text(&text);
    Ok(DONE)
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

pub fn fleet(args: &StateArgs) -> Result<u8, CliError> {
    with_fleet(args, async |fleet| {
        let views = fleet.broker.instances().await.map_err(|e| e.to_string())?;
        let rows: Vec<Vec<String>> = views
            .into_iter()
            .map(|v| {
                vec![
                    v.instance.id.clone(),
                    v.instance.plan_id.clone(),
                    match v.state {
                        State::Provisioned => "provisioned",
                        State::Deploying => "deploying",
                        State::Failed => "failed",
                    }
                    .to_string(),
                    v.running
                        .map(|r| r.describe())
                        .unwrap_or_else(|| "-".into()),
                    yes(v.update_available),
                    yes(v.instance.maintenance_updates_blocked),
                ]
            })
            .collect();
        Ok(table(
            &[
                "ID",
                "PLAN",
                "STATE",
                "RUNNING",
                "UPDATE AVAILABLE",
                "BLOCKED",
            ],
            &rows,
        ))
    })
}

/// `postgres/16.4, ubuntu-jammy/1.612` from a deployed manifest.
fn versions(manifest_text: Option<&str>) -> String {
    let Some(m) = manifest_text.and_then(|t| manifest::parse(t).ok()) else {
        return "-".into();
    };
    let mut parts: Vec<String> = m
        .releases
        .iter()
        .map(|r| format!("{}/{}", r.name, r.version))
        .collect();
    parts.extend(
        m.stemcells
            .iter()
            .map(|s| format!("{}/{}", s.os, s.version)),
    );
    parts.join(", ")
}

fn time(unix: Option<u64>) -> String {
    unix.map(|t| rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t)))
        .unwrap_or_else(|| "-".into())
}

pub fn director(args: &DirectorArgs) -> Result<u8, CliError> {
    match &args.what {
        DirectorCommand::UploadRelease(upload) => {
            return super::tasks::upload(&args.state, upload);
        }
        DirectorCommand::DeleteRelease { release } => {
            return super::tasks::delete(&args.state, release);
        }
        DirectorCommand::Stop { deployment, hard } => {
            let change = DeploymentChange::Stop { hard: *hard };
            return super::tasks::change_deployment(&args.state, deployment, change);
        }
        DirectorCommand::Start { deployment } => {
            let change = DeploymentChange::Start;
            return super::tasks::change_deployment(&args.state, deployment, change);
        }
        DirectorCommand::DeleteDeployment { deployment } => {
            let change = DeploymentChange::Delete;
            return super::tasks::change_deployment(&args.state, deployment, change);
        }
        DirectorCommand::Restart {
            deployment,
            reboot: true,
        } => {
            return super::tasks::reboot(&args.state, deployment);
        }
        DirectorCommand::Restart {
            deployment,
            reboot: false,
        } => {
            let change = DeploymentChange::Restart;
            return super::tasks::change_deployment(&args.state, deployment, change);
        }
        _ => {}
    }
    with_fleet(&args.state, async |fleet| {
        let director = fleet.director();
        let e = |e: fleet_updater::director::DirectorError| e.to_string();
        match &args.what {
            DirectorCommand::Deployments => {
                let mut rows = Vec::new();
                for d in director.deployments().await.map_err(e)? {
                    let instances = director.instances(&d.name).await.map_err(e)?.len();
                    let orphaned = director
                        .disks(&d.name)
                        .await
                        .map_err(e)?
                        .iter()
                        .filter(|d| d.orphaned)
                        .count();
                    let lock = director
                        .lock_holder(&d.name)
                        .await
                        .map_err(e)?
                        .map_or("-".to_string(), |t| format!("task {t}"));
                    rows.push(vec![
                        d.name.clone(),
                        instances.to_string(),
                        versions(d.manifest.as_deref()),
                        orphaned.to_string(),
                        lock,
                    ]);
                }
                Ok(table(
                    &[
                        "DEPLOYMENT",
                        "INSTANCES",
                        "RUNNING",
                        "ORPHANED DISKS",
                        "LOCKED BY",
                    ],
                    &rows,
                ))
            }
            DirectorCommand::Instances { deployment } => {
                let names = match deployment {
                    Some(d) if director.deployment(d).await.map_err(e)?.is_none() => {
                        return Err(format!("there is no deployment `{d}`"));
                    }
                    Some(d) => vec![d.clone()],
                    None => director
                        .deployments()
                        .await
                        .map_err(e)?
                        .into_iter()
                        .map(|d| d.name)
                        .collect(),
                };
                let mut rows = Vec::new();
                for name in names {
                    for i in director.instances(&name).await.map_err(e)? {
                        rows.push(vec![
                            name.clone(),
                            format!("{}/{}", i.group, i.index),
                            i.id.clone(),
                            i.az.clone().unwrap_or_else(|| "-".into()),
                            i.vm_cid.clone().unwrap_or_else(|| "-".into()),
                            i.disk_cid.clone().unwrap_or_else(|| "-".into()),
                            i.applied
                                .as_ref()
                                .map_or("-".into(), |a| a.stemcell.clone()),
                        ]);
                    }
                }
                Ok(table(
                    &[
                        "DEPLOYMENT",
                        "INSTANCE",
                        "ID",
                        "AZ",
                        "VM",
                        "DISK",
                        "STEMCELL",
                    ],
                    &rows,
                ))
            }
            DirectorCommand::Tasks { deployment, limit } => {
                let filter = TaskFilter {
                    deployment: deployment.clone(),
                    read_only: true,
                    // One more than shown tells whether there are more.
                    limit: Some(limit.saturating_add(1)),
                    ..TaskFilter::default()
                };
                let mut tasks = director.tasks(filter).await.map_err(e)?;
                let more = tasks.len() > *limit;
                tasks.truncate(*limit);
                let rows: Vec<Vec<String>> = tasks
                    .into_iter()
                    .map(|t| {
                        let mut result = t.result.clone().unwrap_or_default().replace('\n', " ");
                        if result.chars().count() > 100 {
                            result = result.chars().take(97).collect::<String>() + "...";
                        }
                        vec![
                            t.id.to_string(),
                            t.state.as_str().to_string(),
                            time(t.started_at),
                            t.deployment.clone().unwrap_or_else(|| "-".into()),
                            t.description.clone(),
                            result,
                        ]
                    })
                    .collect();
                let mut text = table(
                    &[
                        "ID",
                        "STATE",
                        "STARTED",
                        "DEPLOYMENT",
                        "DESCRIPTION",
                        "RESULT",
                    ],
                    &rows,
                );
                if more {
                    text.push_str(&format!(
                        "(the newest {limit} tasks; there are more: `--limit N` shows N)\n"
                    ));
                }
                Ok(text)
            }
            DirectorCommand::Releases => {
                let deployed = director.deployed_versions().await.map_err(e)?;
                let rows: Vec<Vec<String>> = director
                    .releases()
                    .await
                    .map_err(e)?
                    .into_iter()
                    .map(|r| {
                        let in_use = deployed
                            .releases
                            .contains(&(r.name.clone(), r.version.clone()));
                        vec![
                            r.name.clone(),
                            format!("{}{}", r.version, if in_use { "*" } else { "" }),
                            r.jobs
                                .iter()
                                .map(|j| j.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                            if r.jobs.iter().any(|j| j.archive.is_some()) {
                                "archives".to_string()
                            } else {
                                "metadata".to_string()
                            },
                        ]
                    })
                    .collect();
                let mut text = table(&["NAME", "VERSION", "JOBS", "KEPT AS"], &rows);
                text.push_str("(*) currently deployed\n");
                Ok(text)
            }
            DirectorCommand::UploadRelease(_)
            | DirectorCommand::DeleteRelease { .. }
            | DirectorCommand::Stop { .. }
            | DirectorCommand::Start { .. }
            | DirectorCommand::DeleteDeployment { .. }
            | DirectorCommand::Restart { .. } => {
                unreachable!("handled before the fleet is opened to look")
            }
            DirectorCommand::Task { id, cpi: true, .. }
            | DirectorCommand::Task {
                id, debug: true, ..
            } => {
                let only_cpi = matches!(args.what, DirectorCommand::Task { cpi: true, .. });
                let lines = director.trace(*id).await.map_err(e)?;
                let text: String = lines
                    .into_iter()
                    .filter(|l| {
                        !only_cpi || l.channel == fleet_updater::director::trace::Channel::Cpi
                    })
                    .map(|l| format!("{} {}\n", time(Some(l.time)), l.text))
                    .collect();
                Ok(text)
            }
            DirectorCommand::Task { id, .. } => {
                let task = director
                    .task(*id)
                    .await
                    .map_err(e)?
                    .ok_or_else(|| format!("task {id} not found"))?;
                let mut text = format!(
                    "task {}: {} ({}), deployment {}, started {}, finished {}\nresult: {}\n\n",
                    task.id,
                    task.description,
                    task.state.as_str(),
                    task.deployment.as_deref().unwrap_or("-"),
                    time(task.started_at),
                    time(task.finished_at),
                    task.result.as_deref().unwrap_or("-"),
                );
                let rows: Vec<Vec<String>> = director
                    .events(*id)
                    .await
                    .map_err(e)?
                    .into_iter()
                    .map(|ev| {
                        vec![
                            time(Some(ev.time)),
                            ev.stage.clone(),
                            ev.tags.join(","),
                            ev.task.clone(),
                            format!("{}/{}", ev.index, ev.total),
                            format!("{:?}", ev.state).to_lowercase(),
                            ev.error.clone().unwrap_or_default(),
                        ]
                    })
                    .collect();
                text.push_str(&table(
                    &["TIME", "STAGE", "TAGS", "TASK", "STEP", "STATE", "ERROR"],
                    &rows,
                ));
                Ok(text)
            }
        }
    })
}
