//! Calling an external CPI: a process per call, the request on its stdin, the response
//! read from its stdout, within a time limit; its log handed to whoever keeps the task's
//! CPI log.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::error::CpiCallError;
use super::protocol::{Request, Response};

/// The newest protocol version this client speaks: `create_vm` answers its networks and
/// `attach_disk` a disk hint.
pub const MAX_API_VERSION: u32 = 2;

/// How much of a CPI's output is read at most: a CPI that prints without end is cut off.
const OUTPUT_LIMIT: u64 = 64 * 1024 * 1024;

/// How to run the CPI: a program with its arguments (`fleet-updater cpi`), environment
/// and the limit on each call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpiCommand {
    pub executable: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
}

/// A call's result and the log the CPI wrote with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub result: Value,
    pub log: String,
}

/// Receives each call's method, request, and what came back (the response, or the error)
/// with the CPI's log: a director keeps it in the task's CPI log.
pub type LogSink = Arc<dyn Fn(&CallRecord<'_>) + Send + Sync>;

/// One call as the log sink sees it.
pub struct CallRecord<'a> {
    pub method: &'a str,
    pub request: &'a str,
    pub outcome: Result<&'a Value, &'a CpiCallError>,
    pub log: &'a str,
}

pub struct ExternalCpi {
    command: CpiCommand,
    context: Map<String, Value>,
    sink: Option<LogSink>,
    /// What `info` said, asked once.
    info: OnceLock<u32>,
}

impl ExternalCpi {
    /// The program's file name, and its first argument (`fleet-updater cpi`).
    pub fn program_name(&self) -> String {
        let program = self
            .command
            .executable
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match self.command.args.first() {
            Some(first) => format!("{program} {first}"),
            None => program,
        }
    }

    /// A CPI run as `command`, told `director_uuid` and `properties` in each request's
    /// context.
    pub fn new(command: CpiCommand, director_uuid: &str, properties: Map<String, Value>) -> Self {
        let mut context = properties;
        context.insert("director_uuid".into(), Value::String(director_uuid.into()));
        ExternalCpi {
            command,
            context,
            sink: None,
            info: OnceLock::new(),
        }
    }

    /// The same CPI told, in every request's context, the API version of the stemcell
    /// its VMs are made from (`vm.stemcell.api_version`), as CPIs choose by it whether a
    /// VM's agent reads its settings from the registry.
    pub fn for_stemcell_api_version(mut self, version: u32) -> Self {
        self.context.insert(
            "vm".into(),
            serde_json::json!({"stemcell": {"api_version": version}}),
        );
        self
    }

    /// The same CPI, each call's log handed to `sink`.
    pub fn logging_to(mut self, sink: LogSink) -> Self {
        self.sink = Some(sink);
        self
    }

    pub fn command(&self) -> &CpiCommand {
        &self.command
    }

    /// The protocol version to speak: what `info` says the CPI speaks, at most
    /// [`MAX_API_VERSION`]; 1 for a CPI whose `info` fails (an old one).
    pub(crate) async fn api_version(&self) -> u32 {
        if let Some(v) = self.info.get() {
            return *v;
        }
        match self.call_as("info", Vec::new(), 1).await {
            Ok(answer) => self.remember_api_version(&answer.result),
            Err(_) => *self.info.get_or_init(|| 1),
        }
    }

    /// Keeps the version an `info` answer says, so that `info` is asked once.
    pub(crate) fn remember_api_version(&self, info: &Value) -> u32 {
        let spoken = info
            .get("api_version")
            .and_then(Value::as_u64)
            .map_or(1, |v| v.clamp(1, MAX_API_VERSION as u64) as u32);
        *self.info.get_or_init(|| spoken)
    }

    /// Calls `method` with `arguments` at the protocol version the CPI speaks.
    ///
    /// # Errors
    /// The CPI cannot be run, takes too long, prints no response, or answers an error.
    pub async fn call(&self, method: &str, arguments: Vec<Value>) -> Result<Answer, CpiCallError> {
        let version = self.api_version().await;
        self.call_as(method, arguments, version).await
    }

