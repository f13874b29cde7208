//! The VM's own files of `/etc`: its hostname, its hosts (its name at its addresses),
//! and this machine's users and groups with the `vcap` user and group a stemcell has
//! (uid and gid 1000 unless the machine uses them, then the next free), written once
//! when the VM is made. Pure: the machine's files are read by the caller.

use std::net::Ipv4Addr;

/// The name BOSH stemcells give the user jobs run as.
pub const VCAP_USER: &str = "vcap";

/// The contents of each of the VM's own `/etc` files, by name.
pub fn files(
    hostname: &str,
    addresses: &[Ipv4Addr],
    host: &dyn Fn(&str) -> String,
) -> Vec<(&'static str, String)> {
    let passwd = host("passwd");
    let group = host("group");
    let uid = free_id(&passwd, 2);
    let gid = free_id(&group, 2);
    let mut hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n".to_string();
    for address in addresses {
        hosts.push_str(&format!("{address} {hostname}\n"));
    }
    if addresses.is_empty() {
        hosts.push_str(&format!("127.0.1.1 {hostname}\n"));
    }
    vec![
        ("hostname", format!("{hostname}\n")),
        ("hosts", hosts),
        (
            "passwd",
            with_line(
                &passwd,
                &format!("{VCAP_USER}:x:{uid}:{gid}::/home/{VCAP_USER}:/bin/bash"),
            ),
        ),
        ("group", with_line(&group, &format!("{VCAP_USER}:x:{gid}:"))),
        // This machine's users and groups with no password of theirs: the VM's root
        // could read the hashes.
        (
            "shadow",
            with_line(
                &locked(&passwd, "*:19000:0:99999:7:::"),
                &format!("{VCAP_USER}:*:19000:0:99999:7:::"),
            ),
        ),
        (
            "gshadow",
            with_line(&locked(&group, "!::"), &format!("{VCAP_USER}:!::")),
        ),
    ]
}

/// A shadow file's lines for every entry named in `names` (a passwd or group file),
/// each with `rest` after its name: no password.
fn locked(names: &str, rest: &str) -> String {
    names
        .lines()
        .filter_map(|l| l.split(':').next().filter(|n| !n.is_empty()))
        .map(|name| format!("{name}:{rest}\n"))
        .collect()
}

/// `text` without any entry named as `line`'s, and `line` at its end.
fn with_line(text: &str, line: &str) -> String {
    let name = line.split(':').next().unwrap_or_default();
    let mut out: String = text
        .lines()
        .filter(|l| l.split(':').next() != Some(name))
        .map(|l| format!("{l}\n"))
        .collect();
    out.push_str(line);
    out.push('\n');
    out
}

/// The first id from 1000 up that no entry of `text` uses in field `field`, ignoring
/// an existing `vcap` entry.
fn free_id(text: &str, field: usize) -> u32 {
    let used: std::collections::BTreeSet<u32> = text
        .lines()
        .filter(|l| l.split(':').next() != Some(VCAP_USER))
        .filter_map(|l| l.split(':').nth(field)?.parse().ok())
        .collect();
    (1000..).find(|id| !used.contains(id)).unwrap_or(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> String {
        match name {
            "passwd" => "root:x:0:0:root:/root:/bin/bash\nann:x:1000:1000::/home/ann:/bin/sh\n",
            "group" => "root:x:0:\n",
            "shadow" => "root:$6$secret-hash:19000:0:99999:7:::\n",
            _ => "",
        }
        .to_string()
    }

    #[test]
    fn the_vm_has_a_vcap_user_its_name_and_its_addresses() {
        let files: std::collections::BTreeMap<_, _> =
            files("kv-0", &["10.1.0.5".parse().unwrap()], &host)
                .into_iter()
                .collect();
        assert_eq!(files["hostname"], "kv-0\n");
        assert!(files["hosts"].contains("10.1.0.5 kv-0\n"));
        assert!(
            files["passwd"].ends_with("vcap:x:1001:1000::/home/vcap:/bin/bash\n"),
            "uid 1000 is taken, gid 1000 is free: {}",
            files["passwd"]
        );
        assert!(files["passwd"].starts_with("root:x:0:0"));
        assert!(files["group"].ends_with("vcap:x:1000:\n"));
        assert_eq!(
            files["shadow"],
            "root:*:19000:0:99999:7:::\nann:*:19000:0:99999:7:::\nvcap:*:19000:0:99999:7:::\n",
            "no hash of this machine's is copied"
        );
        assert_eq!(files["gshadow"], "root:!::\nvcap:!::\n");
    }

    #[test]
    fn a_vcap_entry_already_there_is_replaced_not_repeated() {
        let passwd = with_line(
            "vcap:x:5:5::/:/bin/sh\n",
            "vcap:x:1000:1000::/home/vcap:/bin/bash",
        );
        assert_eq!(passwd.lines().filter(|l| l.starts_with("vcap:")).count(), 1);
        assert_eq!(free_id("vcap:x:1000:1000::/h:/bin/sh\n", 2), 1000);
    }
}
