//! A VM's network: each network it is on with an address is a host bridge (one per
//! network of the IaaS, holding the subnet's gateway address, so that the host and every
//! VM on it reach each other), and the VM's side of a veth pair joined to it, in the VM's
//! own network namespace, with the address the director reserved and a default route
//! through the default network's gateway. The veth pair goes with the VM's namespace; a
//! bridge no VM uses any more is removed with its last VM.
//!
//! Planning is pure ([`plan`]); [`connect`] and [`disconnect`] run `ip`.

use std::net::Ipv4Addr;
use std::path::Path;

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Nic {
    pub network: String,
    pub address: Ipv4Addr,
    pub prefix: u8,
    pub gateway: Option<Ipv4Addr>,
    /// Whether the VM's default route goes through this network's gateway.
    pub default_route: bool,
    pub bridge: String,
    /// The host's end of the veth pair.
    pub host_end: String,
    /// The VM's end: `eth0`, `eth1`, ...
    pub vm_end: String,
}

#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("network `{network}`: `{key}` is `{value}`, not an IPv4 {what}")]
    Value {
        network: String,
        key: &'static str,
        value: String,
        what: &'static str,
    },
    #[error("network `{network}` is dynamic and its subnet has no address left to hand out")]
    Dynamic { network: String },
    #[error("`ip {args}` failed: {message}")]
    Ip { args: String, message: String },
    #[error(
        "the gateway {gateway} of network `{network}` is already an address of `{interface}` on this machine; give this fleet a subnet of its own"
    )]
    Taken {
        network: String,
        gateway: Ipv4Addr,
        interface: String,
    },
}

fn digest(text: &str) -> String {
    fleet_release::sha1_hex(text.as_bytes())
}

/// The bridge of `network` in the IaaS under `iaas_root`: `fb` and ten hex digits.
pub fn bridge_name(iaas_root: &Path, network: &str) -> String {
    format!(
        "fb{}",
        &digest(&format!("{}\n{network}", iaas_root.display()))[..10]
    )
}

/// The subnet the IaaS hands a dynamic network's addresses out of, as Garden does for
/// bosh-lite: `10.254.X.0/24`, `X` from the IaaS's root and the network's name (so that
/// two fleets on one machine seldom meet), its gateway `.1`.
pub fn dynamic_subnet(iaas_root: &Path, network: &str) -> Ipv4Addr {
    let d = digest(&format!("dynamic\n{}\n{network}", iaas_root.display()));
    let x = u8::from_str_radix(&d[..2], 16).unwrap_or(0);
    Ipv4Addr::new(10, 254, x, 0)
}

/// The NICs of the VM `cid` from the networks `create_vm` was given; a dynamic
/// network's address is the lowest of its subnet that no address of `taken` (those
/// handed out already) is.
///
/// # Errors
/// An address, netmask or gateway that is not IPv4, or a dynamic subnet with no address
/// left.
pub fn plan(
    iaas_root: &Path,
    cid: &str,
    networks: &Value,
    taken: &[Ipv4Addr],
) -> Result<Vec<Nic>, NetworkError> {
    let Some(networks) = networks.as_object() else {
        return Ok(Vec::new());
    };
    let parse = |network: &str, key: &'static str, value: &Value, what| {
        value
            .as_str()
            .and_then(|v| v.parse::<Ipv4Addr>().ok())
            .ok_or_else(|| NetworkError::Value {
                network: network.to_string(),
                key,
                value: value.to_string(),
                what,
            })
    };
    let cid_digest = digest(cid);
    let mut nics = Vec::new();
    for (index, (name, settings)) in networks.iter().enumerate() {
        let Some(ip) = settings.get("ip") else {
            let base = u32::from(dynamic_subnet(iaas_root, name));
            let free = (2..255)
                .map(|host| Ipv4Addr::from(base + host))
                .find(|a| !taken.contains(a) && !nics.iter().any(|n: &Nic| n.address == *a))
                .ok_or_else(|| NetworkError::Dynamic {
                    network: name.clone(),
                })?;
            nics.push(Nic {
                network: name.clone(),
                address: free,
                prefix: 24,
                gateway: Some(Ipv4Addr::from(base + 1)),
                default_route: settings
                    .get("default")
                    .and_then(Value::as_array)
                    .is_some_and(|d| d.iter().any(|v| v == "gateway")),
                bridge: bridge_name(iaas_root, name),
                host_end: format!("fv{}{index:x}", &cid_digest[..11]),
                vm_end: format!("eth{index}"),
            });
            continue;
        };
        let address = parse(name, "ip", ip, "address")?;
        let prefix = match settings.get("netmask") {
            Some(mask) => u32::from(parse(name, "netmask", mask, "netmask")?).count_ones() as u8,
            None => 24,
        };
        let gateway = settings
            .get("gateway")
            .map(|g| parse(name, "gateway", g, "address"))
            .transpose()?;
        let default_route = settings
            .get("default")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "gateway"));
        nics.push(Nic {
            network: name.clone(),
            address,
            prefix,
            gateway,
            default_route,
            bridge: bridge_name(iaas_root, name),
            host_end: format!("fv{}{index:x}", &cid_digest[..11]),
            vm_end: format!("eth{index}"),
        });
    }
    if !nics.iter().any(|n| n.default_route)
        && let Some(first) = nics.iter_mut().find(|n| n.gateway.is_some())
    {
        first.default_route = true;
    }
    Ok(nics)
}

