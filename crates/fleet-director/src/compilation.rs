//! Compiling packages (seed 000, steps 6 to 8): the packages of the releases in use,
//! dependencies first, on compilation VMs per the `compilation` section, at most `workers`
//! at once. Compiled packages are kept per stemcell, so a redeploy compiles nothing twice.
//! Compilation VMs take dynamic addresses on the compilation network and are deleted at
//! the end, also when compilation fails.

use super::records::change;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::task::JoinSet;

use super::addresses::Networking;
use super::agent::CompiledDependency;
use super::cloud::CompilationConfig;
use super::compile::{NeededOn, PackageKey};
use super::cpi::VmRequest;
use super::error::CallContext;
use super::error::StepError;
use super::ids::new_id;
use super::model::{CompiledPackage, VmRecord};
use super::network::{
    Held, InMemoryIpRepo, IpProvider, IpRepo, IpSet, Network, NetworkError, Owner, to_ip,
};
use super::networking::{Addresses, plan_global};
use super::ports::{CompileLocks, Ports};
use super::records::Records;
use super::snapshot::Snapshot;
use super::task::TaskLog;

/// A compilation VM's place: its reserved address, and its VM while it has one.
struct Slot {
    owner: Owner,
    ip: Option<u32>,
    /// Its network as `create_vm` takes it.
    network_settings: serde_json::Value,
    /// The compilation block's (or its VM type's) and its AZ's cloud properties.
    cloud_properties: serde_json::Map<String, serde_json::Value>,
    vm: Option<(String, String)>,
}

struct Worker<'a> {
    ports: &'a Ports,
    locks: &'a CompileLocks,
    log: &'a TaskLog,
    deployment: &'a str,
    stemcell: &'a str,
    config: &'a CompilationConfig,
}

impl Worker<'_> {
    async fn ensure_vm(&self, slot: &mut Slot) -> Result<(String, String), StepError> {
        if let Some(vm) = &slot.vm {
            return Ok(vm.clone());
        }
        let agent_id = new_id("agent");
        let stemcell_cid = self.ports.records.stemcell_cid(self.stemcell).await?;
        let request = VmRequest {
            agent_id: agent_id.clone(),
            stemcell: self.stemcell.to_string(),
            stemcell_cid,
            vm_type: self.config.vm_type.clone(),
            deployment: self.deployment.to_string(),
            instance: slot.owner.instance.clone(),
            networks: self
                .config
                .network
                .iter()
                .map(|n| (n.clone(), slot.ip.map(to_ip)))
                .collect(),
            network_settings: slot.network_settings.clone(),
            cloud_properties: slot.cloud_properties.clone(),
            instance_id: None,
            az: self.config.az.clone(),
        };
        // Recorded as it is made (see `crate::unsettled`): a crash leaves a VM the next
        // deploy deletes; one that cannot be recorded is not kept.
        let (deployment, stemcell) = (self.deployment, self.stemcell);
        let clock = &self.ports.clock;
        let instance = format!("compilation {}", slot.owner.instance);
        let created = crate::unsettled::create_vm(
            &*self.ports.cpi,
            &self.ports.records,
            &request,
            &instance,
            |cid| {
                let record = VmRecord {
                    cid: cid.to_string(),
                    agent_id: agent_id.clone(),
                    deployment: deployment.to_string(),
                    instance_id: None,
                    stemcell: stemcell.to_string(),
                    created_at: Some(clock.unix_secs()),
                };
                vec![change::compilation_vm(&record)]
            },
        );
        let cid = created.await?.for_subject(
            "create_vm",
            &format!("compilation VM {}", slot.owner.instance),
        )?;
        slot.vm = Some((cid.clone(), agent_id.clone()));
        Ok((cid, agent_id))
    }

    async fn delete_vm(&self, slot: &mut Slot) -> Result<(), StepError> {
        if let Some((cid, _)) = slot.vm.take() {
            self.ports.cpi.delete_vm(&cid).await.for_subject(
                "delete_vm",
                &format!("compilation VM {}", slot.owner.instance),
            )?;
            self.ports
                .records
                .write(vec![change::compilation_vm_gone(&cid)])
                .await?;
        }
        Ok(())
    }

    async fn compile(
        &self,
        slot: &mut Slot,
        package: &PackageKey,
        key: &str,
        dependencies: &[CompiledDependency],
    ) -> Result<(), StepError> {
        let key = key.to_string();
        let lock = self.locks.of(&key);
        let _held = lock.lock().await;
        // Another deploy may have compiled it while this one waited.
        if self.ports.records.is_compiled(&key).await? {
            return Ok(());
        }
        let (_, agent) = self.ensure_vm(slot).await?;
        let what = package.describe();
        let agents = &self.ports.agents;
        let compiling = agents.call(
            &agent,
            "compile_package",
            agents.agent.compile_package(&agent, &what, dependencies),
        );
        // A cancelled task stops its compilation at once (a packaging script ends with
        // the call), rather than after a build that may take an hour.
        let compiled = self
            .log
            .unless_cancelled(|| format!("compiling {what}"), compiling)
            .await?;
        let blob = compiled.map_err(|source| StepError::Compiling {
            package: what.to_string(),
            stemcell: self.stemcell.to_string(),
            source: Box::new(source),
        })?;
        let record = CompiledPackage {
            package: what,
            stemcell: self.stemcell.to_string(),
            blob,
        };
        self.ports
            .records
            .write(vec![change::compiled(&key, &record)])
            .await?;
        if !self.config.reuse_compilation_vms {
            self.delete_vm(slot).await?;
        }
        Ok(())
    }
}

