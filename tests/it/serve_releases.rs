//! Releases through `serve`'s director API in the order `bosh upload-release`,
//! `releases`, `inspect-release` and `delete-release` send their requests: the list
//! first, the package matches, then the tarball as the body.

use fleet_updater::config::ServeLimits;
use fleet_updater::release::{File, ReleaseBuilder, from_tarball};
use reqwest::Method;
use serde_json::Value;
use std::time::Duration;

use super::served::Served;

fn file(path: &str, text: &str) -> File {
    (path.to_string(), text.as_bytes().to_vec())
}

/// An echo service: one job, a package with a dependency. `source` changes the echo
/// package alone.
fn echo(version: &str, source: &str) -> ReleaseBuilder {
    ReleaseBuilder::new("echo", version)
        .job(
            "echo",
            vec![
                file("job.MF", "name: echo\npackages: [echo]\n"),
                file("monit", ""),
            ],
        )
        .package(
            "echo",
            &["base"],
            vec![file("packaging", "true\n"), file("echo.sh", source)],
        )
        .package("base", &[], vec![file("packaging", "true\n")])
}

/// The release manifest of a tarball, as the CLI sends it to `/packages/matches`.
fn manifest_of(tarball: &[u8]) -> String {
    let entries = fleet_updater::release::tgz_files(tarball, 1 << 30).unwrap();
    let manifest = entries.iter().find(|e| e.path == "release.MF").unwrap();
    String::from_utf8(manifest.bytes.clone()).unwrap()
}

async fn upload(s: &Served, tarball: Vec<u8>, query: &str) -> reqwest::Response {
    s.director(Method::POST, &format!("/releases{query}"))
        .header("content-type", "application/x-compressed")
        .body(tarball)
        .send()
        .await
        .unwrap()
}

