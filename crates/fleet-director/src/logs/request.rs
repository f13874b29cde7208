//! What `bosh logs` asks for: which kinds of logs (`type=job,agent,system`) and which of
//! their files (`filters`, globs relative to each kind's log directory), read from the
//! query and checked before any task starts, so a bad value is named in a 400.

use serde::{Deserialize, Serialize};

/// A kind of logs an agent keeps, as BOSH's agents name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogType {
    /// The jobs' logs (`/var/vcap/sys/log`).
    Job,
    /// The agent's own log.
    Agent,
    /// The operating system's logs.
    System,
}

impl LogType {
    pub fn name(self) -> &'static str {
        match self {
            LogType::Job => "job",
            LogType::Agent => "agent",
            LogType::System => "system",
        }
    }
}

/// The logs one fetch asks every chosen instance for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRequest {
    /// At least one, each once, in the order asked.
    pub types: Vec<LogType>,
    /// Globs a file's path below its log directory must match one of (or directories it
    /// must be in); every file when empty.
    pub filters: Vec<String>,
}

impl Default for LogRequest {
    /// The jobs' logs, every file: what `bosh logs` asks without options, and what an
    /// errand's run keeps.
    fn default() -> Self {
        LogRequest {
            types: vec![LogType::Job],
            filters: Vec::new(),
        }
    }
}

/// Why a `type` or `filters` value is refused; the message names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogRequestError {
    #[error("type `{0}` is not one of job, agent, system")]
    UnknownType(String),
    #[error(
        "filter `{0}` must be a relative path below the log directory (no leading `/`, no `..`)"
    )]
    Filter(String),
}

impl LogRequest {
    /// Reads `type` (comma-separated; `job` when absent or empty) and `filters`
    /// (comma-separated globs), as the `bosh` CLI sends them.
    ///
    /// # Errors
    /// The first unknown type or a filter that would leave the log directory.
    pub fn parse(types: Option<&str>, filters: Option<&str>) -> Result<Self, LogRequestError> {
        let mut parsed = Vec::new();
        for name in split(types.unwrap_or("")) {
            let kind = match name {
                "job" => LogType::Job,
                "agent" => LogType::Agent,
                "system" => LogType::System,
                other => return Err(LogRequestError::UnknownType(other.to_string())),
            };
            if !parsed.contains(&kind) {
                parsed.push(kind);
            }
        }
        if parsed.is_empty() {
            parsed.push(LogType::Job);
        }
        let mut globs = Vec::new();
        for filter in split(filters.unwrap_or("")) {
            if filter.starts_with('/') || filter.split('/').any(|s| s == "..") {
                return Err(LogRequestError::Filter(filter.to_string()));
            }
            globs.push(filter.to_string());
        }
        Ok(LogRequest {
            types: parsed,
            filters: globs,
        })
    }

    /// Whether the file at `path` (relative to its log directory, `/`-separated) is
    /// wanted: a filter matches it as a glob, or, as BOSH's agents read a filter without
    /// wildcards (`--only postgres`), names a directory it is in.
    pub fn wants(&self, path: &str) -> bool {
        self.filters.is_empty()
            || self.filters.iter().any(|f| {
                glob_matches(f, path)
                    || (!f.contains(['*', '?'])
                        && path.starts_with(&format!("{}/", f.trim_end_matches('/'))))
            })
    }
}

fn split(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Whether `path` matches `pattern`, segment by segment: `**` is any number of
/// segments, `*` any run of characters within one, `?` one character.
pub fn glob_matches(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
    let path: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    segments_match(&pattern, &path)
}

fn segments_match(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| segments_match(rest, &path[skip..])),
        Some((first, rest)) => path.split_first().is_some_and(|(segment, tail)| {
            segment_matches(first.as_bytes(), segment.as_bytes()) && segments_match(rest, tail)
        }),
    }
}

fn segment_matches(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| segment_matches(rest, &text[skip..])),
        Some((b'?', rest)) => !text.is_empty() && segment_matches(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && segment_matches(rest, &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_default_to_job_and_each_is_kept_once_in_order() {
        assert_eq!(
            LogRequest::parse(None, None).unwrap(),
            LogRequest::default()
        );
        assert_eq!(
            LogRequest::parse(Some(""), Some("")).unwrap(),
            LogRequest::default()
        );
        let all = LogRequest::parse(Some("agent,job, system,job"), None).unwrap();
        assert_eq!(all.types, [LogType::Agent, LogType::Job, LogType::System]);
    }

    #[test]
    fn an_unknown_type_or_an_escaping_filter_is_named() {
        assert_eq!(
            LogRequest::parse(Some("job,kernel"), None).unwrap_err(),
            LogRequestError::UnknownType("kernel".into())
        );
        for bad in ["/etc/*", "../x", "a/../../b"] {
            let error = LogRequest::parse(None, Some(bad)).unwrap_err();
            assert!(error.to_string().contains(bad), "{error}");
        }
    }

    #[test]
    fn filters_are_globs_per_segment() {
        let request = LogRequest::parse(None, Some("postgres/*.log,**/audit-?.txt")).unwrap();
        assert!(request.wants("postgres/postgres.stdout.log"));
        assert!(!request.wants("postgres/sub/x.log"), "* stays in a segment");
        assert!(!request.wants("bpm/bpm.log"));
        assert!(request.wants("audit-1.txt"));
        assert!(request.wants("a/b/audit-2.txt"));
        assert!(!request.wants("a/audit-12.txt"));
        assert!(LogRequest::default().wants("anything/at/all"));
        // A filter without wildcards that names a directory takes all below it.
        let job = LogRequest::parse(None, Some("postgres,bpm/")).unwrap();
        assert!(job.wants("postgres/postgres.stdout.log"));
        assert!(job.wants("postgres/archive/old.log"));
        assert!(job.wants("bpm/bpm.log"));
        assert!(!job.wants("postgresql/x.log"));
        assert!(
            !LogRequest::parse(None, Some("post*"))
                .unwrap()
                .wants("postgres/x.log")
        );
        assert!(glob_matches("**/*", "x/y/z"));
        assert!(glob_matches("**", ""));
        assert!(!glob_matches("*.log", "x.txt"));
    }
}
