//! The store as asynchronous code reaches it. SQLite blocks; every call made through
//! [`AsyncStore`] runs on tokio's blocking pool, so that a slow disk or a busy database
//! never holds one of the few async worker threads that serve requests and drive tasks.

use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::{Collection, IpClaim, IpHolder, IpRecord, IpRelease, Store, StoreError, Write};
use super::{Task, TaskEvent, TaskFilter, TaskKind};

#[derive(Clone)]
pub struct AsyncStore {
    store: Arc<dyn Store>,
}

impl AsyncStore {
    pub fn new(store: Arc<dyn Store>) -> Self {
        AsyncStore { store }
    }

    /// The blocking store, for code that already runs where blocking is allowed (a
    /// `spawn_blocking` closure, a synchronous command-line path).
    pub fn blocking(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Runs `call` against the store on the blocking pool. Several reads in one call see
    /// the store as one caller at a time does, and cost one hand-over.
    ///
    /// # Errors
    /// The call's own error, or [`StoreError::Stopped`] when the runtime shuts down first.
    pub async fn run<T, F>(&self, call: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || call(&*store)).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
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

    pub async fn write(&self, batch: Vec<Write>) -> Result<(), StoreError> {
        self.run(move |s| s.write(batch)).await
    }

    pub async fn create_task(
        &self,
        kind: TaskKind,
        deployment: Option<&str>,
        lock: Option<&str>,
    ) -> Result<Result<Task, u64>, StoreError> {
        let deployment = deployment.map(str::to_string);
        let lock = lock.map(str::to_string);
        self.run(move |s| s.create_task(kind, deployment.as_deref(), lock.as_deref()))
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

    pub async fn release_ip(
        &self,
        address: u32,
        network: &str,
        owner: &IpHolder,
    ) -> Result<(), StoreError> {
        let network = network.to_string();
        let owner = owner.clone();
        self.run(move |s| s.release_ip(address, &network, &owner))
            .await
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
