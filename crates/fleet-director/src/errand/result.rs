//! An errand's result per instance, in the shape BOSH's director writes to the task's
//! result output and the `bosh` CLI and the ODB read back.

use serde::{Deserialize, Serialize};

use crate::agent::ErrandOutput;
use crate::logs::LogBundle;
use crate::model::InstanceRecord;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultInstance {
    pub group: String,
    pub id: String,
}

/// Where the instance's job logs were kept after the run (a bundle for `GET /resources/ID`);
/// empty when they could not be kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrandLogs {
    pub blobstore_id: Option<String>,
    pub sha1: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrandResult {
    pub instance: ResultInstance,
    pub errand_name: String,
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    pub logs: ErrandLogs,
}

impl ErrandLogs {
    pub fn of(bundle: &LogBundle) -> Self {
        ErrandLogs {
            blobstore_id: Some(bundle.id.clone()),
            sha1: Some(bundle.sha1.clone()),
        }
    }
}

impl ErrandResult {
    pub fn of(
        record: &InstanceRecord,
        errand: &str,
        output: ErrandOutput,
        logs: ErrandLogs,
    ) -> Self {
        ErrandResult {
            instance: ResultInstance {
                group: record.group.clone(),
                id: record.id.clone(),
            },
            errand_name: errand.to_string(),
            exit_code: output.exit_code,
            stdout: output.stdout,
            stderr: output.stderr,
            logs,
        }
    }
}

/// The task's one-line result, as BOSH counts: 0 succeeded, 1 to 128 errored, above 128
/// (a signal) canceled.
pub fn summary(results: &[ErrandResult]) -> String {
    let count = |test: fn(i32) -> bool| results.iter().filter(|r| test(r.exit_code)).count();
    format!(
        "{} succeeded, {} errored, {} canceled",
        count(|c| c == 0),
        count(|c| (1..=128).contains(&c)),
        count(|c| c > 128)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(exit_code: i32) -> ErrandResult {
        ErrandResult {
            instance: ResultInstance {
                group: "g".into(),
                id: "i".into(),
            },
            errand_name: "e".into(),
            exit_code,
            stdout: String::new(),
            stderr: String::new(),
            logs: ErrandLogs::default(),
        }
    }

    #[test]
    fn the_summary_counts_successes_errors_and_signals() {
        let all = [result(0), result(0), result(1), result(128), result(137)];
        assert_eq!(summary(&all), "2 succeeded, 2 errored, 1 canceled");
    }
}
