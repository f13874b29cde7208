//! The updater itself: list, select, canaries, a rolling window, busy-retry rounds, the
//! error policy, and the report. It sees only the [`Inventory`] trait, tokio's clock and
//! its own rate limiter, so the same engine drives every kind of fleet and runs in
//! virtual time under test.

pub mod check;
mod engine;
pub mod events;
pub mod filter;
pub mod inventory;
pub mod limiter;
mod operation;
pub mod report;
mod requests;
pub mod select;
pub mod settings;

use std::sync::Arc;

pub use engine::{Interrupts, WindowClose};
pub use events::{Discard, Event, Observer, Phase, Recorder};
pub use limiter::RequestLimiter;
pub use report::{Counts, InstanceReport, Outcome, PlanReport, Report, Status};
pub use select::{Candidate, Plan, SkipReason, Skipped};
pub use settings::{Backoff, InvalidRate, Rate, Settings, Strategy};

use crate::inventory::{Inventory, InventoryError};
use fleet_clock::WallClock;

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// Nothing was triggered: the fleet could not be listed.
    #[error("the inventory could not be listed: {0}")]
    List(#[source] InventoryError),
    /// Nothing was triggered: the canary selection matched none of the instances there
    /// are, which would leave the run without the canaries the operator asked for.
    #[error(
        "no instance matches the canary selection ({criteria}) while {instances} instances \
         exist: make `canary_selection` match one or more of them, or remove it"
    )]
    NoCanaryMatch { criteria: String, instances: usize },
}

/// One run over one inventory; every request of the run shares its rate limiter.
pub struct Rollout<I> {
    requests: Arc<requests::Requests<I>>,
    settings: Settings,
    clock: WallClock,
    check: Option<Arc<dyn check::CanaryCheck>>,
}

impl<I: Inventory> Rollout<I> {
    pub fn new(inventory: Arc<I>, settings: Settings, clock: WallClock) -> Self {
        let requests =
            requests::Requests::new(inventory, settings.requests_per_second, settings.backoff);
        Rollout {
            requests: Arc::new(requests),
            settings,
            clock,
            check: None,
        }
    }

    /// The rollout with every canary checked by `check` once its operation succeeded.
    pub fn with_canary_check(mut self, check: Arc<dyn check::CanaryCheck>) -> Self {
        self.check = Some(check);
        self
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Lists the fleet and decides what to do; triggers nothing.
    ///
    /// # Errors
    /// [`RolloutError::List`] when listing fails, after retries for transient faults.
    pub async fn plan(&self) -> Result<Plan, RolloutError> {
        let strategy = self.settings.strategy;
        let instances = self
            .requests
            .list(strategy.selection())
            .await
            .map_err(RolloutError::List)?;
        let plan = select::plan_with(
            instances,
            strategy,
            self.settings.canaries,
            &self.settings.filter,
        );
        let criteria = &self.settings.canary_selection;
        if criteria.is_empty() {
            return Ok(plan);
        }
        // A second listing, as ODB's errand makes it: the canaries come from its matches.
        let matched: std::collections::BTreeSet<String> = self
            .requests
            .list_matching(criteria)
            .await
            .map_err(RolloutError::List)?
            .into_iter()
            .map(|i| i.id.0)
            .collect();
        if matched.is_empty() {
            // As ODB's errand judges it: against every instance, whether or not this run
            // would touch it.
            let instances = self
                .requests
                .list(inventory::Selection::All)
                .await
                .map_err(RolloutError::List)?
                .len();
            if instances > 0 {
                return Err(RolloutError::NoCanaryMatch {
                    criteria: inventory::describe_criteria(criteria),
                    instances,
                });
            }
        }
        Ok(plan.with_canaries_among(&matched, self.settings.canaries))
    }

    /// Carries the plan out and reports every instance's outcome.
    pub async fn execute(
        &self,
        plan: Plan,
        observer: &mut dyn Observer,
        interrupts: Interrupts,
    ) -> Report {
        self.execute_within(plan, observer, interrupts, None).await
    }

    /// [`Rollout::execute`] within a maintenance window: when it closes, nothing more is
    /// started, operations in flight get its grace period, and the rest is deferred.
    pub async fn execute_within(
        &self,
        plan: Plan,
        observer: &mut dyn Observer,
        interrupts: Interrupts,
        window: Option<WindowClose>,
    ) -> Report {
        let (engine, receiver) = engine::Engine::new(
            &self.settings,
            Arc::clone(&self.requests),
            observer,
            self.clock,
            plan,
            self.check.clone(),
        );
        engine.run(receiver, interrupts, window).await
    }
}
