//! Host port mappings, as the Warden CPI's `ports` cloud property gives them: each
//! `{host, container, protocol}` (a port or a range `1000-2000`; `container` the same as
//! `host` when left out; TCP) forwards connections to this machine's port to the VM's
//! address. The forwarding is a process of the VM's own (`fleet-updater vm-ports`),
//! started with its container and ended with it; no firewall rule is made.

use std::net::{Ipv4Addr, SocketAddrV4};

use serde_json::Value;

use super::ContainerError;

/// One forwarded port: this machine's, and the VM's port it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    pub host: u16,
    pub container: u16,
}

fn bad(value: &Value, expected: &'static str) -> ContainerError {
    ContainerError::Property {
        key: "ports",
        value: value.to_string(),
        expected,
    }
}

/// A port or a range, as a number or text (`80`, `"80"`, `"1000-2000"`).
fn range(value: &Value) -> Option<(u16, u16)> {
    if let Some(n) = value.as_u64() {
        let port = u16::try_from(n).ok().filter(|p| *p > 0)?;
        return Some((port, port));
    }
    let text = value.as_str()?.trim();
    let (first, last) = match text.split_once('-') {
        Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
        None => {
            let port = text.parse().ok()?;
            (port, port)
        }
    };
    (first > 0 && first <= last).then_some((first, last))
}

/// The forwards the `ports` cloud property asks for; none without one.
///
/// # Errors
/// An entry that is not `{host, container?, protocol?}` with ports, ranges of the same
/// length, or a protocol other than TCP, named.
pub fn forwards(cloud_properties: &Value) -> Result<Vec<Forward>, ContainerError> {
    let Some(ports) = cloud_properties.get("ports") else {
        return Ok(Vec::new());
    };
    let entries = ports
        .as_array()
        .ok_or_else(|| bad(ports, "a list of {host, container, protocol}"))?;
    let mut found = Vec::new();
    for entry in entries {
        let host = entry.get("host").and_then(range).ok_or_else(|| {
            bad(
                entry,
                "each entry's `host` a port or a range like 1000-2000",
            )
        })?;
        let container = match entry.get("container") {
            None | Some(Value::Null) => host,
            Some(v) => range(v).ok_or_else(|| bad(entry, "`container` a port or a range"))?,
        };
        if container.1 - container.0 != host.1 - host.0 {
            return Err(bad(
                entry,
                "`host` and `container` ranges of the same length",
            ));
        }
        match entry.get("protocol").and_then(Value::as_str) {
            None | Some("tcp") => {}
            Some(_) => return Err(bad(entry, "`protocol` tcp (UDP is not forwarded)")),
        }
        for offset in 0..=(host.1 - host.0) {
            found.push(Forward {
                host: host.0 + offset,
                container: container.0 + offset,
            });
        }
    }
    Ok(found)
}

/// `HOST=ADDRESS:PORT`, how `vm-ports` takes each forward.
pub fn argument(forward: &Forward, address: Ipv4Addr) -> String {
    format!(
        "{}={}",
        forward.host,
        SocketAddrV4::new(address, forward.container)
    )
}

/// Reads `HOST=ADDRESS:PORT`.
pub fn parse_argument(text: &str) -> Option<(u16, SocketAddrV4)> {
    let (host, target) = text.split_once('=')?;
    Some((host.parse().ok()?, target.parse().ok()?))
}

/// Forwards every connection to each of this machine's ports to its target, until the
/// process is ended.
///
/// # Errors
/// When a port cannot be listened on (another process has it).
pub async fn forward(forwards: Vec<(u16, SocketAddrV4)>) -> std::io::Result<()> {
    let mut listeners = Vec::new();
    for (port, target) in forwards {
        let listener =
            tokio::net::TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
                .await
                .map_err(|e| std::io::Error::new(e.kind(), format!("port {port}: {e}")))?;
        listeners.push((listener, target));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (listener, target) in listeners {
        tasks.spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_warden_cpis_ports_are_read_and_bad_ones_named() {
        let found = forwards(&json!({"ports": [
            {"host": 80},
            {"host": "8080", "container": 80},
            {"host": "9000-9001", "container": "7000-7001", "protocol": "tcp"},
        ]}))
        .unwrap();
        assert_eq!(
            found,
            [
                Forward {
                    host: 80,
                    container: 80
                },
                Forward {
                    host: 8080,
                    container: 80
                },
                Forward {
                    host: 9000,
                    container: 7000
                },
                Forward {
                    host: 9001,
                    container: 7001
                },
            ]
        );
        assert!(forwards(&json!({})).unwrap().is_empty());
        for (ports, named) in [
            (json!("80"), "a list"),
            (json!([{"container": 80}]), "`host`"),
            (json!([{"host": 0}]), "`host`"),
            (
                json!([{"host": "9000-9001", "container": 80}]),
                "same length",
            ),
            (json!([{"host": 53, "protocol": "udp"}]), "UDP"),
        ] {
            let e = forwards(&json!({ "ports": ports }))
                .unwrap_err()
                .to_string();
            assert!(e.contains("`ports`") && e.contains(named), "{e}");
        }
        let arg = argument(&found[1], Ipv4Addr::new(10, 0, 0, 5));
        assert_eq!(arg, "8080=10.0.0.5:80");
        assert_eq!(
            parse_argument(&arg),
            Some((8080, "10.0.0.5:80".parse().unwrap()))
        );
    }

    #[tokio::test]
    async fn a_forwarded_port_reaches_its_target() {
        let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = match target.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            other => panic!("{other}"),
        };
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        tokio::spawn(forward(vec![(port, at)]));
        tokio::spawn(async move {
            let (mut s, _) = target.accept().await.unwrap();
            use tokio::io::AsyncWriteExt;
            s.write_all(b"through").await.unwrap();
        });
        let mut answer = String::new();
        for _ in 0..50 {
            if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                use tokio::io::AsyncReadExt;
                s.read_to_string(&mut answer).await.unwrap();
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(answer, "through");
    }
}
