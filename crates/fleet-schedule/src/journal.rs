//! What a rollout has done so far, kept in the state directory under the run's intent
//! (strategy, selection, inventory), so that the next run of the same intent continues
//! where this one stopped: instances done are left alone, canaries that passed are not
//! tried again. Each instance is appended as it is done and flushed to disk
//! ([`crate::journal_file`]), so a kill at any moment leaves what was done before it. An
//! instance is written only once its operation succeeded (or it needed nothing): the
//! journal can make a run repeat work, never skip work that is not done. A run that
//! finishes everything removes it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use fleet_clock::WallClock;

use crate::journal_file::{self, Contents};

use fleet_rollout::inventory::Instance;
use fleet_rollout::{Event, Observer, Outcome, Phase, Strategy};

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot read the journal {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the journal {} is damaged ({source}); `--fresh` starts over", path.display())]
    Damaged {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot write the journal {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Another run of the same rollout is going on: two at once would each repeat what
    /// the other does, and overwrite each other's journal.
    #[error("another run of this rollout is going on (it holds {})", path.display())]
    InUse { path: PathBuf },
}

/// A journal untouched for longer is from another rollout that happened to have the same
/// intent (next month's certificate rotation), not one to continue.
pub const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// What a run takes over from the journal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resume {
    /// Instances listed now that an earlier run finished: left alone.
    pub done: BTreeSet<String>,
    /// The canaries of an earlier run passed, for the change this run makes.
    pub canaries_passed: bool,
    /// Instances done before are outdated again: the update's target moved on.
    pub target_moved: bool,
}

pub struct Journal {
    path: PathBuf,
    record: Contents,
    /// The file, open to append to; `None` until it is written in a form that can be
    /// appended to (it does not exist yet, is in the first format, or ends cut short).
    file: Option<std::fs::File>,
    /// Held while the run lasts: one run of an intent at a time.
    _lock: std::fs::File,
    /// What the file held was older than [`MAX_AGE`] and was set aside.
    expired: bool,
    /// What the journal's times are read from.
    clock: WallClock,
}

fn digest(intent: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, intent.as_bytes());
    data_encoding::HEXLOWER.encode(&d.as_ref()[..10])
}

impl Journal {
    /// Where the journal of `intent` is kept in `state_dir`.
    pub fn path_for(state_dir: &Path, intent: &str) -> PathBuf {
        state_dir
            .join("journal")
            .join(format!("{}.json", digest(intent)))
    }

