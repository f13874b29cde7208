//! `director upload-release`, `releases` and `delete-release` through the binary, on a
//! state directory of its own.

use fleet_updater::release::{File, ReleaseBuilder};

use crate::support::{Workspace, fleet_updater};

fn file(path: &str, text: &str) -> File {
    (path.to_string(), text.as_bytes().to_vec())
}

fn director(w: &Workspace, args: &[&str]) -> (i32, String, String) {
    let output = fleet_updater()
        .args(["director", "--state-dir"])
        .arg(w.path("state"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn a_release_is_uploaded_listed_and_deleted_and_a_bad_one_changes_nothing() {
    let w = Workspace::new();
    let tarball = ReleaseBuilder::new("greeter", "3")
        .job(
            "greeter",
            vec![
                file("job.MF", "name: greeter\npackages: [greeting]\n"),
                file("monit", ""),
            ],
        )
        .package("greeting", &[], vec![file("packaging", "true\n")])
        .build();
    let path = w.path("greeter-3.tgz");
    std::fs::write(&path, &tarball).unwrap();

    let (code, out, err) = director(&w, &["upload-release", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("done: Created release 'greeter/3'"), "{out}");
    let (code, out, _) = director(&w, &["upload-release", path.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("Release 'greeter/3' already exists"), "{out}");

    let (_, listing, _) = director(&w, &["releases"]);
    let line = listing.lines().find(|l| l.starts_with("greeter")).unwrap();
    assert!(
        line.contains(" 3 ") && line.contains("archives"),
        "{listing}"
    );

    // Not a release: refused before the fleet is touched, naming the file.
    let bad = w.write("bad.tgz", "not a release");
    let (code, _, err) = director(&w, &["upload-release", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.tgz") && err.contains("the release tarball"),
        "{err}"
    );

    let (code, out, err) = director(&w, &["delete-release", "greeter/3"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Deleted 1 release version(s)"), "{out}");
    let (code, _, err) = director(&w, &["delete-release", "greeter/3"]);
    assert_eq!(code, 1);
    assert!(err.contains("release `greeter/3` not found"), "{err}");
}

#[test]
fn a_release_source_is_built_as_the_next_dev_version_and_unchanged_sources_upload_nothing() {
    let w = Workspace::new();
    let repository = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = w.path("kv-source");
    crate::support::copy_tree(&repository.join("config/releases/kv"), &source);
    let source_arg = source.to_str().unwrap();

    let (code, out, err) = director(&w, &["upload-release", source_arg]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Created release 'kv/0+dev.1'"), "{out}");
    let (code, out, err) = director(&w, &["upload-release", source_arg]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("release kv/0+dev.1 has these sources already"),
        "{out}"
    );

    // A changed job is a new dev version; its unchanged package is the same package.
    let spec = source.join("jobs/kv/spec");
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(&spec, format!("{text}\n# changed\n")).unwrap();
    let (code, out, err) = director(&w, &["upload-release", source_arg]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Created release 'kv/0+dev.2'"), "{out}");
    let (code, out, err) = director(&w, &["upload-release", "--version", "7", source_arg]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Created release 'kv/7'"), "{out}");

    // A source with a problem is refused before anything is uploaded, naming the file.
    std::fs::remove_file(source.join("packages/kv-server/packaging")).unwrap();
    let (code, _, err) = director(&w, &["upload-release", source_arg]);
    assert_eq!(code, 2);
    assert!(
        err.contains("packages/kv-server/packaging: is missing"),
        "{err}"
    );
    let (_, listing, _) = director(&w, &["releases"]);
    assert_eq!(
        listing.lines().filter(|l| l.starts_with("kv")).count(),
        3,
        "{listing}"
    );
}
