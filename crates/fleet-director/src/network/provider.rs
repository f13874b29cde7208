//! The reservation flow of a deploy (seed 001): desired reservations per instance (one per
//! network), existing reservations reserved first, existing bound to desired where they
//! fit, the rest reserved by network type. Releases go through the network the address
//! was on, or a default network covering everything when that network is gone.

use std::collections::{BTreeSet, HashMap};

use super::error::NetworkError;
use super::model::{Network, NetworkKind};
use super::repo::{IpRepo, Owner};
use fleet_ipset::{IpSet, to_ip};

/// What an instance wants on one network: a static address, or any (dynamic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub network: String,
    pub static_ip: Option<u32>,
}

/// An address an instance holds now.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Held {
    pub network: String,
    pub ip: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceNetworks {
    pub owner: Owner,
    pub az: Option<String>,
    pub desired: Vec<Desired>,
    pub existing: Vec<Held>,
}

/// The outcome for one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub owner: Owner,
    /// One per desired network, in order; `None` where the IaaS picks (dynamic networks).
    pub ips: Vec<(String, Option<u32>)>,
    /// Held addresses no desired reservation kept: released once the VM has its new ones.
    pub obsolete: Vec<Held>,
    /// Some address is new: the VM must be recreated to get it.
    pub changed: bool,
}

/// The addresses a plan of `wanted` may claim by name: those the instances hold, and the
/// static ones they ask for. Their holders must be known before planning.
pub fn named_addresses(wanted: &[InstanceNetworks]) -> Vec<u32> {
    wanted
        .iter()
        .flat_map(|w| {
            w.existing
                .iter()
                .map(|h| h.ip)
                .chain(w.desired.iter().filter_map(|d| d.static_ip))
        })
        .collect()
}

pub struct IpProvider<'n, R> {
    networks: &'n [Network],
    director: IpSet,
    repo: R,
    blocked: HashMap<(String, usize), IpSet>,
}

impl<'n, R: IpRepo> IpProvider<'n, R> {
    /// `director` holds the director's own addresses, which no instance gets.
    pub fn new(networks: &'n [Network], director: IpSet, repo: R) -> Self {
        IpProvider {
            networks,
            director,
            repo,
            blocked: HashMap::new(),
        }
    }

    pub fn into_repo(self) -> R {
        self.repo
    }

