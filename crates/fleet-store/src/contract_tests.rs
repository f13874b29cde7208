//! What every backend must do alike, run on the one the environment picks
//! ([`crate::testing`]): SQLite here, PostgreSQL when `.ci/run` starts a server.

use std::sync::Arc;

use crate::testing;
use crate::*;

const LEASE: Lease = Lease {
    now: 0,
    until: i64::MAX as u64,
};

/// Two handles on one database, as two director processes have.
struct Pair {
    a: Arc<dyn Store>,
    b: Arc<dyn Store>,
    _dir: Option<tempfile::TempDir>,
}

fn pair() -> Pair {
    match testing::postgres() {
        Some(database) => {
            let at = testing::fresh_schema(&database);
            Pair {
                a: Arc::new(PgStore::connect(&at).unwrap()),
                b: Arc::new(PgStore::connect(&at).unwrap()),
                _dir: None,
            }
        }
        None => {
            let dir = tempfile::tempdir().unwrap();
            Pair {
                a: Arc::new(SqliteStore::open(dir.path()).unwrap()),
                b: Arc::new(SqliteStore::open(dir.path()).unwrap()),
                _dir: Some(dir),
            }
        }
    }
}

fn lease(now: u64, until: u64) -> Lease {
    Lease { now, until }
}

fn processing(store: &dyn Store, deployment: &str, lock: Option<&str>, lease: Lease) -> Task {
    let mut task = store
        .create_task(
            crate::testing::kinds::UPDATE,
            Some(deployment),
            lock,
            None,
            lease,
        )
        .unwrap()
        .unwrap();
    task.state = TaskState::Processing;
    store.put_task(&task).unwrap();
    task
}

#[test]
fn a_batch_of_puts_and_deletes_ends_as_applied_one_after_the_other() {
    let Pair { a, b, _dir } = pair();
    let fleet = testing::FLEET;
    a.write(vec![put(fleet, "kept", "", &1), put(fleet, "gone", "", &1)])
        .unwrap();
    let delete = |key: &str| Write::Delete {
        collection: fleet,
        key: key.to_string(),
    };
    a.write(vec![
        delete("gone"),
        put(fleet, "back", "s", &1),
        delete("back"),
        put(fleet, "back", "t", &2),
        put(fleet, "new", "", &3),
        put(fleet, "new", "", &4),
        delete("never-there"),
        put(fleet, "brief", "", &5),
        delete("brief"),
    ])
    .unwrap();
    let stored = |key: &str| get::<u32>(&*b, fleet, key).unwrap();
    assert_eq!(
        ["kept", "gone", "back", "new", "brief"].map(stored),
        [Some(1), None, Some(2), Some(4), None]
    );
    assert_eq!(list::<u32>(&*b, fleet, Some("t")).unwrap(), [2]);
    a.write(vec![delete("kept"), delete("new")]).unwrap();
    assert_eq!(
        ["kept", "new", "back"].map(stored),
        [None, None, Some(2)],
        "deletes alone"
    );
}

#[test]
fn deferred_writes_go_with_the_next_call_and_none_is_left_behind() {
    let Pair {
        a: store,
        b: elsewhere,
        _dir,
    } = pair();
    let fleet = testing::FLEET;
    let stored = |key: &str| get::<u32>(&*elsewhere, fleet, key).unwrap();
    store.defer(vec![put(fleet, "cloud", "", &1)]).unwrap();
    assert_eq!(stored("cloud"), None, "deferred, not written");
    store.write(vec![put(fleet, "director", "", &2)]).unwrap();
    assert_eq!((stored("cloud"), stored("director")), (Some(1), Some(2)));
    store.defer(vec![put(fleet, "cloud", "", &3)]).unwrap();
    assert_eq!(
        get::<u32>(&*store, fleet, "cloud").unwrap(),
        Some(3),
        "a read comes after what was deferred before it"
    );
    store.defer(vec![put(fleet, "task", "", &4)]).unwrap();
    store.locks().unwrap();
    assert_eq!(stored("task"), Some(4), "any call applies them");
    store.defer(vec![put(fleet, "synced", "", &5)]).unwrap();
    store.sync().unwrap();
    assert_eq!(stored("synced"), Some(5), "a sync applies them");
    store.defer(vec![put(fleet, "last", "", &6)]).unwrap();
    assert_eq!(stored("last"), None);
    drop(store);
    assert_eq!(stored("last"), Some(6), "written when the store closed");
}

