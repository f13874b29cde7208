//! A chaos soak of `fleet-updater serve`: clients deploy, update, recreate, restart and
//! delete deployments through the director API at once, while a fault injector kills
//! `serve` (SIGKILL and SIGTERM) and starts it again, given a small filesystem holding
//! the state fills and frees its disk, and on a process-backed fleet kills VMs'
//! supervisors and jobs' processes. Then the invariants are checked on what is left:
//! every task ended, no lock held, every deployment the clients were told exists does
//! (and those they were told are deleted do not), no address held twice, no VM or disk
//! in the cloud that the director does not know, on a process-backed fleet every
//! instance's processes running again (where the last operation ended `done`) and no
//! process of a VM nobody knows, nothing secret in `serve`'s output.
//! Shared by `examples/chaos_soak.rs` (the long run) and a short run among the tests.

// A soak runs against the real clock: `serve` is another process.
#![allow(clippy::disallowed_types, dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::{Certificate, Client, StatusCode};
use serde_json::Value;

/// The admin's password: it must appear in no output of `serve`.
const PASSWORD: &str = "Soak-Secret-9f3c1e7a";

#[derive(Debug, Clone)]
pub struct SoakSettings {
    /// The `fleet-updater` program.
    pub program: PathBuf,
    pub duration: Duration,
    pub clients: usize,
    /// Deployments each client works on.
    pub deployments_per_client: usize,
    /// Between two faults (each one a little sooner or later).
    pub fault_every: Duration,
    pub seed: u64,
    /// Whether `serve` is also killed (SIGKILL), not only stopped (SIGTERM).
    pub kill: bool,
    /// A small filesystem for the state directory, which the injector fills and frees;
    /// without one, the disk is left alone.
    pub small_disk: Option<PathBuf>,
    /// The kv release's source: the fleet's VMs are then processes of this machine
    /// running it (`iaas: processes`), and the injector also kills their supervisors and
    /// jobs. Without it, the fleet is simulated.
    pub processes: Option<PathBuf>,
}

#[derive(Debug, Default)]
pub struct SoakReport {
    pub elapsed: Duration,
    /// Operations by `kind outcome`.
    pub operations: BTreeMap<String, usize>,
    /// Faults by kind.
    pub faults: BTreeMap<String, usize>,
    pub violations: Vec<String>,
    /// What the invariants were checked on, by what: a check that saw nothing says so.
    pub checked: BTreeMap<String, usize>,
}

impl SoakReport {
    pub fn operations_done(&self) -> usize {
        self.operations.values().sum()
    }

    pub fn faults_injected(&self) -> usize {
        self.faults.values().sum()
    }
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "soak of {:.0} s", self.elapsed.as_secs_f64())?;
        writeln!(f, "operations: {}", self.operations_done())?;
        for (kind, n) in &self.operations {
            writeln!(f, "  {kind}: {n}")?;
        }
        writeln!(f, "faults injected: {}", self.faults_injected())?;
        for (kind, n) in &self.faults {
            writeln!(f, "  {kind}: {n}")?;
        }
        writeln!(f, "checked:")?;
        for (what, n) in &self.checked {
            writeln!(f, "  {what}: {n}")?;
        }
        writeln!(f, "invariant violations: {}", self.violations.len())?;
        for v in &self.violations {
            writeln!(f, "  {v}")?;
        }
        Ok(())
    }
}

/// A small deterministic generator: a soak's choices repeat with its seed.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const FLEET: &str = r#"simulation:
  seed: 7
  cpi_latency: 20ms-80ms
  agent_latency: 5ms-30ms
  faults: []
releases:
  - name: postgres
    version: "16.4"
    jobs: [{name: postgres, packages: [postgres-16]}]
    packages: [{name: postgres-16}]
stemcells:
  - {name: bosh-warden-boshlite-ubuntu-jammy-go_agent, os: ubuntu-jammy, version: "1.612"}
cloud_config: |
  azs: [{name: z1}, {name: z2}]
  vm_types: [{name: small, cloud_properties: {cpu: 1, ram: 1024}}]
  disk_types: [{name: small, disk_size: 1024}]
  networks:
  - name: default
    type: manual
    subnets:
    - {range: 10.250.0.0/22, gateway: 10.250.0.1, azs: [z1, z2]}
  compilation: {workers: 2, network: default, vm_type: small, az: z1}
