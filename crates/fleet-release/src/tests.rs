//! A whole release read back from the tarball the builder writes, and each way it can be
//! wrong named by file and field.

use super::*;

const SPEC: &str = "name: kv\ntemplates:\n  ctl.erb: bin/ctl\npackages: [kv-server]\nproperties:\n  kv.port:\n    default: 8080\n";

fn f(path: &str, text: &str) -> File {
    (path.to_string(), text.as_bytes().to_vec())
}

fn release(version: &str) -> ReleaseBuilder {
    ReleaseBuilder::new("kv", version)
        .job(
            "kv",
            vec![
                f("job.MF", SPEC),
                f("monit", "check process kv\n"),
                f("templates/ctl.erb", "#!/bin/bash\n"),
            ],
        )
        .package(
            "kv-server",
            &["runtime"],
            vec![
                f("packaging", "cp kv.py $BOSH_INSTALL_TARGET\n"),
                f("kv.py", ""),
            ],
        )
        .package("runtime", &[], vec![f("packaging", "true\n")])
}

#[test]
fn a_built_release_reads_back_whole() {
    let read = from_tarball(&release("1").build()).unwrap();
    assert_eq!(read.manifest.name, "kv");
    assert_eq!(read.manifest.version, "1");
    assert_eq!(read.jobs[0].files.spec.packages, ["kv-server"]);
    assert_eq!(read.packages[0].package.dependencies, ["runtime"]);
    assert!(read.packages.iter().all(|p| p.bytes.is_some()));
    // The same sources give the same fingerprints, whatever the release version.
    let again = from_tarball(&release("2").build()).unwrap();
    assert_eq!(
        read.jobs[0].archive.fingerprint,
        again.jobs[0].archive.fingerprint
    );
}

#[test]
fn a_package_may_be_left_out_a_job_may_not() {
    let read = from_tarball(&release("1").build_without(&["runtime"])).unwrap();
    assert!(read.packages[1].bytes.is_none());
    assert!(read.packages[0].bytes.is_some());
}

#[test]
fn a_directory_reads_as_its_tarball() {
    let dir = tempfile::tempdir().unwrap();
    for entry in tgz_files(&release("1").build(), 1 << 30).unwrap() {
        let path = dir.path().join(&entry.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, entry.bytes).unwrap();
    }
    let read = from_path(dir.path()).unwrap();
    assert_eq!(read.jobs.len(), 1);
    assert_eq!(read.packages.len(), 2);
}

/// Rewrites one file of the built release.
fn tampered(path: &str, change: impl Fn(Vec<u8>) -> Option<Vec<u8>>) -> Vec<u8> {
    let entries = tgz_files(&release("1").build(), 1 << 30).unwrap();
    let kept: Vec<(String, Vec<u8>)> = entries
        .into_iter()
        .filter_map(|e| {
            if e.path == path {
                change(e.bytes).map(|b| (e.path, b))
            } else {
                Some((e.path, e.bytes))
            }
        })
        .collect();
    let refs: Vec<(&str, &[u8])> = kept
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    build_tgz(&refs)
}

fn error_of(tarball: &[u8]) -> String {
    from_tarball(tarball).unwrap_err().to_string()
}

#[test]
fn a_wrong_digest_names_the_archive() {
    let e = error_of(&tampered("jobs/kv.tgz", |mut b| {
        b.push(0);
        Some(b)
    }));
    assert!(e.starts_with("jobs/kv.tgz: sha1: sha1 digest is "), "{e}");
}

#[test]
fn a_missing_job_archive_is_named() {
    let e = error_of(&tampered("jobs/kv.tgz", |_| None));
    assert_eq!(e, "jobs/kv.tgz: is missing, but release.MF lists job `kv`");
}

#[test]
fn a_manifest_problem_names_release_mf_and_the_key() {
    let e = error_of(&tampered("release.MF", |b| {
        Some(
            String::from_utf8(b)
                .unwrap()
                .replace("name: kv\nversion", "version")
                .into_bytes(),
        )
    }));
    assert!(e.starts_with("release.MF: "), "{e}");
    assert!(e.contains("name: is missing"), "{e}");
    let e = error_of(&tampered("release.MF", |_| None));
    assert_eq!(e, "the release: has no `release.MF`");
}

#[test]
fn not_a_tarball_is_said() {
    let e = error_of(b"this is no release");
    assert!(e.starts_with("the release tarball: "), "{e}");
}

#[test]
fn a_job_needing_a_package_the_release_lacks_is_refused() {
    let bad = ReleaseBuilder::new("kv", "1")
        .job(
            "kv",
            vec![
                f("job.MF", "name: kv\npackages: [nowhere]\n"),
                f("monit", ""),
            ],
        )
        .build();
    let e = error_of(&bad);
    assert_eq!(
        e,
        "jobs/kv.tgz: packages: `nowhere` is not a package of the release"
    );
}

