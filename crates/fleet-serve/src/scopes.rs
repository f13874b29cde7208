//! What a signed-in user may do, as the BOSH director's UAA scopes say: `bosh.admin` (or
//! `bosh.DIRECTOR-UUID.admin`) everything; `bosh.read` (or `bosh.DIRECTOR-UUID.read`)
//! reads deployments, instances, VMs, errands, releases, stemcells, tasks (their event and
//! result output), events, configs and locks, but not a task's debug output, a
//! deployment's variables, logs, SSH, or any change; `bosh.teams.T.admin` creates
//! deployments (which then belong to team T) and does everything to the deployments of
//! team T, their tasks, events and log bundles, and lists releases, stemcells and configs;
//! `bosh.teams.T.read` reads T's deployments, their tasks' event and result output and
//! their events; `bosh.releases.upload` uploads releases. On the broker API, an admin does
//! everything, a reader lists and polls, and team scopes give nothing (a broker's users are
//! a platform's, not a team's).

use axum::http::Method;

use std::collections::BTreeSet;

/// What a user's scopes allow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    pub admin: bool,
    pub read: bool,
    /// Teams the user administers (`bosh.teams.T.admin`) and reads (`bosh.teams.T.read`).
    pub team_admin: BTreeSet<String>,
    pub team_read: BTreeSet<String>,
    pub upload_releases: bool,
}

/// One scope, as `serve` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope<'a> {
    Admin,
    Read,
    /// `bosh.UUID.admin`: admin of the director with that UUID.
    DirectorAdmin(&'a str),
    DirectorRead(&'a str),
    TeamAdmin(&'a str),
    TeamRead(&'a str),
    UploadReleases,
}

impl<'a> Scope<'a> {
    /// The scope `text` names; `None` for one `serve` does not take.
    fn parse(text: &'a str) -> Option<Scope<'a>> {
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        let uuid_shaped =
            |id: &str| id.len() == 36 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
        let parts: Vec<&'a str> = text.split('.').collect();
        Some(match parts.as_slice() {
            ["bosh", "admin"] => Scope::Admin,
            ["bosh", "read"] => Scope::Read,
            ["bosh", "releases", "upload"] => Scope::UploadReleases,
            ["bosh", "teams", team, "admin"] if name_ok(team) => Scope::TeamAdmin(team),
            ["bosh", "teams", team, "read"] if name_ok(team) => Scope::TeamRead(team),
            ["bosh", id, "admin"] if uuid_shaped(id) => Scope::DirectorAdmin(id),
            ["bosh", id, "read"] if uuid_shaped(id) => Scope::DirectorRead(id),
            _ => return None,
        })
    }
}

impl Access {
    /// What `scopes` allow on the director whose UUID is `uuid`; a scope of another
    /// director's UUID allows nothing here.
    pub fn of(scopes: &[String], uuid: &str) -> Access {
        let mut access = Access::default();
        for scope in scopes.iter().filter_map(|s| Scope::parse(s)) {
            match scope {
                Scope::Admin => access.admin = true,
                Scope::Read => access.read = true,
                Scope::DirectorAdmin(id) if id == uuid => access.admin = true,
                Scope::DirectorRead(id) if id == uuid => access.read = true,
                Scope::DirectorAdmin(_) | Scope::DirectorRead(_) => {}
                Scope::TeamAdmin(team) => {
                    access.team_admin.insert(team.to_string());
                }
                Scope::TeamRead(team) => {
                    access.team_read.insert(team.to_string());
                }
                Scope::UploadReleases => access.upload_releases = true,
            }
        }
        access
    }

    /// A user whose reach is its teams' deployments: no director admin, some team.
    pub fn of_teams(&self) -> bool {
        !self.admin && (!self.team_admin.is_empty() || !self.team_read.is_empty())
    }

    /// Whether it may change a deployment of `teams`.
    pub fn administers(&self, teams: &[String]) -> bool {
        self.admin || teams.iter().any(|t| self.team_admin.contains(t))
    }

    /// Whether it may read a deployment of `teams`.
    pub fn reads(&self, teams: &[String]) -> bool {
        self.administers(teams) || self.read || teams.iter().any(|t| self.team_read.contains(t))
    }
}

/// Whether `scope` is one `serve` takes; what is wrong with it otherwise.
pub fn check(scope: &str) -> Result<(), String> {
    match Scope::parse(scope) {
        Some(_) => Ok(()),
        None => Err(format!(
            "`{scope}` is not a scope serve takes: bosh.admin, bosh.read, \
             bosh.DIRECTOR-UUID.admin, bosh.DIRECTOR-UUID.read, bosh.teams.TEAM.admin, \
             bosh.teams.TEAM.read, bosh.releases.upload"
        )),
    }
}

/// What a team user's director request needs, before its deployment's teams are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TeamNeed<'a> {
    /// Allowed; what it lists is narrowed to the deployments of the user's teams.
    Listing,
    /// A deploy: any team the user administers (the director checks an existing
    /// deployment's teams, named in the manifest).
    AnyTeamAdmin,
    /// Allowed to any team user.
    AnyTeam,
    /// A team of the deployment, administered (`admin`) or read.
    Deployment {
        name: &'a str,
        admin: bool,
    },
    /// A team of the task's deployment.
    Task {
        id: u64,
        admin: bool,
    },
    /// A team of the log bundle's deployment.
    Bundle {
        id: &'a str,
    },
    Refused,
}

/// The rule of a team user's director request.
pub fn team_need<'a>(method: &Method, path: &'a str, query: Option<&str>) -> TeamNeed<'a> {
    let segments: Vec<&'a str> = path.trim_matches('/').split('/').collect();
    let get = method == Method::GET || method == Method::HEAD;
    let task = |id: &str, admin: bool| {
        id.parse()
            .map_or(TeamNeed::Refused, |id| TeamNeed::Task { id, admin })
    };
    match (get, segments.as_slice()) {
        (true, ["deployments"] | ["tasks"] | ["events"]) => TeamNeed::Listing,
        (false, ["deployments"]) if method == Method::POST => TeamNeed::AnyTeamAdmin,
        (true, ["releases"] | ["releases", _] | ["stemcells"]) => TeamNeed::AnyTeamAdmin,
        (true, ["configs"] | ["configs", _]) => TeamNeed::AnyTeam,
        (false, ["configs", "diff"]) if method == Method::POST => TeamNeed::AnyTeam,
        (
            true,
            ["deployments", name]
            | [
                "deployments",
                name,
                "vms" | "instances" | "errands" | "certificate_expiry",
            ],
        ) => TeamNeed::Deployment { name, admin: false },
        (_, ["deployments", name, ..]) => TeamNeed::Deployment { name, admin: true },
        (true, ["tasks", id]) => task(id, false),
        (true, ["tasks", id, "output"]) => task(id, !event_or_result(query)),
        (false, ["task", id]) if method == Method::DELETE => task(id, true),
        (true, ["resources", id]) => TeamNeed::Bundle { id },
        _ => TeamNeed::Refused,
    }
}

/// Whether a task output request asks only for event and result output.
fn event_or_result(query: Option<&str>) -> bool {
    // Every `type` the query gives counts (the handler takes one of them), decoded as the
    // handler decodes it.
    let types: Vec<String> = query
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decoded(key) == "type").then(|| decoded(value))
        })
        .collect();
    !types.is_empty() && types.iter().all(|t| t == "event" || t == "result")
}

