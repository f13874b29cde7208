//! Team users over real HTTPS, as BOSH's `bosh.teams.T.admin` and `.read` scopes: a
//! deployment a team admin creates belongs to its team; team users see and change only
//! their teams' deployments, their tasks, events and log bundles; `bosh.releases.upload`
//! uploads and does nothing else; team scopes open nothing of the broker.

use fleet_updater::config::{Secret, ServeConfig, ServeUser};
use reqwest::Method;
use serde_json::Value;

use crate::served::{Served, small_fleet};

const PG: &str = "service-instance_pg-01";

fn user(name: &str, scope: &str) -> ServeUser {
    ServeUser {
        name: name.into(),
        password: Secret::new(format!("{name}-Pw-1")),
        scopes: vec![scope.into()],
    }
}

async fn as_user(s: &Served, name: &str, method: Method, path: &str) -> reqwest::Response {
    s.director_as(method, path, name, &format!("{name}-Pw-1"))
        .send()
        .await
        .unwrap()
}

async fn json_as(s: &Served, name: &str, path: &str) -> Value {
    let response = as_user(s, name, Method::GET, path).await;
    assert_eq!(response.status(), 200, "{name} GET {path}");
    response.json().await.unwrap()
}

fn names(deployments: &Value) -> Vec<String> {
    deployments
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn team_users_see_and_change_their_teams_deployments_only() {
    let config = ServeConfig {
        users: vec![
            ServeUser::admin("admin", Secret::new("Admin-Pw-1")),
            user("pg-ops", "bosh.teams.pg.admin"),
            user("pg-view", "bosh.teams.pg.read"),
            user("other", "bosh.teams.other.admin"),
            user("uploader", "bosh.releases.upload"),
        ],
        health_monitor: None,
        ..ServeConfig::default()
    };
    let s = Served::start_configured(tempfile::tempdir().unwrap(), &small_fleet(), &config).await;
    let all = names(&s.get_json("/deployments").await);
    assert!(all.contains(&PG.to_string()), "{all:?}");
    assert_eq!(
        names(&json_as(&s, "pg-ops", "/deployments").await),
        Vec::<String>::new()
    );

    // A team admin's new deployment is its team's.
    let manifest = s.get_json(&format!("/deployments/{PG}")).await["manifest"]
        .as_str()
        .unwrap()
        .replace(&format!("name: {PG}"), "name: team-pg");
    assert!(manifest.contains("name: team-pg"), "{manifest}");
    let created = s
        .director_as(Method::POST, "/deployments", "pg-ops", "pg-ops-Pw-1")
        .header("content-type", "text/yaml")
        .body(manifest.clone())
        .send()
        .await
        .unwrap();
    let created = Served::task_of(&created);
    assert_eq!(s.wait_task(created).await["state"], "done");
    let theirs = json_as(&s, "pg-ops", "/deployments").await;
    assert_eq!(names(&theirs), ["team-pg"]);
    assert_eq!(theirs[0]["teams"], serde_json::json!(["pg"]));
    assert_eq!(
        names(&json_as(&s, "pg-view", "/deployments").await),
        ["team-pg"]
    );
    assert_eq!(
        names(&json_as(&s, "other", "/deployments").await),
        Vec::<String>::new()
    );

    // Another team's, or nobody's, deployment is out of reach.
    for (method, path) in [
        (Method::GET, format!("/deployments/{PG}")),
        (
            Method::PUT,
            format!("/deployments/{PG}/jobs/*?state=restart"),
        ),
        (Method::DELETE, format!("/deployments/{PG}")),
        (Method::GET, "/locks".to_string()),
        (Method::PUT, "/resurrection".to_string()),
    ] {
        let refused = as_user(&s, "pg-ops", method.clone(), &path).await;
        assert_eq!(refused.status(), 403, "{method} {path}");
        assert_eq!(refused.json::<Value>().await.unwrap()["code"], 600000);
    }
    let over_another = s
        .director_as(Method::POST, "/deployments", "pg-ops", "pg-ops-Pw-1")
        .header("content-type", "text/yaml")
        .body(
            s.get_json(&format!("/deployments/{PG}")).await["manifest"]
                .as_str()
                .unwrap()
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        over_another.status(),
        403,
        "a deploy over a deployment of no team of its"
    );
    assert_eq!(
        as_user(&s, "other", Method::GET, "/deployments/team-pg")
            .await
            .status(),
        403
    );

    // Its team's tasks, with their debug output for the admin, events of them only.
    let tasks = json_as(&s, "pg-ops", "/tasks?verbose=2").await;
    let tasks = tasks.as_array().unwrap();
    assert!(!tasks.is_empty());
    assert!(
        tasks.iter().all(|t| t["deployment"] == "team-pg"),
        "{tasks:?}"
    );
    let debug = as_user(
        &s,
        "pg-ops",
        Method::GET,
        &format!("/tasks/{created}/output?type=debug"),
    )
    .await;
    assert_eq!(debug.status(), 200);
    let viewer_debug = as_user(
        &s,
        "pg-view",
        Method::GET,
        &format!("/tasks/{created}/output?type=debug"),
    )
    .await;
    assert_eq!(
        viewer_debug.status(),
        403,
        "a team reader gets event and result output only"
    );
    let viewer_events = as_user(
        &s,
        "pg-view",
        Method::GET,
        &format!("/tasks/{created}/output?type=event"),
    )
    .await;
    assert_eq!(viewer_events.status(), 200);
    let admins_tasks = s.get_json("/tasks?verbose=2").await;
    let elsewhere = admins_tasks
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["deployment"] != "team-pg" && !t["deployment"].is_null())
        .map(|t| t["id"].as_u64().unwrap())
        .expect("a task of another deployment");
    assert_eq!(
        as_user(&s, "pg-ops", Method::GET, &format!("/tasks/{elsewhere}"))
            .await
            .status(),
        403
    );
    let events = json_as(&s, "pg-ops", "/events").await;
    assert!(!events.as_array().unwrap().is_empty());
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["deployment"] == "team-pg")
    );
    assert!(
        json_as(&s, "other", "/events")
            .await
            .as_array()
            .unwrap()
            .is_empty()
    );

    // A team reader reads and changes nothing; a team admin changes its own.
    let restart = "/deployments/team-pg/jobs/*?state=restart";
    assert_eq!(
        as_user(&s, "pg-view", Method::PUT, restart).await.status(),
        403
    );
    let instances = as_user(&s, "pg-view", Method::GET, "/deployments/team-pg/instances").await;
    assert_eq!(instances.status(), 200);
    let restarted = s
        .director_as(Method::PUT, restart, "pg-ops", "pg-ops-Pw-1")
        .header("content-type", "text/yaml")
        .send()
        .await
        .unwrap();
    assert_eq!(
        s.wait_task(Served::task_of(&restarted)).await["state"],
        "done"
    );

    // Uploading is a scope of its own.
    let upload = as_user(&s, "uploader", Method::POST, "/releases").await;
    assert_ne!(upload.status(), 403, "let through to the upload itself");
    assert_eq!(
        as_user(&s, "uploader", Method::GET, "/deployments")
            .await
            .status(),
        403
    );
    assert_eq!(
        as_user(&s, "pg-ops", Method::POST, "/releases")
            .await
            .status(),
        403
    );

    // Team scopes open nothing of the broker.
    let broker = s
        .broker_as(
            Method::GET,
            "/mgmt/service_instances",
            "pg-ops",
            "pg-ops-Pw-1",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(broker.status(), 403);
}
