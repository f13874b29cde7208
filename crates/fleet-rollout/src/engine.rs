//! The coordinator: one loop that owns every instance's state and decides what starts
//! when. Each attempt runs as its own task (`operation`) and reports back over a channel,
//! so the loop never blocks on a request and refills a freed slot at once.
//!
//! Phases: the canary phase draws instances from the front of the order until the canary
//! target has succeeded, never running more than the canaries still needed; then the main
//! phase runs the rest in a rolling window of `max_in_parallel`. In both, an instance that
//! answers busy waits for the next round, which starts `busy_interval` after every other
//! instance of the phase has been tried. A failure stops new launches; in-flight work
//! finishes and is reported.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::watch;
use tokio::task::{Id as TaskId, JoinError, JoinSet};
use tokio::time::{Instant, sleep_until};

use super::events::{Event, Observer, Phase};
use super::operation::{self, Answer, Completion, Job, Message, Timing};
use super::report::{Counts, InstanceReport, Outcome, Report, Status};
use super::requests::Requests;
use super::select::Plan;
use super::settings::Settings;
use crate::inventory::{Instance, Inventory};
use fleet_clock::WallClock;

/// Signals received so far: the first stops launching and starts the grace period, the
/// second stops waiting.
pub type Interrupts = watch::Receiver<u32>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Failure,
    Interrupted,
    /// The maintenance window closed: what did not start is deferred to the next.
    WindowClosed,
}

/// When the maintenance window closes, and how long operations in flight may take after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowClose {
    pub at: Instant,
    pub grace: std::time::Duration,
}

struct Entry {
    instance: Instance,
    force: bool,
    canary: bool,
    attempts: u32,
    started_at: Option<SystemTime>,
    finished_at: Option<SystemTime>,
    accepted_at: Option<Instant>,
    /// The current attempt's trigger has been answered.
    answered: bool,
    outcome: Option<Outcome>,
    reason: Option<String>,
    operation: Option<String>,
    /// What a canary's check said.
    check: Option<String>,
}

pub(super) struct Engine<'a, I> {
    settings: &'a Settings,
    requests: Arc<Requests<I>>,
    observer: &'a mut dyn Observer,
    clock: WallClock,
    entries: Vec<Entry>,
    eligible: usize,
    tasks: JoinSet<()>,
    /// Which instance each running task works for, to fail it if the task panics.
    task_index: HashMap<TaskId, usize>,
    sender: UnboundedSender<(usize, Message)>,
    in_flight: usize,
    awaiting_answer: usize,
    phase: Phase,
    queue: VecDeque<usize>,
    busy: Vec<usize>,
    round: u32,
    next_round_at: Option<Instant>,
    canary_target: usize,
    /// Entries below this index may be canaries: those a canary selection matched (all,
    /// without one).
    canary_pool: usize,
    /// What the operator's filter left out, for the report.
    excluded: Vec<crate::report::SkippedInstance>,
    /// What each canary must pass once its operation succeeded.
    check: Option<Arc<dyn crate::check::CanaryCheck>>,
    canaries_succeeded: usize,
    started_instances: usize,
    finished: usize,
    stop: Option<Stop>,
    interrupted: bool,
    started: Instant,
    started_at: SystemTime,
}

