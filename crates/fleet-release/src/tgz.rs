//! The files of a tarball, gzipped or not, by their path inside it. Paths are taken as
//! BOSH's tools write them (`./jobs/web.tgz`) and kept relative: an entry that would leave
//! the archive (`..`, an absolute path) or a link is refused, since what is read here is
//! later unpacked onto disk. Reading stops at a size limit, so a small archive that
//! inflates without end is refused rather than exhausting memory.

use std::cell::Cell;
use std::io::{BufRead, Read};
use std::rc::Rc;

use flate2::read::GzDecoder;

use super::ArchiveError;

/// One regular file of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub bytes: Vec<u8>,
}

/// Every regular file of the archive in `bytes`, in archive order; at most `limit` bytes
/// of them in all.
///
/// # Errors
/// For the archive's reader to place: not a tarball, a path or link refused, the limit
/// exceeded.
pub fn files(bytes: &[u8], limit: u64) -> Result<Vec<Entry>, ArchiveError> {
    files_within(
        bytes,
        Bounds {
            max_bytes: limit,
            max_entries: usize::MAX,
            document: None,
        },
    )
}

/// What reading an archive sent by anyone may cost, checked while it is read: the
/// bytes it inflates to, its files, and the size of each file a caller names (a
/// document read whole afterwards).
#[derive(Debug, Clone, Copy)]
pub struct Bounds<'a> {
    pub max_bytes: u64,
    pub max_entries: usize,
    /// A file and the most it may hold.
    pub document: Option<(&'a str, u64)>,
}

/// Every regular file of the archive in `bytes`, in archive order, within `bounds`.
///
/// # Errors
/// As [`files`]; too many files, or the named document too large.
pub fn files_within(bytes: &[u8], bounds: Bounds<'_>) -> Result<Vec<Entry>, ArchiveError> {
    let mut found = Vec::new();
    walk(bytes, bounds.max_bytes, |path, reader| {
        if found.len() == bounds.max_entries {
            return Err(ArchiveError::TooManyEntries {
                limit: bounds.max_entries,
            });
        }
        let cap = match bounds.document {
            Some((name, limit)) if name == path => limit,
            _ => u64::MAX,
        };
        found.push(Entry {
            path: path.to_string(),
            bytes: read_capped(reader, path, cap)?,
        });
        Ok(())
    })?;
    Ok(found)
}

/// All of the file `name`'s `reader`, refused past `cap` bytes.
pub(crate) fn read_capped(
    reader: &mut dyn Read,
    name: &str,
    cap: u64,
) -> Result<Vec<u8>, ArchiveError> {
    let mut content = Vec::new();
    reader
        .take(cap.saturating_add(1))
        .read_to_end(&mut content)
        .map_err(|source| ArchiveError::ReadEntry {
            path: name.to_string(),
            source,
        })?;
    if content.len() as u64 > cap {
        return Err(ArchiveError::EntryTooLarge {
            path: name.to_string(),
            limit: cap,
        });
    }
    Ok(content)
}

/// The paths of the archive's regular files, reading no more than `limit` bytes.
///
/// # Errors
/// As [`files`].
pub fn paths(bytes: &[u8], limit: u64) -> Result<Vec<String>, ArchiveError> {
    paths_in(bytes, limit).map(|(found, _)| found)
}

/// The paths of the regular files of the tarball `reader` gives, reading no more than
/// `limit` bytes of it inflated; and how many it read.
///
/// # Errors
/// As [`files`]; [`ArchiveError::NotATarball`] when it cannot be read.
pub fn paths_in(reader: impl Read, limit: u64) -> Result<(Vec<String>, u64), ArchiveError> {
    let mut found = Vec::new();
    let plain = plain_reader(reader).map_err(ArchiveError::NotATarball)?;
    let read = walk_from(plain, limit, |path, _| {
        found.push(path.to_string());
        Ok(())
    })?;
    Ok((found, read))
}

fn walk(
    bytes: &[u8],
    limit: u64,
    visit: impl FnMut(&str, &mut dyn Read) -> Result<(), ArchiveError>,
) -> Result<u64, ArchiveError> {
    walk_from(plain(bytes), limit, visit)
}

