//! The variables of a `create-env` manifest: `-v name=value` flags and the vars store
//! file, over the generation and interpolation `fleet-variables` does as BOSH's CLI does.

use std::path::Path;

use serde_json::Value as Json;

pub use fleet_variables::{Values, generate, interpolate};

#[derive(Debug, thiserror::Error)]
pub enum VariableError {
    #[error(transparent)]
    Variables(#[from] fleet_variables::VariableError),
    #[error("the vars store {path}: {message}")]
    Store { path: String, message: String },
    #[error("-v `{flag}` is not NAME=VALUE")]
    NotAPair { flag: String },
}

/// Reads `name=value` pairs given with `-v`.
///
/// # Errors
/// A pair without `=`, named.
pub fn from_flags(flags: &[String]) -> Result<Values, VariableError> {
    flags
        .iter()
        .map(|f| {
            f.split_once('=')
                .map(|(k, v)| (k.to_string(), Json::String(v.to_string())))
                .ok_or_else(|| VariableError::NotAPair { flag: f.clone() })
        })
        .collect()
}

/// The vars store's values; none for a store not made yet.
///
/// # Errors
/// A store that cannot be read or is not a YAML mapping.
pub fn load_store(path: &Path) -> Result<Values, VariableError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Values::new()),
        Err(e) => {
            return Err(VariableError::Store {
                path: path.display().to_string(),
                message: e.to_string(),
            });
        }
    };
    let store_error = |message: String| VariableError::Store {
        path: path.display().to_string(),
        message,
    };
    let node = fleet_yaml::load(&text, fleet_yaml::Limits::default())
        .map_err(|e| store_error(e.to_string()))?;
    match node.to_json() {
        Json::Object(map) => Ok(map.into_iter().collect()),
        Json::Null => Ok(Values::new()),
        _ => Err(store_error("is not a mapping of names to values".into())),
    }
}

/// Writes the vars store, readable by its owner alone: it holds passwords and keys.
///
/// # Errors
/// When it cannot be written.
pub fn save_store(path: &Path, values: &Values) -> Result<(), VariableError> {
    let map: serde_json::Map<String, Json> = values.clone().into_iter().collect();
    let text = fleet_yaml::render(&fleet_yaml::from_json(&Json::Object(map)), None);
    fleet_file::write(path, text.as_bytes(), fleet_file::Mode::Private).map_err(|e| {
        VariableError::Store {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vars_store_keeps_what_was_generated_for_its_owner_alone() {
        let declared = serde_json::json!([{"name": "pw", "type": "password"}]);
        let mut values = Values::new();
        assert!(generate(&declared, &mut values).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("vars.yml");
        save_store(&store, &values).unwrap();
        assert_eq!(load_store(&store).unwrap(), values);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&store).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the store is its owner's alone");
        assert!(from_flags(&["a=b".into(), "c".into()]).is_err());
    }
}
