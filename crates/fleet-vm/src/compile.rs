//! Compiling a package on a compilation VM as BOSH's agent does: its compiled
//! dependencies placed under `packages/`, its sources unpacked into `data/compile/NAME`,
//! its `packaging` script run there with `BOSH_COMPILE_TARGET`, `BOSH_INSTALL_TARGET`,
//! `BOSH_PACKAGE_NAME` and `BOSH_PACKAGE_VERSION`, and what it installed archived.

mod inside;

use std::path::PathBuf;

use super::sandbox::Sandbox;
use super::script::{self, Script, ScriptRun};

/// Compiled packages and sources are bounded only to refuse an archive that inflates
/// without end.
const MAX_UNPACKED: u64 = 16 * 1024 * 1024 * 1024;

pub struct CompileRequest<'a> {
    pub name: &'a str,
    pub version: &'a str,
    /// The package's source archive, as the release brought it.
    pub source: &'a [u8],
    /// Each dependency's name and compiled archive.
    pub dependencies: Vec<(String, Vec<u8>)>,
    /// What the packaging script's environment has beyond BOSH's variables: the bosh
    /// CLI compiles a CPI's packages in its user's environment, and `create-env` names
    /// this program there too.
    pub env: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The packaging script failed: its exit and output tail.
    #[error("{}: {}", run.describe(), run.tail)]
    Packaging { run: Box<ScriptRun> },
    #[error("package {package}: {what}: {source}")]
    Unpack {
        package: String,
        what: String,
        #[source]
        source: fleet_release::ArchiveError,
    },
    #[error("package {package}: {source}")]
    Io {
        package: String,
        #[source]
        source: std::io::Error,
    },
    #[error("package {package}: the compiled files cannot be packed: {source}")]
    Pack {
        package: String,
        #[source]
        source: fleet_release::ArchiveError,
    },
    #[error("package {package}: compiling was interrupted")]
    Interrupted { package: String },
}

/// Compiles the package; its compiled archive and the packaging script's run. On a
/// container VM everything happens inside it: the archives are handed to it and
/// unpacked there, and what the script installed is packed there, so that no file the
/// script could have linked anywhere is followed on this machine.
///
/// # Errors
/// A failing `packaging` script (with its output's tail) or an archive that cannot be
/// unpacked.
pub async fn compile(
    vm: &Sandbox,
    request: CompileRequest<'_>,
) -> Result<(Vec<u8>, ScriptRun), CompileError> {
    let name = request.name.to_string();
    let io = |source| CompileError::Io {
        package: name.clone(),
        source,
    };
    let compile_dir = vm.root().join("data/compile").join(request.name);
    let install = vm.packages().join(request.name);
    let enter = vm.enter().map_err(io)?;
    match (&enter, vm.inbox()) {
        (Some(enter), Some(inbox)) => {
            inside::prepare(enter, &inbox, &request, &compile_dir, &install).await?
        }
        _ => prepare_here(vm, &request, &compile_dir, &install).await?,
    }
    let run = script::run(&Script {
        job: request.name.to_string(),
        name: "packaging".into(),
        path: PathBuf::from("/bin/bash"),
        args: vec!["-e".into(), "-x".into(), "packaging".into()],
        env: vec![
            (
                "BOSH_COMPILE_TARGET".into(),
                compile_dir.display().to_string(),
            ),
            ("BOSH_INSTALL_TARGET".into(), install.display().to_string()),
            ("BOSH_PACKAGE_NAME".into(), request.name.to_string()),
            ("BOSH_PACKAGE_VERSION".into(), request.version.to_string()),
        ]
        .into_iter()
        .chain(request.env.iter().cloned())
        .collect(),
        timeout: None,
        log_dir: vm.root().join("sys/log/compile"),
        cwd: Some(compile_dir),
        enter: enter.clone(),
    })
    .await
    .map_err(io)?;
    if !run.succeeded() {
        return Err(CompileError::Packaging { run: Box::new(run) });
    }
    let compiled = match &enter {
        Some(enter) => inside::pack(enter, &install).await?,
        None => tokio::task::spawn_blocking(move || fleet_release::pack(&install))
            .await
            .map_err(|_| CompileError::Interrupted {
                package: name.clone(),
            })?
            .map_err(|source| CompileError::Pack {
                package: name.clone(),
                source,
            })?,
    };
    Ok((compiled, run))
}

/// The dependencies and sources unpacked in a VM that shares this machine's root.
async fn prepare_here(
    vm: &Sandbox,
    request: &CompileRequest<'_>,
    compile_dir: &std::path::Path,
    install: &std::path::Path,
) -> Result<(), CompileError> {
    let (source, dependencies) = (request.source.to_vec(), request.dependencies.clone());
    let (dir, target, packages) = (
        compile_dir.to_path_buf(),
        install.to_path_buf(),
        vm.packages(),
    );
    let package = request.name.to_string();
    tokio::task::spawn_blocking(move || -> Result<(), CompileError> {
        for (dep, archive) in &dependencies {
            let at = packages.join(dep);
            let _ = std::fs::remove_dir_all(&at);
            fleet_release::unpack(archive, &at, MAX_UNPACKED).map_err(|source| {
                CompileError::Unpack {
                    package: package.clone(),
                    what: format!("dependency {dep}"),
                    source,
                }
            })?;
        }
        for fresh in [&dir, &target] {
            let _ = std::fs::remove_dir_all(fresh);
            std::fs::create_dir_all(fresh).map_err(|source| CompileError::Io {
                package: package.clone(),
                source,
            })?;
        }
        fleet_release::unpack(&source, &dir, MAX_UNPACKED).map_err(|source| CompileError::Unpack {
            package: package.clone(),
            what: "sources".into(),
            source,
        })
    })
    .await
    .map_err(|_| CompileError::Interrupted {
        package: request.name.to_string(),
    })?
}
