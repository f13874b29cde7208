//! The config server: variables generated once per deployment and kept, `((name))`
//! resolved only where templates render, and a deploy refused, naming every variable it
//! cannot resolve, before anything changes.

use crate::model::TaskState;
use crate::tests::{deploy, failed, fixture, manifest};

/// The test manifest with job properties that use variables, and `variables:` as given.
fn with_variables(properties: &str, declared: &str) -> String {
    manifest("d", 1, "1.0", 0).replace(
        "properties: {port: 80}",
        &format!("properties: {properties}"),
    ) + declared
}

async fn dry_run(director: &crate::Director, text: &str) -> crate::model::Task {
    let options = crate::DeployOptions {
        dry_run: true,
        ..crate::DeployOptions::default()
    };
    director.deploy(text, options).await.unwrap()
}

const DECLARED: &str = "variables:
- {name: pw, type: password}
- {name: ca, type: certificate, options: {is_ca: true, common_name: test-ca}}
- {name: tls, type: certificate, options: {ca: ca, common_name: web, alternative_names: [web.example.com], extended_key_usage: [server_auth]}}
- {name: /shared/admin, type: user, options: {username: root}}
";

#[tokio::test(start_paused = true)]
async fn declared_variables_are_generated_once_and_kept_under_the_deployments_names() {
    let f = fixture(vec![]).await;
    let text = with_variables(
        "{port: 80, password: '((pw))', cert: '((tls.certificate))', admin: '((/shared/admin.password))'}",
        DECLARED,
    );
    let task = deploy(&f.director, &text).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let kept = f.director.variables("d").await.unwrap();
    let names: Vec<&str> = kept.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "/fleet-updater/d/ca",
            "/fleet-updater/d/pw",
            "/fleet-updater/d/tls",
            "/shared/admin"
        ]
    );
    let values = f.director.core.records.variables("d").await.unwrap();
    let pw = values.iter().find(|v| v.name.ends_with("/pw")).unwrap();
    let password = pw.value.as_str().unwrap().to_string();
    assert_eq!(password.len(), 20);
    let tls = values.iter().find(|v| v.name.ends_with("/tls")).unwrap();
    let ca = values.iter().find(|v| v.name.ends_with("/ca")).unwrap();
    assert_eq!(tls.value["ca"], ca.value["certificate"]);
    assert!(
        format!("{pw:?}").find(&password).is_none(),
        "Debug hides the value"
    );

    // A second deploy keeps every value; nothing of the instance changes.
    let again = deploy(&f.director, &text).await;
    assert_eq!(again.state, TaskState::Done, "{:?}", again.result);
    let after = f.director.core.records.variables("d").await.unwrap();
    let same = after.iter().find(|v| v.name.ends_with("/pw")).unwrap();
    assert_eq!((same.id.as_str(), &same.value), (pw.id.as_str(), &pw.value));

    // No record holds the secret: the manifest and the instance's spec keep `((pw))`.
    let record = f.director.deployment("d").await.unwrap().unwrap();
    let manifest = record.manifest.unwrap();
    assert!(manifest.contains("((pw))") && !manifest.contains(&password));
    let instance = &f.director.instances("d").await.unwrap()[0];
    let applied = serde_json::to_string(&instance.applied).unwrap();
    assert!(applied.contains("((pw))") && !applied.contains(&password));
    let events = serde_json::to_string(&f.director.events(task.id).await.unwrap()).unwrap();
    let trace = format!("{:?}", f.director.trace(task.id).await.unwrap());
    assert!(!events.contains(&password) && !trace.contains(&password));
}

#[tokio::test(start_paused = true)]
async fn a_deploy_names_every_variable_it_cannot_resolve_and_changes_nothing() {
    let f = fixture(vec![]).await;
    let text = with_variables(
        "{port: 80, a: '((nope))', b: 'x-((also)).y', c: '((pw))'}",
        "variables:\n- {name: pw, type: password}\n",
    );
    let result = failed(&deploy(&f.director, &text).await);
    assert_eq!(
        result,
        "Failed to find variables from config server: '/fleet-updater/d/also', \
         '/fleet-updater/d/nope'"
    );
    assert!(f.director.instances("d").await.unwrap().is_empty());
    assert!(f.cloud.vms().await.is_empty());

    let bad = with_variables(
        "{port: 80}",
        "variables:\n- {name: pw}\n- {name: pw, type: password}\n- {name: 'a//b', type: password}\n",
    );
    let result = failed(&deploy(&f.director, &bad).await);
    assert!(
        result.contains("Type for variable 'pw' is missing; 'type' must be specified"),
        "{result}"
    );
    assert!(
        result.contains("Some of the variables have duplicate names, eg: 'pw'"),
        "{result}"
    );
    assert!(result.contains("Variable name 'a//b'"), "{result}");
}

