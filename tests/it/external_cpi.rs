//! The demo fleet on real processes with its VMs and disks made through the external CPI
//! protocol (`fleet-updater cpi`, a process per call) gives what the in-process CPI
//! gives: the same instances on the same versions, every server answering, every process
//! supervised, and nothing left once the deployments are deleted.

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use serde_json::Value;

use super::processes::{Cleanup, config, hello, pids, run, servers, supervisors, vms};
use crate::support::{Workspace, json};

/// The demo configuration on its fleet definition as `cpi` (a `cpi:` block, or none)
/// leaves it, with cloud properties to pass on; its jobs drain at once and are watched
/// from 100 ms, so that the two runs this compares spend their time on the work.
fn demo_config(w: &Workspace, name: &str, cpi: &str) -> PathBuf {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    let definition = std::fs::read_to_string(repository.join("config/fleets/processes.yml"))
        .unwrap()
        .replace(
            "path: ../releases/kv",
            &format!("path: {}", repository.join("config/releases/kv").display()),
        )
        .replace(
            "azs: [{name: z1}]",
            "azs: [{name: z1, cloud_properties: {zone: local-a}}]",
        )
        .replace(
            "vm_types: [{name: small}]",
            "vm_types: [{name: small, cloud_properties: {cpus: 1}}]",
        )
        // The plain-process VMs both CPIs make, whatever this machine allows.
        .replace("vms: auto", "vms: processes")
        .replace("drain_seconds: 1", "drain_seconds: 0")
        .replace("watch_time: 500-10000", "watch_time: 100-10000");
    let definition = w.write(&format!("{name}.yml"), &format!("{definition}\n{cpi}"));
    let run_config = std::fs::read_to_string(config()).unwrap().replace(
        "fleet: fleets/processes.yml",
        &format!("fleet: {}", definition.display()),
    );
    w.write(&format!("demo-{name}.yml"), &run_config)
}

/// [`demo_config`] with this program's own external CPI (`fleet-updater cpi`).
fn external_config(w: &Workspace) -> PathBuf {
    demo_config(
        w,
        "processes-cpi",
        "cpi:\n  executable: fleet-updater\n  timeout: 2m\n",
    )
}

fn director(w: &Workspace, config: &Path, args: &[&str]) -> String {
    let output = Process::new(env!("CARGO_BIN_EXE_fleet-updater"))
        .env_remove("FLEET_UPDATER_CONFIG")
        .args(["director", "-c"])
        .arg(config)
        .arg("--state-dir")
        .arg(w.path("state"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// What a run leaves, in terms that do not depend on which cloud made it: each VM's
/// instance and version as its server answers, the run's counts, and how many processes.
fn outcome(w: &Workspace) -> (Vec<String>, Value, usize, usize) {
    let mut answers: Vec<String> = vms(w)
        .iter()
        .map(|vm| {
            let answer = hello(vm);
            // `kv 2 service-instance_kv-01/kv/0 pid 123`: the pid differs.
            answer.split(" pid ").next().unwrap().to_string()
        })
        .collect();
    answers.sort();
    let report: Value = json(&w.path("report.json"));
    (
        answers,
        report["counts"].clone(),
        pids(w).len(),
        supervisors(w).len(),
    )
}

#[test]
fn the_demo_fleet_through_the_external_process_cpi_ends_as_through_the_in_process_one() {
    let in_process = Workspace::new();
    let _first = Cleanup(&in_process);
    let config = demo_config(&in_process, "processes", "");
    assert_eq!(run(&in_process, &config).status().unwrap().code(), Some(0));
    let expected = outcome(&in_process);

    let external = Workspace::new();
    let _second = Cleanup(&external);
    let config = external_config(&external);
    assert_eq!(run(&external, &config).status().unwrap().code(), Some(0));
    let got = outcome(&external);
    assert_eq!(got, expected);
    assert_eq!(got.0.len(), 6, "three instances of two VMs: {got:?}");
    assert!(got.0.iter().all(|a| a.starts_with("kv 2 ")), "{got:?}");
    let mut running = pids(&external);
    running.sort();
    assert_eq!(servers(&external), running, "no server runs unsupervised");

    // create_vm was given each network's subnet settings.
    let record: Value =
        serde_json::from_slice(&std::fs::read(vms(&external)[0].join(".records/vm.json")).unwrap())
            .unwrap();
    let network = &record["networks"]["default"];
    assert_eq!(network["type"], "manual", "{record}");
    assert_eq!(network["netmask"], "255.255.255.0", "{record}");
    assert_eq!(network["gateway"], "10.245.0.1", "{record}");
    assert_eq!(network["default"], serde_json::json!(["dns", "gateway"]));
    // ... and the cloud properties of its AZ and VM type.
    assert_eq!(
        record["cloud_properties"],
        serde_json::json!({"zone": "local-a", "cpus": 1}),
        "{record}"
    );

    // The CPI's own log is in the tasks' CPI logs: the VMs were made through it.
    let logged = (1..=20).any(|id| {
        let text = director(&external, &config, &["task", &id.to_string(), "--cpi"]);
        text.contains("create_vm log: VM vm-") && text.contains("made for agent")
    });
    assert!(logged, "no task's CPI log has the external CPI's own log");

    // Deleting the deployments through the external CPI ends every process.
    let everything: Vec<u32> = supervisors(&external).into_iter().chain(running).collect();
    for i in ["01", "02", "03"] {
        let deployment = format!("service-instance_kv-{i}");
        assert!(
            director(&external, &config, &["delete-deployment", &deployment]).contains(" done: ")
        );
    }
    assert!(vms(&external).is_empty());
    super::processes::all_end(&everything);
    for pid in everything {
        assert!(
            !super::processes::alive(pid),
            "process {pid} outlived its VM"
        );
    }
}
