//! Job templates rendered before a deploy changes anything, as BOSH's director renders
//! them while it prepares the deployment: a missing property or a failing template fails
//! the deploy while every instance still runs as it did, and every instance that cannot
//! be rendered is named in one error. The rendered files travel to the agent in the
//! instance's spec (a store blob), and their digest is the configuration hash that drain
//! scripts are told about. Rendering is the infrastructure's to provide: the simulation
//! runs no job and renders nothing.

use std::sync::Arc;

use tokio::task::JoinSet;

pub use super::renderer::{
    NoRendering, Renderer, TemplateError, TemplateInstance, is_rendered_blob, rendered_blob_id,
};

use super::error::StepError;
use super::model::InstanceSpec;
use super::plan::DeploymentPlan;
use super::records::Records;
use super::task::TaskLog;

/// How many instances are rendered at once.
const AT_ONCE: usize = 4;

/// Deletes the deployment's rendered templates that no instance's applied spec names:
/// those of earlier deploys, and all of them once the deployment is gone. The caller
/// holds the deployment's lock.
///
/// # Errors
/// A store error.
pub async fn forget_unused(
    records: &Records,
    renderer: &dyn Renderer,
    deployment: &str,
) -> Result<(), StepError> {
    if !renderer.renders() {
        return Ok(());
    }
    let prefix = rendered_blob_id(deployment, "");
    let instances = records.instances(deployment).await?;
    let used: std::collections::BTreeSet<String> = instances
        .iter()
        .filter_map(|i| i.applied.as_ref()?.rendered.as_ref())
        .map(|r| r.blob.clone())
        .collect();
    for id in records.blob_ids().await? {
        if id.starts_with(&prefix) && !used.contains(&id) {
            records.delete_blob(id).await?;
        }
    }
    Ok(())
}

/// What a deploy renders: every instance the plan changes (by group and instance index),
/// with what its templates see of it. Pure.
pub fn to_render(deployment: &str, plan: &DeploymentPlan) -> Vec<(usize, usize, TemplateInstance)> {
    let mut todo = Vec::new();
    for (g, group) in plan.groups.iter().enumerate() {
        for (i, instance) in group.instances.iter().enumerate() {
            if !instance.changed() {
                continue;
            }
            let context = TemplateInstance {
                deployment: deployment.to_string(),
                group: instance.group.clone(),
                index: instance.index,
                id: instance.id.clone(),
                az: instance.az.clone(),
                bootstrap: instance.index == 0,
                links: instance.links.clone(),
                networks: instance
                    .addresses
                    .iter()
                    .map(|(network, ip)| (network.clone(), ip.map(crate::network::to_ip)))
                    .collect(),
            };
            todo.push((g, i, context));
        }
    }
    todo
}

/// Renders every instance of `plan` that is about to change ([`to_render`]), at most [`AT_ONCE`] at a
/// time, and puts the result in its desired spec.
///
/// # Errors
/// Every instance that could not be rendered, one line each.
pub async fn render_plan(
    renderer: &Arc<dyn Renderer>,
    log: &TaskLog,
    deployment: &str,
    plan: &mut DeploymentPlan,
    variables: &fleet_variables::Values,
) -> Result<(), StepError> {
    if !renderer.renders() {
        return Ok(());
    }
    let stage = log.stage("Preparing deployment", Vec::new(), 1);
    let step = stage.start("Rendering templates");
    let mut failures: Vec<(String, String)> = Vec::new();
    let mut todo: Vec<(usize, usize, InstanceSpec, TemplateInstance)> = Vec::new();
    for (g, i, mut context) in to_render(deployment, plan) {
        // The templates see the variables' values, in their properties and in what they
        // consume through links; the desired spec keeps `((name))`, so that no record
        // holds a secret.
        let mut spec = plan.groups[g].instances[i].desired.clone();
        let interpolated =
            fleet_variables::interpolate_json(&spec.properties, variables).and_then(|properties| {
                let links = serde_json::to_value(&context.links).expect("links serialize");
                let links = fleet_variables::interpolate_json(&links, variables)?;
                Ok((properties, links))
            });
        match interpolated {
            Ok((properties, links)) => {
                spec.properties = properties;
                context.links = serde_json::from_value(links).expect("links as they were");
                todo.push((g, i, spec, context));
            }
            Err(e) => failures.push((
                format!("{}/{} ({})", context.group, context.index, context.id),
                e.to_string(),
            )),
        }
    }
    let mut running = JoinSet::new();
    let mut pending = todo.into_iter();
    loop {
        while running.len() < AT_ONCE {
            let Some((g, i, spec, context)) = pending.next() else {
                break;
            };
            let renderer = Arc::clone(renderer);
            running.spawn(crate::trace::within(async move {
                let rendered = renderer.render(&spec, &context).await;
                (g, i, context, rendered)
            }));
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        match joined {
            Ok((g, i, _, Ok(rendered))) => plan.groups[g].instances[i].desired.rendered = rendered,
            Ok((_, _, context, Err(e))) => failures.push((
                format!("{}/{} ({})", context.group, context.index, context.id),
                e.to_string(),
            )),
            Err(e) => failures.push(("an instance".into(), format!("its render panicked: {e}"))),
        }
    }
    if failures.is_empty() {
        step.finish();
        return Ok(());
    }
    failures.sort();
    let lines: Vec<String> = failures
        .iter()
        .map(|(instance, problem)| format!("{instance}: {problem}"))
        .collect();
    step.end(Err(StepError::Failed(format!(
        "Unable to render templates of {} instance{} of deployment `{deployment}`, which \
         was left as it was: {}",
        lines.len(),
        if lines.len() == 1 { "" } else { "s" },
        lines.join("; ")
    ))))
}
