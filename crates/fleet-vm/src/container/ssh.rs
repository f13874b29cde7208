//! SSH sessions on a container VM, as BOSH's agent's `ssh` action makes them: a user of
//! the session (`bosh_...`) in the VM's own `/etc` files, in the groups `vcap`,
//! `bosh_sshers` and `bosh_sudoers`, whose home `/var/vcap/bosh_ssh/USER` holds the
//! client's key; an SSH server in the VM on port 22 of its addresses, with a host key of
//! the VM's own; and on cleanup every session user a pattern matches removed with its
//! home and processes. The users are written into the VM's `/etc` files in place (the VM
//! sees those very files); the rest happens inside the VM.

use std::path::Path;

use super::enter::Enter;

/// Where session users' homes are, as on a BOSH VM.
pub const HOMES: &str = "/var/vcap/bosh_ssh";

/// The groups a session user joins, made when the VM has none of that name.
const GROUPS: [&str; 3] = ["vcap", "bosh_sshers", "bosh_sudoers"];

#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("`{0}` is not a session user's name (`bosh_` and letters, digits or `_`)")]
    User(String),
    #[error("`{pattern}` is not a pattern: {message}")]
    Pattern { pattern: String, message: String },
    #[error("the VM's {file}: {source}")]
    Etc {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} in the VM failed: {message}")]
    Inside { what: &'static str, message: String },
}

