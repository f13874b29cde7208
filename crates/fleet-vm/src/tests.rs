//! The lifecycle and supervision with real scripts and processes in temporary
//! directories. The scripts record what they do in a file; the tests read the order.
//! Time here is the machine's: these are processes, not simulations, so the waits are
//! kept short and no assertion depends on how long anything took.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::jobs;
use super::lifecycle::{Lifecycle, StopContext};
use super::sandbox::Sandbox;
use super::signal;
use super::supervisor::{ProcessState, Supervisor, Timings};

struct Vm {
    _dir: tempfile::TempDir,
    sandbox: Sandbox,
    record: PathBuf,
}

fn timings() -> Timings {
    Timings {
        check_every: Duration::from_millis(100),
        restart_first: Duration::from_millis(100),
        restart_max: Duration::from_millis(400),
        // Long enough that a loaded machine still runs each trap before the next signal.
        bpm_term: Duration::from_secs(1),
        bpm_quit: Duration::from_secs(1),
        bpm_pre_start: Duration::from_secs(5),
        monit_stop: Duration::from_secs(10),
    }
}

impl Vm {
    fn new() -> Vm {
        let dir = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::create(&dir.path().join("vm")).unwrap();
        let record = dir.path().join("record");
        std::fs::write(&record, "").unwrap();
        Vm {
            _dir: dir,
            sandbox,
            record,
        }
    }

