//! Each CPI method with its arguments in the protocol's order and its result's type.

use serde_json::{Map, Value, json};

use super::client::ExternalCpi;
use super::error::CpiCallError;

/// What `info` tells of a CPI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpiInfo {
    pub stemcell_formats: Vec<String>,
    pub api_version: u32,
}

/// A VM `create_vm` made: its CID, and (API version 2) the networks as the IaaS set them.
#[derive(Debug, Clone, PartialEq)]
pub struct CreatedVm {
    pub cid: String,
    pub networks: Option<Value>,
}

fn unexpected(method: &str, result: &Value) -> CpiCallError {
    CpiCallError::UnexpectedResult {
        method: method.to_string(),
        result: result.to_string(),
    }
}

fn string_result(method: &str, result: &Value) -> Result<String, CpiCallError> {
    result
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| unexpected(method, result))
}

fn bool_result(method: &str, result: &Value) -> Result<bool, CpiCallError> {
    result.as_bool().ok_or_else(|| unexpected(method, result))
}

impl ExternalCpi {
    /// # Errors
    /// As [`ExternalCpi::call`], or a result that is not what `info` answers.
    pub async fn info(&self) -> Result<CpiInfo, CpiCallError> {
        let answer = self.call_as("info", Vec::new(), 1).await?;
        self.remember_api_version(&answer.result);
        let formats = answer
            .result
            .get("stemcell_formats")
            .and_then(Value::as_array)
            .ok_or_else(|| unexpected("info", &answer.result))?;
        Ok(CpiInfo {
            stemcell_formats: formats
                .iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect(),
            api_version: answer
                .result
                .get("api_version")
                .and_then(Value::as_u64)
                .map_or(1, |v| v as u32),
        })
    }

    /// # Errors
    /// As [`ExternalCpi::call`]; a result that is not a CID.
    pub async fn create_stemcell(
        &self,
        image_path: &str,
        cloud_properties: &Map<String, Value>,
    ) -> Result<String, CpiCallError> {
        let method = "create_stemcell";
        let args = vec![json!(image_path), Value::Object(cloud_properties.clone())];
        string_result(method, &self.call(method, args).await?.result)
    }

    /// # Errors
    /// As [`ExternalCpi::call`].
    pub async fn delete_stemcell(&self, cid: &str) -> Result<(), CpiCallError> {
        self.call("delete_stemcell", vec![json!(cid)])
            .await
            .map(|_| ())
    }

    /// # Errors
    /// As [`ExternalCpi::call`]; a result that is neither a CID nor `[CID, networks]`.
    pub async fn create_vm(
        &self,
        agent_id: &str,
        stemcell_cid: &str,
        cloud_properties: &Value,
        networks: &Value,
        disk_cids: &[String],
        env: &Value,
    ) -> Result<CreatedVm, CpiCallError> {
        let method = "create_vm";
        let args = vec![
            json!(agent_id),
            json!(stemcell_cid),
            cloud_properties.clone(),
            networks.clone(),
            json!(disk_cids),
            env.clone(),
        ];
        let result = self.call(method, args).await?.result;
        match &result {
            Value::String(cid) => Ok(CreatedVm {
                cid: cid.clone(),
                networks: None,
            }),
            Value::Array(parts) => match parts.as_slice() {
                [Value::String(cid), networks, ..] => Ok(CreatedVm {
                    cid: cid.clone(),
                    networks: Some(networks.clone()),
                }),
                [Value::String(cid)] => Ok(CreatedVm {
                    cid: cid.clone(),
                    networks: None,
                }),
                _ => Err(unexpected(method, &result)),
            },
            _ => Err(unexpected(method, &result)),
        }
    }

    /// # Errors
    /// As [`ExternalCpi::call`].
    pub async fn delete_vm(&self, cid: &str) -> Result<(), CpiCallError> {
        self.call("delete_vm", vec![json!(cid)]).await.map(|_| ())
    }

    /// # Errors
    /// As [`ExternalCpi::call`]; a result that is not a boolean.
    pub async fn has_vm(&self, cid: &str) -> Result<bool, CpiCallError> {
        let method = "has_vm";
        bool_result(method, &self.call(method, vec![json!(cid)]).await?.result)
    }

    /// # Errors
    /// As [`ExternalCpi::call`].
    pub async fn reboot_vm(&self, cid: &str) -> Result<(), CpiCallError> {
        self.call("reboot_vm", vec![json!(cid)]).await.map(|_| ())
    }

    /// # Errors
    /// As [`ExternalCpi::call`].
    pub async fn set_vm_metadata(
        &self,
        cid: &str,
        metadata: &Map<String, Value>,
    ) -> Result<(), CpiCallError> {
        let args = vec![json!(cid), Value::Object(metadata.clone())];
        self.call("set_vm_metadata", args).await.map(|_| ())
    }

    /// # Errors
    /// As [`ExternalCpi::call`]; a result that is not a CID.
    pub async fn create_disk(
        &self,
        size_mib: u64,
        cloud_properties: &Value,
        vm_cid: Option<&str>,
    ) -> Result<String, CpiCallError> {
        let method = "create_disk";
        let args = vec![json!(size_mib), cloud_properties.clone(), json!(vm_cid)];
        string_result(method, &self.call(method, args).await?.result)
    }

    /// # Errors
    /// As [`ExternalCpi::call`].
    pub async fn delete_disk(&self, cid: &str) -> Result<(), CpiCallError> {
        self.call("delete_disk", vec![json!(cid)]).await.map(|_| ())
    }

    /// The disk hint a CPI of API version 2 answers (where the agent finds the disk).
    ///
    /// # Errors
    /// As [`ExternalCpi::call`].
    pub async fn attach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<Value, CpiCallError> {
        let args = vec![json!(vm_cid), json!(disk_cid)];
        Ok(self.call("attach_disk", args).await?.result)
    }

    /// # Errors
    /// As [`ExternalCpi::call`].
    pub async fn detach_disk(&self, vm_cid: &str, disk_cid: &str) -> Result<(), CpiCallError> {
        let args = vec![json!(vm_cid), json!(disk_cid)];
        self.call("detach_disk", args).await.map(|_| ())
    }

    /// # Errors
    /// As [`ExternalCpi::call`]; a result that is not a boolean.
    pub async fn has_disk(&self, cid: &str) -> Result<bool, CpiCallError> {
        let method = "has_disk";
        bool_result(method, &self.call(method, vec![json!(cid)]).await?.result)
    }

    /// # Errors
    /// As [`ExternalCpi::call`]; a result that is not a snapshot's CID.
    pub async fn snapshot_disk(
        &self,
        disk_cid: &str,
        metadata: &Map<String, Value>,
    ) -> Result<String, CpiCallError> {
        let method = "snapshot_disk";
        let args = vec![json!(disk_cid), Value::Object(metadata.clone())];
        string_result(method, &self.call(method, args).await?.result)
    }

    /// # Errors
    /// As [`ExternalCpi::call`].
    pub async fn delete_snapshot(&self, cid: &str) -> Result<(), CpiCallError> {
        self.call("delete_snapshot", vec![json!(cid)])
            .await
            .map(|_| ())
    }

    /// # Errors
    /// As [`ExternalCpi::call`].
    pub async fn resize_disk(&self, cid: &str, size_mib: u64) -> Result<(), CpiCallError> {
        self.call("resize_disk", vec![json!(cid), json!(size_mib)])
            .await
            .map(|_| ())
    }
}
