//! The store as asynchronous code reaches it. SQLite blocks, so no call made through
//! [`AsyncStore`] runs on an async worker thread: calls queue up and one worker on tokio's
//! blocking pool answers them in order, alive while there is work, so that a busy fleet
//! does not pay a thread hand-over per call and an idle one holds no thread. Tokio's
//! paused test clock does not jump ahead while the worker runs.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use super::{Collection, IpClaim, IpRecord, IpRelease, Store, StoreError, Write};
use super::{Task, TaskEvent, TaskFilter, TaskKind};

/// A call waiting for the worker. Running it yields its delivery: the answer goes out only
/// once the transaction the call ran in has committed.
type Job = Box<dyn FnOnce(&dyn Store) -> Delivery + Send>;

/// Sends a call's answer, or the failure of the commit it waited for.
type Delivery = Box<dyn FnOnce(Option<&Arc<StoreError>>) + Send>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Whether a worker is draining `jobs`.
    draining: bool,
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many times an idle worker looks for a next call before it ends: a caller usually
/// sends its next call within microseconds of the last answer, and a worker still there
/// takes it without a thread being woken (measured: about a third off `embedded_bench b`).
const LINGER: u32 = 20;

/// The most calls one transaction takes: calls that queued up while the worker was busy
/// commit together (a small write costs about a fifth when ten share a commit), while no
/// caller waits on more than this many others.
const TURN: usize = 64;

/// Runs queued calls until none is left.
struct Worker {
    store: Arc<dyn Store>,
    queue: Arc<Mutex<Queue>>,
    finished: bool,
}

impl Worker {
    fn drain(mut self) {
        let mut idle = 0;
        loop {
            let jobs: Vec<Job> = {
                let mut queue = lock(&self.queue);
                if queue.jobs.is_empty() {
                    if idle < LINGER {
                        drop(queue);
                        idle += 1;
                        std::thread::yield_now();
                        continue;
                    }
                    queue.draining = false;
                    self.finished = true;
                    return;
                }
                idle = 0;
                let turn = queue.jobs.len().min(TURN);
                queue.jobs.drain(..turn).collect()
            };
            self.turn(jobs);
        }
    }

    /// Runs `jobs` in one transaction when there are several, then answers them.
    fn turn(&self, jobs: Vec<Job>) {
        let store = &*self.store;
        if jobs.len() == 1 {
            for job in jobs {
                job(store)(None);
            }
            return;
        }
        let mut deliveries = Vec::with_capacity(jobs.len());
        let mut pending = jobs.into_iter();
        let committed = store.together(&mut || {
            deliveries.extend(pending.by_ref().map(|job| job(store)));
        });
        let failed = committed.err().map(Arc::new);
        for delivery in deliveries {
            delivery(failed.as_ref());
        }
        // The shared transaction did not begin: each call runs on its own.
        for job in pending {
            job(store)(None);
        }
    }
}

impl Drop for Worker {
    /// A worker dropped before it ran (the runtime shuts down) would leave its calls
    /// waiting forever: they are answered with [`StoreError::Stopped`] instead.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let abandoned: Vec<Job> = {
            let mut queue = lock(&self.queue);
            queue.draining = false;
            queue.jobs.drain(..).collect()
        };
        drop(abandoned);
    }
}

/// One per database: every clone shares the queue and its worker.
#[derive(Clone)]
pub struct AsyncStore {
    store: Arc<dyn Store>,
    queue: Arc<Mutex<Queue>>,
}

impl From<Arc<dyn Store>> for AsyncStore {
    fn from(store: Arc<dyn Store>) -> Self {
        AsyncStore::new(store)
    }
}

impl AsyncStore {
    pub fn new(store: Arc<dyn Store>) -> Self {
        AsyncStore {
            store,
            queue: Arc::default(),
        }
    }

    /// The blocking store, for code that already runs where blocking is allowed (a
    /// `spawn_blocking` closure, a synchronous command-line path, a test).
    pub fn blocking(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Runs `call` against the store on the worker. Several reads in one call see the
    /// store as one caller at a time does, and cost one turn of the worker.
    ///
    /// # Errors
    /// The call's own error, or [`StoreError::Stopped`] when the runtime shuts down first.
    pub async fn run<T, F>(&self, call: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move |store| {
            let outcome = catch_unwind(AssertUnwindSafe(|| call(store)));
            Box::new(move |failed: Option<&Arc<StoreError>>| {
                let outcome = match (outcome, failed) {
                    (Ok(Ok(_)), Some(failed)) => {
                        Ok(Err(StoreError::NotCommitted(Arc::clone(failed))))
                    }
                    (outcome, _) => outcome,
                };
                let _ = answer.send(outcome);
            })
        });
        let start = {
            let mut queue = lock(&self.queue);
            queue.jobs.push_back(job);
            !std::mem::replace(&mut queue.draining, true)
        };
        if start {
            let worker = Worker {
                store: Arc::clone(&self.store),
                queue: Arc::clone(&self.queue),
                finished: false,
            };
            // Answers come through each call's channel, not the handle.
            drop(tokio::task::spawn_blocking(move || worker.drain()));
        }
        match answered.await {
            Ok(Ok(result)) => result,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => Err(StoreError::Stopped),
        }
    }

