//! The deploy procedure (seed 000): validate, bind existing VMs, decide the whole plan
//! ([`decide`]), claim its addresses, then apply it ([`apply`]): delete what is no longer
//! wanted, compile, create missing VMs, and update instance groups. Recreate and start are
//! deploys of the stored manifest with other options; stop and delete act on the
//! deployment's records.

mod apply;
mod bind;
pub(crate) mod decide;
#[cfg(test)]
mod decide_tests;
mod delete;
mod options;
mod stop;

use super::compilation;
use super::config_server;
use super::dry_run;
use super::error::StepError;
use super::ids::new_id;
use super::limits::InstanceLimits;
use super::links;
use super::model::{DeploymentRecord, InstanceRecord};
use super::networking;
use super::plan::InstancePlan;
use super::ports::DeployPorts;
use super::records::change;
use super::snapshot::Snapshot;
use super::task::{JobError, TaskLog};
use super::templates;
use super::validate;
use bind::{Bound, bind};
use decide::{Observed, decide};
pub use delete::delete;
pub use options::DeployOptions;
pub use stop::stop;

/// The manifest against what the director has; every problem together. Pure: it reads
/// the snapshot alone.
pub(crate) fn validate(snapshot: &mut Snapshot, limits: &InstanceLimits) -> Result<(), StepError> {
    let facts = snapshot.facts();
    let mut problems = limits.problems(&snapshot.manifest);
    problems.extend(validate::problems(
        &snapshot.manifest,
        &facts,
        &snapshot.uploaded,
    ));
    if !problems.is_empty() {
        return Err(StepError::Failed(format!(
            "the manifest is invalid:\n  {}",
            problems.join("\n  ")
        )));
    }
    validate::resolve_disk_types(&mut snapshot.manifest, &facts);
    Ok(())
}

pub async fn deploy(
    ports: DeployPorts,
    limits: InstanceLimits,
    log: TaskLog,
    text: String,
    options: DeployOptions,
) -> Result<String, JobError> {
    let records = &ports.ports.records;
    let mut snapshot = Snapshot::take(records, text, !options.dry_run).await?;
    validate(&mut snapshot, &limits)?;
    compilation::check(&snapshot)?;
    let declared = config_server::declared(&snapshot.manifest)?;
    let name = snapshot.manifest.name.clone();
    // Variables made anew by their update mode or strategy, before anything reads them; a
    // manifest or config that uses one outside properties is read again with the new value.
    let again = match config_server::renewal(&declared) {
        config_server::Renewal::Never => Vec::new(),
        renewal => {
            let stemcells_changed = renewal == config_server::Renewal::OnStemcellChange
                && records
                    .deployment(&name)
                    .await?
                    .as_ref()
                    .and_then(crate::snapshot::deployed_stemcells)
                    .is_some_and(|before| before != snapshot.stemcells());
            config_server::regenerate(
                records,
                &name,
                &declared,
                stemcells_changed,
                !options.dry_run,
            )
            .await?
        }
    };
    let full = |n: &String| config_server::full_name(&name, n);
    if again
        .iter()
        .any(|n| snapshot.placeholders.iter().any(|p| full(p) == full(n)))
    {
        snapshot = Snapshot::take(records, snapshot.text.clone(), !options.dry_run).await?;
        validate(&mut snapshot, &limits)?;
        compilation::check(&snapshot)?;
    }
    let outcome = deploy_valid(&ports, log, snapshot, &declared, options).await;
    if outcome.is_err() {
        // What it rendered for instances it did not update goes with a failed deploy;
        // a successful one has cleared it already.
        let forgotten = templates::forget_unused(&ports.ports.records, &*ports.renderer, &name);
        if let Err(e) = forgotten.await {
            tracing::warn!(deployment = %name, error = %e, "rendered templates are left behind");
        }
    }
    outcome
}

