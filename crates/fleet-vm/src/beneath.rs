//! Reaching files of a VM's directory from this machine without ever leaving it. What
//! runs in a VM can put a link anywhere in its own directory (`sys/log/kv -> /etc`), so
//! every path this machine's side follows there is resolved with the kernel's
//! `RESOLVE_IN_ROOT` against the directory itself: a link to `/etc` leads to the
//! directory's own `etc`, and `..` stops at its top, however the VM changes its files
//! while they are read. Directories are made one level at a time the same way.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// A directory whose files are reached only within it.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path with a NUL"))
}

impl Root {
    /// The directory `path` itself, never what a link there points to.
    ///
    /// # Errors
    /// When `path` is not a directory that can be opened (a link is not one).
    pub fn open(path: &Path) -> std::io::Result<Root> {
        let c = c_path(path)?;
        // SAFETY: a valid C string; the descriptor is owned from here on.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Root {
            // SAFETY: a descriptor just opened and owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory `relative` below this one, resolved within it, as a root of its own.
    ///
    /// # Errors
    /// When it is not a directory there.
    pub fn below(&self, relative: &Path) -> std::io::Result<Root> {
        let dir = self.open_at(relative, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        Ok(Root {
            fd: dir.into(),
            path: self.path.join(relative),
        })
    }

    /// Opens `relative` with `flags` (and `mode` when it creates), resolved inside.
    ///
    /// # Errors
    /// The kernel's: not found, not a directory, ...
    pub fn open_at(&self, relative: &Path, flags: i32, mode: u32) -> std::io::Result<File> {
        let relative = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        let c = c_path(relative)?;
        // SAFETY: a plain struct of integers, all zero until set.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (flags | libc::O_CLOEXEC) as u64;
        how.mode = u64::from(mode);
        how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: openat2 with a live directory descriptor, a valid C string and a
        // struct of the size given.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened and owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd as i32) })
    }

    /// Opens the regular file `relative` (links not followed), with `flags` and `mode`:
    /// a named pipe or a device a VM put there is refused, never waited on (opening a
    /// pipe waits for its other end).
    ///
    /// # Errors
    /// As [`Root::open_at`]; something there that is not a regular file.
    pub fn open_file(&self, relative: &Path, flags: i32, mode: u32) -> std::io::Result<File> {
        let file = self.open_at(relative, flags | libc::O_NOFOLLOW | libc::O_NONBLOCK, mode)?;
        if !file.metadata()?.file_type().is_file() {
            return Err(std::io::Error::other(format!(
                "{} is not a regular file",
                relative.display()
            )));
        }
        // SAFETY: fcntl on a descriptor this function owns.
        let cleared = unsafe {
            let current = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
            current >= 0
                && libc::fcntl(file.as_raw_fd(), libc::F_SETFL, current & !libc::O_NONBLOCK) == 0
        };
        if !cleared {
            return Err(std::io::Error::last_os_error());
        }
        Ok(file)
    }

    /// Makes `relative` and the directories above it that are missing.
    ///
    /// # Errors
    /// When one cannot be made, or something that is not a directory is in the way.
    pub fn create_dir_all(&self, relative: &Path) -> std::io::Result<()> {
        let mut at = PathBuf::new();
        for part in relative.components() {
            let Component::Normal(name) = part else {
                continue;
            };
            let parent = self.open_at(&at, libc::O_PATH | libc::O_DIRECTORY, 0)?;
            let c = CString::new(name.as_bytes()).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "a name with a NUL")
            })?;
            // SAFETY: a live directory descriptor and a single name, which mkdirat does
            // not follow.
            let made = unsafe { libc::mkdirat(parent.as_raw_fd(), c.as_ptr(), 0o755) };
            if made != 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(e);
                }
            }
            at.push(name);
        }
        self.open_at(&at, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map(|_| ())
    }

    /// Appends `text` to the file `relative`, made when missing (its directory too).
    ///
    /// # Errors
    /// When it cannot be opened or written.
    pub fn append(&self, relative: &Path, text: &[u8]) -> std::io::Result<()> {
        if let Some(dir) = relative.parent() {
            self.create_dir_all(dir)?;
        }
        let mut file = self.open_file(
            relative,
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT,
            0o644,
        )?;
        std::io::Write::write_all(&mut file, text)
    }

    /// The entries of the directory `relative`: name and whether each is a directory,
    /// a regular file, or neither (links are neither: they are not followed).
    ///
    /// # Errors
    /// When it cannot be opened or read.
    pub fn entries(&self, relative: &Path) -> std::io::Result<Vec<(String, Kind)>> {
        let dir = self.open_at(relative, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        // The descriptor's own listing: the directory it names, whatever its path is now.
        let listing = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
        let mut found = Vec::new();
        for entry in listing {
            let entry = entry?;
            let kind = entry.file_type()?;
            let kind = if kind.is_dir() {
                Kind::Directory
            } else if kind.is_file() {
                Kind::File
            } else if kind.is_symlink() {
                Kind::Link
            } else {
                Kind::Other
            };
            found.push((entry.file_name().to_string_lossy().into_owned(), kind));
        }
        found.sort();
        Ok(found)
    }

    /// Removes the file (or link) `relative`; one that is not there is no error.
    ///
    /// # Errors
    /// When its directory cannot be opened, or it cannot be removed.
    pub fn remove_file(&self, relative: &Path) -> std::io::Result<()> {
        let (Some(dir), Some(name)) = (relative.parent(), relative.file_name()) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no file name",
            ));
        };
        let dir = match self.open_at(dir, libc::O_PATH | libc::O_DIRECTORY, 0) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            other => other?,
        };
        let c = CString::new(name.as_bytes()).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "a name with a NUL")
        })?;
        // SAFETY: a live directory descriptor and a single name, which unlinkat does not
        // follow.
        if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether `relative` is there (a link counts, unfollowed).
    pub fn exists(&self, relative: &Path) -> bool {
        self.open_at(relative, libc::O_PATH | libc::O_NOFOLLOW, 0)
            .is_ok()
    }

    /// Reads the file `relative`, at most `limit` bytes.
    ///
    /// # Errors
    /// When it cannot be opened or read, or is larger.
    pub fn read(&self, relative: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
        let file = self.open_file(relative, libc::O_RDONLY, 0)?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, limit + 1), &mut bytes)?;
        if bytes.len() as u64 > limit {
            return Err(std::io::Error::other(format!(
                "{} is larger than {limit} bytes",
                relative.display()
            )));
        }
        Ok(bytes)
    }
}