/// What compilation would refuse (a dependency cycle or a missing package, a bad
/// `compilation` block), found before the deploy changes anything.
///
/// # Errors
/// The first such problem.
pub fn check(snapshot: &Snapshot) -> Result<(), StepError> {
    snapshot.needed()?;
    snapshot.compilation().map(|_| ())
}

/// The cache keys of the packages a snapshot needs that no earlier compilation left in
/// the store: what a deploy learns before deciding what to compile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uncompiled(pub BTreeSet<String>);

/// Reads which of the packages `snapshot` needs the cache lacks.
///
/// # Errors
/// A package graph compilation would refuse; a store error.
pub async fn observe(records: &Records, snapshot: &Snapshot) -> Result<Uncompiled, StepError> {
    observe_for(records, snapshot.needed()?).await
}

/// Reads which of the packages `needed` names the cache lacks.
///
/// # Errors
/// A store error.
pub async fn observe_for(records: &Records, needed: &[NeededOn]) -> Result<Uncompiled, StepError> {
    let keys: Vec<(String, String)> = needed
        .iter()
        .flat_map(|on| {
            let exported = on.exported.values().flatten().map(|(_, key)| key);
            on.keys
                .values()
                .chain(exported)
                .map(|key| (key.clone(), key.clone()))
        })
        .collect();
    Ok(Uncompiled(records.uncompiled(keys).await?))
}

/// What a deploy compiles: for each stemcell, the packages its jobs need that the cache
/// lacks, compiled dependencies first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompilationPlan {
    batches: Vec<Batch>,
    /// Packages without sources taken as compiled for another version of the stemcell's
    /// OS with the same major version.
    borrowed: Vec<Borrowed>,
}

/// A package without sources used on a stemcell from its compilation for a sibling: the
/// same OS and major version, the highest such version, as BOSH's director picks it.
#[derive(Debug, Clone, PartialEq)]
struct Borrowed {
    /// Its cache key on the stemcell the deploy uses.
    key: String,
    /// Its cache key where it was compiled.
    from: String,
    package: String,
    stemcell: String,
}

/// The stemcell of `compiled_for` a package without sources is used from on `stemcell`:
/// the same OS and major version, the highest version.
fn sibling<'a>(compiled_for: &'a [String], stemcell: &str) -> Option<&'a str> {
    let (os, version) = stemcell.split_once('/')?;
    let major = |v: &str| v.split('.').next().unwrap_or_default().to_string();
    compiled_for
        .iter()
        .filter_map(|s| s.split_once('/').map(|(o, v)| (s.as_str(), o, v)))
        .filter(|(_, o, v)| *o == os && major(v) == major(version))
        .max_by(|a, b| fleet_versions::compare(a.2, b.2))
        .map(|(s, _, _)| s)
}

