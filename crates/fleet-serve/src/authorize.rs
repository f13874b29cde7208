//! Whether a signed-in user's scopes allow a request (see [`crate::scopes`]): an admin
//! everything, a reader what it may read, a team user what concerns its teams'
//! deployments, looked up in the director. What a team user lists is narrowed to those
//! deployments by the handlers, from the [`Visible`] set put on the request here.

use std::collections::BTreeSet;

use axum::extract::Request;
use axum::http::Method;

use fleet_director::Director;

use crate::rejection::Flavor;
use crate::scopes::{self, Access, TeamNeed};

/// The deployments a team user may see; absent from a request for anyone else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visible(pub BTreeSet<String>);

impl Visible {
    /// Whether `deployment` may be shown, for a request that may carry a [`Visible`].
    pub fn shows(visible: Option<&Visible>, deployment: Option<&str>) -> bool {
        match visible {
            None => true,
            Some(v) => deployment.is_some_and(|d| v.0.contains(d)),
        }
    }
}

/// The teams a team user administers, for the director it acts through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamsActing(pub Vec<String>);

/// What a request is allowed, and what goes on it for the handlers.
pub enum Decision {
    Refused,
    Allowed {
        visible: Option<Visible>,
        teams: Option<TeamsActing>,
    },
}

fn allowed() -> Decision {
    Decision::Allowed {
        visible: None,
        teams: None,
    }
}

/// What a request asks, owned: a request's body is not `Sync`, so the request itself is
/// not held across the lookups.
pub struct Asked {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
}

impl Asked {
    pub fn of(request: &Request) -> Asked {
        Asked {
            method: request.method().clone(),
            path: request.uri().path().to_string(),
            query: request.uri().query().map(str::to_string),
        }
    }
}

/// Decides what is `asked` for `access`; `director` answers a team user's lookups.
pub async fn decide(
    flavor: Flavor,
    access: &Access,
    asked: &Asked,
    director: Option<&Director>,
) -> Decision {
    let (method, path, query) = (&asked.method, asked.path.as_str(), asked.query.as_deref());
    if access.admin {
        return allowed();
    }
    match flavor {
        Flavor::Broker => {
            return if access.read && scopes::broker_reader_may(method) {
                allowed()
            } else {
                Decision::Refused
            };
        }
        Flavor::Director => {}
    }
    if access.read && scopes::reader_may(method, path, query) {
        return allowed();
    }
    if access.upload_releases && method == Method::POST && path.trim_end_matches('/') == "/releases"
    {
        return allowed();
    }
    let Some(director) = director.filter(|_| access.of_teams()) else {
        return Decision::Refused;
    };
    match by_teams(access, scopes::team_need(method, path, query), director).await {
        Ok(visible) => Decision::Allowed {
            visible,
            teams: Some(TeamsActing(access.team_admin.iter().cloned().collect())),
        },
        Err(()) => Decision::Refused,
    }
}

/// A team user's request: `Ok(Some(visible))` for a listing, `Ok(None)` otherwise allowed,
/// `Err` refused (also when what it names is not found, or the store cannot say).
async fn by_teams(
    access: &Access,
    need: TeamNeed<'_>,
    director: &Director,
) -> Result<Option<Visible>, ()> {
    let teams_of =
        |deployment: String| async move { director.teams_of(&deployment).await.map_err(|_| ()) };
    let verdict = |ok: bool| if ok { Ok(None) } else { Err(()) };
    let deployment_allows = |teams: &[String], admin: bool| {
        if admin {
            access.administers(teams)
        } else {
            access.reads(teams)
        }
    };
    match need {
        TeamNeed::Refused => Err(()),
        TeamNeed::AnyTeam => Ok(None),
        TeamNeed::AnyTeamAdmin => verdict(!access.team_admin.is_empty()),
        TeamNeed::Listing => {
            let all = director.deployment_teams().await.map_err(|_| ())?;
            let visible = all
                .into_iter()
                .filter(|(_, teams)| access.reads(teams))
                .map(|(name, _)| name)
                .collect();
            Ok(Some(Visible(visible)))
        }
        TeamNeed::Deployment { name, admin } => {
            verdict(deployment_allows(&teams_of(name.to_string()).await?, admin))
        }
        TeamNeed::Task { id, admin } => {
            let task = director.task(id).await.map_err(|_| ())?.ok_or(())?;
            let deployment = task.deployment.ok_or(())?;
            verdict(deployment_allows(&teams_of(deployment).await?, admin))
        }
        TeamNeed::Bundle { id } => {
            let deployment = director
                .log_bundle_deployment(id)
                .await
                .map_err(|_| ())?
                .ok_or(())?;
            verdict(deployment_allows(&teams_of(deployment).await?, true))
        }
    }
}