fn run(program: &str, args: &[&str]) -> Result<String, NetworkError> {
    let output = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| NetworkError::Ip {
            args: args.join(" "),
            message: e.to_string(),
        })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(NetworkError::Ip {
            args: args.join(" "),
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

fn ip(args: &[&str]) -> Result<String, NetworkError> {
    run("ip", args)
}

/// Whether `ip` refused because what it was to make is there already.
fn there_already(e: &NetworkError) -> bool {
    matches!(e, NetworkError::Ip { message, .. }
        if message.contains("File exists") || message.contains("already assigned"))
}

/// The bridge of `nic`, made when missing, with the gateway's address; VMs made at once
/// share it.
///
/// # Errors
/// When the gateway is an address of another interface of this machine (another fleet
/// on the same subnet), or `ip` fails.
fn bridge(nic: &Nic) -> Result<(), NetworkError> {
    match ip(&["link", "add", &nic.bridge, "type", "bridge"]) {
        Err(e) if !there_already(&e) => return Err(e),
        _ => {}
    }
    if let Some(gateway) = nic.gateway {
        let owners = ip(&["-o", "-4", "addr", "show"])?;
        let taken = owners.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            let interface = words.nth(1)?;
            let address = words.nth(1)?.split('/').next()?;
            (address == gateway.to_string() && interface != nic.bridge)
                .then(|| interface.to_string())
        });
        if let Some(interface) = taken {
            return Err(NetworkError::Taken {
                network: nic.network.clone(),
                gateway,
                interface,
            });
        }
        let cidr = format!("{gateway}/{}", nic.prefix);
        match ip(&["addr", "add", &cidr, "dev", &nic.bridge]) {
            Err(e) if !there_already(&e) => return Err(e),
            _ => {}
        }
    }
    ip(&["link", "set", &nic.bridge, "up"]).map(|_| ())
}

/// Joins the network namespace of process `pid` to its networks.
///
/// # Errors
/// When a bridge, veth pair, address or route cannot be made.
pub fn connect(pid: u32, nics: &[Nic]) -> Result<(), NetworkError> {
    // A VM on no network of its own shares this machine's.
    if nics.is_empty() {
        return Ok(());
    }
    let pid = pid.to_string();
    for nic in nics {
        bridge(nic)?;
        ip(&[
            "link",
            "add",
            &nic.host_end,
            "type",
            "veth",
            "peer",
            "name",
            &nic.vm_end,
            "netns",
            &pid,
        ])?;
        ip(&["link", "set", &nic.host_end, "master", &nic.bridge, "up"])?;
    }
    let netns = format!("--net=/proc/{pid}/ns/net");
    let run_inside = |args: Vec<String>| {
        let mut all = vec![netns.as_str(), "ip"];
        all.extend(args.iter().map(String::as_str));
        run("nsenter", &all).map(|_| ())
    };
    let words = |text: String| text.split(' ').map(str::to_string).collect::<Vec<_>>();
    run_inside(words("link set lo up".into()))?;
    for nic in nics {
        run_inside(words(format!(
            "addr add {}/{} dev {}",
            nic.address, nic.prefix, nic.vm_end
        )))?;
        run_inside(words(format!("link set {} up", nic.vm_end)))?;
    }
    for nic in nics.iter().filter(|n| n.default_route) {
        if let Some(gateway) = nic.gateway {
            run_inside(words(format!(
                "route add default via {gateway} dev {}",
                nic.vm_end
            )))?;
        }
    }
    Ok(())
}