    /// The journal of `intent`, as the last run left it, or a new one (nothing is
    /// written until something is done).
    ///
    /// # Errors
    /// The file exists but cannot be read or is not a journal.
    pub fn open(state_dir: &Path, intent: &str, clock: WallClock) -> Result<Journal, JournalError> {
        let unix_now = || clock.unix_secs();
        let path = Self::path_for(state_dir, intent);
        let lock_path = path.with_extension("lock");
        let failed = |source| JournalError::Write {
            path: lock_path.clone(),
            source,
        };
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).map_err(failed)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(failed)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(JournalError::InUse { path: lock_path });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(failed(e)),
        }
        let fresh = Contents {
            intent: intent.to_string(),
            canaries_passed: false,
            done: BTreeSet::new(),
            started_at: unix_now(),
            updated_at: unix_now(),
            appendable: false,
        };
        let mut expired = false;
        let record = match std::fs::read(&path) {
            Ok(bytes) => {
                let record =
                    journal_file::parse(&bytes).map_err(|source| JournalError::Damaged {
                        path: path.clone(),
                        source,
                    })?;
                let age = unix_now().saturating_sub(record.updated_at);
                // Another intent under the same digest is not this run's memory.
                if record.intent != intent {
                    fresh
                } else if age > MAX_AGE.as_secs() {
                    expired = true;
                    fresh
                } else {
                    record
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => fresh,
            Err(source) => return Err(JournalError::Read { path, source }),
        };
        let file = if record.appendable {
            Some(
                journal_file::open_for_append(&path).map_err(|source| JournalError::Write {
                    path: path.clone(),
                    source,
                })?,
            )
        } else {
            None
        };
        Ok(Journal {
            path,
            record,
            file,
            _lock: lock,
            expired,
            clock,
        })
    }

    /// Whether an old journal of this intent was set aside as too old to continue.
    pub fn expired(&self) -> bool {
        self.expired
    }

    /// Forgets what earlier runs of this intent did (`--fresh`).
    ///
    /// # Errors
    /// The file is there and cannot be removed.
    pub fn forget(&mut self) -> Result<(), JournalError> {
        self.record.done.clear();
        self.record.canaries_passed = false;
        self.record.started_at = self.clock.unix_secs();
        self.file = None;
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(JournalError::Write {
                path: self.path.clone(),
                source: e,
            }),
            _ => Ok(()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_resumed(&self) -> bool {
        !self.record.done.is_empty() || self.record.canaries_passed
    }

    pub fn canaries_passed(&self) -> bool {
        self.record.canaries_passed
    }

    /// What this run may take over from the earlier ones, given the instances listed now.
    /// For an update, an instance the inventory says is outdated again (a newer release
    /// since) is done again, whatever the journal says, and then the canaries that passed
    /// proved an older change and are tried again.
    pub fn resume<'a>(
        &self,
        listed: impl IntoIterator<Item = &'a Instance>,
        strategy: Strategy,
    ) -> Resume {
        let update = matches!(strategy, Strategy::Update { .. });
        let mut resume = Resume::default();
        for instance in listed {
            if !self.record.done.contains(&instance.id.0) {
                continue;
            }
            if update && instance.update_available {
                resume.target_moved = true;
            } else {
                resume.done.insert(instance.id.0.clone());
            }
        }
        resume.canaries_passed = self.record.canaries_passed && !resume.target_moved;
        resume
    }

    /// Records the line `line` makes of the time (its change already applied to the
    /// record in memory): appended to the file, or, while the file cannot be appended to,
    /// the whole record written anew.
    fn save(&mut self, line: impl FnOnce(u64) -> String) -> Result<(), JournalError> {
        let failed = |source| JournalError::Write {
            path: self.path.clone(),
            source,
        };
        let now = self.clock.unix_secs();
        self.record.updated_at = now;
        match &mut self.file {
            Some(file) => journal_file::append(file, &line(now)).map_err(failed),
            None => {
                // Its folder was made when the journal was opened and locked.
                let whole = journal_file::whole(&self.record, now);
                fleet_output::write_file(&self.path, &whole).map_err(failed)?;
                self.file = Some(journal_file::open_for_append(&self.path).map_err(failed)?);
                Ok(())
            }
        }
    }

    /// # Errors
    /// The journal cannot be written.
    pub fn record_done(&mut self, id: &str) -> Result<(), JournalError> {
        if self.record.done.insert(id.to_string()) {
            self.save(|now| journal_file::done(id, now))?;
        }
        Ok(())
    }

    /// # Errors
    /// The journal cannot be written.
    pub fn record_canaries_passed(&mut self) -> Result<(), JournalError> {
        if !self.record.canaries_passed {
            self.record.canaries_passed = true;
            self.save(journal_file::canaries_passed)?;
        }
        Ok(())
    }

    /// The rollout is complete: the next run of this intent starts a new one.
    ///
    /// # Errors
    /// The file is there and cannot be removed.
    pub fn complete(self) -> Result<(), JournalError> {
        // Removed while still locked: no other run reads it half gone.
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(JournalError::Write {
                path: self.path,
                source: e,
            }),
            _ => Ok(()),
        }
    }
}

/// Passes every event on, and writes to the journal what is done: an instance whose
/// operation succeeded or that needed nothing, and the canaries once the main phase
/// follows a canary phase. A journal that cannot be written is warned of once; the run
/// goes on (the next may then repeat work, never skip it).
pub struct JournalObserver<'a> {
    inner: &'a mut dyn Observer,
    journal: &'a mut Journal,
    canary_phase: bool,
    warned: bool,
}

impl<'a> JournalObserver<'a> {
    pub fn new(inner: &'a mut dyn Observer, journal: &'a mut Journal) -> Self {
        JournalObserver {
            inner,
            journal,
            canary_phase: false,
            warned: false,
        }
    }

    fn keep(&mut self, written: Result<(), JournalError>) {
        if let Err(e) = written
            && !self.warned
        {
            self.warned = true;
            tracing::warn!(error = %e, "the journal is not kept: a later run may repeat work");
        }
    }
}

