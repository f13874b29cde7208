//! A package archive's bytes where a release keeps them: in memory when the release was
//! read from this machine's own files, in a file of their own when spooled from an upload,
//! so that a release of gigabytes sent by anyone is never held in memory whole. Either way
//! its SHA-1 (the blob id the director keeps it under) is known from the one reading.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ring::digest::{Context, SHA1_FOR_LEGACY_USE_ONLY};

use super::digest::hex;

#[derive(Debug, Clone)]
pub struct Payload {
    kept: Kept,
    sha1: String,
    len: u64,
}

#[derive(Debug, Clone)]
enum Kept {
    Memory(Arc<Vec<u8>>),
    /// A file of the spool the upload was unpacked into; the spool goes when the last
    /// payload in it does.
    Spooled {
        path: PathBuf,
        _spool: Arc<tempfile::TempDir>,
    },
}

impl Payload {
    pub fn memory(bytes: Vec<u8>) -> Payload {
        Payload {
            sha1: super::sha1_hex(&bytes),
            len: bytes.len() as u64,
            kept: Kept::Memory(Arc::new(bytes)),
        }
    }

    /// Copies all of `from` into a new file of `spool`, hashing it on the way.
    pub(crate) fn spool(
        from: &mut dyn Read,
        spool: &Arc<tempfile::TempDir>,
        name: &str,
    ) -> io::Result<Payload> {
        let path = spool.path().join(name);
        let mut file = io::BufWriter::new(std::fs::File::create(&path)?);
        let mut sha1 = Context::new(&SHA1_FOR_LEGACY_USE_ONLY);
        let mut len = 0u64;
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = from.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            sha1.update(&buffer[..n]);
            len += n as u64;
            file.write_all(&buffer[..n])?;
        }
        file.flush()?;
        Ok(Payload {
            sha1: hex(sha1.finish().as_ref()),
            len,
            kept: Kept::Spooled {
                path,
                _spool: Arc::clone(spool),
            },
        })
    }

    /// Its SHA-1 in lowercase hex.
    pub fn sha1(&self) -> &str {
        &self.sha1
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file it is kept in, when spooled: what a store copies from piece by piece.
    pub fn file(&self) -> Option<&Path> {
        match &self.kept {
            Kept::Memory(_) => None,
            Kept::Spooled { path, .. } => Some(path),
        }
    }

    /// Reads it from the start.
    ///
    /// # Errors
    /// A spooled file that cannot be opened.
    pub fn reader(&self) -> io::Result<Box<dyn Read + '_>> {
        Ok(match &self.kept {
            Kept::Memory(bytes) => Box::new(bytes.as_slice()),
            Kept::Spooled { path, .. } => Box::new(io::BufReader::new(std::fs::File::open(path)?)),
        })
    }

    /// All of it, in memory.
    ///
    /// # Errors
    /// A spooled file that cannot be read.
    pub fn read(&self) -> io::Result<Vec<u8>> {
        match &self.kept {
            Kept::Memory(bytes) => Ok(bytes.as_ref().clone()),
            Kept::Spooled { path, .. } => std::fs::read(path),
        }
    }

    /// All of it, in memory, without a copy when it is there already.
    ///
    /// # Errors
    /// As [`Self::read`].
    pub fn into_bytes(self) -> io::Result<Vec<u8>> {
        match self.kept {
            Kept::Memory(bytes) => Ok(Arc::try_unwrap(bytes).unwrap_or_else(|b| (*b).clone())),
            Kept::Spooled { path, .. } => std::fs::read(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spooled_payload_reads_and_hashes_as_the_same_bytes_in_memory() {
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let spool = Arc::new(tempfile::tempdir().unwrap());
        let spooled = Payload::spool(&mut bytes.as_slice(), &spool, "p").unwrap();
        let held = Payload::memory(bytes.clone());
        assert_eq!(spooled.sha1(), held.sha1());
        assert_eq!(spooled.len(), 200_000);
        assert_eq!(spooled.read().unwrap(), bytes);
        let mut again = Vec::new();
        spooled.reader().unwrap().read_to_end(&mut again).unwrap();
        assert_eq!(again, bytes);
        let path = spooled.file().unwrap().to_path_buf();
        drop(spool);
        assert!(path.exists(), "the spool stays while a payload is in it");
        drop(spooled);
        assert!(!path.exists(), "and goes with the last");
        assert!(held.file().is_none());
    }
}
