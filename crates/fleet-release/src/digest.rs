//! The digests a release manifest gives its archives, in BOSH's notation: a bare 40-digit
//! hex SHA-1 (`9f2c...`), an algorithm-prefixed one (`sha256:ab12...`), or several of them
//! separated by `;`. Every digest given is checked, so a manifest cannot name a strong one
//! that is wrong beside a weak one that is right.

use std::io::Read;

use ring::digest::{Algorithm, Context, SHA1_FOR_LEGACY_USE_ONLY, SHA256, SHA512, digest};

use super::ArchiveError;

/// One algorithm and the hex value expected of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expected {
    algorithm: &'static str,
    hex: String,
}

/// A manifest's `sha1` field, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    text: String,
    expected: Vec<Expected>,
}

impl Digest {
    /// Parses BOSH's notation.
    ///
    /// # Errors
    /// An unknown algorithm, or a value that is not hex of the algorithm's length.
    pub fn parse(text: &str) -> Result<Digest, ArchiveError> {
        let mut expected = Vec::new();
        for part in text.split(';').map(str::trim) {
            let (algorithm, hex) = match part.split_once(':') {
                Some((name, hex)) => (name, hex),
                None => ("sha1", part),
            };
            let (name, algo) =
                algorithm_named(algorithm).ok_or_else(|| ArchiveError::UnknownAlgorithm {
                    algorithm: algorithm.to_string(),
                })?;
            let length = algo.output_len() * 2;
            if hex.len() != length || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ArchiveError::MalformedDigest {
                    digest: part.to_string(),
                    algorithm: name,
                    length,
                });
            }
            expected.push(Expected {
                algorithm: name,
                hex: hex.to_ascii_lowercase(),
            });
        }
        Ok(Digest {
            text: text.to_string(),
            expected,
        })
    }

    /// Whether `bytes` have every digest given.
    ///
    /// # Errors
    /// The first algorithm whose digest differs, with the digest the bytes have.
    pub fn verify(&self, bytes: &[u8]) -> Result<(), ArchiveError> {
        self.verify_reader(&mut &bytes[..], "bytes in memory")
    }

    /// [`Self::verify`] against the SHA-1 already known of the bytes (a spooled
    /// archive's, hashed as it was written), when SHA-1 is all the manifest gives: the
    /// bytes need not be read again. `None` when it gives another algorithm.
    ///
    /// # Errors
    /// As [`Self::verify`].
    pub fn verify_sha1(&self, sha1: &str) -> Option<Result<(), ArchiveError>> {
        if self.expected.iter().any(|e| e.algorithm != "sha1") {
            return None;
        }
        Some(match self.expected.iter().find(|e| e.hex != sha1) {
            Some(e) => Err(ArchiveError::DigestMismatch {
                algorithm: e.algorithm,
                actual: sha1.to_string(),
                expected: e.hex.clone(),
            }),
            None => Ok(()),
        })
    }

    /// [`Self::verify`] for what `reader` gives, read once whatever the algorithms.
    ///
    /// # Errors
    /// As [`Self::verify`]; [`ArchiveError::ReadEntry`] naming `what` when reading fails.
    pub fn verify_reader(&self, reader: &mut dyn Read, what: &str) -> Result<(), ArchiveError> {
        let mut contexts: Vec<Context> = self
            .expected
            .iter()
            .map(|e| {
                Context::new(
                    algorithm_named(e.algorithm)
                        .expect("parsed names are known")
                        .1,
                )
            })
            .collect();
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = reader
                .read(&mut buffer)
                .map_err(|source| ArchiveError::ReadEntry {
                    path: what.to_string(),
                    source,
                })?;
            if n == 0 {
                break;
            }
            for context in &mut contexts {
                context.update(&buffer[..n]);
            }
        }
        for (e, context) in self.expected.iter().zip(contexts) {
            let actual = hex(context.finish().as_ref());
            if actual != e.hex {
                return Err(ArchiveError::DigestMismatch {
                    algorithm: e.algorithm,
                    actual,
                    expected: e.hex.clone(),
                });
            }
        }
        Ok(())
    }

    /// As the manifest wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// The SHA-256 of `bytes` in hex, for digests written `sha256:HEX`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest(&SHA256, bytes).as_ref())
}

/// The SHA-1 of `bytes` in hex: how blobs are named, as BOSH names them.
pub fn sha1_hex(bytes: &[u8]) -> String {
    hex(digest(&SHA1_FOR_LEGACY_USE_ONLY, bytes).as_ref())
}

fn algorithm_named(name: &str) -> Option<(&'static str, &'static Algorithm)> {
    match name.to_ascii_lowercase().as_str() {
        "sha1" => Some(("sha1", &SHA1_FOR_LEGACY_USE_ONLY)),
        "sha256" => Some(("sha256", &SHA256)),
        "sha512" => Some(("sha512", &SHA512)),
        _ => None,
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABC_SHA1: &str = "a9993e364706816aba3e25717850c26c9cd0d89d";
    const ABC_SHA256: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn bare_hex_is_sha1_and_is_checked() {
        let d = Digest::parse(ABC_SHA1).unwrap();
        assert!(d.verify(b"abc").is_ok());
        let wrong = d.verify(b"abd").unwrap_err().to_string();
        assert!(wrong.starts_with("sha1 digest is "), "{wrong}");
        assert_eq!(sha1_hex(b"abc"), ABC_SHA1);
        assert!(d.verify_reader(&mut &b"abc"[..], "abc").is_ok());
        assert!(d.verify_reader(&mut &b"abd"[..], "abd").is_err());
        assert!(matches!(d.verify_sha1(ABC_SHA1), Some(Ok(()))));
        let known = d
            .verify_sha1(&sha1_hex(b"abd"))
            .unwrap()
            .unwrap_err()
            .to_string();
        assert_eq!(known, wrong);
        let both = Digest::parse(&format!("{ABC_SHA1};sha256:{ABC_SHA256}")).unwrap();
        assert!(both.verify_sha1(ABC_SHA1).is_none(), "sha256 must be read");
    }

    #[test]
    fn every_digest_of_a_list_is_checked() {
        let both = Digest::parse(&format!("{ABC_SHA1};sha256:{ABC_SHA256}")).unwrap();
        assert!(both.verify(b"abc").is_ok());
        let zeros = "0".repeat(64);
        let bad_strong = Digest::parse(&format!("{ABC_SHA1};sha256:{zeros}")).unwrap();
        assert!(
            bad_strong
                .verify(b"abc")
                .unwrap_err()
                .to_string()
                .starts_with("sha256")
        );
    }

    #[test]
    fn malformed_digests_are_named() {
        let message = |text: &str| Digest::parse(text).unwrap_err().to_string();
        assert!(message("md5:abc").contains("`md5`"));
        assert!(message("abc").contains("40 hex digits"));
        assert!(message(&format!("sha256:{ABC_SHA1}")).contains("64 hex digits"));
    }
}
