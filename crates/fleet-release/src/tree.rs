//! A directory tree to a tarball and back, for packages on a VM's disk: file modes and
//! symbolic links are kept (a compiled package has executables and `libx.so -> libx.so.1`),
//! and nothing unpacked lands outside the directory it is unpacked into: no `..`, no
//! absolute path, no link whose target leaves the tree, no hard link or device.

use std::cell::Cell;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use super::ArchiveError;
use super::tgz::{Limited, plain, relative};

/// Unpacks the tarball in `bytes` (gzipped or not) into `dir`, reading at most `limit`
/// bytes.
///
/// # Errors
/// The entry at fault, or the limit.
pub fn unpack(bytes: &[u8], dir: &Path, limit: u64) -> Result<(), ArchiveError> {
    let exceeded = Rc::new(Cell::new(false));
    let mut archive = tar::Archive::new(Limited {
        inner: plain(bytes),
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
    let make = |path: &Path| {
        std::fs::create_dir_all(path).map_err(|source| ArchiveError::MakeDirectory {
            path: path.to_path_buf(),
            source,
        })
    };
    make(dir)?;
    let entries = archive
        .entries()
        .map_err(|e| over(ArchiveError::NotATarball(e)))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| over(ArchiveError::Unreadable(e)))?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            continue;
        }
        if kind.is_dir() && relative(&raw).is_err() && raw.trim_matches(['.', '/']).is_empty() {
            continue;
        }
        let path = dir.join(relative(&raw)?);
        if let Some(parent) = path.parent() {
            make(parent)?;
        }
        let io = |source: std::io::Error| ArchiveError::WriteEntry {
            path: raw.clone(),
            source,
        };
        if kind.is_dir() {
            std::fs::create_dir_all(&path).map_err(io)?;
        } else if kind.is_file() {
            let mut file = std::fs::File::create(&path).map_err(io)?;
            std::io::copy(&mut entry, &mut file).map_err(|e| over(io(e)))?;
            let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
            set_mode(&path, mode).map_err(io)?;
        } else if kind.is_symlink() {
            let target = entry
                .link_name()
                .ok()
                .flatten()
                .ok_or_else(|| ArchiveError::LinkWithoutTarget { path: raw.clone() })?
                .into_owned();
            if !stays_inside(dir, &path, &target) {
                return Err(ArchiveError::LinkLeavesArchive { path: raw, target });
            }
            let _ = std::fs::remove_file(&path);
            std::os::unix::fs::symlink(&target, &path).map_err(io)?;
        } else {
            return Err(ArchiveError::NotAFileDirectoryOrLink { path: raw });
        }
    }
    Ok(())
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Whether a link at `link` to `target` resolves inside `root`, judged by its path alone.
fn stays_inside(root: &Path, link: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let Ok(from) = link.parent().unwrap_or(root).strip_prefix(root) else {
        return false;
    };
    let mut depth: Vec<Component> = from.components().collect();
    for part in target.components() {
        match part {
            Component::ParentDir if depth.pop().is_none() => return false,
            Component::ParentDir => {}
            Component::Normal(_) => depth.push(part),
            _ => {}
        }
    }
    true
}

/// The tree under `dir` as a gzipped tarball, paths relative to it, in name order.
///
/// # Errors
/// A file that cannot be read.
pub fn pack(dir: &Path) -> Result<Vec<u8>, ArchiveError> {
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut builder = tar::Builder::new(encoder);
    builder.follow_symlinks(false);
    let mut pending = vec![PathBuf::new()];
    let read = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ArchiveError::Read { path, source }
    };
    let archive = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ArchiveError::Archive { path, source }
    };
    while let Some(sub) = pending.pop() {
        let mut names: Vec<_> = std::fs::read_dir(dir.join(&sub))
            .map_err(read(&dir.join(&sub)))?
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for name in names.into_iter().rev() {
            let relative = sub.join(&name);
            let full = dir.join(&relative);
            let meta = std::fs::symlink_metadata(&full).map_err(read(&full))?;
            if meta.is_dir() {
                builder
                    .append_dir(&relative, &full)
                    .map_err(archive(&full))?;
                pending.push(relative);
            } else {
                builder
                    .append_path_with_name(&full, &relative)
                    .map_err(archive(&full))?;
            }
        }
    }
    builder
        .into_inner()
        .and_then(|gz| gz.finish())
        .map_err(ArchiveError::Finish)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_tree_comes_back_with_modes_and_links() {
        let from = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(from.path().join("bin")).unwrap();
        std::fs::write(from.path().join("bin/kv"), "#!/bin/sh\n").unwrap();
        set_mode(&from.path().join("bin/kv"), 0o755).unwrap();
        std::fs::create_dir_all(from.path().join("lib")).unwrap();
        std::fs::write(from.path().join("lib/libkv.so.1"), "elf").unwrap();
        std::os::unix::fs::symlink("libkv.so.1", from.path().join("lib/libkv.so")).unwrap();
        let tgz = pack(from.path()).unwrap();
        let to = tempfile::tempdir().unwrap();
        unpack(&tgz, to.path(), 1 << 20).unwrap();
        let mode = std::fs::metadata(to.path().join("bin/kv"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            std::fs::read_to_string(to.path().join("lib/libkv.so")).unwrap(),
            "elf"
        );
    }

    #[test]
    fn links_out_of_the_tree_are_refused() {
        let root = Path::new("/vm/packages/kv");
        assert!(stays_inside(
            root,
            &root.join("lib/a"),
            Path::new("../bin/b")
        ));
        assert!(!stays_inside(
            root,
            &root.join("lib/a"),
            Path::new("../../x")
        ));
        assert!(!stays_inside(
            root,
            &root.join("a"),
            Path::new("/etc/passwd")
        ));
        let from = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("../../etc/passwd", from.path().join("evil")).unwrap();
        let tgz = pack(from.path()).unwrap();
        let to = tempfile::tempdir().unwrap();
        let e = unpack(&tgz, &to.path().join("p"), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside the archive"), "{e}");
    }
}
