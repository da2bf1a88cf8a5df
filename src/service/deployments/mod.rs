//! Model deployment use cases: create, read, list, change, act on, delete.
//!
//! Every change runs in one transaction: lock the row, check `If-Match`, compute and
//! validate the new spec, store it with a revision and a timeline event, and queue a
//! reconcile. A change that fails leaves nothing behind.

mod create;
mod reads;
mod routes;

pub use create::{Created, create_deployment};

pub use reads::{
    GpuUsage, get_deployment, get_deployment_by_id, get_deployment_in, gpu_usage, latest_events_in,
    list_deployments, list_deployments_in, list_events, list_events_in, list_revisions,
    list_revisions_in, phase_counts, revision_counts_in,
};
use routes::check_route;
pub(crate) use routes::route_claim;

use serde::Deserialize;

use sqlx::{Postgres, Transaction};
use tracing::instrument;
use uuid::Uuid;

use super::access::{Authorized, authorize};
use super::capacity::{self, WriteOptions};
use super::diff::changed_paths;
use super::projects::parse_uuid_cursor;
use super::{Actor, Context, Page, Precondition, ServiceError, cursor, page_size};
use crate::domain::{
    AdapterSpec, Deployment, DeploymentName, DeploymentSpec, EventKind, FieldErrors, LabelSelector,
    Phase, Project, Revision, Role, RouteClaim, RoutingMode, ServingRole, TimelineEvent,
    check_shared_gateway_rules, entity_tag, from_json_value,
};
use crate::store;
use crate::store::deployments::{DeploymentFilter, DeploymentRead, DeploymentRow};
use crate::store::events::NewEvent;
use crate::store::routes::{RouteRefusal, RouteSpace};

/// Create a deployment. (The REST body and the GraphQL arguments both become this; the
/// wire types, with their schemas, live in `api/`.)
#[derive(Debug, Clone)]
pub struct CreateDeployment {
    pub name: String,
    pub spec: DeploymentSpec,
}

/// Replace a deployment's spec.
#[derive(Debug, Clone)]
pub struct ReplaceDeployment {
    pub spec: DeploymentSpec,
}

/// Set a deployment's replicas (one role's, for a disaggregated deployment).
#[derive(Debug, Clone)]
pub struct ScaleDeployment {
    pub replicas: i64,
    /// `prefill` or `decode`: needed by, and only by, a disaggregated deployment.
    pub role: Option<String>,
}

/// Serve one more LoRA adapter (`POST …/adapters`): a spec change that adds it to
/// `spec.adapters`, so running pods load it without a restart.
#[derive(Debug, Clone)]
pub struct AddAdapter {
    pub adapter: AdapterSpec,
}

/// Make an earlier revision's spec current again.
#[derive(Debug, Clone, Copy)]
pub struct RollbackDeployment {
    /// The revision whose spec becomes current again.
    pub revision: i64,
    /// Replicas after the rollback; the current count when `None`.
    pub replicas: Option<i64>,
}

/// Filters and paging for listing deployments.
#[derive(Debug, Clone, Default)]
pub struct ListDeployments {
    /// Only deployments in this phase.
    pub phase: Option<String>,
    /// A Kubernetes label selector over `spec.labels`.
    pub label_selector: Option<String>,
    /// Only names starting with this.
    pub name_prefix: Option<String>,
    /// Page size, 1 to 200 (default 50).
    pub limit: Option<i64>,
    /// `nextCursor` from the previous page, with the same filters.
    pub cursor: Option<String>,
}

/// The document a merge patch of the spec applies to: `{"spec": …}`, the resource's
/// writable part, read back with the same field errors as a request body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SpecDocument {
    pub spec: DeploymentSpec,
}

impl SpecDocument {
    /// `spec` with a merge patch (RFC 7386) of `{"spec": …}` applied.
    pub(crate) fn patched(
        spec: &DeploymentSpec,
        patch: &serde_json::Value,
    ) -> Result<DeploymentSpec, FieldErrors> {
        let mut document =
            serde_json::json!({ "spec": serde_json::to_value(spec).expect("spec serialises") });
        json_patch::merge(&mut document, patch);
        leaving_pool_mode_drops_its_settings(patch, &mut document);
        Ok(from_json_value::<Self>(document)?.spec)
    }
}

