//! The embedded fleet's instances' addresses, from its director's records: each VM's
//! addresses as it was created with them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use fleet_broker::Broker;
use fleet_rollout::check::AddressBook;
use fleet_rollout::inventory::Instance;

pub struct Addresses(pub Arc<Broker>);

impl AddressBook for Addresses {
    fn addresses(
        &self,
        instance: Instance,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<String>, String>> + Send>> {
        let broker = Arc::clone(&self.0);
        Box::pin(async move {
            let deployment = instance
                .deployment_name
                .ok_or_else(|| format!("{} has no deployment", instance.id))?;
            let records = broker
                .director()
                .instances(&deployment)
                .await
                .map_err(|e| e.to_string())?;
            Ok(records
                .iter()
                .flat_map(|r| &r.vm_networks)
                .filter_map(|n| n.split_once('/').map(|(_, ip)| ip.to_string()))
                .collect())
        })
    }
}