impl<'a, I: Inventory> Engine<'a, I> {
    pub(super) fn new(
        settings: &'a Settings,
        requests: Arc<Requests<I>>,
        observer: &'a mut dyn Observer,
        clock: WallClock,
        plan: Plan,
        check: Option<Arc<dyn crate::check::CanaryCheck>>,
    ) -> (Self, UnboundedReceiver<(usize, Message)>) {
        let (sender, receiver) = unbounded_channel();
        let eligible = plan.order.len();
        let excluded = crate::report::excluded(&plan);
        let plan_skipped = plan.skipped.len() + plan.done_earlier.len();
        let mut entries: Vec<Entry> = plan
            .order
            .into_iter()
            .map(|c| Entry::new(c.instance, c.force))
            .collect();
        for skipped in plan.skipped {
            let mut entry = Entry::new(skipped.instance, false);
            entry.outcome = Some(Outcome::SkippedBlocked);
            entry.reason = Some(skipped.reason.describe().into());
            entries.push(entry);
        }
        for instance in plan.done_earlier {
            let mut entry = Entry::new(instance, false);
            entry.outcome = Some(Outcome::DoneEarlier);
            entry.reason = Some("done by an earlier run of this rollout".into());
            entries.push(entry);
        }
        let engine = Engine {
            settings,
            requests,
            observer,
            clock,
            entries,
            eligible,
            tasks: JoinSet::new(),
            task_index: HashMap::new(),
            sender,
            in_flight: 0,
            awaiting_answer: 0,
            phase: if plan.canaries > 0 {
                Phase::Canaries
            } else {
                Phase::Main
            },
            queue: (0..eligible).collect(),
            busy: Vec::new(),
            round: 1,
            next_round_at: None,
            canary_target: plan.canaries,
            canary_pool: plan.canary_pool,
            excluded,
            check,
            canaries_succeeded: 0,
            started_instances: 0,
            finished: plan_skipped,
            stop: None,
            interrupted: false,
            started: Instant::now(),
            started_at: clock.now(),
        };
        (engine, receiver)
    }

    fn emit(&mut self, event: Event) {
        self.observer.on_event(self.clock.now(), &event);
    }

    pub(super) async fn run(
        mut self,
        mut receiver: UnboundedReceiver<(usize, Message)>,
        mut interrupts: Interrupts,
        window: Option<WindowClose>,
    ) -> Report {
        self.emit(Event::Started {
            strategy: self.settings.strategy.name(),
            selected: self.entries.len(),
            eligible: self.eligible,
            canaries: self.canary_target,
            max_in_parallel: self.settings.max_in_parallel.get(),
        });
        for index in self.eligible..self.entries.len() {
            let entry = &self.entries[index];
            let event = Event::Settled {
                id: entry.instance.id.clone(),
                outcome: entry.outcome.unwrap_or(Outcome::SkippedBlocked),
                reason: entry.reason.clone().unwrap_or_default(),
            };
            self.emit(event);
        }
        if self.eligible > 0 {
            let instances = match self.phase {
                Phase::Canaries => self.canary_target,
                Phase::Main => self.eligible,
            };
            self.emit(Event::PhaseStarted {
                phase: self.phase,
                instances,
            });
        }
        self.advance();

        let interval = self.settings.progress_interval;
        let mut progress = tokio::time::interval_at(Instant::now() + interval, interval);
        progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut interrupts_open = true;
        let mut grace_until: Option<Instant> = None;
        let far = Instant::now() + std::time::Duration::from_secs(100 * 365 * 86_400);
        let mut abandoned = false;
        if *interrupts.borrow_and_update() > 0 {
            grace_until = Some(self.interrupt());
        }
        loop {
            if self.in_flight == 0
                && (self.stop.is_some() || (self.queue.is_empty() && self.busy.is_empty()))
            {
                break;
            }
            let round_at = self.next_round_at.filter(|_| self.stop.is_none());
            let closing = window.filter(|_| self.stop.is_none());
            tokio::select! {
                Some((index, message)) = receiver.recv() => {
                    self.handle(index, message);
                    self.advance();
                }
                _ = sleep_until(round_at.unwrap_or(far)), if round_at.is_some() => {
                    self.start_round();
                    self.advance();
                }
                Some(joined) = self.tasks.join_next_with_id() => {
                    self.reap(joined, &mut receiver);
                    self.advance();
                }
                _ = progress.tick() => self.progress(),
                changed = interrupts.changed(), if interrupts_open => match changed {
                    Err(_) => interrupts_open = false,
                    Ok(()) => {
                        // A second signal stops waiting; the first, also in a closed
                        // window's grace, waits the shorter of the two graces.
                        if *interrupts.borrow_and_update() >= 2 || self.interrupted {
                            abandoned = true;
                            break;
                        }
                        let until = self.interrupt();
                        grace_until = Some(grace_until.map_or(until, |g| g.min(until)));
                    }
                },
                _ = sleep_until(closing.map_or(far, |w| w.at)), if closing.is_some() => {
                    if let Some(window) = closing {
                        grace_until = Some(self.close_window(window.grace));
                    }
                }
                _ = sleep_until(grace_until.unwrap_or(far)), if grace_until.is_some() => {
                    abandoned = true;
                    break;
                }
            }
        }
        if abandoned {
            self.tasks.abort_all();
        }
        self.finish()
    }

