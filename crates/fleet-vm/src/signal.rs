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
