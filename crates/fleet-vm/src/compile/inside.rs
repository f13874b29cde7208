//! Compiling on a container VM: the package's sources and its compiled dependencies are
//! handed to the VM through its inbox (which only this machine's side writes) and
//! unpacked by `tar` inside the VM, and what the packaging script installed is packed
//! by `tar` inside the VM too. This machine's side reads and writes no file the script
//! could have replaced with a link.

use std::path::Path;

use super::{CompileError, CompileRequest, MAX_UNPACKED};
use crate::container::{Enter, INBOX};

/// Runs `script` (with its arguments) under `/bin/sh` in the VM; its standard output.
async fn sh(
    enter: &Enter,
    package: &str,
    what: &str,
    script: &str,
    args: &[&Path],
) -> Result<Vec<u8>, CompileError> {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    enter
        .sh(script, &args)
        .await
        .map_err(|message| CompileError::Io {
            package: package.to_string(),
            source: std::io::Error::other(format!("{what} in the VM failed ({message})")),
        })
}

/// Empties `dir` in the VM and unpacks the archive `archive` there.
const UNPACK: &str = "rm -rf \"$1\" && mkdir -p \"$1\" && tar --no-same-owner -xf \"$2\" -C \"$1\"";

/// Hands the archives to the VM and unpacks them where BOSH's agent does.
pub(super) async fn prepare(
    enter: &Enter,
    inbox: &Path,
    request: &CompileRequest<'_>,
    compile_dir: &Path,
    install: &Path,
) -> Result<(), CompileError> {
    let package = request.name;
    let io = |source| CompileError::Io {
        package: package.to_string(),
        source,
    };
    let mut handed = vec![("source".to_string(), request.source.to_vec())];
    for (dep, archive) in &request.dependencies {
        handed.push((format!("dependency-{dep}"), archive.clone()));
    }
    let at = inbox.to_path_buf();
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        // Emptied, not made anew: the VM sees this very directory.
        for entry in std::fs::read_dir(&at)?.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        for (name, bytes) in handed {
            std::fs::write(at.join(format!("{name}.tgz")), bytes)?;
        }
        Ok(())
    })
    .await
    .map_err(|e| io(std::io::Error::other(e)))?
    .map_err(io)?;
    let inbox = Path::new(INBOX);
    for (dep, _) in &request.dependencies {
        let target = enter.inside(&packages_dir(install).join(dep));
        sh(
            enter,
            package,
            &format!("unpacking dependency {dep}"),
            UNPACK,
            &[&target, &inbox.join(format!("dependency-{dep}.tgz"))],
        )
        .await?;
    }
    sh(
        enter,
        package,
        "making the install target",
        "rm -rf \"$1\" && mkdir -p \"$1\"",
        &[&enter.inside(install)],
    )
    .await?;
    sh(
        enter,
        package,
        "unpacking the sources",
        UNPACK,
        &[&enter.inside(compile_dir), &inbox.join("source.tgz")],
    )
    .await?;
    Ok(())
}

/// Where the packages are: the install target's directory.
fn packages_dir(install: &Path) -> std::path::PathBuf {
    install
        .parent()
        .map_or_else(|| install.to_path_buf(), Path::to_path_buf)
}

/// What the packaging script installed, packed in the VM.
pub(super) async fn pack(enter: &Enter, install: &Path) -> Result<Vec<u8>, CompileError> {
    let package = install
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let packed = sh(
        enter,
        &package,
        "packing what was installed",
        "cd \"$1\" && tar -czf - --sort=name .",
        &[&enter.inside(install)],
    )
    .await?;
    if packed.len() as u64 > MAX_UNPACKED {
        return Err(CompileError::Io {
            package,
            source: std::io::Error::other(format!(
                "what was installed packs to more than {MAX_UNPACKED} bytes"
            )),
        });
    }
    Ok(packed)
}
