//! VMs as containers (`vms: containers`), through `serve`'s director API: a job cannot
//! write to this machine, has a `vcap` user and the instance's hostname; two VMs serve
//! the same port at their own addresses, reached from this machine and from each other;
//! a VM over its `ram` is killed by the kernel and reported failing; vitals are the VM's;
//! and nothing (container, veth, bridge, control group) is left once the deployment is
//! deleted, also after `serve` died and a container with it. The demo on real processes
//! runs each kv instance in a container at its own address. And, on VMs that are plain
//! processes, a killed supervisor is reported and started again.
//!
//! These need root, `bwrap`, `nsenter` and `ip` (CI runs as root and `.ci/run` installs
//! bubblewrap); elsewhere each test says why it did not run and passes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleet_updater::config::ServeLimits;
use fleet_updater::fleet::Definition;
use fleet_updater::release::{File, ReleaseBuilder};
use fleet_updater::vm::container::ContainerRecord;
use reqwest::Method;

use super::processes::{config, run};
use super::served::Served;
use crate::support::Workspace;

/// Ends every container of the IaaS under `0` (its VMs' groups, veths and bridges too)
/// when the test ends, also when it fails: they would outlive it.
struct Stop(PathBuf);

impl Drop for Stop {
    fn drop(&mut self) {
        fleet_updater::vm::container::Containers::new(&self.0, None).clean_up(&[]);
    }
}

/// Whether this machine makes containers; says why not when it does not.
fn containers_here() -> bool {
    match fleet_updater::vm::container::unavailable() {
        None => true,
        Some(why) => {
            eprintln!("not run: {why}");
            false
        }
    }
}

/// A fleet whose VMs are containers on the subnet `10.247.NET.0/24`, with the kv release
/// built from its source; nothing provisioned.
fn fleet(net: u8) -> Definition {
    let mut definition = Definition::parse(&fleet_text(net)).unwrap();
    definition.supervisor = Some(PathBuf::from(env!("CARGO_BIN_EXE_fleet-updater")));
    definition
}

