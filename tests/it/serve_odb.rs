//! The On-Demand Service Broker on `serve`'s director: the requests its start-up checks,
//! provision with a post-deploy errand, last operation, bind, upgrade, recreate, `bosh
//! run-errand` and a deprovision with a pre-delete errand send (after its `boshdirector` package and the
//! `bosh` CLI's director client it vendors), replayed over HTTPS, and the answers decoded
//! into the CLI's types.

use fleet_updater::config::ServeLimits;
use reqwest::Method;
use serde_json::Value;

use crate::bosh_cli_types::{Errand, ErrandRunResp, InfoResp, TaskResp};
use crate::served::Served;

const D: &str = "service-instance_odb-1";

/// What the ODB's service adapter would generate for a plan with a `smoke-tests`
/// lifecycle errand; `version` is the postgres release's.
fn manifest(version: &str) -> String {
    format!(
        "name: {D}
releases: [{{name: postgres, version: '{version}'}}]
stemcells: [{{alias: default, os: ubuntu-jammy, version: '1.612'}}]
update: {{canaries: 1, max_in_flight: 1, canary_watch_time: 300-3000, update_watch_time: 300-3000}}
instance_groups:
- name: postgres
  instances: 1
  azs: [z1]
  jobs: [{{name: postgres, release: postgres, properties: {{port: 5432}}}}]
  vm_type: small
  stemcell: default
  persistent_disk: 1024
  networks: [{{name: default}}]
- name: smoke-tests
  lifecycle: errand
  instances: 1
  azs: [z1]
  jobs: [{{name: postgres, release: postgres}}]
  vm_type: small
  stemcell: default
  networks: [{{name: default}}]
"
    )
}

/// `GET /tasks?context_id=C`, as `FindTasksByContextId` asks it: newest first.
async fn in_context(s: &Served, context: &str) -> Vec<TaskResp> {
    let tasks = s.get_json(&format!("/tasks?context_id={context}")).await;
    serde_json::from_value(tasks).unwrap()
}

