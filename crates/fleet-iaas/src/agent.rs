//! The agent on each VM of the process-backed IaaS, as the director talks to it: the
//! spec applied (rendered files placed, compiled packages unpacked), the job lifecycle
//! of seed 003 run on `start`, `drain`, `stop` and `run_script` (`post-start`,
//! `post-deploy`), the processes' states reported, packages compiled on compilation VMs,
//! and persistent disks mounted and migrated.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use fleet_director::agent::{
    Agent, AgentError, AgentState, CompiledDependency, Drain, ErrandOutput, JobState, Process,
    SshRequest, SshSession, Vitals,
};
use fleet_director::logs::{LogRequest, LogType};
use fleet_director::model::InstanceSpec;
use fleet_director::trace::{self, Channel};

use super::cloud::{ProcessCloud, Supervision};
use super::instance_spec;
use super::stored;
use crate::blocking::on_iaas;
use fleet_vm::compile::{self, CompileRequest};
use fleet_vm::jobs;
use fleet_vm::lifecycle::Lifecycle;
use fleet_vm::logs;
use fleet_vm::place;
use fleet_vm::script::ScriptRun;
use fleet_vm::supervisor::{ProcessState, Processes, Supervisor};

impl ProcessCloud {
    fn failed(agent_id: &str, method: &str, message: impl std::fmt::Display) -> AgentError {
        AgentError::Failed {
            agent_id: agent_id.to_string(),
            method: method.to_string(),
            message: message.to_string(),
        }
    }
}

impl ProcessCloud {
    /// A container VM's vitals, as BOSH's agent reports them; none for a VM that is no
    /// container (it has no measure of its own).
    fn vitals(&self, vm: &super::cloud::Vm) -> Option<Vitals> {
        use fleet_vm::container::vitals;
        let container = self.iaas.containers().running(&vm.cid)?;
        // A container of a user namespace has no control groups to measure it by.
        if container.groups.dirs.is_empty() {
            return None;
        }
        let usage = container.groups.usage();
        let store = vm.sandbox.mounted();
        // Its own disk where it has one, else the file system its directory is on.
        let ephemeral = self
            .iaas
            .containers()
            .ephemeral(&vm.cid)
            .unwrap_or_else(|| vm.sandbox.root().to_path_buf());
        let mut disks = vec![
            ("system", std::path::Path::new("/")),
            ("ephemeral", ephemeral.as_path()),
        ];
        if let Some(store) = &store {
            disks.push(("persistent", store));
        }
        let mut last = vm.cpu.lock().unwrap_or_else(|p| p.into_inner());
        let (v, reading) =
            vitals::vitals(&usage, *last, vitals::uptime_of(container.started), &disks);
        *last = Some(reading);
        Some(Vitals {
            load: v.load.map(|l| format!("{l:.2}")),
            cpu_sys: format!("{:.1}", v.cpu_sys),
            cpu_user: format!("{:.1}", v.cpu_user),
            cpu_wait: "0.0".into(),
            mem_kb: v.mem_kb.to_string(),
            mem_percent: format!("{:.0}", v.mem_percent),
            swap_kb: "0".into(),
            swap_percent: "0".into(),
            uptime_secs: Some(v.uptime_secs),
            disks: v
                .disks
                .into_iter()
                .map(|(name, blocks, inodes)| (name, blocks.to_string(), inodes.to_string()))
                .collect(),
        })
    }
}

/// Puts every script run of a lifecycle step in the task's debug log, a failed step's
/// too: which script, how it ended, the tail of its output.
fn log_runs(agent_id: &str, runs: &[ScriptRun]) {
    for run in runs {
        trace::note(Channel::Debug, || {
            let tail = if run.tail.is_empty() {
                String::new()
            } else {
                format!(", output ends: {}", run.tail.replace('\n', " | "))
            };
            format!("agent {agent_id}: {}{tail}", run.describe())
        });
    }
}