impl CompilationPlan {
    /// How many packages are compiled.
    pub fn packages(&self) -> usize {
        self.batches.iter().map(|b| b.todo.len()).sum()
    }

    /// Whether it neither compiles nor borrows anything.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty() && self.borrowed.is_empty()
    }

    /// The packages compiled, `release/package` on `os/version`, in order.
    pub fn describe(&self) -> Vec<String> {
        self.batches
            .iter()
            .flat_map(|b| {
                b.todo
                    .iter()
                    .map(move |p| format!("{} on {}", p.describe(), b.on.stemcell))
            })
            .collect()
    }
}

/// Decides what to compile for `snapshot`, given what the cache lacks. Pure.
///
/// # Errors
/// A dependency cycle or a missing package; packages of a compiled release, which have no
/// sources, that are not compiled for a stemcell the deploy uses (as BOSH words it).
pub fn decide(snapshot: &Snapshot, uncompiled: &Uncompiled) -> Result<CompilationPlan, StepError> {
    decide_for(snapshot.needed()?, &snapshot.releases, uncompiled)
}

/// What to compile of `needed`, given what the cache lacks. Pure.
///
/// # Errors
/// As [`decide`].
pub fn decide_for(
    needed: &[NeededOn],
    releases: &[crate::model::Release],
    uncompiled: &Uncompiled,
) -> Result<CompilationPlan, StepError> {
    let mut batches = Vec::new();
    let mut borrowed = Vec::new();
    for on in needed {
        let todo: BTreeSet<PackageKey> = on
            .keys
            .iter()
            .filter(|(_, key)| uncompiled.0.contains(*key))
            .map(|(package, _)| package.clone())
            .collect();
        let mut todo = todo;
        // A release `exported_from` stemcells: its packages come from there, exactly.
        let mut not_exported: BTreeMap<&str, Vec<&PackageKey>> = BTreeMap::new();
        for (p, from) in &on.exported {
            let lacking = todo.remove(p);
            match from.iter().find(|(_, key)| !uncompiled.0.contains(key)) {
                // What this stemcell has was taken from an export before.
                Some(_) if !lacking => {}
                Some((_, key)) => borrowed.push(Borrowed {
                    key: on.keys[p].clone(),
                    from: key.clone(),
                    package: p.describe(),
                    stemcell: on.stemcell.clone(),
                }),
                None => {
                    for (stemcell, _) in from {
                        not_exported.entry(stemcell.as_str()).or_default().push(p);
                    }
                }
            }
        }
        if let Some(first) = not_exported.values().flatten().next() {
            let mut message = format!("Can't use release '{}/{}':", first.release, first.version);
            for (stemcell, packages) in &not_exported {
                message.push_str(&format!(
                    "\nPackages must be exported from stemcell '{stemcell}', but some packages \
                     are not compiled for this stemcell:"
                ));
                for p in packages {
                    message.push_str(&format!("\n - '{}'", p.name));
                }
            }
            return Err(StepError::Failed(message));
        }
        let mut sourceless: Vec<PackageKey> = Vec::new();
        for p in todo.clone() {
            let found = releases
                .iter()
                .find(|r| r.name == p.release && r.version == p.version)
                .and_then(|r| {
                    r.packages
                        .iter()
                        .find(|k| k.name == p.name && !k.compiled_for.is_empty())
                        .map(|k| (r, k))
                });
            let Some((release, package)) = found else {
                continue;
            };
            todo.remove(&p);
            match sibling(&package.compiled_for, &on.stemcell) {
                Some(from) => borrowed.push(Borrowed {
                    key: on.keys[&p].clone(),
                    from: crate::compile::cache_key(release, &p.name, from),
                    package: p.describe(),
                    stemcell: on.stemcell.clone(),
                }),
                None => sourceless.push(p),
            }
        }
        if let Some(first) = sourceless.first() {
            return Err(StepError::Failed(format!(
                "Can't use release '{}/{}'. It references packages without source code and are \
                 not compiled against stemcell '{}':\n{}",
                first.release,
                first.version,
                on.stemcell,
                sourceless
                    .iter()
                    .map(|p| format!(" - '{}'", p.name))
                    .collect::<Vec<_>>()
                    .join("\n")
            )));
        }
        if !todo.is_empty() {
            batches.push(Batch {
                on: on.clone(),
                todo,
            });
        }
    }
    Ok(CompilationPlan { batches, borrowed })
}

