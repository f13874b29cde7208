//! Links between jobs, resolved as BOSH's director resolves them when a deploy is decided:
//! each job's spec names the links it provides and consumes by name and type; the
//! manifest may rename a provider (`as`), share it with other deployments (`shared`),
//! block it (`nil`), and point a consumer at a provider (`from`, `deployment`), give it
//! verbatim (`instances`, `properties`, `address`) or leave an optional one unset (`nil`).
//! A consumer the manifest does not mention is linked implicitly, to the one provider of
//! its type in its deployment. Every consumer that resolves to no provider or to several
//! is named, all in one error, before anything changes. What a consumer's templates see
//! is the link's content (`link(NAME)`): the provider's instances with their addresses,
//! its exported properties, and a DNS query address. Pure: the manifest, the releases,
//! the planned instances and other deployments' shared providers in, links out.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::manifest::{ConsumeRef, Manifest, ProvideRef};
use super::model::{Consumer, DesiredState, LinkInstance, Provider, Release};
use super::plan::{Change, DeploymentPlan};

/// The root domain of the director's DNS names, as in `<id>.<group>.<network>.<deployment>.bosh`.
pub const DOMAIN: &str = "bosh";

impl Provider {
    /// What a consumer's templates see, keyed as BOSH's template spec keeps a link: the
    /// instances' addresses on `network` (the provider's default without one), IPs
    /// unless `ip_addresses` is `false` (or the network is dynamic), then DNS names.
    ///
    /// # Errors
    /// A network the provider's instances are not on, in BOSH's words.
    pub fn content_for(
        &self,
        network: Option<&str>,
        ip_addresses: Option<bool>,
    ) -> Result<Value, String> {
        let network = network.unwrap_or(&self.default_network);
        if !self.networks.iter().any(|n| n == network) {
            return Err(format!("Provider link does not have network: '{network}'"));
        }
        let instances: Vec<Value> = self
            .instances
            .iter()
            .map(|i| {
                let ip = i.addresses.get(network);
                let dns = i.dns_addresses.get(network);
                // Providers kept before per-network addresses have only `address`.
                let address = match (ip_addresses, ip, dns) {
                    (Some(false), _, Some(dns)) | (_, None, Some(dns)) => dns.clone(),
                    (_, Some(ip), _) => ip.clone(),
                    _ => i.address.clone(),
                };
                json!({
                    "name": i.name, "id": i.id, "index": i.index, "az": i.az,
                    "address": address, "bootstrap": i.bootstrap,
                })
            })
            .collect();
        let mut content = json!({
            "address": self.address_on(network, &[], None),
            "default_network": network,
            "deployment_name": self.deployment,
            "domain": DOMAIN,
            "group_name": format!("{}-{}", self.alias, self.link_type),
            "instance_group": self.group,
            "instances": instances,
            "properties": self.properties,
            "use_link_dns_names": false,
            "use_short_dns_addresses": false,
        });
        if !self.az_ids.is_empty() {
            // What `link.address(azs: [...])` encodes AZs with.
            content["az_ids"] = json!(self.az_ids);
        }
        Ok(content)
    }

    /// The DNS query name of the provider's instances on its default network
    /// (`q-s0.GROUP.NETWORK.DEPLOYMENT.bosh`): what `link.address` and `GET
    /// /link_address` answer.
    pub fn address(&self) -> String {
        self.address_on(&self.default_network, &[], None)
    }

    /// The DNS query name of the instances on `network` in `azs` (all without any) with
    /// the health `status` (`healthy`, `unhealthy`, `all`, `default`), as BOSH's DNS
    /// encoder writes it: the criteria sorted into its first label (`q-a1s3`).
    pub fn address_on(&self, network: &str, azs: &[String], status: Option<&str>) -> String {
        let mut criteria: Vec<String> = azs
            .iter()
            .filter_map(|az| self.az_ids.get(az).map(|id| format!("a{id}")))
            .collect();
        let status = match status {
            Some("healthy") => 3,
            Some("unhealthy") => 1,
            Some("all") => 4,
            _ => 0,
        };
        criteria.push(format!("s{status}"));
        criteria.sort();
        format!(
            "q-{}.{}.{}.{}.{DOMAIN}",
            criteria.concat(),
            canonical(&self.group),
            canonical(network),
            canonical(&self.deployment)
        )
    }
}

