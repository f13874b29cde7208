//! What a task said to the cloud and to the agents, for `bosh task --cpi` and `--debug`.
//! A task's trace lives in a task-local while it runs, so that a CPI or agent call records
//! itself wherever in the task it is made; work a task spawns carries the trace along
//! ([`within`]). At the end the runner keeps the trace with the task. Lines name methods,
//! ids and outcomes, never a spec's properties, which may hold credentials.

use std::sync::{Arc, Mutex};

use fleet_clock::WallClock;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// Agent calls and the director's own notes.
    Debug,
    /// Requests to the cloud provider and their answers.
    Cpi,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceLine {
    /// Unix seconds.
    pub time: u64,
    pub channel: Channel,
    pub text: String,
}

/// One task's lines, shared by everything the task runs, stamped by its clock.
#[derive(Debug, Clone)]
pub struct Trace(Arc<Mutex<Vec<TraceLine>>>, WallClock);

impl Trace {
    pub fn new(clock: WallClock) -> Trace {
        Trace(Arc::default(), clock)
    }

    pub fn lines(&self) -> Vec<TraceLine> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn push(&self, channel: Channel, text: String) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(TraceLine {
                time: self.1.unix_secs(),
                channel,
                text,
            });
    }
}

tokio::task_local! {
    static CURRENT: Trace;
}

/// Adds a line to the running task's trace; outside a task, nothing. The text is made
/// only when there is a trace to take it.
pub fn note(channel: Channel, text: impl FnOnce() -> String) {
    let _ = CURRENT.try_with(|trace| trace.push(channel, text()));
}

/// Runs `work` with `trace` as its task's trace.
pub async fn run_with<F: Future>(trace: Trace, work: F) -> F::Output {
    CURRENT.scope(trace, work).await
}

/// `work` carrying the current task's trace, for work the task spawns.
pub fn within<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let current = CURRENT.try_with(Clone::clone).ok();
    async move {
        match current {
            Some(trace) => CURRENT.scope(trace, work).await,
            None => work.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_reach_the_trace_of_the_task_and_of_what_it_spawns_only() {
        note(Channel::Debug, || unreachable!("no trace, no text"));
        let trace = Trace::new(WallClock::new());
        run_with(trace.clone(), async {
            note(Channel::Cpi, || "create_vm".to_string());
            tokio::spawn(within(async {
                note(Channel::Debug, || "spawned".to_string())
            }))
            .await
            .unwrap();
            // Spawned without `within`: not part of the task's trace.
            tokio::spawn(async { note(Channel::Debug, || "lost".to_string()) })
                .await
                .unwrap();
        })
        .await;
        let texts: Vec<(Channel, String)> = trace
            .lines()
            .into_iter()
            .map(|l| (l.channel, l.text))
            .collect();
        assert_eq!(
            texts,
            [
                (Channel::Cpi, "create_vm".to_string()),
                (Channel::Debug, "spawned".to_string())
            ]
        );
    }
}