    /// Stops launching when the maintenance window closes; returns when its grace ends.
    fn close_window(&mut self, grace: std::time::Duration) -> Instant {
        self.stop = Some(Stop::WindowClosed);
        let in_flight = self.in_flight;
        self.emit(Event::Stopping {
            reason: format!(
                "the maintenance window closed: no new operations are started, the rest is \
                 deferred to the next window; waiting up to {} for {in_flight} in flight",
                fleet_clock::short(grace)
            ),
        });
        Instant::now() + grace
    }

    /// Stops launching and returns when the grace period ends.
    fn interrupt(&mut self) -> Instant {
        self.interrupted = true;
        self.stop.get_or_insert(Stop::Interrupted);
        let grace = self.settings.grace_period;
        let in_flight = self.in_flight;
        self.emit(Event::Stopping {
            reason: format!(
                "interrupted: no new operations are started; waiting up to {} for {in_flight} in flight",
                fleet_clock::short(grace)
            ),
        });
        Instant::now() + grace
    }

    fn capacity(&self) -> usize {
        if self.stop.is_some() {
            return 0;
        }
        let free = self
            .settings
            .max_in_parallel
            .get()
            .saturating_sub(self.in_flight);
        match self.phase {
            Phase::Canaries => free.min(
                self.canary_target
                    .saturating_sub(self.canaries_succeeded + self.in_flight),
            ),
            Phase::Main => free,
        }
    }

    /// Launches what may start now, schedules the next busy round, and moves from the
    /// canary phase to the main phase when the canaries are done.
    fn advance(&mut self) {
        loop {
            if self.stop.is_some() {
                return;
            }
            while self.capacity() > 0 {
                let Some(index) = self.next_queued() else {
                    break;
                };
                self.launch(index);
            }
            if !self.has_queued()
                && self.awaiting_answer == 0
                && !self.busy.is_empty()
                && self.next_round_at.is_none()
            {
                self.next_round_at = Some(Instant::now() + self.settings.busy_interval);
            }
            let canaries_done = self.canaries_succeeded >= self.canary_target
                || (!self.has_queued() && self.busy.is_empty() && self.in_flight == 0);
            if self.phase == Phase::Canaries && canaries_done {
                // Canaries chosen by a selection that stayed busy prove nothing: the rest
                // is not touched, as when a canary fails.
                let busy_canaries = self.entries[..self.canary_pool]
                    .iter()
                    .filter(|e| e.outcome == Some(Outcome::Busy))
                    .count();
                if self.canaries_succeeded < self.canary_target
                    && busy_canaries > 0
                    && self.has_unproven_rest()
                {
                    self.stop = Some(Stop::Failure);
                    self.emit(Event::Stopping {
                        reason: format!(
                            "{} of {} canaries succeeded and {busy_canaries} stayed busy: \
                             the rest is not started",
                            self.canaries_succeeded, self.canary_target
                        ),
                    });
                    return;
                }
                self.phase = Phase::Main;
                self.round = 1;
                let remaining = self.queue.len() + self.busy.len();
                if remaining > 0 {
                    self.emit(Event::PhaseStarted {
                        phase: Phase::Main,
                        instances: remaining,
                    });
                }
                continue;
            }
            return;
        }
    }

    /// Whether instances outside the canary pool wait for the canaries.
    fn has_unproven_rest(&self) -> bool {
        self.queue.iter().any(|i| *i >= self.canary_pool)
    }

