//! A VM's networks as `create_vm` takes them: each with its type and, for a manual one,
//! the address and what its subnet says (netmask, gateway, DNS servers, cloud
//! properties); the first network is the default for DNS and the gateway. Pure: the
//! networks and the addresses in, the document out.

use serde_json::{Map, Value, json};

use super::model::{Network, NetworkKind};
use fleet_ipset::to_ip;

/// The netmask of a prefix length.
fn netmask(prefix: u8) -> std::net::Ipv4Addr {
    let bits = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    };
    std::net::Ipv4Addr::from(bits)
}

/// The settings of each network in `addresses` (name, address where one is given).
pub fn vm_networks(nets: &[Network], addresses: &[(String, Option<u32>)]) -> Value {
    let mut out = Map::new();
    for (i, (name, ip)) in addresses.iter().enumerate() {
        let network = nets.iter().find(|n| &n.name == name);
        let mut spec = Map::new();
        let kind = network.map_or("manual", Network::kind_name);
        spec.insert("type".into(), json!(kind));
        if let Some(ip) = ip {
            spec.insert("ip".into(), json!(to_ip(*ip).to_string()));
        }
        let subnet = match (network.map(|n| &n.kind), ip) {
            (Some(NetworkKind::Manual(subnets)), Some(ip)) => {
                subnets.iter().find(|s| s.contains(*ip))
            }
            _ => None,
        };
        match subnet {
            Some(subnet) => {
                spec.insert("netmask".into(), json!(netmask(subnet.prefix).to_string()));
                spec.insert("gateway".into(), json!(to_ip(subnet.gateway).to_string()));
                if !subnet.dns.is_empty() {
                    let dns: Vec<String> = subnet.dns.iter().map(ToString::to_string).collect();
                    spec.insert("dns".into(), json!(dns));
                }
                let properties = if subnet.cloud_properties.is_null() {
                    json!({})
                } else {
                    subnet.cloud_properties.clone()
                };
                spec.insert("cloud_properties".into(), properties);
            }
            None => {
                spec.insert("cloud_properties".into(), json!({}));
            }
        }
        if i == 0 {
            spec.insert("default".into(), json!(["dns", "gateway"]));
        }
        out.insert(name.clone(), Value::Object(spec));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_ipset::{IpSet, to_u32};

    #[test]
    fn a_manual_address_carries_its_subnet_and_a_dynamic_one_its_type() {
        let subnet = super::super::model::Subnet {
            first: to_u32("10.0.0.0".parse().unwrap()),
            last: to_u32("10.0.0.255".parse().unwrap()),
            prefix: 24,
            gateway: to_u32("10.0.0.1".parse().unwrap()),
            dns: vec!["8.8.8.8".parse().unwrap()],
            reserved: IpSet::new(),
            statics: IpSet::new(),
            azs: Vec::new(),
            cloud_properties: json!({"name": "net-1"}),
        };
        let nets = vec![
            Network {
                name: "default".into(),
                kind: NetworkKind::Manual(vec![subnet]),
            },
            Network {
                name: "public".into(),
                kind: NetworkKind::Dynamic { azs: Vec::new() },
            },
        ];
        let ip = to_u32("10.0.0.5".parse().unwrap());
        let settings = vm_networks(
            &nets,
            &[("default".into(), Some(ip)), ("public".into(), None)],
        );
        assert_eq!(
            settings,
            json!({
                "default": {
                    "type": "manual", "ip": "10.0.0.5", "netmask": "255.255.255.0",
                    "gateway": "10.0.0.1", "dns": ["8.8.8.8"],
                    "cloud_properties": {"name": "net-1"}, "default": ["dns", "gateway"],
                },
                "public": {"type": "dynamic", "cloud_properties": {}},
            })
        );
    }
}
