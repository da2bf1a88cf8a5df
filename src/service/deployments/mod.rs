//! Model deployment use cases: create, read, list, change, act on, delete.
//!
//! Every change runs in one transaction: lock the row, check `If-Match`, compute and
//! validate the new spec, store it with a revision and a timeline event, and queue a
//! reconcile. A change that fails leaves nothing behind.

mod reads;
mod routes;

pub use reads::{
    GpuUsage, get_deployment, get_deployment_by_id, get_deployment_in, gpu_usage, latest_events_in,
    list_deployments, list_deployments_in, list_events, list_events_in, list_revisions,
    list_revisions_in, phase_counts, revision_counts_in,
};
pub(crate) use routes::route_claim;
use routes::{check_route, hostname_conflict, path_conflict, reserved_hostnames};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use sqlx::{Postgres, Transaction};
use tracing::instrument;
use uuid::Uuid;

use super::access::{Authorized, authorize};
use super::capacity::{self, WriteOptions};
use super::diff::changed_paths;
use super::projects::parse_uuid_cursor;
use super::{Actor, Context, Page, Precondition, ServiceError, cursor, page_size};
use crate::domain::{
    Deployment, DeploymentName, DeploymentSpec, DeploymentStatus, EventKind, FieldErrors,
    LabelSelector, Phase, Project, Revision, Role, RouteClaim, RoutingMode, TimelineEvent,
    canonical_json, check_not_canary_name, check_shared_gateway_rules, entity_tag, from_json_value,
};
use crate::store;
use crate::store::deployments::{CreateOutcome, DeploymentFilter, DeploymentRow, NewDeployment};
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