/// Compiles what `plan` decided, on compilation VMs that take addresses the instances'
/// (`taken`) leave free and go again at the end; returns how many packages were compiled.
///
/// # Errors
/// The first compilation that failed; [`StepError::Stopped`] when the task's cancellation
/// stopped it (what was compiling stops at once, nothing new starts).
pub async fn compile(
    ports: &Ports,
    locks: &CompileLocks,
    log: &TaskLog,
    snapshot: &Snapshot,
    networking: &Networking,
    taken: &[(String, u32)],
    plan: &CompilationPlan,
) -> Result<usize, StepError> {
    // What a sibling stemcell's compilation serves is kept for this one too.
    for b in &plan.borrowed {
        let compiled = ports.records.compiled(&b.from).await?.ok_or_else(|| {
            StepError::Failed(format!(
                "the compiled package {} is gone from the director",
                b.package
            ))
        })?;
        let record = CompiledPackage {
            package: b.package.clone(),
            stemcell: b.stemcell.clone(),
            blob: compiled.blob,
        };
        ports
            .records
            .write(vec![change::compiled(&b.key, &record)])
            .await?;
    }
    let manifest = &snapshot.manifest;
    let work = &plan.batches;
    let total = plan.packages();
    if total == 0 {
        return Ok(0);
    }
    let config = snapshot.compilation()?;
    let stage = log.stage("Compiling packages", Vec::new(), total as u32);
    // One address per worker on the compilation network, held while compilation runs.
    let owners: Vec<Owner> = (0..config.workers)
        .map(|n| Owner {
            deployment: manifest.name.clone(),
            instance: format!("compilation-{}", n + 1),
        })
        .collect();
    let ips = match &config.network {
        None => vec![None; owners.len()],
        Some(network) => {
            reserve_workers(
                &ports.addresses,
                networking,
                network,
                &owners,
                config.az.as_deref(),
                taken,
            )
            .await?
        }
    };
    let cloud_properties = snapshot
        .cloud_properties()
        .for_compilation(config.az.as_deref(), config.vm_type.as_deref());
    let slots: Vec<Slot> = owners
        .into_iter()
        .zip(ips)
        .map(|(owner, ip)| Slot {
            network_settings: match &config.network {
                Some(network) => {
                    crate::network::vm_networks(networking.nets(), &[(network.clone(), ip)])
                }
                None => serde_json::Value::Null,
            },
            cloud_properties: cloud_properties.clone(),
            owner,
            ip,
            vm: None,
        })
        .collect();
    let slots = Arc::new(Mutex::new(slots));
    let mut result = Ok(());
    for batch in work {
        let running = Running {
            ports,
            locks,
            log,
            stage: &stage,
            deployment: &manifest.name,
            config: &config,
            slots: &slots,
        };
        result = run(&running, batch).await;
        if result.is_err() {
            break;
        }
    }
    // Compilation VMs go at the end, also when compilation failed.
    let leftover: Vec<Slot> = std::mem::take(&mut *slots.lock().unwrap_or_else(|p| p.into_inner()));
    let worker = Worker {
        ports,
        locks,
        log,
        deployment: &manifest.name,
        stemcell: "",
        config: &config,
    };
    for mut slot in leftover {
        if let Err(e) = worker.delete_vm(&mut slot).await {
            tracing::warn!(error = %e, "cannot delete a compilation VM");
        }
        if let (Some(ip), Some(network)) = (slot.ip, &config.network) {
            super::networking::release(
                &ports.addresses,
                networking.global(),
                &slot.owner,
                &[Held {
                    network: network.clone(),
                    ip,
                }],
            )
            .await?;
        }
    }
    result.map(|()| total)
}