/// Removes what the VM's NICs left on the host: their veth ends (gone already when the
/// VM's namespace went) and bridges no VM is joined to any more.
pub fn disconnect(nics: &[Nic]) {
    for nic in nics {
        if Path::new("/sys/class/net").join(&nic.host_end).exists() {
            let _ = ip(&["link", "del", &nic.host_end]);
        }
    }
    for nic in nics {
        let members = Path::new("/sys/class/net").join(&nic.bridge).join("brif");
        let empty = std::fs::read_dir(&members).is_ok_and(|mut d| d.next().is_none());
        if empty {
            let _ = ip(&["link", "del", &nic.bridge]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_manual_network_is_a_nic_on_its_bridge_with_the_default_route_where_bosh_puts_it() {
        let root = Path::new("/s/iaas");
        let nics = plan(
            root,
            "vm-0123456789abcdef",
            &json!({
                "a": {"type": "manual", "ip": "10.1.0.5", "netmask": "255.255.255.0", "gateway": "10.1.0.1"},
                "b": {"type": "manual", "ip": "10.2.0.5", "netmask": "255.255.0.0", "gateway": "10.2.0.1", "default": ["dns", "gateway"]},
            }),
            &[],
        )
        .unwrap();
        assert_eq!(nics.len(), 2);
        assert_eq!((nics[0].vm_end.as_str(), nics[0].prefix), ("eth0", 24));
        assert_eq!((nics[1].vm_end.as_str(), nics[1].prefix), ("eth1", 16));
        assert!(!nics[0].default_route && nics[1].default_route);
        assert_eq!(nics[0].bridge, bridge_name(root, "a"));
        assert_ne!(nics[0].bridge, bridge_name(Path::new("/other"), "a"));
        assert!(
            nics.iter()
                .all(|n| n.host_end.len() <= 15 && n.bridge.len() <= 15)
        );
        assert_ne!(nics[0].host_end, nics[1].host_end);
    }

    #[test]
    fn the_first_gateway_is_the_default_when_none_is_named_and_bad_values_are_named() {
        let root = Path::new("/s");
        let nics = plan(
            root,
            "vm-1",
            &json!({"a": {"ip": "10.1.0.5", "netmask": "255.255.255.0", "gateway": "10.1.0.1"}}),
            &[],
        )
        .unwrap();
        assert!(nics[0].default_route);
        let bad = plan(root, "vm-1", &json!({"a": {"ip": "10.1.0.500"}}), &[]).unwrap_err();
        assert_eq!(
            bad.to_string(),
            "network `a`: `ip` is `\"10.1.0.500\"`, not an IPv4 address"
        );
        // A dynamic network's address is handed out of the IaaS's own subnet.
        let subnet = dynamic_subnet(root, "d");
        let base = u32::from(subnet);
        let first = plan(root, "vm-1", &json!({"d": {"type": "dynamic"}}), &[]).unwrap();
        assert_eq!(first[0].address, std::net::Ipv4Addr::from(base + 2));
        assert_eq!(first[0].gateway, Some(std::net::Ipv4Addr::from(base + 1)));
        assert!(first[0].default_route, "its gateway is the default");
        let next = plan(root, "vm-2", &json!({"d": {}}), &[first[0].address]).unwrap();
        assert_eq!(next[0].address, std::net::Ipv4Addr::from(base + 3));
        let full: Vec<_> = (2..255)
            .map(|h| std::net::Ipv4Addr::from(base + h))
            .collect();
        assert!(matches!(
            plan(root, "vm-3", &json!({"d": {}}), &full),
            Err(NetworkError::Dynamic { .. })
        ));
    }
}
