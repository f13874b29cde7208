//! A chaos soak of `serve`; run with
//! `cargo build --release && cargo run --release --example chaos_soak -- [SECONDS] [CLIENTS] [processes]`
//! (default 300 s, 6 clients). `fleet-updater serve` runs as a child process on a
//! simulated fleet, or with `processes` on one whose VMs are processes of this machine
//! running the kv release; clients deploy, update, recreate, restart and delete
//! deployments through the director API while `serve` is killed (SIGKILL) and stopped
//! (SIGTERM) at random and started again, as root its state's disk (a 64 MiB tmpfs) is
//! filled and freed, and on processes VMs' supervisors and jobs are killed. It prints the
//! operations done, the faults injected and the invariant violations found afterwards
//! (target: 0) and exits 1 when there is any.

#[path = "shared/soak.rs"]
mod soak;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The program beside this example's folder (`target/release/fleet-updater`).
fn program() -> PathBuf {
    let exe = std::env::current_exe().expect("this example's path");
    let program = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(|profile| profile.join("fleet-updater"))
        .expect("a target folder");
    assert!(
        program.exists(),
        "{} is missing: `cargo build --release` first",
        program.display()
    );
    program
}

/// A 64 MiB tmpfs for the state (more than its store's write-ahead log keeps, 16 MiB),
/// when this process may mount one; 512 MiB on processes, whose VMs hold their packages.
fn small_disk(dir: &std::path::Path, processes: bool) -> Option<PathBuf> {
    let disk = dir.join("disk");
    std::fs::create_dir_all(&disk).ok()?;
    let size = if processes { "size=512m" } else { "size=64m" };
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", size, "soak-disk"])
        .arg(&disk)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    mounted.then_some(disk)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(300);
    let clients: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(6);
    let processes = args.next().is_some_and(|a| a == "processes");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let disk = small_disk(dir.path(), processes);
    let kv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/releases/kv");
    let settings = soak::SoakSettings {
        program: program(),
        duration: Duration::from_secs(seconds),
        clients,
        deployments_per_client: 3,
        fault_every: Duration::from_secs(8),
        seed: 2026,
        kill: true,
        small_disk: disk.clone(),
        processes: processes.then_some(kv),
    };
    println!(
        "soaking serve on {} for {seconds} s with {clients} clients{}",
        if processes {
            "process-backed VMs"
        } else {
            "a simulated fleet"
        },
        if disk.is_some() {
            ", its disk filled and freed"
        } else {
            " (not root: its disk is left alone)"
        }
    );
    let report = soak::soak(&settings, dir.path()).await;
    if let Some(disk) = &disk {
        let _ = Command::new("umount").arg("-l").arg(disk).status();
    }
    match report {
        Ok(report) => {
            print!("{report}");
            if !report.violations.is_empty() {
                println!("kept for a look: {}", dir.keep().display());
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("the soak could not run: {e}");
            eprintln!("kept for a look: {}", dir.keep().display());
            std::process::exit(2);
        }
    }
}