    /// Whether the queue holds what this phase may start: in the canary phase, only the
    /// canary pool's entries.
    fn has_queued(&self) -> bool {
        match self.phase {
            Phase::Canaries => self.queue.iter().any(|i| *i < self.canary_pool),
            Phase::Main => !self.queue.is_empty(),
        }
    }

    /// The next entry this phase may start, taken from the queue.
    fn next_queued(&mut self) -> Option<usize> {
        match self.phase {
            Phase::Canaries => {
                let at = self.queue.iter().position(|i| *i < self.canary_pool)?;
                self.queue.remove(at)
            }
            Phase::Main => self.queue.pop_front(),
        }
    }

    fn launch(&mut self, index: usize) {
        let now = self.clock.now();
        let entry = &mut self.entries[index];
        entry.attempts += 1;
        if entry.started_at.is_none() {
            entry.started_at = Some(now);
            self.started_instances += 1;
        }
        let job = Job {
            index,
            instance: entry.instance.clone(),
            action: self.settings.strategy.action(),
            force: entry.force,
        };
        let event = Event::Triggering {
            id: entry.instance.id.clone(),
            canary: self.phase == Phase::Canaries,
            attempt: entry.attempts,
            max_attempts: self.settings.busy_attempts,
            position: self.started_instances,
            total: self.eligible,
        };
        self.emit(event);
        self.in_flight += 1;
        self.awaiting_answer += 1;
        let timing = Timing {
            poll_interval: self.settings.poll_interval,
            operation_timeout: self.settings.operation_timeout,
        };
        self.entries[index].answered = false;
        let task = self.tasks.spawn(operation::run(
            Arc::clone(&self.requests),
            job,
            timing,
            self.sender.clone(),
        ));
        self.task_index.insert(task.id(), index);
    }

    fn handle(&mut self, index: usize, message: Message) {
        let id = self.entries[index].instance.id.clone();
        match message {
            Message::Answered(Answer::Accepted { operation }) => {
                self.awaiting_answer -= 1;
                let entry = &mut self.entries[index];
                entry.answered = true;
                entry.operation = Some(operation.clone());
                entry.accepted_at = Some(Instant::now());
                entry.canary |= self.phase == Phase::Canaries;
                self.emit(Event::Accepted { id, operation });
            }
            Message::Answered(answer) => {
                self.awaiting_answer -= 1;
                self.in_flight -= 1;
                self.entries[index].answered = true;
                match answer {
                    Answer::Accepted { .. } => unreachable!("handled above"),
                    Answer::UpToDate => {
                        self.settle(index, Outcome::SkippedUpToDate, "already up to date")
                    }
                    Answer::Blocked => self.settle(
                        index,
                        Outcome::SkippedBlocked,
                        "the owner blocked maintenance updates",
                    ),
                    Answer::Deleted => {
                        self.settle(index, Outcome::Deleted, "the instance no longer exists")
                    }
                    Answer::Orphaned => self.settle(
                        index,
                        Outcome::Orphaned,
                        "the instance exists but its deployment does not",
                    ),
                    Answer::Busy { reason } => self.busy(index, reason),
                    Answer::Failed { reason } => {
                        self.entries[index].canary |= self.phase == Phase::Canaries;
                        self.fail(index, reason);
                    }
                }
            }
            Message::Completed(completion) => {
                self.in_flight -= 1;
                match completion {
                    Completion::Succeeded => {
                        if self.entries[index].canary
                            && let Some(check) = self.check.clone()
                        {
                            // Still in flight until its check ends.
                            self.in_flight += 1;
                            self.emit(Event::Checking {
                                id,
                                check: check.describe(),
                            });
                            let instance = self.entries[index].instance.clone();
                            let sender = self.sender.clone();
                            let task = self.tasks.spawn(async move {
                                let result = crate::check::run(&*check, instance).await;
                                let _ = sender.send((index, Message::Checked(result)));
                            });
                            self.task_index.insert(task.id(), index);
                            return;
                        }
                        self.succeeded(index, None);
                    }
                    Completion::Failed { reason } => self.fail(index, reason),
                    Completion::Deleted => self.settle(
                        index,
                        Outcome::Deleted,
                        "the instance was deleted while its operation ran",
                    ),
                    Completion::Orphaned => self.settle(
                        index,
                        Outcome::Orphaned,
                        "the deployment disappeared while its operation ran",
                    ),
                }
            }
            Message::Checked(result) => {
                self.in_flight -= 1;
                let what = self
                    .check
                    .as_ref()
                    .map(|c| c.describe())
                    .unwrap_or_default();
                match result {
                    Ok(said) => self.succeeded(index, Some(format!("{what} passed: {said}"))),
                    Err(said) => {
                        self.entries[index].check = Some(format!("{what} failed: {said}"));
                        self.fail(index, format!("the canary check ({what}) failed: {said}"));
                    }
                }
            }
        }
    }

