//! The processes of the jobs placed on a VM, from each job's `monit` file and, for jobs
//! run by bpm (a start program `.../bpm start JOB [-p PROCESS]`), its `config/bpm.yml`.

use std::path::PathBuf;

use super::bpm::{self, BpmProcess};
use super::monit;
use super::sandbox::Sandbox;
use super::supervisor::{Kind, ProcessDef};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobFilesError {
    #[error("job {job}: cannot read {file}: {message}")]
    Unreadable {
        job: String,
        file: String,
        message: String,
    },
    #[error("job {job}: {file}: {message}")]
    Invalid {
        job: String,
        file: String,
        message: String,
    },
}

/// Every process the placed jobs declare, in job order.
///
/// # Errors
/// A monit file or bpm.yml that cannot be read, or a bpm start naming a process the
/// job's bpm.yml lacks.
pub fn processes(sandbox: &Sandbox, jobs: &[String]) -> Result<Vec<ProcessDef>, JobFilesError> {
    let mut found = Vec::new();
    for job in jobs {
        let dir = sandbox.job(job);
        let read = |file: &str| -> Result<Option<String>, JobFilesError> {
            match std::fs::read_to_string(dir.join(file)) {
                Ok(text) => Ok(Some(text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(JobFilesError::Unreadable {
                    job: job.clone(),
                    file: file.to_string(),
                    message: e.to_string(),
                }),
            }
        };
        let Some(monit_text) = read("monit")? else {
            continue;
        };
        let declared = monit::parse(&monit_text).map_err(|e| JobFilesError::Invalid {
            job: job.clone(),
            file: "monit".into(),
            message: e.to_string(),
        })?;
        let mut bpm_processes: Option<Vec<BpmProcess>> = None;
        for process in declared {
            let kind = match bpm_start(&process.start) {
                Some((bpm_job, name)) => {
                    if bpm_processes.is_none() {
                        let text = read("config/bpm.yml")?.ok_or_else(|| JobFilesError::Invalid {
                            job: job.clone(),
                            file: "monit".into(),
                            message: format!(
                                "process `{}` is started by bpm, but the job has no config/bpm.yml",
                                process.name
                            ),
                        })?;
                        bpm_processes =
                            Some(
                                bpm::parse(&text).map_err(|problems| JobFilesError::Invalid {
                                    job: job.clone(),
                                    file: "config/bpm.yml".into(),
                                    message: problems.join("; "),
                                })?,
                            );
                    }
                    let wanted = name.unwrap_or_else(|| bpm_job.clone());
                    let bpm = bpm_processes
                        .iter()
                        .flatten()
                        .find(|p| p.name == wanted)
                        .cloned()
                        .ok_or_else(|| JobFilesError::Invalid {
                            job: job.clone(),
                            file: "config/bpm.yml".into(),
                            message: format!("has no process `{wanted}`, which monit starts"),
                        })?;
                    Kind::Bpm(bpm)
                }
                None => Kind::Monit {
                    start: process.start.clone(),
                    start_timeout: process.start_timeout,
                    stop: process.stop.clone(),
                    stop_timeout: process.stop_timeout,
                    pidfile: PathBuf::from(&process.pidfile),
                },
            };
            found.push(ProcessDef {
                job: job.clone(),
                name: process.name.clone(),
                kind,
                depends_on: process.depends_on.clone(),
            });
        }
    }
    // monit refuses a configuration whose `depends on` names no process it checks.
    for process in &found {
        if let Some(unknown) = process
            .depends_on
            .iter()
            .find(|d| !found.iter().any(|p| &p.name == *d))
        {
            return Err(JobFilesError::Invalid {
                job: process.job.clone(),
                file: "monit".into(),
                message: format!(
                    "process `{}` depends on `{unknown}`, which no job on this VM declares",
                    process.name
                ),
            });
        }
    }
    // Nor does it take processes that depend on each other round a circle.
    for process in &found {
        let mut path = vec![process.name.as_str()];
        if let Some(circle) = circle_from(&found, &mut path) {
            return Err(JobFilesError::Invalid {
                job: process.job.clone(),
                file: "monit".into(),
                message: format!("processes depend on each other: {}", circle.join(" -> ")),
            });
        }
    }
    Ok(found)
}

/// A `depends on` circle from the last process of `path`, as the names round it.
fn circle_from<'a>(found: &'a [ProcessDef], path: &mut Vec<&'a str>) -> Option<Vec<String>> {
    let last = *path.last()?;
    let process = found.iter().find(|p| p.name == last)?;
    for dependency in &process.depends_on {
        if let Some(at) = path.iter().position(|p| p == dependency) {
            let mut circle: Vec<String> = path[at..].iter().map(|p| p.to_string()).collect();
            circle.push(dependency.clone());
            return Some(circle);
        }
        path.push(dependency.as_str());
        if let Some(circle) = circle_from(found, path) {
            return Some(circle);
        }
        path.pop();
    }
    None
}

/// `/var/vcap/jobs/bpm/bin/bpm start JOB [-p PROCESS]`: the job and process bpm starts.
fn bpm_start(command: &str) -> Option<(String, Option<String>)> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.ends_with("/bpm") || *w == "bpm")?;
    if words.get(at + 1) != Some(&"start") {
        return None;
    }
    let job = words.get(at + 2)?.to_string();
    let process = match words.get(at + 3) {
        Some(&"-p") | Some(&"--process") => words.get(at + 4).map(|p| p.to_string()),
        _ => None,
    };
    Some((job, process))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bpm_start_names_its_job_and_process() {
        assert_eq!(
            bpm_start("/var/vcap/jobs/bpm/bin/bpm start kv"),
            Some(("kv".into(), None))
        );
        assert_eq!(
            bpm_start("/x/jobs/bpm/bin/bpm start kv -p sidecar"),
            Some(("kv".into(), Some("sidecar".into())))
        );
        assert_eq!(bpm_start("/var/vcap/jobs/kv/bin/ctl start"), None);
        assert_eq!(bpm_start("/var/vcap/jobs/bpm/bin/bpm stop kv"), None);
    }

    #[test]
    fn processes_come_from_monit_and_bpm() {
        let dir = tempfile::tempdir().unwrap();
        let vm = Sandbox::create(dir.path()).unwrap();
        let write = |path: &str, text: &str| {
            let p = vm.jobs().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(
            "kv/monit",
            "check process kv\n with pidfile /p/kv.pid\n start program \"/x/bpm start kv\"\n stop program \"/x/bpm stop kv\"\n",
        );
        write(
            "kv/config/bpm.yml",
            "processes:\n- name: kv\n  executable: /bin/sleep\n  args: [100]\n",
        );
        write(
            "web/monit",
            "check process web\n with pidfile /p/web.pid\n start program \"/web/ctl start\"\n",
        );
        let found = processes(&vm, &["kv".into(), "web".into(), "none".into()]).unwrap();
        assert_eq!(found.len(), 2);
        assert!(matches!(&found[0].kind, Kind::Bpm(b) if b.executable == "/bin/sleep"));
        assert!(matches!(&found[1].kind, Kind::Monit { start, .. } if start == "/web/ctl start"));

        write(
            "kv/config/bpm.yml",
            "processes:\n- name: other\n  executable: /bin/true\n",
        );
        let e = processes(&vm, &["kv".into()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "job kv: config/bpm.yml: has no process `kv`, which monit starts"
        );
    }
}
