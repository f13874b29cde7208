//! The demo on real processes (`config/demo-processes.yml`) through the binary:
//! provisioned on kv/1, rolled to kv/2 with canaries, a run killed halfway converging on
//! the next with no process left behind (checked by pid), a killed VM supervisor started
//! again, and every process gone once its deployment is.

use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Workspace, json};

/// The demo's own configuration, as `docs/real-processes.md` runs it.
pub(super) fn config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo-processes.yml")
}

/// The demo with VMs that are plain processes of this machine, whatever it allows: what
/// these tests look at is the process supervision of such VMs (containers have their
/// own tests).
pub(super) fn plain_config(w: &Workspace) -> PathBuf {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    let definition = std::fs::read_to_string(repository.join("config/fleets/processes.yml"))
        .unwrap()
        .replace(
            "path: ../releases/kv",
            &format!("path: {}", repository.join("config/releases/kv").display()),
        )
        .replace("vms: auto", "vms: processes");
    let definition = w.write("fleet-plain.yml", &definition);
    let run_config = std::fs::read_to_string(config()).unwrap().replace(
        "fleet: fleets/processes.yml",
        &format!("fleet: {}", definition.display()),
    );
    w.write("demo-plain.yml", &run_config)
}

pub(super) fn run(w: &Workspace, config: &Path) -> Process {
    let mut command = Process::new(env!("CARGO_BIN_EXE_fleet-updater"));
    command
        .env_remove("FLEET_UPDATER_CONFIG")
        .args(["run", "-c"])
        .arg(config)
        .arg("--state-dir")
        .arg(w.path("state"))
        .arg("--report")
        .arg(w.path("report.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// Every VM's directory.
pub(super) fn vms(w: &Workspace) -> Vec<PathBuf> {
    let dir = w.path("state/iaas/vms");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    found.sort();
    found
}

/// The kv server pids the VMs' pidfiles name.
pub(super) fn pids(w: &Workspace) -> Vec<u32> {
    vms(w)
        .iter()
        .filter_map(|vm| std::fs::read_to_string(vm.join("sys/run/bpm/kv/kv.pid")).ok())
        .filter_map(|t| t.trim().parse().ok())
        .collect()
}

pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            !stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

pub(super) fn lifecycle(vm: &Path) -> Vec<String> {
    std::fs::read_to_string(vm.join("sys/log/kv/lifecycle.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_whitespace().skip(2).collect::<Vec<_>>().join(" "))
        .collect()
}

/// The VMs' supervisor pids.
pub(super) fn supervisors(w: &Workspace) -> Vec<u32> {
    vms(w)
        .iter()
        .filter_map(|vm| std::fs::read_to_string(vm.join("sys/run/supervisor.pid")).ok())
        .filter_map(|t| t.trim().parse().ok())
        .collect()
}

/// Every live kv server started under the workspace's state directory, found by its
/// command line in /proc.
pub(super) fn servers(w: &Workspace) -> Vec<u32> {
    let state = w.path("state").to_string_lossy().into_owned();
    let mut found: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                c.contains("kv-server") && c.contains(&state)
            })
        })
        .filter(|p| alive(*p))
        .collect();
    found.sort();
    found
}

/// Whether every one of `pids` has ended within a few seconds of being told to: a
/// process is reaped a moment after its VM goes.
pub(super) fn all_end(pids: &[u32]) -> bool {
    for _ in 0..250 {
        if pids.iter().all(|p| !alive(*p)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    pids.iter().all(|p| !alive(*p))
}

/// Ends whatever the test leaves running, also when it fails.
pub(super) struct Cleanup<'a>(pub(super) &'a Workspace);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for pid in supervisors(self.0).into_iter().chain(pids(self.0)) {
            let _ = Process::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// What an instance's server answers to `GET /`.
pub(super) fn hello(vm: &Path) -> String {
    use std::io::{Read, Write};
    let address = std::fs::read_to_string(vm.join("sys/run/kv/address")).unwrap();
    let mut stream = std::net::TcpStream::connect(address.trim()).unwrap();
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer.lines().last().unwrap_or_default().to_string()
}

#[test]
fn the_kv_fleet_rolls_to_a_new_release_on_processes_and_a_killed_run_converges() {
    let w = Workspace::new();
    let _cleanup = Cleanup(&w);
    let config = plain_config(&w);

    // A run killed while it updates the canary: the VMs' supervisors keep their
    // processes running.
    let mut first = run(&w, &config).spawn().unwrap();
    let mut waited = Duration::ZERO;
    while !vms(&w)
        .iter()
        .any(|vm| lifecycle(vm).iter().any(|l| l.starts_with("drain")))
    {
        assert!(waited < Duration::from_secs(120), "no update began");
        std::thread::sleep(Duration::from_millis(50));
        waited += Duration::from_millis(50);
    }
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(supervisors(&w).iter().all(|p| alive(*p)));

    // The next run finishes the rollout.
    let status = run(&w, &config).status().unwrap();
    assert_eq!(status.code(), Some(0));
    let report: Value = json(&w.path("report.json"));
    let updated = report["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["outcome"] == "updated")
        .count();
    assert!(updated >= 2, "{report}");

    // The fleet runs on after the run: every VM's server on kv/2, each supervised, every
    // VM through the lifecycle in order; no server runs that no pidfile names.
    assert_eq!(vms(&w).len(), 6, "three instances of two VMs");
    let running = pids(&w);
    assert!(running.iter().all(|p| alive(*p)), "{running:?}");
    assert!(supervisors(&w).iter().all(|p| alive(*p)));
    for vm in vms(&w) {
        assert!(
            hello(&vm).starts_with("kv 2 service-instance_kv-"),
            "{}",
            hello(&vm)
        );
        let steps = lifecycle(&vm);
        let last_start = steps.iter().rposition(|s| s == "pre-start").unwrap();
        let tail = &steps[last_start..];
        assert!(
            tail[1].starts_with("post-start listening on 127.0.0.1:"),
            "{steps:?}"
        );
        assert_eq!(
            tail.last().map(String::as_str),
            Some("post-deploy"),
            "{steps:?}"
        );
    }
    let mut expected = running.clone();
    expected.sort();
    assert_eq!(servers(&w), expected, "no server runs unsupervised");

    // Up to date now: the next run finds nothing and touches no process.
    let status = run(&w, &config).status().unwrap();
    assert_eq!(status.code(), Some(0));
    let report: Value = json(&w.path("report.json"));
    assert_eq!(report["counts"]["selected"], 0, "{report}");
    assert_eq!(pids(&w), running);

    // A VM's supervisor killed: the next command that opens the fleet ends what it left
    // and starts it again, its server started anew without any lifecycle script.
    let victim = vms(&w)[0].clone();
    let supervisor = std::fs::read_to_string(victim.join("sys/run/supervisor.pid")).unwrap();
    let old_server = std::fs::read_to_string(victim.join("sys/run/bpm/kv/kv.pid")).unwrap();
    let steps = lifecycle(&victim).len();
    let _ = Process::new("kill")
        .args(["-9", supervisor.trim()])
        .status();
    let status = run(&w, &config).status().unwrap();
    assert_eq!(status.code(), Some(0));
    let new_supervisor = std::fs::read_to_string(victim.join("sys/run/supervisor.pid")).unwrap();
    assert_ne!(new_supervisor, supervisor);
    assert!(alive(new_supervisor.trim().parse().unwrap()));
    assert!(
        !alive(old_server.trim().parse().unwrap()),
        "what it left is ended"
    );
    assert_eq!(lifecycle(&victim).len(), steps, "no lifecycle script ran");
    let running = pids(&w);
    assert!(running.iter().all(|p| alive(*p)), "{running:?}");
    let mut expected = running.clone();
    expected.sort();
    assert_eq!(servers(&w), expected, "no server runs unsupervised");

    // `stop --hard` and `delete-deployment` take the instances' VMs and their processes.
    let director = |args: &[&str]| {
        let output = Process::new(env!("CARGO_BIN_EXE_fleet-updater"))
            .env_remove("FLEET_UPDATER_CONFIG")
            .args(["director", "-c"])
            .arg(&config)
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
    };
    // A reboot of kv-03's VMs: new processes, no lifecycle script.
    let steps: Vec<usize> = vms(&w).iter().map(|vm| lifecycle(vm).len()).collect();
    assert!(
        director(&["restart", "service-instance_kv-03", "--reboot"]).starts_with("rebooted kv/")
    );
    let rebooted = pids(&w);
    assert_eq!(
        rebooted.iter().filter(|p| !running.contains(p)).count(),
        2,
        "{rebooted:?}"
    );
    let after: Vec<usize> = vms(&w).iter().map(|vm| lifecycle(vm).len()).collect();
    assert_eq!(steps, after, "no lifecycle script ran");
    let everything: Vec<u32> = supervisors(&w)
        .into_iter()
        .chain(running)
        .chain(rebooted)
        .collect();
    assert!(director(&["stop", "service-instance_kv-01", "--hard"]).contains(" done: "));
    assert!(director(&["delete-deployment", "service-instance_kv-02"]).contains(" done: "));
    assert_eq!(vms(&w).len(), 2, "kv-03's two VMs are left");
    assert!(director(&["delete-deployment", "service-instance_kv-03"]).contains(" done: "));
    assert!(vms(&w).is_empty());
    all_end(&everything);
    for pid in everything {
        assert!(!alive(pid), "process {pid} outlived its VM");
    }
}
