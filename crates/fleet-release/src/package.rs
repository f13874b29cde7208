//! A package's archive: its `packaging` script and the sources it builds from.

use super::{ArchiveError, tgz};

/// Packages carry sources and prebuilt binaries; this bounds what one may unpack to.
pub const MAX_PACKAGE_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// Checks that the package archive `reader` gives is a tarball with a `packaging`
/// script, read as it streams and refused past `limit` bytes inflated; the bytes it
/// inflated to.
///
/// # Errors
/// What is wrong, for the caller to name the file.
pub fn check_reader(reader: impl std::io::Read, limit: u64) -> Result<u64, ArchiveError> {
    let (paths, read) = tgz::paths_in(reader, limit.min(MAX_PACKAGE_BYTES))?;
    if paths.iter().any(|p| p == "packaging") {
        Ok(read)
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
        assert!(check_reader(good.as_slice(), 1 << 20).is_ok());
        let bad = tgz::build(&[("kv/kv.py", b"")]);
        assert_eq!(
            check_reader(bad.as_slice(), 1 << 20)
                .unwrap_err()
                .to_string(),
            "has no `packaging` script"
        );
    }
}
