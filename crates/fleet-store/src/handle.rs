//! The store as asynchronous code reaches it. A call runs where it is made, on the async
//! worker, holding the connection for the few tens of microseconds SQLite takes: handing
//! each call to a thread of its own and back cost more than the call (measured on a
//! 10,000-instance fleet: a third of the wall time went to waking threads). Calls that
//! read or write without bound (a long task history) are few and come from people, not
//! from deploys; blobs, which deploys read and write and which run to hundreds of
//! megabytes, go to tokio's blocking pool ([`AsyncStore::blob`], [`AsyncStore::put_blob`]).
//! A call to PostgreSQL waits a round trip and more: it is made on tokio's blocking pool,
//! where the connection's client waits for the server itself, and no async worker waits
//! meanwhile (measured at 10,000 instances with 100 operations in flight: from 0.61 to
//! 0.78 of the ideal makespan, the p99 of a poll from 79 to 26 ms, once workers were
//! freed; a current-thread runtime, as the embedded run's, then overlaps its calls too).

use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::{Collection, IpClaim, IpRecord, IpRelease, Store, StoreError, Write};
use super::{Lease, Recovery, Renewal, Task, TaskEvent, TaskFilter, TaskKindSpec};

/// One per database: every clone shares the store.
#[derive(Clone)]
pub struct AsyncStore {
    store: Arc<dyn Store>,
}

impl From<Arc<dyn Store>> for AsyncStore {
    fn from(store: Arc<dyn Store>) -> Self {
        AsyncStore::new(store)
    }
}

impl AsyncStore {
    pub fn new(store: Arc<dyn Store>) -> Self {
        AsyncStore { store }
    }

