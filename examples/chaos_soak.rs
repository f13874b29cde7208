//! A chaos soak of `serve`; run with
//! `cargo build --release && cargo run --release --example chaos_soak -- [SECONDS] [CLIENTS]`
//! (default 300 s, 6 clients). `fleet-updater serve` runs as a child process on a
//! simulated fleet; clients deploy, update, recreate, restart and delete deployments
//! through the director API while `serve` is killed (SIGKILL) and stopped (SIGTERM) at
//! random and started again, and, as root, its state's disk (a 256 MiB tmpfs) is filled and
//! freed. It prints the operations done, the faults injected and the invariant violations
//! found afterwards (target: 0) and exits 1 when there is any.

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

/// A 256 MiB tmpfs (more than the store's write-ahead log may grow to, 64 MiB) for the state, when this process may mount one.
fn small_disk(dir: &std::path::Path) -> Option<PathBuf> {
    let disk = dir.join("disk");
    std::fs::create_dir_all(&disk).ok()?;
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256m", "soak-disk"])
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
    let dir = tempfile::tempdir().expect("a temporary folder");
    let disk = small_disk(dir.path());
    let settings = soak::SoakSettings {
        program: program(),
        duration: Duration::from_secs(seconds),
        clients,
        deployments_per_client: 3,
        fault_every: Duration::from_secs(8),
        seed: 2026,
        kill: true,
        small_disk: disk.clone(),
    };
    println!(
        "soaking serve for {seconds} s with {clients} clients{}",
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