/// An address for each worker. With a cloud config the store knows every claim.
async fn reserve_workers(
    addresses: &Addresses,
    networking: &Networking,
    network: &str,
    owners: &[Owner],
    az: Option<&str>,
    taken: &[(String, u32)],
) -> Result<Vec<Option<u32>>, NetworkError> {
    match networking {
        Networking::Global(nets) => {
            plan_global(addresses, &[], |repo| {
                let mut provider = IpProvider::new(nets, IpSet::new(), repo);
                let ips = owners
                    .iter()
                    .map(|owner| provider.reserve_compilation(network, owner, az))
                    .collect::<Result<Vec<_>, NetworkError>>()?;
                Ok::<_, NetworkError>((ips, provider.into_repo()))
            })
            .await
        }
        Networking::Local(nets) => local_worker_addresses(nets, network, owners, az, taken),
    }
}

/// Without a cloud config: the deployment's own instance addresses (`taken`) are claimed
/// first in one in-memory repo shared by all workers, so no worker gets an instance's or
/// another worker's address.
fn local_worker_addresses(
    nets: &[Network],
    network: &str,
    owners: &[Owner],
    az: Option<&str>,
    taken: &[(String, u32)],
) -> Result<Vec<Option<u32>>, NetworkError> {
    let Some(first) = owners.first() else {
        return Ok(Vec::new());
    };
    let instances = Owner {
        deployment: first.deployment.clone(),
        instance: "instances".into(),
    };
    let mut repo = InMemoryIpRepo::new();
    for (net, ip) in taken {
        // An address claimed twice is the instances' conflict, judged when they were
        // planned; here it only has to be taken.
        let _ = repo.add(net, *ip, &instances, false);
    }
    reserve_each(
        IpProvider::new(nets, IpSet::new(), repo),
        network,
        owners,
        az,
    )
}

/// One compilation address per owner from one provider, so each sees the others' claims.
fn reserve_each<R: IpRepo>(
    mut provider: IpProvider<'_, R>,
    network: &str,
    owners: &[Owner],
    az: Option<&str>,
) -> Result<Vec<Option<u32>>, NetworkError> {
    owners
        .iter()
        .map(|owner| provider.reserve_compilation(network, owner, az))
        .collect()
}

/// What one stemcell needs compiled.
#[derive(Debug, Clone, PartialEq)]
struct Batch {
    on: NeededOn,
    todo: BTreeSet<PackageKey>,
}

/// What a batch's compilation runs with.
struct Running<'a> {
    ports: &'a Ports,
    locks: &'a CompileLocks,
    log: &'a TaskLog,
    stage: &'a super::task::Stage,
    deployment: &'a str,
    config: &'a CompilationConfig,
    slots: &'a Arc<Mutex<Vec<Slot>>>,
}