    fn succeeded(&mut self, index: usize, check: Option<String>) {
        let entry = &mut self.entries[index];
        let id = entry.instance.id.clone();
        let after = entry
            .accepted_at
            .map(|t| Instant::now() - t)
            .unwrap_or_default();
        if entry.canary {
            self.canaries_succeeded += 1;
        }
        entry.check = check;
        self.conclude(index, Outcome::Updated, None);
        self.emit(Event::Succeeded { id, after });
    }

    fn conclude(&mut self, index: usize, outcome: Outcome, reason: Option<String>) {
        let now = self.clock.now();
        let entry = &mut self.entries[index];
        if entry.outcome.is_none() {
            self.finished += 1;
        }
        entry.outcome = Some(outcome);
        entry.reason = reason;
        entry.finished_at = Some(now);
    }

    fn settle(&mut self, index: usize, outcome: Outcome, reason: &str) {
        self.conclude(index, outcome, Some(reason.to_string()));
        let id = self.entries[index].instance.id.clone();
        self.emit(Event::Settled {
            id,
            outcome,
            reason: reason.to_string(),
        });
    }

    fn busy(&mut self, index: usize, reason: String) {
        let attempt = self.entries[index].attempts;
        let will_retry = attempt < self.settings.busy_attempts && self.stop.is_none();
        let id = self.entries[index].instance.id.clone();
        if will_retry {
            self.busy.push(index);
        } else if self.stop.is_some() {
            self.conclude(
                index,
                Outcome::Busy,
                Some(format!(
                    "busy at attempt {attempt}; not retried because the run stopped: {reason}"
                )),
            );
        } else {
            self.conclude(
                index,
                Outcome::Busy,
                Some(format!("still busy after {attempt} attempts: {reason}")),
            );
        }
        self.emit(Event::Busy {
            id,
            reason,
            attempt,
            will_retry,
        });
    }

    fn fail(&mut self, index: usize, reason: String) {
        self.conclude(index, Outcome::Failed, Some(reason.clone()));
        let entry = &self.entries[index];
        let (id, canary) = (entry.instance.id.clone(), entry.canary);
        self.emit(Event::Failed {
            id: id.clone(),
            canary,
            reason,
        });
        if self.stop.is_none() {
            self.stop = Some(Stop::Failure);
            let what = if canary { "canary" } else { "instance" };
            let in_flight = self.in_flight;
            self.emit(Event::Stopping {
                reason: format!(
                    "{what} {id} failed: no new operations are started; waiting for {in_flight} in flight"
                ),
            });
        }
    }

    /// A finished task has already reported through the channel; a task that panicked
    /// has not finished its report, and its instance fails rather than hanging the run.
    fn reap(
        &mut self,
        joined: Result<(TaskId, ()), JoinError>,
        receiver: &mut UnboundedReceiver<(usize, Message)>,
    ) {
        let (id, panic) = match joined {
            Ok((id, ())) => (id, None),
            Err(e) if e.is_panic() => (e.id(), Some(e)),
            Err(e) => (e.id(), None),
        };
        let index = self.task_index.remove(&id);
        let (Some(index), Some(panic)) = (index, panic) else {
            return;
        };
        // Whatever the task sent before it panicked is handled first.
        while let Ok((i, message)) = receiver.try_recv() {
            self.handle(i, message);
        }
        if self.entries[index].outcome.is_some() {
            return;
        }
        if !self.entries[index].answered {
            self.awaiting_answer -= 1;
        }
        self.in_flight -= 1;
        self.fail(
            index,
            format!("internal error while watching the instance: {panic}"),
        );
    }

