//! The health monitor against the simulated cloud, in virtual time: a silent agent's VM
//! is recreated, and nothing is when too much is down, when resurrection is paused or
//! turned off by a resurrection config, or when the instance keeps data on a disk.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::audit::AuditFilter;
use crate::health_monitor::{self, HealthMonitorSettings};
use crate::model::{InstanceRecord, Task, TaskFilter, TaskKind, TaskState};
use crate::resurrection::Meltdown;
use crate::tests::{Fixture, deploy, fixture, manifest};
use crate::{Director, DirectorError};

const MIN: Duration = Duration::from_secs(60);

pub(crate) fn settings() -> HealthMonitorSettings {
    HealthMonitorSettings {
        meltdown: Meltdown {
            minimum_down: 3,
            percent_threshold: 0.5,
            time_threshold: 10 * MIN,
        },
        ..HealthMonitorSettings::default()
    }
}

/// Deploys `d` with `n` instances (a persistent disk of `disk` MB, none at 0) and
/// silences the agents of the instances at `silent` (by index).
async fn deployed(n: u32, disk: u64, silent: &[u32]) -> (Fixture, Vec<InstanceRecord>) {
    let f = fixture(vec![]).await;
    let task = deploy(&f.director, &manifest("d", n, "1.0", disk)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let mut instances = f.director.instances("d").await.unwrap();
    instances.sort_by_key(|i| i.index);
    for i in silent {
        let agent = instances[*i as usize].agent_id.as_deref().unwrap();
        f.cloud.set_responsive(agent, false).await.unwrap();
    }
    (f, instances)
}

/// Lets the monitor run for `time` of virtual time, then waits for what it started.
async fn monitor_for(director: &Director, settings: HealthMonitorSettings, time: Duration) {
    let monitor = health_monitor::spawn(director.clone(), settings);
    tokio::time::sleep(time).await;
    monitor.abort();
    for task in scans_and_fixes(director).await {
        director.wait(task.id).await.unwrap();
    }
}

pub(crate) async fn scans_and_fixes(director: &Director) -> Vec<Task> {
    let all = TaskFilter {
        deployment: Some("d".into()),
        states: None,
        read_only: true,
        context_id: None,
        limit: None,
    };
    let mut tasks = director.tasks(all).await.unwrap();
    tasks.retain(|t| TaskKind::of(t) == Some(TaskKind::ScanAndFix));
    for t in &mut tasks {
        *t = director.wait(t.id).await.unwrap();
    }
    tasks
}

/// The titles of the alerts `bosh events` lists, oldest first.
pub(crate) async fn alerts(director: &Director) -> Vec<String> {
    let filter = AuditFilter {
        object_type: Some("alert".into()),
        ..AuditFilter::default()
    };
    let mut events = director.audit_events(&filter).await.unwrap();
    events.reverse();
    events
        .into_iter()
        .map(|e| {
            e.message
                .unwrap()
                .split(". Severity")
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_silent_agents_vm_is_recreated_and_the_alerts_are_events() {
    let (f, before) = deployed(4, 0, &[1]).await;
    monitor_for(&f.director, settings(), 3 * MIN).await;
    let tasks = scans_and_fixes(&f.director).await;
    assert_eq!(tasks.len(), 1, "one repair: {tasks:?}");
    assert_eq!(tasks[0].state, TaskState::Done, "{:?}", tasks[0].result);
    assert_eq!(tasks[0].description, "scan and fix");
    assert!(
        tasks[0]
            .result
            .as_deref()
            .unwrap()
            .starts_with("scan and fix complete: 1 VMs recreated"),
        "{tasks:?}"
    );
    let mut after = f.director.instances("d").await.unwrap();
    after.sort_by_key(|i| i.index);
    assert_ne!(after[1].vm_cid, before[1].vm_cid, "a new VM");
    assert_ne!(after[1].agent_id, before[1].agent_id, "and agent");
    for i in [0, 2, 3] {
        assert_eq!(after[i].vm_cid, before[i].vm_cid, "left alone");
    }
    let agent = before[1].agent_id.clone().unwrap();
    assert_eq!(
        alerts(&f.director).await,
        [
            format!("{agent} has timed out"),
            "d has instances with timed out agents".to_string(),
            "Scan unresponsive VMs".to_string(),
        ]
    );
    let events = f
        .director
        .audit_events(&AuditFilter::default())
        .await
        .unwrap();
    // Alerts sort among the tasks' events by when they were raised: after the deploy's,
    // before the repair's.
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.object_type, e.action))
        .filter(|(t, _)| *t != "instance")
        .collect();
    assert_eq!(
        kinds,
        [
            ("deployment", "update"),
            ("deployment", "update"),
            ("alert", "create"),
            ("alert", "create"),
            ("alert", "create"),
            ("deployment", "create"),
            ("deployment", "create"),
        ]
    );
    assert!(
        events
            .iter()
            .any(|e| e.object_type == "instance" && e.action == "recreate"),
        "{events:?}"
    );
    // Once the new agent answers, there is nothing more to do.
    monitor_for(&f.director, settings(), 3 * MIN).await;
    assert_eq!(scans_and_fixes(&f.director).await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_resurrected_in_a_meltdown() {
    let (f, before) = deployed(4, 0, &[0, 1, 2]).await;
    monitor_for(&f.director, settings(), 3 * MIN).await;
    assert!(scans_and_fixes(&f.director).await.is_empty());
    assert_eq!(f.director.instances("d").await.unwrap().len(), before.len());
    assert!(
        alerts(&f.director)
            .await
            .contains(&"We are in meltdown".to_string())
    );
}

#[tokio::test(start_paused = true)]
async fn nothing_is_resurrected_while_paused_and_scan_and_fix_is_refused() {
    let (f, _) = deployed(4, 0, &[1]).await;
    f.director.set_resurrection_paused(true).await.unwrap();
    monitor_for(&f.director, settings(), 3 * MIN).await;
    assert!(scans_and_fixes(&f.director).await.is_empty());
    let jobs = BTreeMap::from([("web".to_string(), vec!["1".to_string()])]);
    assert!(matches!(
        f.director.scan_and_fix("d", &jobs).await,
        Err(DirectorError::ResurrectionPaused)
    ));
    // Resumed, the next passes repair it.
    f.director.set_resurrection_paused(false).await.unwrap();
    assert!(!f.director.resurrection_paused().await.unwrap());
    monitor_for(&f.director, settings(), 2 * MIN).await;
    assert_eq!(scans_and_fixes(&f.director).await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_resurrection_config_turns_it_off_for_its_groups() {
    let (f, _) = deployed(4, 0, &[1]).await;
    f.director
        .update_resurrection_config(
            "no-web",
            "rules:\n- enabled: false\n  include: {instance_groups: [web]}\n",
        )
        .await
        .unwrap();
    monitor_for(&f.director, settings(), 3 * MIN).await;
    assert!(scans_and_fixes(&f.director).await.is_empty());
    assert!(
        alerts(&f.director)
            .await
            .contains(&"Resurrection is disabled by resurrection config".to_string())
    );
    let refused = f
        .director
        .update_resurrection_config("bad", "rules: [{include: {}}]")
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("rules[0].enabled"), "{refused}");
}

#[tokio::test(start_paused = true)]
async fn an_instance_with_a_persistent_disk_is_left_to_an_operator() {
    let (f, before) = deployed(4, 1024, &[1]).await;
    monitor_for(&f.director, settings(), 3 * MIN).await;
    assert!(scans_and_fixes(&f.director).await.is_empty());
    assert!(
        alerts(&f.director)
            .await
            .contains(&"Instances with persistent disks are left to an operator".to_string())
    );
    // Asked for by hand, the director leaves it too.
    let jobs = BTreeMap::from([("web".to_string(), vec![before[1].id.clone()])]);
    let task = f.director.scan_and_fix("d", &jobs).await.unwrap();
    let task = f.director.wait(task.id).await.unwrap();
    let result = task.result.clone().unwrap();
    assert!(
        result.starts_with("scan and fix complete: 0 VMs recreated; left alone"),
        "{result}"
    );
    let mut after = f.director.instances("d").await.unwrap();
    after.sort_by_key(|i| i.index);
    assert_eq!(after[1].vm_cid, before[1].vm_cid);
    let jobs = BTreeMap::from([("web".to_string(), vec!["nope".to_string()])]);
    assert!(matches!(
        f.director.scan_and_fix("d", &jobs).await,
        Err(DirectorError::UnknownInstance { .. })
    ));
}
