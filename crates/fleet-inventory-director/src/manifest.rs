//! Moves a deployment manifest to the newest uploaded releases and stemcells.
//!
//! The manifest is loaded with our YAML loader to find the `version` of every
//! `releases` and `stemcells` entry, but only those scalars are replaced in the original
//! text. Re-serialising the whole tree (as JSON, which is valid YAML) would be simpler and
//! wrong: the director reads manifests as YAML 1.1, where `yes`, `on` and `0777` mean
//! `true`, `true` and 511, while our YAML 1.2 loader reads them as two strings and 777;
//! a property written that way would silently change meaning. Comments and layout
//! survive too, so `bosh manifest` still shows what the operator wrote.
//!
//! Every rewrite is checked: the new text is loaded again and must equal the old tree
//! with exactly the intended versions changed. Anything the in-place edit cannot handle
//! (escapes, multi-line scalars, an anchor shared with other values) fails that check or
//! is refused up front, and the deployment is reported instead of being deployed with a
//! manifest nobody wrote.

use std::collections::BTreeMap;
use std::ops::Range;

use serde_json::Value as Json;

use super::versions::Uploaded;
use fleet_yaml::{self as yaml, Limits, LoadError, Node, Position, Value};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManifestError {
    #[error("the manifest cannot be read: {0}")]
    Load(#[from] LoadError),
    #[error(
        "the version at line {} cannot be replaced in place: it is not a plain or simply \
         quoted scalar on one line",
        .0.line
    )]
    Unsupported(Position),
    #[error(
        "the version at line {} is shared through a YAML anchor by entries that need \
         different versions",
        .0.line
    )]
    Conflict(Position),
    #[error(
        "replacing the versions in place would change more than the versions (a YAML \
         anchor or an unusual layout); the manifest is left as it is"
    )]
    Unverified,
}

/// The sections whose entries carry a `version` the director resolves.
const RELEASES: &str = "releases";
const STEMCELLS: &str = "stemcells";

/// One version to replace: the bytes of its scalar in the text, the quoted new value,
/// and where it sits in the loaded tree (for the check).
struct Edit {
    range: Range<usize>,
    replacement: String,
    at: Position,
    section: &'static str,
    index: usize,
    version: String,
}

/// The manifest with every release and stemcell version that has a newer upload
/// replaced by it, or `None` when nothing is newer.
///
/// Stemcell entries are matched by `os` when they name one, else by `name`, as the
/// director resolves them.
///
/// # Errors
/// The manifest does not load, or its versions cannot be replaced safely in place.
pub fn rewrite(manifest: &str, uploaded: &Uploaded) -> Result<Option<String>, ManifestError> {
    let root = yaml::load(manifest, Limits::default())?;
    let lines = line_starts(manifest);
    let mut edits = Vec::new();
    plan(
        &root,
        RELEASES,
        manifest,
        &lines,
        &mut edits,
        |entry, current| {
            let name = entry.get("name")?.as_str()?;
            uploaded.newer_release(name, current).map(str::to_string)
        },
    )?;
    plan(
        &root,
        STEMCELLS,
        manifest,
        &lines,
        &mut edits,
        |entry, current| {
            let newer = match entry.get("os").and_then(Node::as_str) {
                Some(os) => uploaded.newer_stemcell_for_os(os, current),
                None => uploaded.newer_stemcell_named(entry.get("name")?.as_str()?, current),
            };
            newer.map(str::to_string)
        },
    )?;
    if edits.is_empty() {
        return Ok(None);
    }
    let rewritten = apply(manifest, &edits)?;
    verify(&root, &rewritten, &edits)?;
    Ok(Some(rewritten))
}

fn plan(
    root: &Node,
    section: &'static str,
    text: &str,
    lines: &[usize],
    edits: &mut Vec<Edit>,
    newest: impl Fn(&Node, &str) -> Option<String>,
) -> Result<(), ManifestError> {
    let Some(Value::Seq(entries)) = root.get(section).map(|node| &node.value) else {
        return Ok(());
    };
    for (index, entry) in entries.iter().enumerate() {
        let Some(version) = entry.get("version") else {
            continue;
        };
        let located = scalar_at(text, lines, version.at);
        let current = match &located {
            Some(scalar) => scalar.value.clone(),
            None => scalar_text(version),
        };
        let Some(new) = newest(entry, &current) else {
            continue;
        };
        let Some(scalar) = located else {
            return Err(ManifestError::Unsupported(version.at));
        };
        edits.push(Edit {
            range: scalar.range,
            // A JSON string is a valid YAML double-quoted scalar, and quoting keeps a
            // version like `1.10` from being read as a number.
            replacement: Json::String(new.clone()).to_string(),
            at: version.at,
            section,
            index,
            version: new,
        });
    }
    Ok(())
}

