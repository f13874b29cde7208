//! The canary checks the configuration names (`canary_check`): a command run by the
//! updater with the instance in its environment, or a smoke-test errand on the instance's
//! deployment through the director (the embedded fleet's, or a director inventory's).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use std::sync::Arc;

use fleet_rollout::check::{AddressBook, CanaryCheck, CheckResult, overdue, tail};
use fleet_rollout::inventory::Instance;

use crate::config::{CanaryCheckConfig, CanaryCheckKind};

/// The check `config` names, built from what the inventory offers: the addresses it knows
/// (for a command) and an errand check it can run (`errand`, given the errand's name and
/// time limit). The configuration made sure an errand check has a director to run on.
pub fn from_config(
    config: Option<&CanaryCheckConfig>,
    addresses: Option<Arc<dyn AddressBook>>,
    errand: impl FnOnce(&str, Duration) -> Option<Arc<dyn CanaryCheck>>,
) -> Option<Arc<dyn CanaryCheck>> {
    let config = config?;
    match &config.kind {
        CanaryCheckKind::Command { program, args } => Some(Arc::new(CommandCheck {
            program: program.clone(),
            args: args.clone(),
            time_limit: config.timeout,
            addresses,
        })),
        CanaryCheckKind::Errand(name) => errand(name, config.timeout),
    }
}

/// A program run with the instance in its environment: `FLEET_INSTANCE_ID`,
/// `FLEET_PLAN_ID`, `FLEET_DEPLOYMENT`, `FLEET_ORG`, `FLEET_SPACE`, and `FLEET_ADDRESSES`
/// (its VMs' addresses, space-separated, where the inventory knows them); empty when
/// unknown. Exit code 0 passes.
pub struct CommandCheck {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub time_limit: Duration,
    pub addresses: Option<Arc<dyn AddressBook>>,
}

impl CanaryCheck for CommandCheck {
    fn check(
        &self,
        instance: Instance,
        deadline: tokio::time::Instant,
    ) -> Pin<Box<dyn Future<Output = CheckResult> + Send>> {
        let mut command = tokio::process::Command::new(&self.program);
        let context = instance.context.clone().unwrap_or_default();
        command
            .args(&self.args)
            .env("FLEET_INSTANCE_ID", &instance.id.0)
            .env("FLEET_PLAN_ID", &instance.plan_id)
            .env(
                "FLEET_DEPLOYMENT",
                instance.deployment_name.clone().unwrap_or_default(),
            )
            .env(
                "FLEET_ORG",
                context
                    .organization_name
                    .or(context.organization_guid)
                    .unwrap_or_default(),
            )
            .env(
                "FLEET_SPACE",
                context
                    .space_name
                    .or(context.space_guid)
                    .or(instance.space_guid.clone())
                    .unwrap_or_default(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Killed when its check is past its time limit.
            .kill_on_drop(true);
        let program = self.program.display().to_string();
        let (what, limit) = (self.describe(), self.time_limit);
        let book = self.addresses.clone();
        Box::pin(async move {
            let addresses = match book {
                Some(book) => book
                    .addresses(instance)
                    .await
                    .map_err(|e| format!("the instance's addresses could not be read: {e}"))?,
                None => Vec::new(),
            };
            command.env("FLEET_ADDRESSES", addresses.join(" "));
            let output = tokio::time::timeout_at(deadline, command.output())
                .await
                .map_err(|_| overdue(&what, limit))?
                .map_err(|e| format!("{program} could not be run: {e}"))?;
            let mut said = String::from_utf8_lossy(&output.stdout).into_owned();
            said.push('\n');
            said.push_str(&String::from_utf8_lossy(&output.stderr));
            let code = output.status.code().map_or_else(
                || "killed by a signal".to_string(),
                |c| format!("exit code {c}"),
            );
            let said = format!("{code}: {}", tail(&said));
            if output.status.success() {
                Ok(said)
            } else {
                Err(said)
            }
        })
    }

    fn time_limit(&self) -> Duration {
        self.time_limit
    }

    fn describe(&self) -> String {
        format!("command {}", self.program.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(600)
    }

    #[tokio::test]
    async fn a_command_past_its_deadline_is_killed_and_the_check_is_overdue() {
        let dir = tempfile::tempdir().unwrap();
        let (script, pid) = (dir.path().join("slow"), dir.path().join("pid"));
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho $$ > {}\nexec sleep 600\n", pid.display()),
        )
        .unwrap();
        // Read by the shell rather than executed: a file written a moment ago may be held
        // open by a process another test forks meanwhile (ETXTBSY).
        let check = CommandCheck {
            program: PathBuf::from("/bin/sh"),
            args: vec![script.display().to_string()],
            time_limit: Duration::from_millis(300),
            addresses: None,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
        let said = check
            .check(Instance::new("pg-01", "small"), deadline)
            .await
            .unwrap_err();
        assert!(said.ends_with("did not finish within 300ms"), "{said}");
        let pid: i32 = std::fs::read_to_string(&pid)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed and reaped once its check gave up (tokio reaps a dropped child).
        let mut gone = false;
        for _ in 0..100 {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if state.is_empty() || state.contains(") Z ") {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gone, "the check's process {pid} still runs");
    }

    #[tokio::test]
    async fn a_command_sees_the_instance_and_its_exit_code_decides() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("smoke");
        std::fs::write(
            &script,
            "#!/bin/sh\necho \"checking $FLEET_INSTANCE_ID on $FLEET_PLAN_ID in $FLEET_DEPLOYMENT at $FLEET_ADDRESSES\"\necho oops >&2\n[ \"$1\" = pass ]\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut instance = Instance::new("pg-01", "small");
        instance.deployment_name = Some("service-instance_pg-01".into());
        struct Book;
        impl AddressBook for Book {
            fn addresses(
                &self,
                _: Instance,
            ) -> Pin<Box<dyn Future<Output = Result<Vec<String>, String>> + Send>> {
                Box::pin(async { Ok(vec!["10.0.0.5".to_string(), "10.0.0.6".to_string()]) })
            }
        }
        let check = |arg: &str| CommandCheck {
            program: script.clone(),
            args: vec![arg.to_string()],
            time_limit: Duration::from_secs(10),
            addresses: Some(Arc::new(Book)),
        };
        assert_eq!(
            check("pass").check(instance.clone(), far()).await,
            Ok(
                "exit code 0: checking pg-01 on small in service-instance_pg-01 at 10.0.0.5 \
                 10.0.0.6 | oops"
                    .into()
            )
        );
        assert_eq!(
            check("fail").check(instance.clone(), far()).await,
            Err(
                "exit code 1: checking pg-01 on small in service-instance_pg-01 at 10.0.0.5 \
                 10.0.0.6 | oops"
                    .into()
            )
        );
        let missing = CommandCheck {
            program: dir.path().join("nothing"),
            args: Vec::new(),
            time_limit: Duration::from_secs(10),
            addresses: None,
        };
        assert!(
            missing
                .check(instance, far())
                .await
                .unwrap_err()
                .contains("could not be run")
        );
        assert_eq!(
            tail(&(1..=30).map(|n| format!("{n}\n")).collect::<String>()),
            "21 | 22 | 23 | 24 | 25 | 26 | 27 | 28 | 29 | 30"
        );
    }
}
