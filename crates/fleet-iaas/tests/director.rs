//! The director deploying a real release on the process-backed IaaS: a package compiled
//! with `cc` by its packaging script, a job that runs what it built under bpm, and
//! lifecycle scripts that record what they do. Real processes in real time: timings are
//! short, and no assertion depends on how long anything took.

use std::sync::Arc;
use std::time::Duration;

use fleet_director::cpi::Cpi;
use fleet_director::model::{Stemcell, TaskState};
use fleet_director::{DeployOptions, Director, DirectorSettings};
use fleet_iaas::cloud::{ProcessCloud, Supervision};
use fleet_release::{File, ReleaseBuilder, from_tarball};
use fleet_store::SqliteStore;
use fleet_vm::supervisor::Timings;

fn file(path: &str, text: &str) -> File {
    (path.to_string(), text.as_bytes().to_vec())
}

const SERVER_C: &str = r#"#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
  FILE *f = fopen(argv[1], "a");
  fprintf(f, "%s:running\n", argv[2]);
  fclose(f);
  for (;;) pause();
}
"#;

/// A hook script of the greeter job that records `INSTANCE:HOOK`.
fn hook(name: &str) -> String {
    format!(
        "#!/bin/sh\necho <%= spec.name %>/<%= spec.index %>:{name} >> <%= p('greeter.record') %>\n"
    )
}

/// The recorder job: no process, every lifecycle script, each recording
/// `INSTANCE:recorder-HOOK`.
fn recorder() -> Vec<File> {
    let hooks = [
        "pre-start",
        "post-start",
        "post-deploy",
        "pre-stop",
        "drain",
        "post-stop",
    ];
    let mut spec = String::from("name: recorder\ntemplates:\n  note.erb: config/note\n");
    for h in hooks {
        spec.push_str(&format!("  {h}.erb: bin/{h}\n"));
    }
    spec.push_str("properties:\n  recorder.record: {description: the file it records in}\n");
    spec.push_str("  recorder.note: {description: a line of configuration, default: ''}\n");
    let mut files = vec![
        file("job.MF", &spec),
        file("monit", ""),
        file("templates/note.erb", "<%= p('recorder.note') %>\n"),
    ];
    let me = "<%= spec.name %>/<%= spec.index %>";
    for h in hooks {
        let mut script =
            format!("#!/bin/sh\necho {me}:recorder-{h} >> <%= p('recorder.record') %>\n");
        // What BOSH tells a stop's scripts, on a line of its own.
        if h == "pre-stop" {
            script.push_str(&format!(
                "echo {me}:next-state $BOSH_VM_NEXT_STATE $BOSH_INSTANCE_NEXT_STATE $BOSH_DEPLOYMENT_NEXT_STATE >> <%= p('recorder.record') %>\n"
            ));
        }
        if h == "drain" {
            script.push_str(&format!(
                "echo {me}:drain-args $* >> <%= p('recorder.record') %>\necho 0\n"
            ));
        }
        files.push(file(&format!("templates/{h}.erb"), &script));
    }
    files
}

fn release(pre_start_fails: bool) -> Vec<u8> {
    let mut job = vec![
        file(
            "job.MF",
            "name: greeter\ntemplates:\n  pre-start.erb: bin/pre-start\n  post-start.erb: bin/post-start\n  post-deploy.erb: bin/post-deploy\n  pre-stop.erb: bin/pre-stop\n  drain.erb: bin/drain\n  post-stop.erb: bin/post-stop\n  bpm.yml.erb: config/bpm.yml\npackages: [greeter-bin]\nproperties:\n  greeter.record:\n    description: the file the scripts record in\n",
        ),
        file(
            "monit",
            "check process greeter\n  with pidfile /var/vcap/sys/run/bpm/greeter/greeter.pid\n  start program \"/var/vcap/jobs/bpm/bin/bpm start greeter\"\n  stop program \"/var/vcap/jobs/bpm/bin/bpm stop greeter\"\n",
        ),
        file(
            "templates/bpm.yml.erb",
            "processes:\n- name: greeter\n  executable: /var/vcap/packages/greeter-bin/bin/greeter\n  args: [<%= p('greeter.record') %>, <%= spec.name %>/<%= spec.index %>]\n",
        ),
        file("templates/post-start.erb", &hook("post-start")),
        file("templates/post-deploy.erb", &hook("post-deploy")),
        file("templates/pre-stop.erb", &hook("pre-stop")),
        file("templates/post-stop.erb", &hook("post-stop")),
        file(
            "templates/drain.erb",
            &format!(
                "{}echo 0\n",
                hook("drain").trim_end_matches('\n').to_string() + "\n"
            ),
        ),
    ];
    let pre_start = if pre_start_fails {
        format!(
            "{}echo cannot find my config >&2\nexit 7\n",
            hook("pre-start")
        )
    } else {
        hook("pre-start")
    };
    job.push(file("templates/pre-start.erb", &pre_start));
    ReleaseBuilder::new("greeter", if pre_start_fails { "2" } else { "1" })
        .job("greeter", job)
        .job("recorder", recorder())
        .package(
            "greeter-bin",
            &[],
            vec![
                file(
                    "packaging",
                    "mkdir -p $BOSH_INSTALL_TARGET/bin\ncc -o $BOSH_INSTALL_TARGET/bin/greeter greeter/server.c\n",
                ),
                file("greeter/server.c", SERVER_C),
            ],
        )
        .build()
}