/// Whether `user` is a name a session user may have.
pub fn is_session_user(user: &str) -> bool {
    user.strip_prefix("bosh_").is_some_and(|rest| {
        !rest.is_empty()
            && rest.len() <= 27
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

/// The first id from 1000 up that no line of any of `texts` has in its third field.
fn free_id(texts: &[&str]) -> u32 {
    let used: std::collections::BTreeSet<u32> = texts
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| l.split(':').nth(2)?.parse().ok())
        .collect();
    (1000..).find(|id| !used.contains(id)).unwrap_or(60000)
}

/// The VM's `/etc` files with `user` in them (its own group, and a member of [`GROUPS`]):
/// `[passwd, group, shadow, gshadow]`. A user already there is left as it is.
pub fn with_user(files: [String; 4], user: &str) -> [String; 4] {
    let [mut passwd, mut group, mut shadow, mut gshadow] = files;
    let named = |text: &str, name: &str| text.lines().any(|l| l.split(':').next() == Some(name));
    for g in GROUPS {
        if !named(&group, g) {
            let gid = free_id(&[&group]);
            group.push_str(&format!("{g}:x:{gid}:\n"));
            gshadow.push_str(&format!("{g}:!::\n"));
        }
    }
    if named(&passwd, user) {
        return [passwd, group, shadow, gshadow];
    }
    // One number for the user and its group, free in both.
    let id = free_id(&[&passwd, &group]);
    let (uid, gid) = (id, id);
    passwd.push_str(&format!("{user}:x:{uid}:{gid}::{HOMES}/{user}:/bin/bash\n"));
    group.push_str(&format!("{user}:x:{gid}:\n"));
    // `*`: no password, and not locked, so that a key signs in.
    shadow.push_str(&format!("{user}:*:19000:0:99999:7:::\n"));
    gshadow.push_str(&format!("{user}:!::\n"));
    let group = group
        .lines()
        .map(|line| {
            let name = line.split(':').next().unwrap_or_default();
            if GROUPS.contains(&name) {
                let members = line.rsplit(':').next().unwrap_or_default();
                let sep = if members.is_empty() { "" } else { "," };
                format!("{line}{sep}{user}\n")
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    [passwd, group, shadow, gshadow]
}

/// The VM's `/etc` files without the session users `doomed` chooses, and their names.
pub fn without_users(
    files: [String; 4],
    doomed: &dyn Fn(&str) -> bool,
) -> ([String; 4], Vec<String>) {
    let gone: Vec<String> = files[0]
        .lines()
        .filter_map(|l| l.split(':').next())
        .filter(|name| is_session_user(name) && doomed(name))
        .map(str::to_string)
        .collect();
    let keep = |text: &String, group_file: bool| -> String {
        text.lines()
            .filter(|l| !gone.iter().any(|g| l.split(':').next() == Some(g.as_str())))
            .map(|l| {
                if !group_file {
                    return format!("{l}\n");
                }
                // Out of every group's members too.
                let mut fields: Vec<&str> = l.split(':').collect();
                let last = fields.len() - 1;
                let members: Vec<&str> = fields[last]
                    .split(',')
                    .filter(|m| !m.is_empty() && !gone.iter().any(|g| g == m))
                    .collect();
                let joined = members.join(",");
                fields[last] = &joined;
                format!("{}\n", fields.join(":"))
            })
            .collect()
    };
    let files = [
        keep(&files[0], false),
        keep(&files[1], true),
        keep(&files[2], false),
        keep(&files[3], true),
    ];
    (files, gone)
}

const ETC: [&str; 4] = ["passwd", "group", "shadow", "gshadow"];

fn read_etc(etc: &Path) -> Result<[String; 4], SshError> {
    let read = |name: &str| {
        std::fs::read_to_string(etc.join(name)).map_err(|source| SshError::Etc {
            file: format!("/etc/{name}"),
            source,
        })
    };
    Ok([read(ETC[0])?, read(ETC[1])?, read(ETC[2])?, read(ETC[3])?])
}

/// Writes each file in place: the VM sees these very files (bound into its `/etc`), so
/// they are truncated and written, never replaced.
fn write_etc(etc: &Path, files: &[String; 4]) -> Result<(), SshError> {
    for (name, text) in ETC.iter().zip(files) {
        std::fs::write(etc.join(name), text).map_err(|source| SshError::Etc {
            file: format!("/etc/{name}"),
            source,
        })?;
    }
    Ok(())
}

async fn inside(
    enter: &Enter,
    what: &'static str,
    script: &str,
    args: &[&str],
) -> Result<String, SshError> {
    enter
        .sh(script, args)
        .await
        .map(|out| String::from_utf8_lossy(&out).into_owned())
        .map_err(|message| SshError::Inside { what, message })
}

/// The session user's home with the client's key, owned by the user.
const HOME: &str = r#"set -e
home="$1/$2"
mkdir -p "$1"
chmod 755 "$1"
mkdir -p "$home/.ssh"
printf '%s\n' "$3" > "$home/.ssh/authorized_keys"
chown -R "$2:$2" "$home"
chmod 700 "$home" "$home/.ssh"
chmod 600 "$home/.ssh/authorized_keys"
"#;

/// The VM's SSH server, started unless it runs, with a host key of the VM's own made
/// the first time; prints the host key.
const SERVER: &str = r#"set -e
keys=/var/vcap/bosh/ssh
mkdir -p "$keys" /run/sshd
chmod 700 "$keys"
[ -s "$keys/ssh_host_rsa_key" ] || ssh-keygen -q -t rsa -b 2048 -N '' -C '' -f "$keys/ssh_host_rsa_key"
cat > "$keys/sshd_config" <<EOF
Port 22
HostKey $keys/ssh_host_rsa_key
PidFile /run/sshd.pid
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AuthorizedKeysFile .ssh/authorized_keys
AllowGroups bosh_sshers vcap
Subsystem sftp internal-sftp
EOF
if ! { [ -s /run/sshd.pid ] && kill -0 "$(cat /run/sshd.pid)" 2>/dev/null; }; then
  /usr/sbin/sshd -f "$keys/sshd_config"
fi
cat "$keys/ssh_host_rsa_key.pub"
"#;

/// Sets up `user` to sign in with `public_key`, the VM's SSH server running; the VM's
/// host key.
///
/// # Errors
/// A name that is no session user's, the VM's files, or what failed inside.
pub async fn setup(
    enter: &Enter,
    etc: &Path,
    user: &str,
    public_key: &str,
) -> Result<String, SshError> {
    if !is_session_user(user) {
        return Err(SshError::User(user.to_string()));
    }
    let files = read_etc(etc)?;
    write_etc(etc, &with_user(files, user))?;
    inside(
        enter,
        "making the user's home",
        HOME,
        &[HOMES, user, public_key.trim()],
    )
    .await?;
    let key = inside(enter, "starting the SSH server", SERVER, &[]).await?;
    Ok(key.trim().to_string())
}

/// Removes every session user `pattern` (a regular expression) matches, with its home
/// and processes; the names removed.
///
/// # Errors
/// A pattern that does not compile, the VM's files, or what failed inside.
pub async fn cleanup(enter: &Enter, etc: &Path, pattern: &str) -> Result<Vec<String>, SshError> {
    let matcher = regex::Regex::new(pattern).map_err(|e| SshError::Pattern {
        pattern: pattern.to_string(),
        message: e.to_string(),
    })?;
    let (files, gone) = without_users(read_etc(etc)?, &|name| matcher.is_match(name));
    for user in &gone {
        let home = format!("{HOMES}/{user}");
        // Its processes first: they may still hold the user's files.
        inside(
            enter,
            "ending the user's processes",
            "pkill -KILL -u \"$1\" || true; rm -rf -- \"$2\"",
            &[user, &home],
        )
        .await?;
    }
    write_etc(etc, &files)?;
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> [String; 4] {
        [
            "root:x:0:0:root:/root:/bin/bash\nvcap:x:1000:1000::/home/vcap:/bin/bash\n".into(),
            "root:x:0:\nvcap:x:1000:\n".into(),
            "root:*:1::::::\nvcap:*:19000:0:99999:7:::\n".into(),
            "root:*::\nvcap:!::\n".into(),
        ]
    }

    #[test]
    fn a_session_user_joins_the_vms_users_and_groups_and_leaves_them_again() {
        let [passwd, group, shadow, gshadow] = with_user(files(), "bosh_abc123");
        assert!(
            passwd.ends_with("bosh_abc123:x:1003:1003::/var/vcap/bosh_ssh/bosh_abc123:/bin/bash\n"),
            "{passwd}"
        );
        assert!(group.contains("vcap:x:1000:bosh_abc123\n"), "{group}");
        assert!(
            group.contains("bosh_sshers:x:1001:bosh_abc123\n"),
            "{group}"
        );
        assert!(
            group.contains("bosh_sudoers:x:1002:bosh_abc123\n"),
            "{group}"
        );
        assert!(group.contains("bosh_abc123:x:1003:\n"), "{group}");
        assert!(shadow.contains("bosh_abc123:*:"));
        assert!(gshadow.contains("bosh_abc123:!::"));
        let again = with_user(
            [
                passwd.clone(),
                group.clone(),
                shadow.clone(),
                gshadow.clone(),
            ],
            "bosh_abc123",
        );
        assert_eq!(again[0], passwd, "once");
        let both = with_user(again, "bosh_other");
        assert!(both[1].contains("vcap:x:1000:bosh_abc123,bosh_other\n"));
        let (left, gone) = without_users(both, &|name| name.starts_with("bosh_abc"));
        assert_eq!(gone, ["bosh_abc123"]);
        assert!(!left.iter().any(|f| f.contains("bosh_abc123")), "{left:?}");
        assert!(left[1].contains("vcap:x:1000:bosh_other\n"));
        assert!(left[0].contains("bosh_other:"));
        // Only session users go, whatever the pattern says.
        let (_, none) = without_users(files(), &|_| true);
        assert!(none.is_empty());
    }

    #[test]
    fn only_session_users_names_are_taken() {
        assert!(is_session_user("bosh_0123456789abcde"));
        for bad in ["root", "bosh_", "bosh_a/b", "bosh_a:b", "bosh_a b", "vcap"] {
            assert!(!is_session_user(bad), "{bad}");
        }
    }
}
