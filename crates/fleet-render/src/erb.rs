//! Job templates rendered with BOSH's semantics through Ruby's ERB, as the director
//! renders them: every job of an instance at once, so that every missing property and
//! failing template of the instance is in one error. Needs `ruby`; the simulated IaaS
//! renders nothing and needs none.

use std::collections::BTreeMap;
use std::process::Stdio;

use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::isolation::Isolation;

const SCRIPT: &str = include_str!("render.rb");

/// What `spec` is in a template.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceSpec {
    /// The address other instances reach it at (its first network's IP).
    pub address: String,
    pub ip: String,
    pub id: String,
    pub index: u32,
    /// The instance group's name.
    pub name: String,
    pub az: Option<String>,
    pub deployment: String,
    /// Each network with its `ip`.
    pub networks: BTreeMap<String, serde_json::Value>,
    pub bootstrap: bool,
}

/// One job's templates with what they are rendered from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobTemplates {
    pub name: String,
    /// The properties the job's spec declares, with their defaults.
    pub declared: BTreeMap<String, Declared>,
    /// The job's properties as the manifest gives them (nested).
    pub properties: serde_json::Value,
    /// What the job consumes through links, by the link's name in its spec: what
    /// `link(NAME)` finds.
    pub links: BTreeMap<String, serde_json::Value>,
    /// The release the job comes from, as `spec.release` (`name`, `version`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseName>,
    /// Template source name to its text.
    pub templates: BTreeMap<String, String>,
}

/// A release by name and version, as a template's `spec.release` gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReleaseName {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Declared {
    pub default: Option<serde_json::Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(
        "rendering job templates needs ruby, which could not be run ({0}); install it \
         (Debian: apt-get install -y ruby)"
    )]
    NoRuby(String),
    /// Every template of the instance that failed, `job/template:line: message`.
    #[error("{}", .0.join("; "))]
    Failed(Vec<String>),
    #[error("the template renderer failed: {0}")]
    Renderer(String),
}

#[derive(serde::Deserialize)]
struct Answer {
    rendered: Option<BTreeMap<String, BTreeMap<String, String>>>,
    errors: Option<Vec<String>>,
}

