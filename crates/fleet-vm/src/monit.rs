//! A job's `monit` file, as far as BOSH jobs use it: `check process NAME`, its pidfile,
//! its start and stop programs with their timeouts, its group and the processes it
//! `depends on`. Other statements (`if ... then ...`, `mode`) and other checks (`check
//! file`) are read past: the supervisor here checks liveness by pidfile, as monit does.
//! Pure: text in, processes or the line at fault out.

use std::time::Duration;

/// monit's own default for a start or stop program.
pub const DEFAULT_PROGRAM_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitProcess {
    pub name: String,
    pub pidfile: String,
    pub start: String,
    pub start_timeout: Duration,
    pub stop: Option<String>,
    pub stop_timeout: Duration,
    pub group: Option<String>,
    /// The processes started before this one and stopped after it.
    pub depends_on: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("monit line {line}: {message}")]
pub struct MonitError {
    pub line: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    text: String,
    quoted: bool,
    line: usize,
}

impl Token {
    fn is(&self, word: &str) -> bool {
        !self.quoted && self.text.eq_ignore_ascii_case(word)
    }
}

fn tokens(text: &str) -> Result<Vec<Token>, MonitError> {
    let mut found = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let mut chars = raw.chars().peekable();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() {
                chars.next();
            } else if c == '#' {
                break;
            } else if c == '"' || c == '\'' {
                chars.next();
                let mut quoted = String::new();
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some(other) => quoted.push(other),
                        None => {
                            return Err(MonitError {
                                line,
                                message: "a quoted string is not closed on its line".into(),
                            });
                        }
                    }
                }
                found.push(Token {
                    text: quoted,
                    quoted: true,
                    line,
                });
            } else {
                let mut word = String::new();
                while let Some(&w) = chars.peek() {
                    if w.is_whitespace() || w == '"' || w == '\'' || w == '#' {
                        break;
                    }
                    word.push(w);
                    chars.next();
                }
                found.push(Token {
                    text: word,
                    quoted: false,
                    line,
                });
            }
        }
    }
    Ok(found)
}

/// Reads the processes a monit file declares.
///
/// # Errors
/// The first problem, with its line: a process without a name, pidfile or start
/// program, an unclosed quote, a timeout that is not a number of seconds or minutes.
pub fn parse(text: &str) -> Result<Vec<MonitProcess>, MonitError> {
    let tokens = tokens(text)?;
    let mut processes = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if !tokens[i].is("check") {
            i += 1;
            continue;
        }
        let line = tokens[i].line;
        let kind = tokens.get(i + 1).map(|t| t.text.to_ascii_lowercase());
        let end = tokens[i + 1..]
            .iter()
            .position(|t| t.is("check"))
            .map_or(tokens.len(), |p| p + i + 1);
        if kind.as_deref() == Some("process") {
            let name = tokens
                .get(i + 2)
                .filter(|_| i + 2 < end)
                .ok_or_else(|| MonitError {
                    line,
                    message: "`check process` needs a name".into(),
                })?;
            processes.push(process(&name.text, line, &tokens[i + 3..end])?);
        }
        i = end;
    }
    Ok(processes)
}

fn process(name: &str, line: usize, body: &[Token]) -> Result<MonitProcess, MonitError> {
    let mut pidfile = None;
    let mut start = None;
    let mut stop = None;
    let mut group = None;
    let mut depends_on = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let t = &body[i];
        if t.is("depends") && body.get(i + 1).is_some_and(|o| o.is("on")) {
            // `depends on a, b` or `depends on a,b`: names up to the next statement.
            i += 2;
            while let Some(name) = body.get(i).filter(|n| !n.quoted) {
                let names: Vec<&str> = name.text.split(',').filter(|n| !n.is_empty()).collect();
                depends_on.extend(names.iter().map(|n| n.to_string()));
                i += 1;
                let more = name.text.ends_with(',')
                    || body.get(i).is_some_and(|n| n.text.starts_with(','));
                if !more {
                    break;
                }
            }
            if depends_on.is_empty() {
                return Err(MonitError {
                    line: t.line,
                    message: "`depends on` needs a process name".into(),
                });
            }
        } else if t.is("pidfile") {
            pidfile = body.get(i + 1).map(|p| p.text.clone());
            i += 2;
        } else if t.is("group") {
            group = body.get(i + 1).map(|g| g.text.clone());
            i += 2;
        } else if (t.is("start") || t.is("stop")) && program_follows(body, i + 1) {
            let mut j = i + 1;
            while j < body.len() && (body[j].is("program") || body[j].is("=")) {
                j += 1;
            }
            let command = body.get(j).filter(|c| c.quoted).ok_or_else(|| MonitError {
                line: t.line,
                message: format!("`{} program` needs a quoted command", t.text),
            })?;
            let (timeout, next) = program_options(body, j + 1)?;
            if t.is("start") {
                start = Some((command.text.clone(), timeout));
            } else {
                stop = Some((command.text.clone(), timeout));
            }
            i = next;
        } else {
            i += 1;
        }
    }
    let missing = |what: &str| MonitError {
        line,
        message: format!("process `{name}` has no {what}"),
    };
    let (start, start_timeout) = start.ok_or_else(|| missing("start program"))?;
    let (stop, stop_timeout) = match stop {
        Some((command, timeout)) => (Some(command), timeout),
        None => (None, DEFAULT_PROGRAM_TIMEOUT),
    };
    Ok(MonitProcess {
        name: name.to_string(),
        pidfile: pidfile.ok_or_else(|| missing("pidfile"))?,
        start,
        start_timeout,
        stop,
        stop_timeout,
        group,
        depends_on,
    })
}

