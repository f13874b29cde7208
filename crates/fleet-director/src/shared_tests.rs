//! Two director processes on one PostgreSQL database, in virtual time: each has its own
//! connection, runner and simulated cloud, as two `serve` processes have. These run
//! where `FLEET_TEST_POSTGRES` names a database (`.ci/run`'s second pass); elsewhere
//! they say so and pass, since SQLite is one process's store.

use crate::model::{Task, TaskKind};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::model::TaskState;
use super::tests::{Fixture, deploy, fixture_on_shared, manifest};
use super::*;
use fleet_store::{PgStore, Store, testing};

/// Two directors on one fresh database, and a third handle that only looks.
async fn two_directors() -> Option<(Fixture, Fixture, Arc<dyn Store>)> {
    let Some(database) = testing::postgres() else {
        eprintln!(
            "skipped: {} names no PostgreSQL database",
            testing::POSTGRES_VARIABLE
        );
        return None;
    };
    let at = testing::fresh_schema(&database);
    let connect = || -> Arc<dyn Store> { Arc::new(PgStore::connect(&at).unwrap()) };
    let a = fixture_on_shared(connect()).await;
    let b = fixture_on_shared(connect()).await;
    Some((a, b, connect()))
}

#[tokio::test(start_paused = true)]
async fn a_deploy_started_through_one_director_is_seen_locked_and_cancelled_through_the_other() {
    let Some((a, b, _)) = two_directors().await else {
        return;
    };
    let started = a
        .director
        .deploy(&manifest("d", 6, "1.0", 0), DeployOptions::default())
        .await
        .unwrap();
    let seen = b.director.task(started.id).await.unwrap().unwrap();
    assert!(seen.state.is_running(), "{seen:?}");
    let refused = b
        .director
        .deploy(&manifest("d", 2, "1.0", 0), DeployOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, DirectorError::Locked { task, .. } if task == started.id),
        "{refused:?}"
    );
    assert_eq!(b.director.lock_holder("d").await.unwrap(), Some(started.id));
    let cancelling = b.director.cancel(started.id).await.unwrap();
    assert_eq!(cancelling.state, TaskState::Cancelling);
    // The director running it hears at its next renewal and stops at a safe point; the
    // other sees the end in the store.
    let ended = b.director.wait(started.id).await.unwrap();
    assert_eq!(ended.state, TaskState::Cancelled, "{ended:?}");
    assert_eq!(a.director.wait(started.id).await.unwrap(), ended);
    assert!(b.director.locks().await.unwrap().is_empty());
    let after = deploy(&b.director, &manifest("d", 2, "1.0", 0)).await;
    assert_eq!(after.state, TaskState::Done, "{after:?}");
    // b took over what a created: its cloud read the deployment again.
    assert_eq!(b.director.instances("d").await.unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_director_that_stops_renewing_has_its_tasks_errored_and_its_locks_released() {
    let Some((_, b, store)) = two_directors().await else {
        return;
    };
    // A process that registered, took a deployment's lock for a task, and died.
    let now = b.director.core.now_ms();
    let lease = fleet_store::Lease {
        now,
        until: now + 10_000,
    };
    store.renew(lease).unwrap();
    let mut orphan = store
        .create_task(
            TaskKind::UpdateDeployment.spec(),
            Some("d"),
            Some(&runner::lock_name("d")),
            None,
            lease,
        )
        .unwrap()
        .unwrap();
    orphan.state = TaskState::Processing;
    store.put_task(&orphan).unwrap();
    let refused = b
        .director
        .deploy(&manifest("d", 1, "1.0", 0), DeployOptions::default())
        .await;
    assert!(matches!(refused, Err(DirectorError::Locked { .. })));
    tokio::time::sleep(Duration::from_secs(15)).await;
    let ended = b.director.task(orphan.id).await.unwrap().unwrap();
    assert_eq!(ended.state, TaskState::Error);
    assert_eq!(ended.result.as_deref(), Some(lease_keeper::EXPIRED_REASON));
    let done = deploy(&b.director, &manifest("d", 1, "1.0", 0)).await;
    assert_eq!(done.state, TaskState::Done, "{done:?}");
}

#[tokio::test(start_paused = true)]
async fn one_director_watches_and_resurrects_for_both_and_the_other_takes_over_when_it_stops() {
    use crate::health_monitor::{self, HealthMonitorSettings};
    use crate::health_monitor_tests::{alerts, scans_and_fixes, settings};
    let Some((a, b, _)) = two_directors().await else {
        return;
    };
    let done = deploy(&a.director, &manifest("d", 4, "1.0", 0)).await;
    assert_eq!(done.state, TaskState::Done, "{done:?}");
    let a_leads = a.director.leads().await.unwrap();
    assert_ne!(a_leads, b.director.leads().await.unwrap(), "one leads");
    let (leader, other) = if a_leads { (a, b) } else { (b, a) };
    let mut instances = other.director.instances("d").await.unwrap();
    instances.sort_by_key(|i| i.index);
    let agent = |i: usize| instances[i].agent_id.clone().unwrap();
    leader.cloud.set_responsive(&agent(1), false).await.unwrap();
    let watch = |f: &Fixture, settings: HealthMonitorSettings| {
        health_monitor::spawn(f.director.clone(), settings)
    };
    let monitors = [watch(&leader, settings()), watch(&other, settings())];
    tokio::time::sleep(Duration::from_secs(180)).await;
    monitors.iter().for_each(|m| m.abort());
    let fixes = scans_and_fixes(&other.director).await;
    assert_eq!(fixes.len(), 1, "one repair: {fixes:?}");
    assert_eq!(fixes[0].state, TaskState::Done, "{:?}", fixes[0].result);
    // Asked, said and decided once, not once per process.
    let said = alerts(&other.director).await;
    assert_eq!(
        said.iter()
            .filter(|a| **a == format!("{} has timed out", agent(1)))
            .count(),
        1,
        "{said:?}"
    );
    // The leader stops: once its lease ran out, the other watches and resurrects.
    drop(leader);
    other.cloud.set_responsive(&agent(2), false).await.unwrap();
    let monitor = watch(&other, settings());
    tokio::time::sleep(Duration::from_secs(300)).await;
    monitor.abort();
    assert!(other.director.leads().await.unwrap());
    let fixes = scans_and_fixes(&other.director).await;
    assert_eq!(fixes.len(), 2, "{fixes:?}");
    assert!(
        fixes.iter().all(|t| t.state == TaskState::Done),
        "{fixes:?}"
    );
    let after = other.director.instances("d").await.unwrap();
    let replaced = |i: usize| {
        after
            .iter()
            .find(|a| a.index == instances[i].index)
            .is_some_and(|a| a.agent_id != instances[i].agent_id)
    };
    assert!(replaced(1) && replaced(2) && !replaced(0) && !replaced(3));
}

#[tokio::test(start_paused = true)]
async fn a_database_going_down_under_a_deploy_ends_it_and_the_director_works_again_after() {
    let Some(database) = testing::postgres() else {
        eprintln!(
            "skipped: {} names no PostgreSQL database",
            testing::POSTGRES_VARIABLE
        );
        return;
    };
    let (at, outage) = testing::fresh_database(&database);
    let f = fixture_on_shared(Arc::new(PgStore::connect(&at).unwrap())).await;
    let started = f
        .director
        .deploy(&manifest("d", 6, "1.0", 0), DeployOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        f.director
            .task(started.id)
            .await
            .unwrap()
            .unwrap()
            .state
            .is_running()
    );
    outage.begin();
    let refused = f.director.task(started.id).await.unwrap_err();
    assert!(
        matches!(&refused, DirectorError::Store(e) if e.is_transient()),
        "{refused:?}"
    );
    // Down for longer than the lock timeout: the lease runs out meanwhile.
    tokio::time::sleep(Duration::from_secs(30)).await;
    outage.end();
    // The deploy ended (the store failed under it), recorded once the database answered
    // again: never left processing, its lock released.
    let ended = tokio::time::timeout(Duration::from_secs(120), f.director.wait(started.id))
        .await
        .expect("the deploy's end is recorded")
        .unwrap();
    assert!(!ended.state.is_running(), "{ended:?}");
    assert_eq!(
        f.director.task(started.id).await.unwrap().unwrap().state,
        ended.state
    );
    assert!(f.director.locks().await.unwrap().is_empty());
    let again = deploy(&f.director, &manifest("d", 6, "1.0", 0)).await;
    assert_eq!(again.state, TaskState::Done, "{again:?}");
    assert_eq!(f.director.instances("d").await.unwrap().len(), 6);
}

/// One change a director is asked for.
#[derive(Debug, Clone)]
enum Change {
    /// Deploy `deployment` with `instances` on subnet `subnet` (a network change when it
    /// moves, a scale-down when it shrinks).
    Deploy {
        deployment: usize,
        instances: u32,
        subnet: u8,
    },
    Delete {
        deployment: usize,
    },
}

fn change() -> impl Strategy<Value = (bool, Change)> {
    let deploy =
        (0..3usize, 1..4u32, 0..2u8).prop_map(|(deployment, instances, subnet)| Change::Deploy {
            deployment,
            instances,
            subnet,
        });
    let delete = (0..3usize).prop_map(|deployment| Change::Delete { deployment });
    (any::<bool>(), prop_oneof![4 => deploy, 1 => delete])
}

const CLOUD: &str = "azs: [{name: z1}, {name: z2}]
vm_types: [{name: small}]
networks:
- name: default
  subnets:
  - {range: 10.10.0.0/24, gateway: 10.10.0.1, azs: [z1, z2]}
- name: other
  subnets:
  - {range: 10.20.0.0/24, gateway: 10.20.0.1, azs: [z1, z2]}
";

/// A manifest on one of the cloud config's networks, whose addresses the store keeps.
fn on_subnet(deployment: usize, instances: u32, subnet: u8) -> String {
    let network = if subnet == 0 { "default" } else { "other" };
    format!(
        "name: d{deployment}
releases: [{{name: nginx, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '1.0'}}]
update: {{canaries: 1, max_in_flight: 2, canary_watch_time: 1000, update_watch_time: 1000}}
instance_groups:
- name: web
  instances: {instances}
  azs: [z1, z2]
  jobs: [{{name: nginx, release: nginx}}]
  vm_type: small
  stemcell: default
  networks: [{{name: {network}}}]
"
    )
}

async fn apply(director: &Director, change: Change) -> Option<Task> {
    let started = match change {
        Change::Deploy {
            deployment,
            instances,
            subnet,
        } => {
            director
                .deploy(
                    &on_subnet(deployment, instances, subnet),
                    DeployOptions::default(),
                )
                .await
        }
        Change::Delete { deployment } => director.delete(&format!("d{deployment}")).await,
    };
    match started {
        Ok(task) => Some(director.wait(task.id).await.unwrap()),
        // The other director holds it, or there is nothing to delete.
        Err(DirectorError::Locked { .. } | DirectorError::NotFound { .. }) => None,
        Err(e) => panic!("{e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Whatever two directors change at once, every address is held by one instance that
    /// exists, no instance of a live deployment is without one, and every lock is free
    /// once they are done.
    #[test]
    fn two_directors_changing_deployments_at_once_neither_share_nor_leak_addresses(
        changes in proptest::collection::vec(change(), 4..12)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let Some((a, b, store)) = two_directors().await else {
                return;
            };
            a.director.update_cloud_config(CLOUD).await.unwrap();
            let mut running = tokio::task::JoinSet::new();
            for (first, change) in changes {
                let director = if first { a.director.clone() } else { b.director.clone() };
                running.spawn(async move { apply(&director, change).await });
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            while let Some(ended) = running.join_next().await {
                if let Some(task) = ended.unwrap() {
                    assert!(
                        matches!(task.state, TaskState::Done),
                        "{task:?}"
                    );
                }
            }
            assert!(store.locks().unwrap().is_empty(), "{:?}", store.locks().unwrap());
            let mut holders: BTreeMap<u32, String> = BTreeMap::new();
            for n in 0..3 {
                let deployment = format!("d{n}");
                let instances: BTreeSet<String> = a
                    .director
                    .instances(&deployment)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|i| i.id)
                    .collect();
                let held = store.ips_of(&deployment).unwrap();
                let owners: BTreeSet<String> =
                    held.iter().map(|r| r.owner.instance.clone()).collect();
                assert_eq!(owners, instances, "{deployment}: held {held:?}");
                for record in held {
                    let before = holders.insert(record.address, deployment.clone());
                    assert!(before.is_none(), "{} held twice", record.address);
                }
            }
            let all = store.ips_in(0, u32::MAX).unwrap();
            assert_eq!(all.len(), holders.len(), "addresses of no deployment: {all:?}");
        });
    }
}
