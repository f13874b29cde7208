//! Links resolved from manifests and job specs, with no director: implicit and explicit,
//! aliased, blocked, optional, across deployments, ambiguous and missing.

use std::collections::BTreeMap;

use serde_json::json;

use crate::links::{Foreign, Links, instances_of, providers, resolve};
use crate::manifest::parse;
use crate::model::{LinkDef, LinkInstance, PropertySpec, Release, ReleaseJob};

fn link(name: &str, link_type: &str) -> LinkDef {
    LinkDef {
        name: name.into(),
        link_type: link_type.into(),
        ..LinkDef::default()
    }
}

/// `db` provides a `database` link exporting its port; `web` consumes one, and an
/// optional `cache`.
fn release() -> Release {
    Release {
        name: "app".into(),
        version: "1".into(),
        jobs: vec![
            ReleaseJob {
                name: "db".into(),
                properties: [
                    (
                        "port".to_string(),
                        PropertySpec {
                            default: Some(json!(5432)),
                            ..PropertySpec::default()
                        },
                    ),
                    ("user".to_string(), PropertySpec::default()),
                ]
                .into(),
                provides: vec![LinkDef {
                    properties: vec!["port".into(), "user".into()],
                    ..link("db", "database")
                }],
                ..ReleaseJob::default()
            },
            ReleaseJob {
                name: "web".into(),
                consumes: vec![
                    link("db", "database"),
                    LinkDef {
                        optional: true,
                        ..link("cache", "memcached")
                    },
                ],
                ..ReleaseJob::default()
            },
        ],
        ..Release::default()
    }
}

fn manifest(name: &str, groups: &str) -> crate::manifest::Manifest {
    parse(&format!(
        "name: {name}
releases: [{{name: app, version: '1'}}]
stemcells: [{{alias: default, os: jammy, version: '1'}}]
update: {{canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}}
instance_groups:
{groups}"
    ))
    .unwrap()
}

fn group(name: &str, instances: u32, jobs: &str) -> String {
    format!(
        "- name: {name}\n  instances: {instances}\n  jobs: {jobs}\n  stemcell: default\n  networks: [{{name: default}}]\n"
    )
}

/// Each group's instances at 10.0.0.N on `default` (and 10.1.0.N on `backup`), in order.
fn placed(groups: &[(&str, u32)]) -> BTreeMap<String, Vec<LinkInstance>> {
    let mut n = 1;
    groups
        .iter()
        .map(|(group, count)| {
            let instances = (0..*count)
                .map(|index| {
                    n += 1;
                    LinkInstance {
                        name: group.to_string(),
                        id: format!("{group}-{index}"),
                        index,
                        az: Some("z1".into()),
                        address: format!("10.0.0.{n}"),
                        bootstrap: index == 0,
                        addresses: [
                            ("default".to_string(), format!("10.0.0.{n}")),
                            ("backup".to_string(), format!("10.1.0.{n}")),
                        ]
                        .into(),
                        dns_addresses: ["default", "backup"]
                            .iter()
                            .map(|net| {
                                (
                                    net.to_string(),
                                    format!("{group}-{index}.{group}.{net}.d.bosh"),
                                )
                            })
                            .collect(),
                    }
                })
                .collect();
            (group.to_string(), instances)
        })
        .collect()
}

fn linked(name: &str, groups: &str, foreign: &Foreign) -> Result<Links, String> {
    let m = manifest(name, groups);
    let releases = [release()];
    let at = placed(&[("db", 2), ("db2", 1), ("web", 1)]);
    let az_ids = BTreeMap::from([("z1".to_string(), 1), ("z2".to_string(), 2)]);
    let own = providers(name, &m, &releases, &at, &az_ids).map_err(|p| p.join("\n"))?;
    resolve(name, &m, &releases, own, foreign)
}