/// [`fleet`] as its definition's text.
fn fleet_text(net: u8) -> String {
    format!(
        "iaas: processes
vms: containers
release_sources:
  - {{path: {kv}, versions: [\"1\"]}}
stemcells:
  - {{name: bosh-local, os: local, version: \"1\"}}
cloud_config: |
  azs: [{{name: z1}}]
  vm_types:
  - {{name: small}}
  - {{name: tiny, cloud_properties: {{ram: 64}}}}
  - {{name: boxed, cloud_properties: {{disk: 64}}}}
  - {{name: mapped, cloud_properties: {{ports: [{{host: 28180, container: 8080}}]}}}}
  networks:
  - name: default
    type: manual
    subnets:
    - {{range: 10.247.{net}.0/24, gateway: 10.247.{net}.1, azs: [z1]}}
  compilation: {{workers: 1, network: default, vm_type: small, az: z1}}
plans: []
",
        kv = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("config/releases/kv")
            .display()
    )
}

fn file(path: &str, text: &str) -> File {
    (path.to_string(), text.as_bytes().to_vec())
}

/// A job whose pre-start tries to write to this machine (`escape`, a path of this
/// machine's, and `/root`, `/etc`, `/usr`) and records what the VM is: `id vcap`, its
/// hostname, who owns a file given to vcap.
fn probe(escape: &Path, marker: &str) -> ReleaseBuilder {
    let pre_start = format!(
        "#!/bin/bash
echo escaped > {escape} 2>/dev/null
echo escaped > /root/{marker}
echo escaped > /etc/{marker} 2>/dev/null
echo escaped > /usr/{marker} 2>/dev/null
mkdir -p /var/vcap/sys/run/probe
id vcap > /var/vcap/sys/run/probe/id
hostname > /var/vcap/sys/run/probe/hostname
touch /var/vcap/data/owned && chown vcap:vcap /var/vcap/data/owned
stat -c %U /var/vcap/data/owned > /var/vcap/sys/run/probe/owner
cat /etc/ssl/private/* /etc/ssh/ssh_host_*_key /etc/gshadow- /etc/shadow- 2>/dev/null | wc -c > /var/vcap/sys/run/probe/secrets
grep -c '^vcap:' /etc/shadow > /var/vcap/sys/run/probe/shadow
",
        escape = escape.display()
    );
    ReleaseBuilder::new("probe", "1").job(
        "probe",
        vec![
            file(
                "job.MF",
                "name: probe\ntemplates:\n  pre-start.erb: bin/pre-start\n",
            ),
            file("monit", ""),
            file("templates/pre-start.erb", &pre_start),
        ],
    )
}

/// A job whose one process takes 256 MB at once (`dd`'s buffer, filled) and goes on
/// reading into it.
fn hog() -> ReleaseBuilder {
    ReleaseBuilder::new("hog", "1").job(
        "hog",
        vec![
            file("job.MF", "name: hog\ntemplates:\n  bpm.yml.erb: config/bpm.yml\n"),
            file(
                "monit",
                "check process hog\n  with pidfile /var/vcap/sys/run/bpm/hog/hog.pid\n  start program \"/var/vcap/jobs/bpm/bin/bpm start hog\"\n  stop program \"/var/vcap/jobs/bpm/bin/bpm stop hog\"\n",
            ),
            file(
                "templates/bpm.yml.erb",
                "processes:\n- name: hog\n  executable: /bin/dd\n  args: [if=/dev/zero, of=/dev/null, bs=256M, count=1000000]\n",
            ),
        ],
    )
}

async fn upload(s: &Served, release: ReleaseBuilder) {
    let response = s
        .director(Method::POST, "/releases")
        .header("content-type", "application/x-compressed")
        .body(release.build())
        .send()
        .await
        .unwrap();
    let task = s.wait_task(Served::task_of(&response)).await;
    assert_eq!(task["state"], "done", "{task}");
}

async fn deploy(s: &Served, manifest: &str) -> serde_json::Value {
    let response = s.send_yaml(Method::POST, "/deployments", manifest).await;
    s.wait_task(Served::task_of(&response)).await
}

async fn delete(s: &Served, deployment: &str) {
    let response = s
        .send(Method::DELETE, &format!("/deployments/{deployment}"))
        .await;
    let task = s.wait_task(Served::task_of(&response)).await;
    assert_eq!(task["state"], "done", "{task}");
}

/// Two kv instances with a disk each on `network`, the kv job's `properties` as given.
fn kv_manifest(name: &str, network: &str, properties: &str) -> String {
    format!(
        "name: {name}
releases: [{{name: kv, version: '1'}}]
stemcells: [{{alias: default, os: local, version: '1'}}]
update: {{canaries: 1, max_in_flight: 2, canary_watch_time: 500-30000, update_watch_time: 500-30000}}
instance_groups:
- name: kv
  instances: 2
  azs: [z1]
  jobs: [{{name: kv, release: kv, properties: {properties}}}]
  vm_type: small
  stemcell: default
  persistent_disk: 16
  networks: [{{name: {network}}}]
"
    )
}

/// `serve` of `definition`, and what ends its containers when the test ends.
async fn serve(definition: &Definition) -> (Served, Stop) {
    let s = Served::start_fleet(
        tempfile::tempdir().unwrap(),
        definition,
        ServeLimits::default(),
    )
    .await;
    let stop = Stop(iaas(&s));
    (s, stop)
}

fn iaas(s: &Served) -> PathBuf {
    s.state.path().join("iaas")
}

/// The records of the containers of the IaaS under `iaas`.
fn records_in(iaas: &Path) -> Vec<ContainerRecord> {
    fleet_updater::vm::container::Containers::new(iaas, None).records()
}

/// The records of the containers that run now.
fn containers(s: &Served) -> Vec<ContainerRecord> {
    records_in(&iaas(s))
}

/// Nothing of `records` is left on this machine: no init, veth, bridge or group.
fn nothing_left(records: &[ContainerRecord]) {
    assert!(!records.is_empty());
    for record in records {
        assert!(
            fleet_updater::vm::container::start_time(record.pid) != Some(record.started),
            "the container of {} still runs",
            record.cid
        );
        for nic in &record.nics {
            for interface in [&nic.host_end, &nic.bridge] {
                assert!(
                    !Path::new("/sys/class/net").join(interface).exists(),
                    "{interface} of {} is left",
                    record.cid
                );
            }
        }
        for (_, group) in &record.groups.dirs {
            assert!(!group.exists(), "{} is left", group.display());
        }
    }
}

/// A kv server's answer over HTTP/1.0 from this machine.
async fn get(address: &str) -> String {
    let mut stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(address),
    )
    .await
    .unwrap_or_else(|_| panic!("{address} did not answer"))
    .unwrap_or_else(|e| panic!("{address}: {e}"));
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

/// Runs `script` under bash inside the container whose init is `pid`; its output.
fn inside(pid: u32, script: &str) -> String {
    let output = std::process::Command::new("nsenter")
        .arg(format!("--target={pid}"))
        .args([
            "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd",
        ])
        .args(["bash", "-c", script])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_vm_keeps_to_itself_at_its_own_address_with_its_users_and_name() {
    if !containers_here() {
        return;
    }
    let (s, _stop) = serve(&fleet(11)).await;
    let escape = s.state.path().join("escaped");
    let marker = format!("fleet-escape-{}", std::process::id());
    upload(&s, probe(&escape, &marker)).await;
    let task = deploy(
        &s,
        "name: boxed
releases: [{name: probe, version: '1'}, {name: kv, version: '1'}]
stemcells: [{alias: default, os: local, version: '1'}]
update: {canaries: 1, max_in_flight: 2, canary_watch_time: 500-30000, update_watch_time: 500-30000}
instance_groups:
- name: kv
  instances: 2
  azs: [z1]
  jobs:
  - {name: probe, release: probe}
  - {name: kv, release: kv, properties: {kv: {port: 8080}}}
  vm_type: small
  stemcell: default
  persistent_disk: 16
  networks: [{name: default}]
",
    )
    .await;
    assert_eq!(task["state"], "done", "{task}");

    // Nothing a job did reached this machine; it wrote its own /root.
    assert!(!escape.exists(), "a job wrote {}", escape.display());
    for dir in ["/root", "/etc", "/usr"] {
        assert!(
            !Path::new(dir).join(&marker).exists(),
            "a job wrote {dir}/{marker}"
        );
    }
    let vms = s.vm_infos("boxed", "vms").await;
    assert_eq!(vms.len(), 2);
    let records = containers(&s);
    for vm in &vms {
        let dir = iaas(&s).join("vms").join(&vm.vm_id);
        let run = |name: &str| {
            std::fs::read_to_string(dir.join("sys/run").join(name))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .trim()
                .to_string()
        };
        assert!(run("probe/id").contains("(vcap)"), "{}", run("probe/id"));
        assert_eq!(run("probe/owner"), "vcap");
        assert_eq!(
            run("probe/secrets"),
            "0",
            "this machine's private files are hidden"
        );
        assert_eq!(run("probe/shadow"), "1", "the VM's own shadow file");
        assert_eq!(
            run("probe/hostname"),
            vm.id,
            "the host is named for its instance"
        );
        assert!(
            iaas(&s)
                .join("systems")
                .join(&vm.vm_id)
                .join("root")
                .join(&marker)
                .is_file()
        );
        // At its own address, on the same port as the other.
        let address = run("kv/address");
        assert_eq!(address, format!("{}:8080", vm.ips[0]));
        let answer = get(&address).await;
        assert!(answer.contains("kv 1 boxed/kv/"), "{answer}");
        // Its vitals are its own.
        let kb: u64 = vm.vitals.mem.kb.parse().unwrap_or(0);
        assert!(kb > 0, "memory in use: {:?}", vm.vitals.mem);
        assert!(vm.vitals.disk.contains_key("persistent"));
    }
    // The VMs reach each other at their addresses.
    let first = records
        .iter()
        .find(|r| {
            r.nics
                .iter()
                .any(|n| n.address.to_string() == vms[0].ips[0])
        })
        .unwrap();
    let other = vms[1].ips[0].clone();
    let answer = inside(
        first.pid,
        &format!("exec 3<>/dev/tcp/{other}/8080; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3"),
    );
    assert!(answer.contains("kv 1 boxed/kv/"), "from VM to VM: {answer}");

    delete(&s, "boxed").await;
    nothing_left(&records);
    assert!(containers(&s).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_over_its_ram_is_killed_by_the_kernel_and_reported_failing() {
    if !containers_here() {
        return;
    }
    let (s, _stop) = serve(&fleet(12)).await;
    upload(&s, hog()).await;
    let task = deploy(
        &s,
        "name: hungry
releases: [{name: hog, version: '1'}]
stemcells: [{alias: default, os: local, version: '1'}]
update: {canaries: 1, max_in_flight: 1, canary_watch_time: 500-8000, update_watch_time: 500-8000}
instance_groups:
- name: hog
  instances: 1
  azs: [z1]
  jobs: [{name: hog, release: hog}]
  vm_type: tiny
  stemcell: default
  networks: [{name: default}]
",
    )
    .await;
    assert_eq!(task["state"], "error", "{task}");
    let records = containers(&s);
    assert_eq!(records.len(), 1);
    let memory = records[0]
        .groups
        .dirs
        .iter()
        .find(|(c, _)| c == "memory" || c == "unified")
        .map(|(_, d)| d.clone())
        .expect("a memory group");
    let limit = std::fs::read_to_string(memory.join("memory.limit_in_bytes"))
        .or_else(|_| std::fs::read_to_string(memory.join("memory.max")))
        .unwrap();
    assert_eq!(limit.trim(), (64u64 << 20).to_string());
    let vms = s.vm_infos("hungry", "vms").await;
    assert_eq!(vms[0].process_state, "failing", "{:?}", vms[0].processes);
    let oom = std::fs::read_to_string(memory.join("memory.oom_control"))
        .or_else(|_| std::fs::read_to_string(memory.join("memory.events")))
        .unwrap();
    let kills: u64 = oom
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(kills > 0, "the kernel killed nothing: {oom}");
    delete(&s, "hungry").await;
    nothing_left(&records);
}

/// A request to the director of a `serve` process at `director`.
async fn call(
    client: &reqwest::Client,
    director: &str,
    method: Method,
    path: &str,
    body: String,
) -> reqwest::Response {
    client
        .request(method, format!("https://{director}{path}"))
        .basic_auth("admin", Some("Kill-9-Pw"))
        .header("content-type", "text/yaml")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// The task a director's answer redirects to, once it ended.
async fn ended(client: &reqwest::Client, director: &str, response: reqwest::Response) -> String {
    let location = response.headers()["location"].to_str().unwrap().to_string();
    for _ in 0..1200 {
        let task: serde_json::Value = call(client, director, Method::GET, &location, String::new())
            .await
            .json()
            .await
            .unwrap();
        let state = task["state"].as_str().unwrap().to_string();
        if !["queued", "processing"].contains(&state.as_str()) {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{location} did not end");
}

#[tokio::test(flavor = "multi_thread")]
async fn containers_outlive_a_killed_serve_come_back_after_a_restart_and_go_with_their_deployment()
{
    if !containers_here() {
        return;
    }
    let w = Workspace::new();
    let state = w.path("state");
    let _stop = Stop(state.join("iaas"));
    w.write("fleet.yml", &fleet_text(13));
    let config = w.write(
        "config.yml",
        "embedded: {fleet: fleet.yml}\nserve:\n  users: [{name: admin, password: Kill-9-Pw}]\n",
    );
    let mut serve = super::serve_shared::start(&config, &state, None);
    let client = super::served::client_trusting(&serve.ca);
    let manifest = kv_manifest("kept", "default", "{kv: {port: 8080}}");
    let deployed = call(
        &client,
        &serve.director,
        Method::POST,
        "/deployments",
        manifest,
    )
    .await;
    assert_eq!(ended(&client, &serve.director, deployed).await, "done");
    let records = || records_in(&state.join("iaas"));
    let before = records();
    assert_eq!(before.len(), 2);
    // `serve` killed (SIGKILL): its VMs run on, as VMs outlive their director.
    serve.child.kill().unwrap();
    serve.child.wait().unwrap();
    for record in &before {
        assert_eq!(
            fleet_updater::vm::container::start_time(record.pid),
            Some(record.started)
        );
    }
    // One VM's container ends too, as a machine restart ends them all.
    let killed = std::process::Command::new("kill")
        .args(["-9", &before[0].pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let serve = super::serve_shared::start(&config, &state, None);
    let after = records();
    assert_eq!(after.len(), 2);
    let again = after.iter().find(|r| r.cid == before[0].cid).unwrap();
    assert_ne!(again.pid, before[0].pid, "its container was started again");
    // Its jobs start again, as after a reboot: each server answers at its address.
    for record in &after {
        let address = format!("{}:8080", record.nics[0].address);
        let mut answered = String::new();
        for _ in 0..100 {
            if let Ok(Ok(mut stream)) = tokio::time::timeout(
                Duration::from_secs(1),
                tokio::net::TcpStream::connect(&address),
            )
            .await
            {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
                stream.read_to_string(&mut answered).await.unwrap();
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(answered.contains("kv 1 kept/kv/"), "{address}: {answered}");
    }
    let deleted = call(
        &client,
        &serve.director,
        Method::DELETE,
        "/deployments/kept",
        String::new(),
    )
    .await;
    assert_eq!(ended(&client, &serve.director, deleted).await, "done");
    drop(serve);
    nothing_left(&before);
    nothing_left(&after);
}

#[test]
fn the_demo_runs_each_kv_instance_in_a_container_at_its_own_address() {
    if !containers_here() {
        return;
    }
    let w = Workspace::new();
    let _stop = Stop(w.path("state/iaas"));
    let status = run(&w, &config()).status().unwrap();
    assert_eq!(status.code(), Some(0));
    let vms: Vec<PathBuf> = std::fs::read_dir(w.path("state/iaas/vms"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(vms.len(), 6, "three instances of two VMs");
    let mut addresses = std::collections::BTreeSet::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for vm in &vms {
        let address = std::fs::read_to_string(vm.join("sys/run/kv/address")).unwrap();
        let address = address.trim().to_string();
        assert!(address.starts_with("10.245.0."), "{address}");
        let answer = runtime.block_on(get(&address));
        assert!(answer.contains("kv 2 service-instance_kv-"), "{answer}");
        addresses.insert(address.split(':').next().unwrap().to_string());
    }
    assert_eq!(addresses.len(), 6, "each VM at an address of its own");
    let records = records_in(&w.path("state/iaas"));
    assert_eq!(records.len(), 6);
    for n in ["01", "02", "03"] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_fleet-updater"))
            .env_remove("FLEET_UPDATER_CONFIG")
            .args(["director", "-c"])
            .arg(config())
            .arg("--state-dir")
            .arg(w.path("state"))
            .args(["delete-deployment", &format!("service-instance_kv-{n}")])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    nothing_left(&records);
}

/// Runs `program` with `args`; its output, failing with what it printed.
fn tool(program: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn bosh_ssh_signs_in_to_a_container_vm_with_the_sessions_key_and_cleanup_ends_it() {
    if !containers_here() {
        return;
    }
    if !Path::new("/usr/sbin/sshd").exists() {
        eprintln!("not run: no SSH server (Debian: openssh-server) to run in the VMs");
        return;
    }
    let (s, _stop) = serve(&fleet(14)).await;
    let task = deploy(&s, &kv_manifest("reached", "default", "{}")).await;
    assert_eq!(task["state"], "done", "{task}");
    // The CLI's session: a fresh key pair and a `bosh_` user.
    let dir = s.state.path().join("session");
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key");
    let made = tool(
        "ssh-keygen",
        &[
            "-q",
            "-t",
            "rsa",
            "-b",
            "2048",
            "-N",
            "",
            "-f",
            key.to_str().unwrap(),
        ],
    );
    assert!(made.status.success());
    let public = std::fs::read_to_string(dir.join("key.pub")).unwrap();
    let user = "bosh_0123456789abcde";
    let setup = serde_json::json!({
        "deployment_name": "reached", "command": "setup",
        "target": {"job": "kv", "indexes": [], "ids": []},
        "params": {"user": user, "public_key": public.trim()},
    });
    let response = s
        .send_json(Method::POST, "/deployments/reached/ssh", setup.to_string())
        .await;
    let id = Served::task_of(&response);
    assert_eq!(s.wait_task(id).await["state"], "done");
    let sessions: serde_json::Value = serde_json::from_str(&s.output(id, "result").await).unwrap();
    let sessions = sessions.as_array().unwrap().clone();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    let vms = s.vm_infos("reached", "vms").await;
    let known = dir.join("known_hosts");
    let mut lines = String::new();
    for session in &sessions {
        assert_eq!(session["status"], "success", "{session}");
        assert_eq!(session["command"], "setup");
        assert_eq!(session["job"], "kv");
        lines.push_str(&format!(
            "{} {}\n",
            session["ip"].as_str().unwrap(),
            session["host_public_key"].as_str().unwrap()
        ));
    }
    std::fs::write(&known, lines).unwrap();
    // The options the CLI gives `ssh` and `scp`: the session's key, its known hosts.
    let (identity, known_hosts) = (
        format!("IdentityFile={}", key.display()),
        format!("UserKnownHostsFile={}", known.display()),
    );
    let options = [
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        &identity,
        "-o",
        &known_hosts,
        "-o",
        "StrictHostKeyChecking=yes",
    ];
    let ssh = |ip: &str, command: &str| {
        let mut args = options.to_vec();
        args.extend(["-l", user, "--", ip, command]);
        tool("ssh", &args)
    };
    for session in &sessions {
        let ip = session["ip"].as_str().unwrap();
        let vm = vms.iter().find(|v| v.ips[0] == ip).unwrap();
        assert_eq!(session["id"], vm.id.as_str());
        let signed_in = ssh(ip, "hostname; id -nG");
        let out = String::from_utf8_lossy(&signed_in.stdout);
        assert!(
            signed_in.status.success(),
            "{}",
            String::from_utf8_lossy(&signed_in.stderr)
        );
        assert!(out.starts_with(&format!("{}\n", vm.id)), "{out}");
        assert!(out.contains("bosh_sshers") && out.contains("vcap"), "{out}");
    }
    // `bosh scp` both ways.
    let ip = sessions[0]["ip"].as_str().unwrap();
    let up = dir.join("up.txt");
    std::fs::write(&up, "from this machine\n").unwrap();
    let scp = |from: &str, to: &str| {
        let mut args = options.to_vec();
        args.extend([from, to]);
        tool("scp", &args)
    };
    let remote = format!("{user}@{ip}:/tmp/up.txt");
    assert!(scp(up.to_str().unwrap(), &remote).status.success());
    let down = dir.join("down.txt");
    assert!(scp(&remote, down.to_str().unwrap()).status.success());
    assert_eq!(
        std::fs::read_to_string(&down).unwrap(),
        "from this machine\n"
    );

    // Cleanup (sent without waiting, as the CLI sends it) removes the user everywhere.
    let cleanup = serde_json::json!({
        "deployment_name": "reached", "command": "cleanup",
        "target": {"job": "kv", "indexes": [], "ids": []},
        "params": {"user_regex": format!("^{user}")},
    });
    let response = s
        .send_json(
            Method::POST,
            "/deployments/reached/ssh",
            cleanup.to_string(),
        )
        .await;
    assert_eq!(
        s.wait_task(Served::task_of(&response)).await["state"],
        "done"
    );
    assert!(
        !ssh(ip, "true").status.success(),
        "the session's user is gone"
    );
    for vm in &vms {
        let passwd =
            std::fs::read_to_string(iaas(&s).join("systems").join(&vm.vm_id).join("etc/passwd"))
                .unwrap();
        assert!(!passwd.contains(user), "{passwd}");
    }
    // A body that is not the CLI's is refused, naming what is wrong.
    let bad = s
        .send_json(Method::POST, "/deployments/reached/ssh", "{}")
        .await;
    assert_eq!(bad.status(), 400);
    assert!(
        Served::description(bad)
            .await
            .contains("`command` is missing")
    );
    delete(&s, "reached").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_on_a_dynamic_network_gets_an_address_the_iaas_hands_out() {
    if !containers_here() {
        return;
    }
    let mut definition = fleet(15);
    definition.cloud_config = Some(
        "azs: [{name: z1}]
vm_types: [{name: small}]
networks:
- {name: default, type: manual, subnets: [{range: 10.247.15.0/24, gateway: 10.247.15.1, azs: [z1]}]}
- {name: pool, type: dynamic, subnets: [{azs: [z1]}]}
compilation: {workers: 1, network: default, vm_type: small, az: z1}
"
        .into(),
    );
    let (s, _stop) = serve(&definition).await;
    let task = deploy(&s, &kv_manifest("pooled", "pool", "{}")).await;
    assert_eq!(task["state"], "done", "{task}");
    let vms = s.vm_infos("pooled", "vms").await;
    let records = containers(&s);
    let mut seen = std::collections::BTreeSet::new();
    for vm in &vms {
        let ip = vm.ips.first().cloned().unwrap_or_default();
        assert!(
            ip.starts_with("10.254."),
            "the director knows the address: {ip:?}"
        );
        // The VM has it...
        let record = records
            .iter()
            .find(|r| r.cid == vm.vm_id)
            .expect("a container");
        let configured = inside(record.pid, "ip -4 -o addr show eth0");
        assert!(configured.contains(&format!("{ip}/24")), "{configured}");
        // ...and this machine reaches it: nothing listens there, and the VM says so.
        let refused = tokio::net::TcpStream::connect(format!("{ip}:9")).await;
        assert_eq!(
            refused.map(|_| ()).unwrap_err().kind(),
            std::io::ErrorKind::ConnectionRefused
        );
        seen.insert(ip);
    }
    assert_eq!(seen.len(), 2, "an address each");
    delete(&s, "pooled").await;
    nothing_left(&records);
}

/// A job whose pre-start fills its VM's ephemeral disk as far as it goes, and records
/// how far that was and how large the disk is.
fn filler() -> ReleaseBuilder {
    let pre_start = "#!/bin/bash
mkdir -p /var/vcap/sys/run/filler
dd if=/dev/zero of=/var/vcap/data/fill bs=1M count=100 2>/dev/null
echo $? > /var/vcap/sys/run/filler/status
df -m --output=size /var/vcap/data | tail -1 | tr -d ' ' > /var/vcap/sys/run/filler/size
rm -f /var/vcap/data/fill
";
    ReleaseBuilder::new("filler", "1").job(
        "filler",
        vec![
            file(
                "job.MF",
                "name: filler\ntemplates:\n  pre-start.erb: bin/pre-start\n",
            ),
            file("monit", ""),
            file("templates/pre-start.erb", pre_start),
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_with_a_disk_of_its_own_writes_no_more_than_its_size_there() {
    if !containers_here() {
        return;
    }
    let (s, _stop) = serve(&fleet(16)).await;
    upload(&s, filler()).await;
    let task = deploy(
        &s,
        "name: bounded
releases: [{name: filler, version: '1'}]
stemcells: [{alias: default, os: local, version: '1'}]
update: {canaries: 1, max_in_flight: 1, canary_watch_time: 500-30000, update_watch_time: 500-30000}
instance_groups:
- name: filler
  instances: 1
  azs: [z1]
  jobs: [{name: filler, release: filler}]
  vm_type: boxed
  stemcell: default
  networks: [{name: default}]
",
    )
    .await;
    assert_eq!(task["state"], "done", "{task}");
    let vms = s.vm_infos("bounded", "vms").await;
    let run = iaas(&s)
        .join("vms")
        .join(&vms[0].vm_id)
        .join("sys/run/filler");
    let read = |name: &str| {
        std::fs::read_to_string(run.join(name))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_ne!(read("status"), "0", "100 MB did not fit on a disk of 64");
    let size: u64 = read("size").parse().unwrap();
    assert!((40..=64).contains(&size), "{size} MB");
    assert!(vms[0].vitals.disk.contains_key("ephemeral"));
    let mount = iaas(&s)
        .join("systems")
        .join(&vms[0].vm_id)
        .join("ephemeral");
    let records = containers(&s);
    delete(&s, "bounded").await;
    nothing_left(&records);
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !table.contains(mount.to_str().unwrap()),
        "the VM's disk is unmounted"
    );
}

/// Runs the fleet-updater program with `args` as the user `nobody`.
fn as_nobody(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_fleet-updater"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env("HOME", "/tmp")
        .output()
        .unwrap()
}

#[test]
fn as_another_user_the_demos_vms_are_containers_of_user_namespaces_of_their_own() {
    // Root becomes `nobody` here; the kernel must let `nobody` make user namespaces.
    if !containers_here() {
        return;
    }
    let probe = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["bwrap", "--unshare-user", "--ro-bind", "/", "/", "true"])
        .output()
        .unwrap();
    if !probe.status.success() {
        eprintln!("not run: `nobody` may not make user namespaces here");
        return;
    }
    let w = Workspace::new();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(w.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = w.path("state");
    std::fs::create_dir_all(&state).unwrap();
    let owned = std::process::Command::new("chown")
        .args(["65534:65534"])
        .arg(&state)
        .status()
        .unwrap();
    assert!(owned.success());
    let _stop = Stop(state.join("iaas"));
    let ran = as_nobody(&[
        "run".as_ref(),
        "-c".as_ref(),
        config().as_os_str(),
        "--state-dir".as_ref(),
        state.as_os_str(),
        "--report".as_ref(),
        state.join("report.json").as_os_str(),
    ]);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let records = records_in(&state.join("iaas"));
    assert_eq!(records.len(), 6, "three instances of two VMs");
    let ours = std::fs::read_link("/proc/self/ns/user").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for record in &records {
        assert_eq!(
            record.privilege,
            fleet_updater::vm::container::Privilege::UserNamespace
        );
        let theirs = std::fs::read_link(format!("/proc/{}/ns/user", record.pid)).unwrap();
        assert_ne!(theirs, ours, "a user namespace of its own");
        let vm = state.join("iaas/vms").join(&record.cid);
        let address = std::fs::read_to_string(vm.join("sys/run/kv/address")).unwrap();
        let answer = runtime.block_on(get(address.trim()));
        assert!(answer.contains("kv 2 service-instance_kv-"), "{answer}");
    }
    for n in ["01", "02", "03"] {
        let deleted = as_nobody(&[
            "director".as_ref(),
            "-c".as_ref(),
            config().as_os_str(),
            "--state-dir".as_ref(),
            state.as_os_str(),
            "delete-deployment".as_ref(),
            format!("service-instance_kv-{n}").as_ref(),
        ]);
        assert!(
            deleted.status.success(),
            "{}",
            String::from_utf8_lossy(&deleted.stderr)
        );
    }
    nothing_left(&records);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_types_ports_forward_this_machines_port_to_the_vm() {
    if !containers_here() {
        return;
    }
    let (s, _stop) = serve(&fleet(17)).await;
    let task = deploy(
        &s,
        "name: mapped
releases: [{name: kv, version: '1'}]
stemcells: [{alias: default, os: local, version: '1'}]
update: {canaries: 1, max_in_flight: 1, canary_watch_time: 500-30000, update_watch_time: 500-30000}
instance_groups:
- name: kv
  instances: 1
  azs: [z1]
  jobs: [{name: kv, release: kv, properties: {kv: {port: 8080}}}]
  vm_type: mapped
  stemcell: default
  persistent_disk: 16
  networks: [{name: default}]
",
    )
    .await;
    assert_eq!(task["state"], "done", "{task}");
    let answer = get("127.0.0.1:28180").await;
    assert!(answer.contains("kv 1 mapped/kv/0"), "{answer}");
    let records = containers(&s);
    let (pid, started) = records[0].forwarder.expect("a forwarder");
    delete(&s, "mapped").await;
    nothing_left(&records);
    assert_ne!(
        fleet_updater::vm::container::start_time(pid),
        Some(started),
        "the forwarding ended with the VM"
    );
    assert!(
        std::net::TcpListener::bind("0.0.0.0:28180").is_ok(),
        "its port is free again"
    );
}

/// The same under `serve` with its health monitor and nobody asking: the monitor's pass
/// finds the instance failing, raises an alert (an event of `bosh events`), and its
/// asking brings the supervisor and the job back.
#[tokio::test(flavor = "multi_thread")]
async fn the_health_monitor_notices_a_killed_supervisor_and_brings_it_back() {
    let mut definition =
        Definition::parse(&fleet_text(31).replace("vms: containers", "vms: processes")).unwrap();
    definition.supervisor = Some(PathBuf::from(env!("CARGO_BIN_EXE_fleet-updater")));
    let config = fleet_updater::config::ServeConfig {
        health_monitor: Some(
            fleet_updater::director::health_monitor::HealthMonitorSettings {
                interval: Duration::from_millis(500),
                ..Default::default()
            },
        ),
        ..Default::default()
    };
    let s = Served::start_configured(tempfile::tempdir().unwrap(), &definition, &config).await;
    let manifest = kv_manifest("watched", "default", "{kv: {drain_seconds: 0}}")
        .replace("instances: 2", "instances: 1");
    assert_eq!(deploy(&s, &manifest).await["state"], "done");
    let vm = std::fs::read_dir(iaas(&s).join("vms"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("sys/run/bpm/kv/kv.pid").exists())
        .unwrap();
    let read_pid = |file: &str| -> Option<u32> {
        std::fs::read_to_string(vm.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let supervisor = read_pid("sys/run/supervisor.pid").unwrap();
    let server = read_pid("sys/run/bpm/kv/kv.pid").unwrap();
    for pid in [supervisor, server] {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    let mut waited = Duration::ZERO;
    loop {
        let back = read_pid("sys/run/supervisor.pid").filter(|p| *p != supervisor);
        let serving = read_pid("sys/run/bpm/kv/kv.pid")
            .filter(|p| *p != server && super::processes::alive(*p));
        if back.is_some_and(super::processes::alive) && serving.is_some() {
            break;
        }
        assert!(
            waited < Duration::from_secs(30),
            "the monitor brought it back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        waited += Duration::from_millis(200);
    }
    let alerts = s.get_json("/events?object_type=alert").await;
    let said: Vec<&str> = alerts
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["context"]["message"].as_str())
        .collect();
    assert!(
        said.iter().any(|m| m.contains("has failing processes: kv")),
        "{alerts}"
    );
    delete(&s, "watched").await;
}

/// A VM's supervisor (its monit) and its job's process killed under `serve`, on VMs that
/// are plain processes (no root needed): `bosh instances --ps` reports the instance
/// failing with its process, and the supervisor is started again, bringing the job back
/// without any lifecycle script, as runit brings back a VM's monit.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_supervisor_is_reported_failing_and_brings_its_jobs_back() {
    let mut definition =
        Definition::parse(&fleet_text(30).replace("vms: containers", "vms: processes")).unwrap();
    definition.supervisor = Some(PathBuf::from(env!("CARGO_BIN_EXE_fleet-updater")));
    let s = Served::start_fleet(
        tempfile::tempdir().unwrap(),
        &definition,
        ServeLimits::default(),
    )
    .await;
    let manifest = kv_manifest("revived", "default", "{kv: {drain_seconds: 0}}")
        .replace("instances: 2", "instances: 1");
    assert_eq!(deploy(&s, &manifest).await["state"], "done");
    let vms: Vec<PathBuf> = std::fs::read_dir(iaas(&s).join("vms"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("sys/run/bpm/kv/kv.pid").exists())
        .collect();
    let vm = &vms[0];
    let read_pid = |file: &str| -> u32 {
        std::fs::read_to_string(vm.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let (supervisor, server) = (
        read_pid("sys/run/supervisor.pid"),
        read_pid("sys/run/bpm/kv/kv.pid"),
    );
    let lifecycle =
        || std::fs::read_to_string(vm.join("sys/log/kv/lifecycle.log")).unwrap_or_default();
    let steps = lifecycle().lines().count();
    for pid in [supervisor, server] {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = s.vm_infos("revived", "instances").await;
    assert_eq!(seen[0].process_state, "failing", "{seen:?}");
    assert!(
        seen[0]
            .processes
            .iter()
            .any(|p| p.name == "kv" && p.state == "failing"),
        "{seen:?}"
    );
    let mut waited = Duration::ZERO;
    loop {
        let seen = s.vm_infos("revived", "instances").await;
        if seen[0].process_state == "running" {
            break;
        }
        assert!(waited < Duration::from_secs(30), "it came back: {seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        waited += Duration::from_millis(200);
    }
    let revived = read_pid("sys/run/supervisor.pid");
    assert_ne!(revived, supervisor);
    assert!(super::processes::alive(read_pid("sys/run/bpm/kv/kv.pid")));
    assert_eq!(
        lifecycle().lines().count(),
        steps,
        "no lifecycle script ran"
    );
    delete(&s, "revived").await;
    assert!(
        !super::processes::alive(revived),
        "its supervisor ends with its VM"
    );
}
