use std::net::Ipv4Addr;
use std::sync::Arc;

use super::*;
use fleet_store::{AsyncStore, Store};
use fleet_yaml::{Checker, Limits, load};

fn ip(text: &str) -> u32 {
    to_u32(text.parse::<Ipv4Addr>().unwrap())
}

const NETS: &str = "networks:
- name: default
  subnets:
  - {range: 10.0.0.0/28, gateway: 10.0.0.1, reserved: [10.0.0.2 - 10.0.0.3], static: [10.0.0.10 - 10.0.0.12], azs: [z1]}
  - {range: 10.0.1.0/29, gateway: 10.0.1.1, azs: [z2]}
- name: other
  subnets:
  - {range: 10.9.0.0/29, gateway: 10.9.0.1, static: [10.9.0.5]}
- name: iaas
  type: dynamic
  subnets: [{azs: [z1, z2]}]
- name: public
  type: vip
";

fn networks() -> Vec<Network> {
    let root = load(NETS, Limits::default()).unwrap();
    let mut checker = Checker::new();
    let azs = vec!["z1".to_string(), "z2".to_string()];
    let nets = super::networks(
        &mut checker,
        root.get("networks").unwrap(),
        "networks",
        Some(&azs),
    );
    assert!(checker.is_clean(), "{:?}", checker.into_problems());
    nets
}

fn owner(deployment: &str, instance: &str) -> Owner {
    Owner {
        deployment: deployment.into(),
        instance: instance.into(),
    }
}

fn wants(
    deployment: &str,
    instance: &str,
    az: &str,
    desired: &[(&str, Option<&str>)],
    existing: &[(&str, &str)],
) -> InstanceNetworks {
    InstanceNetworks {
        owner: owner(deployment, instance),
        az: Some(az.into()),
        desired: desired
            .iter()
            .map(|(n, s)| Desired {
                network: n.to_string(),
                static_ip: s.map(ip),
            })
            .collect(),
        existing: existing
            .iter()
            .map(|(n, a)| Held {
                network: n.to_string(),
                ip: ip(a),
            })
            .collect(),
    }
}

fn director_ips() -> IpSet {
    let mut set = IpSet::new();
    set.insert(ip("10.0.0.4"));
    set
}

fn first_ip(a: &Assignment) -> Ipv4Addr {
    to_ip(a.ips[0].1.unwrap())
}

fn in_memory() -> Arc<dyn Store> {
    fleet_store::testing::store()
}

/// [`crate::networking::plan_global`] run to completion, for these synchronous tests.
fn plan_global<T, E: From<NetworkError>>(
    store: &Arc<dyn Store>,
    named: &[u32],
    plan: impl FnMut(PlannedIpRepo) -> Result<(T, PlannedIpRepo), E>,
) -> Result<T, E> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(crate::networking::plan_global(
            &crate::networking::Addresses::new(AsyncStore::new(Arc::clone(store))),
            named,
            plan,
        ))
}

