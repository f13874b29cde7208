//! `create-env` and `delete-env` through the binary, on the demo manifest
//! (config/create-env) with its CPI release wrapped so that each CPI call is recorded,
//! and can be held to kill the command at a chosen step: the seed's call sequence, the
//! skip when nothing changed, a redeploy keeping the disk's data, runs killed after
//! `create_vm` and after `create_disk` finished by the next with nothing leaked, and
//! `delete-env` leaving nothing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::processes::alive;
use crate::support::Workspace;

struct Env {
    w: Workspace,
    port: u16,
    /// Its VMs are containers: their pidfiles name processes of their own numbering,
    /// and they end with their containers.
    containers: bool,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Env {
    fn new() -> Env {
        let w = Workspace::new();
        let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
        let demo = repository.join("config/create-env");
        // The demo's CPI release, its job's `bin/cpi` recording each method and holding
        // one that a file in `hold/` names before it runs the package's CPI as the
        // demo's does.
        let cpi = w.path("cpi-release");
        crate::support::copy_tree(&demo.join("cpi-release"), &cpi);
        std::fs::create_dir_all(w.path("hold")).unwrap();
        let demo_template =
            std::fs::read_to_string(cpi.join("jobs/process-cpi/templates/cpi.erb")).unwrap();
        let runs_the_package = demo_template
            .lines()
            .skip_while(|l| !l.starts_with("exec "))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            runs_the_package.contains("process-cpi/bin/cpi"),
            "{demo_template}"
        );
        std::fs::write(
            cpi.join("jobs/process-cpi/templates/cpi.erb"),
            format!(
                "#!/bin/sh\nreq=$(cat)\nmethod=$(printf '%s' \"$req\" | sed -n 's/.*\"method\":\"\\([a-z_]*\\)\".*/\\1/p')\necho \"$method\" >> {calls}\nif [ -e {hold}/\"$method\" ]; then echo $$ > {hold}/held.pid; sleep 1000; fi\nprintf '%s' \"$req\" | {runs_the_package}\n",
                calls = w.path("cpi-calls").display(),
                hold = w.path("hold").display()
            ),
        )
        .unwrap();
        let port = free_port();
        let manifest = std::fs::read_to_string(demo.join("manifest.yml"))
            .unwrap()
            .replace("127.0.0.1:6868", &format!("127.0.0.1:{port}"))
            .replace(
                "file://../releases/kv",
                &format!("file://{}", repository.join("config/releases/kv").display()),
            )
            .replace("file://cpi-release", &format!("file://{}", cpi.display()))
            .replace(
                "file://stemcell",
                &format!("file://{}", demo.join("stemcell").display()),
            )
            .replace(
                "root: .fleet-updater-env",
                &format!("root: {}", w.path("iaas").display()),
            );
        w.write("manifest.yml", &manifest);
        Env {
            w,
            port,
            containers: false,
        }
    }

    /// The demo with its CPI keeping the VM's settings in a registry, which
    /// `create-env` runs while it deploys.
    fn with_registry() -> Env {
        let env = Env::new();
        let manifest = std::fs::read_to_string(env.w.path("manifest.yml"))
            .unwrap()
            .replace(
                "    vms: processes\n",
                &format!(
                    "    vms: processes\n    registry: {{host: 127.0.0.1, port: {}, username: registry, password: ((registry_password))}}\n",
                    free_port()
                ),
            )
            .replace(
                "variables:\n",
                "variables:\n- {name: registry_password, type: password}\n",
            );
        assert!(manifest.contains("registry_password"), "{manifest}");
        env.w.write("manifest.yml", &manifest);
        env
    }

    /// The demo with the CPI's `vms: containers`: the VM on `10.246.NET.0/24` at `.10`,
    /// its agent listening there.
    fn in_containers(net: u8) -> Env {
        let mut env = Env::new();
        let manifest = std::fs::read_to_string(env.w.path("manifest.yml"))
            .unwrap()
            .replace(
                &format!("127.0.0.1:{}", env.port),
                &format!("10.246.{net}.10:6868"),
            )
            .replace("10.245.1.", &format!("10.246.{net}."))
            .replace("vms: processes", "vms: containers");
        assert!(manifest.contains("vms: containers"), "{manifest}");
        env.w.write("manifest.yml", &manifest);
        env.containers = true;
        env
    }

