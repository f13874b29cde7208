//! Networks from a cloud config or a manifest, with every problem named by network,
//! subnet and key.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::model::{Network, NetworkKind, Subnet};
use fleet_ipset::{IpSet, to_u32};
use fleet_yaml::{Checker, Node, Value, join};

const NETWORK: &[&str] = &["name", "type", "subnets", "dns", "cloud_properties"];
const SUBNET: &[&str] = &[
    "range",
    "gateway",
    "dns",
    "reserved",
    "static",
    "az",
    "azs",
    "cloud_properties",
    "name",
];

/// What is wrong with an address, range or CIDR as written in a network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("`{0}` is IPv6, which this director does not support")]
    Ipv6(String),
    #[error("`{0}` is not an IPv4 address")]
    NotIpv4(String),
    #[error("`{0}` is not a CIDR range like `10.0.0.0/24`")]
    NotCidr(String),
    #[error("`{0}` has an invalid prefix")]
    Prefix(String),
    #[error("range `{0}` has host bits set")]
    HostBits(String),
    #[error("range `{0}` ends before it starts")]
    Reversed(String),
}

fn ip(text: &str) -> Result<u32, AddressError> {
    let text = text.trim();
    if text.contains(':') {
        return Err(AddressError::Ipv6(text.to_string()));
    }
    text.parse::<Ipv4Addr>()
        .map(to_u32)
        .map_err(|_| AddressError::NotIpv4(text.to_string()))
}

/// `a.b.c.d/n` with no host bits set: its first and last address and its prefix.
pub fn cidr(text: &str) -> Result<(u32, u32, u8), AddressError> {
    let (addr, prefix) = text
        .split_once('/')
        .ok_or_else(|| AddressError::NotCidr(text.to_string()))?;
    // The address is checked first, so that it is the address an error names.
    ip(addr)?;
    let net: Ipv4Net = format!("{}/{}", addr.trim(), prefix.trim())
        .parse()
        .map_err(|_| AddressError::Prefix(text.to_string()))?;
    if net.trunc() != net {
        return Err(AddressError::HostBits(text.to_string()));
    }
    Ok((
        to_u32(net.network()),
        to_u32(net.broadcast()),
        net.prefix_len(),
    ))
}

/// An address, a range `a - b`, or a CIDR, as `reserved` and `static` entries are written.
pub fn entry(text: &str) -> Result<(u32, u32), AddressError> {
    if let Some((a, b)) = text.split_once('-') {
        let (a, b) = (ip(a)?, ip(b)?);
        if a > b {
            return Err(AddressError::Reversed(text.to_string()));
        }
        return Ok((a, b));
    }
    if text.contains('/') {
        let (first, last, _) = cidr(text)?;
        return Ok((first, last));
    }
    let a = ip(text)?;
    Ok((a, a))
}

fn strings(checker: &mut Checker, node: &Node, path: &str) -> Vec<String> {
    match &node.value {
        Value::Seq(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, n)| checker.string(n, &format!("{path}[{i}]")))
            .collect(),
        Value::Str(s) => vec![s.clone()],
        other => {
            checker.report(
                path,
                node.at,
                format!("must be a list, found {}", other.kind()),
            );
            Vec::new()
        }
    }
}

fn ranges(checker: &mut Checker, node: &Node, path: &str, subnet: (u32, u32), what: &str) -> IpSet {
    let mut set = IpSet::new();
    for (i, text) in strings(checker, node, path).into_iter().enumerate() {
        let p = format!("{path}[{i}]");
        match entry(&text) {
            Ok((a, b)) if a >= subnet.0 && b <= subnet.1 => set.insert_range(a, b),
            Ok(_) => checker.report(
                &p,
                node.at,
                format!("{what} `{text}` is outside the subnet's range"),
            ),
            Err(e) => checker.report(&p, node.at, e.to_string()),
        }
    }
    set
}

