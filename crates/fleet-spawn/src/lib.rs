//! Starting a program that was written a moment ago. Linux refuses to run a file that a
//! process holds open for writing (`ETXTBSY`), and a child forked on another thread just
//! then holds the written file's descriptor until it runs its own program: in a process
//! that unpacks job scripts and starts processes at once (the agent, the director with
//! its in-process VMs, `create-env` with the CPI it just installed), a fresh program can
//! be refused for an instant. The start is tried again then, a few times within a few
//! hundred milliseconds.

use std::time::Duration;

use tokio::process::{Child, Command};

/// How many times a start refused as busy is tried in all.
const ATTEMPTS: u32 = 8;

/// [`Command::spawn`], tried again while the program is busy being written.
///
/// # Errors
/// The last start's error.
pub async fn spawn(command: &mut Command) -> std::io::Result<Child> {
    let waits = fleet_clock::Doubling {
        first: Duration::from_millis(5),
        max: Duration::from_millis(100),
    };
    let mut attempt = 1;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < ATTEMPTS => {
                tokio::time::sleep(waits.after(attempt)).await;
                attempt += 1;
            }
            started => return started,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn a_script_held_open_for_writing_starts_once_it_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script");
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(b"#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Still open for writing: the kernel refuses to run it.
        let refused = Command::new(&path).spawn().unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::ETXTBSY));
        let closing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(file);
        });
        let status = spawn(&mut Command::new(&path))
            .await
            .expect("started once closed")
            .wait()
            .await
            .unwrap();
        assert!(status.success());
        closing.await.unwrap();
    }
}