/// Set a deployment's replicas.
#[derive(Debug, Clone, Copy)]
pub struct ScaleDeployment {
    pub replicas: i64,
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

/// The outcome of a create: the record, and whether it replays an earlier request.
#[derive(Debug)]
pub struct Created {
    pub deployment: Deployment,
    pub replayed: bool,
}

/// What a spec-changing request asks for.
enum SpecChange {
    MergePatch(serde_json::Value),
    Replace(Box<DeploymentSpec>),
    Scale(i64),
    Rollback {
        revision: i64,
        replicas: Option<i64>,
    },
}

/// Creates a deployment. One function (~140 lines) on purpose: the one-call path (creates
/// that wait together share a round trip) and the transactional one share the validated
/// values, and the order of refusals (a taken name, a reused key, the quota, the Gateway's
/// rules, the routes) is the API's; split, that order would be spread over several places.
#[instrument(skip(ctx, actor, request, idempotency_key), fields(project, deployment = %request.name))]
pub async fn create_deployment(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    request: CreateDeployment,
    idempotency_key: Option<&str>,
    options: WriteOptions,
) -> Result<Created, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Editor).await?;
    let request_hash = hash_request(&request);

    let mut errors = FieldErrors::new();
    let name = errors.check("name", DeploymentName::parse(&request.name));
    if let Some(Err(reserved)) = name.as_ref().map(check_not_canary_name) {
        errors.extend(reserved);
    }
    // A new deployment asks for keys where the installation checks them (a stored record
    // without `access` stays public: nothing changes for its callers on an upgrade).
    let mut spec = request.spec;
    if spec.access.is_none() && ctx.limits.model_keys {
        spec.access = Some(crate::domain::Access::Keys);
    }
    let serving = match spec.parse(&request.name, &ctx.limits) {
        Ok(serving) => Some(serving),
        Err(spec_errors) => {
            errors.extend(spec_errors);
            None
        }
    };
    let (name, serving) = errors.finish(|| (name.unwrap(), serving.unwrap()))?;
    let spec = &serving.spec;
    let route = route_claim(ctx, &project, name.as_str(), spec);
    let reserved = reserved_hostnames(ctx, &route).await?;
    let rules = check_shared_gateway_rules(spec, &project, &route, &reserved);

    let tracks = capacity::tracks_of(ctx, name.as_str(), spec, None);
    let id = Uuid::now_v7();
    let status = DeploymentStatus::pending(i64::from(serving.replicas));
    let message = format!(
        "created with {} replica(s) of {} serving {}",
        serving.replicas,
        spec.engine.kind.as_str(),
        spec.model.source
    );
    let trace_parent = crate::telemetry::current_traceparent();
    let new = NewDeployment {
        id,
        project_id: project.id,
        name: name.as_str(),
        spec,
        route: &route,
        status: &status,
        message: &message,
        actor: actor.name(),
        trace_parent: trace_parent.as_deref(),
    };
    let space = RouteSpace::of(project.id, &route);
    // A dry run writes nothing, so it neither claims nor replays a key.
    let idempotency_key = idempotency_key.filter(|_| !options.dry_run);

    // One call, committed with the creates that wait beside it, unless something must share
    // its transaction: a key to claim, a dry run to roll back, GPUs to fit, (answered by the
    // call) a quota to admit, or a refusal by the shared Gateway's rules, which comes after
    // the key, the quota and a taken name. GPUs to fit and a nodeSelector to match against
    // the nodes need the transaction too.
    if idempotency_key.is_none()
        && !options.dry_run
        && tracks
            .iter()
            .all(|t| t.gpu.is_none() && t.node_selector.is_empty())
        && rules.is_ok()
    {
        match written(ctx.creates.create(new, &space).await, &route) {
            Ok(Some(row)) => return Ok(created(row, &project, Vec::new())),
            Ok(None) => {}
            Err(refused) => return Err(refused.into_error(ctx, &project, name.as_str()).await),
        }
    }

    let mut conn = ctx.hot.acquire().await?;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    if let Some(key) = idempotency_key {
        let claimed = store::idempotency::claim_idempotency_key(
            &mut *tx,
            project.id,
            &actor.key(),
            key,
            &request_hash,
        )
        .await?;
        if !claimed {
            return replay(&mut tx, &project, actor, key, &request_hash).await;
        }
    }
    let change = capacity::Change {
        project_id: project.id,
        before: &[],
        after: &tracks,
        status: None,
    };
    let warnings = capacity::admit(ctx, &mut tx, change, options).await?;
    let result = store::deployments::create_deployment_record(&mut *tx, new, &space, false).await;
    let row = match written(result, &route) {
        Ok(Some(row)) => row,
        Ok(None) => {
            return Err(sqlx::Error::Protocol(
                "a create without the quota check asked for admission".into(),
            )
            .into());
        }
        Err(refused) => {
            tx.rollback().await?;
            // Given back before a taken name's message takes a connection of its own.
            conn.reuse();
            // A taken name is reported as such; the Gateway's rules come before the routes.
            return Err(match rules {
                Err(rules) if !matches!(refused, Refused::NameTaken) => rules.into(),
                _ => refused.into_error(ctx, &project, name.as_str()).await,
            });
        }
    };
    if let Err(rules) = rules {
        tx.rollback().await?;
        conn.reuse();
        return Err(rules.into());
    }
    let outcome = created(row, &project, warnings);
    if options.dry_run {
        tx.rollback().await?;
        return Ok(outcome);
    }
    if let Some(key) = idempotency_key {
        let body = serde_json::to_value(&outcome.deployment).expect("a deployment serialises");
        store::idempotency::save_idempotent_response(
            &mut *tx,
            project.id,
            &actor.key(),
            key,
            201,
            &body,
        )
        .await?;
    }
    tx.commit().await?;
    conn.reuse();
    Ok(outcome)
}

/// A new record, as the create answers it.
fn created(row: DeploymentRow, project: &Project, warnings: Vec<String>) -> Created {
    let mut deployment = row.into_record(&project.name);
    deployment.warnings = warnings;
    tracing::info!(deployment_id = %deployment.id, "deployment created");
    Created {
        deployment,
        replayed: false,
    }
}

/// Why a create wrote nothing.
enum Refused {
    NameTaken,
    Conflict(ServiceError),
    Failed(sqlx::Error),
}

impl Refused {
    async fn into_error(self, ctx: &Context, project: &Project, name: &str) -> ServiceError {
        match self {
            // Read again for the message: the name may belong to a record being deleted.
            Refused::NameTaken => {
                match store::deployments::find_deployment(&ctx.pool, project.id, name).await {
                    Ok(Some(row)) => name_taken(project, name, &row),
                    // Gone meanwhile (or unreadable): still the answer to this request.
                    _ => ServiceError::conflict(
                        Some("name"),
                        format!(
                            "deployment `{name}` already exists in project `{}`",
                            project.name
                        ),
                    ),
                }
            }
            Refused::Conflict(err) => err,
            Refused::Failed(err) => err.into(),
        }
    }
}