    pub async fn get<T>(&self, collection: Collection, key: &str) -> Result<Option<T>, StoreError>
    where
        T: DeserializeOwned + Send + 'static,
    {
        let key = key.to_string();
        self.run(move |s| super::get(s, collection, &key)).await
    }

    pub async fn list<T>(
        &self,
        collection: Collection,
        scope: Option<&str>,
    ) -> Result<Vec<T>, StoreError>
    where
        T: DeserializeOwned + Send + 'static,
    {
        let scope = scope.map(str::to_string);
        self.run(move |s| super::list(s, collection, scope.as_deref()))
            .await
    }

    /// Applies every write of the batch, or none; an empty batch costs nothing.
    pub async fn write(&self, batch: Vec<Write>) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.run(move |s| s.write(batch)).await
    }

    pub async fn create_task(
        &self,
        kind: TaskKind,
        deployment: Option<&str>,
        lock: Option<&str>,
        user: Option<&str>,
    ) -> Result<Result<Task, u64>, StoreError> {
        let deployment = deployment.map(str::to_string);
        let lock = lock.map(str::to_string);
        let user = user.map(str::to_string);
        self.run(move |s| {
            s.create_task(
                kind,
                deployment.as_deref(),
                lock.as_deref(),
                user.as_deref(),
            )
        })
        .await
    }

    pub async fn put_task(&self, task: &Task) -> Result<(), StoreError> {
        let task = task.clone();
        self.run(move |s| s.put_task(&task)).await
    }

    pub async fn task(&self, id: u64) -> Result<Option<Task>, StoreError> {
        self.run(move |s| s.task(id)).await
    }

    pub async fn tasks(&self, filter: TaskFilter) -> Result<Vec<Task>, StoreError> {
        self.run(move |s| s.tasks(&filter)).await
    }

    pub async fn last_change(&self, deployment: &str) -> Result<Option<Task>, StoreError> {
        let deployment = deployment.to_string();
        self.run(move |s| s.last_change(&deployment)).await
    }

    pub async fn last_changes(&self) -> Result<Vec<Task>, StoreError> {
        self.run(|s| s.last_changes()).await
    }

    pub async fn append_events(&self, task: u64, events: Vec<TaskEvent>) -> Result<(), StoreError> {
        self.run(move |s| s.append_events(task, &events)).await
    }

    pub async fn events(&self, task: u64) -> Result<Vec<TaskEvent>, StoreError> {
        self.run(move |s| s.events(task)).await
    }

    pub async fn lock_holder(&self, lock: &str) -> Result<Option<u64>, StoreError> {
        let lock = lock.to_string();
        self.run(move |s| s.lock_holder(&lock)).await
    }

    pub async fn release_lock(&self, lock: &str, task: u64) -> Result<(), StoreError> {
        let lock = lock.to_string();
        self.run(move |s| s.release_lock(&lock, task)).await
    }

    pub async fn locks(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.run(|s| s.locks()).await
    }

    pub async fn apply_ips(
        &self,
        claims: Vec<IpClaim>,
        releases: Vec<IpRelease>,
    ) -> Result<Result<(), IpRecord>, StoreError> {
        self.run(move |s| s.apply_ips(&claims, &releases)).await
    }

    pub async fn ips_of(&self, deployment: &str) -> Result<Vec<IpRecord>, StoreError> {
        let deployment = deployment.to_string();
        self.run(move |s| s.ips_of(&deployment)).await
    }

    pub async fn recover(&self, reason: &str, now: u64) -> Result<Vec<u64>, StoreError> {
        let reason = reason.to_string();
        self.run(move |s| s.recover(&reason, now)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SqliteStore, list, put};

    fn store() -> AsyncStore {
        AsyncStore::new(Arc::new(SqliteStore::in_memory().unwrap()))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_from_many_tasks_are_all_answered_and_a_panic_reaches_its_caller_only() {
        let store = store();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..200u32 {
            let store = store.clone();
            tasks.spawn(async move {
                if i == 100 {
                    store
                        .run(|_| -> Result<(), StoreError> { panic!("a call that panics") })
                        .await
                } else {
                    let key = format!("{i:03}");
                    store
                        .write(vec![put(Collection::Fleet, &key, "", &i)])
                        .await
                }
            });
        }
        let mut panics = 0;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(written) => written.unwrap(),
                Err(e) => {
                    assert!(e.is_panic());
                    panics += 1;
                }
            }
        }
        assert_eq!(panics, 1);
        let stored: Vec<u32> = store.list(Collection::Fleet, None).await.unwrap();
        assert_eq!(stored, (0..200).filter(|&i| i != 100).collect::<Vec<_>>());
        assert_eq!(
            list::<u32>(&**store.blocking(), Collection::Fleet, None)
                .unwrap()
                .len(),
            199
        );
    }

    /// A store whose shared transactions never commit; it answers `get` and nothing else.
    struct NeverCommits;

    impl Store for NeverCommits {
        fn together(&self, work: &mut dyn FnMut()) -> Result<(), StoreError> {
            work();
            Err(StoreError::Stopped)
        }
        fn get(&self, _: Collection, key: &str) -> Result<Option<String>, StoreError> {
            match key {
                "corrupt" => Err(StoreError::Corrupt(
                    serde_json::from_str::<u32>("x").unwrap_err(),
                )),
                _ => Ok(Some("1".to_string())),
            }
        }
        fn list(&self, _: Collection, _: Option<&str>) -> Result<Vec<String>, StoreError> {
            unreachable!()
        }
        fn write(&self, _: Vec<Write>) -> Result<(), StoreError> {
            unreachable!()
        }
        fn create_task(
            &self,
            _: TaskKind,
            _: Option<&str>,
            _: Option<&str>,
            _: Option<&str>,
        ) -> Result<Result<Task, u64>, StoreError> {
            unreachable!()
        }
        fn put_task(&self, _: &Task) -> Result<(), StoreError> {
            unreachable!()
        }
        fn task(&self, _: u64) -> Result<Option<Task>, StoreError> {
            unreachable!()
        }
        fn tasks(&self, _: &TaskFilter) -> Result<Vec<Task>, StoreError> {
            unreachable!()
        }
        fn last_change(&self, _: &str) -> Result<Option<Task>, StoreError> {
            unreachable!()
        }
        fn last_changes(&self) -> Result<Vec<Task>, StoreError> {
            unreachable!()
        }
        fn append_events(&self, _: u64, _: &[TaskEvent]) -> Result<(), StoreError> {
            unreachable!()
        }
        fn events(&self, _: u64) -> Result<Vec<TaskEvent>, StoreError> {
            unreachable!()
        }
        fn lock_holder(&self, _: &str) -> Result<Option<u64>, StoreError> {
            unreachable!()
        }
        fn release_lock(&self, _: &str, _: u64) -> Result<(), StoreError> {
            unreachable!()
        }
        fn locks(&self) -> Result<Vec<(String, u64)>, StoreError> {
            unreachable!()
        }
        fn release_ip(&self, _: u32, _: &str, _: &crate::IpHolder) -> Result<(), StoreError> {
            unreachable!()
        }
        fn claimed(&self) -> Result<fleet_ipset::IpSet, StoreError> {
            unreachable!()
        }
        fn ip_holders(&self, _: &[u32]) -> Result<Vec<IpRecord>, StoreError> {
            unreachable!()
        }
        fn apply_ips(
            &self,
            _: &[IpClaim],
            _: &[IpRelease],
        ) -> Result<Result<(), IpRecord>, StoreError> {
            unreachable!()
        }
        fn ips_in(&self, _: u32, _: u32) -> Result<Vec<u32>, StoreError> {
            unreachable!()
        }
        fn ips_of(&self, _: &str) -> Result<Vec<IpRecord>, StoreError> {
            unreachable!()
        }
        fn recover(&self, _: &str, _: u64) -> Result<Vec<u64>, StoreError> {
            unreachable!()
        }
    }

    #[tokio::test]
    async fn calls_that_queued_up_answer_only_once_their_shared_transaction_commits() {
        let store = AsyncStore::new(Arc::new(NeverCommits));
        // The first call holds the worker until the others have queued behind it.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let first = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .run(move |s| {
                        held.recv().unwrap();
                        super::super::get::<u32>(s, Collection::Fleet, "first")
                    })
                    .await
            }
        });
        let taken = || {
            for _ in 0..5_000 {
                if lock(&store.queue).jobs.is_empty() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        tokio::task::yield_now().await;
        // The worker's thread takes the first call when it starts.
        taken();
        let mut queued = tokio::task::JoinSet::new();
        for key in ["a", "b", "corrupt"] {
            let store = store.clone();
            queued.spawn(async move { (key, store.get::<u32>(Collection::Fleet, key).await) });
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            lock(&store.queue).jobs.len(),
            3,
            "the three calls queued up"
        );
        release.send(()).unwrap();
        // Alone in its turn, the first call committed on its own.
        assert_eq!(first.await.unwrap().unwrap(), Some(1));
        let mut answers = queued.join_all().await;
        answers.sort_by_key(|(key, _)| *key);
        for (key, answer) in answers {
            match key {
                "corrupt" => assert!(matches!(answer, Err(StoreError::Corrupt(_))), "{answer:?}"),
                _ => assert!(
                    matches!(&answer, Err(StoreError::NotCommitted(e)) if matches!(**e, StoreError::Stopped)),
                    "{key}: {answer:?}"
                ),
            }
        }
    }

    #[test]
    fn calls_made_while_the_runtime_is_gone_are_answered_as_stopped() {
        let gone = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let handle = gone.handle().clone();
        drop(gone);
        let live = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let store = store();
        let answer = live.block_on(async {
            let _entered = handle.enter();
            store.get::<u32>(Collection::Fleet, "k").await
        });
        assert!(matches!(answer, Err(StoreError::Stopped)), "{answer:?}");
        // The queue is usable again once a runtime runs.
        let again = live.block_on(store.get::<u32>(Collection::Fleet, "k"));
        assert_eq!(again.unwrap(), None);
    }
}