/// What a spec-changing request asks for.
enum SpecChange {
    AddAdapter(AdapterSpec),
    RemoveAdapter(String),
    MergePatch(serde_json::Value),
    Replace(Box<DeploymentSpec>),
    Scale {
        replicas: i64,
        role: Option<String>,
    },
    Rollback {
        revision: i64,
        replicas: Option<i64>,
    },
}

/// A patch that switches `routing.mode` away from `InferencePool` without saying what
/// becomes of `routing.inferencePool` drops the pool settings too: they only apply in that
/// mode, and asking for a second field (`inferencePool: null`) just to leave it was a 422
/// users hit. A patch that names `inferencePool` itself is taken as written.
fn leaving_pool_mode_drops_its_settings(
    patch: &serde_json::Value,
    document: &mut serde_json::Value,
) {
    let routing = &patch["spec"]["routing"];
    let leaves = routing
        .get("mode")
        .is_some_and(|mode| mode != "InferencePool");
    if leaves
        && routing.get("inferencePool").is_none()
        && let Some(routing) = document["spec"]["routing"].as_object_mut()
    {
        routing.remove("inferencePool");
    }
}

/// Applies a JSON merge patch (RFC 7386) to `{"spec": …}`.
pub async fn patch_deployment(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    patch: serde_json::Value,
    precondition: &Precondition,
    options: WriteOptions,
) -> Result<Deployment, ServiceError> {
    if !patch.is_object() {
        return Err(FieldErrors::single("", "a merge patch must be a JSON object").into());
    }
    change_spec(
        ctx,
        actor,
        project,
        name,
        precondition,
        SpecChange::MergePatch(patch),
        options,
    )
    .await
}

pub async fn replace_deployment(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    request: ReplaceDeployment,
    precondition: &Precondition,
    options: WriteOptions,
) -> Result<Deployment, ServiceError> {
    change_spec(
        ctx,
        actor,
        project,
        name,
        precondition,
        SpecChange::Replace(Box::new(request.spec)),
        options,
    )
    .await
}

pub async fn scale_deployment(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    request: ScaleDeployment,
    precondition: &Precondition,
    options: WriteOptions,
) -> Result<Deployment, ServiceError> {
    change_spec(
        ctx,
        actor,
        project,
        name,
        precondition,
        SpecChange::Scale {
            replicas: request.replicas,
            role: request.role,
        },
        options,
    )
    .await
}

pub async fn add_adapter(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    request: AddAdapter,
    precondition: &Precondition,
    options: WriteOptions,
) -> Result<Deployment, ServiceError> {
    let change = SpecChange::AddAdapter(request.adapter);
    change_spec(ctx, actor, project, name, precondition, change, options).await
}

/// Stops serving a LoRA adapter (`DELETE …/adapters/{adapter}`): running pods unload it.
pub async fn remove_adapter(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    adapter: &str,
    precondition: &Precondition,
    options: WriteOptions,
) -> Result<Deployment, ServiceError> {
    let change = SpecChange::RemoveAdapter(adapter.to_owned());
    change_spec(ctx, actor, project, name, precondition, change, options).await
}

pub async fn rollback_deployment(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    request: RollbackDeployment,
    precondition: &Precondition,
    options: WriteOptions,
) -> Result<Deployment, ServiceError> {
    let change = SpecChange::Rollback {
        revision: request.revision,
        replicas: request.replicas,
    };
    change_spec(ctx, actor, project, name, precondition, change, options).await
}

