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

/// Gives the child `command` starts the default handling of SIGINT and SIGQUIT. A process
/// a shell starts in the background (as the VM's supervisor and agent are started)
/// ignores both, and a child inherits what is ignored: a job would otherwise not hear
/// bpm's SIGQUIT, nor a SIGINT its bpm config names as its shutdown signal, and a shell
/// script could not trap them.
pub fn default_handling(command: &mut tokio::process::Command) {
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls may run; signal(2) is one, and it allocates nothing.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
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
/// (a daemon whose parent went away is reaped by init, maybe late). Any pid counts, 1
/// included, as monit counts it: a pidfile naming init names a live process.
pub fn alive(pid: u32) -> bool {
    if pid == 0 {
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

/// Whether the pid a pidfile names is a live process of the VM at `root`, not one that
/// took the number after the pidfile's process ended (the machine restarted): its
/// environment names the VM ([`crate::sandbox::VM_ROOT`]), or, for a process that
/// rewrote its environment (as servers setting their process title do), it started no
/// later than the pidfile was written.
pub fn started_in(pid: u32, root: &std::path::Path, pidfile: &std::path::Path) -> bool {
    if !alive(pid) {
        return false;
    }
    if let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) {
        let mut wanted = format!("{}=", crate::sandbox::VM_ROOT).into_bytes();
        wanted.extend_from_slice(root.as_os_str().as_encoded_bytes());
        if environ
            .split(|b| *b == 0)
            .any(|entry| entry == wanted.as_slice())
        {
            return true;
        }
    }
    let written = std::fs::metadata(pidfile).and_then(|m| m.modified());
    match (started_at(pid), written) {
        // A second of slack: the clock ticks and the file times are coarse.
        (Some(started), Ok(written)) => started <= written + std::time::Duration::from_secs(1),
        _ => false,
    }
}

/// When `pid` started: the boot time plus its start in clock ticks (`/proc/PID/stat`).
fn started_at(pid: u32) -> Option<std::time::SystemTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22, counted after the command name, which is in parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf reads a constant of the system; it touches no memory of ours.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    let since_boot = std::time::Duration::from_millis(ticks * 1000 / per_second.max(1));
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(boot) + since_boot)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper(env: Option<&std::path::Path>) -> std::process::Child {
        let mut command = std::process::Command::new("sleep");
        command.arg("30");
        if let Some(root) = env {
            command.env(crate::sandbox::VM_ROOT, root);
        }
        command.spawn().unwrap()
    }

    /// Polls `check` for up to 2 s: a new program's environment shows once it has been
    /// executed.
    fn soon(check: impl Fn() -> bool) -> bool {
        (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            check()
        })
    }

    #[test]
    fn a_process_is_known_by_the_vm_it_was_started_in_or_by_when_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vm");
        let pidfile = dir.path().join("p.pid");
        // A stranger that started before the pidfile was written, as the process that
        // wrote it would have.
        let mut older = sleeper(None);
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::write(&pidfile, "").unwrap();
        // A pidfile older than the process: a number taken after a restart.
        let old_file = dir.path().join("old.pid");
        std::fs::write(&old_file, "").unwrap();
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&old_file)
            .unwrap()
            .set_modified(past)
            .unwrap();
        let mut marked = sleeper(Some(&root));
        let mut stranger = sleeper(None);
        assert!(
            soon(|| started_in(marked.id(), &root, &old_file)),
            "by its environment"
        );
        assert!(
            !started_in(stranger.id(), &root, &old_file),
            "started after its pidfile"
        );
        assert!(
            started_in(older.id(), &root, &pidfile),
            "started before its pidfile"
        );
        for c in [&mut marked, &mut stranger, &mut older] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        assert!(!started_in(marked.id(), &root, &old_file), "gone");
    }
}
