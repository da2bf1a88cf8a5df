//! The autoscaler's rows (`deployment_autoscaling`, see its migration): the replica count
//! it set per deployment and its last decision. Runtime queries (like `load`): the table is
//! read and written only here.

use std::collections::HashMap;

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use tracing::instrument;
use uuid::Uuid;

use crate::domain::{AutoscalingStatus, DeploymentSpec, EventKind, Phase};

/// A deployment with `spec.autoscaling`, as the autoscaler sees it each round.
#[derive(Debug, Clone)]
pub struct Autoscaled {
    pub id: Uuid,
    pub project_id: Uuid,
    pub name: String,
    pub namespace: String,
    /// The stored spec (its `autoscaling` is set).
    pub spec: DeploymentSpec,
    pub phase: Phase,
    pub deleting: bool,
    /// A canary runs beside it (its route is the weighted one, never the activator's).
    pub has_canary: bool,
    /// The autoscaler's last state, if it decided before.
    pub state: Option<AutoscalingStatus>,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: Uuid,
    project_id: Uuid,
    name: String,
    namespace: String,
    spec: Json<DeploymentSpec>,
    phase: String,
    deleting: bool,
    has_canary: bool,
    state: Option<Json<AutoscalingStatus>>,
}

/// Every deployment whose spec asks for autoscaling.
#[instrument(skip(db))]
pub async fn autoscaled(db: impl PgExecutor<'_>) -> Result<Vec<Autoscaled>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(
        "select d.id, d.project_id, d.name, p.namespace, d.spec, d.phase,
                d.deletion_requested_at is not null as deleting,
                d.canary is not null as has_canary, a.state
         from model_deployment d
         join project p on p.id = d.project_id
         left join deployment_autoscaling a on a.deployment_id = d.id
         where jsonb_typeof(d.spec -> 'autoscaling') = 'object'",
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Autoscaled {
            id: r.id,
            project_id: r.project_id,
            name: r.name,
            namespace: r.namespace,
            spec: r.spec.0,
            phase: r.phase.parse().unwrap_or(Phase::Pending),
            deleting: r.deleting,
            has_canary: r.has_canary,
            state: r.state.map(|s| s.0),
        })
        .collect())
}

/// The count the autoscaler set for one deployment (`None`: it has not decided yet).
#[instrument(skip(db))]
pub async fn replicas(
    db: impl PgExecutor<'_>,
    deployment: Uuid,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "select replicas::bigint from deployment_autoscaling where deployment_id = $1",
    )
    .bind(deployment)
    .fetch_optional(db)
    .await
}

/// The counts the autoscaler set in one project, by deployment name.
#[instrument(skip(db))]
pub async fn project_replicas(
    db: impl PgExecutor<'_>,
    project: Uuid,
) -> Result<HashMap<String, i64>, sqlx::Error> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "select d.name, a.replicas::bigint from deployment_autoscaling a
         join model_deployment d on d.id = a.deployment_id where a.project_id = $1",
    )
    .bind(project)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().collect())
}

/// The last decisions of these deployments (those with one).
#[instrument(skip_all, fields(deployments = deployments.len()))]
pub async fn states(
    db: impl PgExecutor<'_>,
    deployments: &[Uuid],
) -> Result<HashMap<Uuid, AutoscalingStatus>, sqlx::Error> {
    let rows: Vec<(Uuid, Json<AutoscalingStatus>)> = sqlx::query_as(
        "select deployment_id, state from deployment_autoscaling where deployment_id = any($1)",
    )
    .bind(deployments)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|(id, s)| (id, s.0)).collect())
}

/// One decision to write.
pub struct Decided<'a> {
    pub deployment: &'a Autoscaled,
    pub state: &'a AutoscalingStatus,
    /// The count the decision started from: it is written only if that still holds (the
    /// activator may have scaled the deployment up from zero meanwhile).
    pub from: i64,
    /// The count changed: told on the timeline (which the change feed carries) and the
    /// record is reconciled to apply it.
    pub scaled: bool,
    /// Something a reader sees changed (the count, what is wanted, what limits it): the
    /// change feed carries it as a status change.
    pub announce: bool,
}

/// Writes one decision in one transaction: the state, and when the count changed a
/// timeline entry (`autoscaled`, by `autoscaler`) and a reconcile. Returns false, writing
/// nothing, when the stored count is no longer the one the decision started from.
#[instrument(skip_all, fields(deployment_id = %decided.deployment.id, scaled = decided.scaled))]
pub async fn record(conn: &mut PgConnection, decided: Decided<'_>) -> Result<bool, sqlx::Error> {
    let d = decided.deployment;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let written = sqlx::query(
        "insert into deployment_autoscaling (deployment_id, project_id, replicas, state, updated_at)
         values ($1, $2, $3, $4, now())
         on conflict (deployment_id) do update
             set replicas = excluded.replicas, state = excluded.state, updated_at = now()
             where deployment_autoscaling.replicas = $5",
    )
    .bind(d.id)
    .bind(d.project_id)
    .bind(decided.state.replicas as i32)
    .bind(Json(decided.state))
    .bind(decided.from as i32)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if written == 0 {
        return Ok(false);
    }
    if decided.scaled {
        scaled(
            &mut tx,
            (d.id, d.project_id, &d.name),
            &decided.state.reason,
            "autoscaler",
        )
        .await?;
    } else if decided.announce {
        // As the feed's triggers do: the lock keeps sequence numbers in commit order.
        sqlx::query("select pg_advisory_xact_lock(7254017193841)")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "with added as (
                 insert into deployment_change (project_id, deployment_id, kind)
                 values ($1, $2, 'status') returning seq)
             select pg_notify('modelplane_changes', seq::text) from added",
        )
        .bind(d.project_id)
        .bind(d.id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// A deployment as the activator needs it: where it serves and whether it can be woken.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Activation {
    pub id: Uuid,
    pub project_id: Uuid,
    pub name: String,
    pub namespace: String,
    pub spec: Json<DeploymentSpec>,
    pub phase: String,
    pub deleting: bool,
    /// The count the autoscaler (or the activator) set, if any.
    pub stored: Option<i32>,
    /// Replicas available now, as the worker last wrote.
    pub available: i64,
}