/// The one path every spec change takes. Kept whole (~85 lines): it is the transaction's
/// script (lock, precondition, new spec, route rules, admission, store, event, queue), read
/// top to bottom; each step is a call.
#[instrument(skip(ctx, actor, change, precondition))]
async fn change_spec(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    precondition: &Precondition,
    change: SpecChange,
    options: WriteOptions,
) -> Result<Deployment, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Editor).await?;
    let mut conn = ctx.hot.acquire().await?;
    let mut tx = store::begin_route_write(&mut conn).await?;
    let row = lock_for_change(&mut tx, &project, name, precondition).await?;
    let is_scale = matches!(change, SpecChange::Scale { .. });
    let (new_spec, reason, kind) = compute_spec(ctx, &mut tx, &row, change).await?;
    if new_spec == row.spec.0 {
        // Nothing changed: no new generation, revision or reconcile.
        tx.rollback().await?;
        return Ok(row.into_record(&project.name));
    }

    if new_spec.disaggregation.is_some() != row.spec.0.disaggregation.is_some() {
        // The pods move between one Kubernetes Deployment and two, with other selectors.
        return Err(FieldErrors::single(
            "spec.disaggregation",
            "is set when a deployment is created and kept: create a new deployment to change between one set of pods and prefill/decode roles",
        )
        .into());
    }
    if new_spec.nodes() != row.spec.0.nodes() {
        // Between a Deployment and a LeaderWorkerSet, or groups of another size.
        return Err(FieldErrors::single(
            "spec.nodesPerReplica",
            format!(
                "is set when a deployment is created and kept ({}): create a new deployment to change how many nodes a replica spans",
                row.spec.0.nodes()
            ),
        )
        .into());
    }
    if row.canary.is_some() && new_spec.routing.mode == Some(RoutingMode::InferencePool) {
        return Err(ServiceError::conflict(
            Some("spec.routing.mode"),
            "the deployment has a canary, which routes by weighted Service backends: promote or abort it first",
        ));
    }
    let canary = row.canary.as_ref().map(|c| &c.0.spec);
    let before = capacity::tracks_of(ctx, &row.name, &row.spec.0, canary);
    let after = capacity::tracks_of(ctx, &row.name, &new_spec, canary);
    let change = capacity::Change {
        project_id: project.id,
        before: &before,
        after: &after,
        status: Some(&row.status.0),
    };
    let warnings = capacity::admit(ctx, &mut tx, change, options)
        .await
        .map_err(|err| match err {
            // `scale` takes `{"replicas": n}`: its refusal names that field.
            ServiceError::QuotaExceeded(mut exceeded)
                if is_scale && exceeded.field == "spec.replicas" =>
            {
                exceeded.field = "replicas";
                ServiceError::QuotaExceeded(exceeded)
            }
            other => other,
        })?;
    let route = route_claim(ctx, &project, &row.name, &new_spec);
    // A route is checked when it moves; one that was accepted before stays accepted.
    if route != route_claim(ctx, &project, &row.name, &row.spec.0) {
        check_route(ctx, &mut tx, &project, row.id, &new_spec, &route).await?;
    }
    let old_json = serde_json::to_value(&row.spec.0).expect("spec serialises");
    let new_json = serde_json::to_value(&new_spec).expect("spec serialises");
    let changed = changed_paths(&old_json, &new_json, 3).join(", ");
    let updated =
        store::deployments::update_deployment_spec(&mut *tx, row.id, &new_spec, &route).await?;
    store::revisions::insert_revision(
        &mut *tx,
        row.id,
        updated.generation,
        &new_spec,
        &reason,
        actor.name(),
    )
    .await?;
    let message = format!("generation {}: {reason} ({changed})", updated.generation);
    record_and_queue(&mut tx, &updated, kind, &message, actor).await?;
    let mut record = updated.into_record(&project.name);
    record.warnings = warnings;
    if options.dry_run {
        tx.rollback().await?;
        return Ok(record);
    }
    tx.commit().await?;
    conn.reuse();
    tracing::info!(deployment_id = %record.id, generation = record.generation, %reason, "spec changed");
    Ok(record)
}