/// The record a create's call wrote; `None` when the project's quota must admit it first.
fn written(
    result: Result<CreateOutcome, sqlx::Error>,
    route: &RouteClaim,
) -> Result<Option<DeploymentRow>, Refused> {
    match result {
        Ok(CreateOutcome::Created(row)) => Ok(Some(*row)),
        Ok(CreateOutcome::NeedsAdmission) => Ok(None),
        Ok(CreateOutcome::NameTaken) => Err(Refused::NameTaken),
        Ok(CreateOutcome::HostnameTaken) => Err(Refused::Conflict(hostname_conflict(
            route.hostname.as_deref().unwrap_or_default(),
        ))),
        Ok(CreateOutcome::Overlaps { name, path }) => {
            Err(Refused::Conflict(path_conflict(route, &name, &path)))
        }
        Err(err) => Err(Refused::Failed(err)),
    }
}

/// Answers a retried create with the response remembered for its key.
async fn replay(
    tx: &mut Transaction<'_, Postgres>,
    project: &Project,
    actor: &Actor,
    key: &str,
    request_hash: &str,
) -> Result<Created, ServiceError> {
    let stored =
        store::idempotency::find_idempotency_key(&mut **tx, project.id, &actor.key(), key).await?;
    match stored {
        Some(stored) if stored.request_hash != request_hash => {
            Err(ServiceError::IdempotencyKeyReused(key.to_owned()))
        }
        Some(stored) => {
            let body = stored.response_body.ok_or_else(|| {
                ServiceError::conflict(None, "a request with this Idempotency-Key is in progress")
            })?;
            let deployment: Deployment = serde_json::from_value(body).map_err(|err| {
                sqlx::Error::Decode(format!("stored idempotent response: {err}").into())
            })?;
            tracing::info!(deployment_id = %deployment.id, "idempotent create replayed");
            Ok(Created {
                deployment,
                replayed: true,
            })
        }
        None => Err(ServiceError::conflict(
            None,
            "a request with this Idempotency-Key is in progress",
        )),
    }
}

/// The 409 for a taken name, saying when it will be free again.
fn name_taken(project: &Project, name: &str, existing: &DeploymentRow) -> ServiceError {
    let message = if existing.deletion_requested_at.is_some() {
        format!("deployment `{name}` is being deleted; the name is free again once it is gone")
    } else {
        format!(
            "deployment `{name}` already exists in project `{}`",
            project.name
        )
    };
    ServiceError::conflict(Some("name"), message)
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
        SpecChange::Scale(request.replicas),
        options,
    )
    .await
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
    let is_scale = matches!(change, SpecChange::Scale(_));
    let (new_spec, reason, kind) = compute_spec(ctx, &mut tx, &row, change).await?;
    if new_spec == row.spec.0 {
        // Nothing changed: no new generation, revision or reconcile.
        tx.rollback().await?;
        return Ok(row.into_record(&project.name));
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
        SpecChange::Scale(replicas) => {
            check_replicas(ctx, replicas)?;
            if let Some(why) = row.spec.0.autoscaling.as_ref().map(|a| a.no_manual_scale()) {
                return Err(ServiceError::conflict(Some("replicas"), why));
            }
            let mut spec = row.spec.0.clone();
            spec.replicas = Some(replicas);
            (
                parse(spec)?,
                format!("scaled to {replicas}"),
                EventKind::Scaled,
            )
        }
        SpecChange::Rollback { revision, replicas } => {
            if let Some(replicas) = replicas {
                check_replicas(ctx, replicas)?;
            }
            let old = store::revisions::find_revision(&mut **tx, row.id, revision)
                .await?
                .ok_or_else(|| {
                    FieldErrors::single("revision", format!("revision {revision} does not exist"))
                })?;
            let mut spec = old.spec;
            // The current scale stays unless the rollback names one.
            spec.replicas = replicas.or(row.spec.0.replicas);
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

fn hash_request(request: &CreateDeployment) -> String {
    // Canonical JSON: equal requests hash equally whatever their key order.
    let value = serde_json::json!({ "name": request.name, "spec": request.spec });
    hex::encode(Sha256::digest(canonical_json(&value).as_bytes()))
}

fn parse_i64_cursor(key: &str) -> Result<i64, FieldErrors> {
    key.parse()
        .map_err(|_| FieldErrors::single("cursor", "is not a cursor returned by this list"))
}