/// Visits each regular file of the (inflated) tarball `plain`, with a reader of its
/// contents, reading no more than `limit` bytes in all; the bytes it read.
pub(crate) fn walk_from(
    plain: Box<dyn Read + '_>,
    limit: u64,
    mut visit: impl FnMut(&str, &mut dyn Read) -> Result<(), ArchiveError>,
) -> Result<u64, ArchiveError> {
    let exceeded = Rc::new(Cell::new(false));
    let mut archive = tar::Archive::new(Limited {
        inner: plain,
        left: limit,
        exceeded: Rc::clone(&exceeded),
    });
    let over = |e: ArchiveError| {
        if exceeded.get() {
            ArchiveError::TooLarge { limit }
        } else {
            e
        }
    };
    let entries = archive
        .entries()
        .map_err(|e| over(ArchiveError::NotATarball(e)))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| over(ArchiveError::Unreadable(e)))?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let kind = entry.header().entry_type();
        if kind.is_dir() || kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            continue;
        }
        let path = relative(&raw)?;
        if !kind.is_file() {
            return Err(ArchiveError::NotARegularFile { path: raw });
        }
        visit(&path, &mut entry).map_err(over)?;
    }
    Ok(limit - archive.into_inner().left)
}

/// The tarball in `bytes`, inflated when gzipped.
pub(crate) fn plain(bytes: &[u8]) -> Box<dyn Read + '_> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        Box::new(GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    }
}

/// The tarball `reader` gives, inflated when gzipped: read as it streams.
pub(crate) fn plain_reader<'a>(reader: impl Read + 'a) -> std::io::Result<Box<dyn Read + 'a>> {
    let mut buffered = std::io::BufReader::with_capacity(64 * 1024, reader);
    let gzipped = buffered.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gzipped {
        Box::new(GzDecoder::new(buffered))
    } else {
        Box::new(buffered)
    })
}

/// Reads at most `left` bytes, then fails, remembering why: tar reports the failure in
/// its own words, which would hide the limit.
pub(crate) struct Limited<R> {
    pub(crate) inner: R,
    pub(crate) left: u64,
    pub(crate) exceeded: Rc<Cell<bool>>,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.exceeded.set(true);
                    Err(std::io::Error::other("size limit exceeded"))
                }
            };
        }
        let room = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..room])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// `./a/b` as `a/b`; refuses what would leave the archive.
pub(crate) fn relative(raw: &str) -> Result<String, ArchiveError> {
    let path = || raw.to_string();
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(ArchiveError::LeavesArchive { path: path() }),
            other => parts.push(other),
        }
    }
    if raw.starts_with('/') {
        return Err(ArchiveError::AbsolutePath { path: path() });
    }
    if parts.is_empty() {
        return Err(ArchiveError::NamesNoFile { path: path() });
    }
    Ok(parts.join("/"))
}

/// A gzipped tarball of `files`, for tests and for archives this program writes.
///
/// # Panics
/// Never for in-memory output.
pub fn build(files: &[(&str, &[u8])]) -> Vec<u8> {
    let moded: Vec<(&str, &[u8], u32)> = files.iter().map(|(p, b)| (*p, *b, 0o644)).collect();
    build_with_modes(&moded)
}

/// A gzipped tarball of `files`, each with its Unix mode.
///
/// # Panics
/// Never for in-memory output.
pub fn build_with_modes(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut builder = tar::Builder::new(encoder);
    for (path, bytes, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(mode & 0o7777);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, path, *bytes)
            .expect("writing to memory");
    }
    builder
        .into_inner()
        .and_then(|gz| gz.finish())
        .expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_come_back_by_relative_path() {
        let tgz = build(&[("./release.MF", b"name: a\n"), ("jobs/web.tgz", b"x")]);
        let found = files(&tgz, 1 << 20).unwrap();
        let paths: Vec<&str> = found.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["release.MF", "jobs/web.tgz"]);
        assert_eq!(found[0].bytes, b"name: a\n");
    }

    #[test]
    fn paths_leaving_the_archive_are_refused() {
        let message = |raw: &str| relative(raw).unwrap_err().to_string();
        assert!(message("../etc/passwd").contains("`..`"));
        assert!(message("/etc/passwd").contains("absolute"));
        assert_eq!(relative("./a//b").unwrap(), "a/b");
    }

    #[test]
    fn an_archive_over_the_limit_is_refused() {
        let big = vec![0u8; 64 * 1024];
        let tgz = build(&[("blob", &big)]);
        assert!(files(&tgz, 1 << 20).is_ok());
        let e = files(&tgz, 16 * 1024).unwrap_err().to_string();
        assert!(e.contains("unpacks to more than 0 MiB"), "{e}");
    }

    #[test]
    fn garbage_is_not_a_tarball() {
        let e = files(b"\x1f\x8bnot gzip at all", 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tarball"), "{e}");
    }
}
