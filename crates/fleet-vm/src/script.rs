//! Running a job's lifecycle script (`pre-start`, `drain`, ...): its output appended to
//! the job's logs as BOSH keeps them (`sys/log/JOB/pre-start.stdout.log`), its exit code
//! and the tail of its output kept for the task's logs. A script runs in a process group
//! of its own, so that a timeout takes down whatever it started.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// How much of a script's output a task log shows: its last lines.
const TAIL_LINES: usize = 10;
const TAIL_CHARS: usize = 2000;

#[derive(Debug, Clone)]
pub struct Script {
    pub job: String,
    /// `pre-start`, `post-start`, `drain`, ...
    pub name: String,
    pub path: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    pub log_dir: PathBuf,
    /// Where it runs; the caller's directory when `None`.
    pub cwd: Option<PathBuf>,
    /// The container it runs in, for a VM that is one.
    pub enter: Option<crate::container::Enter>,
}

/// How a script ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptRun {
    pub job: String,
    pub name: String,
    /// `None` when it was killed by a signal or its timeout.
    pub exit: Option<i32>,
    pub timed_out: bool,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The last lines of its output, stdout then stderr.
    pub tail: String,
}

impl ScriptRun {
    pub fn succeeded(&self) -> bool {
        self.exit == Some(0)
    }

    /// The exit code a shell would report: 128 plus the signal for a script a signal
    /// ended, as BOSH's errand results count them (above 128 is cancelled).
    pub fn exit_code(&self) -> i32 {
        self.exit
            .unwrap_or_else(|| 128 + self.signal.unwrap_or(libc::SIGKILL))
    }

    /// `pre-start of job kv exited 3`, for events and errors.
    pub fn describe(&self) -> String {
        let how = match (self.exit, self.timed_out) {
            (_, true) => "timed out".to_string(),
            (Some(code), _) => format!("exited {code}"),
            (None, _) => "was killed by a signal".to_string(),
        };
        // A package's packaging script runs under the package's name.
        let owner = if self.name == "packaging" {
            "package"
        } else {
            "job"
        };
        format!("{} of {owner} {} {how}", self.name, self.job)
    }
}

/// Runs `script` to its end (or its timeout).
///
/// # Errors
/// When it cannot be started or its logs cannot be written.
pub async fn run(script: &Script) -> std::io::Result<ScriptRun> {
    if script.enter.is_none() {
        std::fs::create_dir_all(&script.log_dir)?;
    }
    let mut command = match &script.enter {
        Some(enter) => enter.command(
            &script.path,
            &script.args,
            script.cwd.as_deref(),
            &script.env,
        ),
        None => {
            let mut command = Command::new(&script.path);
            command
                .args(&script.args)
                .envs(script.env.iter().map(|(k, v)| (k, v)));
            if let Some(dir) = &script.cwd {
                command.current_dir(dir);
            }
            command
        }
    };
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    crate::signal::default_handling(&mut command);
    let child = fleet_spawn::spawn(&mut command).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot run {}: {e}", script.path.display()),
        )
    })?;
    let group = child.id();
    // A run given up (its caller dropped it: a cancelled task) takes the script's whole
    // process group with it, not only the script.
    let mut reaper = GroupReaper(group);
    let waited = match script.timeout {
        Some(limit) => tokio::time::timeout(limit, child.wait_with_output()).await,
        None => Ok(child.wait_with_output().await),
    };
    // Waited for: what the script left running in the background is its own business.
    reaper.0 = None;
    let (output, timed_out) = match waited {
        Ok(output) => (Some(output?), false),
        Err(_) => {
            if let Some(pgid) = group {
                crate::signal::group(pgid, libc::SIGKILL);
            }
            (None, true)
        }
    };
    let (stdout, stderr, exit, signal) = match &output {
        Some(o) => (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
            o.status.code(),
            std::os::unix::process::ExitStatusExt::signal(&o.status),
        ),
        None => (String::new(), String::new(), None, Some(libc::SIGKILL)),
    };
    for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        let file = format!("{}.{stream}.log", script.name);
        match &script.enter {
            Some(enter) => append_in_vm(enter.vm_dir(), &script.log_dir.join(file), text).await?,
            None => append(&script.log_dir, &file, text).await?,
        }
    }
    Ok(ScriptRun {
        job: script.job.clone(),
        name: script.name.clone(),
        exit,
        timed_out,
        signal,
        tail: tail(&format!("{stdout}{stderr}")),
        stdout,
        stderr,
    })
}

/// Kills a process group when dropped while armed: the script and whatever it started,
/// when its run is given up before it ended.
struct GroupReaper(Option<u32>);

impl Drop for GroupReaper {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            crate::signal::group(pgid, libc::SIGKILL);
        }
    }
}

async fn append(dir: &std::path::Path, file: &str, text: &str) -> std::io::Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    let mut log = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(file))
        .await?;
    log.write_all(text.as_bytes()).await?;
    // tokio's file finishes a write in the background unless flushed.
    log.flush().await
}

/// Appends to a log in a container VM's directory, which the VM may have linked
/// anywhere: resolved within the directory ([`crate::beneath`]).
async fn append_in_vm(
    vm_dir: &std::path::Path,
    path: &std::path::Path,
    text: &str,
) -> std::io::Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    let relative = path
        .strip_prefix(vm_dir)
        .map_err(std::io::Error::other)?
        .to_path_buf();
    let (root, text) = (vm_dir.to_path_buf(), text.as_bytes().to_vec());
    tokio::task::spawn_blocking(move || crate::beneath::Root::open(&root)?.append(&relative, &text))
        .await
        .map_err(std::io::Error::other)?
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let last = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
    let count = last.chars().count();
    if count > TAIL_CHARS {
        last.chars().skip(count - TAIL_CHARS).collect()
    } else {
        last
    }
}

/// Runs every script at once and waits for them all, in the order given.
///
/// # Errors
/// The first that could not be started.
pub async fn run_all(scripts: Vec<Script>) -> std::io::Result<Vec<ScriptRun>> {
    let mut set = tokio::task::JoinSet::new();
    for (i, script) in scripts.into_iter().enumerate() {
        set.spawn(async move { (i, run(&script).await) });
    }
    let mut runs = Vec::new();
    while let Some(joined) = set.join_next().await {
        let (i, run) = joined.map_err(std::io::Error::other)?;
        runs.push((i, run?));
    }
    runs.sort_by_key(|(i, _)| *i);
    Ok(runs.into_iter().map(|(_, r)| r).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_the_last_lines() {
        let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let t = tail(&text);
        assert!(t.starts_with("line 21") && t.ends_with("line 30"), "{t}");
    }
}
