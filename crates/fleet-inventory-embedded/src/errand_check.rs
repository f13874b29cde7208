//! A canary's smoke test on the embedded fleet: an errand run on the instance's
//! deployment by the embedded director, as `bosh run-errand` runs it; every instance it
//! ran on must exit 0.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use fleet_broker::Broker;
use fleet_director::errand::{ErrandRequest, ErrandResult};
use fleet_director::model::TaskState;
use fleet_rollout::check::{CanaryCheck, CheckResult, errand_verdict, overdue};
use fleet_rollout::inventory::Instance;

pub struct ErrandCheck {
    broker: Arc<Broker>,
    errand: String,
    time_limit: Duration,
}

impl ErrandCheck {
    pub fn new(broker: Arc<Broker>, errand: &str, time_limit: Duration) -> Self {
        ErrandCheck {
            broker,
            errand: errand.to_string(),
            time_limit,
        }
    }
}

impl CanaryCheck for ErrandCheck {
    fn check(
        &self,
        instance: Instance,
        deadline: Instant,
    ) -> Pin<Box<dyn Future<Output = CheckResult> + Send>> {
        let (broker, errand) = (Arc::clone(&self.broker), self.errand.clone());
        let (what, limit) = (self.describe(), self.time_limit);
        Box::pin(async move {
            let deployment = instance
                .deployment_name
                .clone()
                .ok_or_else(|| format!("{} has no deployment to run it on", instance.id))?;
            let director = broker.director();
            let request = ErrandRequest {
                name: errand.clone(),
                keep_alive: false,
                when_changed: false,
                instances: Vec::new(),
            };
            let task = director
                .run_errand(&deployment, request)
                .await
                .map_err(|e| e.to_string())?;
            let Ok(ended) = tokio::time::timeout_at(deadline, director.wait(task.id)).await else {
                // Cancelled rather than left holding the deployment's lock, and its end
                // awaited (within the check's grace) so that it does not outlive the
                // canary: a run that ended first would leave it to the next process,
                // which ends it in error.
                if director.cancel(task.id).await.is_ok() {
                    let _ = director.wait(task.id).await;
                }
                return Err(overdue(&what, limit));
            };
            let ended = ended.map_err(|e| e.to_string())?;
            if ended.state != TaskState::Done {
                return Err(format!(
                    "task {} {}: {}",
                    ended.id,
                    ended.state.as_str(),
                    ended.result.unwrap_or_default()
                ));
            }
            let output = director
                .result_output(&ended)
                .await
                .map_err(|e| e.to_string())?;
            let runs: Vec<(i32, String)> = output
                .lines()
                .filter_map(|l| serde_json::from_str::<ErrandResult>(l).ok())
                .map(|r| (r.exit_code, format!("{}\n{}", r.stdout, r.stderr)))
                .collect();
            errand_verdict(ended.id, &runs)
        })
    }

    fn time_limit(&self) -> Duration {
        self.time_limit
    }

    fn describe(&self) -> String {
        format!("errand {}", self.errand)
    }
}