/// Whether a director API request is one `bosh.read` allows; `query` is the request's.
pub fn reader_may(method: &Method, path: &str, query: Option<&str>) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if method == Method::POST {
        // A diff of configs changes nothing.
        return segments == ["configs", "diff"];
    }
    if method != Method::GET && method != Method::HEAD {
        return false;
    }
    match segments.as_slice() {
        ["info"]
        | ["deployments"]
        | ["deployments", _]
        | [
            "deployments",
            _,
            "vms" | "instances" | "errands" | "certificate_expiry",
        ]
        | ["releases"]
        | ["releases", _]
        | ["stemcells"]
        | ["tasks"]
        | ["tasks", _]
        | ["events"]
        | ["events", _]
        | ["configs"]
        | ["configs", _]
        | ["cloud_configs"]
        | ["runtime_configs"]
        | ["locks"]
        | ["ready"]
        | ["metrics"] => true,
        // A task's event and result output; its debug and CPI output is an admin's.
        ["tasks", _, "output"] => event_or_result(query),
        _ => false,
    }
}

/// A query's key or value as a form decodes it: `+` a space, escapes decoded.
fn decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(&text.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// Whether a broker API request is one a reader may make: listings and polls.
pub fn broker_reader_may(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// What a refused reader is told, in the director's words.
pub const REFUSED: &str = "Require one of the scopes: bosh.admin";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_reads_and_changes_nothing() {
        let get = Method::GET;
        for path in [
            "/deployments",
            "/deployments/d",
            "/deployments/d/instances",
            "/tasks/3",
            "/releases/kv",
            "/events",
            "/locks",
        ] {
            assert!(reader_may(&get, path, None), "{path}");
        }
        assert!(reader_may(&get, "/tasks/3/output", Some("type=event")));
        assert!(reader_may(&get, "/tasks/3/output", Some("type=result")));
        assert!(!reader_may(&get, "/tasks/3/output", Some("type=debug")));
        assert!(!reader_may(&get, "/tasks/3/output", None));
        for sneaky in [
            "type=event&type=debug",
            "type=event&typ%65=cpi",
            "typ%65=debug",
        ] {
            assert!(
                !reader_may(&get, "/tasks/3/output", Some(sneaky)),
                "{sneaky}"
            );
        }
        assert!(reader_may(
            &get,
            "/tasks/3/output",
            Some("type=result&type=event")
        ));
        for path in [
            "/deployments/d/variables",
            "/deployments/d/jobs/kv/0/logs",
            "/resources/abc",
        ] {
            assert!(!reader_may(&get, path, None), "{path}");
        }
        assert!(reader_may(&Method::POST, "/configs/diff", None));
        for (method, path) in [
            (Method::POST, "/deployments"),
            (Method::POST, "/releases"),
            (Method::DELETE, "/deployments/d"),
            (Method::PUT, "/deployments/d/jobs/kv"),
            (Method::POST, "/deployments/d/ssh"),
            (Method::DELETE, "/task/3"),
        ] {
            assert!(!reader_may(&method, path, None), "{method} {path}");
        }
        let read = Access::of(&["bosh.read".into()], "u");
        assert!(read.read && !read.admin);
        assert!(broker_reader_may(&Method::GET));
        assert!(!broker_reader_may(&Method::PATCH));
    }
}

#[cfg(test)]
mod team_tests {
    use super::*;

    const UUID: &str = "0b1e2a53-6d0b-4c2e-9b6f-4c55a1c6d2a0";

    #[test]
    fn scopes_give_what_they_name_and_another_directors_uuid_gives_nothing() {
        let scopes = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let team = Access::of(&scopes(&["bosh.teams.a.admin", "bosh.teams.b.read"]), UUID);
        assert!(team.of_teams() && !team.admin && !team.read);
        assert!(team.administers(&["a".into()]) && !team.administers(&["b".into()]));
        assert!(team.reads(&["b".into()]) && !team.reads(&["c".into()]));
        assert!(Access::of(&scopes(&[&format!("bosh.{UUID}.admin")]), UUID).admin);
        let other = Access::of(
            &scopes(&["bosh.11111111-2222-3333-4444-555555555555.admin"]),
            UUID,
        );
        assert_eq!(other, Access::default(), "nothing at all");
        assert!(Access::of(&scopes(&["bosh.releases.upload"]), UUID).upload_releases);
        for ok in [
            "bosh.admin",
            "bosh.teams.pg-team.read",
            &format!("bosh.{UUID}.read"),
            "bosh.releases.upload",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for bad in [
            "bosh.teams..admin",
            "bosh.teams.a.write",
            "bosh.nope.admin",
            "uaa.admin",
            "bosh.stemcells.upload",
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_team_users_requests_need_what_bosh_requires() {
        let need = |m: Method, p: &'static str, q: Option<&str>| team_need(&m, p, q);
        assert_eq!(need(Method::GET, "/deployments", None), TeamNeed::Listing);
        assert_eq!(need(Method::GET, "/tasks", None), TeamNeed::Listing);
        assert_eq!(
            need(Method::POST, "/deployments", None),
            TeamNeed::AnyTeamAdmin
        );
        assert_eq!(
            need(Method::GET, "/deployments/d/instances", None),
            TeamNeed::Deployment {
                name: "d",
                admin: false
            }
        );
        for (m, p) in [
            (Method::DELETE, "/deployments/d"),
            (Method::GET, "/deployments/d/variables"),
            (Method::PUT, "/deployments/d/jobs/web"),
            (Method::POST, "/deployments/d/ssh"),
        ] {
            assert_eq!(
                need(m, p, None),
                TeamNeed::Deployment {
                    name: "d",
                    admin: true
                },
                "{p}"
            );
        }
        assert_eq!(
            need(Method::GET, "/tasks/7/output", Some("type=event")),
            TeamNeed::Task {
                id: 7,
                admin: false
            }
        );
        assert_eq!(
            need(Method::GET, "/tasks/7/output", Some("type=debug")),
            TeamNeed::Task { id: 7, admin: true }
        );
        assert_eq!(
            need(Method::DELETE, "/task/7", None),
            TeamNeed::Task { id: 7, admin: true }
        );
        assert_eq!(
            need(Method::GET, "/resources/abc", None),
            TeamNeed::Bundle { id: "abc" }
        );
        for (m, p) in [
            (Method::GET, "/locks"),
            (Method::POST, "/releases"),
            (Method::POST, "/configs"),
            (Method::PUT, "/resurrection"),
            (Method::POST, "/tasks/cancel"),
            (Method::GET, "/metrics"),
        ] {
            assert_eq!(need(m, p, None), TeamNeed::Refused, "{p}");
        }
    }
}