/// Renders every template of `jobs` for the instance `spec`: job to template source to
/// its text.
///
/// # Errors
/// [`RenderError::Failed`] with every failure, missing properties named; or no Ruby.
pub async fn render(
    spec: &InstanceSpec,
    jobs: &[JobTemplates],
    isolation: Isolation,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, RenderError> {
    let input = serde_json::json!({ "spec": spec, "jobs": jobs }).to_string();
    let mut child = isolation
        .ruby(&["-e", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RenderError::NoRuby(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .await
            .map_err(|e| RenderError::Renderer(e.to_string()))?;
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| RenderError::Renderer(e.to_string()))?;
    if !output.status.success() {
        return Err(RenderError::Renderer(
            String::from_utf8_lossy(&output.stderr).trim().to_string(),
        ));
    }
    let answer: Answer = serde_json::from_slice(&output.stdout)
        .map_err(|e| RenderError::Renderer(format!("unreadable answer: {e}")))?;
    match (answer.rendered, answer.errors) {
        (_, Some(errors)) => Err(RenderError::Failed(errors)),
        (Some(rendered), None) => Ok(rendered),
        (None, None) => Err(RenderError::Renderer("an empty answer".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> InstanceSpec {
        InstanceSpec {
            address: "10.0.0.5".into(),
            ip: "10.0.0.5".into(),
            id: "abc".into(),
            index: 2,
            name: "kv".into(),
            az: Some("z1".into()),
            deployment: "kv-1".into(),
            networks: [("default".to_string(), json!({"ip": "10.0.0.5"}))].into(),
            bootstrap: false,
        }
    }

    fn job(templates: &[(&str, &str)], properties: serde_json::Value) -> JobTemplates {
        JobTemplates {
            name: "kv".into(),
            declared: [
                (
                    "kv.port".to_string(),
                    Declared {
                        default: Some(json!(8080)),
                    },
                ),
                ("kv.password".to_string(), Declared { default: None }),
                (
                    "kv.peers".to_string(),
                    Declared {
                        default: Some(json!([])),
                    },
                ),
            ]
            .into(),
            properties,
            links: BTreeMap::new(),
            release: Some(ReleaseName {
                name: "kv".into(),
                version: "0+dev.3".into(),
            }),
            templates: templates
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[tokio::test]
    async fn templates_see_properties_defaults_and_the_instance() {
        let t = "port=<%= p('kv.port') %> pw=<%= p('kv.password', 'none') %> at=<%= spec.address %>/<%= spec.id %>/<%= spec.index %>/<%= spec.name %>/<%= spec.az %>/<%= spec.deployment %>/<%= spec.networks.default.ip %>/<%= spec.bootstrap %> of <%= spec.release.name %>/<%= spec.release.version %>\n<% if_p('kv.password') do |pw| -%>\nset <%= pw %>\n<% end.else do -%>\nunset\n<% end -%>\n";
        let rendered = render(
            &spec(),
            &[job(
                &[("a.erb", t)],
                json!({"kv": {"port": 9000}, "other": 1}),
            )],
            Isolation::Host,
        )
        .await
        .unwrap();
        assert_eq!(
            rendered["kv"]["a.erb"],
            "port=9000 pw=none at=10.0.0.5/abc/2/kv/z1/kv-1/10.0.0.5/false of kv/0+dev.3\nunset\n"
        );
        let defaults = render(
            &spec(),
            &[job(
                &[("a.erb", "<%= p('kv.port') %> <%= p('other', 'dropped') %>")],
                json!({"other": 1}),
            )],
            Isolation::Host,
        )
        .await
        .unwrap();
        assert_eq!(
            defaults["kv"]["a.erb"], "8080 dropped",
            "undeclared properties are dropped"
        );
    }

    #[tokio::test]
    async fn templates_read_links_with_their_instances_properties_and_address() {
        let db = json!({
            "address": "q-s0.db.default.data.bosh",
            "instances": [
                {"name": "db", "id": "d0", "index": 0, "az": "z1", "address": "10.0.0.7", "bootstrap": true},
                {"name": "db", "id": "d1", "index": 1, "az": "z2", "address": "10.0.0.8", "bootstrap": false}
            ],
            "properties": {"port": 5432, "tls": {"enabled": false}},
            "az_ids": {"z1": 1, "z2": 2},
        });
        let t = "<%= link('db').address(azs: ['z2', 'z1'], status: 'healthy') %> \
<%= link('db').instances.map { |i| \"#{i.address}:#{link('db').p('port')}\" }.join(',') %> \
<%= link('db').instances.first.bootstrap %> <%= link('db').address %> \
<%= link('db').p('tls.enabled') %> <%= link('db').p('missing', 'dflt') %> \
<% link('db').if_p('port') do |port| %>p=<%= port %><% end %> \
<% if_link('cache') do |c| %>cache<% end.else do %>no-cache<% end %> \
<% if_link('db') do |d| %><%= d.instances.size %><% end %>";
        let mut with_links = job(&[("a.erb", t)], json!({}));
        with_links.links = [("db".to_string(), db)].into();
        let rendered = render(&spec(), &[with_links], Isolation::Host)
            .await
            .unwrap();
        assert_eq!(
            rendered["kv"]["a.erb"],
            "q-a1a2s3.db.default.data.bosh 10.0.0.7:5432,10.0.0.8:5432 true q-s0.db.default.data.bosh false dflt p=5432 no-cache 2"
        );
        let missing = render(
            &spec(),
            &[job(&[("a.erb", "<%= link('db').address %>")], json!({}))],
            Isolation::Host,
        )
        .await
        .unwrap_err();
        assert!(
            missing.to_string().contains("Can't find link 'db'"),
            "{missing}"
        );
    }

    #[tokio::test]
    async fn every_missing_property_of_the_instance_is_in_one_error() {
        let e = render(
            &spec(),
            &[job(
                &[
                    ("a.erb", "<%= p('kv.password') %>"),
                    ("b.erb", "\n<%= p('kv.secret') %>"),
                ],
                json!({}),
            )],
            Isolation::Host,
        )
        .await
        .unwrap_err();
        let RenderError::Failed(errors) = e else {
            panic!("a template failure");
        };
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("kv/a.erb:1: Can't find property '[\"kv.password\"]'"),
            "{errors:?}"
        );
        assert!(errors[1].starts_with("kv/b.erb:2: "), "{errors:?}");
    }
}

#[cfg(test)]
mod sandboxed {
    use super::*;
    use serde_json::json;

    /// Whether this machine can make the sandbox: bubblewrap and user namespaces.
    fn sandbox_here() -> bool {
        std::process::Command::new("bwrap")
            .args(["--unshare-user", "--ro-bind", "/", "/", "true"])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    #[tokio::test]
    async fn a_template_in_the_sandbox_renders_alike_and_reaches_no_network_file_or_secret() {
        if !sandbox_here() {
            eprintln!("not run: bubblewrap cannot make a sandbox here");
            return;
        }
        let spec = InstanceSpec {
            address: "10.0.0.5".into(),
            ip: "10.0.0.5".into(),
            id: "abc".into(),
            index: 0,
            name: "kv".into(),
            az: None,
            deployment: "d".into(),
            networks: BTreeMap::new(),
            bootstrap: true,
        };
        let probe = "<%= p('kv.port') %> \
<%= begin; File.read('/etc/hostname'); rescue SystemCallError; 'no-etc'; end %> \
<%= begin; require 'socket'; TCPSocket.new('10.0.0.1', 80); rescue SystemCallError => e; e.class; end %> \
<%= ENV.keys.sort.join(',') %> <%= Process.uid %>";
        let job = JobTemplates {
            name: "kv".into(),
            declared: [(
                "kv.port".to_string(),
                Declared {
                    default: Some(json!(8080)),
                },
            )]
            .into(),
            properties: json!({}),
            links: BTreeMap::new(),
            release: None,
            templates: [("a.erb".to_string(), probe.to_string())].into(),
        };
        let rendered = render(&spec, std::slice::from_ref(&job), Isolation::Sandbox)
            .await
            .unwrap();
        assert_eq!(
            rendered["kv"]["a.erb"],
            "8080 no-etc Errno::ENETUNREACH LANG,PATH,PWD 65534"
        );
    }
}