/// The deploy of a manifest found valid: bind, decide, then apply (or, for a dry run,
/// show what was decided).
async fn deploy_valid(
    deploy_ports: &DeployPorts,
    log: TaskLog,
    snapshot: Snapshot,
    declared: &serde_json::Value,
    options: DeployOptions,
) -> Result<String, JobError> {
    let ports = &deploy_ports.ports;
    let networking = snapshot.networking();
    let name = snapshot.manifest.name.clone();
    let existing: Vec<InstanceRecord> = ports.records.instances(&name).await?;
    let Bound {
        unresponsive,
        reported,
    } = bind(&ports.agents, &log, &existing, options.fix).await?;
    let observed = Observed {
        existing,
        unresponsive,
        reported,
        disks: ports.records.disks(&name).await?,
        uncompiled: compilation::observe(&ports.records, &snapshot).await?,
        foreign: foreign_providers(&ports.records, &snapshot).await?,
    };
    let mut ids = || new_id("instance");
    if options.dry_run {
        // Every variable it uses is known, or would be generated.
        let extra = links::foreign_references(&observed.foreign);
        let resolving = config_server::resolve(
            &ports.records,
            &name,
            &snapshot.manifest,
            declared,
            false,
            &extra,
        );
        resolving.await?;
        // Decided against the store as a deploy would, and nothing is written.
        let view = networking::observe(&ports.addresses, &networking, &snapshot.manifest).await?;
        let plan = decide(&snapshot, &networking, &observed, &options, &view, &mut ids)?;
        let instances: Vec<&InstancePlan> = plan.instances.instances().collect();
        let stage = log.stage("Planning (dry run)", Vec::new(), instances.len() as u32);
        for instance in instances {
            stage.start(dry_run::instance_line(instance)).finish();
        }
        let packages = plan.compilation.describe();
        if !packages.is_empty() {
            let stage = log.stage(
                "Compiling packages (dry run)",
                Vec::new(),
                packages.len() as u32,
            );
            for package in packages {
                stage.start(package).finish();
            }
        }
        return Ok(dry_run::summary(&plan));
    }
    // A new deployment is recorded once its manifest is valid and it is not a dry run: a
    // refused manifest leaves no empty deployment behind.
    if ports.records.deployment(&name).await?.is_none() {
        let record = DeploymentRecord {
            name: name.clone(),
            manifest: None,
            cloud_config: None,
            runtime_configs: Vec::new(),
            latest: Vec::new(),
            providers: Vec::new(),
            consumers: Vec::new(),
        };
        let mut created = vec![change::deployment(&record)];
        if !options.teams.is_empty() {
            created.push(change::deployment_teams(&name, &options.teams));
        }
        ports.records.write(created).await?;
    }
    // What a crash of an earlier task of this deployment left, deleted under its lock.
    crate::unsettled::settle(&*ports.cpi, &ports.records, Some(&name)).await?;
    compilation::delete_leftovers(ports, &log, &name).await?;
    let variables = config_server::resolve(
        &ports.records,
        &name,
        &snapshot.manifest,
        declared,
        true,
        &links::foreign_references(&observed.foreign),
    )
    .await?;
    log.check()?;
    // A refused plan (an ignored instance the manifest deletes, a network out of
    // addresses) claims nothing.
    let plan = networking::decide_and_claim(
        &ports.addresses,
        &networking,
        &snapshot.manifest,
        |view| decide(&snapshot, &networking, &observed, &options, view, &mut ids),
        |plan| &plan.addresses,
    )
    .await?;
    log.check()?;
    apply::apply(
        deploy_ports,
        log,
        snapshot,
        networking,
        plan,
        &variables,
        &options,
    )
    .await
}

/// The providers of every other deployment the manifest's consumers name (`deployment:`);
/// `None` for one that does not exist.
pub(crate) async fn foreign_providers(
    records: &crate::records::Records,
    snapshot: &Snapshot,
) -> Result<links::Foreign, StepError> {
    let own = &snapshot.manifest.name;
    let mut foreign = links::Foreign::new();
    let named: std::collections::BTreeSet<String> = snapshot
        .manifest
        .instance_groups
        .iter()
        .flat_map(|g| &g.jobs)
        .flat_map(|j| j.consumes.values())
        .filter_map(|c| match c {
            crate::manifest::ConsumeRef::From {
                deployment: Some(d),
                ..
            } if d != own => Some(d.clone()),
            _ => None,
        })
        .collect();
    for name in named {
        let providers = records.deployment(&name).await?.map(|r| r.providers);
        foreign.insert(name, providers);
    }
    Ok(foreign)
}

/// Redeploys the manifest the deployment last deployed successfully (to recreate or start
/// its instances), read once the task holds the lock so that an update finishing just
/// before cannot be rolled back.
pub async fn recreate_or_start(
    ports: DeployPorts,
    limits: InstanceLimits,
    log: TaskLog,
    name: String,
    options: DeployOptions,
) -> Result<String, JobError> {
    let manifest = ports
        .ports
        .records
        .deployed_manifest(&name)
        .await?
        .ok_or_else(|| StepError::NotDeployed {
            deployment: name.clone(),
            purpose: "recreate",
        })?;
    deploy(ports, limits, log, manifest, options).await
}