    /// The blocking store, for code that already runs where blocking is allowed (a
    /// synchronous command-line path, a test).
    pub fn blocking(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Runs `call` against the store where it is made. Several reads in one call see the
    /// store as one caller at a time does. A task that makes many calls in a row gives
    /// way to the others now and then, as it would at any other await.
    ///
    /// # Errors
    /// The call's own error.
    pub async fn run<T, F>(&self, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        tokio::task::coop::consume_budget().await;
        let started = tokio::time::Instant::now();
        // A call that waits on a server (a shared store's: PostgreSQL's round trips, a
        // tenth of a millisecond and more, where SQLite's take microseconds in this
        // process) is made on tokio's blocking pool, so that no
        // worker waits for it, even the only one of a current-thread runtime (the
        // embedded run): calls made at once then wait on the server side by side (the
        // store holds several connections) while the workers go on. A paused clock does
        // not advance while one is out.
        let answer = if self.store.shared() && tokio::runtime::Handle::try_current().is_ok() {
            let store = Arc::clone(&self.store);
            off_runtime(move || call(&*store)).await
        } else {
            call(&*self.store)
        };
        metrics::histogram!("fleet_store_call_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        answer
    }

    /// A blob, read on tokio's blocking pool: a blob runs to hundreds of megabytes (a
    /// compiled package, a release's archive), where a document's call takes
    /// microseconds and is made where it is asked for.
    ///
    /// # Errors
    /// The store's.
    pub async fn blob(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let (store, id) = (Arc::clone(&self.store), id.to_string());
        off_runtime(move || store.blob(&id)).await
    }

    /// Keeps `bytes` as the blob `id`, written on tokio's blocking pool (see [`Self::blob`]).
    ///
    /// # Errors
    /// The store's.
    pub async fn put_blob(&self, id: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        let (store, id) = (Arc::clone(&self.store), id.to_string());
        off_runtime(move || store.put_blob(&id, &bytes)).await
    }

    /// [`Store::put_blob_file`], on tokio's blocking pool.
    ///
    /// # Errors
    /// The store's.
    pub async fn put_blob_file(&self, id: &str, path: &std::path::Path) -> Result<(), StoreError> {
        let (store, id, path) = (Arc::clone(&self.store), id.to_string(), path.to_path_buf());
        off_runtime(move || store.put_blob_file(&id, &path)).await
    }

    /// [`Store::defer`]: writes that need no commit of their own.
    ///
    /// # Errors
    /// Those of a store that writes them at once.
    pub fn defer(&self, batch: Vec<Write>) -> Result<(), StoreError> {
        self.store.defer(batch)
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

    pub async fn keys(&self, collection: Collection) -> Result<Vec<String>, StoreError> {
        self.run(move |s| s.keys(collection)).await
    }

    /// Applies every write of the batch, or none; an empty batch costs nothing.
    pub async fn write(&self, batch: Vec<Write>) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.run(move |s| s.write(batch)).await
    }

    /// [`Store::insert`]: creates the record unless one has its key.
    pub async fn insert<T: serde::Serialize>(
        &self,
        collection: Collection,
        key: &str,
        scope: &str,
        value: &T,
    ) -> Result<bool, StoreError> {
        let body = serde_json::to_string(value)?;
        let (key, scope) = (key.to_string(), scope.to_string());
        self.run(move |s| s.insert(collection, &key, &scope, &body))
            .await
    }

    pub async fn create_task(
        &self,
        kind: TaskKindSpec,
        deployment: Option<&str>,
        lock: Option<&str>,
        user: Option<&str>,
        lease: Lease,
    ) -> Result<Result<Task, u64>, StoreError> {
        let owned = |v: Option<&str>| v.map(str::to_string);
        let (deployment, lock, user) = (owned(deployment), owned(lock), owned(user));
        self.run(move |s| {
            s.create_task(
                kind,
                deployment.as_deref(),
                lock.as_deref(),
                user.as_deref(),
                lease,
            )
        })
        .await
    }

    pub async fn request_cancel(&self, id: u64) -> Result<Option<Task>, StoreError> {
        self.run(move |s| s.request_cancel(id)).await
    }

    /// [`Store::leads`].
    ///
    /// # Errors
    /// The store's.
    pub async fn leads(&self, now: u64) -> Result<bool, StoreError> {
        self.run(move |s| s.leads(now)).await
    }

    pub async fn renew(&self, lease: Lease) -> Result<Renewal, StoreError> {
        self.run(move |s| s.renew(lease)).await
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

    pub async fn recover(
        &self,
        reason: &str,
        now: u64,
        recovery: Recovery,
    ) -> Result<Vec<u64>, StoreError> {
        let reason = reason.to_string();
        self.run(move |s| s.recover(&reason, now, recovery)).await
    }

    pub async fn prune_tasks(
        &self,
        kind: TaskKindSpec,
        keep: usize,
        attached: &'static [Collection],
    ) -> Result<Vec<u64>, StoreError> {
        self.run(move |s| s.prune_tasks(kind, keep, attached)).await
    }

    pub async fn sync(&self) -> Result<(), StoreError> {
        self.run(|s| s.sync()).await
    }

    pub async fn name_unnamed_tasks(
        &self,
        kinds: &'static [TaskKindSpec],
        fallback: TaskKindSpec,
    ) -> Result<usize, StoreError> {
        self.run(move |s| s.name_unnamed_tasks(kinds, fallback))
            .await
    }
}

thread_local! {
    /// Set while a call runs on tokio's blocking pool.
    static ON_BLOCKING_POOL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a call may wait on a server where it runs: on tokio's blocking pool (where
/// [`AsyncStore`] makes such calls) or outside any runtime, not on an async worker.
pub(crate) fn may_block_here() -> bool {
    ON_BLOCKING_POOL.get() || tokio::runtime::Handle::try_current().is_err()
}

/// Runs `work` where it may block: here when [`may_block_here`], else on a thread of its
/// own, waited for; a panic in it is the caller's.
pub(crate) fn where_blocking_is_allowed<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    if may_block_here() {
        return work();
    }
    std::thread::scope(|scope| match scope.spawn(work).join() {
        Ok(answer) => answer,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// Unsets [`ON_BLOCKING_POOL`] when the call ends, however it ends.
struct OnBlockingPool;

impl Drop for OnBlockingPool {
    fn drop(&mut self) {
        ON_BLOCKING_POOL.set(false);
    }
}

/// Runs `call` on tokio's blocking pool; a panic in it is the caller's, as it would be
/// where it was made.
async fn off_runtime<T, F>(call: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    let call = move || {
        ON_BLOCKING_POOL.set(true);
        let _unset = OnBlockingPool;
        call()
    };
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => result,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => Err(StoreError::Stopped),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{list, put};

    fn store() -> AsyncStore {
        AsyncStore::new(crate::testing::store())
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
                        .write(vec![put(crate::testing::FLEET, &key, "", &i)])
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
        let stored: Vec<u32> = store.list(crate::testing::FLEET, None).await.unwrap();
        assert_eq!(stored, (0..200).filter(|&i| i != 100).collect::<Vec<_>>());
        assert_eq!(
            list::<u32>(&**store.blocking(), crate::testing::FLEET, None)
                .unwrap()
                .len(),
            199
        );
    }

    #[tokio::test]
    async fn a_task_making_many_calls_in_a_row_lets_the_others_run() {
        let store = store();
        let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let other = tokio::spawn({
            let ran = Arc::clone(&other_ran);
            async move { ran.store(true, std::sync::atomic::Ordering::SeqCst) }
        });
        let mut seen_before_the_end = false;
        for _ in 0..1_000 {
            store.get::<u32>(crate::testing::FLEET, "k").await.unwrap();
            seen_before_the_end |= other_ran.load(std::sync::atomic::Ordering::SeqCst);
        }
        assert!(
            seen_before_the_end,
            "the other task waited for all 1,000 calls"
        );
        other.await.unwrap();
    }
}