    fn start_round(&mut self) {
        self.next_round_at = None;
        self.round += 1;
        let mut retry = std::mem::take(&mut self.busy);
        retry.sort_unstable();
        let instances = retry.len();
        self.queue.extend(retry);
        self.emit(Event::RoundStarted {
            phase: self.phase,
            round: self.round,
            instances,
        });
    }

    fn progress(&mut self) {
        let event = Event::Progress {
            in_flight: self.in_flight,
            finished: self.finished,
            pending: self.queue.len(),
            busy_waiting: self.busy.len(),
            elapsed: Instant::now() - self.started,
        };
        self.emit(event);
    }

    fn finish(mut self) -> Report {
        let why = match self.stop {
            Some(Stop::Failure) => "the run stopped after a failure",
            Some(Stop::WindowClosed) => "the maintenance window closed",
            _ => "the run was interrupted",
        };
        let deferring = self.stop == Some(Stop::WindowClosed);
        for index in std::mem::take(&mut self.queue) {
            let outcome = if deferring {
                Outcome::Deferred
            } else if self.entries[index].attempts > 0 {
                Outcome::Busy
            } else {
                Outcome::NotStarted
            };
            let reason = if deferring {
                format!("deferred to the next window: {why}")
            } else {
                format!("not started: {why}")
            };
            self.conclude(index, outcome, Some(reason));
        }
        for index in std::mem::take(&mut self.busy) {
            let attempts = self.entries[index].attempts;
            let outcome = if deferring {
                Outcome::Deferred
            } else {
                Outcome::Busy
            };
            self.conclude(
                index,
                outcome,
                Some(format!("busy at attempt {attempts}; not retried: {why}")),
            );
        }
        let mut counts = Counts {
            selected: self.entries.len(),
            ..Counts::default()
        };
        let finished_at = self.clock.now();
        let instances = self
            .entries
            .into_iter()
            .map(|entry| {
                let outcome = entry.outcome.unwrap_or(Outcome::Unfinished);
                counts.add(outcome);
                let reason = match (entry.outcome, &entry.operation) {
                    (None, Some(op)) if entry.answered => {
                        Some(format!("{op} was still running when the run ended"))
                    }
                    (None, _) => Some(
                        "the trigger was sent but not answered before the run ended; an \
                         operation may have started"
                            .into(),
                    ),
                    _ => entry.reason,
                };
                InstanceReport {
                    id: entry.instance.id.0,
                    canary: entry.canary,
                    outcome,
                    reason,
                    attempts: entry.attempts,
                    operation: entry.operation,
                    check: entry.check,
                    started_at: entry.started_at,
                    finished_at: entry.finished_at,
                }
            })
            .collect();
        let interrupted = self.interrupted;
        let clean = counts.failed == 0
            && counts.busy == 0
            && counts.not_started == 0
            && counts.unfinished == 0
            && !interrupted;
        Report {
            schema: 1,
            status: if !clean {
                Status::Failed
            } else if counts.deferred > 0 {
                Status::Deferred
            } else {
                Status::Succeeded
            },
            strategy: self.settings.strategy.name().into(),
            started_at: self.started_at,
            finished_at,
            interrupted,
            counts,
            instances,
            excluded: self.excluded,
        }
    }
}

impl Entry {
    fn new(instance: Instance, force: bool) -> Self {
        Entry {
            instance,
            force,
            canary: false,
            attempts: 0,
            started_at: None,
            finished_at: None,
            accepted_at: None,
            answered: false,
            outcome: None,
            reason: None,
            operation: None,
            check: None,
        }
    }
}