    pub(crate) async fn call_as(
        &self,
        method: &str,
        arguments: Vec<Value>,
        api_version: u32,
    ) -> Result<Answer, CpiCallError> {
        let mut context = self.context.clone();
        context.insert("request_id".into(), Value::String(request_id()));
        let request = Request {
            method: method.to_string(),
            arguments,
            context,
            api_version,
        };
        let text = serde_json::to_string(&request).expect("a request serializes");
        let outcome = self.run(method, &text).await;
        if let Some(sink) = &self.sink {
            let (result, log) = match &outcome {
                Ok(answer) => (Ok(&answer.result), answer.log.as_str()),
                Err((e, log)) => (Err(e), log.as_str()),
            };
            sink(&CallRecord {
                method,
                request: &text,
                outcome: result,
                log,
            });
        }
        outcome.map_err(|(e, _)| e)
    }

    /// Runs the CPI once: its answer, or the error with whatever log it wrote.
    async fn run(&self, method: &str, request: &str) -> Result<Answer, (CpiCallError, String)> {
        let no_log = |e: CpiCallError| (e, String::new());
        let mut command = Command::new(&self.command.executable);
        command
            .args(&self.command.args)
            .envs(self.command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // A CPI installed a moment ago (create-env compiles and places it) may be refused
        // as busy for an instant.
        let mut child = fleet_spawn::spawn(&mut command).await.map_err(|source| {
            no_log(CpiCallError::Spawn {
                method: method.to_string(),
                executable: self.command.executable.display().to_string(),
                source,
            })
        })?;
        let group = child.id();
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let exchange = async {
            // A CPI that never reads its request still gets to answer.
            let _ = stdin.write_all(request.as_bytes()).await;
            drop(stdin);
            let mut out = Vec::new();
            let mut err = Vec::new();
            let mut out_reader = (&mut stdout).take(OUTPUT_LIMIT);
            let mut err_reader = (&mut stderr).take(OUTPUT_LIMIT);
            // What could not be read counts as not printed.
            let _ = tokio::join!(
                out_reader.read_to_end(&mut out),
                err_reader.read_to_end(&mut err),
            );
            let _ = child.wait().await;
            (out, err)
        };
        let (out, err) = match tokio::time::timeout(self.command.timeout, exchange).await {
            Ok(read) => read,
            Err(_) => {
                if let Some(pgid) = group.and_then(|g| i32::try_from(g).ok()) {
                    // SAFETY: kill(2) on the CPI's own process group; no memory is touched.
                    unsafe {
                        libc::kill(-pgid, libc::SIGKILL);
                    }
                }
                return Err(no_log(CpiCallError::TimedOut {
                    method: method.to_string(),
                    after: self.command.timeout,
                }));
            }
        };
        let stderr_tail = tail(&String::from_utf8_lossy(&err), 500);
        let response: Response = serde_json::from_slice(&out).map_err(|e| {
            no_log(CpiCallError::Unreadable {
                method: method.to_string(),
                problem: e.to_string(),
                output: head(&String::from_utf8_lossy(&out), 200),
                stderr: stderr_tail.clone(),
            })
        })?;
        match response.error {
            Some(error) => Err((
                CpiCallError::Cloud {
                    method: method.to_string(),
                    kind: error.kind,
                    message: error.message,
                    ok_to_retry: error.ok_to_retry,
                },
                response.log,
            )),
            None => Ok(Answer {
                result: response.result,
                log: response.log,
            }),
        }
    }
}

/// A request's id, as BOSH's director names them in its logs and the CPI's (`cpi-NNNNNN`).
fn request_id() -> String {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).expect("the system's random source works");
    format!("cpi-{:06}", u32::from_le_bytes(bytes) % 1_000_000)
}

fn head(text: &str, chars: usize) -> String {
    let text = text.trim();
    if text.chars().count() > chars {
        text.chars().take(chars).collect::<String>() + "..."
    } else {
        text.to_string()
    }
}

fn tail(text: &str, chars: usize) -> String {
    let text = text.trim();
    let count = text.chars().count();
    if count > chars {
        "...".to_string() + &text.chars().skip(count - chars).collect::<String>()
    } else {
        text.to_string()
    }
}