/// `start program "..."`, `start = "..."` or `start "..."`: not `then start` in a rule.
fn program_follows(body: &[Token], at: usize) -> bool {
    body.get(at)
        .is_some_and(|t| t.is("program") || t.is("=") || t.quoted)
}

/// `as uid X [and gid Y]` and `with timeout N seconds` after a program; the timeout and
/// where the statement ends.
fn program_options(body: &[Token], mut i: usize) -> Result<(Duration, usize), MonitError> {
    let mut timeout = DEFAULT_PROGRAM_TIMEOUT;
    loop {
        match body.get(i) {
            Some(t) if t.is("as") || t.is("and") => i += 3,
            Some(t) if t.is("with") && body.get(i + 1).is_some_and(|n| n.is("timeout")) => {
                let amount = body.get(i + 2);
                let unit = body.get(i + 3);
                let seconds = amount.and_then(|a| a.text.parse::<u64>().ok());
                let factor = match unit.map(|u| u.text.to_ascii_lowercase()) {
                    Some(u) if u.starts_with("second") => Some(1),
                    Some(u) if u.starts_with("minute") => Some(60),
                    _ => None,
                };
                match (seconds, factor) {
                    (Some(n), Some(f)) => timeout = Duration::from_secs(n * f),
                    _ => {
                        return Err(MonitError {
                            line: body[i].line,
                            message: "`with timeout` needs a number of seconds or minutes".into(),
                        });
                    }
                }
                i += 4;
            }
            _ => return Ok((timeout, i)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_classic_monit_file_is_read() {
        let text = r#"
check process nginx
  with pidfile /var/vcap/sys/run/nginx/nginx.pid
  start program "/var/vcap/jobs/nginx/bin/ctl start" with timeout 60 seconds
  stop program "/var/vcap/jobs/nginx/bin/ctl stop"
  group vcap
  if failed port 80 then restart

check process worker # a second one
  with pidfile /var/vcap/sys/run/worker.pid
  start program = "/bin/worker start" as uid vcap and gid vcap with timeout 2 minutes
  stop program = "/bin/worker stop"
  if totalmem > 100 MB then stop
  group vcap
"#;
        let processes = parse(text).unwrap();
        assert_eq!(processes.len(), 2);
        let nginx = &processes[0];
        assert_eq!(nginx.name, "nginx");
        assert_eq!(nginx.pidfile, "/var/vcap/sys/run/nginx/nginx.pid");
        assert_eq!(nginx.start, "/var/vcap/jobs/nginx/bin/ctl start");
        assert_eq!(nginx.start_timeout, Duration::from_secs(60));
        assert_eq!(
            nginx.stop.as_deref(),
            Some("/var/vcap/jobs/nginx/bin/ctl stop")
        );
        assert_eq!(nginx.group.as_deref(), Some("vcap"));
        let worker = &processes[1];
        assert_eq!(worker.start, "/bin/worker start");
        assert_eq!(worker.start_timeout, Duration::from_secs(120));
        assert_eq!(worker.stop.as_deref(), Some("/bin/worker stop"));
        assert_eq!(worker.stop_timeout, DEFAULT_PROGRAM_TIMEOUT);
        assert!(nginx.depends_on.is_empty());
    }

    #[test]
    fn depends_on_names_one_process_or_several() {
        let text = "check process web
  with pidfile /p
  start program \"s\"
  depends on db, cache
  group vcap
check process cache
  with pidfile /q
  start program \"s\"
  depends on db,queue
  group vcap
check process db
  with pidfile /r
  start program \"s\"
  depends on queue
";
        let processes = parse(text).unwrap();
        assert_eq!(processes[0].depends_on, ["db", "cache"]);
        assert_eq!(processes[0].group.as_deref(), Some("vcap"));
        assert_eq!(processes[1].depends_on, ["db", "queue"]);
        assert_eq!(processes[2].depends_on, ["queue"]);
        let bare = parse(
            "check process a
 with pidfile /p
 start program \"x\"
 depends on
",
        )
        .unwrap_err();
        assert!(bare.message.contains("depends on"), "{bare}");
    }

    #[test]
    fn a_bpm_monit_file_and_an_empty_one_are_read() {
        let text = "check process kv\n  with pidfile /var/vcap/sys/run/bpm/kv/kv.pid\n  start program \"/var/vcap/jobs/bpm/bin/bpm start kv\"\n  stop program \"/var/vcap/jobs/bpm/bin/bpm stop kv\"\n  group vcap\n";
        let kv = &parse(text).unwrap()[0];
        assert_eq!(kv.start, "/var/vcap/jobs/bpm/bin/bpm start kv");
        assert!(parse("").unwrap().is_empty());
        assert!(parse("check file f with path /x\n").unwrap().is_empty());
    }

    #[test]
    fn what_is_missing_is_named_with_its_line() {
        let no_pidfile = parse("\ncheck process a\n  start program \"x\"\n").unwrap_err();
        assert_eq!(
            no_pidfile.to_string(),
            "monit line 2: process `a` has no pidfile"
        );
        let no_start = parse("check process a\n  with pidfile /p\n").unwrap_err();
        assert_eq!(no_start.message, "process `a` has no start program");
        let open_quote = parse("check process a\n  start program \"x\n").unwrap_err();
        assert_eq!(open_quote.line, 2);
        let bad_timeout =
            parse("check process a\n with pidfile /p\n start program \"x\" with timeout soon\n")
                .unwrap_err();
        assert!(bad_timeout.message.contains("timeout"), "{bad_timeout}");
        assert!(parse("check process").is_err());
    }
}
