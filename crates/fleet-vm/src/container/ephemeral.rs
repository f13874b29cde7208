//! A VM's ephemeral disk of `disk` MB (a `vm_type` cloud property): an ext4 file
//! system in an image in the VM's system directory, loop-mounted on this machine at the
//! system directory's `ephemeral/` and bound at `/var/vcap/data` in the VM, so that what
//! the VM writes there is bounded by it, as on a VM with a disk of that size. It is
//! mounted when the container starts and unmounted when it stops; a mount that a crash
//! left is unmounted by the next clean-up, and a machine restart leaves none.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::ContainerError;

const IMAGE: &str = "ephemeral.img";
const MOUNT: &str = "ephemeral";

/// Where the disk of the VM whose system directory is `system` is mounted.
pub fn mount_point(system: &Path) -> PathBuf {
    system.join(MOUNT)
}

/// Whether a file system is mounted at `at` in this process's mount namespace.
pub fn mounted(at: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    // The mount point is the fifth field, with spaces and the like escaped in octal.
    let wanted = at.to_string_lossy().replace(' ', "\\040");
    table
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(wanted.as_str()))
}

fn run(program: &str, args: &[&std::ffi::OsStr], what: &str) -> Result<(), ContainerError> {
    let output = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| ContainerError::Io {
            what: format!("{what} ({program})"),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(ContainerError::Io {
            what: what.to_string(),
            source: std::io::Error::other(format!(
                "{program} {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )),
        })
    }
}

/// The VM's disk of `mb` MB made (once: it keeps what the VM wrote when its container
/// starts again) and mounted; where it is mounted.
///
/// # Errors
/// When the image cannot be made, or `mkfs.ext4` or `mount` fail.
pub fn prepare(system: &Path, mb: u64) -> Result<PathBuf, ContainerError> {
    let (image, at) = (system.join(IMAGE), mount_point(system));
    if !image.exists() {
        let made = (|| -> std::io::Result<()> {
            let file = std::fs::File::create(&image)?;
            file.set_len(mb.saturating_mul(1024 * 1024))
        })();
        made.map_err(|source| ContainerError::Io {
            what: format!("the VM's ephemeral disk {}", image.display()),
            source,
        })?;
        run(
            "mkfs.ext4",
            &[
                "-q".as_ref(),
                "-F".as_ref(),
                "-m".as_ref(),
                "0".as_ref(),
                "-E".as_ref(),
                "lazy_itable_init=1,lazy_journal_init=1".as_ref(),
                image.as_os_str(),
            ],
            "making the VM's ephemeral disk",
        )?;
    }
    std::fs::create_dir_all(&at).map_err(|source| ContainerError::Io {
        what: at.display().to_string(),
        source,
    })?;
    if !mounted(&at) {
        run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                image.as_os_str(),
                at.as_os_str(),
            ],
            "mounting the VM's ephemeral disk",
        )?;
    }
    Ok(at)
}

/// Unmounts the VM's disk where it is mounted (its loop device goes with it).
pub fn release(system: &Path) {
    let at = mount_point(system);
    if mounted(&at) {
        let _ = run(
            "umount",
            &["-l".as_ref(), at.as_os_str()],
            "unmounting the VM's ephemeral disk",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_mounted_and_a_plain_directory_is_not() {
        assert!(mounted(Path::new("/")) || mounted(Path::new("/proc")));
        let dir = tempfile::tempdir().unwrap();
        assert!(!mounted(dir.path()));
    }
}