    fn command(&self, verb: &str, manifest: &str) -> Process {
        let mut command = Process::new(env!("CARGO_BIN_EXE_fleet-updater"));
        command
            .env("FLEET_UPDATER_HOME", self.w.path("home"))
            .current_dir(self.w.path(""))
            .arg(verb)
            .arg(self.w.path(manifest))
            .arg("--state")
            .arg(self.w.path("state.json"));
        command
    }

    fn run(&self, verb: &str, manifest: &str) -> Output {
        self.command(verb, manifest).output().unwrap()
    }

    /// `delete-env`, which must succeed and leave the IaaS empty.
    fn delete(&self, manifest: &str) {
        let out = self.run("delete-env", manifest);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(self.iaas(), (vec![], vec![]));
    }

    fn deploy(&self, manifest: &str) -> String {
        let output = self.run("create-env", manifest);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        stderr
    }

    /// The CPI methods called since the last look.
    fn calls(&self) -> Vec<String> {
        let path = self.w.path("cpi-calls");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        text.lines().map(str::to_string).collect()
    }

    fn state(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.w.path("state.json")).unwrap()).unwrap()
    }

    /// What the IaaS holds: its VMs and its disks.
    fn iaas(&self) -> (Vec<String>, Vec<String>) {
        // VMs by their directories; disks by their records (an attached disk's data is in
        // its VM's directory).
        let list = |dir: &str, records: bool| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(self.w.path(&format!("iaas/{dir}")))
                .map(|d| {
                    d.filter_map(|e| e.ok()?.file_name().to_str().map(str::to_string))
                        .filter_map(|n| match (records, n.strip_suffix(".json")) {
                            (true, Some(stem)) => Some(stem.to_string()),
                            (false, None) => Some(n),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        };
        (list("vms", false), list("disks", true))
    }

    fn vm_dir(&self) -> PathBuf {
        let cid = self.state()["current_vm_cid"].as_str().unwrap().to_string();
        self.w.path(&format!("iaas/vms/{cid}"))
    }

    /// What the kv server answers to `GET path`, and `PUT path` when given a body.
    fn kv(&self, method: &str, path: &str, body: &str) -> String {
        use std::io::{Read, Write};
        let address = std::fs::read_to_string(self.vm_dir().join("sys/run/kv/address")).unwrap();
        let mut stream = std::net::TcpStream::connect(address.trim()).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer.lines().last().unwrap_or_default().to_string()
    }

    /// Every process the IaaS's VMs run: agents and job processes, by their pidfiles.
    fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for vm in self.iaas().0 {
            for file in ["sys/run/agent.pid", "sys/run/bpm/kv/kv.pid"] {
                let path = self.w.path(&format!("iaas/vms/{vm}/{file}"));
                if let Some(pid) = std::fs::read_to_string(path)
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                {
                    pids.push(pid);
                }
            }
        }
        pids
    }

    /// Runs `create-env` until the CPI is called with `method`, then kills it (-9).
    fn killed_at(&self, method: &str) {
        let hold = self.w.path(&format!("hold/{method}"));
        std::fs::write(&hold, "").unwrap();
        let mut child: Child = self
            .command("create-env", "manifest.yml")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let held = self.w.path("hold/held.pid");
        let mut waited = Duration::ZERO;
        while !held.exists() {
            assert!(
                waited < Duration::from_secs(120),
                "{method} was never called"
            );
            std::thread::sleep(Duration::from_millis(50));
            waited += Duration::from_millis(50);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let pid = std::fs::read_to_string(&held).unwrap();
        let _ = Process::new("kill").args(["-9", pid.trim()]).status();
        std::fs::remove_file(&held).unwrap();
        std::fs::remove_file(&hold).unwrap();
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if self.containers {
            fleet_updater::vm::container::Containers::new(&self.w.path("iaas"), None).clean_up(&[]);
            return;
        }
        for pid in self.pids() {
            let _ = Process::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// What a CPI run as `command` answers `request`.
fn answer(command: &mut Process, request: &Value) -> Value {
    let mut cpi = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut cpi.stdin.take().unwrap(),
        request.to_string().as_bytes(),
    )
    .unwrap();
    serde_json::from_slice(&cpi.wait_with_output().unwrap().stdout).unwrap()
}

fn position(lines: &[String], line: &str) -> usize {
    lines
        .iter()
        .position(|l| l.contains(line))
        .unwrap_or_else(|| panic!("no `{line}` in {lines:#?}"))
}

#[test]
fn an_env_is_created_skipped_redeployed_with_its_data_and_deleted() {
    let env = Env::new();
    let out = env.deploy("manifest.yml");
    assert_eq!(
        env.calls(),
        [
            "info",
            "create_stemcell",
            "create_vm",
            "set_vm_metadata",
            "create_disk",
            "attach_disk"
        ],
        "the seed's CPI calls, in order"
    );
    assert!(out.contains("Finished deploying"), "{out}");
    assert!(!out.contains("registry"), "{out}");
    // No registry: the CPI gave the agent its settings in the VM's record.
    let record = std::fs::read_to_string(env.vm_dir().join(".records/vm.json")).unwrap();
    assert!(record.contains("\"mbus\": \"https://mbus:"), "{record}");
    assert!(!record.contains("\"registry\""), "{record}");
    let state = env.state();
    let (vms, disks) = env.iaas();
    assert_eq!(vms, [state["current_vm_cid"].as_str().unwrap()]);
    assert_eq!(disks, [state["disks"][0]["cid"].as_str().unwrap()]);
    assert_eq!(state["stemcells"].as_array().unwrap().len(), 1);
    assert_eq!(state["releases"].as_array().unwrap().len(), 2);
    // The agent's side, in the seed's order: the agent awaited, the disk mounted, the
    // package compiled on the VM, then stop, apply, start, and the wait until it runs.
    let messages: Vec<String> = std::fs::read_to_string(env.vm_dir().join("sys/log/agent.log"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split("agent message ").nth(1).map(str::to_string))
        .filter(|m| m != "get_task")
        .collect();
    let order = [
        "ping",
        "mount_disk",
        "compile_package",
        "stop",
        "apply",
        "run_script",
        "start",
        "get_state",
    ];
    let mut from = 0;
    for method in order {
        from += 1 + position(&messages[from..], method);
    }
    assert!(env.kv("GET", "/", "").starts_with("kv 1 kv-env/kv/0"));
    env.kv("PUT", "/greeting", "hello");
    // The installed CPI runs as the bosh CLI runs it: with only the two variables the
    // CLI sets, the program found where the package noted it when it was compiled.
    let installation = std::fs::read_dir(env.w.path("home/installations"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut cpi = Process::new(installation.join("jobs/process-cpi/bin/cpi"));
    cpi.env_clear()
        .env("BOSH_PACKAGES_DIR", installation.join("packages"))
        .env("BOSH_JOBS_DIR", installation.join("jobs"));
    let info = answer(
        &mut cpi,
        &serde_json::json!({"method": "info", "arguments": [], "context": {"director_uuid": "d"}, "api_version": 2}),
    );
    assert_eq!(
        info["result"]["stemcell_formats"][0], "fleet-process",
        "{info}"
    );
    assert_eq!(env.calls(), ["info"]);

    let again = env.deploy("manifest.yml");
    assert!(again.contains("No deployment, stemcell or release changes. Skipping deploy."));
    assert!(env.calls().is_empty(), "nothing asked of the CPI");

    // A changed property: a new VM, the same disk with its data.
    let old_vm = env.vm_dir();
    let old_pids = env.pids();
    let changed = std::fs::read_to_string(env.w.path("manifest.yml"))
        .unwrap()
        .replace("drain_seconds: 0", "drain_seconds: 1");
    env.w.write("changed.yml", &changed);
    env.deploy("changed.yml");
    assert_eq!(
        env.calls(),
        [
            "info",
            "has_vm",
            "delete_vm",
            "create_vm",
            "set_vm_metadata",
            "attach_disk"
        ]
    );
    assert_ne!(env.vm_dir(), old_vm);
    assert_eq!(env.iaas().1, disks, "the disk is kept");
    assert_eq!(env.kv("GET", "/greeting", ""), "hello");
    assert!(
        old_pids.iter().all(|p| !alive(*p)),
        "the old VM's processes ended"
    );

    // The state file rewritten in the bosh CLI's layout (four-space indents, its
    // manifest digest a SHA-512): delete-env reads it as its own.
    let mut state = env.state();
    state["current_manifest_sha"] = Value::from("cd".repeat(64));
    let mut cli_layout = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut cli_layout, formatter);
    serde::Serialize::serialize(&state, &mut serializer).unwrap();
    std::fs::write(env.w.path("state.json"), &cli_layout).unwrap();
    let pids = env.pids();
    let out = env.run("delete-env", "changed.yml");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        env.calls(),
        [
            "info",
            "has_vm",
            "delete_vm",
            "delete_disk",
            "delete_stemcell"
        ]
    );
    assert_eq!(env.iaas(), (vec![], vec![]));
    assert!(!env.w.path("state.json").exists());
    assert!(
        super::processes::all_end(&pids),
        "nothing outlives delete-env"
    );
    let out = env.run("delete-env", "changed.yml");
    assert!(String::from_utf8_lossy(&out.stderr).contains("No deployment state file found."));
    let _ = env.port;
}

#[test]
fn runs_killed_after_create_vm_and_after_create_disk_are_finished_without_leaks() {
    // With a registry: the agent of a VM made by a killed run reads its settings there.
    let env = Env::with_registry();
    env.killed_at("set_vm_metadata");
    let state = env.state();
    let first_vm = state["current_vm_cid"].as_str().unwrap().to_string();
    assert!(!first_vm.is_empty(), "create_vm's CID was kept at once");
    assert_eq!(env.iaas().0, vec![first_vm.clone()]);

    env.killed_at("attach_disk");
    let state = env.state();
    let disks: Vec<String> = state["disks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["cid"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        disks.len(),
        1,
        "create_disk's CID was kept at once: {state}"
    );
    assert_eq!(state["current_disk_id"], "", "not attached yet");
    let (vms, on_disk) = env.iaas();
    assert_eq!(vms.len(), 1, "the first run's VM went: {vms:?}");
    assert!(!vms.contains(&first_vm));
    assert_eq!(on_disk, disks);

    let _ = env.calls();
    let out = env.deploy("manifest.yml");
    assert!(out.contains("Starting registry on 127.0.0.1"), "{out}");
    // The VM's settings went through the registry: its record names the registry, not
    // the agent's credentials, and the agent keeps what it read.
    let record = std::fs::read_to_string(env.vm_dir().join(".records/vm.json")).unwrap();
    assert!(
        record.contains("\"registry\": \"http://registry:"),
        "{record}"
    );
    assert!(!record.contains("https://mbus:"), "{record}");
    let cached = std::fs::read_to_string(env.vm_dir().join("bosh/settings.json")).unwrap();
    assert!(cached.contains("\"mbus\":\"https://mbus:"), "{cached}");
    let state = env.state();
    let (vms, on_disk) = env.iaas();
    assert_eq!(
        vms,
        [state["current_vm_cid"].as_str().unwrap()],
        "one VM, the state's"
    );
    let kept: Vec<&str> = state["disks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["cid"].as_str().unwrap())
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(on_disk, kept, "one disk, the state's: nothing leaked");
    assert!(env.kv("GET", "/", "").starts_with("kv 1 kv-env/kv/0"));
    env.delete("manifest.yml");
}

#[test]
fn a_manifest_with_problems_names_each_and_changes_nothing() {
    let env = Env::new();
    let manifest = std::fs::read_to_string(env.w.path("manifest.yml")).unwrap();
    let broken = manifest
        .replace("static_ips: [10.245.1.10]", "static_ips: [10.9.9.9]")
        .replace("disk_size: 64", "disk_size: 0")
        .replace("resource_pool: vms", "resource_pool: nothing")
        .replace("((mbus_password))@", "((missing))@");
    env.w.write("broken.yml", &broken);
    let out = env.run("create-env", "broken.yml");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Expected to find variables: missing"),
        "{stderr}"
    );
    let broken = broken.replace("((missing))@", "((mbus_password))@");
    env.w.write("broken.yml", &broken);
    let out = env.run("create-env", "broken.yml");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "static ip '10.9.9.9' must be within subnet range",
        "disk_pools[0].disk_size: must be > 0",
        "jobs[0].resource_pool: must be the name of a resource pool",
    ] {
        assert!(stderr.contains(expected), "{expected} in {stderr}");
    }
    assert!(!env.w.path("state.json").exists(), "nothing was started");
    assert!(env.calls().is_empty());
}

/// `vms: containers` on the CPI: the VM is a container whose agent runs inside it and
/// listens at the VM's address (where `create-env` reaches it), the job at that address
/// too; a new VM keeps the disk's data; a reboot brings the jobs back; `delete-env`
/// leaves no container, bridge or process. Needs root (CI); elsewhere it says why not.
#[test]
fn an_env_on_a_container_vm_is_reached_at_the_vms_address_and_leaves_nothing() {
    if let Some(why) = fleet_updater::vm::container::unavailable() {
        eprintln!("not run: {why}");
        return;
    }
    let env = Env::in_containers(1);
    let out = env.deploy("manifest.yml");
    assert!(out.contains("Finished deploying"), "{out}");
    let iaas = env.w.path("iaas");
    let containers = fleet_updater::vm::container::Containers::new(&iaas, None);
    let cid = env.state()["current_vm_cid"].as_str().unwrap().to_string();
    let record = containers.running(&cid).expect("the VM is a container");
    let inside = |script: &str| {
        let out = std::process::Command::new("nsenter")
            .arg(format!("--target={}", record.pid))
            .args(["--mount", "--uts", "--net", "--pid", "--root", "--wd"])
            .args(["/bin/sh", "-c", script])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // The agent is a process of the VM, listening at its address.
    let agent = inside("cat /var/vcap/sys/run/agent.pid");
    let command = inside(&format!("tr '\\0' ' ' < /proc/{agent}/cmdline"));
    assert!(
        command.contains("vm-agent --settings /var/vcap/bosh/settings/agent.json /var/vcap"),
        "{command}"
    );
    assert!(
        std::net::TcpStream::connect("10.246.1.10:6868").is_ok(),
        "the agent answers at the VM's address"
    );
    let address = std::fs::read_to_string(env.vm_dir().join("sys/run/kv/address")).unwrap();
    assert!(address.starts_with("10.246.1.10:"), "{address}");
    assert!(env.kv("GET", "/", "").starts_with("kv 1 kv-env/kv/0"));
    env.kv("PUT", "/greeting", "hello");
    // The settings it was handed are not the VM's to change.
    assert!(!inside("touch /var/vcap/bosh/settings/agent.json 2>&1").is_empty());

    // A changed property: a new container, the same disk with its data.
    let changed = std::fs::read_to_string(env.w.path("manifest.yml"))
        .unwrap()
        .replace("drain_seconds: 0", "drain_seconds: 1");
    env.w.write("changed.yml", &changed);
    env.deploy("changed.yml");
    let new_cid = env.state()["current_vm_cid"].as_str().unwrap().to_string();
    assert_ne!(new_cid, cid);
    assert!(
        containers.record(&cid).is_none(),
        "the old container is gone"
    );
    assert_eq!(env.kv("GET", "/greeting", ""), "hello");

    // A reboot (the CPI's reboot_vm): the container starts again, its agent brings the
    // job back with its data.
    let request = serde_json::json!({
        "method": "reboot_vm",
        "arguments": [new_cid],
        "context": {"director_uuid": "d", "root": iaas.display().to_string(), "vms": "containers"},
        "api_version": 2,
    });
    let mut cpi = Process::new(env!("CARGO_BIN_EXE_fleet-updater"));
    cpi.arg("cpi");
    let answer = answer(&mut cpi, &request);
    assert!(answer["error"].is_null(), "{answer}");
    let mut waited = Duration::ZERO;
    let greeting = loop {
        let address = std::fs::read_to_string(env.vm_dir().join("sys/run/kv/address"));
        if let Ok(address) = address
            && std::net::TcpStream::connect(address.trim()).is_ok()
        {
            break env.kv("GET", "/greeting", "");
        }
        assert!(waited < Duration::from_secs(30), "the job came back");
        std::thread::sleep(Duration::from_millis(100));
        waited += Duration::from_millis(100);
    };
    assert_eq!(greeting, "hello");

    env.delete("changed.yml");
    assert!(containers.records().is_empty(), "no container is left");
    let links = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    let bridge = fleet_updater::vm::container::network::bridge_name(&iaas, "default");
    assert!(
        !String::from_utf8_lossy(&links.stdout).contains(&bridge),
        "its bridge {bridge} is gone"
    );
}