/// `deployment.RunErrand` with the ODB's arguments (`keep-alive` and `when-changed`
/// false, no instances), in `context`: the task's id.
async fn run_errand(s: &Served, context: &str, errand: &str) -> u64 {
    let response = s
        .director(
            Method::POST,
            &format!("/deployments/{D}/errands/{errand}/runs"),
        )
        .header("content-type", "application/json")
        .header("X-Bosh-Context-Id", context)
        .body(r#"{"instances":[],"keep-alive":false,"when-changed":false}"#)
        .send()
        .await
        .unwrap();
    Served::task_of(&response)
}

/// The errand results as `Client.RunErrand` decodes them: JSON values one after another.
async fn errand_results(s: &Served, id: u64) -> Vec<ErrandRunResp> {
    s.output(id, "result")
        .await
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_odb_provisions_binds_upgrades_recreates_runs_lifecycle_errands_and_deprovisions() {
    let s = Served::start(ServeLimits::default()).await;
    // Start-up: /info with the broker's credentials names that user, and the version
    // passes the checks for lifecycle errands (261+) and DNS bindings (266.12+).
    let info: InfoResp = serde_json::from_str(
        &s.director(Method::GET, "/info")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(info.user, "admin");
    let major: u64 = info.version.split('.').next().unwrap().parse().unwrap();
    assert!(major >= 267, "{}", info.version);

    // Provision: the deploy in a context, then last operation finds it by the context.
    let context = "0b6a4d9c-5b55-4f0e-9a61-4a8a0c6d2f10";
    let deploy = s
        .director(Method::POST, "/deployments")
        .header("content-type", "text/yaml")
        .header("X-Bosh-Context-Id", context)
        .body(manifest("15.8"))
        .send()
        .await
        .unwrap();
    let deploy_id = Served::task_of(&deploy);
    assert_eq!(s.wait_task(deploy_id).await["state"], "done");
    let found = in_context(&s, context).await;
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].id as u64, found[0].context_id.as_str()),
        (deploy_id, context)
    );
    assert_eq!(found[0].state, "done");

    // The post-deploy errand, started by the next last operation in the same context.
    let errands: Vec<Errand> =
        serde_json::from_value(s.get_json(&format!("/deployments/{D}/errands")).await).unwrap();
    let names: Vec<&str> = errands.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["smoke-tests"]);
    let errand_id = run_errand(&s, context, "smoke-tests").await;
    let task: TaskResp = serde_json::from_value(s.wait_task(errand_id).await).unwrap();
    assert_eq!(
        (task.state.as_str(), task.result.as_str()),
        ("done", "1 succeeded, 0 errored, 0 canceled")
    );
    let results = errand_results(&s, errand_id).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].instance.group, "smoke-tests");
    assert_eq!(results[0].exit_code, 0, "{:?}", results[0]);
    assert!(results[0].stdout.contains("ran on"), "{:?}", results[0]);
    let ids: Vec<u64> = in_context(&s, context)
        .await
        .iter()
        .map(|t| t.id as u64)
        .collect();
    assert_eq!(
        ids,
        [errand_id, deploy_id],
        "newest first: the errand is the last operation"
    );

    // Bind: the VMs with their addresses; the errand group, without a VM, is not listed.
    let vms = s.vm_infos(D, "vms").await;
    assert_eq!(vms.len(), 1);
    assert_eq!(vms[0].job_name, "postgres");
    assert!(!vms[0].ips.is_empty());

    // A binding with DNS asks for link providers: this deployment's jobs provide none; a
    // listing needs a deployment that exists.
    let links = s
        .send(Method::GET, &format!("/link_providers?deployment={D}"))
        .await;
    assert_eq!(links.status(), 200);
    assert_eq!(links.json::<Value>().await.unwrap(), serde_json::json!([]));
    let unnamed = s.send(Method::GET, "/link_providers").await;
    assert_eq!(unnamed.status(), 400);
    let refusal: Value = unnamed.json().await.unwrap();
    assert_eq!(refusal["code"], 190_024, "{refusal}");
    assert_eq!(refusal["description"], "Deployment name is required");
    let unknown = s
        .send(Method::GET, "/link_providers?deployment=nosuch")
        .await;
    assert_eq!(unknown.status(), 404);

    // Upgrade: the new manifest in a new context, then its post-deploy errand.
    let upgrade_context = "7c3e2b1a-0f9d-4e8c-b7a6-5d4c3b2a1f0e";
    let upgrade = s
        .director(Method::POST, "/deployments")
        .header("content-type", "text/yaml")
        .header("X-Bosh-Context-Id", upgrade_context)
        .body(manifest("16.4"))
        .send()
        .await
        .unwrap();
    let upgrade_id = Served::task_of(&upgrade);
    assert_eq!(s.wait_task(upgrade_id).await["state"], "done");
    let deployed = s.get_json(&format!("/deployments/{D}")).await;
    assert!(
        deployed["manifest"].as_str().unwrap().contains("'16.4'"),
        "{deployed}"
    );
    let upgrade_errand = run_errand(&s, upgrade_context, "smoke-tests").await;
    assert_eq!(s.wait_task(upgrade_errand).await["state"], "done");
    let ids: Vec<u64> = in_context(&s, upgrade_context)
        .await
        .iter()
        .map(|t| t.id as u64)
        .collect();
    assert_eq!(ids, [upgrade_errand, upgrade_id]);

    // Recreate, as `Recreate` asks it (fix and converge): an empty body in a context,
    // and the VM is a new one.
    let recreate_context = "2d4f6a8c-1e3b-4d5f-8a7c-9e0b1d2f3a4c";
    let recreate = s
        .director(
            Method::PUT,
            &format!("/deployments/{D}/jobs/*?state=recreate&fix=true"),
        )
        .header("content-type", "text/yaml")
        .header("X-Bosh-Context-Id", recreate_context)
        .send()
        .await
        .unwrap();
    assert_eq!(recreate.status(), 302);
    let recreate_id = Served::task_of(&recreate);
    assert_eq!(s.wait_task(recreate_id).await["state"], "done");
    let found = in_context(&s, recreate_context).await;
    assert_eq!(
        (found.len(), found[0].id as u64, found[0].state.as_str()),
        (1, recreate_id, "done")
    );
    let recreated = s.vm_infos(D, "vms").await;
    assert_eq!(recreated.len(), 1);
    assert_eq!(recreated[0].id, vms[0].id, "the same instance");
    assert_ne!(recreated[0].vm_id, vms[0].vm_id, "on a new VM");
    assert_eq!(recreated[0].ips, vms[0].ips, "at the same address");

    // A failed upgrade: the task's result carries the reason, in listings too.
    let failed = s
        .send_yaml(Method::POST, "/deployments", manifest("99.0"))
        .await;
    let failed = s.wait_task(Served::task_of(&failed)).await;
    assert_eq!(failed["state"], "error");
    let listed: Vec<TaskResp> =
        serde_json::from_value(s.get_json(&format!("/tasks?deployment={D}&limit=1")).await)
            .unwrap();
    assert!(
        listed[0].result.contains("releases.postgres") && listed[0].result.contains("99.0"),
        "{}",
        listed[0].result
    );

    // Deprovision: the pre-delete errand, then the delete, in a new context.
    let gone = "5f1e6c2a-9d0b-4c7e-8e21-1b2c3d4e5f60";
    let pre_delete = run_errand(&s, gone, "smoke-tests").await;
    assert_eq!(s.wait_task(pre_delete).await["state"], "done");
    let delete = s
        .director(Method::DELETE, &format!("/deployments/{D}"))
        .header("X-Bosh-Context-Id", gone)
        .send()
        .await
        .unwrap();
    let delete_id = Served::task_of(&delete);
    assert_eq!(s.wait_task(delete_id).await["state"], "done");
    let ids: Vec<u64> = in_context(&s, gone)
        .await
        .iter()
        .map(|t| t.id as u64)
        .collect();
    assert_eq!(ids, [delete_id, pre_delete]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bosh_run_errand_options_and_bad_bodies_follow_the_director() {
    let s = Served::start(ServeLimits::default()).await;
    let deploy = s
        .send_yaml(Method::POST, "/deployments", manifest("16.4"))
        .await;
    assert_eq!(s.wait_task(Served::task_of(&deploy)).await["state"], "done");
    // `bosh run-errand smoke-tests --keep-alive`: the VM stays for the next run.
    let kept = s
        .send_json(
            Method::POST,
            &format!("/deployments/{D}/errands/smoke-tests/runs"),
            r#"{"keep-alive":true,"when-changed":true,"instances":[]}"#,
        )
        .await;
    let id = Served::task_of(&kept);
    assert_eq!(s.wait_task(id).await["state"], "done");
    let results = errand_results(&s, id).await;
    assert_eq!(results[0].exit_code, 0);
    // `--download-logs`: the instance's job logs, whole, with the digest the CLI checks.
    let logs = &results[0].logs;
    let download = s
        .director(Method::GET, &format!("/resources/{}", logs.blobstore_id))
        .send()
        .await
        .unwrap();
    assert_eq!(download.status(), 200);
    let bundle = download.bytes().await.unwrap();
    assert_eq!(fleet_release::sha1_hex(&bundle), logs.sha1);
    let instances = s.get_json(&format!("/deployments/{D}/instances")).await;
    let errand = instances
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["job"] == "smoke-tests")
        .unwrap()
        .clone();
    assert!(errand["cid"].is_string(), "kept alive: {errand}");
    // `--when-changed` with nothing changed: skipped, no results.
    let again = s
        .send_json(
            Method::POST,
            &format!("/deployments/{D}/errands/smoke-tests/runs"),
            r#"{"keep-alive":true,"when-changed":true,"instances":[]}"#,
        )
        .await;
    let id = Served::task_of(&again);
    let task = s.wait_task(id).await;
    assert_eq!(task["result"], "skipped - no changes detected");
    assert!(errand_results(&s, id).await.is_empty());
    // An unknown errand fails its task with the director's words.
    let unknown = s
        .send_json(
            Method::POST,
            &format!("/deployments/{D}/errands/nope/runs"),
            "{}",
        )
        .await;
    let task = s.wait_task(Served::task_of(&unknown)).await;
    assert_eq!(task["result"], "Errand 'nope' doesn't exist");
    // Bad bodies are refused before any task, naming the key.
    let bad = s
        .send_json(
            Method::POST,
            &format!("/deployments/{D}/errands/smoke-tests/runs"),
            r#"{"keep-alive":"yes"}"#,
        )
        .await;
    assert_eq!(bad.status(), 400);
    assert!(Served::description(bad).await.contains("`keep-alive`"));
    let nowhere = s
        .send_json(Method::POST, "/deployments/absent/errands/x/runs", "{}")
        .await;
    assert_eq!(nowhere.status(), 404);
    assert_eq!(
        Served::description(nowhere).await,
        "Deployment 'absent' doesn't exist"
    );
}
