//! The broker management API of `serve` over real HTTPS, answer by answer as
//! shared/BROKER_API.md lists them.

use std::time::Duration;

use fleet_updater::config::ServeLimits;
use reqwest::Method;
use serde_json::{Value, json};

use crate::served::Served;

/// A trigger with the body clients send: the instance's plan as the listing gives it.
async fn patch(s: &Served, id: &str, query: &str) -> reqwest::Response {
    let listed = s
        .broker(Method::GET, &format!("/mgmt/service_instances/{id}"))
        .send()
        .await
        .unwrap();
    let plan = match listed.status().as_u16() {
        200 => listed.json::<Value>().await.unwrap()["plan_id"].clone(),
        _ => json!("postgres-single"),
    };
    s.broker(
        Method::PATCH,
        &format!("/mgmt/service_instances/{id}?{query}"),
    )
    .json(&json!({ "plan_id": plan, "context": { "space_guid": "space" } }))
    .send()
    .await
    .unwrap()
}

async fn poll_until_done(s: &Served, id: &str, operation: &Value) -> Value {
    for _ in 0..600 {
        let state: Value = s
            .broker(
                Method::GET,
                &format!("/v2/service_instances/{id}/last_operation"),
            )
            .query(&[("operation", operation.to_string())])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if state["state"] != "in progress" {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("operation {operation} did not end");
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_are_listed_with_every_field_and_filtered_by_state() {
    let s = Served::start(ServeLimits::default()).await;
    let all: Value = s.broker_json("/mgmt/service_instances").await;
    let ids: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["service_instance_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["pg-01", "pg-02", "pg-03", "rmq-01", "rmq-02"]);
    let pg2 = &all[1];
    assert_eq!(pg2["plan_id"], "postgres-single");
    assert_eq!(pg2["deployment_name"], "service-instance_pg-02");
    assert_eq!(pg2["state"], "provisioned");
    assert_eq!(pg2["update_available"], true);
    assert_eq!(pg2["maintenance_updates_blocked"], true);
    assert_eq!(pg2["last_operation"]["state"], "succeeded");

    let outdated: Value = s
        .broker_json("/mgmt/service_instances?state=outdated")
        .await;
    assert_eq!(outdated.as_array().unwrap().len(), 5);
    let failed: Value = s.broker_json("/mgmt/service_instances?state=failed").await;
    assert_eq!(failed, json!([]));
    let bad = s
        .broker(Method::GET, "/mgmt/service_instances?state=sleepy")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);

    let one: Value = s.broker_json("/mgmt/service_instances/rmq-02").await;
    assert_eq!(one["plan_id"], "rabbitmq-cluster");
    let missing = s
        .broker(Method::GET, "/mgmt/service_instances/nope")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn each_trigger_outcome_has_its_status_code() {
    let s = Served::start(ServeLimits::default()).await;
    let accepted = patch(&s, "pg-01", "operation_type=upgrade").await;
    assert_eq!(accepted.status(), 202);
    let operation: Value = accepted.json().await.unwrap();
    assert_eq!(operation["OperationType"], "upgrade");
    assert!(operation["BoshTaskID"].is_u64());
    // The same instance while its operation runs: busy.
    let busy = patch(&s, "pg-01", "operation_type=recreate").await;
    assert_eq!(busy.status(), 409);
    assert_eq!(
        poll_until_done(&s, "pg-01", &operation).await["state"],
        "succeeded"
    );
    // Now up to date.
    assert_eq!(
        patch(&s, "pg-01", "operation_type=upgrade").await.status(),
        204
    );

    // Blocked: 204, as ODB clients expect of a skipped instance, with the reason in a
    // header because a 204 carries no body.
    let blocked = patch(&s, "pg-02", "operation_type=upgrade").await;
    assert_eq!(blocked.status(), 204);
    assert_eq!(
        blocked.headers()["x-broker-error"],
        "MaintenanceUpdatesBlocked"
    );
    let forced = patch(&s, "pg-02", "operation_type=upgrade&force=true").await;
    assert_eq!(forced.status(), 202);
    let forced: Value = forced.json().await.unwrap();
    assert_eq!(
        poll_until_done(&s, "pg-02", &forced).await["state"],
        "succeeded"
    );

    assert_eq!(
        patch(&s, "nope", "operation_type=upgrade").await.status(),
        404
    );
    assert_eq!(
        patch(&s, "pg-03", "operation_type=explode").await.status(),
        400
    );
    let malformed = s
        .broker(
            Method::PATCH,
            "/mgmt/service_instances/pg-03?operation_type=upgrade",
        )
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);

    // The deployment deleted behind the broker's back: orphaned.
    let director = s.serving.fleet().director().clone();
    let deleted = director.delete("service-instance_pg-03").await.unwrap();
    director.wait(deleted.id).await.unwrap();
    assert_eq!(
        patch(&s, "pg-03", "operation_type=upgrade").await.status(),
        410
    );

    let recreate = patch(&s, "rmq-01", "operation_type=recreate").await;
    assert_eq!(recreate.status(), 202);
    let recreate: Value = recreate.json().await.unwrap();
    assert_eq!(recreate["OperationType"], "recreate");
    assert_eq!(
        poll_until_done(&s, "rmq-01", &recreate).await["state"],
        "succeeded"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn polling_needs_an_operation_and_a_known_instance() {
    let s = Served::start(ServeLimits::default()).await;
    let no_operation = s
        .broker(Method::GET, "/v2/service_instances/pg-01/last_operation")
        .send()
        .await
        .unwrap();
    assert_eq!(no_operation.status(), 400);
    let gone = s
        .broker(Method::GET, "/v2/service_instances/nope/last_operation")
        .query(&[("operation", r#"{"BoshTaskID": 1}"#)])
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    // Another instance's task says nothing about this one.
    let accepted: Value = s
        .broker(
            Method::PATCH,
            "/mgmt/service_instances/pg-01?operation_type=upgrade",
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let foreign = s
        .broker(Method::GET, "/v2/service_instances/pg-03/last_operation")
        .query(&[("operation", accepted.to_string())])
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 400);
    let other_major = s
        .client
        .get(s.broker_url("/mgmt/service_instances"))
        .basic_auth("admin", Some(&s.password))
        .header("X-Broker-API-Version", "3.0")
        .send()
        .await
        .unwrap();
    assert_eq!(other_major.status(), 412);
    let without = s
        .client
        .get(s.broker_url("/mgmt/service_instances"))
        .basic_auth("admin", Some(&s.password))
        .send()
        .await
        .unwrap();
    assert_eq!(without.status(), 400, "a request without the API version");
    assert!(
        Served::description(without)
            .await
            .contains("X-Broker-API-Version")
    );
    // A trigger names the instance's own plan; another would be a plan change.
    let other_plan = s
        .broker(
            Method::PATCH,
            "/mgmt/service_instances/pg-01?operation_type=upgrade",
        )
        .header("content-type", "application/json")
        .body(r#"{"plan_id": "other", "context": {}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(other_plan.status(), 422);
    let said = Served::description(other_plan).await;
    assert!(
        said.contains("'other'") || said.contains("\"other\""),
        "{said}"
    );
    assert!(said.contains("pg-01"), "{said}");
}

/// The ODB errands' trigger (`upgrade` or `recreate`), with the body they write by hand.
async fn odb_trigger(
    s: &Served,
    instance: &crate::bosh_cli_types::OdbInstance,
    operation: &str,
) -> reqwest::Response {
    let body = format!(
        r#"{{"plan_id": "{}", "context":{{"space_guid":"{}"}}}}"#,
        instance.plan_unique_id, instance.space_guid
    );
    s.broker(
        Method::PATCH,
        &format!(
            "/mgmt/service_instances/{}?operation_type={operation}",
            instance.guid
        ),
    )
    .header("content-type", "application/json")
    .body(body)
    .send()
    .await
    .unwrap()
}

/// The ODB errands' list, as their instance iterator decodes it.
async fn odb_list(s: &Served) -> Vec<crate::bosh_cli_types::OdbInstance> {
    serde_json::from_value(s.broker_json("/mgmt/service_instances").await).unwrap()
}

/// The ODB errands' instance iterator for `operation`: list, trigger each (204 is skipped,
/// blocked ones included), poll with the operation data as Go sends it back until the
/// operation ends, which must be in success. Returns the instances triggered and skipped.
async fn odb_iterate(s: &Served, operation: &str) -> (Vec<String>, Vec<String>) {
    use crate::bosh_cli_types::{OdbLastOperation, OdbOperationData};
    let instances = odb_list(s).await;
    assert!(!instances.is_empty());
    let (mut triggered, mut skipped) = (Vec::new(), Vec::new());
    for instance in &instances {
        assert!(!instance.guid.is_empty() && !instance.plan_unique_id.is_empty());
        let response = odb_trigger(s, instance, operation).await;
        match response.status().as_u16() {
            204 => skipped.push(instance.guid.clone()),
            202 => {
                let data: OdbOperationData =
                    serde_json::from_str(&response.text().await.unwrap()).unwrap();
                assert!(data.bosh_task_id > 0);
                assert_eq!(data.operation_type, operation);
                // Go marshals the whole struct back into the query.
                let sent_back = serde_json::to_string(&data).unwrap();
                let last = loop {
                    let polled = s
                        .broker(
                            Method::GET,
                            &format!("/v2/service_instances/{}/last_operation", instance.guid),
                        )
                        .query(&[("operation", sent_back.as_str())])
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(polled.status(), 200);
                    let last: OdbLastOperation =
                        serde_json::from_str(&polled.text().await.unwrap()).unwrap();
                    if last.state != "in progress" {
                        break last;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                };
                assert_eq!(last.state, "succeeded", "{last:?}");
                triggered.push(instance.guid.clone());
            }
            other => panic!("{}: unexpected status code: {other}", instance.guid),
        }
    }
    (triggered, skipped)
}

/// The ODB `upgrade-all-service-instances` errand's sequence runs to the end; a second run
/// finds everything up to date.
#[tokio::test(flavor = "multi_thread")]
async fn the_odb_upgrade_all_sequence_runs_to_the_end_and_skips_blocked_instances() {
    let s = Served::start(ServeLimits::default()).await;
    let (upgraded, skipped) = odb_iterate(&s, "upgrade").await;
    assert_eq!(skipped, ["pg-02"], "the blocked one is skipped, not failed");
    assert_eq!(upgraded.len(), 4);
    let (upgraded, skipped) = odb_iterate(&s, "upgrade").await;
    assert!(upgraded.is_empty(), "{upgraded:?}");
    assert_eq!(skipped.len(), 5);
}

/// The ODB `recreate-all-service-instances` errand's sequence: the director's version,
/// asked without credentials and parsed as the errand parses it, passes its check; then
/// every unblocked instance is recreated, again on a second run.
#[tokio::test(flavor = "multi_thread")]
async fn the_odb_recreate_all_sequence_checks_the_version_and_recreates_every_unblocked_instance() {
    let s = Served::start(ServeLimits::default()).await;
    let info: crate::bosh_cli_types::OdbDirectorInfo =
        serde_json::from_value(s.info().await).unwrap();
    // The first word, as `major.minor.patch`: 268.4.0 or later passes.
    let first = info.version.split_whitespace().next().unwrap_or_default();
    let numbers: Vec<u64> = first.split('.').map(|n| n.parse().unwrap()).collect();
    assert_eq!(numbers.len(), 3, "{}", info.version);
    assert!(numbers >= vec![268, 4, 0], "{}", info.version);
    let tasks_before = director_task_count(&s).await;
    let (recreated, skipped) = odb_iterate(&s, "recreate").await;
    assert_eq!(skipped, ["pg-02"], "the blocked one is skipped, not failed");
    assert_eq!(recreated.len(), 4);
    let (again, _) = odb_iterate(&s, "recreate").await;
    assert_eq!(again, recreated, "recreating is never up to date");
    assert_eq!(director_task_count(&s).await, tasks_before + 8);
}

/// How many tasks the director has run or runs.
async fn director_task_count(s: &Served) -> usize {
    s.get_json("/tasks?limit=1000")
        .await
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_are_listed_with_their_org_and_space_and_filtered_by_them_and_by_plan() {
    let s = Served::start(ServeLimits::default()).await;
    let ids = |listing: &Value| -> Vec<String> {
        listing
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["service_instance_id"].as_str().unwrap().to_string())
            .collect()
    };
    let all: Value = s.broker_json("/mgmt/service_instances").await;
    assert_eq!(
        all[3]["context"],
        json!({"organization_name": "system", "space_name": "canaries"})
    );
    assert_eq!(all[0]["context"], Value::Null);
    let canaries: Value = s
        .broker_json("/mgmt/service_instances?cf_org=system&cf_space=canaries")
        .await;
    assert_eq!(ids(&canaries), ["rmq-01", "rmq-02"]);
    let by_plan: Value = s
        .broker_json("/mgmt/service_instances?plan=postgres-single&state=outdated")
        .await;
    assert_eq!(ids(&by_plan), ["pg-01", "pg-02", "pg-03"]);
    let none: Value = s.broker_json("/mgmt/service_instances?cf_space=prod").await;
    assert_eq!(none, json!([]));
    let unknown = s
        .broker(Method::GET, "/mgmt/service_instances?region=eu")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 400);
    let body: Value = unknown.json().await.unwrap();
    assert!(
        body["description"].as_str().unwrap().contains("'region'"),
        "{body}"
    );
}