#[tokio::test(start_paused = true)]
async fn an_absolute_name_is_one_variable_whichever_deployment_declares_it() {
    let f = fixture(vec![]).await;
    let declared = "variables:\n- {name: /shared/admin, type: user, options: {username: root}}\n";
    let first = with_variables("{port: 80, admin: '((/shared/admin.password))'}", declared);
    assert_eq!(deploy(&f.director, &first).await.state, TaskState::Done);
    let kept = f
        .director
        .core
        .records
        .variable("/shared/admin")
        .await
        .unwrap()
        .unwrap();
    let second = with_variables("{port: 80, admin: '((/shared/admin.password))'}", declared)
        .replace("name: d\n", "name: e\n");
    let task = deploy(&f.director, &second).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let after = f
        .director
        .core
        .records
        .variable("/shared/admin")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (after.id, after.value),
        (kept.id, kept.value),
        "not generated again"
    );
    // Used without a declaration, it is found where it is kept.
    let third = with_variables("{port: 80, admin: '((/shared/admin.username))'}", "")
        .replace("name: d\n", "name: f\n");
    let task = deploy(&f.director, &third).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_checks_what_it_would_generate_and_writes_nothing() {
    let f = fixture(vec![]).await;
    let bad = with_variables(
        "{port: 80, tls: '((tls.certificate))'}",
        "variables:\n- {name: tls, type: certificate, options: {ca: nosuch, common_name: x}}\n",
    );
    let task = dry_run(&f.director, &bad).await;
    let result = failed(&f.director.wait(task.id).await.unwrap());
    assert!(
        result.contains("its CA `nosuch` is not declared before it"),
        "{result}"
    );
    let good = with_variables(
        "{port: 80, pw: '((pw))'}",
        "variables:\n- {name: pw, type: password}\n",
    );
    let task = dry_run(&f.director, &good).await;
    assert_eq!(
        f.director.wait(task.id).await.unwrap().state,
        TaskState::Done
    );
    assert!(
        f.director
            .core
            .records
            .variables("d")
            .await
            .unwrap()
            .is_empty()
    );
}

#[test]
fn another_deployments_references_are_made_absolute_with_its_name() {
    let value = serde_json::json!({"a": "((pw))", "b": ["x-(( /abs ))-((!k.key))"], "c": 1});
    assert_eq!(
        crate::config_server::qualify(&value, "data"),
        serde_json::json!({
            "a": "((/fleet-updater/data/pw))",
            "b": ["x-((/abs))-((!/fleet-updater/data/k.key))"],
            "c": 1
        })
    );
}

/// The value of the deployment `d`'s variable `name`, and its id.
async fn kept(director: &crate::Director, name: &str) -> (String, serde_json::Value) {
    let all = director.core.records.variables("d").await.unwrap();
    let v = all
        .iter()
        .find(|v| v.name == format!("/fleet-updater/d/{name}"))
        .unwrap();
    (v.id.clone(), v.value.clone())
}

#[tokio::test(start_paused = true)]
async fn update_modes_and_the_stemcell_strategy_make_variables_anew_when_they_say() {
    let f = fixture(vec![]).await;
    let declared = "variables:
- {name: kept, type: password}
- {name: always, type: password, update_mode: overwrite}
- {name: per_stemcell, type: password, update: {strategy: on-stemcell-change}}
- {name: converging, type: password, update_mode: converge, options: {length: 20}}
";
    let properties =
        "{port: 80, a: '((kept))', b: '((always))', c: '((per_stemcell))', d: '((converging))'}";
    let text = with_variables(properties, declared);
    assert_eq!(deploy(&f.director, &text).await.state, TaskState::Done);
    let first = [
        kept(&f.director, "kept").await,
        kept(&f.director, "always").await,
        kept(&f.director, "per_stemcell").await,
        kept(&f.director, "converging").await,
    ];

    // The same stemcell and declarations: only `overwrite` is made anew.
    assert_eq!(deploy(&f.director, &text).await.state, TaskState::Done);
    assert_eq!(kept(&f.director, "kept").await, first[0]);
    assert_ne!(kept(&f.director, "always").await.1, first[1].1);
    assert_eq!(kept(&f.director, "per_stemcell").await, first[2]);
    assert_eq!(kept(&f.director, "converging").await, first[3]);

    // A new stemcell: the stemcell strategy's variable too.
    let newer = text.replace("version: '1.0'", "version: '2.0'");
    let task = deploy(&f.director, &newer).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    assert_eq!(kept(&f.director, "kept").await, first[0]);
    assert_ne!(kept(&f.director, "per_stemcell").await.1, first[2].1);
    let per_stemcell = kept(&f.director, "per_stemcell").await;
    assert_eq!(deploy(&f.director, &newer).await.state, TaskState::Done);
    assert_eq!(
        kept(&f.director, "per_stemcell").await,
        per_stemcell,
        "once per change"
    );

    // A changed declaration: the converging one.
    let changed = newer.replace("options: {length: 20}", "options: {length: 24}");
    assert_eq!(deploy(&f.director, &changed).await.state, TaskState::Done);
    assert_ne!(kept(&f.director, "converging").await.1, first[3].1);
    assert_eq!(kept(&f.director, "kept").await, first[0]);

    // A bad mode or strategy is refused, named.
    let bad = with_variables(
        "{port: 80}",
        "variables:\n- {name: x, type: password, update_mode: sometimes, update: {strategy: weekly}}\n",
    );
    let task = deploy(&f.director, &bad).await;
    let result = task.result.unwrap();
    assert!(
        result.contains("Update mode for variable 'x'")
            && result.contains("Update strategy for variable 'x'"),
        "{result}"
    );
}

#[test]
fn the_last_deploys_stemcells_are_read_whatever_placeholders_the_manifest_has() {
    let record = crate::model::DeploymentRecord {
        name: "d".into(),
        manifest: Some(
            "name: d\nstemcells: [{alias: default, os: jammy, version: latest}, {alias: old, name: bosh-x, version: '1'}]\ninstance_groups: [{name: web, instances: ((count))}]\n"
                .into(),
        ),
        cloud_config: None,
        runtime_configs: Vec::new(),
        latest: vec![crate::model::Resolved {
            kind: "stemcell".into(),
            name: "default".into(),
            version: "2.0".into(),
        }],
        providers: Vec::new(),
        consumers: Vec::new(),
    };
    let stemcells = crate::snapshot::deployed_stemcells(&record).unwrap();
    let stemcells: Vec<&str> = stemcells.iter().map(String::as_str).collect();
    assert_eq!(stemcells, ["bosh-x/1", "jammy/2.0"]);
}