fn read_subnet(
    checker: &mut Checker,
    node: &Node,
    path: &str,
    azs: Option<&[String]>,
) -> Option<Subnet> {
    let fields = checker.map(node, path, SUBNET);
    let get = |key: &str| fields.iter().find(|(k, _)| k.name == key).map(|(_, v)| v);
    let Some(range_node) = get("range") else {
        checker.report(&join(path, "range"), node.at, "is required");
        return None;
    };
    let range_text = checker.string(range_node, &join(path, "range"))?;
    let (first, last, prefix) = match cidr(&range_text) {
        Ok(r) if r.2 <= 31 => r,
        Ok(_) => {
            checker.report(
                &join(path, "range"),
                range_node.at,
                format!("`{range_text}` must include at least 2 addresses"),
            );
            return None;
        }
        Err(e) => {
            checker.report(&join(path, "range"), range_node.at, e.to_string());
            return None;
        }
    };
    let gateway = match get("gateway") {
        None => {
            checker.report(&join(path, "gateway"), node.at, "is required");
            None
        }
        Some(g) => {
            let gp = join(path, "gateway");
            checker.string(g, &gp).and_then(|text| match ip(&text) {
                Ok(gw) if gw == first || gw == last => {
                    checker.report(
                        &gp,
                        g.at,
                        format!("`{text}` is the network or broadcast address of `{range_text}`"),
                    );
                    None
                }
                Ok(gw) if gw < first || gw > last => {
                    checker.report(
                        &gp,
                        g.at,
                        format!("`{text}` is outside the range `{range_text}`"),
                    );
                    None
                }
                Ok(gw) => Some(gw),
                Err(e) => {
                    checker.report(&gp, g.at, e.to_string());
                    None
                }
            })
        }
    };
    let dns = get("dns")
        .map(|d| {
            strings(checker, d, &join(path, "dns"))
                .iter()
                .filter_map(|t| t.parse::<Ipv4Addr>().ok())
                .collect()
        })
        .unwrap_or_default();
    let reserved = get("reserved")
        .map(|r| {
            ranges(
                checker,
                r,
                &join(path, "reserved"),
                (first, last),
                "reserved address",
            )
        })
        .unwrap_or_default();
    let statics = get("static")
        .map(|s| {
            ranges(
                checker,
                s,
                &join(path, "static"),
                (first, last),
                "static address",
            )
        })
        .unwrap_or_default();
    if let (Some(gw), Some(node)) = (gateway, get("static")) {
        for (s, e) in statics.ranges() {
            if (s..=e).contains(&gw)
                || (s..=e).contains(&first)
                || (s..=e).contains(&last)
                || reserved.ranges().any(|(a, b)| a <= e && s <= b)
            {
                checker.report(&join(path, "static"), node.at, "static addresses must not include the gateway, the network or broadcast address, or reserved addresses");
                break;
            }
        }
    }
    let mut subnet_azs = Vec::new();
    if let Some(az) = get("az") {
        subnet_azs.extend(checker.string(az, &join(path, "az")));
    }
    if let Some(list) = get("azs") {
        subnet_azs.extend(strings(checker, list, &join(path, "azs")));
    }
    if let Some(known) = azs {
        for az in &subnet_azs {
            if !known.contains(az) {
                checker.report(
                    &join(path, "azs"),
                    node.at,
                    format!("unknown availability zone `{az}`"),
                );
            }
        }
    }
    Some(Subnet {
        first,
        last,
        prefix,
        gateway: gateway?,
        dns,
        reserved,
        statics,
        azs: subnet_azs,
        cloud_properties: get("cloud_properties")
            .map(|c| c.to_json())
            .unwrap_or(serde_json::Value::Null),
    })
}

