//! When a rollout may run, and what an earlier run of the same rollout already did: the
//! maintenance window (pure: a time in, open or closed out) and the journal (a file in the
//! state directory, appended to and flushed after every instance that is done).

pub mod journal;
mod journal_file;
pub mod window;

pub use journal::{Journal, JournalError, JournalObserver, Resume};
pub use window::{Window, WindowError, WindowState};