#[test]
fn a_runner_that_holds_the_store_alone_recovers_everything_others_left() {
    let Pair { a, b, _dir } = pair();
    a.renew(lease(0, 1_000)).unwrap();
    let left = processing(&*a, "d", Some("lock:d"), lease(0, 1_000));
    let ended = b
        .recover("the director stopped", 5_000, Recovery::AllOthers)
        .unwrap();
    assert_eq!(ended, [left.id]);
    let task = b.task(left.id).unwrap().unwrap();
    assert_eq!(task.state, TaskState::Error);
    assert_eq!(task.result.as_deref(), Some("the director stopped"));
    assert_eq!(task.finished_at, Some(5));
    assert!(b.locks().unwrap().is_empty());
}

#[test]
fn only_a_runner_whose_lease_ran_out_is_recovered_and_it_learns_of_it() {
    let Pair { a, b, _dir } = pair();
    a.renew(lease(0, 10_000)).unwrap();
    b.renew(lease(0, 10_000)).unwrap();
    let of_a = processing(&*a, "d1", Some("lock:d1"), lease(0, 10_000));
    let of_b = processing(&*b, "d2", Some("lock:d2"), lease(0, 10_000));
    assert!(
        b.recover("gone", 9_000, Recovery::Expired)
            .unwrap()
            .is_empty(),
        "a live runner's tasks are left alone"
    );
    // a stops renewing; b renews on.
    b.renew(lease(9_000, 19_000)).unwrap();
    assert_eq!(
        b.recover("gone", 12_000, Recovery::Expired).unwrap(),
        [of_a.id]
    );
    assert_eq!(b.task(of_a.id).unwrap().unwrap().state, TaskState::Error);
    assert_eq!(
        b.task(of_b.id).unwrap().unwrap().state,
        TaskState::Processing
    );
    assert_eq!(b.locks().unwrap(), [("lock:d2".to_string(), of_b.id)]);
    // a was only slow: it hears it was given up, and cannot bring its task back.
    let renewal = a.renew(lease(12_500, 22_500)).unwrap();
    assert!(renewal.was_lost);
    let mut late = of_a.clone();
    late.state = TaskState::Done;
    a.put_task(&late).unwrap();
    assert_eq!(a.task(of_a.id).unwrap().unwrap().state, TaskState::Error);
    assert!(!a.renew(lease(13_000, 23_000)).unwrap().was_lost);
}

#[test]
fn one_living_runner_leads_and_the_next_takes_over_when_its_lease_runs_out() {
    let Pair { a, b, _dir } = pair();
    if !a.shared() {
        // One process's store: whoever asks leads.
        assert!(a.leads(0).unwrap() && b.leads(0).unwrap());
        return;
    }
    assert!(
        !a.leads(0).unwrap(),
        "a runner not yet registered does not lead"
    );
    a.renew(lease(0, 10_000)).unwrap();
    b.renew(lease(0, 10_000)).unwrap();
    let (a_leads, b_leads) = (a.leads(5_000).unwrap(), b.leads(5_000).unwrap());
    assert!(
        a_leads != b_leads,
        "exactly one leads: a {a_leads}, b {b_leads}"
    );
    let (leader, other) = if a_leads { (&a, &b) } else { (&b, &a) };
    // The leader stops renewing; the other renews on and leads once the lease ran out.
    other.renew(lease(9_000, 19_000)).unwrap();
    assert!(leader.leads(9_500).unwrap() && !other.leads(9_500).unwrap());
    assert!(other.leads(10_001).unwrap());
    assert!(
        !leader.leads(10_001).unwrap(),
        "a runner given up does not lead"
    );
}

