//! A package's archive: its `packaging` script and the sources it builds from.

use super::tgz;

/// Packages carry sources and prebuilt binaries; this bounds what one may unpack to.
pub const MAX_PACKAGE_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// Checks that a package archive is a tarball with a `packaging` script.
///
/// # Errors
/// What is wrong, for the caller to name the file.
pub fn check(bytes: &[u8]) -> Result<(), String> {
    let paths = tgz::paths(bytes, MAX_PACKAGE_BYTES)?;
    if paths.iter().any(|p| p == "packaging") {
        Ok(())
    } else {
        Err("has no `packaging` script".to_string())
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
        assert_eq!(check(&good), Ok(()));
        let bad = tgz::build(&[("kv/kv.py", b"")]);
        assert_eq!(check(&bad).unwrap_err(), "has no `packaging` script");
    }
}
