//! A job's or package's fingerprint as the `bosh` CLI computes it (its "v2" scheme), so
//! that a release built here from source names its jobs and packages as `bosh
//! create-release` names them from the same source: a director that has one has the
//! other, and a package compiled for one is the other's.
//!
//! The CLI digests, in order of their paths, each file's path, its SHA-256 and its mode
//! as git keeps modes (`100755` when any execute bit is set, else `100644`; a package's
//! `packaging` without its mode), then the part's dependencies sorted and joined by
//! commas; the fingerprint is the SHA-256 of all that, in hex.

use super::digest::sha256_hex;

/// One file as it counts in a fingerprint.
pub(crate) struct Fingerprinted<'a> {
    pub path: &'a str,
    pub bytes: &'a [u8],
    /// Its Unix mode; `None` leaves the mode out, as the CLI does for `packaging`.
    pub mode: Option<u32>,
}

/// The fingerprint of `files` with `dependencies`.
pub(crate) fn fingerprint(files: &[Fingerprinted<'_>], dependencies: &[String]) -> String {
    let mut sorted: Vec<&Fingerprinted<'_>> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(b.path));
    let mut text = String::from("v2");
    for file in sorted {
        text.push_str(file.path);
        text.push_str("sha256:");
        text.push_str(&sha256_hex(file.bytes));
        if let Some(mode) = file.mode {
            text.push_str(if mode & 0o111 != 0 {
                "100755"
            } else {
                "100644"
            });
        }
    }
    if !dependencies.is_empty() {
        let mut sorted = dependencies.to_vec();
        sorted.sort();
        text.push_str(&sorted.join(","));
    }
    sha256_hex(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_contents_modes_and_dependencies_each_count_and_order_does_not() {
        let a = Fingerprinted {
            path: "a.c",
            bytes: b"int a;",
            mode: Some(0o644),
        };
        let packaging = Fingerprinted {
            path: "packaging",
            bytes: b"cc a.c",
            mode: None,
        };
        let base = fingerprint(&[a, packaging], &["z".into(), "y".into()]);
        assert_eq!(base.len(), 64);
        let again = fingerprint(
            &[
                Fingerprinted {
                    path: "packaging",
                    bytes: b"cc a.c",
                    mode: None,
                },
                Fingerprinted {
                    path: "a.c",
                    bytes: b"int a;",
                    mode: Some(0o600),
                },
            ],
            &["y".into(), "z".into()],
        );
        assert_eq!(base, again, "order and non-execute bits do not count");
        let executable = fingerprint(
            &[Fingerprinted {
                path: "a.c",
                bytes: b"int a;",
                mode: Some(0o755),
            }],
            &[],
        );
        let plain = fingerprint(
            &[Fingerprinted {
                path: "a.c",
                bytes: b"int a;",
                mode: Some(0o644),
            }],
            &[],
        );
        assert_ne!(executable, plain);
        let text = "v2a.csha256:".to_string() + &sha256_hex(b"int a;") + "100644";
        assert_eq!(plain, sha256_hex(text.as_bytes()), "the CLI's v2 scheme");
    }
}