async fn run(with: &Running<'_>, batch: &Batch) -> Result<(), StepError> {
    let Running {
        ports,
        locks,
        log,
        stage,
        deployment,
        config,
        slots,
    } = *with;
    let (stemcell, graph, todo) = (batch.on.stemcell.as_str(), &batch.on.graph, &batch.todo);
    let mut done: BTreeSet<PackageKey> = graph
        .keys()
        .filter(|k| !todo.contains(k))
        .cloned()
        .collect();
    let mut pending: BTreeSet<PackageKey> = todo.clone();
    let mut running = JoinSet::new();
    let mut first_error: Option<StepError> = None;
    loop {
        // Nothing new starts once the task is cancelled; what runs stops.
        while first_error.is_none() && !log.cancelled() && running.len() < config.workers {
            let Some(ready) = pending
                .iter()
                .find(|p| graph[*p].iter().all(|d| done.contains(d)))
                .cloned()
            else {
                break;
            };
            pending.remove(&ready);
            let Some(mut slot) = slots.lock().unwrap_or_else(|p| p.into_inner()).pop() else {
                pending.insert(ready);
                break;
            };
            let dependencies: Vec<CompiledDependency> = graph[&ready]
                .iter()
                .map(|d| CompiledDependency {
                    name: d.name.clone(),
                    key: batch.on.keys[d].clone(),
                })
                .collect();
            let key = batch.on.keys[&ready].clone();
            let (ports, locks, log) = (ports.clone(), locks.clone(), log.clone());
            let (stage, slots) = (stage.clone(), Arc::clone(slots));
            let (deployment, stemcell, config) =
                (deployment.to_string(), stemcell.to_string(), config.clone());
            running.spawn(crate::trace::within(async move {
                let worker = Worker {
                    ports: &ports,
                    locks: &locks,
                    log: &log,
                    deployment: &deployment,
                    stemcell: &stemcell,
                    config: &config,
                };
                let step = stage.start(format!("{}/{}", ready.name, ready.version));
                let result = step.end(worker.compile(&mut slot, &ready, &key, &dependencies).await);
                slots.lock().unwrap_or_else(|p| p.into_inner()).push(slot);
                (ready, result)
            }));
        }
        match running.join_next().await {
            None => break,
            Some(Ok((package, Ok(())))) => {
                done.insert(package);
            }
            Some(Ok((_, Err(e)))) => {
                first_error.get_or_insert(e);
            }
            Some(Err(e)) => {
                first_error.get_or_insert(StepError::Failed(format!("internal error: {e}")));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None if !pending.is_empty() && log.cancelled() => {
            Err(StepError::Stopped("compilation".into()))
        }
        None if !pending.is_empty() => Err(StepError::Failed("packages left uncompiled".into())),
        None => Ok(()),
    }
}

/// Deletes the compilation VMs a crash left behind in `deployment` (their records say
/// which): the deploy that follows, or the deployment's deletion, cleans up after it. The
/// deployment's lock keeps any compilation of its own from running meanwhile.
///
/// # Errors
/// A VM the CPI cannot delete (its record stays, for the next try), or a store error.
pub async fn delete_leftovers(
    ports: &Ports,
    log: &TaskLog,
    deployment: &str,
) -> Result<usize, StepError> {
    let left = ports.records.compilation_vms(deployment).await?;
    if left.is_empty() {
        return Ok(0);
    }
    let stage = log.stage(
        "Deleting leftover compilation VMs",
        Vec::new(),
        left.len() as u32,
    );
    for vm in &left {
        let step = stage.start(vm.cid.clone());
        let deleted = async {
            ports
                .cpi
                .delete_vm(&vm.cid)
                .await
                .map_err(|e| StepError::Failed(format!("delete_vm {}: {e}", vm.cid)))?;
            ports
                .records
                .write(vec![change::compilation_vm_gone(&vm.cid)])
                .await
                .map_err(StepError::from)
        }
        .await;
        step.end(deleted)?;
    }
    Ok(left.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::to_u32;
    use fleet_yaml::{Checker, Limits, load};

    #[test]
    fn without_a_cloud_config_workers_skip_the_instances_and_each_other() {
        let text =
            "networks:\n- name: default\n  subnets: [{range: 10.0.0.0/29, gateway: 10.0.0.1}]\n";
        let root = load(text, Limits::default()).unwrap();
        let mut checker = Checker::new();
        let nets = super::super::network::networks(
            &mut checker,
            root.get("networks").unwrap(),
            "networks",
            None,
        );
        assert!(checker.is_clean());
        let ip = |t: &str| to_u32(t.parse().unwrap());
        let owners: Vec<Owner> = (1..=2)
            .map(|n| Owner {
                deployment: "d".into(),
                instance: format!("compilation-{n}"),
            })
            .collect();
        let taken = [
            ("default".to_string(), ip("10.0.0.2")),
            ("default".to_string(), ip("10.0.0.4")),
        ];
        let got = local_worker_addresses(&nets, "default", &owners, None, &taken).unwrap();
        assert_eq!(got, [Some(ip("10.0.0.3")), Some(ip("10.0.0.5"))]);
        // Full: 10.0.0.2-10.0.0.6 usable, two taken, three workers fit and a fourth does not.
        let many: Vec<Owner> = (1..=4)
            .map(|n| Owner {
                deployment: "d".into(),
                instance: format!("compilation-{n}"),
            })
            .collect();
        assert!(local_worker_addresses(&nets, "default", &many, None, &taken).is_err());
    }
}
