//! What `bosh logs` asks for: which kinds of logs (`type=job,agent,system`) and which of
//! their files (`filters`, globs relative to each kind's log directory), read from the
//! query and checked before any task starts, so a bad value is named in a 400.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
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
    #[error("filter `{filter}` is not a glob: {reason}")]
    Glob { filter: String, reason: String },
}

impl LogRequest {
    /// Reads `type` (comma-separated; `job` when absent or empty) and `filters`
    /// (comma-separated globs), as the `bosh` CLI sends them.
    ///
    /// # Errors
    /// The first unknown type, or a filter that would leave the log directory or is not a
    /// glob.
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
        let request = LogRequest {
            types: parsed,
            filters: globs,
        };
        request.filter()?;
        Ok(request)
    }

    /// The request's filters compiled once, to ask about each file of a log directory.
    ///
    /// # Errors
    /// A filter that is not a glob (an unclosed `[`, a misplaced `**`), named.
    pub fn filter(&self) -> Result<LogFilter, LogRequestError> {
        let mut globs = GlobSetBuilder::new();
        let mut directories = Vec::new();
        for filter in &self.filters {
            let glob = GlobBuilder::new(filter)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| LogRequestError::Glob {
                    filter: filter.clone(),
                    reason: e.kind().to_string(),
                })?;
            globs.add(glob);
            if !filter.contains(['*', '?', '[', '{']) {
                directories.push(format!("{}/", filter.trim_end_matches('/')));
            }
        }
        let globs = globs.build().map_err(|e| LogRequestError::Glob {
            filter: self.filters.join(","),
            reason: e.to_string(),
        })?;
        Ok(LogFilter {
            everything: self.filters.is_empty(),
            globs,
            directories,
        })
    }
}

/// A request's filters, compiled: matching a path takes time linear in its length,
/// whatever the patterns, since a job names its own log files and could name them to
/// make a backtracking matcher run for ever.
#[derive(Debug, Clone)]
pub struct LogFilter {
    everything: bool,
    globs: GlobSet,
    directories: Vec<String>,
}

impl LogFilter {
    /// Whether the file at `path` (relative to its log directory, `/`-separated) is
    /// wanted: a filter matches it as a glob (`**` any number of segments, `*` any run of
    /// characters within one, `?` one character), or, as BOSH's agents read a filter
    /// without wildcards (`--only postgres`), names a directory it is in.
    pub fn wants(&self, path: &str) -> bool {
        self.everything
            || self.globs.is_match(path)
            || self
                .directories
                .iter()
                .any(|d| path.starts_with(d.as_str()))
    }
}

fn split(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
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
        let wants = |filters: &str, path: &str| {
            LogRequest::parse(None, Some(filters))
                .unwrap()
                .filter()
                .unwrap()
                .wants(path)
        };
        let request = LogRequest::parse(None, Some("postgres/*.log,**/audit-?.txt"))
            .unwrap()
            .filter()
            .unwrap();
        assert!(request.wants("postgres/postgres.stdout.log"));
        assert!(!request.wants("postgres/sub/x.log"), "* stays in a segment");
        assert!(!request.wants("bpm/bpm.log"));
        assert!(request.wants("audit-1.txt"));
        assert!(request.wants("a/b/audit-2.txt"));
        assert!(!request.wants("a/audit-12.txt"));
        assert!(
            LogRequest::default()
                .filter()
                .unwrap()
                .wants("anything/at/all")
        );
        // A filter without wildcards that names a directory takes all below it.
        let job = LogRequest::parse(None, Some("postgres,bpm/"))
            .unwrap()
            .filter()
            .unwrap();
        assert!(job.wants("postgres/postgres.stdout.log"));
        assert!(job.wants("postgres/archive/old.log"));
        assert!(job.wants("bpm/bpm.log"));
        assert!(!job.wants("postgresql/x.log"));
        assert!(!wants("post*", "postgres/x.log"));
        assert!(wants("**/*", "x/y/z"));
        assert!(wants("**", ""));
        assert!(!wants("*.log", "x.txt"));
        assert!(wants("pg/[ab].log", "pg/a.log"));
    }

    #[test]
    fn a_filter_that_is_not_a_glob_is_named() {
        for bad in ["pg/[ab.log", "pg/{a"] {
            let error = LogRequest::parse(None, Some(bad)).unwrap_err();
            assert!(
                matches!(&error, LogRequestError::Glob { filter, .. } if filter == bad),
                "{error:?}"
            );
            assert!(error.to_string().contains(bad), "{error}");
        }
    }

    /// Stars against a long name without the last character: a backtracking matcher takes
    /// exponential time here (5 stars against 250 characters never finished); a compiled
    /// one answers at once. Counted in matches, not timed: 10,000 paths each 250 long.
    #[test]
    fn matching_is_linear_whatever_the_stars() {
        let filter = LogRequest::parse(None, Some("kv/*a*a*a*a*a*a*a*a*b"))
            .unwrap()
            .filter()
            .unwrap();
        let name = format!("kv/{}", "a".repeat(250));
        let matched = (0..10_000).filter(|_| filter.wants(&name)).count();
        assert_eq!(matched, 0);
        assert!(filter.wants(&format!("kv/{}b", "a".repeat(250))));
    }
}
