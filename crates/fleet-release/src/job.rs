//! A job's archive: its spec (`job.MF`, or `spec` as a release's source tree names it),
//! its `monit` file and the templates the spec renders onto the VM.

use std::collections::BTreeMap;

use fleet_yaml::{Checker, Limits, Node, Value, join, load};

use super::tgz;

/// A job archive holds templates and scripts, never data: a larger one is refused.
pub const MAX_JOB_BYTES: u64 = 64 * 1024 * 1024;

/// A property a job's templates may read, with the default the spec gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropertySpec {
    pub default: Option<serde_json::Value>,
    pub description: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    pub name: String,
    /// Template source (under `templates/`) to where it is rendered, relative to the
    /// job's directory on the VM (`bin/ctl`, `config/app.yml`).
    pub templates: BTreeMap<String, String>,
    pub packages: Vec<String>,
    /// By dotted name (`kv.port`).
    pub properties: BTreeMap<String, PropertySpec>,
}

/// What a job archive holds, read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFiles {
    pub spec: JobSpec,
    /// The monit control file; empty for a job without processes (an errand).
    pub monit: String,
    /// Each template's source text, by its name in the spec.
    pub templates: BTreeMap<String, Vec<u8>>,
}

/// Reads a job archive.
///
/// # Errors
/// Every problem found: a missing spec or monit file, a template the spec names that the
/// archive lacks, keys of the wrong type, a destination that leaves the job's directory.
pub fn read(bytes: &[u8]) -> Result<JobFiles, Vec<String>> {
    let files = tgz::files(bytes, MAX_JOB_BYTES).map_err(|e| vec![e.to_string()])?;
    let find = |name: &str| files.iter().find(|f| f.path == name);
    let (spec_name, spec_file) = match find("job.MF").or_else(|| find("spec")) {
        Some(f) => (f.path.clone(), f),
        None => return Err(vec!["has no `job.MF` (or `spec`) file".to_string()]),
    };
    let spec_text = String::from_utf8(spec_file.bytes.clone())
        .map_err(|_| vec![format!("`{spec_name}` is not UTF-8 text")])?;
    let spec = parse_spec(&spec_text).map_err(|problems| {
        problems
            .into_iter()
            .map(|p| format!("`{spec_name}`: {p}"))
            .collect::<Vec<_>>()
    })?;
    let monit = match find("monit") {
        Some(f) => String::from_utf8(f.bytes.clone())
            .map_err(|_| vec!["`monit` is not UTF-8 text".to_string()])?,
        None => return Err(vec!["has no `monit` file".to_string()]),
    };
    let mut templates = BTreeMap::new();
    let mut missing = Vec::new();
    for source in spec.templates.keys() {
        match find(&format!("templates/{source}")) {
            Some(f) => {
                templates.insert(source.clone(), f.bytes.clone());
            }
            None => missing.push(format!(
                "`{spec_name}`: templates.{source}: the archive has no `templates/{source}`"
            )),
        }
    }
    if !missing.is_empty() {
        return Err(missing);
    }
    Ok(JobFiles {
        spec,
        monit,
        templates,
    })
}

/// Reads a job spec.
///
/// # Errors
/// Every problem, by key and line.
pub fn parse_spec(text: &str) -> Result<JobSpec, Vec<String>> {
    let root = load(text, Limits::default()).map_err(|e| vec![e.to_string()])?;
    let mut check = Checker::new();
    let name = match root.get("name") {
        Some(n) => check.string(n, "name"),
        None => {
            check.report("name", root.at, "is missing");
            None
        }
    };
    let mut templates = BTreeMap::new();
    if let Some(node) = root.get("templates") {
        for (key, value) in check.map_any(node, "templates") {
            let path = join("templates", &key.name);
            if let Some(dest) = check.string(value, &path) {
                if leaves_job_dir(&dest) || leaves_job_dir(&key.name) {
                    check.report(&path, value.at, "must stay inside the job's directory");
                } else {
                    templates.insert(key.name.clone(), dest);
                }
            }
        }
    }
    let mut packages = Vec::new();
    if let Some(node) = root.get("packages").filter(|n| n.value != Value::Null) {
        for (i, item) in check.list(node, "packages").iter().enumerate() {
            if let Some(p) = check.string(item, &format!("packages[{i}]")) {
                packages.push(p);
            }
        }
    }
    let mut properties = BTreeMap::new();
    if let Some(node) = root.get("properties") {
        for (key, value) in check.map_any(node, "properties") {
            properties.insert(key.name.clone(), property(&mut check, value, &key.name));
        }
    }
    let problems = check.into_problems();
    match name {
        Some(name) if problems.is_empty() => Ok(JobSpec {
            name,
            templates,
            packages,
            properties,
        }),
        _ => Err(problems.iter().map(ToString::to_string).collect()),
    }
}