/// A scalar's text and its bytes in the manifest.
struct Scalar {
    range: Range<usize>,
    value: String,
}

/// Finds the scalar a node's position points at. The position is where the node
/// begins, which is its anchor or tag if it has one (`&v 1.2`, `!!str 1.2`); aliases
/// carry the position of the anchored node, so an edit through an alias lands on the
/// anchor, and [`verify`] catches the cases where that changes other values too.
fn scalar_at(text: &str, lines: &[usize], at: Position) -> Option<Scalar> {
    let line_start = *lines.get(at.line.checked_sub(1)?)?;
    let line_end = text[line_start..]
        .find(['\n', '\r'])
        .map_or(text.len(), |i| line_start + i);
    let line = &text[line_start..line_end];
    let mut start = line.char_indices().nth(at.column.checked_sub(1)?)?.0;
    while line[start..].starts_with(['&', '!']) {
        let rest = &line[start..];
        let token = rest.find([' ', '\t']).unwrap_or(rest.len());
        let blanks = rest[token..].len() - rest[token..].trim_start_matches([' ', '\t']).len();
        start += token + blanks;
    }
    let rest = &line[start..];
    let (length, value) = match rest.chars().next()? {
        '"' => {
            let close = rest[1..].find('"')? + 1;
            let inner = &rest[1..close];
            if inner.contains('\\') {
                return None;
            }
            (close + 1, inner.to_string())
        }
        '\'' => {
            let close = rest[1..].find('\'')? + 1;
            if rest[close + 1..].starts_with('\'') {
                // `''` is an escaped quote inside the scalar.
                return None;
            }
            (close + 1, rest[1..close].to_string())
        }
        '|' | '>' | '[' | '{' | '*' | '#' => return None,
        _ => {
            let value = rest[..plain_end(rest)].trim_end();
            if value.is_empty() {
                return None;
            }
            (value.len(), value.to_string())
        }
    };
    let begin = line_start + start;
    Some(Scalar {
        range: begin..begin + length,
        value,
    })
}

/// Where a plain scalar on one line ends: at a comment, or at a flow indicator (versions
/// never contain `,`, `]` or `}`).
fn plain_end(rest: &str) -> usize {
    let mut after_blank = false;
    for (i, c) in rest.char_indices() {
        match c {
            ',' | ']' | '}' => return i,
            '#' if after_blank => return i,
            _ => {}
        }
        after_blank = c == ' ' || c == '\t';
    }
    rest.len()
}

/// A scalar node's value as text, for versions that cannot be located in the text.
fn scalar_text(node: &Node) -> String {
    match &node.value {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null | Value::Seq(_) | Value::Map(_) => String::new(),
    }
}

fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

fn apply(text: &str, edits: &[Edit]) -> Result<String, ManifestError> {
    // Entries that share one anchored scalar produce one edit, if they agree on it.
    let mut by_start: BTreeMap<usize, &Edit> = BTreeMap::new();
    for edit in edits {
        match by_start.get(&edit.range.start) {
            Some(other) if other.replacement != edit.replacement => {
                return Err(ManifestError::Conflict(edit.at));
            }
            Some(_) => {}
            None => {
                by_start.insert(edit.range.start, edit);
            }
        }
    }
    let mut rewritten = String::with_capacity(text.len() + 16 * by_start.len());
    let mut copied = 0;
    for edit in by_start.values() {
        if edit.range.start < copied {
            return Err(ManifestError::Unverified);
        }
        rewritten.push_str(&text[copied..edit.range.start]);
        rewritten.push_str(&edit.replacement);
        copied = edit.range.end;
    }
    rewritten.push_str(&text[copied..]);
    Ok(rewritten)
}

