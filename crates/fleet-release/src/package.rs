//! A package's archive: its `packaging` script and the sources it builds from.

use super::{ArchiveError, tgz};

/// Packages carry sources and prebuilt binaries; this bounds what one may unpack to.
pub const MAX_PACKAGE_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// Checks that a package archive is a tarball with a `packaging` script.
///
/// # Errors
/// What is wrong, for the caller to name the file.
pub fn check(bytes: &[u8]) -> Result<(), ArchiveError> {
    let paths = tgz::paths(bytes, MAX_PACKAGE_BYTES)?;
    if paths.iter().any(|p| p == "packaging") {
        Ok(())
    } else {
        Err(ArchiveError::NoPackagingScript)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_needs_its_packaging_script() {
        let good = tgz::build(&[
            ("packaging", b"cp -a kv/* $BOSH_INSTALL_TARGET\n"),
            ("kv/kv.py", b""),
        ]);
        assert!(check(&good).is_ok());
        let bad = tgz::build(&[("kv/kv.py", b"")]);
        assert_eq!(
            check(&bad).unwrap_err().to_string(),
            "has no `packaging` script"
        );
    }
}