plans:
  - id: soak
    releases: [{name: postgres, version: "16.4"}]
    stemcell: {os: ubuntu-jammy, version: "1.612"}
    manifest: |
      update: {canaries: 1, max_in_flight: 1, canary_watch_time: 100-1000, update_watch_time: 100-1000}
      instance_groups:
      - name: db
        instances: 1
        azs: [z1]
        jobs: [{name: postgres, release: postgres, properties: {port: 5432}}]
        vm_type: small
        stemcell: default
        networks: [{name: default}]
provision: []
"#;

/// A process-backed fleet running the kv release built from `kv`'s source; its VMs are
/// supervised by processes of their own, as `serve`'s are.
fn processes_fleet(kv: &Path) -> String {
    format!(
        r#"iaas: processes
vms: processes
release_sources:
  - {{path: {kv}, versions: ["1"]}}
stemcells:
  - {{name: bosh-local, os: local, version: "1"}}
cloud_config: |
  azs: [{{name: z1}}, {{name: z2}}]
  vm_types: [{{name: small}}]
  networks:
  - name: default
    type: manual
    subnets:
    - {{range: 10.251.0.0/22, gateway: 10.251.0.1, azs: [z1, z2]}}
  compilation: {{workers: 1, network: default, vm_type: small, az: z1}}
plans: []
provision: []
"#,
        kv = kv.display()
    )
}

/// A kv deployment: its servers take any free port (its VMs share this machine's).
fn kv_manifest(name: &str, instances: u64) -> String {
    format!(
        "name: {name}
releases: [{{name: kv, version: '1'}}]
stemcells: [{{alias: default, os: local, version: '1'}}]
update: {{canaries: 1, max_in_flight: 2, canary_watch_time: 200-20000, update_watch_time: 200-20000}}
instance_groups:
- name: kv
  instances: {instances}
  azs: [z1, z2]
  jobs: [{{name: kv, release: kv, properties: {{kv: {{drain_seconds: 0}}}}}}]
  vm_type: small
  stemcell: default
  persistent_disk: 16
  networks: [{{name: default}}]
"
    )
}

fn manifest(name: &str, instances: u64, port: u64) -> String {
    format!(
        "name: {name}
releases: [{{name: postgres, version: '16.4'}}]
stemcells: [{{alias: default, os: ubuntu-jammy, version: '1.612'}}]
update: {{canaries: 1, max_in_flight: 2, canary_watch_time: 100-1000, update_watch_time: 100-1000}}
instance_groups:
- name: db
  instances: {instances}
  azs: [z1, z2]
  jobs: [{{name: postgres, release: postgres, properties: {{port: {port}}}}}]
  vm_type: small
  stemcell: default
  persistent_disk: 1024
  networks: [{{name: default}}]
"
    )
}

/// The `serve` process, started again after each fault at the same address.
struct Serve {
    program: PathBuf,
    dir: PathBuf,
    state: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Serve {
    fn config(&self) -> PathBuf {
        self.dir.join("soak.yml")
    }

    fn output(&self) -> PathBuf {
        self.dir.join("serve.log")
    }

    /// Starts `serve` and waits until it has printed where it listens.
    fn start(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.output())
            .map_err(|e| e.to_string())?;
        let mut child = Command::new(&self.program)
            .arg("serve")
            .arg("-c")
            .arg(self.config())
            .arg("--state-dir")
            .arg(&self.state)
            .args([
                "--director-listen",
                &format!("127.0.0.1:{}", self.port),
                "--broker-listen",
                "127.0.0.1:0",
                "--log-level",
                "info",
            ])
            .env_remove("FLEET_UPDATER_CONFIG")
            .env_remove("FLEET_UPDATER_LOG")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start serve: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let copy = self.dir.join("serve.stdout");
        let (ready, listening) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(copy)
                .ok();
            let mut said = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(out) = out.as_mut() {
                    let _ = std::io::Write::write_all(out, format!("{line}\n").as_bytes());
                }
                if !said && line.starts_with("stop with") {
                    said = true;
                    let _ = ready.send(());
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if listening.recv_timeout(Duration::from_millis(200)).is_ok() {
                self.child = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("serve exited as it started ({status})"));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err("serve did not start within 120 s".to_string());
            }
        }
    }

    fn signal(&mut self, signal: &str) {
        if let Some(child) = &mut self.child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.child = None;
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.signal("-KILL");
    }
}

