//! The chaos soak's short version (`examples/chaos_soak.rs` is the long one): `serve`
//! killed, stopped and started again under concurrent clients, then every invariant holds.

use crate::chaos;
use std::path::PathBuf;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn a_short_soak_stops_serve_under_clients_and_every_invariant_holds() {
    let dir = tempfile::tempdir().unwrap();
    let settings = chaos::SoakSettings {
        program: PathBuf::from(env!("CARGO_BIN_EXE_fleet-updater")),
        duration: Duration::from_secs(25),
        clients: 3,
        deployments_per_client: 2,
        fault_every: Duration::from_secs(6),
        seed: 11,
        kill: true,
        small_disk: None,
        processes: None,
    };
    holds(&settings, dir.path(), 5).await;
}

/// The same on a fleet whose VMs are processes of this machine running the kv release:
/// the injector also kills VMs' supervisors and jobs' processes, and afterwards every
/// instance runs again and no process is left of a VM nobody knows.
#[tokio::test(flavor = "multi_thread")]
async fn a_short_soak_kills_supervisors_and_jobs_of_process_vms_and_every_invariant_holds() {
    let dir = tempfile::tempdir().unwrap();
    let settings = chaos::SoakSettings {
        program: PathBuf::from(env!("CARGO_BIN_EXE_fleet-updater")),
        duration: Duration::from_secs(30),
        clients: 2,
        deployments_per_client: 2,
        fault_every: Duration::from_secs(4),
        seed: 5,
        kill: true,
        small_disk: None,
        processes: Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/releases/kv")),
    };
    holds(&settings, dir.path(), 2).await;
}

/// Soaks in `dir`: a fault or more injected, at least `operations` done, no invariant
/// broken (with the tail of `serve`'s output when one is).
async fn holds(settings: &chaos::SoakSettings, dir: &std::path::Path, operations: usize) {
    let report = chaos::soak(settings, dir).await.unwrap();
    println!("{report}");
    assert!(report.faults_injected() >= 1, "{report}");
    assert!(report.operations_done() >= operations, "{report}");
    assert!(
        report.violations.is_empty(),
        "{report}\nserve's output: {}",
        std::fs::read_to_string(dir.join("serve.log"))
            .unwrap_or_default()
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