#[test]
fn a_lock_whose_lease_ran_out_is_taken_over_and_a_live_one_is_not() {
    let Pair { a, b, _dir } = pair();
    let held = processing(&*a, "d", Some("lock:d"), lease(0, 1_000));
    let refused = b
        .create_task(
            crate::testing::kinds::UPDATE,
            Some("d"),
            Some("lock:d"),
            None,
            lease(999, 2_000),
        )
        .unwrap();
    assert_eq!(refused, Err(held.id));
    // a renews: still held past the first expiry.
    a.renew(lease(900, 3_000)).unwrap();
    let refused = b
        .create_task(
            crate::testing::kinds::UPDATE,
            Some("d"),
            Some("lock:d"),
            None,
            lease(2_000, 4_000),
        )
        .unwrap();
    assert_eq!(refused, Err(held.id));
    let taken = b
        .create_task(
            crate::testing::kinds::UPDATE,
            Some("d"),
            Some("lock:d"),
            None,
            lease(3_001, 6_000),
        )
        .unwrap()
        .unwrap();
    assert_eq!(b.lock_holder("lock:d").unwrap(), Some(taken.id));
    assert!(taken.id > held.id, "task ids are unique and grow");
}

#[test]
fn a_cancellation_asked_through_one_handle_reaches_the_runner_and_sticks() {
    let Pair { a, b, _dir } = pair();
    a.renew(lease(0, 10_000)).unwrap();
    let task = processing(&*a, "d", Some("lock:d"), lease(0, 10_000));
    let asked = b.request_cancel(task.id).unwrap().unwrap();
    assert_eq!(asked.state, TaskState::Cancelling);
    // The runner, not yet told, writes its progress: the mark stays.
    a.put_task(&task).unwrap();
    assert_eq!(
        b.task(task.id).unwrap().unwrap().state,
        TaskState::Cancelling
    );
    assert_eq!(a.renew(lease(1, 10_001)).unwrap().cancelling, [task.id]);
    let mut ended = task.clone();
    ended.state = TaskState::Cancelled;
    a.put_task(&ended).unwrap();
    let again = b.request_cancel(task.id).unwrap().unwrap();
    assert_eq!(
        again.state,
        TaskState::Cancelled,
        "an ended task is left as it is"
    );
    assert!(a.renew(lease(2, 10_002)).unwrap().cancelling.is_empty());
    assert_eq!(b.request_cancel(9_999).unwrap(), None);
}

#[test]
fn two_handles_racing_for_one_lock_never_both_hold_it() {
    let Pair { a, b, _dir } = pair();
    let race = |store: Arc<dyn Store>| {
        std::thread::spawn(move || {
            let mut won = Vec::new();
            for _ in 0..40 {
                if let Ok(task) = store
                    .create_task(
                        crate::testing::kinds::UPDATE,
                        Some("d"),
                        Some("lock:d"),
                        None,
                        LEASE,
                    )
                    .unwrap()
                {
                    won.push(task.id);
                    assert_eq!(store.lock_holder("lock:d").unwrap(), Some(task.id));
                    store.release_lock("lock:d", task.id).unwrap();
                }
            }
            won
        })
    };
    let (one, two) = (race(Arc::clone(&a)), race(Arc::clone(&b)));
    let mut won = one.join().unwrap();
    won.extend(two.join().unwrap());
    let mut unique = won.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), won.len(), "a task id was given twice");
    assert!(!won.is_empty());
    assert!(a.locks().unwrap().is_empty());
}

#[test]
fn two_handles_claiming_the_same_addresses_at_once_never_hold_one_twice() {
    let Pair { a, b, _dir } = pair();
    let claim = |store: Arc<dyn Store>, instance: &'static str| {
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for address in 0..60u32 {
                let claim = IpClaim {
                    address,
                    network: "n".into(),
                    owner: IpHolder {
                        deployment: "d".into(),
                        instance: instance.into(),
                    },
                    is_static: false,
                };
                if store.apply_ips(&[claim], &[]).unwrap().is_ok() {
                    held.push(address);
                }
            }
            held
        })
    };
    let (one, two) = (claim(Arc::clone(&a), "one"), claim(Arc::clone(&b), "two"));
    let (one, two) = (one.join().unwrap(), two.join().unwrap());
    assert_eq!(one.len() + two.len(), 60, "{one:?} {two:?}");
    let stored = a.ips_of("d").unwrap();
    assert_eq!(stored.len(), 60);
    for record in stored {
        let winner = if one.contains(&record.address) {
            "one"
        } else {
            "two"
        };
        assert_eq!(record.owner.instance, winner);
    }
}