/// A provider's id in the links API: its deployment, group, job and spec name.
pub fn provider_id(p: &Provider) -> String {
    format!("{}:{}:{}:{}", p.deployment, p.group, p.job, p.name)
}

/// A name as BOSH's DNS names spell it: lower case, `_` as `-`.
fn canonical(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

/// Why the links API refused a request, worded as BOSH's director words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("Deployment name is required")]
    DeploymentRequired,
    #[error("Invalid request: {0}")]
    Invalid(String),
    #[error("Invalid link_provider_id: {0}")]
    UnknownProvider(String),
    #[error("Provider not `shared`")]
    NotShared,
    #[error("Can't resolve network: `{network}` in provider id: {provider} for `{name}`")]
    Network {
        network: String,
        provider: String,
        name: String,
    },
    #[error("Invalid link id: {0}")]
    UnknownLink(String),
    #[error("Error deleting link: not a external link")]
    NotExternal,
    #[error("Link id is required")]
    LinkIdRequired,
    #[error("status must be a one of: [\"healthy\", \"unhealthy\", \"all\", \"default\"]")]
    Status,
}

/// What a deploy's links come to: the providers it keeps, its consumers, and each
/// instance group's jobs' links as their templates see them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Links {
    pub providers: Vec<Provider>,
    pub consumers: Vec<Consumer>,
    /// Group, then job, then the consumed link's spec name, to its content.
    pub resolved: BTreeMap<String, BTreeMap<String, BTreeMap<String, Value>>>,
}

impl Links {
    fn give(&mut self, group: &str, job: &str, link: &str, content: Value) {
        self.resolved
            .entry(group.to_string())
            .or_default()
            .entry(job.to_string())
            .or_default()
            .insert(link.to_string(), content);
    }

    /// The links one group's jobs consume, job by job.
    pub fn of_group(&self, group: &str) -> BTreeMap<String, BTreeMap<String, Value>> {
        self.resolved.get(group).cloned().unwrap_or_default()
    }
}

/// The providers and consumers of another deployment: `None` when it does not exist.
pub type Foreign = BTreeMap<String, Option<Vec<Provider>>>;

fn lookup<'v>(value: &'v Value, dotted: &str) -> Option<&'v Value> {
    dotted
        .split('.')
        .try_fold(value, |node, key| node.get(key))
        .filter(|v| !v.is_null())
}

fn insert(target: &mut Value, dotted: &str, value: Value) {
    let keys: Vec<&str> = dotted.split('.').collect();
    let mut node = target;
    for key in &keys[..keys.len() - 1] {
        if !node.is_object() {
            *node = json!({});
        }
        node = node
            .as_object_mut()
            .expect("an object")
            .entry(key.to_string())
            .or_insert_with(|| json!({}));
    }
    if !node.is_object() {
        *node = json!({});
    }
    node.as_object_mut()
        .expect("an object")
        .insert(keys[keys.len() - 1].to_string(), value);
}