    /// Writes a job file; `bin/` files are made executable. `$REC` is the record file.
    fn write(&self, job: &str, path: &str, text: &str) {
        let file = self.sandbox.job(job).join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let text = text.replace("$REC", &self.record.display().to_string());
        std::fs::write(&file, text).unwrap();
        if path.starts_with("bin/") {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    /// A hook that records `JOB:HOOK`.
    fn hook(&self, job: &str, hook: &str) {
        self.write(
            job,
            &format!("bin/{hook}"),
            &format!("#!/bin/sh\necho {job}:{hook} >> $REC\n"),
        );
    }

    /// A monit process started by a ctl script that backgrounds `sleep` and writes its
    /// pidfile, and stopped by it; both recorded.
    fn monit_job(&self, job: &str) {
        let run = self.sandbox.run_dir().join(format!("{job}.pid"));
        let ctl = self.sandbox.job(job).join("bin/ctl");
        self.write(
            job,
            "bin/ctl",
            &format!(
                "#!/bin/sh\ncase $1 in\nstart) echo {job}:start >> $REC; sleep 1000 & echo $! > {pid};;\nstop) echo {job}:stop >> $REC; kill $(cat {pid});;\nesac\n",
                pid = run.display()
            ),
        );
        self.write(
            job,
            "monit",
            &format!(
                "check process {job}\n  with pidfile {}\n  start program \"{ctl} start\"\n  stop program \"{ctl} stop\"\n  group vcap\n",
                run.display(),
                ctl = ctl.display()
            ),
        );
    }

    /// A bpm process that records its start, and each signal it is sent; `ignore` makes
    /// it stay on after TERM and QUIT.
    fn bpm_job(&self, job: &str, ignore: bool) {
        let on_signal = |sig: &str| {
            if ignore {
                format!("trap 'echo {job}:{sig} >> $REC' {sig}")
            } else {
                format!("trap 'echo {job}:stop >> $REC; exit 0' {sig}")
            }
        };
        self.write(
            job,
            "bin/run",
            &format!(
                // No core dumps: a `sleep` ended by the group's SIGQUIT would otherwise
                // dump one before the trap runs, which can outlast the grace on a busy
                // machine.
                "#!/bin/sh\nulimit -c 0\n{}\n{}\necho {job}:start >> $REC\nwhile true; do sleep 0.05; done\n",
                on_signal("TERM"),
                on_signal("QUIT")
            ),
        );
        self.write(
            job,
            "monit",
            &format!(
                "check process {job}\n  with pidfile /var/vcap/sys/run/bpm/{job}/{job}.pid\n  start program \"/var/vcap/jobs/bpm/bin/bpm start {job}\"\n  stop program \"/var/vcap/jobs/bpm/bin/bpm stop {job}\"\n"
            ),
        );
        self.write(
            job,
            "config/bpm.yml",
            &format!(
                "processes:\n- name: {job}\n  executable: {}\n",
                self.sandbox.job(job).join("bin/run").display()
            ),
        );
    }

    fn supervisor(&self, jobs: &[String]) -> Supervisor {
        self.supervisor_with(jobs, timings())
    }

    fn supervisor_with(&self, jobs: &[String], timings: Timings) -> Supervisor {
        let processes = jobs::processes(&self.sandbox, jobs).unwrap();
        Supervisor::new(self.sandbox.clone(), processes, timings)
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.record)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

fn shutdown() -> StopContext {
    StopContext::shutdown(vec![("BOSH_VM_NEXT_STATE".into(), "delete".into())])
}

fn names(jobs: &[&str]) -> Vec<String> {
    jobs.iter().map(|j| j.to_string()).collect()
}

/// The position of the first line with `suffix`, and of the last.
fn span(lines: &[String], suffix: &str) -> (usize, usize) {
    let at: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.ends_with(suffix))
        .map(|(i, _)| i)
        .collect();
    assert!(!at.is_empty(), "no `{suffix}` in {lines:?}");
    (at[0], *at.last().unwrap())
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen in 10 s");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lifecycle_runs_in_the_seeds_order_across_two_jobs() {
    let vm = Vm::new();
    for job in ["a", "b"] {
        for hook in ["pre-start", "post-start", "pre-stop", "post-stop"] {
            vm.hook(job, hook);
        }
        vm.write(
            job,
            "bin/drain",
            &format!("#!/bin/sh\necho {job}:drain >> $REC\necho 0\n"),
        );
    }
    vm.monit_job("a");
    vm.bpm_job("b", false);
    let jobs = names(&["a", "b"]);
    let supervisor = vm.supervisor(&jobs);
    let lifecycle = Lifecycle::new(&vm.sandbox, &jobs, &supervisor);
    lifecycle.start(None).await.unwrap();
    assert_eq!(lifecycle.runs().len(), 2, "two pre-starts");
    eventually("both processes running", || {
        supervisor
            .statuses()
            .iter()
            .all(|s| s.state == ProcessState::Running)
    })
    .await;
    eventually("b started", || vm.lines().contains(&"b:start".to_string())).await;
    lifecycle.run_hooks("post-start", &[]).await.unwrap();
    assert_eq!(
        lifecycle.runs().len(),
        4,
        "two pre-starts and two post-starts"
    );
    let started = vm.lines();
    let (_, pre_start) = span(&started, ":pre-start");
    let (first_start, _) = span(&started, ":start");
    let (post_start, _) = span(&started, ":post-start");
    assert!(pre_start < first_start, "{started:?}");
    // post-start runs once both processes run: after a's start program and b's process
    // recorded their start.
    let (_, last_start) = span(&started, ":start");
    assert!(last_start < post_start, "{started:?}");

    let pids: Vec<u32> = supervisor.statuses().iter().filter_map(|s| s.pid).collect();
    assert_eq!(pids.len(), 2);
    lifecycle.stop(&shutdown(), true).await.unwrap();
    assert_eq!(
        lifecycle.runs().len(),
        4 + 6,
        "pre-stop, drain and post-stop of each job"
    );
    let lines = vm.lines();
    let stopping = &lines[started.len()..];
    let (_, pre_stop) = span(stopping, ":pre-stop");
    let (first_drain, last_drain) = span(stopping, ":drain");
    let (first_stop, last_stop) = span(stopping, ":stop");
    let (first_post_stop, _) = span(stopping, ":post-stop");
    assert!(pre_stop < first_drain, "{stopping:?}");
    assert!(last_drain < first_stop, "{stopping:?}");
    assert!(last_stop < first_post_stop, "{stopping:?}");
    for pid in pids {
        assert!(!signal::alive(pid), "process {pid} outlived its stop");
    }
    assert!(
        supervisor
            .statuses()
            .iter()
            .all(|s| s.state == ProcessState::Unknown)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pre_start_scripts_run_at_once() {
    let vm = Vm::new();
    for job in ["a", "b"] {
        vm.write(
            job,
            "bin/pre-start",
            // Each waits (ten seconds at most) until both have begun: run one after the
            // other, the first ends before the second begins.
            &format!(
                "#!/bin/sh\necho {job}:begin >> $REC\ni=0\nwhile [ \"$(grep -c ':begin' $REC)\" -lt 2 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\necho {job}:end >> $REC\n"
            ),
        );
    }
    let jobs = names(&["a", "b"]);
    let supervisor = vm.supervisor(&jobs);
    let lifecycle = Lifecycle::new(&vm.sandbox, &jobs, &supervisor);
    lifecycle.start(None).await.unwrap();
    let lines = vm.lines();
    let (_, last_begin) = span(&lines, ":begin");
    let (first_end, _) = span(&lines, ":end");
    assert!(last_begin < first_end, "the two overlap: {lines:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dynamic_drain_is_asked_again_until_it_is_done() {
    let vm = Vm::new();
    vm.write(
        "a",
        "bin/drain",
        "#!/bin/sh\necho \"drain $* next=${BOSH_JOB_NEXT_STATE:-none}\" >> $REC\nif [ \"$1\" = job_check_status ]; then echo 0; else echo -1; fi\n",
    );
    vm.write(
        "a",
        "bin/pre-stop",
        "#!/bin/sh\necho \"pre-stop vm=$BOSH_VM_NEXT_STATE\" >> $REC\n",
    );
    let jobs = names(&["a"]);
    let supervisor = vm.supervisor(&jobs);
    let lifecycle = Lifecycle::new(&vm.sandbox, &jobs, &supervisor);
    let update = StopContext {
        job_change: "job_changed".into(),
        hash_change: "hash_changed".into(),
        updated_packages: vec!["server".into()],
        drain_env: vec![("BOSH_JOB_NEXT_STATE".into(), "{}".into())],
        pre_stop_env: vec![("BOSH_VM_NEXT_STATE".into(), "keep".into())],
    };
    lifecycle.stop(&update, false).await.unwrap();
    assert_eq!(lifecycle.runs().len(), 3);
    assert_eq!(
        vm.lines(),
        [
            "pre-stop vm=keep",
            "drain job_changed hash_changed server next={}",
            // The status run, as BOSH's agent makes it, knows no next state.
            "drain job_check_status hash_unchanged next=none"
        ]
    );

    vm.write("a", "bin/drain", "#!/bin/sh\necho later\n");
    let e = lifecycle.stop(&shutdown(), false).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "drain of job a printed `later`, not an integer"
    );
    assert_eq!(
        lifecycle.runs().len(),
        5,
        "a drain that answers badly is still logged"
    );
    assert_eq!(vm.lines().last().unwrap(), "pre-stop vm=delete");
}

#[tokio::test(flavor = "multi_thread")]
async fn bpm_escalates_to_sigkill_when_a_process_ignores_term_and_quit() {
    // As in a supervisor a shell started in the background (the VM's supervisor is
    // started so): SIGINT and SIGQUIT ignored, which its children would inherit. Set for
    // the whole test program; no test relies on this process hearing either.
    // SAFETY: signal(2) changes this process's dispositions only.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let vm = Vm::new();
    vm.bpm_job("stubborn", true);
    let jobs = names(&["stubborn"]);
    let supervisor = vm.supervisor(&jobs);
    supervisor.start().await;
    eventually("started", || {
        vm.lines().contains(&"stubborn:start".to_string())
    })
    .await;
    let pid = supervisor.statuses()[0].pid.unwrap();
    supervisor.stop().await;
    assert_eq!(
        vm.lines(),
        ["stubborn:start", "stubborn:TERM", "stubborn:QUIT"],
        "TERM, then QUIT, each ignored"
    );
    assert!(!signal::alive(pid), "SIGKILL ended it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_process_is_started_again() {
    let vm = Vm::new();
    vm.monit_job("a");
    let jobs = names(&["a"]);
    let supervisor = vm.supervisor(&jobs);
    supervisor.start().await;
    let first = supervisor.statuses()[0].pid.unwrap();
    signal::process(first, libc::SIGKILL);
    eventually("a new process", || {
        let s = &supervisor.statuses()[0];
        s.state == ProcessState::Running && s.pid.is_some_and(|p| p != first)
    })
    .await;
    assert!(supervisor.statuses()[0].restarts >= 1);
    assert_eq!(vm.lines(), ["a:start", "a:start"]);
    supervisor.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_pre_start_fails_the_start_and_starts_nothing() {
    let vm = Vm::new();
    vm.monit_job("a");
    vm.write(
        "a",
        "bin/pre-start",
        "#!/bin/sh\necho checking\necho no config >&2\nexit 3\n",
    );
    vm.hook("b", "pre-start");
    let jobs = names(&["a", "b"]);
    let supervisor = vm.supervisor(&jobs);
    let lifecycle = Lifecycle::new(&vm.sandbox, &jobs, &supervisor);
    let e = lifecycle.start(None).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "pre-start of job a exited 3: checking\nno config"
    );
    assert_eq!(
        lifecycle.runs().len(),
        2,
        "b's pre-start ran beside it and is logged too"
    );
    assert!(!vm.lines().contains(&"a:start".to_string()));
    assert_eq!(supervisor.statuses()[0].state, ProcessState::Unknown);
    let log = std::fs::read_to_string(vm.sandbox.log_dir("a").join("pre-start.stderr.log"));
    assert_eq!(log.unwrap(), "no config\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_cannot_start_is_failing_and_tried_again_later() {
    let vm = Vm::new();
    vm.write(
        "a",
        "monit",
        "check process a\n with pidfile /nonexistent/a.pid\n start program \"/bin/sh -c 'echo try >> $REC; exit 1'\"\n",
    );
    let jobs = names(&["a"]);
    let supervisor = vm.supervisor(&jobs);
    supervisor.start().await;
    assert_eq!(supervisor.statuses()[0].state, ProcessState::Failing);
    let failures = supervisor.failures();
    assert!(failures[0].1.contains("exited 1"), "{failures:?}");
    eventually("tried again", || vm.lines().len() >= 3).await;
    supervisor.stop().await;
    let tries = vm.lines().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(vm.lines().len(), tries, "nothing tried once stopped");
}

#[test]
fn rewritten_paths_reach_the_vm() {
    let vm = Vm::new();
    let text = vm.sandbox.rewrite("/var/vcap/jobs/a/bin/ctl");
    assert!(Path::new(&text).starts_with(vm.sandbox.root()));
}

#[tokio::test(flavor = "multi_thread")]
async fn bpm_limits_its_pre_start_hook_and_a_jobs_own_pre_start_has_no_limit() {
    let vm = Vm::new();
    vm.bpm_job("a", false);
    vm.write(
        "a",
        "bin/bpm-pre-start",
        "#!/bin/sh\necho a:hook >> $REC\nsleep 1000\n",
    );
    vm.write(
        "a",
        "config/bpm.yml",
        &format!(
            "processes:\n- name: a\n  executable: {}\n  hooks: {{pre_start: {}}}\n",
            vm.sandbox.job("a").join("bin/run").display(),
            vm.sandbox.job("a").join("bin/bpm-pre-start").display()
        ),
    );
    // The job's own pre-start takes longer than bpm's limit, and is waited for.
    vm.write(
        "b",
        "bin/pre-start",
        "#!/bin/sh\nsleep 1\necho b:pre-start-done >> $REC\n",
    );
    let jobs = names(&["a", "b"]);
    let limited = Timings {
        bpm_pre_start: Duration::from_millis(300),
        ..timings()
    };
    let supervisor = vm.supervisor_with(&jobs, limited);
    let lifecycle = Lifecycle::new(&vm.sandbox, &jobs, &supervisor);
    lifecycle.start(None).await.unwrap();
    let lines = vm.lines();
    assert!(lines.contains(&"b:pre-start-done".to_string()), "{lines:?}");
    assert!(lines.contains(&"a:hook".to_string()), "{lines:?}");
    assert!(!lines.contains(&"a:start".to_string()), "{lines:?}");
    let status = &supervisor.statuses()[0];
    assert_eq!(status.state, ProcessState::Failing);
    let failures = supervisor.failures();
    assert!(failures[0].1.contains("timed out"), "{failures:?}");
    supervisor.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_monit_stop_program_past_its_limit_is_ended_with_what_it_stopped() {
    let vm = Vm::new();
    let pidfile = vm.sandbox.run_dir().join("a.pid");
    let stopper = vm.sandbox.run_dir().join("stopper.pid");
    vm.write(
        "a",
        "bin/ctl",
        &format!(
            "#!/bin/sh\ncase $1 in\nstart) sleep 1000 & echo $! > {pid};;\nstop) echo $$ > {stopper}; sleep 1000;;\nesac\n",
            pid = pidfile.display(),
            stopper = stopper.display()
        ),
    );
    let ctl = vm.sandbox.job("a").join("bin/ctl");
    vm.write(
        "a",
        "monit",
        &format!(
            "check process a\n  with pidfile {}\n  start program \"{ctl} start\"\n  stop program \"{ctl} stop\"\n",
            pidfile.display(),
            ctl = ctl.display()
        ),
    );
    let jobs = names(&["a"]);
    let limited = Timings {
        monit_stop: Duration::from_millis(500),
        ..timings()
    };
    let supervisor = vm.supervisor_with(&jobs, limited);
    supervisor.start().await;
    let process: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(signal::alive(process));
    tokio::time::timeout(Duration::from_secs(60), supervisor.stop())
        .await
        .expect("the stop program was cut off at its limit");
    let stopper: u32 = std::fs::read_to_string(&stopper)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually("the stop program and the process ended", || {
        !signal::alive(stopper) && !signal::alive(process)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_that_writes_its_pidfile_late_is_waited_for_not_started_twice() {
    let vm = Vm::new();
    let pidfile = vm.sandbox.run_dir().join("late.pid");
    vm.write(
        "a",
        "bin/ctl",
        &format!(
            "#!/bin/sh\necho a:start >> $REC\n(sleep 1; sleep 1000 & echo $! > {pid}) >/dev/null 2>&1 &\n",
            pid = pidfile.display()
        ),
    );
    let ctl = vm.sandbox.job("a").join("bin/ctl");
    vm.write(
        "a",
        "monit",
        &format!(
            "check process a\n  with pidfile {}\n  start program \"{}\" with timeout 20 seconds\n",
            pidfile.display(),
            ctl.display()
        ),
    );
    let jobs = names(&["a"]);
    let supervisor = vm.supervisor(&jobs);
    supervisor.start().await;
    assert_eq!(supervisor.statuses()[0].state, ProcessState::Starting);
    eventually("the daemon running", || {
        supervisor.statuses()[0].state == ProcessState::Running
    })
    .await;
    assert_eq!(vm.lines(), ["a:start"], "started once");
    supervisor.stop().await;
}

/// A monit process whose start program stays in the foreground, as many monit-era `ctl
/// start` do (`exec` of the server after writing the pidfile).
fn foreground_job(vm: &Vm, job: &str, depends_on: &str) {
    let pid = vm.sandbox.run_dir().join(format!("{job}.pid"));
    let ctl = vm.sandbox.job(job).join("bin/ctl");
    vm.write(
        job,
        "bin/ctl",
        &format!(
            "#!/bin/sh\ncase $1 in\nstart) echo {job}:start >> $REC; echo $$ > {pid}; exec sleep 1000;;\nstop) echo {job}:stop >> $REC; kill $(cat {pid});;\nesac\n",
            pid = pid.display()
        ),
    );
    vm.write(
        job,
        "monit",
        &format!(
            "check process {job}\n  with pidfile {}\n  start program \"{ctl} start\" with timeout 2 seconds\n  stop program \"{ctl} stop\"\n  {depends_on}\n  group vcap\n",
            pid.display(),
            ctl = ctl.display()
        ),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_program_that_stays_in_the_foreground_runs_and_is_not_started_again() {
    let vm = Vm::new();
    foreground_job(&vm, "fg", "");
    let jobs = names(&["fg"]);
    let supervisor = vm.supervisor(&jobs);
    supervisor.start().await;
    eventually("fg running", || {
        supervisor.statuses()[0].state == ProcessState::Running
    })
    .await;
    // Past its start timeout it still runs, started once: monit does not wait for the
    // program, and the pidfile names a live process.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let status = &supervisor.statuses()[0];
    assert_eq!(status.state, ProcessState::Running, "{status:?}");
    assert_eq!(status.restarts, 0);
    let starts = vm.lines().iter().filter(|l| *l == "fg:start").count();
    assert_eq!(starts, 1, "{:?}", vm.lines());
    let pid = status.pid.unwrap();
    supervisor.stop().await;
    assert!(vm.lines().contains(&"fg:stop".to_string()));
    eventually("the foreground program ended", || !signal::alive(pid)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pidfile_naming_pid_1_counts_as_a_live_process_and_pid_1_is_never_signalled() {
    let vm = Vm::new();
    let pid = vm.sandbox.run_dir().join("init.pid");
    vm.write(
        "init",
        "monit",
        &format!(
            "check process init\n  with pidfile {}\n  start program \"/bin/sh -c 'echo 1 > {}'\"\n  stop program \"/bin/true\"\n  group vcap\n",
            pid.display(),
            pid.display()
        ),
    );
    let jobs = names(&["init"]);
    let supervisor = vm.supervisor(&jobs);
    supervisor.start().await;
    eventually("init running", || {
        supervisor.statuses()[0].state == ProcessState::Running
    })
    .await;
    assert_eq!(supervisor.statuses()[0].pid, Some(1));
    // Stopping kills what the VM started, never init: this test process lives on.
    supervisor.stop().await;
    assert!(signal::alive(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn depends_on_starts_a_process_after_what_it_depends_on_runs_and_stops_it_before() {
    let vm = Vm::new();
    // `web` is declared first and depends on `db`, which takes a moment to come up.
    foreground_job(&vm, "web", "depends on db");
    let pid = vm.sandbox.run_dir().join("db.pid");
    let ctl = vm.sandbox.job("db").join("bin/ctl");
    vm.write(
        "db",
        "bin/ctl",
        &format!(
            "#!/bin/sh\ncase $1 in\nstart) echo db:start >> $REC; sleep 0.5; echo $$ > {pid}; exec sleep 1000;;\nstop) echo db:stop >> $REC; kill $(cat {pid});;\nesac\n",
            pid = pid.display()
        ),
    );
    vm.write(
        "db",
        "monit",
        &format!(
            "check process db\n  with pidfile {}\n  start program \"{ctl} start\"\n  stop program \"{ctl} stop\"\n  group vcap\n",
            pid.display(),
            ctl = ctl.display()
        ),
    );
    let jobs = names(&["web", "db"]);
    let supervisor = vm.supervisor(&jobs);
    supervisor.start().await;
    eventually("both running", || {
        supervisor
            .statuses()
            .iter()
            .all(|s| s.state == ProcessState::Running)
    })
    .await;
    supervisor.stop().await;
    let lines = vm.lines();
    let at = |line: &str| lines.iter().position(|l| l == line).unwrap();
    assert!(at("db:start") < at("web:start"), "{lines:?}");
    assert!(at("web:stop") < at("db:stop"), "{lines:?}");
}

#[test]
fn processes_that_depend_on_each_other_round_a_circle_are_refused() {
    let vm = Vm::new();
    foreground_job(&vm, "a", "depends on b");
    foreground_job(&vm, "b", "depends on a");
    let e = jobs::processes(&vm.sandbox, &names(&["a", "b"])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "job a: monit: processes depend on each other: a -> b -> a"
    );
    let vm = Vm::new();
    foreground_job(&vm, "a", "depends on a");
    assert!(jobs::processes(&vm.sandbox, &names(&["a"])).is_err());
}

#[test]
fn depends_on_a_process_no_job_declares_is_refused() {
    let vm = Vm::new();
    foreground_job(&vm, "web", "depends on nosuch");
    let e = jobs::processes(&vm.sandbox, &names(&["web"])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "job web: monit: process `web` depends on `nosuch`, which no job on this VM declares"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn scripts_run_in_the_vms_root_with_the_agents_path() {
    let vm = Vm::new();
    vm.write(
        "a",
        "bin/pre-start",
        "#!/bin/sh\necho \"$(pwd) $PATH\" >> $REC\n",
    );
    let jobs = names(&["a"]);
    let supervisor = vm.supervisor(&jobs);
    let lifecycle = Lifecycle::new(&vm.sandbox, &jobs, &supervisor);
    lifecycle.start(None).await.unwrap();
    let root = std::fs::canonicalize(vm.sandbox.root()).unwrap();
    assert_eq!(
        vm.lines(),
        [format!(
            "{} {}",
            root.display(),
            super::lifecycle::SCRIPT_PATH
        )]
    );
}
