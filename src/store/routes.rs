//! The Gateways' request space: the locks a route takes, and the route rules that need the
//! other deployments (the SQL function `check_route_claim`, migration `route_rules_once`,
//! which creates run inside `create_deployment_record` and spec changes call here).

use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

use crate::domain::RouteClaim;

/// The part of the Gateways' request space a route lives in: its lock's key and paths (see
/// [`lock_route_space`]). A hostname is one space for every project, locked whole (its owner
/// is checked across projects). A project's host-less routes are locked by path, so writers
/// of paths that cannot overlap do not wait for each other.
pub struct RouteSpace {
    pub space: String,
    pub paths: Vec<String>,
}

impl RouteSpace {
    pub fn of(project_id: Uuid, route: &RouteClaim) -> Self {
        match &route.hostname {
            Some(host) => Self {
                space: format!("host:{host}"),
                paths: Vec::new(),
            },
            None => Self {
                space: format!("project:{project_id}"),
                paths: route.path_and_ancestors(),
            },
        }
    }
}

/// The route rule's refusal a database error stands for, or the error itself.
pub(super) fn refused_route(err: sqlx::Error) -> Result<RouteRefusal, sqlx::Error> {
    let refusal = match &err {
        sqlx::Error::Database(db) => {
            let detail = db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .and_then(|pg| pg.detail());
            db.code()
                .as_deref()
                .and_then(|code| route_refusal(code, detail))
        }
        _ => None,
    };
    refusal.ok_or(err)
}

/// The refusal a route rule's SQLSTATE stands for (function `check_route_claim`), if any.
pub(super) fn route_refusal(code: &str, detail: Option<&str>) -> Option<RouteRefusal> {
    match code {
        "MP001" => Some(RouteRefusal::HostnameTaken),
        "MP002" => {
            let other = detail.unwrap_or_default();
            let (name, path) = other.split_once(' ').unwrap_or((other, ""));
            Some(RouteRefusal::Overlaps {
                name: name.to_owned(),
                path: path.to_owned(),
            })
        }
        _ => None,
    }
}

/// Holds transaction-scoped locks on one part of the Gateways' request space (a hostname,
/// or a project's host-less routes), so two writers cannot both find it free.
///
/// `paths` narrows it: writers take the space's path hierarchy from the root down, shared
/// on every ancestor and exclusive on the path itself, so only writers whose paths overlap
/// (one is a prefix of the other, or equal) take turns. Without `paths` the whole space is
/// locked. Both orders run root first, so no two writers can deadlock. The SQL function of
/// the same name (migration `create_in_one_call`) does it; creates call it from there.
#[instrument(skip(db))]
pub async fn lock_route_space(
    db: impl PgExecutor<'_>,
    space: &str,
    paths: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query!("select lock_route_space($1, $2)", space, paths)
        .fetch_one(db)
        .await?;
    Ok(())
}

/// Why the route rules that need the other deployments refuse a route (SQLSTATEs MP001 and
/// MP002 of the SQL function `check_route_claim`, migration `route_rules_once`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteRefusal {
    /// Another project's deployment (being deleted or not) routes the hostname.
    HostnameTaken,
    /// A deployment of the project routes an overlapping path on the same Gateway and
    /// hostname: its name and path.
    Overlaps { name: String, path: String },
}

/// Runs the route rules that need the other deployments for `route`, as a create does (one
/// implementation, in SQL): `None` when `except`'s route may be taken. The caller holds the
/// route-space lock. A refusal aborts the transaction, which the caller then rolls back.
#[instrument(skip(db))]
pub async fn check_route_claim(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    except: Uuid,
    route: &RouteClaim,
) -> Result<Option<RouteRefusal>, sqlx::Error> {
    let result = sqlx::query!(
        "select check_route_claim($1, $2, $3, $4, $5, $6)",
        project_id,
        except,
        route.gateway,
        route.hostname,
        route.path_prefix,
        &route.path_and_ancestors() as &[String],
    )
    .fetch_one(db)
    .await;
    match result {
        Ok(_) => Ok(None),
        Err(err) => refused_route(err).map(Some),
    }
}