/// Instance `instance` of deployment `d`.
fn holder(instance: &str) -> IpHolder {
    IpHolder {
        deployment: "d".into(),
        instance: instance.into(),
    }
}

/// `address` on network `n` claimed for `instance`.
fn claim(address: u32, instance: &str) -> IpClaim {
    IpClaim {
        address,
        network: "n".into(),
        owner: holder(instance),
        is_static: false,
    }
}

/// `address` on network `n` given back by `instance`.
fn release(address: u32, instance: &str) -> IpRelease {
    IpRelease {
        address,
        network: "n".into(),
        owner: holder(instance),
    }
}

#[test]
fn a_claim_on_an_address_another_holds_is_refused_whole() {
    let store = testing::store();
    store.apply_ips(&[claim(5, "a")], &[]).unwrap().unwrap();
    let refused = store
        .apply_ips(&[claim(4, "b"), claim(5, "b")], &[])
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.owner, holder("a"));
    assert_eq!(
        store.ips_in(0, 10).unwrap(),
        [5],
        "nothing of the refused plan"
    );
    assert!(store.claimed().unwrap().contains(5));
    store
        .apply_ips(&[claim(4, "b")], &[release(5, "a")])
        .unwrap()
        .unwrap();
    assert_eq!(store.ips_in(0, 10).unwrap(), [4]);
    assert_eq!(store.ip_holders(&[4, 5]).unwrap().len(), 1);
}

#[test]
fn an_address_released_and_claimed_in_one_apply_passes_to_its_new_owner() {
    let store = testing::store();
    store.apply_ips(&[claim(7, "gone")], &[]).unwrap().unwrap();
    store
        .apply_ips(&[claim(7, "new")], &[release(7, "gone")])
        .unwrap()
        .unwrap();
    let held = store.ip_holders(&[7]).unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].owner, holder("new"));
    assert!(store.claimed().unwrap().contains(7), "still claimed");
    // A release naming an owner who no longer holds it frees nothing, so the claim
    // behind it is refused whole.
    let refused = store
        .apply_ips(
            &[claim(7, "third"), claim(8, "third")],
            &[release(7, "gone")],
        )
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.owner, holder("new"));
    assert_eq!(
        store.ips_in(0, 10).unwrap(),
        [7],
        "nothing of the refused plan"
    );
}

