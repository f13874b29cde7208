//! Cloud and runtime configs: uploads (a text that means the same as the one in force is no
//! new version) and what is in force.

use crate::DirectorError;
use crate::model::{CloudConfig, ConfigsInForce, NamedConfig};
use crate::records::change;
use crate::{cloud, resurrection, runtime};

use super::Director;

impl Director {
    /// Replaces the cloud config with a new version, unless it is the same text.
    /// Deployments made with an older version are then out of date.
    ///
    /// # Errors
    /// [`DirectorError::CloudConfig`] with every problem of an invalid one, which is not
    /// stored: the next deploy must not be the first to find it.
    pub async fn update_cloud_config(&self, text: &str) -> Result<u64, DirectorError> {
        cloud::parse(text, 0)?;
        let current = self.cloud_config().await?;
        // The same config written another way (as `bosh cloud-config` prints it) is no new
        // version: a new one would mark every deployment outdated.
        if let Some(current) = &current
            && same_document(&current.text, text)
        {
            return Ok(current.version);
        }
        let config = CloudConfig {
            version: self.next_config_version().await?,
            text: text.to_string(),
            created_at: Some(self.core.unix_now()),
        };
        self.records()
            .write(change::cloud_config(&config).into())
            .await?;
        Ok(config.version)
    }

    /// Config versions are numbered in one sequence over every kind of config, so that
    /// a version names one config (`bosh config ID`).
    async fn next_config_version(&self) -> Result<u64, DirectorError> {
        let cloud = self.records().cloud_configs().await?;
        let runtime = self.records().runtime_configs().await?;
        let resurrection = self.records().resurrection_configs().await?;
        let newest = cloud
            .iter()
            .map(|c| c.version)
            .chain(runtime.iter().map(|c| c.version))
            .chain(resurrection.iter().map(|c| c.version))
            .max()
            .unwrap_or(0);
        Ok(newest + 1)
    }

    /// Uploads runtime config `name`; checked first, every problem at once. The same
    /// config written another way makes no new version.
    ///
    /// # Errors
    /// [`DirectorError::RuntimeConfig`] naming every invalid key.
    pub async fn update_runtime_config(
        &self,
        name: &str,
        text: &str,
    ) -> Result<u64, DirectorError> {
        runtime::parse(text)?;
        let kept = self.records().runtime_configs().await?;
        self.keep_named(&kept, name, text, change::runtime_config)
            .await
    }

    /// Keeps `text` as the next version of named config `name`, among `kept` (every
    /// version of its kind), unless it means the same as that name's newest; the version
    /// in force either way.
    async fn keep_named(
        &self,
        kept: &[NamedConfig],
        name: &str,
        text: &str,
        write: fn(&NamedConfig) -> fleet_store::Write,
    ) -> Result<u64, DirectorError> {
        if let Some(current) = kept.iter().find(|c| c.name == name)
            && same_document(&current.text, text)
        {
            return Ok(current.version);
        }
        let config = NamedConfig {
            name: name.to_string(),
            version: self.next_config_version().await?,
            text: text.to_string(),
            created_at: Some(self.core.unix_now()),
        };
        self.records().write(vec![write(&config)]).await?;
        Ok(config.version)
    }

    /// Uploads resurrection config `name`, checked first (every invalid key at once); the
    /// same config written another way makes no new version. The health monitor reads
    /// the newest of each name at its next pass.
    ///
    /// # Errors
    /// [`DirectorError::ResurrectionConfig`] naming every invalid key.
    pub async fn update_resurrection_config(
        &self,
        name: &str,
        text: &str,
    ) -> Result<u64, DirectorError> {
        resurrection::parse(text)?;
        let kept = self.records().resurrection_configs().await?;
        self.keep_named(&kept, name, text, change::resurrection_config)
            .await
    }

    /// Every version of every resurrection config, newest first.
    pub async fn resurrection_configs(
        &self,
    ) -> Result<Vec<resurrection::ResurrectionConfig>, DirectorError> {
        Ok(self.records().resurrection_configs().await?)
    }

    /// The rules of the newest version of each resurrection config.
    ///
    /// # Errors
    /// [`DirectorError::ResurrectionConfig`] for a stored config that is not valid.
    pub async fn resurrection_rules(
        &self,
    ) -> Result<resurrection::ResurrectionRules, DirectorError> {
        let all = self.records().resurrection_configs().await?;
        let mut names = std::collections::BTreeSet::new();
        let newest = all.iter().filter(|c| names.insert(c.name.as_str()));
        Ok(resurrection::ResurrectionRules::of(
            newest.map(|c| c.text.as_str()),
        )?)
    }

    /// Pauses or resumes resurrection for the whole director (`bosh update-resurrection
    /// off|on`).
    pub async fn set_resurrection_paused(&self, paused: bool) -> Result<(), DirectorError> {
        self.records()
            .write(vec![change::resurrection_paused(paused)])
            .await?;
        Ok(())
    }

    pub async fn resurrection_paused(&self) -> Result<bool, DirectorError> {
        Ok(self.records().resurrection_paused().await?)
    }

    /// Every version of every runtime config, newest first.
    pub async fn runtime_configs(&self) -> Result<Vec<runtime::RuntimeConfig>, DirectorError> {
        Ok(self.records().runtime_configs().await?)
    }

    /// Every cloud config uploaded, newest first.
    pub async fn cloud_configs(&self) -> Result<Vec<CloudConfig>, DirectorError> {
        Ok(self.records().cloud_configs().await?)
    }

    pub async fn cloud_config(&self) -> Result<Option<CloudConfig>, DirectorError> {
        Ok(self.records().cloud_config().await?)
    }

    /// The cloud and runtime configs a deploy would apply now, by version.
    pub async fn configs_in_force(&self) -> Result<ConfigsInForce, DirectorError> {
        Ok(self.records().configs_in_force().await?)
    }
}

/// Whether two YAML texts mean the same to the director; text that is not YAML is compared
/// as it is.
fn same_document(a: &str, b: &str) -> bool {
    let read = |text: &str| fleet_yaml::load_as_director(text, fleet_yaml::Limits::default());
    match (read(a), read(b)) {
        (Ok(a), Ok(b)) => fleet_yaml::same(&a, &b),
        _ => a == b,
    }
}