/// Plans against the store's addresses and applies the plan in one transaction, as a
/// deploy with a cloud config does; `then` may release addresses in the same plan.
fn in_store(
    store: &Arc<dyn Store>,
    nets: &[Network],
    director: IpSet,
    wanted: &[InstanceNetworks],
    then: impl Fn(&mut IpProvider<'_, PlannedIpRepo>, &[Assignment]),
) -> Result<Vec<Assignment>, NetworkError> {
    plan_global(store, &named_addresses(wanted), |repo| {
        let mut provider = IpProvider::new(nets, director.clone(), repo);
        let out = provider.plan(wanted)?;
        then(&mut provider, &out);
        Ok::<_, NetworkError>((out, provider.into_repo()))
    })
}

/// [`in_store`] without releases and without the director's own addresses.
fn planned(
    store: &Arc<dyn Store>,
    nets: &[Network],
    wanted: &[InstanceNetworks],
) -> Result<Vec<Assignment>, NetworkError> {
    in_store(store, nets, IpSet::new(), wanted, |_, _| {})
}

#[test]
fn dynamic_takes_the_lowest_free_address_skipping_every_restricted_one() {
    let nets = networks();
    let mut provider = IpProvider::new(&nets, director_ips(), InMemoryIpRepo::new());
    let instances: Vec<_> = (0..5)
        .map(|i| wants("d", &format!("i{i}"), "z1", &[("default", None)], &[]))
        .collect();
    let out = provider.plan(&instances).unwrap();
    let got: Vec<String> = out.iter().map(|a| first_ip(a).to_string()).collect();
    // .0 network, .1 gateway, .2-.3 reserved, .4 director, .10-.12 static, .15 broadcast.
    assert_eq!(
        got,
        ["10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9"]
    );
    assert!(out.iter().all(|a| a.changed));
}

#[test]
fn a_full_subnet_raises_not_enough_capacity_naming_everything() {
    let nets = networks();
    let mut provider = IpProvider::new(&nets, director_ips(), InMemoryIpRepo::new());
    // z2's subnet 10.0.1.0/29 has .2-.6 free.
    let instances: Vec<_> = (0..6)
        .map(|i| wants("d", &format!("i{i}"), "z2", &[("default", None)], &[]))
        .collect();
    let err = provider.plan(&instances).unwrap_err();
    assert!(matches!(err, NetworkError::NotEnoughCapacity { .. }));
    let text = err.to_string();
    assert!(
        text.contains("'i5'")
            && text.contains("'d'")
            && text.contains("'default'")
            && text.contains("'z2'"),
        "{text}"
    );
}

#[test]
fn static_reservations_are_checked_for_subnet_az_range_and_owner() {
    let nets = networks();
    let mut provider = IpProvider::new(&nets, director_ips(), InMemoryIpRepo::new());
    let ok = provider
        .plan(&[wants(
            "d",
            "a",
            "z1",
            &[("default", Some("10.0.0.10"))],
            &[],
        )])
        .unwrap();
    assert_eq!(first_ip(&ok[0]).to_string(), "10.0.0.10");

    let taken = provider
        .plan(&[wants(
            "d",
            "b",
            "z1",
            &[("default", Some("10.0.0.10"))],
            &[],
        )])
        .unwrap_err();
    assert!(
        matches!(taken, NetworkError::AlreadyInUse { .. }),
        "{taken}"
    );
    assert!(
        taken
            .to_string()
            .contains("already reserved by instance 'a' of deployment 'd'"),
        "{taken}"
    );

    let outside = provider
        .plan(&[wants("d", "c", "z1", &[("default", Some("10.5.0.1"))], &[])])
        .unwrap_err();
    assert!(
        matches!(outside, NetworkError::OutsideSubnet { .. }),
        "{outside}"
    );
    let reserved = provider
        .plan(&[wants("d", "c", "z1", &[("default", Some("10.0.0.2"))], &[])])
        .unwrap_err();
    assert!(
        matches!(reserved, NetworkError::Reserved { .. }),
        "{reserved}"
    );
    let wrong_az = provider
        .plan(&[wants(
            "d",
            "c",
            "z2",
            &[("default", Some("10.0.0.11"))],
            &[],
        )])
        .unwrap_err();
    assert!(
        matches!(wrong_az, NetworkError::WrongAz { .. }),
        "{wrong_az}"
    );
    let not_static = provider
        .plan(&[wants("d", "c", "z1", &[("default", Some("10.0.0.7"))], &[])])
        .unwrap_err();
    assert!(
        matches!(not_static, NetworkError::WrongType { .. }),
        "{not_static}"
    );
}

#[test]
fn two_reservations_on_one_network_raise_already_exists() {
    let nets = networks();
    let mut provider = IpProvider::new(&nets, IpSet::new(), InMemoryIpRepo::new());
    let err = provider
        .plan(&[wants(
            "d",
            "a",
            "z1",
            &[("default", None), ("default", Some("10.0.0.10"))],
            &[],
        )])
        .unwrap_err();
    assert!(matches!(err, NetworkError::AlreadyExists { .. }), "{err}");
}

#[test]
fn the_in_memory_repo_refuses_an_address_reserved_twice_in_a_deployment() {
    let nets = networks();
    let mut provider = IpProvider::new(&nets, IpSet::new(), InMemoryIpRepo::new());
    // Two agents report the same address.
    let err = provider
        .plan(&[
            wants(
                "d",
                "a",
                "z1",
                &[("default", None)],
                &[("default", "10.0.0.6")],
            ),
            wants(
                "d",
                "b",
                "z1",
                &[("default", None)],
                &[("default", "10.0.0.6")],
            ),
        ])
        .unwrap_err();
    assert!(matches!(err, NetworkError::AlreadyInUse { .. }), "{err}");
}

#[test]
fn the_in_memory_repo_does_not_share_ip_space_between_deployments() {
    let nets = networks();
    let a = IpProvider::new(&nets, IpSet::new(), InMemoryIpRepo::new())
        .plan(&[wants("a", "x", "z1", &[("default", None)], &[])])
        .unwrap();
    let b = IpProvider::new(&nets, IpSet::new(), InMemoryIpRepo::new())
        .plan(&[wants("b", "x", "z1", &[("default", None)], &[])])
        .unwrap();
    assert_eq!(first_ip(&a[0]), first_ip(&b[0]));
}

#[test]
fn the_database_repo_keeps_addresses_unique_across_deployments_and_lets_owners_reclaim() {
    let store = in_memory();
    let nets = networks();
    let a = planned(
        &store,
        &nets,
        &[wants("a", "x", "z1", &[("default", None)], &[])],
    )
    .unwrap();
    let b = planned(
        &store,
        &nets,
        &[wants("b", "x", "z1", &[("default", None)], &[])],
    )
    .unwrap();
    assert_ne!(first_ip(&a[0]), first_ip(&b[0]));
    // The owner's next deploy keeps its address.
    let again = planned(
        &store,
        &nets,
        &[wants(
            "a",
            "x",
            "z1",
            &[("default", None)],
            &[("default", &first_ip(&a[0]).to_string())],
        )],
    )
    .unwrap();
    assert_eq!(first_ip(&again[0]), first_ip(&a[0]));
    assert!(!again[0].changed);
    // Someone else claiming it is refused.
    let stolen = planned(
        &store,
        &nets,
        &[wants(
            "c",
            "y",
            "z1",
            &[("default", None)],
            &[("default", &first_ip(&a[0]).to_string())],
        )],
    )
    .unwrap_err();
    assert!(
        stolen
            .to_string()
            .contains("already reserved by instance 'x' of deployment 'a'"),
        "{stolen}"
    );
}

#[test]
fn concurrent_deploys_never_get_the_same_address() {
    let store = in_memory();
    let nets = networks();
    let wanted = |d: &str, i: &str| [wants(d, i, "z1", &[("default", None)], &[])];
    // Two plans from the same snapshot pick the same address; the first applies, the
    // second finds it taken and nothing of it is applied.
    let plan = |d: &str, i: &str| {
        let repo = PlannedIpRepo::new(store.claimed().unwrap(), []);
        let mut provider = IpProvider::new(&nets, IpSet::new(), repo);
        let out = provider.plan(&wanted(d, i)).unwrap();
        let (claims, releases) = provider.into_repo().into_changes();
        assert!(releases.is_empty());
        let claims: Vec<fleet_store::IpClaim> = claims.into_iter().map(Into::into).collect();
        (out, claims)
    };
    let (a, a_claims) = plan("a", "x");
    let (b, b_claims) = plan("b", "y");
    assert_eq!(
        first_ip(&a[0]),
        first_ip(&b[0]),
        "the same snapshot, the same choice"
    );
    assert_eq!(store.apply_ips(&a_claims, &[]).unwrap(), Ok(()));
    let lost = store.apply_ips(&b_claims, &[]).unwrap().unwrap_err();
    assert_eq!(Owner::from(lost.owner), owner("a", "x"));
    assert_eq!(
        store.ips_in(0, u32::MAX).unwrap().len(),
        1,
        "the losing plan left nothing"
    );
    // Made again through the deploy's path, the loser gets the next address.
    let mut seen: std::collections::BTreeSet<Ipv4Addr> = [first_ip(&a[0])].into();
    let again = planned(&store, &nets, &wanted("b", "y")).unwrap();
    assert!(seen.insert(first_ip(&again[0])));
    for i in 0..3 {
        let a = planned(&store, &nets, &wanted("a", &format!("x{i}x"))).unwrap();
        let b = planned(&store, &nets, &wanted("b", &format!("y{i}y"))).unwrap();
        assert!(seen.insert(first_ip(&a[0])));
        assert!(seen.insert(first_ip(&b[0])));
    }
    assert_eq!(store.ips_in(0, u32::MAX).unwrap().len(), 8);
}

#[test]
fn dynamic_and_vip_networks_follow_their_rules() {
    let nets = networks();
    let mut provider = IpProvider::new(&nets, IpSet::new(), InMemoryIpRepo::new());
    let out = provider
        .plan(&[wants(
            "d",
            "a",
            "z1",
            &[("iaas", None), ("public", Some("203.0.113.7"))],
            &[],
        )])
        .unwrap();
    assert_eq!(out[0].ips[0], ("iaas".to_string(), None), "the IaaS picks");
    assert_eq!(to_ip(out[0].ips[1].1.unwrap()).to_string(), "203.0.113.7");
    let static_on_dynamic = provider
        .plan(&[wants("d", "b", "z1", &[("iaas", Some("10.0.0.5"))], &[])])
        .unwrap_err();
    assert!(matches!(static_on_dynamic, NetworkError::WrongType { .. }));
    let vip_without_ip = provider
        .plan(&[wants("d", "b", "z1", &[("public", None)], &[])])
        .unwrap_err();
    assert!(matches!(vip_without_ip, NetworkError::WrongType { .. }));
    let vip_taken = provider
        .plan(&[wants(
            "d",
            "b",
            "z1",
            &[("public", Some("203.0.113.7"))],
            &[],
        )])
        .unwrap_err();
    assert!(matches!(vip_taken, NetworkError::AlreadyInUse { .. }));
}

#[test]
fn compilation_vms_get_a_dynamic_address_released_afterwards() {
    let store = in_memory();
    let nets = networks();
    let worker = owner("d", "compilation-1");
    let ip = plan_global(&store, &[], |repo| {
        let mut provider = IpProvider::new(&nets, IpSet::new(), repo);
        let ip = provider.reserve_compilation("default", &worker, Some("z1"))?;
        Ok::<_, NetworkError>((ip, provider.into_repo()))
    })
    .unwrap()
    .unwrap();
    assert_eq!(
        Owner::from(store.ips_of("d").unwrap()[0].owner.clone()),
        worker
    );
    plan_global(&store, &[ip], |repo| {
        let mut provider = IpProvider::new(&nets, IpSet::new(), repo);
        provider.release(
            &worker,
            &Held {
                network: "default".into(),
                ip,
            },
        )?;
        Ok::<_, NetworkError>(((), provider.into_repo()))
    })
    .unwrap();
    assert!(store.ips_of("d").unwrap().is_empty());
}

/// One deployment's deploy against the store: existing reservations come from it, obsolete
/// ones are released after the (simulated) VM recreation unless `vm_fails`.
fn deploy(
    store: &Arc<dyn Store>,
    nets: &[Network],
    deployment: &str,
    instances: &[(&str, &str, &str)],
    vm_fails: bool,
) -> Result<Vec<Assignment>, NetworkError> {
    let held = store.ips_of(deployment).unwrap();
    let wanted: Vec<InstanceNetworks> = instances
        .iter()
        .map(|(id, az, network)| InstanceNetworks {
            owner: owner(deployment, id),
            az: Some(az.to_string()),
            desired: vec![Desired {
                network: network.to_string(),
                static_ip: None,
            }],
            existing: held
                .iter()
                .filter(|r| r.owner.instance == *id)
                .map(|r| Held {
                    network: r.network.clone(),
                    ip: r.address,
                })
                .collect(),
        })
        .collect();
    // Every held address is named: unwanted instances give theirs back in the same plan.
    let named: Vec<u32> = held.iter().map(|r| r.address).collect();
    plan_global(store, &named, |repo| {
        let mut provider = IpProvider::new(nets, director_ips(), repo);
        let out = provider.plan(&wanted)?;
        // Instances no longer wanted release everything.
        for record in &held {
            if !instances
                .iter()
                .any(|(id, _, _)| *id == record.owner.instance)
            {
                provider.release(
                    &Owner::from(record.owner.clone()),
                    &Held {
                        network: record.network.clone(),
                        ip: record.address,
                    },
                )?;
            }
        }
        if !vm_fails {
            for a in &out {
                for held in &a.obsolete {
                    provider.release(&a.owner, held)?;
                }
            }
        }
        Ok::<_, NetworkError>((out, provider.into_repo()))
    })
}

#[test]
fn the_seeds_cases_keep_release_and_move_addresses_as_described() {
    let store = in_memory();
    let nets = networks();
    let first = deploy(
        &store,
        &nets,
        "d",
        &[("a", "z1", "default"), ("b", "z1", "default")],
        false,
    )
    .unwrap();
    let (a_ip, b_ip) = (first[0].ips[0].1.unwrap(), first[1].ips[0].1.unwrap());

    // VM deleted in the IaaS, `stop --hard`, cloud-check recreate: the instance still owns
    // its address, nobody else can take it, and the new VM gets it back.
    let other = deploy(&store, &nets, "e", &[("x", "z1", "default")], false).unwrap();
    assert_ne!(other[0].ips[0].1, Some(a_ip));
    let again = deploy(
        &store,
        &nets,
        "d",
        &[("a", "z1", "default"), ("b", "z1", "default")],
        false,
    )
    .unwrap();
    assert_eq!(again[0].ips[0].1, Some(a_ip));
    assert!(!again[0].changed);

    // Scale down: b's address is released and free for others.
    deploy(&store, &nets, "d", &[("a", "z1", "default")], false).unwrap();
    assert!(store.ips_of("d").unwrap().iter().all(|r| r.address != b_ip));
    let reuse = deploy(&store, &nets, "f", &[("y", "z1", "default")], false).unwrap();
    assert_eq!(reuse[0].ips[0].1, Some(b_ip));

    // Network change whose VM creation fails: both addresses are held...
    let moved = deploy(&store, &nets, "d", &[("a", "z1", "other")], true).unwrap();
    let new_ip = moved[0].ips[0].1.unwrap();
    assert!(moved[0].changed);
    let held: Vec<u32> = store
        .ips_of("d")
        .unwrap()
        .iter()
        .map(|r| r.address)
        .collect();
    assert!(held.contains(&a_ip) && held.contains(&new_ip), "{held:?}");
    // ... and the next deploy keeps the new one and releases the old.
    let settled = deploy(&store, &nets, "d", &[("a", "z1", "other")], false).unwrap();
    assert_eq!(settled[0].ips[0].1, Some(new_ip));
    assert_eq!(store.ips_of("d").unwrap().len(), 1);

    // The network is removed: its address goes through the default network and subnet.
    let mut without = nets.clone();
    without.retain(|n| n.name != "other");
    let released = deploy(&store, &without, "d", &[("a", "z1", "default")], false).unwrap();
    assert_eq!(
        released[0].obsolete,
        vec![Held {
            network: "other".into(),
            ip: new_ip
        }]
    );
    let held: Vec<u32> = store
        .ips_of("d")
        .unwrap()
        .iter()
        .map(|r| r.address)
        .collect();
    assert_eq!(held, vec![released[0].ips[0].1.unwrap()]);
}

#[test]
fn a_static_address_stays_bound_and_a_changed_one_moves() {
    let store = in_memory();
    let nets = networks();
    planned(
        &store,
        &nets,
        &[wants(
            "d",
            "a",
            "z1",
            &[("default", Some("10.0.0.10"))],
            &[],
        )],
    )
    .unwrap();
    let same = planned(
        &store,
        &nets,
        &[wants(
            "d",
            "a",
            "z1",
            &[("default", Some("10.0.0.10"))],
            &[("default", "10.0.0.10")],
        )],
    )
    .unwrap();
    assert!(!same[0].changed);
    let moved = planned(
        &store,
        &nets,
        &[wants(
            "d",
            "a",
            "z1",
            &[("default", Some("10.0.0.11"))],
            &[("default", "10.0.0.10")],
        )],
    )
    .unwrap();
    assert!(moved[0].changed);
    assert_eq!(
        moved[0].obsolete,
        vec![Held {
            network: "default".into(),
            ip: ip("10.0.0.10")
        }]
    );
}

mod properties {
    use std::collections::{BTreeMap, HashMap};

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Step {
        /// Deploy `deployment` with `count` instances on `network`; the VMs of changed
        /// instances fail to create when `fails`.
        Deploy {
            deployment: usize,
            count: usize,
            network: bool,
            fails: bool,
        },
        Delete {
            deployment: usize,
        },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0usize..3, 0usize..6, any::<bool>(), prop::bool::weighted(0.2))
                .prop_map(|(deployment, count, network, fails)| Step::Deploy { deployment, count, network, fails }),
            1 => (0usize..3).prop_map(|deployment| Step::Delete { deployment }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn addresses_are_never_shared_leaked_or_restricted(steps in prop::collection::vec(step(), 1..25)) {
            let store = in_memory();
            let nets = networks();
            let director = director_ips();
            let restricted: Vec<(u32, u32, &Subnet)> = nets
                .iter()
                .filter_map(|n| match &n.kind { NetworkKind::Manual(s) => Some(s), _ => None })
                .flatten()
                .map(|s| (s.first, s.last, s))
                .collect();
            // Instances alive per deployment: a failed deploy deletes nothing, so the old
            // ones live on beside the new.
            let mut live: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
            // The addresses each deployment's last successful plan gave its instances.
            let mut assigned: HashMap<String, Vec<(String, u32)>> = HashMap::new();
            for step in steps {
                let (name, wanted, ok, settled) = match step {
                    Step::Deploy { deployment, count, network, fails } => {
                        let name = format!("d{deployment}");
                        let net = if network { "other" } else { "default" };
                        let list: Vec<(String, &str, &str)> = (0..count).map(|i| (format!("i{i}"), "z1", net)).collect();
                        let refs: Vec<(&str, &str, &str)> = list.iter().map(|(a, b, c)| (a.as_str(), *b, *c)).collect();
                        // Running out of addresses is a legal outcome; anything else is not.
                        let ok = match deploy(&store, &nets, &name, &refs, fails) {
                            Ok(out) => {
                                let ips = out
                                    .iter()
                                    .flat_map(|a| a.ips.iter().filter_map(|(_, ip)| ip.map(|ip| (a.owner.instance.clone(), ip))))
                                    .collect();
                                assigned.insert(name.clone(), ips);
                                true
                            }
                            Err(NetworkError::NotEnoughCapacity { .. }) => false,
                            Err(e) => { prop_assert!(false, "unexpected error: {e}"); false }
                        };
                        (name, list.into_iter().map(|(id, _, _)| id).collect::<Vec<_>>(), ok, ok && !fails)
                    }
                    Step::Delete { deployment } => {
                        let name = format!("d{deployment}");
                        deploy(&store, &nets, &name, &[], false).unwrap();
                        assigned.insert(name.clone(), Vec::new());
                        (name, Vec::new(), true, true)
                    }
                };
                let alive = live.entry(name.clone()).or_default();
                if ok {
                    *alive = wanted.into_iter().collect();
                } else {
                    alive.extend(wanted);
                }
                // No leak: every address of the deployment belongs to a live instance.
                for record in store.ips_of(&name).unwrap() {
                    prop_assert!(alive.contains(&record.owner.instance), "{record:?} leaked");
                }
                // Never shared: no plan gives an address that another live instance was given,
                // and what a plan gave is what the store records for that instance.
                let mut given: HashMap<u32, (String, String)> = HashMap::new();
                for (deployment, ips) in &assigned {
                    let recorded = store.ips_of(deployment).unwrap();
                    for (instance, ip) in ips {
                        if let Some(other) = given.insert(*ip, (deployment.clone(), instance.clone())) {
                            prop_assert!(false, "{ip} given to {other:?} and to {deployment}/{instance}");
                        }
                        prop_assert!(
                            recorded.iter().any(|r| r.address == *ip && r.owner.instance == *instance),
                            "{deployment}/{instance} was given {ip}, which the store does not record as its own"
                        );
                    }
                }
                // One address per instance and network, but while a failed move holds both.
                if settled {
                    let mut per_instance: BTreeMap<(String, String), usize> = BTreeMap::new();
                    for r in store.ips_of(&name).unwrap() {
                        *per_instance.entry((r.owner.instance, r.network)).or_default() += 1;
                    }
                    for (key, held) in per_instance {
                        prop_assert_eq!(held, 1, "{}/{:?} holds {} addresses", name, key, held);
                    }
                }
                // Never restricted.
                for d in 0..3 {
                    for r in store.ips_of(&format!("d{d}")).unwrap() {
                        let subnet = restricted.iter().find(|(f, l, _)| (*f..=*l).contains(&r.address));
                        prop_assert!(subnet.is_some_and(|(_, _, s)| !s.restricted(r.address, &director) || s.statics.contains(r.address)));
                    }
                }
            }
        }
    }
}
