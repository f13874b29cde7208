use std::os::unix::fs::PermissionsExt;

use super::*;

/// A small release source. The fingerprints asserted below are the ones `bosh
/// create-release` (CLI v7) printed for exactly these files.
fn sample() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str, mode: u32| {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    write("config/final.yml", "name: sample\n", 0o644);
    write("config/blobs.yml", "--- {}\n", 0o644);
    write(
        "jobs/web/spec",
        "name: web\ntemplates:\n  ctl.erb: bin/ctl\n  conf.erb: config/web.conf\npackages: [server]\nproperties:\n  web.port: {default: 80}\n",
        0o644,
    );
    write(
        "jobs/web/monit",
        "check process web\n  with pidfile /var/vcap/sys/run/web/pid\n",
        0o644,
    );
    write(
        "jobs/web/templates/ctl.erb",
        "#!/bin/sh\necho <%= p(\"web.port\") %>\n",
        0o755,
    );
    write(
        "jobs/web/templates/conf.erb",
        "port=<%= p(\"web.port\") %>\n",
        0o644,
    );
    write(
        "packages/server/spec",
        "name: server\ndependencies: [lib]\nfiles:\n- server/**/*\nexcluded_files:\n- server/sub/skip.txt\n",
        0o644,
    );
    write(
        "packages/server/packaging",
        "set -e\ncp -a server/* $BOSH_INSTALL_TARGET\n",
        0o644,
    );
    write("src/server/main.c", "int main(){return 0;}\n", 0o644);
    write("src/server/sub/run.sh", "#!/bin/sh\necho run\n", 0o755);
    write("src/server/sub/skip.txt", "skip\n", 0o644);
    write("blobs/server/data.bin", "blobdata\n", 0o644);
    write("packages/lib/spec", "name: lib\nfiles: [lib/*.h]\n", 0o644);
    write(
        "packages/lib/packaging",
        "cp lib/*.h $BOSH_INSTALL_TARGET\n",
        0o644,
    );
    write("src/lib/x.h", "#define X 1\n", 0o644);
    dir
}

fn package<'a>(release: &'a crate::ReleaseArchive, name: &str) -> &'a crate::PackageArchive {
    release
        .packages
        .iter()
        .find(|p| p.package.archive.name == name)
        .unwrap()
}

#[test]
fn a_source_builds_the_release_the_cli_builds() {
    let dir = sample();
    let release = crate::from_tarball(&build_from_source(dir.path(), "0+dev.1").unwrap()).unwrap();
    assert_eq!(release.manifest.name, "sample");
    assert_eq!(release.manifest.version, "0+dev.1");
    assert_eq!(
        release.jobs[0].archive.fingerprint,
        "00b0ad9f332ff7bf08d89291a8cf9b7df56fe862c2fe1f6a68cb746847855725"
    );
    let server = package(&release, "server");
    assert_eq!(
        server.package.archive.fingerprint,
        "24e5275b30b12d65c81fdb1b52dc6c0a16556b0967ed2af23fd6d62745c9f647"
    );
    assert_eq!(server.package.dependencies, ["lib"]);
    assert_eq!(
        package(&release, "lib").package.archive.fingerprint,
        "29502aff2b6ba565729421866a6086feea7d6e891baf30754654651f044e1274"
    );
    let bytes = &server.bytes.as_ref().unwrap().read().unwrap();
    let mut paths = crate::tgz_paths(bytes, u64::MAX).unwrap();
    paths.sort();
    assert_eq!(
        paths,
        ["packaging", "server/main.c", "server/sub/run.sh"],
        "files: from src/, excluded_files out, an untracked blob out"
    );
    let unpacked = tempfile::tempdir().unwrap();
    crate::unpack(bytes, unpacked.path(), u64::MAX).unwrap();
    let mode = |p: &str| {
        std::fs::metadata(unpacked.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("server/sub/run.sh"), 0o755, "modes kept");
    assert_eq!(mode("server/main.c"), 0o644);
    let again = crate::from_tarball(&build_from_source(dir.path(), "0+dev.2").unwrap()).unwrap();
    assert_eq!(
        package(&again, "server").package.archive.fingerprint,
        server.package.archive.fingerprint,
        "a version's packages are the same packages"
    );
}

#[test]
fn a_tracked_blob_is_packaged_and_a_missing_one_is_named() {
    let dir = sample();
    std::fs::write(
        dir.path().join("config/blobs.yml"),
        "server/data.bin: {size: 9, sha: abc}\n",
    )
    .unwrap();
    let release = crate::from_tarball(&build_from_source(dir.path(), "1").unwrap()).unwrap();
    let paths = crate::tgz_paths(
        &package(&release, "server")
            .bytes
            .as_ref()
            .unwrap()
            .read()
            .unwrap(),
        u64::MAX,
    )
    .unwrap();
    assert!(paths.contains(&"server/data.bin".to_string()), "{paths:?}");
    std::fs::remove_file(dir.path().join("blobs/server/data.bin")).unwrap();
    let e = build_from_source(dir.path(), "1").unwrap_err().to_string();
    assert!(e.contains("blob `server/data.bin` is not in blobs/"), "{e}");
}

#[test]
fn what_the_cli_refuses_is_refused_by_name() {
    let dir = sample();
    std::fs::write(dir.path().join("jobs/web/spec"), "name: other\n").unwrap();
    let e = build_from_source(dir.path(), "1").unwrap_err().to_string();
    assert!(
        e.contains("`other` is not the job's directory name `web`"),
        "{e}"
    );

    let dir = sample();
    std::fs::remove_file(dir.path().join("jobs/web/templates/conf.erb")).unwrap();
    let e = build_from_source(dir.path(), "1").unwrap_err().to_string();
    assert!(e.contains("`conf.erb` is not in templates/"), "{e}");

    let dir = sample();
    std::fs::write(
        dir.path().join("packages/lib/spec"),
        "name: lib\nfiles: [nope/*]\n",
    )
    .unwrap();
    let e = build_from_source(dir.path(), "1").unwrap_err().to_string();
    assert!(
        e.contains("packages/lib/spec") && e.contains("matches `nope/*`"),
        "{e}"
    );

    let dir = sample();
    std::fs::remove_file(dir.path().join("packages/lib/packaging")).unwrap();
    let e = build_from_source(dir.path(), "1").unwrap_err().to_string();
    assert!(e.contains("packages/lib/packaging: is missing"), "{e}");

    let dir = sample();
    std::fs::write(dir.path().join("config/final.yml"), "blobstore: {}\n").unwrap();
    let e = build_from_source(dir.path(), "1").unwrap_err().to_string();
    assert!(e.contains("final.yml: name: is missing"), "{e}");

    let e = build_from_source(&dir.path().join("none"), "1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("config/final.yml: is missing"), "{e}");
}