/// The rewritten text must load to the original tree with exactly the planned versions
/// changed.
fn verify(original: &Node, rewritten: &str, edits: &[Edit]) -> Result<(), ManifestError> {
    let mut expected = original.to_json();
    for edit in edits {
        let slot = expected
            .get_mut(edit.section)
            .and_then(|entries| entries.get_mut(edit.index))
            .and_then(|entry| entry.get_mut("version"))
            .ok_or(ManifestError::Unverified)?;
        *slot = Json::String(edit.version.clone());
    }
    let actual = yaml::load(rewritten, Limits::default())
        .map_err(|_| ManifestError::Unverified)?
        .to_json();
    if actual == expected {
        Ok(())
    } else {
        Err(ManifestError::Unverified)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::wire::{Release, Stemcell};
    use super::*;

    fn uploaded() -> Uploaded {
        let releases: Vec<Release> = serde_json::from_value(json!([
            {"name": "redis", "release_versions": [{"version": "1.9"}, {"version": "1.10"}]},
            {"name": "bpm", "release_versions": [{"version": "1.1"}]},
            {"name": "syslog", "release_versions": [{"version": "12"}, {"version": "11"}]}
        ]))
        .unwrap();
        let stemcells: Vec<Stemcell> = serde_json::from_value(json!([
            {"name": "bosh-warden-ubuntu-jammy", "operating_system": "ubuntu-jammy", "version": "1.99"},
            {"name": "bosh-warden-ubuntu-jammy", "operating_system": "ubuntu-jammy", "version": "1.125"},
            {"name": "bosh-warden-ubuntu-noble", "operating_system": "ubuntu-noble", "version": "3.1"}
        ]))
        .unwrap();
        Uploaded::new(&releases, &stemcells)
    }

    #[test]
    fn only_the_outdated_versions_change_and_everything_else_stays_byte_for_byte() {
        let manifest = "\
name: redis # the deployment
releases:
- name: redis
  version: 1.9 # pinned
- name: bpm
  version: \"1.1\"
stemcells:
- alias: default
  os: ubuntu-jammy
  version: '1.99'
properties:
  enabled: yes
  mode: 0777
";
        let expected = "\
name: redis # the deployment
releases:
- name: redis
  version: \"1.10\" # pinned
- name: bpm
  version: \"1.1\"
stemcells:
- alias: default
  os: ubuntu-jammy
  version: \"1.125\"
properties:
  enabled: yes
  mode: 0777
";
        assert_eq!(
            rewrite(manifest, &uploaded()).unwrap().as_deref(),
            Some(expected)
        );
    }

    #[test]
    fn stemcells_named_by_name_are_matched_by_name() {
        let manifest = "\
stemcells:
- alias: default
  name: bosh-warden-ubuntu-noble
  version: \"3.0\"
";
        let rewritten = rewrite(manifest, &uploaded()).unwrap().unwrap();
        assert!(rewritten.contains("version: \"3.1\""), "{rewritten}");
    }

    #[test]
    fn a_manifest_on_the_newest_versions_is_left_alone() {
        let manifest = "releases:\n- name: redis\n  version: \"1.10\"\n";
        assert_eq!(rewrite(manifest, &uploaded()), Ok(None));
    }

    #[test]
    fn an_older_upload_never_replaces_a_newer_version() {
        let manifest = "releases:\n- name: syslog\n  version: 13\n";
        assert_eq!(rewrite(manifest, &uploaded()), Ok(None));
    }

    #[test]
    fn latest_is_replaced_by_the_newest_upload() {
        let manifest = "releases:\n- name: syslog\n  version: latest\n";
        assert_eq!(
            rewrite(manifest, &uploaded()).unwrap().as_deref(),
            Some("releases:\n- name: syslog\n  version: \"12\"\n")
        );
    }

    #[test]
    fn versions_in_flow_mappings_and_behind_anchors_or_tags_are_replaced() {
        let manifest =
            "releases: [{name: redis, version: 1.9}, {name: syslog, version: &s !!str 11}]\n";
        assert_eq!(
            rewrite(manifest, &uploaded()).unwrap().as_deref(),
            Some(
                "releases: [{name: redis, version: \"1.10\"}, {name: syslog, version: &s !!str \"12\"}]\n"
            )
        );
    }

    #[test]
    fn an_anchor_shared_by_entries_that_need_different_versions_is_refused() {
        let manifest = "\
releases:
- name: redis
  version: &v 1.9
- name: syslog
  version: *v
";
        assert!(matches!(
            rewrite(manifest, &uploaded()),
            Err(ManifestError::Conflict(_))
        ));
    }

    #[test]
    fn an_anchor_that_other_values_share_is_refused() {
        let manifest = "\
releases:
- name: redis
  version: &v 1.9
properties:
  shown_version: *v
";
        assert_eq!(
            rewrite(manifest, &uploaded()),
            Err(ManifestError::Unverified)
        );
    }

    #[test]
    fn a_version_written_with_escapes_is_refused() {
        let manifest = "releases:\n- name: redis\n  version: \"1.\\u0039\"\n";
        assert!(matches!(
            rewrite(manifest, &uploaded()),
            Err(ManifestError::Unsupported(_))
        ));
    }

    #[test]
    fn a_manifest_that_is_not_yaml_is_reported() {
        assert!(matches!(
            rewrite("releases: [", &uploaded()),
            Err(ManifestError::Load(_))
        ));
    }
}