fn manifest(record: &std::path::Path, version: &str) -> String {
    let recorder = format!("{{record: {}}}", record.display());
    manifest_with(record, version, &recorder)
}

/// The manifest with the recorder job's properties as given.
fn manifest_with(record: &std::path::Path, version: &str, recorder: &str) -> String {
    format!(
        "name: greeter
releases: [{{name: greeter, version: '{version}'}}]
stemcells: [{{alias: default, os: jammy, version: '1'}}]
update: {{canaries: 1, max_in_flight: 1, canary_watch_time: 100-5000, update_watch_time: 100-5000}}
networks: [{{name: default, subnets: [{{range: 10.0.0.0/24, gateway: 10.0.0.1}}]}}]
instance_groups:
- name: greeter
  instances: 2
  jobs:
  - {{name: greeter, release: greeter, properties: {{greeter: {{record: {record}}}}}}}
  - {{name: recorder, release: greeter, properties: {{recorder: {recorder}}}}}
  vm_type: small
  stemcell: default
  networks: [{{name: default}}]
",
        record = record.display()
    )
}

struct Fixture {
    dir: tempfile::TempDir,
    director: Director,
    cloud: Arc<ProcessCloud>,
    store: Arc<dyn fleet_store::Store>,
    record: std::path::PathBuf,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn fleet_store::Store> =
        Arc::new(SqliteStore::open(&dir.path().join("state")).unwrap());
    let timings = Timings {
        check_every: Duration::from_millis(100),
        restart_first: Duration::from_millis(100),
        restart_max: Duration::from_millis(500),
        bpm_term: Duration::from_secs(2),
        bpm_quit: Duration::from_secs(1),
        ..Timings::default()
    };
    let cloud = Arc::new(
        ProcessCloud::open(
            &dir.path().join("iaas"),
            store.clone().into(),
            timings,
            Supervision::InProcess,
        )
        .unwrap(),
    );
    let director = Director::new(
        Arc::clone(&store),
        cloud.infrastructure(),
        DirectorSettings::default(),
    )
    .await
    .unwrap();
    director
        .upload_stemcell(&Stemcell {
            name: "bosh-jammy".into(),
            os: "jammy".into(),
            version: "1".into(),
            cid: None,
        })
        .await
        .unwrap();
    let record = dir.path().join("record");
    std::fs::write(&record, "").unwrap();
    Fixture {
        dir,
        director,
        cloud,
        store,
        record,
    }
}

impl Fixture {
    async fn upload(&self, tarball: &[u8]) {
        let task = self
            .director
            .upload_release_archive(from_tarball(tarball).unwrap(), false)
            .await
            .unwrap();
        let task = self.director.wait(task.id).await.unwrap();
        assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    }

    async fn deploy(&self, version: &str) -> fleet_director::model::Task {
        self.deploy_manifest(&manifest(&self.record, version)).await
    }

    async fn deploy_manifest(&self, manifest: &str) -> fleet_director::model::Task {
        let task = self
            .director
            .deploy(manifest, DeployOptions::default())
            .await
            .unwrap();
        self.director.wait(task.id).await.unwrap()
    }