/// What a client was last told of a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Belief {
    Exists,
    Gone,
    /// The last operation's outcome is not known (`serve` went away under it, or it
    /// failed halfway).
    Unknown,
}

#[derive(Clone)]
struct Api {
    client: Client,
    base: String,
}

impl Api {
    fn new(ca: &Path, port: u16) -> Result<Api, String> {
        let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::builder()
            .tls_certs_only([Certificate::from_pem(&pem).map_err(|e| e.to_string())?])
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Api {
            client,
            base: format!("https://127.0.0.1:{port}"),
        })
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<String>,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .basic_auth("admin", Some(PASSWORD));
        if let Some(body) = body {
            request = request.header("content-type", "text/yaml").body(body);
        }
        request.send().await
    }

    async fn json(&self, path: &str) -> Result<Value, String> {
        let response = self
            .send(reqwest::Method::GET, path, None)
            .await
            .map_err(|e| e.to_string())?;
        if response.status() != StatusCode::OK {
            return Err(format!("GET {path}: {}", response.status()));
        }
        response.json().await.map_err(|e| e.to_string())
    }

    /// Follows a task until it ends: its state, `None` when `serve` did not answer for
    /// `patience`, or `stuck` after 600 s.
    async fn wait(&self, id: u64, patience: Duration) -> Option<String> {
        let mut silent_since = Instant::now();
        // A task that runs for longer is stuck: said, not waited for forever.
        let give_up = Instant::now() + Duration::from_secs(600);
        loop {
            if Instant::now() > give_up {
                return Some("stuck (still running after 600 s)".into());
            }
            match self.json(&format!("/tasks/{id}")).await {
                Ok(task) => {
                    silent_since = Instant::now();
                    let state = task["state"].as_str().unwrap_or_default().to_string();
                    if !["queued", "processing", "cancelling"].contains(&state.as_str()) {
                        return Some(state);
                    }
                }
                Err(_) if silent_since.elapsed() > patience => return None,
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The task a redirect names (`Location: /tasks/ID`).
fn task_of(response: &reqwest::Response) -> Option<u64> {
    response
        .headers()
        .get("location")?
        .to_str()
        .ok()?
        .strip_prefix("/tasks/")?
        .parse()
        .ok()
}

type Counts = Arc<Mutex<BTreeMap<String, usize>>>;

fn count(counts: &Counts, what: String) {
    *counts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(what)
        .or_default() += 1;
}

/// What a client was told: of each deployment, and which ones' last operation ended
/// `done` (a restart cut off by a fault may leave jobs stopped, as in BOSH).
struct Told {
    beliefs: BTreeMap<String, Belief>,
    settled: BTreeSet<String>,
}

/// One client: works on its own deployments until `until`, and returns what it was told.
async fn client(
    api: Api,
    id: usize,
    deployments: usize,
    seed: u64,
    until: Instant,
    counts: Counts,
    processes: bool,
) -> Told {
    let mut dice = Dice(seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut beliefs: BTreeMap<String, Belief> = (0..deployments)
        .map(|k| (format!("soak-{id}-{k}"), Belief::Gone))
        .collect();
    let mut settled = BTreeSet::new();
    while Instant::now() < until {
        let name = format!("soak-{id}-{}", dice.below(deployments as u64));
        settled.remove(&name);
        let belief = beliefs[&name];
        let (kind, method, path, body) = match (belief, dice.below(10)) {
            (Belief::Gone | Belief::Unknown, _) | (Belief::Exists, 0..=3) => (
                "deploy",
                reqwest::Method::POST,
                "/deployments".to_string(),
                Some(if processes {
                    kv_manifest(&name, 1 + dice.below(2))
                } else {
                    manifest(&name, 1 + dice.below(3), 5000 + dice.below(100))
                }),
            ),
            (Belief::Exists, 4..=5) => (
                "recreate",
                reqwest::Method::PUT,
                format!("/deployments/{name}/jobs/*?state=recreate"),
                Some(String::new()),
            ),
            (Belief::Exists, 6..=7) => (
                "restart",
                reqwest::Method::PUT,
                format!("/deployments/{name}/jobs/*?state=restart"),
                Some(String::new()),
            ),
            (Belief::Exists, _) => (
                "delete",
                reqwest::Method::DELETE,
                format!("/deployments/{name}"),
                None,
            ),
        };
        let response = match api.send(method, &path, body).await {
            Ok(r) => r,
            Err(_) => {
                // `serve` is down: what the request did, if anything, is not known.
                count(&counts, format!("{kind} unanswered"));
                if kind == "deploy" || kind == "delete" {
                    beliefs.insert(name, Belief::Unknown);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        let status = response.status();
        if status != StatusCode::FOUND {
            count(&counts, format!("{kind} refused {}", status.as_u16()));
            if status.is_server_error() {
                beliefs.insert(name, Belief::Unknown);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let Some(task) = task_of(&response) else {
            count(&counts, format!("{kind} without task"));
            continue;
        };
        let ended = api.wait(task, Duration::from_secs(180)).await;
        let outcome = ended.clone().unwrap_or_else(|| "unfollowed".into());
        count(&counts, format!("{kind} {outcome}"));
        let now = match (kind, ended.as_deref()) {
            ("deploy", Some("done")) => Belief::Exists,
            ("delete", Some("done")) => Belief::Gone,
            (_, Some("done")) => belief,
            ("recreate" | "restart", Some(_)) => belief,
            _ => Belief::Unknown,
        };
        if ended.as_deref() == Some("done") {
            settled.insert(name.clone());
        }
        beliefs.insert(name, now);
    }
    Told { beliefs, settled }
}

/// Writes zeros until the disk holding `path` is full.
pub fn fill(path: &Path) {
    if let Ok(mut file) = std::fs::File::create(path) {
        let chunk = vec![0u8; 1 << 16];
        while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
        let small = [0u8; 512];
        while std::io::Write::write_all(&mut file, &small).is_ok() {}
        let _ = file.sync_all();
    }
}

/// Runs the soak in `dir` (its state, `serve`'s output and configuration stay there).
pub async fn soak(settings: &SoakSettings, dir: &Path) -> Result<SoakReport, String> {
    let started = Instant::now();
    let state_root = settings
        .small_disk
        .clone()
        .unwrap_or_else(|| dir.to_path_buf());
    let state = state_root.join("soak-state");
    let fleet = match &settings.processes {
        Some(kv) => processes_fleet(kv),
        None => FLEET.to_string(),
    };
    std::fs::write(dir.join("soak-fleet.yml"), &fleet).map_err(|e| e.to_string())?;
    std::fs::write(
        dir.join("soak.yml"),
        format!(
            "inventory: {{type: embedded}}\nembedded: {{fleet: soak-fleet.yml}}\nserve:\n  users: [{{name: admin, password: {PASSWORD}}}]\n  health_monitor: {{interval: 2s}}\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let mut serve = Serve {
        program: settings.program.clone(),
        dir: dir.to_path_buf(),
        state: state.clone(),
        port,
        child: None,
    };
    serve.start()?;
    let api = Api::new(&state.join("serve-ca.pem"), port)?;
    let until = Instant::now() + settings.duration;
    let counts: Counts = Arc::default();
    let mut clients = Vec::new();
    for id in 0..settings.clients {
        clients.push(tokio::spawn(client(
            api.clone(),
            id,
            settings.deployments_per_client,
            settings.seed,
            until,
            Arc::clone(&counts),
            settings.processes.is_some(),
        )));
    }
    // The injector, on this task, between the clients' requests.
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let mut dice = Dice(settings.seed.wrapping_add(17));
    let filler = settings.small_disk.as_ref().map(|d| d.join("filler"));
    let mut filled = false;
    loop {
        let jitter = settings.fault_every.as_millis() as u64 / 2;
        let wait = settings.fault_every / 2 + Duration::from_millis(dice.below(jitter.max(1) * 2));
        if Instant::now() + wait >= until {
            break;
        }
        tokio::time::sleep(wait).await;
        // On a process-backed fleet, two more: a VM's supervisor or a job's process.
        let choice = match (settings.processes.is_some(), dice.below(6)) {
            (true, 4) => 4,
            (true, 5) => 5,
            (_, roll) => roll % if filler.is_some() { 4 } else { 3 },
        };
        // Started again; on a full disk `serve` may refuse to start (it cannot recover
        // its state): then the disk is freed first, as an operator would.
        let mut restart = |serve: &mut Serve, filled: &mut bool| -> Result<(), String> {
            match serve.start() {
                Ok(()) => Ok(()),
                Err(e) if *filled => {
                    if let Some(filler) = &filler {
                        let _ = std::fs::remove_file(filler);
                    }
                    *filled = false;
                    *faults
                        .entry(format!(
                            "serve did not start on the full disk ({e}); disk freed"
                        ))
                        .or_default() += 1;
                    serve.start()
                }
                Err(e) => Err(e),
            }
        };
        let kind = match (choice, &filler) {
            (0, _) if settings.kill => {
                serve.signal("-KILL");
                restart(&mut serve, &mut filled)?;
                "serve killed (SIGKILL) and started again"
            }
            (0 | 1, _) => {
                serve.signal("-TERM");
                restart(&mut serve, &mut filled)?;
                "serve stopped (SIGTERM) and started again"
            }
            (3, Some(filler)) if !filled => {
                fill(filler);
                filled = true;
                "disk filled"
            }
            (3, Some(filler)) => {
                let _ = std::fs::remove_file(filler);
                filled = false;
                "disk freed"
            }
            (4 | 5, _) => {
                let supervisors = choice == 4;
                let pids = vm_pids(&state.join("iaas"), supervisors);
                match pids.get(dice.below(pids.len() as u64) as usize) {
                    Some(pid) => {
                        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                        if supervisors {
                            "a VM's supervisor killed (SIGKILL)"
                        } else {
                            "a job's process killed (SIGKILL)"
                        }
                    }
                    None => "none (a quiet spell)",
                }
            }
            _ => {
                // A pause: the clients' work runs undisturbed for a while.
                "none (a quiet spell)"
            }
        };
        *faults.entry(kind.to_string()).or_default() += 1;
    }
    if let Some(filler) = &filler {
        let _ = std::fs::remove_file(filler);
    }
    let mut told = Told {
        beliefs: BTreeMap::new(),
        settled: BTreeSet::new(),
    };
    for c in clients {
        let one = c.await.map_err(|e| e.to_string())?;
        told.beliefs.extend(one.beliefs);
        told.settled.extend(one.settled);
    }
    faults.remove("none (a quiet spell)");
    let mut report = SoakReport {
        operations: counts.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        faults,
        ..SoakReport::default()
    };
    report.violations = report
        .operations
        .iter()
        .filter(|(kind, _)| kind.contains("stuck"))
        .map(|(kind, n)| format!("{n} tasks {kind}"))
        .collect();
    let checked = check(
        &api,
        &mut serve,
        &told,
        dir,
        &state,
        settings.processes.is_some(),
        &mut report.checked,
    );
    report.violations.extend(checked.await);
    // Nothing of the fleet outlives the soak: its VMs' supervisors are daemons.
    for pid in processes_under(&state.join("iaas")) {
        let _ = Command::new("kill")
            .args(["-9", &pid.0.to_string()])
            .status();
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The pids the VMs under `iaas` wrote: their supervisors', or their jobs' processes'.
fn vm_pids(iaas: &Path, supervisors: bool) -> Vec<u32> {
    let mut files = Vec::new();
    for vm in std::fs::read_dir(iaas.join("vms"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let run = vm.path().join("sys/run");
        if supervisors {
            files.push(run.join("supervisor.pid"));
        } else {
            for job in std::fs::read_dir(run.join("bpm"))
                .into_iter()
                .flatten()
                .flatten()
            {
                for file in std::fs::read_dir(job.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    files.push(file.path());
                }
            }
        }
    }
    let mut pids: Vec<u32> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "pid"))
        .filter_map(|f| std::fs::read_to_string(f).ok()?.trim().parse().ok())
        .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    pids.sort_unstable();
    pids
}

/// Every process of this machine working in a VM's directory under `iaas` (by its
/// working directory or its command line), with the VM's CID.
fn processes_under(iaas: &Path) -> Vec<(u32, String)> {
    let vms = iaas.join("vms");
    let vms = std::fs::canonicalize(&vms).unwrap_or(vms);
    let prefix = vms.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let cwd = std::fs::read_link(entry.path().join("cwd"))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let Some(at) = [cwd, cmdline].into_iter().find_map(|text| {
            text.find(&prefix)
                .map(|i| text[i + prefix.len()..].to_string())
        }) else {
            continue;
        };
        let cid: String = at
            .trim_start_matches('/')
            .chars()
            .take_while(|c| *c != '/' && !c.is_whitespace())
            .collect();
        if !cid.is_empty() {
            found.push((pid, cid));
        }
    }
    found
}

/// The invariants, on what the soak left.
async fn check(
    api: &Api,
    serve: &mut Serve,
    told: &Told,
    dir: &Path,
    state: &Path,
    processes: bool,
    checked: &mut BTreeMap<String, usize>,
) -> Vec<String> {
    let mut violations = Vec::new();
    // Every task ends by itself (a task of a killed process is ended by the next start).
    let deadline = Instant::now() + Duration::from_secs(180);
    let running = loop {
        let running = api
            .json("/tasks?state=queued,processing,cancelling&verbose=2")
            .await
            .map(|t| t.as_array().map_or(0, Vec::len))
            .unwrap_or(usize::MAX);
        if running == 0 || Instant::now() > deadline {
            break running;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if running != 0 {
        violations.push(format!(
            "{running} tasks still running 180 s after the soak"
        ));
    }
    match api.json("/locks").await {
        Ok(locks) if locks.as_array().is_some_and(Vec::is_empty) => {}
        Ok(locks) => violations.push(format!("locks held after every task ended: {locks}")),
        Err(e) => violations.push(format!("locks unreadable: {e}")),
    }
    let listed: BTreeSet<String> = match api.json("/deployments").await {
        Ok(d) => d
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["name"].as_str().map(str::to_string))
            .collect(),
        Err(e) => {
            violations.push(format!("deployments unreadable: {e}"));
            BTreeSet::new()
        }
    };
    for (name, belief) in &told.beliefs {
        match belief {
            Belief::Exists if !listed.contains(name) => {
                violations.push(format!("{name} was deployed (its task done) but is gone"))
            }
            Belief::Gone if listed.contains(name) => {
                violations.push(format!("{name} was deleted (its task done) but is listed"))
            }
            _ => {}
        }
    }
    // Every instance's processes run again where the last operation ended `done`: the
    // health monitor brought back what the injector killed.
    if processes {
        for name in listed.intersection(&told.settled) {
            match all_running(api, name).await {
                Ok(running) => *checked.entry("instances running".into()).or_default() += running,
                Err(e) => violations.push(format!("{name}: {e}")),
            }
        }
    }
    // The cloud against the director, read from the state once `serve` is stopped.
    serve.signal("-TERM");
    violations.extend(cloud_matches_director(state, dir, processes, checked).await);
    for file in ["serve.log", "serve.stdout"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        if text.contains(PASSWORD) {
            violations.push(format!("the admin's password is in serve's {file}"));
        }
    }
    violations
}

/// Whether every instance of `deployment` has all its processes running, asked for
/// 60 s: the health monitor's pass brings back what was killed. How many run.
async fn all_running(api: &Api, deployment: &str) -> Result<usize, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let states = instance_states(api, deployment).await?;
        let failing: Vec<&String> = states.iter().filter(|s| *s != "running").collect();
        if failing.is_empty() {
            return Ok(states.len());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "instances not running 60 s after the soak: {failing:?}"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Each instance's `process_state`, as `bosh instances --ps` asks for it.
async fn instance_states(api: &Api, deployment: &str) -> Result<Vec<String>, String> {
    let path = format!("/deployments/{deployment}/instances?format=full");
    let response = api
        .send(reqwest::Method::GET, &path, None)
        .await
        .map_err(|e| e.to_string())?;
    let task = task_of(&response).ok_or(format!("GET {path}: {}", response.status()))?;
    match api.wait(task, Duration::from_secs(60)).await.as_deref() {
        Some("done") => {}
        other => return Err(format!("the instances' task {task} ended {other:?}")),
    }
    let output = api
        .send(
            reqwest::Method::GET,
            &format!("/tasks/{task}/output?type=result"),
            None,
        )
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    Ok(output
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|i| i["process_state"].as_str().unwrap_or_default().to_string())
        .collect())
}

/// No address held twice, no VM or disk in the cloud the director does not know, and on
/// a process-backed fleet no process of a VM it does not know.
async fn cloud_matches_director(
    state: &Path,
    dir: &Path,
    processes: bool,
    checked: &mut BTreeMap<String, usize>,
) -> Vec<String> {
    use fleet_updater::fleet::{self, Access, Definition};
    let mut violations = Vec::new();
    let text = std::fs::read_to_string(dir.join("soak-fleet.yml")).unwrap_or_default();
    let definition = match Definition::parse(&text) {
        Ok(d) => d,
        Err(e) => return vec![format!("the soak's fleet: {e}")],
    };
    let fleet = match fleet::open(
        state,
        &definition,
        Access::ReadOnly,
        &fleet_updater::store::StoreLocation::Sqlite,
        &mut |_| {},
    )
    .await
    {
        Ok(f) => f,
        Err(e) => return vec![format!("the state cannot be opened: {e}")],
    };
    let director = fleet.director();
    let deployments = director.deployments().await.unwrap_or_default();
    let mut addresses: BTreeMap<String, String> = BTreeMap::new();
    let mut known_vms = BTreeSet::new();
    let mut known_disks = BTreeSet::new();
    for d in &deployments {
        for i in director.instances(&d.name).await.unwrap_or_default() {
            for address in &i.vm_networks {
                let holder = format!("{}/{}", d.name, i.id);
                if let Some(other) = addresses.insert(address.clone(), holder.clone()) {
                    violations.push(format!("{address} held by {other} and {holder}"));
                }
            }
            known_vms.extend(i.vm_cid.clone());
        }
        for vm in director.vms(&d.name).await.unwrap_or_default() {
            known_vms.insert(vm.cid);
        }
        for vm in director.compilation_vms(&d.name).await.unwrap_or_default() {
            known_vms.insert(vm.cid);
        }
        for disk in director.disks(&d.name).await.unwrap_or_default() {
            known_disks.insert(disk.cid);
        }
    }
    for disk in director.orphaned_disks().await.unwrap_or_default() {
        known_disks.insert(disk.cid);
    }
    let iaas = state.join("iaas");
    let (in_cloud, disks_in_cloud): (Vec<String>, Vec<String>) = if processes {
        let Ok(opened) = fleet_updater::vm::iaas::ProcessIaas::open(&iaas) else {
            return vec![format!("the IaaS at {} cannot be read", iaas.display())];
        };
        let vms = opened.vms().unwrap_or_default();
        (
            vms.into_iter().map(|vm| vm.cid).collect(),
            opened.disk_cids().unwrap_or_default(),
        )
    } else {
        let vms = fleet.cloud.vms().await;
        (
            vms.into_iter().map(|(cid, _)| cid).collect(),
            fleet.cloud.disks().await,
        )
    };
    checked.insert("VMs in the cloud".into(), in_cloud.len());
    checked.insert("disks in the cloud".into(), disks_in_cloud.len());
    for cid in in_cloud {
        if !known_vms.contains(&cid) {
            violations.push(format!("VM {cid} is in the cloud but no instance's"));
        }
    }
    for cid in disks_in_cloud {
        if !known_disks.contains(&cid) {
            violations.push(format!(
                "disk {cid} is in the cloud but unknown to the director"
            ));
        }
    }
    if processes {
        let seen = processes_under(&iaas);
        checked.insert("processes of VMs".into(), seen.len());
        // The VMs' supervisors outlive `serve`: a check that sees none of them sees
        // nothing.
        if !known_vms.is_empty() && seen.is_empty() {
            violations.push("no process of the fleet's VMs is seen: the check is blind".into());
        }
        for (pid, cid) in seen {
            if !known_vms.contains(&cid) {
                violations.push(format!(
                    "process {pid} runs for VM {cid}, which no record names"
                ));
            }
        }
    }
    violations
}
