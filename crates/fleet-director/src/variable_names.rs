//! How the config server names variables: a relative name belongs to its deployment
//! (`/DIRECTOR/DEPLOYMENT/NAME`), and what one deployment hands another (a link's
//! exported properties) has its references made absolute. Pure.

use serde_json::Value as Json;

use super::identity::DIRECTOR_NAME;

/// `name` as the config server keeps it for `deployment`.
pub fn full_name(deployment: &str, name: &str) -> String {
    if name.starts_with('/') {
        name.to_string()
    } else {
        format!("/{DIRECTOR_NAME}/{deployment}/{name}")
    }
}

/// `value` with every relative `((name))` made absolute for `deployment`: what another
/// deployment's links bring is resolved with that deployment's variables.
pub fn qualify(value: &Json, deployment: &str) -> Json {
    match value {
        Json::String(text) => {
            let mut out = String::new();
            let mut rest = text.as_str();
            while let Some(start) = rest.find("((") {
                let (before, after) = rest.split_at(start);
                out.push_str(before);
                let inner = &after[2..];
                match inner.find("))") {
                    Some(end) => {
                        let name = inner[..end].trim();
                        let bang = if name.starts_with('!') { "!" } else { "" };
                        let bare = name.trim_start_matches('!');
                        out.push_str("((");
                        out.push_str(bang);
                        if bare.starts_with('/') {
                            out.push_str(bare);
                        } else {
                            out.push_str(&full_name(deployment, bare));
                        }
                        out.push_str("))");
                        rest = &inner[end + 2..];
                    }
                    None => {
                        out.push_str(after);
                        rest = "";
                    }
                }
            }
            out.push_str(rest);
            Json::String(out)
        }
        Json::Array(items) => Json::Array(items.iter().map(|i| qualify(i, deployment)).collect()),
        Json::Object(map) => Json::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), qualify(v, deployment)))
                .collect(),
        ),
        other => other.clone(),
    }
}
