//! Files `serve` keeps in the state directory; secrets are readable by the owner only.

use std::io::Write;
use std::path::Path;

use super::ServeError;

pub fn read(path: &Path) -> Result<String, ServeError> {
    std::fs::read_to_string(path).map_err(|source| ServeError::File {
        path: path.to_path_buf(),
        source,
    })
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), ServeError> {
    let failed = |source| ServeError::File {
        path: path.to_path_buf(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(failed)?;
    // A file created earlier with a wider mode is narrowed too.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(failed)?;
    }
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)
}

/// Written readable by its owner only.
pub fn write_private(path: &Path, text: &str) -> Result<(), ServeError> {
    write(path, text, 0o600)
}

pub fn write_public(path: &Path, text: &str) -> Result<(), ServeError> {
    write(path, text, 0o644)
}
