//! The links API's side of the facade: a deployment's providers and consumers as its last
//! deploy resolved them, the links between them, and the external links a client makes to
//! a shared provider to learn its DNS address (the ODB's `binding_with_dns`).

use crate::DirectorError;
use crate::ids::new_id;
use crate::links::{LinkError, provider_id};
use crate::model::{Consumer, DeploymentRecord, ExternalLink, Provider};
use crate::records::change;

use super::Director;

/// A link as `GET /links` lists it: a consumer joined to its provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkView {
    pub id: String,
    pub name: String,
    pub consumer_id: String,
    pub provider_id: String,
    pub created_at: u64,
}

/// A consumer's id in the API.
pub fn consumer_id(deployment: &str, c: &Consumer) -> String {
    format!("{deployment}:{}:{}:{}", c.group, c.job, c.name)
}

impl Director {
    async fn linked_deployment(&self, deployment: &str) -> Result<DeploymentRecord, DirectorError> {
        if deployment.is_empty() {
            return Err(LinkError::DeploymentRequired.into());
        }
        self.records()
            .deployment(deployment)
            .await?
            .ok_or_else(|| DirectorError::NotFound {
                what: format!("deployment `{deployment}`"),
            })
    }

    /// The deployment's providers, each with its id.
    ///
    /// # Errors
    /// No deployment named, an unknown one, or a store failure.
    pub async fn link_providers(
        &self,
        deployment: &str,
    ) -> Result<Vec<(String, Provider)>, DirectorError> {
        let record = self.linked_deployment(deployment).await?;
        Ok(record
            .providers
            .into_iter()
            .map(|p| (provider_id(&p), p))
            .collect())
    }

    /// The deployment's consumers, each with its id.
    ///
    /// # Errors
    /// As [`Director::link_providers`].
    pub async fn link_consumers(
        &self,
        deployment: &str,
    ) -> Result<Vec<(String, Consumer)>, DirectorError> {
        let record = self.linked_deployment(deployment).await?;
        Ok(record
            .consumers
            .iter()
            .map(|c| (consumer_id(deployment, c), c.clone()))
            .collect())
    }

    /// The links of the deployment's consumers, to the providers its last deploy linked
    /// them to, and the external links to its providers.
    ///
    /// # Errors
    /// As [`Director::link_providers`].
    pub async fn links(&self, deployment: &str) -> Result<Vec<LinkView>, DirectorError> {
        let record = self.linked_deployment(deployment).await?;
        let mut links = Vec::new();
        for consumer in &record.consumers {
            if let Some(provider) = &consumer.provider {
                let id = consumer_id(deployment, consumer);
                links.push(LinkView {
                    name: consumer.name.clone(),
                    consumer_id: id.clone(),
                    id,
                    provider_id: provider.clone(),
                    created_at: 0,
                });
            }
        }
        for external in self.records().external_links(deployment).await? {
            links.push(LinkView {
                name: external.owner.clone(),
                consumer_id: format!("external:{}", external.owner),
                provider_id: external.provider_id,
                id: external.id,
                created_at: external.created_at,
            });
        }
        Ok(links)
    }

    async fn provider(&self, id: &str) -> Result<Provider, DirectorError> {
        let deployment = id.split(':').next().unwrap_or_default();
        let record = self.records().deployment(deployment).await?;
        record
            .into_iter()
            .flat_map(|r| r.providers)
            .find(|p| provider_id(p) == id)
            .ok_or_else(|| LinkError::UnknownProvider(id.to_string()).into())
    }

    /// Links an external consumer (`owner`) to the shared provider `provider_id`.
    ///
    /// # Errors
    /// An unknown provider, one that is not shared, a network it is not on.
    pub async fn create_link(
        &self,
        provider_id: &str,
        owner: &str,
        network: Option<&str>,
    ) -> Result<ExternalLink, DirectorError> {
        if owner.is_empty() {
            return Err(LinkError::Invalid(
                "`link_consumer.owner_object.name` must not be empty".into(),
            )
            .into());
        }
        let provider = self.provider(provider_id).await?;
        if !provider.shared {
            return Err(LinkError::NotShared.into());
        }
        if let Some(network) = network.filter(|n| !provider.networks.iter().any(|p| p == n)) {
            return Err(LinkError::Network {
                network: network.to_string(),
                provider: provider_id.to_string(),
                name: provider.alias,
            }
            .into());
        }
        let link = ExternalLink {
            id: new_id("link"),
            deployment: provider.deployment,
            provider_id: provider_id.to_string(),
            owner: owner.to_string(),
            network: network.map(str::to_string),
            created_at: self.core.unix_now(),
        };
        self.records()
            .write(vec![change::external_link(&link)])
            .await?;
        Ok(link)
    }

    /// Deletes an external link.
    ///
    /// # Errors
    /// An unknown link, or one a deploy made (not external).
    pub async fn delete_link(&self, id: &str) -> Result<(), DirectorError> {
        if self.records().external_link(id).await?.is_none() {
            // A deploy's links are named `deployment:group:job:link`.
            return Err(if id.contains(':') {
                LinkError::NotExternal
            } else {
                LinkError::UnknownLink(id.to_string())
            }
            .into());
        }
        Ok(self
            .records()
            .write(vec![change::external_link_gone(id)])
            .await?)
    }

    /// The DNS query name a link's provider is reached at, for its instances in `azs`
    /// (all without any) with the health `status`, which must be one BOSH knows.
    ///
    /// # Errors
    /// No id, an unknown link, an unknown status.
    pub async fn link_address(
        &self,
        id: &str,
        azs: &[String],
        status: Option<&str>,
    ) -> Result<String, DirectorError> {
        if id.is_empty() {
            return Err(LinkError::LinkIdRequired.into());
        }
        if status.is_some_and(|s| !["healthy", "unhealthy", "all", "default"].contains(&s)) {
            return Err(LinkError::Status.into());
        }
        let (provider_id, network) = match self.records().external_link(id).await? {
            Some(link) => (link.provider_id, link.network),
            None => {
                // A deploy's link: its consumer's id.
                let deployment = id.split(':').next().unwrap_or_default();
                let known = self.links(deployment).await.ok().into_iter().flatten();
                let provider_id = known
                    .into_iter()
                    .find(|l| l.id == id)
                    .map(|l| l.provider_id)
                    .ok_or_else(|| DirectorError::NotFound {
                        what: format!("a link with id {id}"),
                    })?;
                (provider_id, None)
            }
        };
        let provider = self.provider(&provider_id).await?;
        let network = network.as_deref().unwrap_or(&provider.default_network);
        Ok(provider.address_on(network, azs, status))
    }
}