/// Replicas available as the worker last wrote, counted only while the Deployment wants
/// some: pods still serving while it scales to zero are on their way out, and a request
/// forwarded to them would find none. (A macro: sqlx takes only literal SQL.)
macro_rules! available {
    () => {
        "case when coalesce((d.status -> 'replicas' ->> 'desired')::bigint, 0) > 0
              then coalesce((d.status -> 'replicas' ->> 'available')::bigint, 0) else 0 end"
    };
}

/// The deployment with id `id`, for the activator (`None`: there is none).
#[instrument(skip(db))]
pub async fn activation(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<Option<Activation>, sqlx::Error> {
    sqlx::query_as(concat!(
        "select d.id, d.project_id, d.name, p.namespace, d.spec, d.phase,
                d.deletion_requested_at is not null as deleting, a.replicas as stored,
                ",
        available!(),
        " as available
         from model_deployment d
         join project p on p.id = d.project_id
         left join deployment_autoscaling a on a.deployment_id = d.id
         where d.id = $1"
    ))
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Replicas available now of deployment `id`, as the worker last wrote (0 when gone, or
/// while it scales to zero).
pub async fn available(db: impl PgExecutor<'_>, id: Uuid) -> Result<i64, sqlx::Error> {
    Ok(sqlx::query_scalar(concat!(
        "select ",
        available!(),
        " from model_deployment d where d.id = $1"
    ))
    .bind(id)
    .fetch_optional(db)
    .await?
    .unwrap_or(0))
}

/// The channel on which a worker says that a waking deployment's Service has a ready
/// endpoint (the payload: the deployment's id), so the requests the activators hold go on at
/// once instead of after the worker's next pass has written the status.
pub const SERVING_CHANNEL: &str = "modelplane_serving";

/// Says on [`SERVING_CHANNEL`] that deployment `id`'s Service has a ready endpoint.
pub async fn announce_serving(db: impl PgExecutor<'_>, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("select pg_notify($1, $2)")
        .bind(SERVING_CHANNEL)
        .bind(id.to_string())
        .execute(db)
        .await?;
    Ok(())
}

/// Scales a deployment at zero to one replica, with a timeline entry (by `activator`) and a
/// reconcile, unless its count is no longer zero: exactly one of any number of concurrent
/// callers, in any process, gets true.
#[instrument(skip_all, fields(deployment_id = %deployment.id))]
pub async fn activate(
    db: &sqlx::PgPool,
    deployment: &Activation,
    state: &AutoscalingStatus,
) -> Result<bool, sqlx::Error> {
    let mut tx = db.begin().await?;
    let written = sqlx::query(
        "insert into deployment_autoscaling (deployment_id, project_id, replicas, state, updated_at)
         values ($1, $2, $3, $4, now())
         on conflict (deployment_id) do update
             set replicas = excluded.replicas, state = excluded.state, updated_at = now()
             where deployment_autoscaling.replicas = 0",
    )
    .bind(deployment.id)
    .bind(deployment.project_id)
    .bind(state.replicas as i32)
    .bind(Json(state))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if written == 0 {
        return Ok(false);
    }
    scaled(
        &mut tx,
        (deployment.id, deployment.project_id, &deployment.name),
        &state.reason,
        "activator",
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// What a changed count writes beside it: the timeline entry (`autoscaled`, by `actor`;
/// its own trigger puts it on the change feed) and a reconcile that applies the count.
async fn scaled(
    tx: &mut PgConnection,
    (id, project_id, name): (Uuid, Uuid, &str),
    reason: &str,
    actor: &str,
) -> Result<(), sqlx::Error> {
    super::events::insert_event(
        &mut *tx,
        super::events::NewEvent {
            deployment_id: id,
            project_id,
            deployment_name: name,
            kind: EventKind::Autoscaled,
            message: reason,
            actor,
        },
    )
    .await?;
    super::work_queue::enqueue_reconcile(&mut *tx, id, None).await
}

/// Forgets the counts of deployments that no longer autoscale: their spec's `replicas`
/// rules again, and autoscaling turned on later starts afresh from it.
#[instrument(skip(db))]
pub async fn forget_unscaled(db: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(
        "delete from deployment_autoscaling a using model_deployment d
         where d.id = a.deployment_id and jsonb_typeof(d.spec -> 'autoscaling') is distinct from 'object'",
    )
    .execute(db)
    .await?
    .rows_affected())
}
