//! Signals to processes and process groups, and whether a process still lives: the few
//! calls to the C library that supervision needs.

/// Sends `signal` to every process of group `pgid`; a group already gone is no error.
pub fn group(pgid: u32, signal: i32) {
    if let Ok(pgid) = i32::try_from(pgid)
        && pgid > 1
    {
        // SAFETY: kill(2) with a negative pid signals a process group; it touches no
        // memory of this process.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// Sends `signal` to one process.
pub fn process(pid: u32, signal: i32) {
    if let Ok(pid) = i32::try_from(pid)
        && pid > 1
    {
        // SAFETY: as in `group`.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Whether `pid` is a live process: it exists and is not a zombie waiting to be reaped
/// (a daemon whose parent went away is reaped by init, maybe late).
pub fn alive(pid: u32) -> bool {
    if pid <= 1 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Whether `pid` is a live process started in the VM at `root`: its environment names the
/// VM ([`crate::sandbox::VM_ROOT`]). A pidfile may outlive its process, and its number be
/// taken by another.
pub fn started_in(pid: u32, root: &std::path::Path) -> bool {
    if !alive(pid) {
        return false;
    }
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let mut wanted = format!("{}=", crate::sandbox::VM_ROOT).into_bytes();
    wanted.extend_from_slice(root.as_os_str().as_encoded_bytes());
    environ
        .split(|b| *b == 0)
        .any(|entry| entry == wanted.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_the_vm_it_was_started_in() {
        let root = std::path::Path::new("/tmp/some-vm");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(crate::sandbox::VM_ROOT, root)
            .spawn()
            .unwrap();
        let mut stranger = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let env = std::fs::read(format!("/proc/{}/environ", child.id())).unwrap();
        eprintln!(
            "{:?} alive={}",
            String::from_utf8_lossy(&env)
                .replace("\0", "\n")
                .lines()
                .filter(|l| l.starts_with("BOSH"))
                .collect::<Vec<_>>(),
            alive(child.id())
        );
        // The new program's environment shows once it has been executed.
        let known = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            started_in(child.id(), root)
        });
        assert!(known);
        assert!(!started_in(
            child.id(),
            std::path::Path::new("/tmp/some-vm2")
        ));
        assert!(!started_in(stranger.id(), root), "a process of no VM");
        for c in [&mut child, &mut stranger] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        assert!(!started_in(child.id(), root), "gone");
    }
}