/// The providers `manifest` declares, with the planned instances of each group.
///
/// # Errors
/// Every exported property the job's spec does not declare.
pub fn providers(
    deployment: &str,
    manifest: &Manifest,
    releases: &[Release],
    instances: &BTreeMap<String, Vec<LinkInstance>>,
    az_ids: &BTreeMap<String, u32>,
) -> Result<Vec<Provider>, Vec<String>> {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for group in &manifest.instance_groups {
        let networks: Vec<String> = group.networks.iter().map(|n| n.name.clone()).collect();
        for job in &group.jobs {
            let Some(spec) = spec_of(manifest, releases, &job.release, &job.name) else {
                continue;
            };
            let mut spec = std::borrow::Cow::Borrowed(spec);
            for custom in &job.custom_providers {
                if spec.provides.iter().any(|p| p.name == custom.name) {
                    problems.push(format!(
                        "Custom provider '{}' in job '{}' in instance group '{}' is already \
                         defined in release '{}'",
                        custom.name, job.name, group.name, job.release
                    ));
                    continue;
                }
                // Exported properties come from the job's properties alone: the spec
                // declares none of them.
                let spec = spec.to_mut();
                for name in &custom.properties {
                    spec.properties
                        .entry(name.clone())
                        .or_insert_with(crate::model::PropertySpec::default);
                }
                spec.provides.push(crate::model::LinkDef {
                    name: custom.name.clone(),
                    link_type: custom.link_type.clone(),
                    optional: false,
                    properties: custom.properties.clone(),
                });
            }
            for provided in &spec.provides {
                let mut properties = json!({});
                for name in &provided.properties {
                    let value = lookup(&job.properties, name)
                        .cloned()
                        .map(Some)
                        .or_else(|| spec.properties.get(name).map(|p| p.default.clone()));
                    match value {
                        Some(value) => insert(&mut properties, name, value.unwrap_or_default()),
                        None if !spec.properties.contains_key(name) => problems.push(format!(
                            "Link property {name} in template {} is not defined in release spec",
                            job.name
                        )),
                        None => {}
                    }
                }
                let (alias, shared, blocked) = match job.provides.get(&provided.name) {
                    Some(ProvideRef::Blocked) => (provided.name.clone(), false, true),
                    Some(ProvideRef::Provide { alias, shared }) => (
                        alias.clone().unwrap_or_else(|| provided.name.clone()),
                        *shared,
                        false,
                    ),
                    None => (provided.name.clone(), false, false),
                };
                found.push(Provider {
                    deployment: deployment.to_string(),
                    group: group.name.clone(),
                    job: job.name.clone(),
                    name: provided.name.clone(),
                    alias,
                    link_type: provided.link_type.clone(),
                    shared,
                    blocked,
                    properties: properties.clone(),
                    networks: networks.clone(),
                    default_network: networks.first().cloned().unwrap_or_default(),
                    instances: instances.get(&group.name).cloned().unwrap_or_default(),
                    az_ids: az_ids.clone(),
                });
            }
        }
    }
    if problems.is_empty() {
        Ok(found)
    } else {
        Err(problems)
    }
}

fn spec_of<'r>(
    manifest: &Manifest,
    releases: &'r [Release],
    release: &str,
    job: &str,
) -> Option<&'r crate::model::ReleaseJob> {
    let version = &manifest.release(release)?.version;
    releases
        .iter()
        .find(|r| r.name == release && &r.version == version)?
        .jobs
        .iter()
        .find(|j| j.name == job)
}