    /// The blobs that hold rendered templates.
    fn rendered_blobs(&self) -> usize {
        let ids = self.store.blob_ids().unwrap();
        ids.iter().filter(|b| b.starts_with("rendered/")).count()
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.record)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// The stage of each of a task's events, in order.
async fn stages(director: &Director, task: u64) -> Vec<String> {
    let events = director.events(task).await.unwrap();
    events.into_iter().map(|e| e.stage).collect()
}

fn position(lines: &[String], line: &str) -> usize {
    lines
        .iter()
        .position(|l| l == line)
        .unwrap_or_else(|| panic!("no `{line}` in {lines:?}"))
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_compiles_runs_and_goes_through_the_lifecycle_in_order() {
    let f = fixture().await;
    f.upload(&release(false)).await;
    let task = f.deploy("1").await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);

    let lines = f.lines();
    for i in 0..2 {
        let at = |hook: &str| position(&lines, &format!("greeter/{i}:{hook}"));
        // Both jobs' pre-starts before either's post-start.
        for pre in ["pre-start", "recorder-pre-start"] {
            for post in ["post-start", "recorder-post-start"] {
                assert!(at(pre) < at(post), "{pre} before {post}: {lines:?}");
            }
        }
        // What the compiled program wrote once it ran, before its post-start finished
        // or after: it runs, under bpm.
        at("running");
    }
    // post-deploy only once both instances started, on both, for both jobs.
    let last_post_start = ["post-start", "recorder-post-start"]
        .iter()
        .map(|h| position(&lines, &format!("greeter/1:{h}")))
        .max()
        .unwrap();
    for i in 0..2 {
        for hook in ["post-deploy", "recorder-post-deploy"] {
            assert!(position(&lines, &format!("greeter/{i}:{hook}")) > last_post_start);
        }
    }
    // Each script's exit reaches the task's debug log, and so does the compile.
    let debug: Vec<String> = f
        .director
        .trace(task.id)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.text)
        .collect();
    for expected in [
        "packaging of package greeter-bin exited 0",
        "pre-start of job greeter exited 0",
        "post-start of job greeter exited 0",
        "post-deploy of job greeter exited 0",
    ] {
        assert!(
            debug.iter().any(|l| l.contains(expected)),
            "{expected} in {debug:#?}"
        );
    }
    let pids = f.cloud.pids().await;
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|p| alive(*p)));

    let delete = f.director.delete("greeter").await.unwrap();
    let delete = f.director.wait(delete.id).await.unwrap();
    assert_eq!(delete.state, TaskState::Done, "{:?}", delete.result);
    let lines = f.lines();
    for i in 0..2 {
        let at = |hook: &str| position(&lines, &format!("greeter/{i}:{hook}"));
        for (first, then) in [("pre-stop", "drain"), ("drain", "post-stop")] {
            for a in [first.to_string(), format!("recorder-{first}")] {
                for b in [then.to_string(), format!("recorder-{then}")] {
                    assert!(at(&a) < at(&b), "{a} before {b}: {lines:?}");
                }
            }
        }
    }
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived its deployment");
    }
    assert!(f.cloud.pids().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebooted_vm_runs_its_processes_again_without_lifecycle_scripts() {
    let f = fixture().await;
    f.upload(&release(false)).await;
    assert_eq!(f.deploy("1").await.state, TaskState::Done);
    let before = f.cloud.pids().await;
    let scripts = f.lines().len();
    let instance = &f.director.instances("greeter").await.unwrap()[0];
    let cid = instance.vm_cid.clone().unwrap();
    f.cloud.reboot_vm(&cid).await.unwrap();
    let after = f.cloud.pids().await;
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|p| alive(*p)));
    assert_eq!(
        before.iter().filter(|p| after.contains(p)).count(),
        1,
        "the other VM's process is untouched: {before:?} {after:?}"
    );
    // The restarted process records itself; nothing else does.
    for _ in 0..100 {
        if f.lines().len() > scripts {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lines = f.lines();
    assert_eq!(
        lines[scripts..],
        ["greeter/0:running"],
        "no lifecycle script ran"
    );
    f.cloud.halt().await;
    assert!(before.iter().chain(&after).all(|p| !alive(*p)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_pre_start_fails_the_canary_and_stops_the_rollout() {
    let f = fixture().await;
    f.upload(&release(true)).await;
    let task = f.deploy("2").await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap_or_default();
    assert!(
        result.contains("pre-start of job greeter exited 7")
            && result.contains("cannot find my config"),
        "{result}"
    );
    let mut lines = f.lines();
    lines.sort();
    assert_eq!(
        lines,
        ["greeter/0:pre-start", "greeter/0:recorder-pre-start"],
        "the canary alone tried, both its jobs' pre-starts at once"
    );
    assert_eq!(
        f.rendered_blobs(),
        0,
        "what the failed deploy rendered went with it: no instance runs it"
    );
    f.cloud.halt().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_packaging_script_fails_the_deploy_with_its_output() {
    let f = fixture().await;
    let broken = ReleaseBuilder::new("greeter", "1")
        .job(
            "greeter",
            vec![
                file("job.MF", "name: greeter\npackages: [greeter-bin]\n"),
                file("monit", ""),
            ],
        )
        .job("recorder", recorder())
        .package(
            "greeter-bin",
            &[],
            vec![file(
                "packaging",
                "echo compiling\necho 'error: no such header' >&2\nexit 2\n",
            )],
        )
        .build();
    f.upload(&broken).await;
    let task = f.deploy("1").await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap_or_default();
    assert!(
        result.contains("packaging of package greeter-bin exited 2")
            && result.contains("error: no such header"),
        "{result}"
    );
    assert!(f.cloud.pids().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn templates_are_rendered_before_anything_stops_and_stops_say_why() {
    let f = fixture().await;
    f.upload(&release(false)).await;
    assert_eq!(f.deploy("1").await.state, TaskState::Done);
    let pids = f.cloud.pids().await;
    let record = f.record.display().to_string();

    // A changed property that a template renders: an update in place, and the drain
    // scripts hear that the configuration changed.
    let noted = format!("{{record: {record}, note: hello}}");
    let task = f
        .deploy_manifest(&manifest_with(&f.record, "1", &noted))
        .await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let lines = f.lines();
    for i in 0..2 {
        position(
            &lines,
            &format!("greeter/{i}:drain-args job_changed hash_changed"),
        );
        position(&lines, &format!("greeter/{i}:next-state keep keep keep"));
    }
    let pids = f
        .cloud
        .pids()
        .await
        .into_iter()
        .filter(|p| !pids.contains(p));
    assert_eq!(pids.count(), 2, "both servers restarted");
    assert_eq!(
        f.rendered_blobs(),
        2,
        "the first deploy's rendered files are gone"
    );

    // A property the job requires is missing: the deploy fails naming every instance
    // and the property, and no instance was stopped.
    let before = (f.lines().len(), f.cloud.pids().await);
    let task = f
        .deploy_manifest(&manifest_with(&f.record, "1", "{note: bye}"))
        .await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap_or_default();
    assert!(
        result.starts_with("Unable to render templates of 2 instances of deployment `greeter`"),
        "{result}"
    );
    for i in 0..2 {
        assert!(result.contains(&format!("greeter/{i} (")), "{result}");
    }
    assert!(result.contains("recorder.record"), "{result}");
    assert_eq!(f.lines().len(), before.0, "no script ran");
    assert_eq!(f.cloud.pids().await, before.1, "every process runs on");
    assert!(before.1.iter().all(|p| alive(*p)));

    // Deleting the deployment shuts the jobs down, and pre-stop hears that all goes.
    let delete = f.director.delete("greeter").await.unwrap();
    assert_eq!(
        f.director.wait(delete.id).await.unwrap().state,
        TaskState::Done
    );
    let lines = f.lines();
    for i in 0..2 {
        position(
            &lines,
            &format!("greeter/{i}:drain-args job_shutdown hash_unchanged"),
        );
        position(
            &lines,
            &format!("greeter/{i}:next-state delete delete delete"),
        );
    }
    assert_eq!(
        f.rendered_blobs(),
        0,
        "nothing rendered outlives its deployment"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_persistent_disk_that_changes_size_is_migrated_with_its_data() {
    let f = fixture().await;
    f.upload(&release(false)).await;
    let with_disk = |size: u32| {
        manifest(&f.record, "1").replace(
            "  vm_type: small\n",
            &format!("  vm_type: small\n  persistent_disk: {size}\n"),
        )
    };
    assert_eq!(
        f.deploy_manifest(&with_disk(16)).await.state,
        TaskState::Done
    );
    let vm_dir = |cid: &str| f.dir.path().join("iaas/vms").join(cid);
    let first = f.director.instances("greeter").await.unwrap()[0].clone();
    let store = vm_dir(first.vm_cid.as_deref().unwrap()).join("store");
    std::fs::create_dir_all(store.join("data")).unwrap();
    std::fs::write(store.join("data/kept"), "what the job stored").unwrap();

    let task = f.deploy_manifest(&with_disk(32)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let now = f.director.instances("greeter").await.unwrap()[0].clone();
    assert_eq!(now.vm_cid, first.vm_cid, "the same VM");
    assert_ne!(now.disk_cid, first.disk_cid, "a new disk");
    let store = vm_dir(now.vm_cid.as_deref().unwrap()).join("store");
    assert_eq!(
        std::fs::read_to_string(store.join("data/kept")).unwrap(),
        "what the job stored"
    );
    let lines = f.lines();
    position(&lines, "greeter/0:drain-args job_shutdown hash_unchanged");
    f.cloud.halt().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_keeps_failing_fails_the_instance_at_the_end_of_its_watch_time() {
    let f = fixture().await;
    let crasher = ReleaseBuilder::new("crasher", "1")
        .job(
            "crasher",
            vec![
                file(
                    "job.MF",
                    "name: crasher\ntemplates:\n  bpm.yml.erb: config/bpm.yml\n",
                ),
                file(
                    "monit",
                    "check process crasher\n  with pidfile /var/vcap/sys/run/bpm/crasher/crasher.pid\n  start program \"/var/vcap/jobs/bpm/bin/bpm start crasher\"\n  stop program \"/var/vcap/jobs/bpm/bin/bpm stop crasher\"\n",
                ),
                file(
                    "templates/bpm.yml.erb",
                    "processes:\n- name: crasher\n  executable: /bin/sh\n  args: [-c, 'exit 1']\n",
                ),
            ],
        )
        .build();
    f.upload(&crasher).await;
    let task = f
        .deploy_manifest(
            "name: crasher
releases: [{name: crasher, version: '1'}]
stemcells: [{alias: default, os: jammy, version: '1'}]
update: {canaries: 1, max_in_flight: 1, canary_watch_time: 100-1500, update_watch_time: 100-1500}
networks: [{name: default, subnets: [{range: 10.0.1.0/24, gateway: 10.0.1.1}]}]
instance_groups:
- name: crasher
  instances: 2
  jobs: [{name: crasher, release: crasher}]
  vm_type: small
  stemcell: default
  networks: [{name: default}]
",
        )
        .await;
    assert_eq!(task.state, TaskState::Error);
    let result = task.result.unwrap_or_default();
    assert!(
        result.contains("(0)' is not running after update")
            && result.contains("failed jobs: crasher"),
        "{result}"
    );
    let states = f.director.instances("crasher").await.unwrap();
    assert!(
        states[1].applied.is_none(),
        "the canary failed: the other instance was not updated"
    );
    f.cloud.halt().await;
}

/// A release whose `checker` job is an errand: its `bin/run` prints who it runs as and
/// its level, warns on stderr, and exits with its property `checker.exit`.
fn errand_release() -> Vec<u8> {
    ReleaseBuilder::new("checks", "1")
        .job(
            "checker",
            vec![
                file(
                    "job.MF",
                    "name: checker\ntemplates:\n  run.erb: bin/run\nproperties:\n  checker.exit: {default: 0}\n",
                ),
                file("monit", ""),
                file(
                    "templates/run.erb",
                    "#!/bin/sh\necho checked <%= spec.name %>/<%= spec.index %>\necho careful >&2\nexit <%= p('checker.exit') %>\n",
                ),
            ],
        )
        .build()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_errand_runs_its_bin_run_on_a_vm_of_its_own_or_where_its_job_is_placed() {
    let f = fixture().await;
    f.upload(&release(false)).await;
    f.upload(&errand_release()).await;
    let manifest = manifest(&f.record, "1")
        .replace(
            "releases: [{name: greeter, version: '1'}]",
            "releases: [{name: greeter, version: '1'}, {name: checks, version: '1'}]",
        )
        .replace(
            "  - {name: recorder,",
            "  - {name: checker, release: checks}\n  - {name: recorder,",
        )
        + "- name: check
  lifecycle: errand
  instances: 1
  jobs: [{name: checker, release: checks, properties: {checker: {exit: 3}}}]
  vm_type: small
  stemcell: default
  networks: [{name: default}]
";
    let task = f.deploy_manifest(&manifest).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let with_vms = || async {
        let instances = f.director.instances("greeter").await.unwrap();
        instances.iter().filter(|i| i.vm_cid.is_some()).count()
    };
    assert_eq!(with_vms().await, 2, "the errand group has no VM");

    let run = |name: &str| fleet_director::errand::ErrandRequest {
        name: name.into(),
        ..Default::default()
    };
    // The errand group: a VM made for the run, its bin/run's exit code and output, the
    // VM deleted again.
    let task = f
        .director
        .run_errand("greeter", run("check"))
        .await
        .unwrap();
    let task = f.director.wait(task.id).await.unwrap();
    assert_eq!(
        task.result.as_deref(),
        Some("0 succeeded, 1 errored, 0 canceled")
    );
    let output = f.director.result_output(&task).await.unwrap();
    let result: serde_json::Value = serde_json::from_str(output.trim()).unwrap();
    assert_eq!(result["exit_code"], 3);
    assert_eq!(result["stdout"], "checked check/0\n");
    assert_eq!(result["stderr"], "careful\n");
    assert_eq!(result["instance"]["group"], "check");
    assert_eq!(with_vms().await, 2, "the errand's VM is gone");
    // Its job logs were kept before the VM went, with the digest a download checks.
    let bundle = f
        .director
        .log_bundle(result["logs"]["blobstore_id"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        result["logs"]["sha1"],
        fleet_release::sha1_hex(&bundle).as_str()
    );
    let logged = fleet_release::tgz_files(&bundle, 1 << 20).unwrap();
    let stdout = logged
        .iter()
        .find(|e| e.path == "checker/run.stdout.log")
        .unwrap_or_else(|| panic!("{:?}", logged.iter().map(|e| &e.path).collect::<Vec<_>>()));
    assert_eq!(String::from_utf8_lossy(&stdout.bytes), "checked check/0\n");

    // The job placed with the greeter: run on both of its VMs, which keep running.
    let task = f
        .director
        .run_errand("greeter", run("checker"))
        .await
        .unwrap();
    let task = f.director.wait(task.id).await.unwrap();
    assert_eq!(
        task.result.as_deref(),
        Some("2 succeeded, 0 errored, 0 canceled")
    );
    let output = f.director.result_output(&task).await.unwrap();
    let mut stdouts: Vec<String> = output
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["stdout"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    stdouts.sort();
    assert_eq!(stdouts, ["checked greeter/0\n", "checked greeter/1\n"]);
    assert_eq!(with_vms().await, 2);

    // `bosh logs greeter/1 --only checker/*.stdout.log`: that file of that VM only.
    let only = fleet_director::logs::LogRequest::parse(None, Some("checker/*.stdout.log")).unwrap();
    let task = f
        .director
        .fetch_logs("greeter", Some("greeter"), Some("1"), only)
        .await
        .unwrap();
    let task = f.director.wait(task.id).await.unwrap();
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let bundle = f
        .director
        .log_bundle(task.result.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    let files = fleet_release::tgz_files(&bundle, 1 << 20).unwrap();
    let paths: Vec<&str> = files.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["checker/run.stdout.log"]);
    assert_eq!(
        String::from_utf8_lossy(&files[0].bytes),
        "checked greeter/1\n"
    );
}

/// A release whose `sleeper` errand writes its process id to the file its property names,
/// then sleeps for ten minutes.
fn sleeper_release() -> Vec<u8> {
    ReleaseBuilder::new("sleeps", "1")
        .job(
            "sleeper",
            vec![
                file(
                    "job.MF",
                    "name: sleeper\ntemplates:\n  run.erb: bin/run\nproperties:\n  sleeper.pid_file: {}\n",
                ),
                file("monit", ""),
                file(
                    "templates/run.erb",
                    "#!/bin/sh\necho $$ > <%= p('sleeper.pid_file') %>\nsleep 600\n",
                ),
            ],
        )
        .build()
}

/// `bosh cancel-task` of a running errand: its `bin/run` is stopped at once and the task
/// ends as cancelled, rather than holding the deployment until the run ends by itself.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_errand_stops_its_run_at_once() {
    let f = fixture().await;
    f.upload(&release(false)).await;
    f.upload(&sleeper_release()).await;
    let pid_file = f.record.with_file_name("sleeper.pid");
    let manifest = manifest(&f.record, "1")
        .replace(
            "releases: [{name: greeter, version: '1'}]",
            "releases: [{name: greeter, version: '1'}, {name: sleeps, version: '1'}]",
        )
        .replace(
            "  - {name: recorder,",
            &format!(
                "  - {{name: sleeper, release: sleeps, properties: {{sleeper: {{pid_file: {}}}}}}}\n  - {{name: recorder,",
                pid_file.display()
            ),
        );
    let task = f.deploy_manifest(&manifest).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let request = fleet_director::errand::ErrandRequest {
        name: "sleeper".into(),
        instances: vec![fleet_director::errand::InstanceFilter {
            group: "greeter".into(),
            id: Some("0".into()),
        }],
        ..Default::default()
    };
    let task = f.director.run_errand("greeter", request).await.unwrap();
    let mut pid = None;
    for _ in 0..300 {
        pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pid = pid.expect("the errand is running");
    assert!(alive(pid));
    f.director.cancel(task.id).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), f.director.wait(task.id))
        .await
        .expect("the task ends within seconds of its cancellation")
        .unwrap();
    assert_eq!(ended.state, TaskState::Cancelled, "{:?}", ended.result);
    let mut gone = false;
    for _ in 0..50 {
        if !alive(pid) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the errand's process {pid} was stopped");
    assert_eq!(f.director.lock_holder("greeter").await.unwrap(), None);
    f.cloud.halt().await;
}

/// `server` provides a `conn` link exporting its port; `client` consumes it and records,
/// in its pre-start, what its template read of the link.
fn linked_release() -> Vec<u8> {
    let server = vec![
        file(
            "job.MF",
            "name: server\ntemplates: {}\nproperties:\n  port: {default: 4000}\nprovides:\n- {name: conn, type: conn, properties: [port]}\n",
        ),
        file("monit", ""),
    ];
    let client = vec![
        file(
            "job.MF",
            "name: client\ntemplates:\n  pre-start.erb: bin/pre-start\nproperties:\n  record: {description: where it records}\n  secret: {default: none}\nconsumes:\n- {name: conn, type: conn}\n- {name: extra, type: nothing, optional: true}\n",
        ),
        file("monit", ""),
        file(
            "templates/pre-start.erb",
            "#!/bin/sh\necho 'conn <%= link(\"conn\").instances.map { |i| \"#{i.index}@#{i.address}\" }.join(\",\") %> port=<%= link(\"conn\").p(\"port\") %> <% if_link(\"extra\") do |e| %>extra<% end.else do %>no-extra<% end %>' >> <%= p('record') %>\n<% if p('secret') != 'none' %>echo 'secret=<%= p('secret') %>' >> <%= p('record') %>\n<% end %>",
        ),
    ];
    ReleaseBuilder::new("linked", "1")
        .job("server", server)
        .job("client", client)
        .build()
}

fn linked_manifest(record: &std::path::Path, port: u16) -> String {
    format!(
        "name: linked
releases: [{{name: linked, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '1'}}]
update: {{canaries: 1, max_in_flight: 2, canary_watch_time: 100-5000, update_watch_time: 100-5000}}
networks: [{{name: default, subnets: [{{range: 10.0.0.0/24, gateway: 10.0.0.1, static: [10.0.0.10 - 10.0.0.20]}}]}}]
instance_groups:
- name: db
  instances: 2
  jobs: [{{name: server, release: linked, properties: {{port: {port}}}}}]
  vm_type: small
  stemcell: default
  networks: [{{name: default, static_ips: [10.0.0.10, 10.0.0.11]}}]
- name: app
  instances: 1
  jobs: [{{name: client, release: linked, properties: {{record: {record}}}}}]
  vm_type: small
  stemcell: default
  networks: [{{name: default}}]
",
        record = record.display()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumers_templates_read_its_providers_addresses_and_a_providers_change_updates_it() {
    let f = fixture().await;
    f.upload(&linked_release()).await;
    let task = f.deploy_manifest(&linked_manifest(&f.record, 5432)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    assert_eq!(
        f.lines(),
        ["conn 0@10.0.0.10,1@10.0.0.11 port=5432 no-extra"]
    );
    // The links API lists what the deploy resolved.
    let providers = f.director.link_providers("linked").await.unwrap();
    assert_eq!(providers.len(), 1);
    assert_eq!(providers[0].1.group, "db");
    let consumers = f.director.link_consumers("linked").await.unwrap();
    assert_eq!(consumers.len(), 2);
    let links = f.director.links("linked").await.unwrap();
    assert_eq!(links.len(), 1, "the optional link has no provider");
    assert_eq!(
        f.director
            .link_address(&links[0].id, &[], None)
            .await
            .unwrap(),
        "q-s0.db.default.linked.bosh"
    );
    // Jobs that declare no process are running once started, as a director shows them.
    let details = f.director.instance_details("linked", true).await.unwrap();
    let details = f.director.wait(details.id).await.unwrap();
    let lines = f.director.result_output(&details).await.unwrap();
    let states: Vec<String> = lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["process_state"].to_string())
        .collect();
    assert_eq!(states, ["\"running\""; 3], "{lines}");

    // Only the provider's exported property changes: the consumer is updated too, and
    // its templates see the new value.
    let task = f.deploy_manifest(&linked_manifest(&f.record, 6543)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    assert_eq!(
        f.lines().last().unwrap(),
        "conn 0@10.0.0.10,1@10.0.0.11 port=6543 no-extra"
    );
    // Unchanged, nothing runs again.
    let before = f.lines().len();
    let task = f.deploy_manifest(&linked_manifest(&f.record, 6543)).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    assert_eq!(f.lines().len(), before);
    let _ = &f.dir;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_generated_password_reaches_the_rendered_templates_and_no_record() {
    let f = fixture().await;
    f.upload(&linked_release()).await;
    // The provider exports the password through its link too.
    let text = linked_manifest(&f.record, 5432)
        .replace(
            "properties: {record:",
            "properties: {secret: '((db_password))', record:",
        )
        .replace(
            "properties: {port: 5432}",
            "properties: {port: '((db_password))'}",
        )
        + "variables:\n- {name: db_password, type: password}\n";
    let task = f.deploy_manifest(&text).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let kept = f.director.variables("linked").await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].1, "/fleet-updater/linked/db_password");
    let lines = f.lines();
    let secret = lines
        .iter()
        .find_map(|l| l.strip_prefix("secret="))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(secret.len(), 20, "{secret}");
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(&format!("port={secret} no-extra"))),
        "the link's exported property is resolved too: {lines:?}"
    );
    // The deployment's manifest and the instance's spec keep the reference.
    let record = f.director.deployment("linked").await.unwrap().unwrap();
    assert!(!record.manifest.unwrap().contains(secret));
    for instance in f.director.instances("linked").await.unwrap() {
        let applied = serde_json::to_string(&instance.applied).unwrap();
        assert!(!applied.contains(secret));
    }
    let events = serde_json::to_string(&f.director.events(task.id).await.unwrap()).unwrap();
    assert!(!events.contains(secret));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exported_compiled_release_deploys_on_a_fresh_director_without_compiling() {
    let f = fixture().await;
    f.upload(&release(false)).await;
    // Only the recorder job, which needs no package: the export compiles the greeter's.
    let greeter_job = format!(
        "  - {{name: greeter, release: greeter, properties: {{greeter: {{record: {}}}}}}}\n",
        f.record.display()
    );
    let recorder_only = manifest(&f.record, "1").replace(&greeter_job, "");
    assert_ne!(recorder_only, manifest(&f.record, "1"));
    let task = f.deploy_manifest(&recorder_only).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let request = |release: &str, version: &str| fleet_director::release_export::ExportRequest {
        deployment: "greeter".into(),
        release: release.into(),
        version: version.into(),
        stemcell: "jammy/1".into(),
        jobs: Vec::new(),
    };
    let export = f
        .director
        .export_release(request("greeter", "1"))
        .await
        .unwrap();
    let export = f.director.wait(export.id).await.unwrap();
    assert_eq!(export.state, TaskState::Done, "{:?}", export.result);
    assert_eq!(
        export.result.as_deref(),
        Some("Exported release: greeter/1 for jammy/1")
    );
    let exported = stages(&f.director, export.id).await;
    assert!(
        exported.iter().any(|s| s == "Compiling packages"),
        "what no deploy compiled is compiled for the export: {exported:?}"
    );
    let line: serde_json::Value =
        serde_json::from_str(f.director.result_output(&export).await.unwrap().trim()).unwrap();
    let id = line["blobstore_id"].as_str().unwrap();
    let tarball = f
        .director
        .log_bundle(id)
        .await
        .unwrap()
        .expect("the export");
    assert_eq!(line["sha1"], fleet_release::sha1_hex(&tarball));
    let read = from_tarball(&tarball).unwrap();
    assert!(read.packages.is_empty());
    assert_eq!(read.compiled.len(), 1);
    assert_eq!(read.compiled[0].compiled.stemcell, "jammy/1");
    // A release the deployment does not use in that version is refused.
    let wrong = f
        .director
        .export_release(request("greeter", "7"))
        .await
        .unwrap();
    let wrong = f.director.wait(wrong.id).await.unwrap();
    assert_eq!(
        wrong.result.as_deref(),
        Some("Release version 'greeter/7' not found in deployment 'greeter' manifest")
    );
    let deleted = f.director.delete("greeter").await.unwrap();
    f.director.wait(deleted.id).await.unwrap();

    // A fresh director takes it and compiles nothing; the compiled program runs.
    let fresh = fixture().await;
    fresh.upload(&tarball).await;
    let task = fresh.deploy("1").await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let deployed = stages(&fresh.director, task.id).await;
    assert!(
        !deployed.iter().any(|s| s == "Compiling packages"),
        "{deployed:?}"
    );
    position(&fresh.lines(), "greeter/0:running");
    let delete = fresh.director.delete("greeter").await.unwrap();
    fresh.director.wait(delete.id).await.unwrap();
}