/// The new spec, the revision's reason and the timeline event's kind.
async fn compute_spec(
    ctx: &Context,
    tx: &mut Transaction<'_, Postgres>,
    row: &DeploymentRow,
    change: SpecChange,
) -> Result<(DeploymentSpec, String, EventKind), ServiceError> {
    let parse = |spec: DeploymentSpec| spec.parse(&row.name, &ctx.limits).map(|s| s.spec);
    Ok(match change {
        SpecChange::MergePatch(patch) => (
            parse(SpecDocument::patched(&row.spec.0, &patch)?)?,
            "updated".into(),
            EventKind::SpecChanged,
        ),
        SpecChange::Replace(spec) => (parse(*spec)?, "replaced".into(), EventKind::SpecChanged),
        SpecChange::AddAdapter(adapter) => {
            if row.spec.0.adapters.iter().any(|a| a.name == adapter.name) {
                return Err(ServiceError::conflict(
                    Some("name"),
                    format!(
                        "the deployment already serves an adapter `{}`; remove it first to change its source",
                        adapter.name
                    ),
                ));
            }
            let mut spec = row.spec.0.clone();
            let at = spec.adapters.len();
            let reason = format!("adapter {} added", adapter.name);
            spec.adapters.push(adapter);
            // The request's own fields are named as it names them (`name`, `source`).
            let own = format!("spec.adapters[{at}].");
            let spec = parse(spec).map_err(|errors| {
                let mut named = FieldErrors::new();
                for e in errors.into_vec() {
                    match e.field.strip_prefix(&own) {
                        Some(field) => named.push(field, e.message),
                        None => named.push(e.field, e.message),
                    }
                }
                named
            })?;
            (spec, reason, EventKind::SpecChanged)
        }
        SpecChange::RemoveAdapter(name) => {
            let mut spec = row.spec.0.clone();
            let before = spec.adapters.len();
            spec.adapters.retain(|a| a.name != name);
            if spec.adapters.len() == before {
                return Err(ServiceError::not_found("adapter", name));
            }
            (
                parse(spec)?,
                format!("adapter {name} removed"),
                EventKind::SpecChanged,
            )
        }
        SpecChange::Scale { replicas, role } => {
            check_replicas(ctx, replicas)?;
            if let Some(why) = row.spec.0.autoscaling.as_ref().map(|a| a.no_manual_scale()) {
                return Err(ServiceError::conflict(Some("replicas"), why));
            }
            let mut spec = row.spec.0.clone();
            let reason = match (spec.disaggregation.as_mut(), role.as_deref()) {
                (None, None) => {
                    spec.replicas = Some(replicas);
                    format!("scaled to {replicas}")
                }
                (None, Some(_)) => {
                    return Err(FieldErrors::single(
                        "role",
                        "only a disaggregated deployment (spec.disaggregation) has roles",
                    )
                    .into());
                }
                (Some(roles), role) => {
                    let Some(role) = role.and_then(ServingRole::parse) else {
                        return Err(FieldErrors::single(
                            "role",
                            "must be prefill or decode: a disaggregated deployment scales one role at a time",
                        )
                        .into());
                    };
                    match role {
                        ServingRole::Prefill => roles.prefill.replicas = Some(replicas),
                        ServingRole::Decode => roles.decode.replicas = Some(replicas),
                    }
                    format!("{} scaled to {replicas}", role.as_str())
                }
            };
            (parse(spec)?, reason, EventKind::Scaled)
        }
        SpecChange::Rollback { revision, replicas } => {
            if let Some(replicas) = replicas {
                check_replicas(ctx, replicas)?;
                if row.spec.0.disaggregation.is_some() {
                    return Err(FieldErrors::single(
                        "replicas",
                        "a disaggregated deployment keeps its roles' replicas: scale a role with POST …/scale and its `role`",
                    )
                    .into());
                }
            }
            let old = store::revisions::find_revision(&mut **tx, row.id, revision)
                .await?
                .ok_or_else(|| {
                    FieldErrors::single("revision", format!("revision {revision} does not exist"))
                })?;
            let mut spec = old.spec;
            // The current scale stays unless the rollback names one (a disaggregated
            // deployment's: each role's).
            spec.replicas = replicas.or(row.spec.0.replicas);
            if let (Some(old_roles), Some(now)) =
                (spec.disaggregation.as_mut(), &row.spec.0.disaggregation)
            {
                old_roles.prefill.replicas = now.prefill.replicas;
                old_roles.decode.replicas = now.decode.replicas;
            }
            (
                parse(spec)?,
                format!("rolled back to revision {revision}"),
                EventKind::RolledBack,
            )
        }
    })
}

/// The scale and rollback actions check their own `replicas` input, so an error names it.
fn check_replicas(ctx: &Context, replicas: i64) -> Result<(), FieldErrors> {
    let max = ctx.limits.max_replicas;
    if (0..=max).contains(&replicas) {
        Ok(())
    } else {
        Err(FieldErrors::single(
            "replicas",
            format!("must be between 0 and {max}"),
        ))
    }
}

/// Sets the restart marker: pods are replaced without a spec change.
#[instrument(skip(ctx, actor, precondition))]
pub async fn restart_deployment(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    precondition: &Precondition,
) -> Result<Deployment, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Editor).await?;
    let mut tx = ctx.pool.begin().await?;
    let row = lock_for_change(&mut tx, &project, name, precondition).await?;
    let updated = store::deployments::set_restart_marker(&mut *tx, row.id).await?;
    record_and_queue(
        &mut tx,
        &updated,
        EventKind::RestartRequested,
        "restart requested: pods will be replaced",
        actor,
    )
    .await?;
    tx.commit().await?;
    Ok(updated.into_record(&project.name))
}

