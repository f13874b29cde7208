//! Files `serve` keeps in the state directory; secrets are readable by the owner only.

use std::path::Path;

use super::ServeError;

pub fn read(path: &Path) -> Result<String, ServeError> {
    std::fs::read_to_string(path).map_err(|source| ServeError::File {
        path: path.to_path_buf(),
        source,
    })
}

fn write(path: &Path, text: &str, mode: fleet_file::Mode) -> Result<(), ServeError> {
    fleet_file::write(path, text.as_bytes(), mode).map_err(|source| ServeError::File {
        path: path.to_path_buf(),
        source,
    })
}

/// Written readable by its owner only.
pub fn write_private(path: &Path, text: &str) -> Result<(), ServeError> {
    write(path, text, fleet_file::Mode::Private)
}

pub fn write_public(path: &Path, text: &str) -> Result<(), ServeError> {
    write(path, text, fleet_file::Mode::Public)
}