/// Renames `from_name` in the directory `from` to `to_name` in the directory `to`
/// (`renameat`): only the two names are looked up, each in its descriptor's directory.
///
/// # Errors
/// The kernel's.
pub fn rename_between(
    from: &File,
    from_name: &str,
    to: &File,
    to_name: &str,
) -> std::io::Result<()> {
    let (a, b) = (c_path(Path::new(from_name))?, c_path(Path::new(to_name))?);
    if from_name.contains('/') || to_name.contains('/') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a name, not a path",
        ));
    }
    // SAFETY: live directory descriptors and valid C strings.
    let renamed =
        unsafe { libc::renameat(from.as_raw_fd(), a.as_ptr(), to.as_raw_fd(), b.as_ptr()) };
    if renamed != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Directory,
    File,
    Link,
    Other,
}

/// Copies the tree `from` to `to` (made when missing), each resolved within itself:
/// links are copied as links, never followed.
///
/// # Errors
/// When a file cannot be read or written.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    copy_between(&Root::open(from)?, &Root::open(to)?)
}

/// Copies what is below `source` to below `target`, each resolved within itself.
///
/// # Errors
/// When a file cannot be read or written.
pub fn copy_between(source: &Root, target: &Root) -> std::io::Result<()> {
    copy_below(source, target, Path::new(""))
}

