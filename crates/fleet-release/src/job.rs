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

/// A link a job's spec provides or consumes: its name and type; a consumer may be
/// optional, a provider exports some of its job's properties with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpec {
    pub name: String,
    pub link_type: String,
    pub optional: bool,
    /// A provider's exported properties, by dotted name.
    pub properties: Vec<String>,
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
    pub provides: Vec<LinkSpec>,
    pub consumes: Vec<LinkSpec>,
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
    let root = load(text, Limits::document(Limits::default().max_bytes))
        .map_err(|e| vec![e.to_string()])?;
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
    let provides = links(&mut check, &root, "provides");
    let consumes = links(&mut check, &root, "consumes");
    let problems = check.into_problems();
    match name {
        Some(name) if problems.is_empty() => Ok(JobSpec {
            name,
            templates,
            packages,
            properties,
            provides,
            consumes,
        }),
        _ => Err(problems.iter().map(ToString::to_string).collect()),
    }
}

/// A spec's `provides` or `consumes`: a list of `{name, type}`, names unique; a consumer
/// may be `optional`, a provider may not, and a provider lists the `properties` it
/// exports. The problems are worded as BOSH's director words them.
fn links(check: &mut Checker, root: &Node, key: &str) -> Vec<LinkSpec> {
    let Some(node) = root.get(key).filter(|n| n.value != Value::Null) else {
        return Vec::new();
    };
    let Value::Seq(items) = &node.value else {
        let section = if key == "provides" {
            "Provides"
        } else {
            "Consumes"
        };
        check.report(
            key,
            node.at,
            format!("{section} section in the release spec must be a list of hashes"),
        );
        return Vec::new();
    };
    let mut found: Vec<LinkSpec> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("{key}[{i}]");
        let text = |field: &str| item.get(field).and_then(|v| v.as_str()).map(str::to_string);
        let (Some(name), Some(link_type)) = (text("name"), text("type")) else {
            check.report(
                &path,
                item.at,
                format!(
                    "Each {key} item in the {key} section of the release spec must contain \
                     'name' and 'type'"
                ),
            );
            continue;
        };
        let optional = item.get("optional");
        if key == "provides" && optional.is_some() {
            check.report(
                &path,
                item.at,
                format!(
                    "Link '{name}' of type '{link_type}' is a provides link, not allowed to have \
                     'optional' key"
                ),
            );
        }
        let properties = item
            .get("properties")
            .and_then(|p| match &p.value {
                Value::Seq(names) => Some(
                    names
                        .iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect(),
                ),
                _ => None,
            })
            .unwrap_or_default();
        if found.iter().any(|l| l.name == name) {
            check.report(
                &path,
                item.at,
                format!("specifies duplicate {key} link with name '{name}'"),
            );
            continue;
        }
        found.push(LinkSpec {
            name,
            link_type,
            optional: optional.is_some_and(|o| o.value == Value::Bool(true)),
            properties,
        });
    }
    found
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