#[test]
fn documents_events_and_blobs_round_trip() {
    let store = testing::store();
    store
        .write(vec![
            put(crate::testing::FLEET, "b", "", &2),
            put(crate::testing::FLEET, "a", "", &1),
            put(crate::testing::FLEET, "a", "", &3),
        ])
        .unwrap();
    assert_eq!(
        list::<i32>(&*store, crate::testing::FLEET, None).unwrap(),
        [3, 2]
    );
    assert_eq!(store.keys(crate::testing::FLEET).unwrap(), ["a", "b"]);
    store
        .write(vec![remove(crate::testing::FLEET, "a")])
        .unwrap();
    assert_eq!(
        get::<i32>(&*store, crate::testing::FLEET, "a").unwrap(),
        None
    );
    let task = processing(&*store, "d", None, LEASE);
    let event = |stage: &str| TaskEvent {
        time: 1,
        stage: stage.into(),
        tags: Vec::new(),
        task: "t".into(),
        index: 1,
        total: 1,
        state: EventState::Started,
        progress: 0,
        error: None,
    };
    store
        .append_events(task.id, &[event("one"), event("two")])
        .unwrap();
    store.append_events(task.id, &[event("three")]).unwrap();
    let stages: Vec<String> = store
        .events(task.id)
        .unwrap()
        .into_iter()
        .map(|e| e.stage)
        .collect();
    assert_eq!(stages, ["one", "two", "three"]);
    store.put_blob("b", b"bytes").unwrap();
    store.put_blob("a", b"first").unwrap();
    store.put_blob("a", b"again").unwrap();
    assert_eq!(store.blob("a").unwrap().as_deref(), Some(&b"again"[..]));
    assert_eq!(store.blob_ids().unwrap(), ["a", "b"]);
    store.delete_blob("a").unwrap();
    assert_eq!(store.blob("a").unwrap(), None);
    // A blob kept from a file: piece by piece where the store can, whole either way, and
    // replacing what the id held.
    let file = tempfile::NamedTempFile::new().unwrap();
    let large: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(file.path(), &large).unwrap();
    store.put_blob_file("b", file.path()).unwrap();
    assert_eq!(store.blob("b").unwrap().as_deref(), Some(large.as_slice()));
    let missing = store
        .put_blob_file("c", &file.path().with_extension("gone"))
        .unwrap_err();
    assert!(matches!(missing, StoreError::Source { .. }), "{missing}");
    assert_eq!(store.blob("c").unwrap(), None);
    // Written again shorter: nothing of the longer one is left.
    std::fs::write(file.path(), b"short").unwrap();
    store.put_blob_file("b", file.path()).unwrap();
    assert_eq!(store.blob("b").unwrap().as_deref(), Some(&b"short"[..]));
    store.put_blob("empty", b"").unwrap();
    assert_eq!(store.blob("empty").unwrap().as_deref(), Some(&b""[..]));
    assert_eq!(store.blob_ids().unwrap(), ["b", "empty"]);
}

#[test]
fn a_postgres_database_of_a_newer_schema_is_refused() {
    let Some(database) = testing::postgres() else {
        return;
    };
    let at = testing::fresh_schema(&database);
    let store = PgStore::connect(&at).unwrap();
    drop(store);
    testing::run(
        &at,
        "INSERT INTO fleet_schema_versions (version) VALUES (99)".into(),
    );
    let refused = PgStore::connect(&at).err().expect("refused");
    assert!(
        matches!(refused, StoreError::NewerSchema { found: 99, .. }),
        "{refused}"
    );
}

#[test]
fn a_lock_is_taken_with_its_task_or_not_at_all() {
    let store = testing::store();
    let first = store
        .create_task(
            crate::testing::kinds::CREATE,
            Some("d"),
            Some("deployment:d"),
            None,
            LEASE,
        )
        .unwrap()
        .unwrap();
    let refused = store
        .create_task(
            crate::testing::kinds::RECREATE,
            Some("d"),
            Some("deployment:d"),
            None,
            LEASE,
        )
        .unwrap();
    assert_eq!(refused, Err(first.id));
    assert_eq!(
        store.tasks(&TaskFilter::default()).unwrap().len(),
        1,
        "the refused task was not written"
    );
    store.release_lock("deployment:d", first.id).unwrap();
    assert!(
        store
            .create_task(
                crate::testing::kinds::RECREATE,
                Some("d"),
                Some("deployment:d"),
                None,
                LEASE,
            )
            .unwrap()
            .is_ok()
    );
}