async fn versions(s: &Served) -> Vec<String> {
    let releases = s.get_json("/releases").await;
    releases
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "echo")
        .flat_map(|r| r["release_versions"].as_array().unwrap().clone())
        .map(|v| v["version"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn upload_release_list_inspect_and_delete_follow_the_cli_sequences() {
    let s = Served::start(ServeLimits::default()).await;
    assert!(versions(&s).await.is_empty());

    // Nothing matches on an empty director: the whole tarball is sent.
    let v1 = echo("1", "echo one");
    let matches = s
        .send_yaml(Method::POST, "/packages/matches", manifest_of(&v1.build()))
        .await;
    assert_eq!(matches.status(), 200);
    assert_eq!(
        matches.json::<Vec<String>>().await.unwrap(),
        Vec::<String>::new()
    );
    let response = upload(&s, v1.build(), "").await;
    let task = s.wait_task(Served::task_of(&response)).await;
    assert_eq!(task["state"], "done", "{task}");
    assert_eq!(task["result"], "Created release 'echo/1'");
    assert_eq!(versions(&s).await, ["1"]);

    // Version 2 shares the base package: the CLI leaves it out.
    let v2 = echo("2", "echo two");
    let read = from_tarball(&v2.build()).unwrap();
    let base = read.packages[1].package.archive.fingerprint.clone();
    let matches = s
        .send_yaml(Method::POST, "/packages/matches", manifest_of(&v2.build()))
        .await;
    assert_eq!(matches.json::<Vec<String>>().await.unwrap(), [base]);
    let response = upload(&s, v2.build_without(&["base"]), "").await;
    let task = s.wait_task(Served::task_of(&response)).await;
    assert_eq!(task["state"], "done", "{task}");
    assert_eq!(versions(&s).await, ["1", "2"]);

    // The same upload again is no new version.
    let response = upload(&s, v2.build(), "").await;
    let task = s.wait_task(Served::task_of(&response)).await;
    assert_eq!(task["result"], "Release 'echo/2' already exists");

    let inspected = s.get_json("/releases/echo?version=2").await;
    let job = &inspected["jobs"][0];
    assert_eq!(job["name"], "echo");
    assert_eq!(
        job["fingerprint"],
        read.jobs[0].archive.fingerprint.as_str()
    );
    assert_eq!(job["sha1"], read.jobs[0].archive.digest.as_str());
    let packages: Vec<&str> = inspected["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(packages, ["echo", "base"]);
    let missing = s.send(Method::GET, "/releases/echo?version=9").await;
    assert_eq!(missing.status(), 404);

    let response = s.send(Method::DELETE, "/releases/echo?version=1").await;
    let task = s.wait_task(Served::task_of(&response)).await;
    assert_eq!(task["state"], "done", "{task}");
    assert_eq!(versions(&s).await, ["2"]);
    let tasks: Value = s.get_json("/tasks?verbose=1").await;
    let types: Vec<&str> = tasks
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["description"].as_str())
        .collect();
    assert!(types.contains(&"create release"), "{types:?}");
    assert!(types.contains(&"delete release"), "{types:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_tarball_is_refused_naming_the_file_and_field_and_nothing_is_kept() {
    let limits = ServeLimits {
        max_upload_bytes: 64 * 1024,
        ..ServeLimits::default()
    };
    let s = Served::start(limits).await;
    // The job archive as release.MF lists it, but with another digest.
    let tarball = echo("1", "echo").build();
    let mut entries = fleet_updater::release::tgz_files(&tarball, 1 << 30).unwrap();
    let manifest = entries.iter_mut().find(|e| e.path == "release.MF").unwrap();
    let text = String::from_utf8(manifest.bytes.clone()).unwrap();
    let sha = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("sha1: "))
        .unwrap()
        .to_string();
    manifest.bytes = text.replacen(&sha, &"f".repeat(40), 1).into_bytes();
    let files: Vec<(&str, &[u8])> = entries
        .iter()
        .map(|e| (e.path.as_str(), e.bytes.as_slice()))
        .collect();
    let response = upload(&s, fleet_updater::release::build_tgz(&files), "").await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], 30001);
    let description = body["description"].as_str().unwrap();
    assert!(
        description.starts_with("jobs/echo.tgz: sha1: sha1 digest is "),
        "{description}"
    );
    assert!(versions(&s).await.is_empty());

    let garbage = upload(&s, b"not a release".to_vec(), "").await;
    assert_eq!(garbage.status(), 400);
    assert!(
        Served::description(garbage)
            .await
            .starts_with("the release tarball: ")
    );

    let rebase = upload(&s, tarball.clone(), "?rebase=true").await;
    assert_eq!(rebase.status(), 400);
    assert!(
        Served::description(rebase)
            .await
            .contains("rebase is not supported")
    );

    let by_url = s
        .send_json(
            Method::POST,
            "/releases",
            r#"{"location":"https://example.com/r.tgz"}"#,
        )
        .await;
    assert_eq!(by_url.status(), 400);
    assert!(
        Served::description(by_url)
            .await
            .contains("from a URL is not supported")
    );

    // Over the upload limit, declared or not.
    let big: Vec<u8> = (0..1_000_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let too_large = upload(&s, big, "").await;
    assert_eq!(too_large.status(), 413);
    assert!(Served::description(too_large).await.contains("65536 bytes"));
    assert!(versions(&s).await.is_empty());
}

/// A fleet whose VMs are plain processes of this machine, nothing provisioned.
fn plain_fleet() -> fleet_updater::fleet::Definition {
    fleet_updater::fleet::Definition::parse(
        "iaas: processes
vms: processes
stemcells: [{name: bosh-local, os: local, version: '1'}]
plans: []
",
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_uploaded_to_plain_process_vms_is_refused_unless_the_configuration_allows_it() {
    let s = Served::start_fleet(
        tempfile::tempdir().unwrap(),
        &plain_fleet(),
        ServeLimits::default(),
    )
    .await;
    assert_eq!(s.info().await["cpi"], "processes");
    let refused = upload(&s, echo("1", "echo one").build(), "").await;
    assert_eq!(refused.status(), 403);
    let why = Served::description(refused).await;
    assert!(
        why.contains("plain processes of this machine") && why.contains("serve.releases_on_host"),
        "{why}"
    );
    assert!(versions(&s).await.is_empty(), "nothing was kept");

    let allowed = fleet_updater::config::ServeConfig {
        releases_on_host: true,
        ..fleet_updater::config::ServeConfig::default()
    };
    let s = Served::start_configured(tempfile::tempdir().unwrap(), &plain_fleet(), &allowed).await;
    let response = upload(&s, echo("1", "echo one").build(), "").await;
    let task = s.wait_task(Served::task_of(&response)).await;
    assert_eq!(task["state"], "done", "{task}");
    assert_eq!(versions(&s).await, ["1"]);
    // Through an external CPI, whose VMs are directories of this machine too.
    let mut through_cpi = fleet_updater::fleet::Definition::parse(
        "iaas: processes
cpi: {executable: fleet-updater}
stemcells: [{name: bosh-local, os: local, version: '1'}]
plans: []
",
    )
    .unwrap();
    through_cpi.supervisor = Some(std::path::PathBuf::from(env!(
        "CARGO_BIN_EXE_fleet-updater"
    )));
    let s = Served::start_fleet(
        tempfile::tempdir().unwrap(),
        &through_cpi,
        ServeLimits::default(),
    )
    .await;
    assert_eq!(s.info().await["cpi"], "fleet-updater cpi");
    let refused = upload(&s, echo("1", "echo one").build(), "").await;
    assert_eq!(
        refused.status(),
        403,
        "an external CPI's VMs run releases here too"
    );
    // The simulation runs no release: uploads are taken there.
    let simulated = Served::start(ServeLimits::default()).await;
    assert_eq!(simulated.info().await["cpi"], "simulated");
}

const PASSWORD: &str = "Upload-Test-Pw-1";

/// `serve` as a process of its own, whose memory is its own, with the user `admin`
/// (password [`PASSWORD`]); and the directory of its state.
fn serve_process() -> (tempfile::TempDir, super::serve_shared::Server) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yml");
    let users = format!("serve:\n  users: [{{name: admin, password: {PASSWORD}}}]\n");
    std::fs::write(&config, users).unwrap();
    let server = super::serve_shared::start(&config, &dir.path().join("state"), None);
    (dir, server)
}

/// A compression bomb (a tarball of under a megabyte inflating to 512 MiB of zeros)
/// uploaded to a `serve` process is refused while it inflates, naming the bound, and the
/// process's own peak memory stays far below what the bomb would take.
#[tokio::test(flavor = "multi_thread")]
async fn a_compression_bomb_is_refused_while_it_inflates_and_serve_stays_small() {
    use std::io::Read;
    let (_dir, server) = serve_process();
    // Half a gibibyte of zeros, packed as it streams: read whole, it would take twice the
    // peak allowed below.
    let size: u64 = 512 << 20;
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut tar = tar::Builder::new(gz);
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, "release.bin", std::io::repeat(0).take(size))
        .unwrap();
    let bomb = tar.into_inner().unwrap().finish().unwrap();
    assert!(bomb.len() < 8 << 20, "{} bytes", bomb.len());

    let client = super::served::client_trusting(&server.ca);
    let response = post_release(&client, &server, bomb).await;
    assert_eq!(response.status(), 400);
    let said: Value = response.json().await.unwrap();
    let description = said["description"].as_str().unwrap();
    assert!(
        description.contains("unpacks to more than 64 MiB"),
        "{description}"
    );
    let peak = peak_mib(server.child.id());
    assert!(peak < 256, "serve peaked at {peak} MiB");
}

/// `bosh upload-release` of `tarball` to the `serve` process `server`, as `admin`.
async fn post_release(
    client: &reqwest::Client,
    server: &super::serve_shared::Server,
    tarball: Vec<u8>,
) -> reqwest::Response {
    client
        .post(format!("https://{}/releases", server.director))
        .basic_auth("admin", Some(PASSWORD))
        .header("content-type", "application/x-compressed")
        .body(tarball)
        .send()
        .await
        .unwrap()
}

/// The peak memory of process `pid` so far, in MiB.
fn peak_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024
}

