//! The audit trail of what was asked of the director.

use crate::DirectorError;
use crate::audit;
use crate::model::TaskFilter;

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
        page.truncate(audit::PAGE);
        Ok(page)
    }
}
