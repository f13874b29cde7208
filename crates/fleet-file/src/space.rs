//! How full the filesystem holding a path is: what a VM's vitals report, and what tells
//! an operator that the director's state directory is about to stop taking writes.

use std::path::Path;

/// Percent of the blocks and of the inodes used on the filesystem holding `path`, from
/// `statvfs`; `None` when it cannot be asked.
pub fn disk_use(path: &Path) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct it is given.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a struct of the right type.
    if unsafe { libc::statvfs(c.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    let share = |total: u64, free: u64| {
        if total == 0 {
            0
        } else {
            (100 * total.saturating_sub(free)).div_ceil(total)
        }
    };
    Some((
        share(stat.f_blocks as u64, stat.f_bfree as u64),
        share(stat.f_files as u64, stat.f_ffree as u64),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filesystem_is_used_by_a_share_and_a_missing_path_cannot_be_asked() {
        let (blocks, inodes) = disk_use(Path::new("/")).unwrap();
        assert!(blocks <= 100 && inodes <= 100);
        assert_eq!(disk_use(Path::new("/no/such/path/here")), None);
    }
}