/// A gzipped tarball of one file of `size` zeros, built as it streams: a bomb of any size
/// in a few kilobytes of memory per megabyte it packs to.
fn zeros(path: &str, size: u64) -> Vec<u8> {
    use std::io::Read;
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut tar = tar::Builder::new(gz);
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, path, std::io::repeat(0).take(size))
        .unwrap();
    tar.into_inner().unwrap().finish().unwrap()
}

#[test]
fn a_tarball_is_read_within_its_bounds_which_name_themselves() {
    use crate::{UnpackLimits, from_tarball_within};
    let small = UnpackLimits {
        max_bytes: 1 << 20,
        max_entries: 3,
        max_expansion: 8,
    };
    let bomb = zeros("blob", 4 << 20);
    let e = from_tarball_within(&bomb, &small).unwrap_err().to_string();
    assert!(e.contains("unpacks to more than 1 MiB"), "{e}");
    // Packing little, a tarball may inflate to the floor, not past it: a thousandfold
    // bomb is refused at 64 MiB, whatever the absolute bound.
    let big_bomb = zeros("blob", 80 << 20);
    assert!(big_bomb.len() < 1 << 20, "{}", big_bomb.len());
    let e = from_tarball_within(&big_bomb, &UnpackLimits::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("unpacks to more than 64 MiB"), "{e}");
    // More files than allowed: refused, not some of them dropped.
    let many: Vec<(String, Vec<u8>)> = (0..5).map(|i| (format!("f{i}"), vec![b'x'])).collect();
    let refs: Vec<(&str, &[u8])> = many
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let e = from_tarball_within(&build_tgz(&refs), &small)
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than 3 files"), "{e}");
    // A release.MF past a document's size is refused while it is read.
    let manifest = zeros("release.MF", 5 << 20);
    let e = from_tarball_within(&manifest, &UnpackLimits::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`release.MF` is larger than 4194304 bytes"),
        "{e}"
    );
    // A release within them reads as before.
    let roomy = UnpackLimits {
        max_entries: 100,
        ..small
    };
    assert!(from_tarball_within(&release("1").build(), &roomy).is_ok());
}

/// `tarball` written to a file and read from it, its packages spooled under `spool`.
fn from_file(
    tarball: &[u8],
    limits: &UnpackLimits,
    spool: &std::path::Path,
) -> Result<ReleaseArchive, ReleaseError> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), tarball).unwrap();
    crate::from_file_within(file.path(), limits, spool)
}

#[test]
fn a_release_read_from_a_file_spools_its_packages_and_reads_as_from_memory() {
    let spool = tempfile::tempdir().unwrap();
    let tarball = release("1").build();
    let spooled = from_file(&tarball, &UnpackLimits::default(), spool.path()).unwrap();
    let held = from_tarball(&tarball).unwrap();
    assert_eq!(spooled.manifest, held.manifest);
    assert_eq!(spooled.jobs[0].bytes, held.jobs[0].bytes);
    for (a, b) in spooled.packages.iter().zip(&held.packages) {
        let (a, b) = (a.bytes.as_ref().unwrap(), b.bytes.as_ref().unwrap());
        assert!(
            a.file().is_some_and(|f| f.starts_with(spool.path())),
            "{a:?}"
        );
        assert_eq!(a.sha1(), b.sha1());
        assert_eq!(a.read().unwrap(), b.read().unwrap());
    }
    // Its files go with it.
    drop(spooled);
    assert_eq!(std::fs::read_dir(spool.path()).unwrap().count(), 0);
    // What memory refuses, the file refuses alike, and leaves nothing behind.
    let e = from_file(
        &zeros("release.MF", 5 << 20),
        &UnpackLimits::default(),
        spool.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`release.MF` is larger than 4194304 bytes"),
        "{e}"
    );
    let e = from_file(
        &zeros("blob", 80 << 20),
        &UnpackLimits::default(),
        spool.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("unpacks to more than 64 MiB"), "{e}");
    assert_eq!(std::fs::read_dir(spool.path()).unwrap().count(), 0);
}

/// A package archive is a tarball again: a bomb nested in one is refused as one sent
/// whole would be, from memory and from a file alike.
#[test]
fn a_bomb_nested_in_a_package_is_refused_within_the_same_bounds() {
    let zeros: File = ("zeros".into(), vec![0u8; 80 << 20]);
    let tarball = ReleaseBuilder::new("kv", "1")
        .job(
            "kv",
            vec![f("job.MF", "name: kv\npackages: [big]\n"), f("monit", "")],
        )
        .package("big", &[], vec![f("packaging", "true\n"), zeros])
        .build();
    assert!(tarball.len() < 1 << 20, "{}", tarball.len());
    let e = from_tarball_within(&tarball, &UnpackLimits::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("packages/big.tgz") && e.contains("unpacks to more than 64 MiB"),
        "{e}"
    );
    let spool = tempfile::tempdir().unwrap();
    let e = from_file(&tarball, &UnpackLimits::default(), spool.path())
        .unwrap_err()
        .to_string();
    assert!(e.contains("unpacks to more than 64 MiB"), "{e}");
    // This machine's own files are trusted to inflate as far as they do.
    assert!(from_tarball(&tarball).is_ok());
}