#[async_trait]
impl Agent for ProcessCloud {
    async fn get_state(&self, agent_id: &str) -> Result<AgentState, AgentError> {
        let vm = self.agent(agent_id, "get_state").await?;
        let running = vm.running.lock().await;
        let mut statuses = match &running.supervisor {
            Some(s) => s
                .statuses()
                .await
                .map_err(|e| Self::failed(agent_id, "get_state", e))?,
            None => Vec::new(),
        };
        // The VM's supervisor died (killed, or out of memory) while its jobs were to
        // run: its processes are reported failing, and it is started again, bringing
        // them back without lifecycle scripts, as runit brings back a VM's monit.
        if running.started
            && running.supervisor.is_some()
            && statuses.is_empty()
            && let Some(daemon) = self.supervision.daemon(&vm.sandbox)
            && !daemon.running().await
        {
            let expected = jobs::processes(&vm.sandbox, &running.jobs).unwrap_or_default();
            if !expected.is_empty() {
                tracing::warn!(agent = %agent_id, "the VM's supervisor is not running: starting it again");
                statuses = expected
                    .into_iter()
                    .map(|p| fleet_vm::supervisor::ProcessStatus {
                        job: p.job,
                        name: p.name,
                        state: ProcessState::Failing,
                        pid: None,
                        restarts: 0,
                        uptime: None,
                    })
                    .collect();
                // Under the VM's lock: no other call starts a second supervisor meanwhile.
                if let Err(e) = daemon.boot(&running.jobs).await {
                    tracing::warn!(agent = %agent_id, error = %e, "the VM's supervisor did not start again");
                }
            }
        }
        let job_state = if !running.started {
            JobState::Stopped
        } else if statuses.iter().all(|s| s.state == ProcessState::Running) {
            JobState::Running
        } else if statuses.iter().any(|s| s.state == ProcessState::Failing) {
            JobState::Failing
        } else {
            JobState::Starting
        };
        let failing_jobs: BTreeSet<String> = statuses
            .iter()
            .filter(|s| s.state != ProcessState::Running)
            .map(|s| s.job.clone())
            .collect();
        let cid = vm.cid.clone();
        let networks = on_iaas(&self.iaas, move |iaas| iaas.vm(&cid))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|record| record.addresses())
            .unwrap_or_default();
        Ok(AgentState {
            job_state,
            applied: running.applied.clone(),
            failing_jobs: failing_jobs.into_iter().collect(),
            networks,
            processes: statuses
                .iter()
                .map(|s| Process {
                    name: s.name.clone(),
                    state: s.state.as_str().to_string(),
                    uptime_secs: s.uptime.map(|u| u.as_secs()),
                    mem_kb: None,
                    mem_percent: None,
                    cpu_total: None,
                })
                .collect(),
            vitals: self.vitals(&vm),
        })
    }

    async fn prepare(&self, agent_id: &str, _spec: &InstanceSpec) -> Result<(), AgentError> {
        self.agent(agent_id, "prepare").await.map(|_| ())
    }

    /// `pre-stop` and `drain` of every job (the drain protocol followed to its end); the
    /// director's drain wait is then zero.
    async fn drain(&self, agent_id: &str, drain: Drain<'_>) -> Result<i64, AgentError> {
        let vm = self.agent(agent_id, "drain").await?;
        // Dynamic drains are followed to their end here, as a current BOSH agent does.
        if drain == Drain::Status {
            return Ok(0);
        }
        let running = vm.running.lock().await;
        let (Some(supervisor), true) = (&running.supervisor, running.started) else {
            return Ok(0);
        };
        let context = instance_spec::stop_context(
            &self.store,
            running.applied.as_ref(),
            &running.jobs,
            drain,
        )
        .await;
        let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &**supervisor);
        let outcome = lifecycle.drain(&context).await;
        log_runs(agent_id, &lifecycle.runs());
        outcome
            .map(|_| 0)
            .map_err(|e| Self::failed(agent_id, "drain", e))
    }

    async fn stop(&self, agent_id: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "stop").await?;
        let mut running = vm.running.lock().await;
        let Some(supervisor) = running.supervisor.clone() else {
            return Ok(());
        };
        let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &*supervisor);
        let halted = lifecycle.halt().await;
        log_runs(agent_id, &lifecycle.runs());
        running.started = false;
        vm.remember(|f| f.started = false)
            .await
            .map_err(|e| Self::failed(agent_id, "stop", e))?;
        halted
            .map(|_| ())
            .map_err(|e| Self::failed(agent_id, "stop", e))
    }

    async fn apply(&self, agent_id: &str, spec: &InstanceSpec) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "apply").await?;
        let failed = |e: String| Self::failed(agent_id, "apply", e);
        let (rendered, packages) = instance_spec::placement(&self.store, spec)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let mut running = vm.running.lock().await;
        // What ran before is stopped before its files are replaced.
        if let Some(old) = running.supervisor.take() {
            old.stop().await.map_err(|e| failed(e.to_string()))?;
        }
        place::place(&vm.sandbox, &rendered, packages)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let names = spec.jobs.clone();
        let supervisor: Arc<dyn Processes> = match &self.supervision {
            Supervision::InProcess => {
                let processes =
                    jobs::processes(&vm.sandbox, &names).map_err(|e| failed(e.to_string()))?;
                Arc::new(Supervisor::new(vm.sandbox.clone(), processes, self.timings))
            }
            Supervision::Daemons { .. } | Supervision::Containers { .. } => {
                let d = self
                    .supervision
                    .daemon(&vm.sandbox)
                    .expect("a supervisor process supervises");
                d.load(&names).await.map_err(|e| failed(e.to_string()))?;
                Arc::new(d)
            }
        };
        running.supervisor = Some(supervisor);
        running.jobs = names.clone();
        running.applied = Some(spec.clone());
        running.started = false;
        vm.remember(|f| {
            f.applied = Some(spec.clone());
            f.jobs = names;
            f.started = false;
        })
        .await
        .map_err(|e| failed(e.to_string()))
    }

    async fn start(&self, agent_id: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "start").await?;
        let mut running = vm.running.lock().await;
        let Some(supervisor) = running.supervisor.clone() else {
            return Err(Self::failed(agent_id, "start", "nothing was applied"));
        };
        let disk = self.mounted_disk(&vm).await;
        let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &*supervisor);
        let started = lifecycle.start(disk.as_deref()).await;
        log_runs(agent_id, &lifecycle.runs());
        running.started = started.is_ok();
        let ok = started.is_ok();
        vm.remember(|f| f.started = ok)
            .await
            .map_err(|e| Self::failed(agent_id, "start", e))?;
        started
            .map(|_| ())
            .map_err(|e| Self::failed(agent_id, "start", e))
    }

    /// Mounts the disk at `store/`, or, with another there, at the migration target; the
    /// one at `store/` is what the jobs' next start mounts again.
    async fn mount_disk(&self, agent_id: &str, disk_cid: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "mount_disk").await?;
        let failed = |e: std::io::Error| Self::failed(agent_id, "mount_disk", e);
        let disk = self.disk_dir(disk_cid);
        vm.sandbox.mount(&disk).map_err(failed)?;
        if vm.sandbox.mounted().is_some_and(|at| at == disk) {
            vm.remember(|f| f.disk = Some(disk_cid.to_string()))
                .await
                .map_err(failed)?;
        }
        Ok(())
    }

    async fn unmount_disk(&self, agent_id: &str, disk_cid: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "unmount_disk").await?;
        let failed = |e: std::io::Error| Self::failed(agent_id, "unmount_disk", e);
        vm.sandbox
            .unmount_disk(&self.disk_dir(disk_cid))
            .map_err(failed)?;
        vm.remember(|f| {
            if f.disk.as_deref() == Some(disk_cid) {
                f.disk = None;
            }
        })
        .await
        .map_err(failed)
    }

    async fn compile_package(
        &self,
        agent_id: &str,
        package: &str,
        dependencies: &[CompiledDependency],
    ) -> Result<String, AgentError> {
        let vm = self.agent(agent_id, "compile_package").await?;
        let failed = |e: String| Self::failed(agent_id, "compile_package", e);
        let mut parts = package.splitn(3, '/');
        let (Some(release), Some(version), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(failed(format!(
                "`{package}` is not release/version/package"
            )));
        };
        let record = stored::release(&self.store, release, version)
            .await
            .map_err(|e| failed(e.to_string()))?
            .ok_or_else(|| failed(format!("release {release}/{version} is not uploaded")))?;
        let archived = record
            .packages
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.archive.clone())
            .ok_or_else(|| failed(format!("package {package} has no archive")))?;
        let source = stored::blob(&self.store, &archived.blob)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let mut compiled_dependencies = Vec::new();
        for dep in dependencies {
            let blob = stored::compiled_blob(&self.store, &dep.key)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let bytes = stored::blob(&self.store, &blob)
                .await
                .map_err(|e| failed(e.to_string()))?;
            compiled_dependencies.push((dep.name.clone(), bytes));
        }
        let outcome = compile::compile(
            &vm.sandbox,
            CompileRequest {
                name,
                version: &archived.version,
                source: &source,
                dependencies: compiled_dependencies,
                env: Vec::new(),
            },
        )
        .await;
        let run = match &outcome {
            Ok((_, run)) => Some(run),
            Err(compile::CompileError::Packaging { run }) => Some(&**run),
            Err(_) => None,
        };
        if let Some(run) = run {
            log_runs(agent_id, std::slice::from_ref(run));
        }
        let (compiled, _) = outcome.map_err(|e| failed(e.to_string()))?;
        let blob = fleet_release::sha1_hex(&compiled);
        self.store
            .put_blob(&blob, compiled)
            .await
            .map_err(|e| failed(e.to_string()))?;
        Ok(blob)
    }

    /// Copies the data of the disk at `store/` to the one at the migration target, which
    /// then takes its place at `store/`, as BOSH's agent migrates.
    async fn migrate_disk(&self, agent_id: &str, from: &str, to: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "migrate_disk").await?;
        let failed = |e: std::io::Error| Self::failed(agent_id, "migrate_disk", e);
        let (iaas, from_cid, to_cid) = (self.iaas.clone(), from.to_string(), to.to_string());
        tokio::task::spawn_blocking(move || {
            fleet_vm::beneath::copy_between(&iaas.disk_root(&from_cid)?, &iaas.disk_root(&to_cid)?)
        })
        .await
        .map_err(|e| failed(std::io::Error::other(e)))?
        .map_err(failed)?;
        if std::fs::read_link(vm.sandbox.migration_target()).is_ok() {
            vm.sandbox.finish_migration().map_err(failed)?;
        }
        vm.remember(|f| f.disk = Some(to.to_string()))
            .await
            .map_err(failed)
    }

    async fn run_script(&self, agent_id: &str, name: &str) -> Result<(), AgentError> {
        let vm = self.agent(agent_id, "run_script").await?;
        let running = vm.running.lock().await;
        let (Some(supervisor), true) = (&running.supervisor, running.started) else {
            return Ok(());
        };
        let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &**supervisor);
        let outcome = lifecycle.run_hooks(name, &[]).await;
        log_runs(agent_id, &lifecycle.runs());
        outcome
            .map(|_| ())
            .map_err(|e| Self::failed(agent_id, "run_script", e))
    }

    /// The job's `bin/run` in the VM, whether or not its jobs were started: an errand
    /// group's jobs have no processes to start.
    async fn run_errand(&self, agent_id: &str, job: &str) -> Result<ErrandOutput, AgentError> {
        let vm = self.agent(agent_id, "run_errand").await?;
        let running = vm.running.lock().await;
        if !running.jobs.iter().any(|j| j == job) {
            return Err(Self::failed(
                agent_id,
                "run_errand",
                format!("no job `{job}` is applied on this VM"),
            ));
        }
        let Some(supervisor) = &running.supervisor else {
            return Err(Self::failed(agent_id, "run_errand", "nothing was applied"));
        };
        let lifecycle = Lifecycle::new(&vm.sandbox, &running.jobs, &**supervisor);
        let outcome = lifecycle.errand(job).await;
        log_runs(agent_id, &lifecycle.runs());
        let run = outcome.map_err(|e| Self::failed(agent_id, "run_errand", e))?;
        Ok(ErrandOutput {
            exit_code: run.exit_code(),
            stdout: run.stdout,
            stderr: run.stderr,
        })
    }

    /// A session's user on a container VM, and its SSH server (`bosh ssh`), as BOSH's
    /// agent's `ssh` action; a VM that is a directory of this machine has no server.
    async fn ssh(&self, agent_id: &str, request: &SshRequest) -> Result<SshSession, AgentError> {
        use fleet_vm::container::ssh;
        let vm = self.agent(agent_id, "ssh").await?;
        let failed = |e: String| Self::failed(agent_id, "ssh", e);
        let enter = vm
            .sandbox
            .enter()
            .map_err(|e| failed(e.to_string()))?
            .ok_or_else(|| {
                failed(
                    "this VM is a directory of this machine, not a container: it runs no SSH \
                     server (`vms: containers` makes VMs that do)"
                        .into(),
                )
            })?;
        let containers = self.iaas.containers();
        if containers
            .running(&vm.cid)
            .is_some_and(|r| r.privilege == fleet_vm::container::Privilege::UserNamespace)
        {
            return Err(failed(
                "this VM's container is in a user namespace of a serve that is not root: its \
                 SSH server could not switch to the session's user"
                    .into(),
            ));
        }
        let etc = containers.system_dir(&vm.cid).join("etc");
        match request {
            SshRequest::Setup { user, public_key } => {
                let key = ssh::setup(&enter, &etc, user, public_key)
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                let ip = containers.running(&vm.cid).and_then(|record| {
                    record
                        .nics
                        .iter()
                        .find(|n| n.default_route)
                        .or(record.nics.first())
                        .map(|n| n.address.to_string())
                });
                if ip.is_none() {
                    return Err(failed("No default ip could be found".into()));
                }
                Ok(SshSession {
                    ip,
                    host_public_key: Some(key),
                })
            }
            SshRequest::Cleanup { user_regex } => {
                ssh::cleanup(&enter, &etc, user_regex)
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                Ok(SshSession {
                    ip: None,
                    host_public_key: None,
                })
            }
        }
    }

    async fn fetch_logs(
        &self,
        agent_id: &str,
        request: &LogRequest,
    ) -> Result<Vec<u8>, AgentError> {
        let vm = self.agent(agent_id, "fetch_logs").await?;
        let root = vm.sandbox.root().to_path_buf();
        let wanted = job_logs(request).map_err(|e| Self::failed(agent_id, "fetch_logs", e))?;
        tokio::task::spawn_blocking(move || logs::pack(&root, &wanted))
            .await
            .map_err(|e| Self::failed(agent_id, "fetch_logs", e))?
            .map_err(|e| Self::failed(agent_id, "fetch_logs", e))
    }
}

/// Which job logs `request` takes: a process VM has no agent or system log of its own
/// (the agent's lines go to the task's debug log), so only job logs count.
fn job_logs(
    request: &LogRequest,
) -> Result<impl Fn(&str) -> bool + Send + 'static, fleet_director::logs::LogRequestError> {
    let jobs = request.types.contains(&LogType::Job);
    let filter = request.filter()?;
    Ok(move |path: &str| jobs && filter.wants(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_takes_job_logs_its_filters_choose_and_nothing_without_the_job_type() {
        let all = job_logs(&LogRequest::default()).unwrap();
        assert!(all("pg/pg.stdout.log"));
        let chosen = job_logs(&LogRequest::parse(None, Some("pg/*.log")).unwrap()).unwrap();
        assert!(chosen("pg/pg.stdout.log"));
        assert!(!chosen("pg/sub/audit.txt"));
        assert!(!chosen("bpm/bpm.log"));
        let agent_only = job_logs(&LogRequest::parse(Some("agent,system"), None).unwrap()).unwrap();
        assert!(!agent_only("pg/pg.stdout.log"));
    }
}