#[test]
fn a_consumer_the_manifest_does_not_name_gets_the_one_provider_of_its_type() {
    let groups = group(
        "db",
        2,
        "[{name: db, release: app, properties: {user: admin}}]",
    ) + &group("web", 1, "[{name: web, release: app}]");
    let links = linked("d", &groups, &Foreign::new()).unwrap();
    let web = &links.resolved["web"]["web"];
    assert!(
        !web.contains_key("cache"),
        "an optional link with no provider stays unset"
    );
    let db = &web["db"];
    assert_eq!(db["instance_group"], "db");
    assert_eq!(db["deployment_name"], "d");
    assert_eq!(db["properties"], json!({"port": 5432, "user": "admin"}));
    assert_eq!(db["address"], "q-s0.db.default.d.bosh");
    let addresses: Vec<&str> = db["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["address"].as_str().unwrap())
        .collect();
    assert_eq!(addresses, ["10.0.0.2", "10.0.0.3"]);
    assert_eq!(db["instances"][0]["bootstrap"], true);
    assert_eq!(db["instances"][1]["id"], "db-1");
    assert_eq!(links.providers.len(), 1);
    assert_eq!(links.consumers.len(), 2);
}

#[test]
fn two_providers_of_a_type_make_an_implicit_consumer_ambiguous_and_an_alias_picks_one() {
    let two = group("db", 2, "[{name: db, release: app}]")
        + &group(
            "db2",
            1,
            "[{name: db, release: app, provides: {db: {as: replica}}}]",
        );
    let ambiguous = linked(
        "d",
        &(two.clone() + &group("web", 1, "[{name: web, release: app}]")),
        &Foreign::new(),
    )
    .unwrap_err();
    assert_eq!(
        ambiguous,
        "Failed to resolve links from deployment 'd'. See errors below:\n  - Failed to resolve \
         link 'db' type 'database' from job 'web' in instance group 'web'. Multiple link \
         providers found:\n    - Link provider 'db' from job 'db' in instance group 'db' in \
         deployment 'd'\n    - Link provider 'db' with alias 'replica' from job 'db' in instance \
         group 'db2' in deployment 'd'"
    );
    let explicit = two
        + &group(
            "web",
            1,
            "[{name: web, release: app, consumes: {db: {from: replica}}}]",
        );
    let links = linked("d", &explicit, &Foreign::new()).unwrap();
    assert_eq!(links.resolved["web"]["web"]["db"]["instance_group"], "db2");
}

#[test]
fn a_blocked_provider_is_found_by_no_one_and_a_missing_link_is_named() {
    let groups = group("db", 1, "[{name: db, release: app, provides: {db: nil}}]")
        + &group(
            "web",
            1,
            "[{name: web, release: app, consumes: {cache: {from: memcache}}}]",
        );
    let e = linked("d", &groups, &Foreign::new()).unwrap_err();
    assert!(
        e.contains(
            "Failed to resolve link 'db' type 'database' from job 'web' in instance group 'web'. \
             Details below:\n    - No link providers found"
        ),
        "{e}"
    );
    // An optional link named explicitly must still resolve.
    assert!(
        e.contains("Failed to resolve link 'cache' with alias 'memcache' and type 'memcached'"),
        "{e}"
    );
    // `nil` leaves the optional one unset; a manual link is taken as given.
    let groups = group("db", 1, "[{name: db, release: app}]")
        + &group(
            "web",
            1,
            "[{name: web, release: app, consumes: {cache: nil, db: {instances: [{address: db.example.com}], properties: {port: 1}, address: db.example.com}}}]",
        );
    let links = linked("d", &groups, &Foreign::new()).unwrap();
    let db = &links.resolved["web"]["web"]["db"];
    assert_eq!(db["address"], "db.example.com");
    assert_eq!(db["properties"]["port"], 1);
    assert!(!links.resolved["web"]["web"].contains_key("cache"));
}

#[test]
fn another_deployments_link_is_consumed_only_when_shared() {
    let provider = manifest(
        "data",
        &group(
            "db",
            1,
            "[{name: db, release: app, provides: {db: {shared: true}}}]",
        ),
    );
    let releases = [release()];
    let theirs = providers(
        "data",
        &provider,
        &releases,
        &placed(&[("db", 1)]),
        &BTreeMap::new(),
    )
    .unwrap();
    let consumer = group(
        "web",
        1,
        "[{name: web, release: app, consumes: {db: {from: db, deployment: data}}}]",
    );
    let foreign = Foreign::from([("data".to_string(), Some(theirs.clone()))]);
    let links = linked("d", &consumer, &foreign).unwrap();
    assert_eq!(
        links.resolved["web"]["web"]["db"]["deployment_name"],
        "data"
    );

    let unshared: Vec<_> = theirs
        .into_iter()
        .map(|mut p| {
            p.shared = false;
            p
        })
        .collect();
    let foreign = Foreign::from([("data".to_string(), Some(unshared))]);
    assert!(
        linked("d", &consumer, &foreign)
            .unwrap_err()
            .contains("No link providers found")
    );
    let gone = Foreign::from([("data".to_string(), None)]);
    assert!(
        linked("d", &consumer, &gone)
            .unwrap_err()
            .contains("consumes from deployment 'data', but the deployment does not exist.")
    );
}

#[test]
fn an_exported_property_the_spec_does_not_declare_is_refused() {
    let mut r = release();
    r.jobs[0].provides[0].properties.push("password".into());
    let m = manifest("d", &group("db", 1, "[{name: db, release: app}]"));
    let e = providers("d", &m, &[r], &placed(&[("db", 1)]), &BTreeMap::new()).unwrap_err();
    assert_eq!(
        e,
        ["Link property password in template db is not defined in release spec"]
    );
}

#[test]
fn link_instances_take_their_first_networks_address_or_dns_name() {
    let m = manifest("d", &group("db", 2, "[{name: db, release: app}]"));
    let mut plan = crate::plan::plan(
        &m,
        Vec::new(),
        &Default::default(),
        &crate::plan::PlanOptions::default(),
    );
    for (n, instance) in plan.groups[0].instances.iter_mut().enumerate() {
        instance.id = format!("id{n}");
        instance.addresses = vec![(
            "default".into(),
            (n == 0).then(|| crate::network::to_u32("10.1.0.5".parse().unwrap())),
        )];
    }
    let at = instances_of("d", &plan);
    let addresses: Vec<&str> = at["db"].iter().map(|i| i.address.as_str()).collect();
    assert_eq!(addresses, ["10.1.0.5", "id1.db.default.d.bosh"]);
    assert_eq!(at["db"][0].addresses["default"], "10.1.0.5");
    assert!(
        !at["db"][1].addresses.contains_key("default"),
        "a dynamic IP is not known"
    );
    assert_eq!(
        at["db"][1].dns_addresses["default"],
        "id1.db.default.d.bosh"
    );
}

#[test]
fn a_links_change_leaves_stopped_and_ignored_instances_alone() {
    use crate::model::{DesiredState, InstanceRecord, InstanceSpec};
    let groups = group("db", 1, "[{name: db, release: app}]")
        + &group("web", 3, "[{name: web, release: app}]");
    let m = manifest("d", &groups);
    let applied = InstanceSpec {
        links: Some("an older provider".into()),
        ..crate::plan::desired_spec(&m, &m.instance_groups[1])
    };
    let web = |index: u32, state: DesiredState, ignore: bool| InstanceRecord {
        state,
        ignore,
        applied: Some(applied.clone()),
        ..InstanceRecord::on_vm("web", index, &format!("web-{index}"))
    };
    let existing = vec![
        web(0, DesiredState::Started, false),
        web(1, DesiredState::Stopped, false),
        web(2, DesiredState::Started, true),
    ];
    let mut plan = crate::plan::plan(
        &m,
        existing,
        &Default::default(),
        &crate::plan::PlanOptions::default(),
    );
    crate::links::attach(
        "d",
        &m,
        &[release()],
        &mut plan,
        &Foreign::new(),
        &BTreeMap::new(),
    )
    .unwrap();
    let changed: Vec<(u32, bool)> = plan.groups[1]
        .instances
        .iter()
        .map(|i| (i.index, i.changes.contains(&crate::plan::Change::Links)))
        .collect();
    assert_eq!(changed, [(0, true), (1, false), (2, false)]);
}

/// `db` on two networks, `default` first.
fn two_networks(db_jobs: &str, web_jobs: &str) -> String {
    format!(
        "- name: db\n  instances: 2\n  azs: [z1, z2]\n  jobs: {db_jobs}\n  stemcell: default\n  networks: [{{name: default}}, {{name: backup}}]\n"
    ) + &group("web", 1, web_jobs)
}

#[test]
fn a_consumer_picks_the_network_and_whether_it_gets_ips_or_dns_names() {
    let db = "[{name: db, release: app}]";
    let on_backup = two_networks(
        db,
        "[{name: web, release: app, consumes: {db: {network: backup}}}]",
    );
    let links = linked("d", &on_backup, &Foreign::new()).unwrap();
    let content = &links.resolved["web"]["web"]["db"];
    let addresses: Vec<&str> = content["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["address"].as_str().unwrap())
        .collect();
    assert_eq!(addresses, ["10.1.0.2", "10.1.0.3"]);
    assert_eq!(content["default_network"], "backup");
    assert_eq!(content["address"], "q-s0.db.backup.d.bosh");
    assert!(
        content["instances"][0].get("addresses").is_none(),
        "per-network addresses stay with the provider"
    );

    let dns = two_networks(
        db,
        "[{name: web, release: app, consumes: {db: {ip_addresses: false}}}]",
    );
    let links = linked("d", &dns, &Foreign::new()).unwrap();
    let content = &links.resolved["web"]["web"]["db"];
    assert_eq!(content["instances"][1]["address"], "db-1.db.default.d.bosh");

    let nowhere = two_networks(
        db,
        "[{name: web, release: app, consumes: {db: {network: nope}}}]",
    );
    let e = linked("d", &nowhere, &Foreign::new()).unwrap_err();
    assert!(
        e.contains("Provider link does not have network: 'nope'"),
        "{e}"
    );
}

#[test]
fn a_providers_address_encodes_azs_and_health_as_the_dns_encoder_does() {
    let links = linked(
        "d",
        &two_networks("[{name: db, release: app}]", "[{name: web, release: app}]"),
        &Foreign::new(),
    )
    .unwrap();
    let db = &links.providers[0];
    assert_eq!(db.address(), "q-s0.db.default.d.bosh");
    assert_eq!(
        db.address_on("default", &["z2".into(), "z1".into()], Some("healthy")),
        "q-a1a2s3.db.default.d.bosh"
    );
    let content = &links.resolved["web"]["web"]["db"];
    assert_eq!(content["az_ids"], json!({"z1": 1, "z2": 2}));
}

#[test]
fn a_custom_provider_definition_provides_a_link_the_spec_does_not() {
    let groups = group(
        "cache",
        1,
        "[{name: db, release: app, properties: {size: 64}, custom_provider_definitions: [{name: memory, type: memcached, properties: [size]}]}]",
    ) + &group("web", 1, "[{name: web, release: app}]");
    let links = linked("d", &groups, &Foreign::new()).unwrap();
    let cache = &links.resolved["web"]["web"]["cache"];
    assert_eq!(cache["instance_group"], "cache");
    assert_eq!(cache["properties"], json!({"size": 64}));

    let taken = group(
        "db",
        1,
        "[{name: db, release: app, custom_provider_definitions: [{name: db, type: database}]}]",
    ) + &group("web", 1, "[{name: web, release: app}]");
    let e = linked("d", &taken, &Foreign::new()).unwrap_err();
    assert!(
        e.contains("Custom provider 'db' in job 'db' in instance group 'db' is already defined in release 'app'"),
        "{e}"
    );
    let twice = "[{name: db, release: app, custom_provider_definitions: [{name: x, type: t}, {name: x, type: t}, {type: t}]}]";
    let e = crate::manifest::parse(&format!(
        "name: d\nreleases: [{{name: app, version: '1'}}]\nstemcells: [{{alias: default, os: jammy, version: '1'}}]\nupdate: {{canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}}\ninstance_groups:\n{}",
        group("db", 1, twice)
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("Custom provider 'x' is defined multiple times in manifest."),
        "{e}"
    );
    assert!(
        e.contains("Name for custom link provider definition"),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_links_api_answers_addresses_for_azs_health_and_an_external_links_network() {
    use crate::model::TaskState;
    let f = crate::tests::fixture(vec![]).await;
    f.director.upload_release(&release()).await.unwrap();
    let text = "name: data
releases: [{name: app, version: '1'}]
stemcells: [{alias: default, os: jammy, version: '1.0'}]
update: {canaries: 1, max_in_flight: 2, canary_watch_time: 1000, update_watch_time: 1000}
networks:
- name: default
  subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1, azs: [z1, z2]}]
- name: backup
  subnets: [{range: 10.1.0.0/24, gateway: 10.1.0.1, azs: [z1, z2]}]
instance_groups:
- name: db
  instances: 2
  azs: [z1, z2]
  jobs: [{name: db, release: app, provides: {db: {shared: true}}}]
  vm_type: small
  stemcell: default
  networks: [{name: default, default: [dns, gateway]}, {name: backup}]
";
    let task = crate::tests::deploy(&f.director, text).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let providers = f.director.link_providers("data").await.unwrap();
    let (id, _) = &providers[0];
    let external = f
        .director
        .create_link(id, "a-binding", Some("backup"))
        .await
        .unwrap();
    let address = |azs: &[&str], status: Option<&'static str>| {
        let azs: Vec<String> = azs.iter().map(|s| s.to_string()).collect();
        let director = &f.director;
        let link = external.id.clone();
        async move { director.link_address(&link, &azs, status).await }
    };
    assert_eq!(
        address(&[], None).await.unwrap(),
        "q-s0.db.backup.data.bosh",
        "the external link's network"
    );
    assert_eq!(
        address(&["z2"], Some("healthy")).await.unwrap(),
        "q-a2s3.db.backup.data.bosh"
    );
    assert!(address(&[], Some("sometimes")).await.is_err());
}
