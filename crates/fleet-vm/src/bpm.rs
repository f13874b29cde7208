//! A job's `config/bpm.yml`: the processes bpm runs for it, each an executable with its
//! arguments, environment, working directory and pre-start hook. Isolation keys
//! (`limits`, `additional_volumes`, `unsafe`, ...) are accepted and not applied: a VM
//! here is a directory, not a container. Pure: text in, processes or the key at fault out.

use std::collections::BTreeMap;

use fleet_yaml::{Checker, Limits, Node, Value, join, load};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpmProcess {
    pub name: String,
    pub executable: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    /// Run by bpm before it starts the process, at most [`crate::PRE_START_LIMIT`].
    pub pre_start: Option<String>,
    /// `TERM` (the default) or `INT`: what bpm sends first to stop it.
    pub shutdown_signal: ShutdownSignal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownSignal {
    Term,
    Int,
}

const PROCESS_KEYS: &[&str] = &[
    "name",
    "executable",
    "args",
    "env",
    "workdir",
    "hooks",
    "shutdown_signal",
    "limits",
    "additional_volumes",
    "ephemeral_disk",
    "persistent_disk",
    "capabilities",
    "unsafe",
];

/// Reads a bpm configuration.
///
/// # Errors
/// Every problem, each naming its key and line.
pub fn parse(text: &str) -> Result<Vec<BpmProcess>, Vec<String>> {
    let root = load(text, Limits::default()).map_err(|e| vec![e.to_string()])?;
    let mut check = Checker::new();
    let mut processes = Vec::new();
    for (key, value) in check.map(&root, "", &["processes"]) {
        if key.name != "processes" {
            continue;
        }
        for (i, item) in check.list(value, "processes").iter().enumerate() {
            if let Some(p) = process(&mut check, item, &format!("processes[{i}]")) {
                processes.push(p);
            }
        }
    }
    let problems = check.into_problems();
    if problems.is_empty() {
        Ok(processes)
    } else {
        Err(problems.iter().map(ToString::to_string).collect())
    }
}

fn process(check: &mut Checker, node: &Node, path: &str) -> Option<BpmProcess> {
    let mut name = None;
    let mut executable = None;
    let mut args = Vec::new();
    let mut env = BTreeMap::new();
    let mut workdir = None;
    let mut pre_start = None;
    let mut shutdown_signal = ShutdownSignal::Term;
    for (key, value) in check.map(node, path, PROCESS_KEYS) {
        let p = join(path, &key.name);
        match key.name.as_str() {
            "name" => name = check.string(value, &p),
            "executable" => executable = check.string(value, &p),
            "workdir" => workdir = check.string(value, &p),
            "args" => {
                for (j, arg) in check.list(value, &p).iter().enumerate() {
                    if let Some(a) = scalar(check, arg, &format!("{p}[{j}]")) {
                        args.push(a);
                    }
                }
            }
            "env" => {
                if let Value::Map(entries) = &value.value {
                    for (k, v) in entries {
                        if let Some(text) = scalar(check, v, &join(&p, &k.name)) {
                            env.insert(k.name.clone(), text);
                        }
                    }
                } else {
                    check.map(value, &p, &[]);
                }
            }
            "hooks" => {
                for (k, v) in check.map(value, &p, &["pre_start"]) {
                    pre_start = check.string(v, &join(&p, &k.name));
                }
            }
            "shutdown_signal" => {
                shutdown_signal = match check.choice(value, &p, &["TERM", "INT"]) {
                    Some("INT") => ShutdownSignal::Int,
                    _ => ShutdownSignal::Term,
                }
            }
            _ => {}
        }
    }
    if name.is_none() {
        check.report(&join(path, "name"), node.at, "is missing");
    }
    if executable.is_none() {
        check.report(&join(path, "executable"), node.at, "is missing");
    }
    Some(BpmProcess {
        name: name?,
        executable: executable?,
        args,
        env,
        workdir,
        pre_start,
        shutdown_signal,
    })
}

/// Arguments and environment values are often numbers written without quotes.
fn scalar(check: &mut Checker, node: &Node, path: &str) -> Option<String> {
    match &node.value {
        Value::Str(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => check.string(node, path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_read_with_their_settings() {
        let text = "processes:\n- name: kv\n  executable: /var/vcap/packages/kv/bin/kv\n  args: [--port, 8080]\n  env: {KV_DATA: /var/vcap/store/kv, DEBUG: true}\n  hooks: {pre_start: /var/vcap/jobs/kv/bin/bpm-pre-start}\n  limits: {memory: 1G}\n- name: sidecar\n  executable: /bin/sleep\n  shutdown_signal: INT\n";
        let processes = parse(text).unwrap();
        let kv = &processes[0];
        assert_eq!(kv.args, ["--port", "8080"]);
        assert_eq!(kv.env["DEBUG"], "true");
        assert_eq!(
            kv.pre_start.as_deref(),
            Some("/var/vcap/jobs/kv/bin/bpm-pre-start")
        );
        assert_eq!(kv.shutdown_signal, ShutdownSignal::Term);
        assert_eq!(processes[1].shutdown_signal, ShutdownSignal::Int);
    }

    #[test]
    fn problems_name_their_keys() {
        let problems =
            parse("processes:\n- name: a\n  execuable: /bin/a\n  shutdown_signal: KILL\n")
                .unwrap_err()
                .join("\n");
        assert!(
            problems.contains("processes[0].execuable: unknown key; did you mean `executable`?"),
            "{problems}"
        );
        assert!(
            problems.contains("processes[0].executable: is missing"),
            "{problems}"
        );
        assert!(
            problems.contains("processes[0].shutdown_signal"),
            "{problems}"
        );
    }
}