#[test]
fn pruning_keeps_the_newest_of_a_kind_every_running_task_and_each_deployments_last_change() {
    let store = testing::store();
    let task = |kind, deployment: &str, state| {
        let mut t = store
            .create_task(kind, Some(deployment), None, None, LEASE)
            .unwrap()
            .unwrap();
        t.state = state;
        store.put_task(&t).unwrap();
        store
            .append_events(
                t.id,
                &[TaskEvent {
                    time: 0,
                    stage: "s".into(),
                    tags: Vec::new(),
                    task: "t".into(),
                    index: 1,
                    total: 1,
                    state: crate::EventState::Started,
                    progress: 0,
                    error: None,
                }],
            )
            .unwrap();
        store
            .write(vec![crate::put(
                crate::testing::TASK_TRACES,
                &t.id.to_string(),
                "",
                &"trace",
            )])
            .unwrap();
        t.id
    };
    use crate::testing::kinds::{DETAILS as InstanceDetails, UPDATE as UpdateDeployment};
    let a_failed = task(UpdateDeployment, "a", TaskState::Error); // a's last change
    let b1 = task(UpdateDeployment, "b", TaskState::Done);
    let running = task(UpdateDeployment, "c", TaskState::Processing);
    let b2 = task(UpdateDeployment, "b", TaskState::Done);
    let b3 = task(UpdateDeployment, "b", TaskState::Done);
    let b4 = task(UpdateDeployment, "b", TaskState::Done);
    let details: Vec<u64> = (0..3)
        .map(|_| task(InstanceDetails, "b", TaskState::Done))
        .collect();
    let mut pruned = store
        .prune_tasks(UpdateDeployment, 2, crate::testing::PER_TASK)
        .unwrap();
    pruned.sort_unstable();
    // Newest two finished: b4, b3; b2 and b1 go; a's only change and the running
    // task stay whatever their age.
    assert_eq!(pruned, [b1, b2]);
    let left: Vec<u64> = store
        .tasks(&TaskFilter::default())
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    for kept in [a_failed, running, b3, b4] {
        assert!(left.contains(&kept), "{kept} pruned");
    }
    assert!(store.events(b1).unwrap().is_empty());
    assert!(
        store
            .get(crate::testing::TASK_TRACES, &b1.to_string())
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .get(crate::testing::TASK_TRACES, &b4.to_string())
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store
            .prune_tasks(InstanceDetails, 1, crate::testing::PER_TASK)
            .unwrap()
            .len(),
        2
    );
    assert!(store.events(details[0]).unwrap().is_empty());
    assert_eq!(store.events(details[2]).unwrap().len(), 1);
    assert!(
        store
            .prune_tasks(UpdateDeployment, 2, crate::testing::PER_TASK)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_batch_is_written_whole_and_documents_list_by_scope() {
    let store = testing::store();
    store
        .write(vec![
            put(crate::testing::INSTANCES, "a", "d1", &1),
            put(crate::testing::INSTANCES, "b", "d2", &2),
            put(crate::testing::INSTANCES, "c", "d1", &3),
        ])
        .unwrap();
    let d1: Vec<i32> = crate::list(&*store, crate::testing::INSTANCES, Some("d1")).unwrap();
    assert_eq!(d1, [1, 3]);
    assert_eq!(
        get::<i32>(&*store, crate::testing::INSTANCES, "b").unwrap(),
        Some(2)
    );
}

fn task(store: &dyn Store, kind: crate::TaskKindSpec, deployment: &str, state: TaskState) -> Task {
    let mut task = store
        .create_task(kind, Some(deployment), None, None, LEASE)
        .unwrap()
        .unwrap();
    task.state = state;
    store.put_task(&task).unwrap();
    task
}

#[test]
fn listings_filter_in_the_query_and_read_only_tasks_are_nobodys_last_change() {
    let store = testing::store();
    let a1 = task(&*store, crate::testing::kinds::CREATE, "a", TaskState::Done);
    let b1 = task(
        &*store,
        crate::testing::kinds::CREATE,
        "b",
        TaskState::Error,
    );
    let a2 = task(
        &*store,
        crate::testing::kinds::RECREATE,
        "a",
        TaskState::Processing,
    );
    let a3 = task(
        &*store,
        crate::testing::kinds::DETAILS,
        "a",
        TaskState::Done,
    );
    let ids = |tasks: Vec<Task>| tasks.iter().map(|t| t.id).collect::<Vec<_>>();
    let all = TaskFilter::default();
    assert_eq!(ids(store.tasks(&all).unwrap()), [a2.id, b1.id, a1.id]);
    let verbose = TaskFilter {
        read_only: true,
        ..all.clone()
    };
    assert_eq!(
        ids(store.tasks(&verbose).unwrap()),
        [a3.id, a2.id, b1.id, a1.id]
    );
    let of_a = TaskFilter {
        deployment: Some("a".into()),
        limit: Some(1),
        ..all.clone()
    };
    assert_eq!(ids(store.tasks(&of_a).unwrap()), [a2.id]);
    let ended = TaskFilter {
        states: Some(vec![TaskState::Done, TaskState::Error]),
        ..all
    };
    assert_eq!(ids(store.tasks(&ended).unwrap()), [b1.id, a1.id]);
    // A context groups tasks across kinds and deployments, read-only ones included.
    for t in [&a1, &a3] {
        let mut grouped = store.task(t.id).unwrap().unwrap();
        grouped.context_id = Some("ctx-1".into());
        store.put_task(&grouped).unwrap();
    }
    let in_context = TaskFilter {
        context_id: Some("ctx-1".into()),
        read_only: true,
        ..TaskFilter::default()
    };
    assert_eq!(ids(store.tasks(&in_context).unwrap()), [a3.id, a1.id]);
    let other_context = TaskFilter {
        context_id: Some("ctx-2".into()),
        ..in_context
    };
    assert!(store.tasks(&other_context).unwrap().is_empty());
    assert_eq!(store.last_change("a").unwrap().map(|t| t.id), Some(a2.id));
    assert_eq!(store.last_change("c").unwrap(), None);
    let mut latest = ids(store.last_changes().unwrap());
    latest.sort_unstable();
    assert_eq!(latest, [b1.id, a2.id]);
    assert_eq!(
        store.task(a3.id).unwrap().unwrap().kind,
        crate::testing::kinds::DETAILS.name
    );
}

#[test]
fn of_two_handles_creating_one_record_at_once_exactly_one_creates_it() {
    let Pair { a, b, _dir } = pair();
    let create = |store: Arc<dyn Store>, who: &'static str| {
        std::thread::spawn(move || {
            (0..50)
                .filter(|n| {
                    store
                        .insert(
                            crate::testing::SERVICE_INSTANCES,
                            &format!("si-{n}"),
                            "",
                            &format!("\"{who}\""),
                        )
                        .unwrap()
                })
                .collect::<Vec<_>>()
        })
    };
    let (one, two) = (create(Arc::clone(&a), "one"), create(Arc::clone(&b), "two"));
    let (one, two) = (one.join().unwrap(), two.join().unwrap());
    assert_eq!(one.len() + two.len(), 50, "{one:?} {two:?}");
    for n in 0..50 {
        let stored: String = get(&*a, crate::testing::SERVICE_INSTANCES, &format!("si-{n}"))
            .unwrap()
            .unwrap();
        let creator = if one.contains(&n) { "one" } else { "two" };
        assert_eq!(stored, creator, "si-{n}");
    }
}

#[test]
fn over_tls_the_server_must_chain_to_the_ca_and_name_the_host() {
    let (Ok(url), Ok(ca)) = (
        std::env::var("FLEET_TEST_POSTGRES_TLS"),
        std::env::var("FLEET_TEST_POSTGRES_CA"),
    ) else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_TLS names no PostgreSQL server with TLS");
        return;
    };
    let ca = std::path::PathBuf::from(ca);
    let at = PostgresLocation::parse(&url, None, Some(ca.clone())).unwrap();
    let store = PgStore::connect(&testing::fresh_schema(&at)).unwrap();
    store
        .write(vec![put(crate::testing::FLEET, "tls", "", &true)])
        .unwrap();
    assert_eq!(
        get::<bool>(&store, crate::testing::FLEET, "tls").unwrap(),
        Some(true)
    );
    // The same server by its address: its certificate names `localhost` only.
    let by_address = url.replace("localhost", "127.0.0.1");
    let refused = PgStore::connect(&PostgresLocation::parse(&by_address, None, Some(ca)).unwrap())
        .err()
        .expect("a certificate for another name is refused");
    assert!(
        matches!(refused, StoreError::Unreachable { .. }),
        "{refused}"
    );
    let dir = tempfile::tempdir().unwrap();
    let not_a_ca = dir.path().join("ca.pem");
    std::fs::write(&not_a_ca, "not a certificate").unwrap();
    let refused = PgStore::connect(&PostgresLocation::parse(&url, None, Some(not_a_ca)).unwrap())
        .err()
        .expect("a CA file without a certificate is refused");
    assert!(
        refused.to_string().contains("no PEM certificate"),
        "{refused}"
    );
}