fn copy_below(source: &Root, target: &Root, at: &Path) -> std::io::Result<()> {
    for (name, kind) in source.entries(at)? {
        let path = at.join(&name);
        match kind {
            Kind::Directory => {
                target.create_dir_all(&path)?;
                copy_below(source, target, &path)?;
            }
            Kind::File => {
                let mut from = source.open_at(&path, libc::O_RDONLY | libc::O_NOFOLLOW, 0)?;
                let mode = std::os::unix::fs::PermissionsExt::mode(&from.metadata()?.permissions());
                let mut to = target.open_at(
                    &path,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW,
                    mode & 0o7777,
                )?;
                std::io::copy(&mut from, &mut to)?;
            }
            Kind::Link => {
                let parent = target.open_at(at, libc::O_PATH | libc::O_DIRECTORY, 0)?;
                let dir = source.open_at(at, libc::O_PATH | libc::O_DIRECTORY, 0)?;
                let link = std::fs::read_link(format!("/proc/self/fd/{}/{name}", dir.as_raw_fd()))?;
                let (c_link, c_name) = (c_path(&link)?, c_path(Path::new(&name))?);
                // SAFETY: live descriptor, valid C strings; symlinkat makes the link
                // itself and follows nothing.
                unsafe {
                    libc::unlinkat(parent.as_raw_fd(), c_name.as_ptr(), 0);
                    if libc::symlinkat(c_link.as_ptr(), parent.as_raw_fd(), c_name.as_ptr()) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
            }
            Kind::Other => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_dots_stay_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let (vm, host) = (dir.path().join("vm"), dir.path().join("host"));
        std::fs::create_dir_all(vm.join("sys/log")).unwrap();
        std::fs::create_dir_all(&host).unwrap();
        std::fs::write(host.join("secret"), "host's").unwrap();
        std::os::unix::fs::symlink(&host, vm.join("sys/log/kv")).unwrap();
        std::os::unix::fs::symlink(host.join("secret"), vm.join("sys/log/secret.log")).unwrap();
        let root = Root::open(&vm).unwrap();
        assert!(
            root.append(Path::new("sys/log/kv/pre-start.stdout.log"), b"out\n")
                .is_err(),
            "the link leads to the VM's own {}, which is not there",
            host.display()
        );
        assert!(
            !host.join("pre-start.stdout.log").exists(),
            "nothing reached the host"
        );
        std::fs::create_dir_all(vm.join(host.strip_prefix("/").unwrap())).unwrap();
        root.append(Path::new("sys/log/kv/pre-start.stdout.log"), b"out\n")
            .unwrap();
        assert!(!host.join("pre-start.stdout.log").exists());
        assert_eq!(
            std::fs::read_to_string(
                vm.join(host.strip_prefix("/").unwrap())
                    .join("pre-start.stdout.log")
            )
            .unwrap(),
            "out\n",
            "the link led inside the VM's directory"
        );
        assert!(root.read(Path::new("sys/log/secret.log"), 100).is_err());
        assert!(
            Root::open(&vm.join("sys/log/kv")).is_err(),
            "a link is not a root"
        );
        assert!(root.below(Path::new("sys/log")).is_ok());
        assert!(root.read(Path::new("../host/secret"), 100).is_err());
        // A named pipe is refused at once, not waited on.
        let fifo =
            std::ffi::CString::new(vm.join("sys/log/pipe.log").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        assert!(root.read(Path::new("sys/log/pipe.log"), 100).is_err());
        assert!(root.append(Path::new("sys/log/pipe.log"), b"x").is_err());
        root.remove_file(Path::new("sys/log/pipe.log")).unwrap();
        // Removing through a link removes nothing beyond it.
        root.remove_file(Path::new("sys/log/kv/secret")).unwrap();
        assert!(host.join("secret").exists(), "the host's file is left");
        assert!(
            root.exists(Path::new("sys/log/secret.log")),
            "a link is there"
        );
        root.remove_file(Path::new("sys/log/secret.log")).unwrap();
        assert!(!root.exists(Path::new("sys/log/secret.log")));
        assert!(host.join("secret").exists(), "only the link went");
        root.remove_file(Path::new("sys/nothing/here")).unwrap();
        std::os::unix::fs::symlink(host.join("secret"), vm.join("sys/log/secret.log")).unwrap();
        let kinds = root.entries(Path::new("sys/log")).unwrap();
        assert_eq!(
            kinds,
            [
                ("kv".to_string(), Kind::Link),
                ("secret.log".to_string(), Kind::Link)
            ]
        );
    }

    #[test]
    fn a_tree_is_copied_with_its_links_as_links() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(from.join("d")).unwrap();
        std::fs::write(from.join("d/f"), "data").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", from.join("l")).unwrap();
        copy_tree(&from, &to).unwrap();
        assert_eq!(std::fs::read_to_string(to.join("d/f")).unwrap(), "data");
        assert_eq!(
            std::fs::read_link(to.join("l")).unwrap(),
            Path::new("/etc/hostname")
        );
    }
}
