use std::net::Ipv4Addr;

use fleet_ipset::{IpSet, to_ip};

/// Who holds an address: an instance (or a compilation VM) of a deployment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub deployment: String,
    pub instance: String,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "instance '{}' of deployment '{}'",
            self.instance, self.deployment
        )
    }
}

impl From<fleet_store::IpHolder> for Owner {
    fn from(holder: fleet_store::IpHolder) -> Self {
        Owner {
            deployment: holder.deployment,
            instance: holder.instance,
        }
    }
}

impl From<&Owner> for fleet_store::IpHolder {
    fn from(owner: &Owner) -> Self {
        fleet_store::IpHolder {
            deployment: owner.deployment.clone(),
            instance: owner.instance.clone(),
        }
    }
}

/// A subnet of a manual network.
#[derive(Debug, Clone, PartialEq)]
pub struct Subnet {
    /// First and last address of the range (the network and broadcast addresses).
    pub first: u32,
    pub last: u32,
    pub prefix: u8,
    pub gateway: u32,
    pub dns: Vec<Ipv4Addr>,
    pub reserved: IpSet,
    pub statics: IpSet,
    pub azs: Vec<String>,
    pub cloud_properties: serde_json::Value,
}

impl Subnet {
    pub fn contains(&self, ip: u32) -> bool {
        (self.first..=self.last).contains(&ip)
    }

    /// What a dynamic reservation never gets: network, broadcast, gateway, reserved
    /// ranges, static ranges and the director's own addresses.
    pub fn blocked(&self, director: &IpSet) -> IpSet {
        let mut blocked = self.reserved.clone();
        blocked.extend(&self.statics);
        blocked.insert(self.first);
        blocked.insert(self.last);
        blocked.insert(self.gateway);
        for (s, e) in director.ranges() {
            if e >= self.first && s <= self.last {
                blocked.insert_range(s.max(self.first), e.min(self.last));
            }
        }
        blocked
    }

    /// Reserved for no instance: network, broadcast, gateway, reserved ranges, director.
    pub fn restricted(&self, ip: u32, director: &IpSet) -> bool {
        ip == self.first
            || ip == self.last
            || ip == self.gateway
            || self.reserved.contains(ip)
            || director.contains(ip)
    }

    pub fn in_az(&self, az: Option<&str>) -> bool {
        match az {
            None => true,
            Some(az) => self.azs.is_empty() || self.azs.iter().any(|a| a == az),
        }
    }

    pub fn describe(&self) -> String {
        format!("{}/{}", to_ip(self.first), self.prefix)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum NetworkKind {
    Manual(Vec<Subnet>),
    /// The IaaS picks the addresses; the subnets only say which AZs it serves.
    Dynamic {
        azs: Vec<String>,
    },
    /// Public addresses given per instance (`static_ips`), or allocated from its list.
    Vip {
        statics: IpSet,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub name: String,
    pub kind: NetworkKind,
}

impl Network {
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            NetworkKind::Manual(_) => "manual",
            NetworkKind::Dynamic { .. } => "dynamic",
            NetworkKind::Vip { .. } => "vip",
        }
    }

    /// The network an address is released through when its own network is gone from the
    /// configuration: one subnet `0.0.0.0/0` that every address belongs to, so that the
    /// release takes the normal code path.
    pub fn default_for(name: &str) -> Network {
        Network {
            name: name.to_string(),
            kind: NetworkKind::Manual(vec![Subnet {
                first: 0,
                last: u32::MAX,
                prefix: 0,
                gateway: 0,
                dns: Vec::new(),
                reserved: IpSet::new(),
                statics: IpSet::new(),
                azs: Vec::new(),
                cloud_properties: serde_json::Value::Null,
            }]),
        }
    }
}