/// Resolves every consumer of `manifest` against its own `providers` and other
/// deployments' (`foreign`).
///
/// # Errors
/// One message naming every consumer that has no provider or several, and every
/// deployment a consumer names that does not exist, as BOSH's director words them.
pub fn resolve(
    deployment: &str,
    manifest: &Manifest,
    releases: &[Release],
    providers: Vec<Provider>,
    foreign: &Foreign,
) -> Result<Links, String> {
    let mut links = Links::default();
    let mut errors = Vec::new();
    for group in &manifest.instance_groups {
        for job in &group.jobs {
            let Some(spec) = spec_of(manifest, releases, &job.release, &job.name) else {
                continue;
            };
            for consumed in &spec.consumes {
                links.consumers.push(Consumer {
                    group: group.name.clone(),
                    job: job.name.clone(),
                    name: consumed.name.clone(),
                    link_type: consumed.link_type.clone(),
                    optional: consumed.optional,
                    provider: None,
                });
                let explicit = job.consumes.get(&consumed.name);
                let (network, ip_addresses) = match explicit {
                    Some(ConsumeRef::From {
                        network,
                        ip_addresses,
                        ..
                    }) => (network.as_deref(), *ip_addresses),
                    _ => (None, None),
                };
                let (candidates, alias): (Vec<&Provider>, String) = match explicit {
                    Some(ConsumeRef::Blocked) => (Vec::new(), consumed.name.clone()),
                    Some(ConsumeRef::Manual(given)) => {
                        let mut content = given.clone();
                        if let Some(map) = content.as_object_mut() {
                            map.insert("deployment_name".into(), json!(deployment));
                            map.entry("instances").or_insert_with(|| json!([]));
                            map.entry("properties").or_insert(Value::Null);
                        }
                        links.give(&group.name, &job.name, &consumed.name, content);
                        continue;
                    }
                    Some(ConsumeRef::From {
                        from,
                        deployment: other,
                        ..
                    }) => {
                        let alias = from.clone().unwrap_or_else(|| consumed.name.clone());
                        let pool: Vec<&Provider> = match other {
                            Some(other) if other != deployment => match foreign.get(other) {
                                Some(Some(theirs)) => theirs.iter().filter(|p| p.shared).collect(),
                                _ => {
                                    errors.push(format!(
                                        "Link '{alias}' in job '{}' from instance group '{}' \
                                         consumes from deployment '{other}', but the deployment \
                                         does not exist.",
                                        job.name, group.name
                                    ));
                                    continue;
                                }
                            },
                            _ => providers.iter().collect(),
                        };
                        let found = pool
                            .into_iter()
                            .filter(|p| {
                                !p.blocked && p.link_type == consumed.link_type && p.alias == alias
                            })
                            .collect();
                        (found, alias)
                    }
                    None => (
                        providers
                            .iter()
                            .filter(|p| !p.blocked && p.link_type == consumed.link_type)
                            .collect(),
                        consumed.name.clone(),
                    ),
                };
                let unset_is_fine =
                    consumed.optional && matches!(explicit, None | Some(ConsumeRef::Blocked));
                match candidates.as_slice() {
                    [provider] => {
                        if let Some(consumer) = links.consumers.last_mut() {
                            consumer.provider = Some(provider_id(provider));
                        }
                        let mut content = match provider.content_for(network, ip_addresses) {
                            Ok(content) => content,
                            Err(e) => {
                                errors.push(e);
                                continue;
                            }
                        };
                        // Another deployment's exported properties refer to its variables.
                        if provider.deployment != deployment {
                            content["properties"] = crate::variable_names::qualify(
                                &content["properties"],
                                &provider.deployment,
                            );
                        }
                        links.give(&group.name, &job.name, &consumed.name, content);
                    }
                    [] if unset_is_fine => {}
                    found => errors.push(unresolved(
                        &consumed.name,
                        &alias,
                        &consumed.link_type,
                        &job.name,
                        &group.name,
                        found,
                    )),
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(format!(
            "Failed to resolve links from deployment '{deployment}'. See errors below:{}",
            errors
                .iter()
                .map(|e| format!("\n  - {e}"))
                .collect::<String>()
        ));
    }
    links.providers = providers;
    Ok(links)
}

/// BOSH's words for a consumer with no provider or several.
fn unresolved(
    name: &str,
    alias: &str,
    link_type: &str,
    job: &str,
    group: &str,
    found: &[&Provider],
) -> String {
    let aliased = if alias == name {
        String::new()
    } else {
        format!("with alias '{alias}' and ")
    };
    let mut message = format!(
        "Failed to resolve link '{name}' {aliased}type '{link_type}' from job '{job}' in instance \
         group '{group}'."
    );
    if found.is_empty() {
        message.push_str(" Details below:\n    - No link providers found");
    } else {
        message.push_str(" Multiple link providers found:");
        for p in found {
            let aliased = if p.alias == p.name {
                String::new()
            } else {
                format!("with alias '{}' ", p.alias)
            };
            message.push_str(&format!(
                "\n    - Link provider '{}' {aliased}from job '{}' in instance group '{}' in \
                 deployment '{}'",
                p.name, p.job, p.group, p.deployment
            ));
        }
    }
    message
}

/// The variables other deployments' shared providers refer to in what they export, by
/// their full names: what a deploy consuming them resolves too.
pub fn foreign_references(foreign: &Foreign) -> std::collections::BTreeSet<String> {
    foreign
        .values()
        .flatten()
        .flatten()
        .filter(|p| p.shared)
        .flat_map(|p| {
            let qualified = crate::variable_names::qualify(&p.properties, &p.deployment);
            fleet_variables::used_json(&qualified)
        })
        .collect()
}

/// The instances each group of `plan` will have, as links list them: each at its first
/// network's address.
pub fn instances_of(
    deployment: &str,
    plan: &DeploymentPlan,
) -> BTreeMap<String, Vec<LinkInstance>> {
    let mut by_group: BTreeMap<String, Vec<LinkInstance>> = BTreeMap::new();
    for instance in plan.instances() {
        let address = match instance.addresses.first() {
            Some((_, Some(ip))) => crate::network::to_ip(*ip).to_string(),
            Some((network, None)) => format!(
                "{}.{}.{}.{}.{DOMAIN}",
                instance.id,
                canonical(&instance.group),
                canonical(network),
                canonical(deployment)
            ),
            None => String::new(),
        };
        let dns = |network: &str| {
            format!(
                "{}.{}.{}.{}.{DOMAIN}",
                instance.id,
                canonical(&instance.group),
                canonical(network),
                canonical(deployment)
            )
        };
        by_group
            .entry(instance.group.clone())
            .or_default()
            .push(LinkInstance {
                name: instance.group.clone(),
                id: instance.id.clone(),
                index: instance.index,
                az: instance.az.clone(),
                address,
                bootstrap: instance.index == 0,
                addresses: instance
                    .addresses
                    .iter()
                    .filter_map(|(n, ip)| {
                        ip.map(|ip| (n.clone(), crate::network::to_ip(ip).to_string()))
                    })
                    .collect(),
                dns_addresses: instance
                    .addresses
                    .iter()
                    .map(|(n, _)| (n.clone(), dns(n)))
                    .collect(),
            });
    }
    by_group
}

/// Resolves the links of a deploy whose instances and addresses are decided, and gives
/// each instance what its jobs consume; an instance whose links changed since it was
/// last applied changes.
///
/// # Errors
/// Every consumer that cannot be resolved and every undeclared exported property, in
/// one message.
pub fn attach(
    deployment: &str,
    manifest: &Manifest,
    releases: &[Release],
    plan: &mut DeploymentPlan,
    foreign: &Foreign,
    az_ids: &BTreeMap<String, u32>,
) -> Result<Links, String> {
    let instances = instances_of(deployment, plan);
    let providers = providers(deployment, manifest, releases, &instances, az_ids)
        .map_err(|problems| problems.join("\n"))?;
    let links = resolve(deployment, manifest, releases, providers, foreign)?;
    for group in &mut plan.groups {
        let consumed = links.of_group(&group.name);
        let digest = (!consumed.is_empty()).then(|| {
            fleet_release::sha1_hex(
                serde_json::to_string(&consumed)
                    .expect("links serialize")
                    .as_bytes(),
            )
        });
        for instance in &mut group.instances {
            instance.desired.links = digest.clone();
            // An instance set aside (`bosh ignore`), stopped or detached is left alone, as
            // for any other change, until it is started.
            let running = instance.existing.as_ref().is_some_and(|e| {
                !e.ignore && (e.state == DesiredState::Started || !instance.changes.is_empty())
            });
            let applied = instance.existing.as_ref().and_then(|e| e.applied.as_ref());
            if running && applied.is_some_and(|a| a.links != digest) {
                instance.changes.insert(Change::Links);
            }
            instance.links = consumed.clone();
        }
    }
    Ok(links)
}
