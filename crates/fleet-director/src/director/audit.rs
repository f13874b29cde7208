//! The audit trail of what was asked of the director.

use crate::DirectorError;
use crate::alerts::{self, Alert, Finding};
use crate::audit;
use crate::model::TaskFilter;
use crate::records::change;

use super::Director;

impl Director {
    /// The director's event log (`bosh events`), newest first, one page.
    pub async fn audit_events(
        &self,
        filter: &audit::AuditFilter,
    ) -> Result<Vec<audit::AuditEvent>, DirectorError> {
        let tasks = match filter.task {
            Some(id) => self.store().task(id).await?.into_iter().collect(),
            None => {
                self.store()
                    .tasks(TaskFilter {
                        deployment: filter.deployment.clone(),
                        states: None,
                        read_only: false,
                        context_id: None,
                        limit: None,
                    })
                    .await?
            }
        };
        let instances = audit::wants_instances(filter);
        let mut page = Vec::new();
        for task in tasks.iter().filter(|t| audit::may_admit(t, filter)) {
            let log = if instances {
                self.store().events(task.id).await?
            } else {
                Vec::new()
            };
            page.extend(
                audit::of(task, &log)
                    .into_iter()
                    .filter(|e| audit::admits(filter, e)),
            );
            if page.len() >= audit::PAGE {
                break;
            }
        }
        if filter.task.is_none() {
            let alerts = self.records().alerts(filter.deployment.as_deref()).await?;
            page.extend(
                alerts
                    .iter()
                    .map(Alert::event)
                    .filter(|e| audit::admits(filter, e)),
            );
            page.sort_by_key(|e| std::cmp::Reverse(e.id));
        }
        page.truncate(audit::PAGE);
        Ok(page)
    }

    /// Keeps what the health monitor found as an alert of `deployment`, numbered among
    /// the tasks' events by when it was raised, and logs it; the oldest alerts past
    /// [`alerts::KEPT`] are deleted.
    pub async fn raise_alert(
        &self,
        deployment: &str,
        finding: Finding,
    ) -> Result<Alert, DirectorError> {
        let all = TaskFilter {
            deployment: None,
            states: None,
            read_only: true,
            context_id: None,
            limit: Some(1),
        };
        let newest = self.store().tasks(all).await?.first().map_or(0, |t| t.id);
        let kept = self.records().alerts(None).await?;
        let mut seq = kept
            .iter()
            .filter(|a| audit::alert_task(a.id) == newest)
            .count() as u64;
        let alert = loop {
            let Some(id) = audit::alert_id(newest, seq) else {
                return Err(DirectorError::Invalid(format!(
                    "no alert id is left after task {newest}"
                )));
            };
            let alert = Alert {
                id,
                created_at: self.core.unix_now(),
                severity: finding.severity,
                category: finding.category,
                title: finding.title.clone(),
                summary: finding.summary.clone(),
                deployment: deployment.to_string(),
                instance: finding.instance.clone(),
            };
            // Another director process on the same database may have taken the id.
            if self.records().insert_alert(&alert).await? {
                break alert;
            }
            seq += 1;
        };
        metrics::counter!("fleet_director_alerts_total", "severity" => alert.severity.name())
            .increment(1);
        tracing::warn!(
            deployment,
            severity = alert.severity.name(),
            "alert: {}",
            alert.message()
        );
        let over = (kept.len() + 1).saturating_sub(alerts::KEPT);
        if over > 0 {
            let mut oldest = kept;
            oldest.sort_by_key(|a| a.id);
            let gone = oldest.iter().take(over).map(change::alert_gone).collect();
            self.records().write(gone).await?;
        }
        Ok(alert)
    }
}