impl Observer for JournalObserver<'_> {
    fn on_event(&mut self, at: SystemTime, event: &Event) {
        match event {
            Event::Succeeded { id, .. } => {
                let written = self.journal.record_done(&id.0);
                self.keep(written);
            }
            Event::Settled {
                id,
                outcome: Outcome::SkippedUpToDate | Outcome::Deleted | Outcome::Orphaned,
                ..
            } => {
                let written = self.journal.record_done(&id.0);
                self.keep(written);
            }
            Event::PhaseStarted {
                phase: Phase::Canaries,
                ..
            } => self.canary_phase = true,
            Event::PhaseStarted {
                phase: Phase::Main, ..
            } if self.canary_phase => {
                let written = self.journal.record_canaries_passed();
                self.keep(written);
            }
            _ => {}
        }
        self.inner.on_event(at, event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_rollout::inventory::InstanceId;
    use fleet_rollout::{Discard, inventory::Selection};

    #[test]
    fn what_is_done_survives_a_reopen_and_is_gone_after_complete_or_forget() {
        let dir = tempfile::tempdir().unwrap();
        let intent = "recreate fix=true; broker https://broker";
        let mut journal = Journal::open(dir.path(), intent, WallClock::new()).unwrap();
        assert!(!journal.is_resumed());
        assert!(matches!(
            Journal::open(dir.path(), intent, WallClock::new()),
            Err(JournalError::InUse { .. })
        ));
        assert!(
            !journal.path().exists(),
            "nothing written before anything is done"
        );
        let mut discard = Discard;
        let mut observer = JournalObserver::new(&mut discard, &mut journal);
        let now = SystemTime::now();
        observer.on_event(
            now,
            &Event::PhaseStarted {
                phase: Phase::Canaries,
                instances: 1,
            },
        );
        observer.on_event(
            now,
            &Event::Succeeded {
                id: InstanceId("a".into()),
                after: std::time::Duration::from_secs(1),
            },
        );
        observer.on_event(
            now,
            &Event::PhaseStarted {
                phase: Phase::Main,
                instances: 2,
            },
        );
        observer.on_event(
            now,
            &Event::Failed {
                id: InstanceId("b".into()),
                canary: false,
                reason: "boom".into(),
            },
        );
        drop(journal);
        let again = Journal::open(dir.path(), intent, WallClock::new()).unwrap();
        assert!(again.canaries_passed());
        let listed = [Instance::new("a", "p"), Instance::new("b", "p")];
        let recreate = Strategy::Recreate {
            fix: true,
            force: false,
        };
        let resumed = again.resume(&listed, recreate);
        assert_eq!(resumed.done, BTreeSet::from(["a".to_string()]));
        assert!(resumed.canaries_passed && !resumed.target_moved);
        // For an update, an instance outdated again is done again.
        let update = Strategy::Update {
            instance_type: Selection::All,
            force: false,
        };
        let resumed = again.resume(&listed, update);
        assert!(resumed.done.is_empty());
        assert!(resumed.target_moved && !resumed.canaries_passed);
        // Another intent has its own journal.
        assert!(
            !Journal::open(dir.path(), "update", WallClock::new())
                .unwrap()
                .is_resumed()
        );
        again.complete().unwrap();
        assert!(
            !Journal::open(dir.path(), intent, WallClock::new())
                .unwrap()
                .is_resumed()
        );
        let mut once_more = Journal::open(dir.path(), intent, WallClock::new()).unwrap();
        once_more.record_done("a").unwrap();
        once_more.forget().unwrap();
        assert!(!once_more.is_resumed());
        drop(once_more);
        assert!(
            !Journal::open(dir.path(), intent, WallClock::new())
                .unwrap()
                .is_resumed()
        );
    }

    #[test]
    fn a_journal_left_longer_than_the_max_age_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let intent = "update";
        let then = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let mut journal = Journal::open(dir.path(), intent, WallClock::anchored_at(then)).unwrap();
        journal.record_done("a").unwrap();
        drop(journal);
        let within = then + MAX_AGE;
        let kept = Journal::open(dir.path(), intent, WallClock::anchored_at(within)).unwrap();
        assert!(kept.is_resumed() && !kept.expired());
        drop(kept);
        let past = within + std::time::Duration::from_secs(1);
        let set_aside = Journal::open(dir.path(), intent, WallClock::anchored_at(past)).unwrap();
        assert!(!set_aside.is_resumed() && set_aside.expired());
    }

    #[test]
    fn a_journal_cut_short_by_a_kill_keeps_what_was_whole_and_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let intent = "update";
        let mut journal = Journal::open(dir.path(), intent, WallClock::new()).unwrap();
        journal.record_done("a").unwrap();
        journal.record_done("b").unwrap();
        let path = journal.path().to_path_buf();
        drop(journal);
        // A kill in the middle of appending `c`.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(br#"{"entry":"done","id":"c"#);
        std::fs::write(&path, bytes).unwrap();

        let listed = [
            Instance::new("a", "p"),
            Instance::new("b", "p"),
            Instance::new("c", "p"),
        ];
        let recreate = Strategy::Recreate {
            fix: false,
            force: false,
        };
        let mut again = Journal::open(dir.path(), intent, WallClock::new()).unwrap();
        assert_eq!(
            again.resume(&listed, recreate).done,
            BTreeSet::from(["a".to_string(), "b".to_string()])
        );
        again.record_done("c").unwrap();
        again.record_done("d").unwrap();
        drop(again);
        let last = Journal::open(dir.path(), intent, WallClock::new()).unwrap();
        assert_eq!(last.resume(&listed, recreate).done.len(), 3);
        assert!(last.record.done.contains("d"));
    }

    #[test]
    fn a_damaged_journal_is_named_not_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = Journal::path_for(dir.path(), "x");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "{not json").unwrap();
        let e = Journal::open(dir.path(), "x", WallClock::new())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("damaged") && e.contains("--fresh"), "{e}");
    }
}