/// A release that does not compress (a package of 96 MiB of noise) is spooled to disk as
/// it arrives, unpacked to files and kept in the store piece by piece: `serve`'s peak
/// memory grows by less than the release's size, where holding the upload and its
/// package in memory took twice it; the package is kept, and the spool emptied.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_release_is_kept_without_being_held_in_memory() {
    let (dir, server) = serve_process();
    let size = 96usize << 20;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = Vec::with_capacity(size);
    while noise.len() < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        noise.extend_from_slice(&state.to_le_bytes());
    }
    let release = echo("1", "echo big")
        .package(
            "big",
            &[],
            vec![file("packaging", "true\n"), ("noise.bin".into(), noise)],
        )
        .build();
    assert!(release.len() > size, "{} bytes", release.len());
    let before = peak_mib(server.child.id());

    // A debug build takes a while over the release (TLS, inflating, hashing, copying).
    let loopback = "127.0.0.1".parse().unwrap();
    let client = super::served::client_waiting(&server.ca, loopback, Duration::from_secs(600));
    let started = tokio::time::Instant::now();
    let response = post_release(&client, &server, release).await;
    assert_eq!(response.status(), 302, "{:?}", response.text().await);
    let task = response.headers()["location"].to_str().unwrap().to_string();
    let get = |path: String| {
        let url = format!("https://{}{path}", server.director);
        super::serve_shared::get_as(&client, url, PASSWORD)
    };
    let state = loop {
        let task = get(task.clone()).await;
        let state = task["state"].as_str().unwrap().to_string();
        if state != "queued" && state != "processing" {
            break state;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(state, "done");
    // Held whole, the upload and its package took twice the release at once; spooled,
    // what grows is mostly SQLite's page cache (64 MiB at most).
    let peak = peak_mib(server.child.id());
    assert!(
        peak - before < (size >> 20) as u64,
        "serve peaked at {peak} MiB, from {before} MiB before the upload, in {:?}",
        started.elapsed()
    );
    let shown = get("/releases/echo?version=1".into()).await;
    let big = shown["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "big")
        .unwrap();
    assert!(big["blobstore_id"].as_str().is_some_and(|b| b.len() == 40));
    assert!(
        !dir.path()
            .join("state/uploads")
            .read_dir()
            .unwrap()
            .any(|_| true),
        "nothing is left in the spool"
    );
}