fn property(check: &mut Checker, node: &Node, name: &str) -> PropertySpec {
    let path = join("properties", name);
    if node.value == Value::Null {
        return PropertySpec {
            default: None,
            description: None,
        };
    }
    if node.as_map().is_none() {
        check.report(
            &path,
            node.at,
            "must be a mapping (description, default, ...)",
        );
    }
    PropertySpec {
        default: node
            .get("default")
            .map(Node::to_json)
            .filter(|v| !v.is_null()),
        description: node
            .get("description")
            .and_then(|d| d.as_str())
            .map(str::to_string),
    }
}

fn leaves_job_dir(path: &str) -> bool {
    path.starts_with('/') || path.split('/').any(|p| p == "..") || path.trim().is_empty()
}

/// Every entry of a mapping, whatever its keys: specs name templates and properties
/// freely.
trait MapAny {
    fn map_any<'n>(&mut self, node: &'n Node, path: &str) -> Vec<&'n (fleet_yaml::Key, Node)>;
}

impl MapAny for Checker {
    fn map_any<'n>(&mut self, node: &'n Node, path: &str) -> Vec<&'n (fleet_yaml::Key, Node)> {
        match &node.value {
            Value::Map(entries) => entries.iter().collect(),
            Value::Null => Vec::new(),
            other => {
                self.report(
                    path,
                    node.at,
                    format!("must be a mapping, found {}", other.kind()),
                );
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "name: kv\ntemplates:\n  ctl.erb: bin/ctl\n  app.yml.erb: config/app.yml\npackages: [kv-server]\nproperties:\n  kv.port:\n    description: where it listens\n    default: 8080\n  kv.password:\n    description: required\n";

    #[test]
    fn a_job_archive_is_read_whole() {
        let tgz = tgz::build(&[
            ("./job.MF", SPEC.as_bytes()),
            ("./monit", b"check process kv\n"),
            ("./templates/ctl.erb", b"#!/bin/bash\n"),
            ("./templates/app.yml.erb", b"port: <%= p('kv.port') %>\n"),
        ]);
        let job = read(&tgz).unwrap();
        assert_eq!(job.spec.name, "kv");
        assert_eq!(job.spec.templates["ctl.erb"], "bin/ctl");
        assert_eq!(job.spec.packages, ["kv-server"]);
        assert_eq!(
            job.spec.properties["kv.port"].default,
            Some(serde_json::json!(8080))
        );
        assert_eq!(job.spec.properties["kv.password"].default, None);
        assert_eq!(job.monit, "check process kv\n");
        assert_eq!(job.templates["app.yml.erb"], b"port: <%= p('kv.port') %>\n");
    }

    #[test]
    fn missing_files_are_named() {
        let no_template = tgz::build(&[("job.MF", SPEC.as_bytes()), ("monit", b"")]);
        let problems = read(&no_template).unwrap_err().join("\n");
        assert!(problems.contains("`templates/ctl.erb`"), "{problems}");
        let no_monit = tgz::build(&[("job.MF", SPEC.as_bytes())]);
        assert_eq!(read(&no_monit).unwrap_err(), ["has no `monit` file"]);
        let no_spec = tgz::build(&[("monit", b"")]);
        assert!(read(&no_spec).unwrap_err()[0].contains("job.MF"));
    }

    #[test]
    fn a_template_may_not_leave_the_job() {
        let problems = parse_spec("name: a\ntemplates:\n  x.erb: ../../etc/passwd\n")
            .unwrap_err()
            .join("\n");
        assert!(problems.contains("templates.x.erb"), "{problems}");
        assert!(
            problems.contains("inside the job's directory"),
            "{problems}"
        );
    }
}