/// Reads a `networks:` list. `azs` is the cloud config's AZ names, when there are any.
pub fn networks(
    checker: &mut Checker,
    node: &Node,
    path: &str,
    azs: Option<&[String]>,
) -> Vec<Network> {
    let items = checker.list(node, path);
    let mut out: Vec<Network> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let fields = checker.map(item, &format!("{path}[{i}]"), NETWORK);
        let get = |key: &str| fields.iter().find(|(k, _)| k.name == key).map(|(_, v)| v);
        let Some(name) = get("name").and_then(|n| n.as_str()).map(str::to_string) else {
            checker.report(&format!("{path}[{i}].name"), item.at, "is required");
            continue;
        };
        let np = join(path, &name);
        if out.iter().any(|n| n.name == name) {
            checker.report(&np, item.at, "duplicate network name");
            continue;
        }
        let kind = match get("type") {
            None => "manual".to_string(),
            Some(t) => match checker.choice(t, &join(&np, "type"), &["manual", "dynamic", "vip"]) {
                Some(t) => t.to_string(),
                None => continue,
            },
        };
        let subnet_nodes: Vec<&Node> = match get("subnets") {
            Some(subnets) => checker
                .list(subnets, &join(&np, "subnets"))
                .iter()
                .collect(),
            None => Vec::new(),
        };
        let kind = match kind.as_str() {
            "manual" => {
                if subnet_nodes.is_empty() {
                    checker.report(
                        &join(&np, "subnets"),
                        item.at,
                        "a manual network needs at least one subnet",
                    );
                }
                let subnets: Vec<Subnet> = subnet_nodes
                    .iter()
                    .enumerate()
                    .filter_map(|(j, s)| {
                        read_subnet(checker, s, &format!("{np}.subnets[{j}]"), azs)
                    })
                    .collect();
                for (a, x) in subnets.iter().enumerate() {
                    for y in &subnets[a + 1..] {
                        if x.first <= y.last && y.first <= x.last {
                            checker.report(
                                &join(&np, "subnets"),
                                item.at,
                                format!(
                                    "subnets `{}` and `{}` overlap",
                                    x.describe(),
                                    y.describe()
                                ),
                            );
                        }
                    }
                }
                let with_azs = subnets.iter().filter(|s| !s.azs.is_empty()).count();
                if with_azs != 0 && with_azs != subnets.len() {
                    checker.report(
                        &join(&np, "subnets"),
                        item.at,
                        "subnets must all name availability zones, or none",
                    );
                }
                NetworkKind::Manual(subnets)
            }
            "dynamic" => {
                let mut dynamic_azs = Vec::new();
                for (j, s) in subnet_nodes.iter().enumerate() {
                    let sp = format!("{np}.subnets[{j}]");
                    for (k, v) in checker.map(s, &sp, &["az", "azs", "dns", "cloud_properties"]) {
                        if k.name == "az" || k.name == "azs" {
                            dynamic_azs.extend(strings(checker, v, &join(&sp, &k.name)));
                        }
                    }
                }
                NetworkKind::Dynamic { azs: dynamic_azs }
            }
            _ => {
                let mut statics = IpSet::new();
                for (j, s) in subnet_nodes.iter().enumerate() {
                    let sp = format!("{np}.subnets[{j}]");
                    for (k, v) in checker.map(s, &sp, &["static", "azs", "cloud_properties"]) {
                        if k.name == "static" {
                            statics.extend(&ranges(
                                checker,
                                v,
                                &join(&sp, "static"),
                                (0, u32::MAX),
                                "static address",
                            ));
                        }
                    }
                }
                NetworkKind::Vip { statics }
            }
        };
        out.push(Network { name, kind });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_yaml::{Limits, load};

    fn parse(text: &str) -> Result<Vec<Network>, Vec<String>> {
        let root = load(text, Limits::default()).unwrap();
        let mut checker = Checker::new();
        let azs = vec!["z1".to_string(), "z2".to_string()];
        let nets = networks(
            &mut checker,
            root.get("networks").unwrap(),
            "networks",
            Some(&azs),
        );
        let problems: Vec<String> = checker
            .into_problems()
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect();
        if problems.is_empty() {
            Ok(nets)
        } else {
            Err(problems)
        }
    }

    #[test]
    fn a_manual_network_parses_with_reserved_and_static_ranges() {
        let nets = parse("networks:\n- name: default\n  subnets:\n  - {range: 10.0.0.0/24, gateway: 10.0.0.1, reserved: [10.0.0.2 - 10.0.0.9, 10.0.0.200/30], static: [10.0.0.10 - 10.0.0.19], azs: [z1]}\n").unwrap();
        let NetworkKind::Manual(subnets) = &nets[0].kind else {
            panic!()
        };
        assert_eq!(subnets[0].reserved.len(), 12);
        assert_eq!(subnets[0].statics.len(), 10);
        assert_eq!(subnets[0].prefix, 24);
    }

    #[test]
    fn every_subnet_problem_is_named() {
        let problems = parse(
            "networks:
- name: a
  subnets:
  - {range: 10.0.0.0/24, gateway: 10.0.1.1, reserved: [10.0.5.1], static: [10.0.0.300], azs: [z9]}
  - {range: 10.0.0.128/25, gateway: 10.0.0.129}
- name: b
  subnets:
  - {range: 10.1.0.5/24, gateway: 10.1.0.1}
- name: c
  subnets:
  - {range: 10.2.0.0/24, gateway: 10.2.0.255}
- name: d
  subnets:
  - {range: 10.3.0.0/24, gateway: 10.3.0.1}
  - {range: 10.3.0.128/25, gateway: 10.3.0.129}
",
        )
        .unwrap_err();
        let all = problems.join("\n");
        assert!(
            all.contains(
                "networks.a.subnets[0].gateway: `10.0.1.1` is outside the range `10.0.0.0/24`"
            ),
            "{all}"
        );
        assert!(
            all.contains("reserved address `10.0.5.1` is outside the subnet's range"),
            "{all}"
        );
        assert!(all.contains("`10.0.0.300` is not an IPv4 address"), "{all}");
        assert!(all.contains("unknown availability zone `z9`"), "{all}");
        assert!(
            all.contains("networks.d.subnets: subnets `10.3.0.0/24` and `10.3.0.128/25` overlap"),
            "{all}"
        );
        assert!(
            all.contains("networks.b.subnets[0].range: range `10.1.0.5/24` has host bits set"),
            "{all}"
        );
        assert!(
            all.contains(
                "networks.c.subnets[0].gateway: `10.2.0.255` is the network or broadcast address"
            ),
            "{all}"
        );
    }

    #[test]
    fn cidr_ranges_are_read_and_each_mistake_has_its_own_error() {
        assert_eq!(cidr("10.0.0.0/24"), Ok((0x0a00_0000, 0x0a00_00ff, 24)));
        assert_eq!(cidr(" 10.0.0.4 / 30 "), Ok((0x0a00_0004, 0x0a00_0007, 30)));
        assert_eq!(cidr("0.0.0.0/0"), Ok((0, u32::MAX, 0)));
        let bad = |t: &str| cidr(t).unwrap_err();
        assert_eq!(bad("10.0.0.0"), AddressError::NotCidr("10.0.0.0".into()));
        assert_eq!(
            bad("10.0.0.0/33"),
            AddressError::Prefix("10.0.0.0/33".into())
        );
        assert_eq!(bad("10.0.0.0/x"), AddressError::Prefix("10.0.0.0/x".into()));
        assert_eq!(
            bad("10.0.0.1/24"),
            AddressError::HostBits("10.0.0.1/24".into())
        );
        assert_eq!(bad("10.0.0/24"), AddressError::NotIpv4("10.0.0".into()));
        assert_eq!(bad("fd00::/64"), AddressError::Ipv6("fd00::".into()));
        assert_eq!(
            entry("10.0.0.9 - 10.0.0.1"),
            Err(AddressError::Reversed("10.0.0.9 - 10.0.0.1".into()))
        );
        assert_eq!(entry("10.0.0.8/30"), Ok((0x0a00_0008, 0x0a00_000b)));
    }

    #[test]
    fn static_ranges_may_not_hold_the_gateway_or_reserved_addresses() {
        let problems = parse("networks:\n- name: a\n  subnets:\n  - {range: 10.0.0.0/24, gateway: 10.0.0.1, reserved: [10.0.0.5], static: [10.0.0.1 - 10.0.0.9]}\n").unwrap_err();
        assert!(
            problems[0].contains("must not include the gateway"),
            "{problems:?}"
        );
    }
}
