//! The broker's own records: its service instances. The broker reaches the store through
//! this alone; deployments and tasks are the director's, read through its facade.

use serde::{Deserialize, Serialize};

/// The broker's service instances.
pub const SERVICE_INSTANCES: Collection = Collection::new("service_instances");

use fleet_store::{AsyncStore, Collection, StoreError, put};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceInstance {
    pub id: String,
    pub plan_id: String,
    pub space_guid: Option<String>,
    pub maintenance_updates_blocked: bool,
    /// Where the platform keeps it; kept from before placements were recorded, none.
    #[serde(default)]
    pub placement: Placement,
}

impl ServiceInstance {
    /// A service instance as provisioning records it: the owner's block and placement.
    pub fn new(id: &str, plan_id: &str, blocked: bool, placement: &Placement) -> Self {
        ServiceInstance {
            id: id.to_string(),
            plan_id: plan_id.to_string(),
            space_guid: None,
            maintenance_updates_blocked: blocked,
            placement: placement.clone(),
        }
    }
}

/// The organization and space a service instance belongs to, by name: what listings
/// filtered by `cf_org` and `cf_space` match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_name: Option<String>,
}

#[derive(Clone)]
pub struct ServiceInstances {
    store: AsyncStore,
}

impl ServiceInstances {
    pub fn new(store: AsyncStore) -> Self {
        ServiceInstances { store }
    }

    pub async fn get(&self, id: &str) -> Result<Option<ServiceInstance>, StoreError> {
        self.store.get(SERVICE_INSTANCES, id).await
    }

    /// Every service instance, in id order.
    pub async fn all(&self) -> Result<Vec<ServiceInstance>, StoreError> {
        self.store.list(SERVICE_INSTANCES, None).await
    }

    /// Records a new instance unless one has its id (another process may create it at
    /// the same time): whether it did.
    pub async fn create(&self, instance: &ServiceInstance) -> Result<bool, StoreError> {
        self.store
            .insert(SERVICE_INSTANCES, &instance.id, &instance.plan_id, instance)
            .await
    }

    pub async fn put(&self, instance: &ServiceInstance) -> Result<(), StoreError> {
        let write = put(SERVICE_INSTANCES, &instance.id, &instance.plan_id, instance);
        self.store.write(vec![write]).await
    }

    /// The store these records live in, for a second broker over the same fleet.
    #[cfg(test)]
    pub(crate) fn store(&self) -> &AsyncStore {
        &self.store
    }
}
