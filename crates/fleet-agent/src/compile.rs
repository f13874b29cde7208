//! Compiling a package on the agent's VM (`compile_package`): its sources and its
//! dependencies' compilations from the blobstore, its packaging script run as BOSH's
//! agent runs it, the compiled package put back in the blobstore for the client to get.

use fleet_vm::compile::{self, CompileRequest};
use serde_json::{Value, json};

use super::actions::{Arguments, VmAgent};
use super::error::ActionError;
use super::protocol::PackageRef;

impl VmAgent {
    /// `compile_package(blobstore_id, sha1, name, version, dependencies)`: the sources and
    /// the compiled dependencies from the blobstore; the compiled package back into it.
    pub(crate) async fn compile(&self, arguments: &[Value]) -> Result<Value, ActionError> {
        let args = Arguments(arguments);
        let (id, digest) = (args.string(0, "blobstore_id")?, args.string(1, "sha1")?);
        let (name, version) = (args.string(2, "name")?, args.string(3, "version")?);
        let deps: std::collections::BTreeMap<String, PackageRef> = match arguments.get(4) {
            None | Some(Value::Null) => Default::default(),
            Some(_) => args.value(4, "dependencies")?,
        };
        let source = self.blobs.fetch_off_runtime(&id, &digest).await?;
        let mut dependencies = Vec::new();
        for (dep, reference) in &deps {
            let bytes = self
                .blobs
                .fetch_off_runtime(&reference.blobstore_id, &reference.sha1)
                .await?;
            dependencies.push((dep.clone(), bytes));
        }
        let (compiled, _) = compile::compile(
            &self.vm,
            CompileRequest {
                name: &name,
                version: &version,
                source: &source,
                dependencies,
                env: Vec::new(),
            },
        )
        .await
        .map_err(|source| ActionError::Compile {
            package: name.clone(),
            source: Box::new(source),
        })?;
        let (blob, sha1) = self
            .blobs
            .create_off_runtime(compiled)
            .await
            .map_err(ActionError::io("keep the compiled package"))?;
        Ok(json!({"result": {"blobstore_id": blob, "sha1": sha1}}))
    }
}