/// Marks the deployment `Deleting` and queues the removal of its objects.
/// Deleting a deployment that is already being deleted is accepted again.
#[instrument(skip(ctx, actor, precondition))]
pub async fn delete_deployment(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    precondition: &Precondition,
) -> Result<Deployment, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Editor).await?;
    let mut tx = ctx.pool.begin().await?;
    let row = lock(&mut tx, &project, name, precondition).await?;
    if row.deletion_requested_at.is_some() {
        tx.rollback().await?;
        return Ok(row.into_record(&project.name));
    }
    let updated = store::deployments::mark_deployment_deleting(&mut *tx, row.id).await?;
    record_and_queue(
        &mut tx,
        &updated,
        EventKind::DeleteRequested,
        "delete requested",
        actor,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(deployment_id = %updated.id, "deployment delete requested");
    Ok(updated.into_record(&project.name))
}

/// How a caller names a deployment whose timeline it wants.
#[derive(Debug, Clone, Copy)]
pub enum DeploymentRef<'a> {
    Name(&'a str),
    /// Works after the deployment is gone.
    Id(Uuid),
}

/// Locks the row for the rest of the transaction and checks `If-Match`.
async fn lock(
    tx: &mut Transaction<'_, Postgres>,
    project: &Project,
    name: &str,
    precondition: &Precondition,
) -> Result<DeploymentRow, ServiceError> {
    check_name_could_exist(name)?;
    let row = store::deployments::lock_deployment(&mut **tx, project.id, name)
        .await?
        .ok_or_else(|| ServiceError::not_found("deployment", name))?;
    check_precondition(&row, precondition)?;
    Ok(row)
}

/// A name from a URL that is not a valid name cannot exist: 404 without asking the database.
fn check_name_could_exist(name: &str) -> Result<(), ServiceError> {
    DeploymentName::parse(name)
        .map(|_| ())
        .map_err(|_| ServiceError::not_found("deployment", name))
}

/// Like [`lock`], and refuses a deployment that is being deleted.
pub(super) async fn lock_for_change(
    tx: &mut Transaction<'_, Postgres>,
    project: &Project,
    name: &str,
    precondition: &Precondition,
) -> Result<DeploymentRow, ServiceError> {
    let row = lock(tx, project, name, precondition).await?;
    if row.deletion_requested_at.is_some() {
        return Err(ServiceError::conflict(
            None,
            format!("deployment `{name}` is being deleted and can no longer be changed"),
        ));
    }
    Ok(row)
}

/// Checks `precondition` against the row's current entity tag (weak tags never match).
fn check_precondition(
    row: &DeploymentRow,
    precondition: &Precondition,
) -> Result<(), ServiceError> {
    let current = entity_tag(row.id, row.generation);
    match precondition {
        Precondition::None | Precondition::Exists => Ok(()),
        Precondition::OneOf(tags) if tags.contains(&current) => Ok(()),
        Precondition::OneOf(tags) => Err(ServiceError::PreconditionFailed(format!(
            "If-Match {} does not match the current ETag {current}: the spec changed since you read it",
            tags.join(", ")
        ))),
        Precondition::Generation(expected) if *expected == row.generation => Ok(()),
        Precondition::Generation(expected) => Err(ServiceError::PreconditionFailed(format!(
            "expected generation {expected}, but the spec is at generation {}: it changed since you read it",
            row.generation
        ))),
    }
}

/// The timeline entry of a change and the reconcile it queues, in the change's transaction.
pub(super) async fn record_and_queue(
    tx: &mut Transaction<'_, Postgres>,
    row: &DeploymentRow,
    kind: EventKind,
    message: &str,
    actor: &Actor,
) -> Result<(), sqlx::Error> {
    record_event(tx, row, kind, message, actor).await?;
    store::work_queue::enqueue_reconcile(
        &mut **tx,
        row.id,
        crate::telemetry::current_traceparent().as_deref(),
    )
    .await
}

pub(super) async fn record_event(
    tx: &mut Transaction<'_, Postgres>,
    row: &DeploymentRow,
    kind: EventKind,
    message: &str,
    actor: &Actor,
) -> Result<(), sqlx::Error> {
    store::events::insert_event(
        &mut **tx,
        NewEvent {
            deployment_id: row.id,
            project_id: row.project_id,
            deployment_name: &row.name,
            kind,
            message,
            actor: actor.name(),
        },
    )
    .await
}

fn parse_i64_cursor(key: &str) -> Result<i64, FieldErrors> {
    key.parse()
        .map_err(|_| FieldErrors::single("cursor", "is not a cursor returned by this list"))
}