    fn network(&self, name: &str) -> Option<&'n Network> {
        self.networks.iter().find(|n| n.name == name)
    }

    /// Claims `ip` for `owner`, turning a refusal into `AlreadyInUse`.
    fn claim(
        &mut self,
        network: &str,
        ip: u32,
        owner: &Owner,
        is_static: bool,
    ) -> Result<(), NetworkError> {
        match self.repo.add(network, ip, owner, is_static) {
            Ok(()) => Ok(()),
            Err(holder) => Err(NetworkError::AlreadyInUse {
                ip: to_ip(ip),
                instance: owner.instance.clone(),
                deployment: owner.deployment.clone(),
                network: network.to_string(),
                holder: if holder.deployment == owner.deployment {
                    format!("{holder} (swapping static IPs between instances is not supported)")
                } else {
                    holder.to_string()
                },
            }),
        }
    }

    /// Plans every instance's addresses; claims them in the repo as it goes.
    ///
    /// # Errors
    /// The first reservation error, naming instance, deployment, network and address.
    pub fn plan(
        &mut self,
        instances: &[InstanceNetworks],
    ) -> Result<Vec<Assignment>, NetworkError> {
        for instance in instances {
            let mut seen = BTreeSet::new();
            for d in &instance.desired {
                if !seen.insert(&d.network) {
                    return Err(NetworkError::AlreadyExists {
                        instance: instance.owner.instance.clone(),
                        deployment: instance.owner.deployment.clone(),
                        network: d.network.clone(),
                    });
                }
                if self.network(&d.network).is_none() {
                    return Err(NetworkError::UnknownNetwork {
                        instance: instance.owner.instance.clone(),
                        deployment: instance.owner.deployment.clone(),
                        network: d.network.clone(),
                    });
                }
            }
        }
        // Existing reservations first, so that new ones never take them.
        for instance in instances {
            for held in &instance.existing {
                let Some(network) = self.network(&held.network) else {
                    continue;
                };
                let reservable = match &network.kind {
                    NetworkKind::Manual(subnets) => subnets
                        .iter()
                        .any(|s| s.contains(held.ip) && !s.restricted(held.ip, &self.director)),
                    NetworkKind::Vip { .. } => true,
                    NetworkKind::Dynamic { .. } => false,
                };
                if reservable {
                    let is_static = matches!(&network.kind, NetworkKind::Manual(s) if s.iter().any(|s| s.statics.contains(held.ip)));
                    self.claim(&held.network, held.ip, &instance.owner, is_static)?;
                }
            }
        }
        let mut out = Vec::with_capacity(instances.len());
        for instance in instances {
            let mut unbound: Vec<Held> = instance.existing.clone();
            let mut ips = Vec::new();
            let mut changed = false;
            for d in &instance.desired {
                let network = self.network(&d.network).expect("checked above");
                if matches!(network.kind, NetworkKind::Dynamic { .. }) && d.static_ip.is_none() {
                    // The IaaS assigns and keeps the address; the director holds none, so
                    // whatever is held on a dynamic network (say, from when it was manual)
                    // is obsolete, and nothing changes for the VM.
                    ips.push((d.network.clone(), None));
                    continue;
                }
                let fits = |h: &Held| {
                    h.network == d.network
                        && match (&network.kind, d.static_ip) {
                            // A held static address is kept only while it is still a valid
                            // static address for this instance; otherwise reserving it
                            // again raises the error that says why.
                            (NetworkKind::Manual(subnets), Some(ip)) => {
                                h.ip == ip
                                    && subnets.iter().any(|s| {
                                        s.contains(ip)
                                            && s.in_az(instance.az.as_deref())
                                            && s.statics.contains(ip)
                                            && !s.restricted(ip, &self.director)
                                    })
                            }
                            (_, Some(ip)) => h.ip == ip,
                            (NetworkKind::Manual(subnets), None) => subnets.iter().any(|s| {
                                s.contains(h.ip)
                                    && s.in_az(instance.az.as_deref())
                                    && !s.statics.contains(h.ip)
                                    && !s.restricted(h.ip, &self.director)
                            }),
                            (_, None) => false,
                        }
                };
                if let Some(i) = unbound.iter().position(fits) {
                    let held = unbound.remove(i);
                    ips.push((d.network.clone(), Some(held.ip)));
                    continue;
                }
                changed = true;
                let ip = self.reserve(network, d, instance)?;
                ips.push((d.network.clone(), ip));
            }
            out.push(Assignment {
                owner: instance.owner.clone(),
                ips,
                obsolete: unbound,
                changed,
            });
        }
        Ok(out)
    }

    fn reserve(
        &mut self,
        network: &Network,
        d: &Desired,
        instance: &InstanceNetworks,
    ) -> Result<Option<u32>, NetworkError> {
        let owner = &instance.owner;
        let wrong_type = |reason: &str| NetworkError::WrongType {
            instance: owner.instance.clone(),
            deployment: owner.deployment.clone(),
            network: network.name.clone(),
            kind: network.kind_name().into(),
            reason: reason.into(),
        };
        match (&network.kind, d.static_ip) {
            (NetworkKind::Manual(subnets), Some(ip)) => {
                let fail =
                    |variant: fn(std::net::Ipv4Addr, String, String, String) -> NetworkError| {
                        variant(
                            to_ip(ip),
                            owner.instance.clone(),
                            owner.deployment.clone(),
                            network.name.clone(),
                        )
                    };
                let Some(subnet) = subnets.iter().find(|s| s.contains(ip)) else {
                    return Err(fail(|ip, instance, deployment, network| {
                        NetworkError::OutsideSubnet {
                            ip,
                            instance,
                            deployment,
                            network,
                        }
                    }));
                };
                if !subnet.in_az(instance.az.as_deref()) {
                    return Err(NetworkError::WrongAz {
                        ip: to_ip(ip),
                        instance: owner.instance.clone(),
                        deployment: owner.deployment.clone(),
                        network: network.name.clone(),
                        az: instance.az.clone().unwrap_or_default(),
                    });
                }
                if subnet.restricted(ip, &self.director) {
                    return Err(fail(|ip, instance, deployment, network| {
                        NetworkError::Reserved {
                            ip,
                            instance,
                            deployment,
                            network,
                        }
                    }));
                }
                if !subnet.statics.contains(ip) {
                    return Err(wrong_type(&format!(
                        "IP '{}' is not in the subnet's static range",
                        to_ip(ip)
                    )));
                }
                self.claim(&network.name, ip, owner, true)?;
                Ok(Some(ip))
            }
            (NetworkKind::Manual(subnets), None) => {
                for (i, subnet) in subnets.iter().enumerate() {
                    if !subnet.in_az(instance.az.as_deref()) {
                        continue;
                    }
                    let blocked = self
                        .blocked
                        .entry((network.name.clone(), i))
                        .or_insert_with(|| subnet.blocked(&self.director));
                    if let Some(ip) = self.repo.allocate(&network.name, subnet, blocked, owner) {
                        return Ok(Some(ip));
                    }
                }
                Err(NetworkError::NotEnoughCapacity {
                    instance: owner.instance.clone(),
                    deployment: owner.deployment.clone(),
                    network: network.name.clone(),
                    az: instance
                        .az
                        .as_deref()
                        .map_or("any availability zone".into(), |az| {
                            format!("availability zone '{az}'")
                        }),
                })
            }
            (NetworkKind::Dynamic { .. }, Some(_)) => Err(wrong_type(
                "dynamic networks take no static IPs; the IaaS assigns them",
            )),
            (NetworkKind::Dynamic { .. }, None) => Ok(None),
            (NetworkKind::Vip { .. }, None) => Err(wrong_type("vip networks take only static IPs")),
            (NetworkKind::Vip { .. }, Some(ip)) => {
                self.claim(&network.name, ip, owner, true)?;
                Ok(Some(ip))
            }
        }
    }

    /// A dynamic reservation for a compilation VM on the compilation network.
    ///
    /// # Errors
    /// As for any dynamic reservation.
    pub fn reserve_compilation(
        &mut self,
        network: &str,
        owner: &Owner,
        az: Option<&str>,
    ) -> Result<Option<u32>, NetworkError> {
        let Some(net) = self.network(network) else {
            return Err(NetworkError::UnknownNetwork {
                instance: owner.instance.clone(),
                deployment: owner.deployment.clone(),
                network: network.to_string(),
            });
        };
        let instance = InstanceNetworks {
            owner: owner.clone(),
            az: az.map(str::to_string),
            desired: Vec::new(),
            existing: Vec::new(),
        };
        self.reserve(
            net,
            &Desired {
                network: network.to_string(),
                static_ip: None,
            },
            &instance,
        )
    }

    /// Releases an address `owner` holds, through its network, or through a default
    /// network with one subnet `0.0.0.0/0` when its network is gone, so that every release
    /// takes the same path.
    ///
    /// # Errors
    /// None today: planning does no I/O. Kept fallible so that callers treat releases as
    /// they treat claims.
    pub fn release(&mut self, owner: &Owner, held: &Held) -> Result<(), NetworkError> {
        let default;
        let network = match self.network(&held.network) {
            Some(n) => n,
            None => {
                default = Network::default_for(&held.network);
                &default
            }
        };
        self.repo.release(&network.name, held.ip, owner);
        Ok(())
    }
}
