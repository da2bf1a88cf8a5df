//! Model deployment use cases: create, read, list, change, act on, delete.
//!
//! Every change runs in one transaction: lock the row, check `If-Match`, compute and
//! validate the new spec, store it with a revision and a timeline event, and queue a
//! reconcile. A change that fails leaves nothing behind.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::{Postgres, Transaction};
use tracing::instrument;
use utoipa::{IntoParams, ToSchema};
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
use crate::store::deployments::{
    CreateOutcome, DeploymentFilter, DeploymentRow, NewDeployment, RouteRefusal, RouteSpace,
};
use crate::store::events::NewEvent;

/// The body of `POST …/deployments`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateDeployment {
    /// A DNS-1035 label of at most 45 characters, unique in the project.
    #[schema(
        pattern = "^[a-z]([-a-z0-9]*[a-z0-9])?$",
        min_length = 1,
        max_length = 45
    )]
    pub name: String,
    pub spec: DeploymentSpec,
}

/// The body of `PUT …/deployments/{name}` (and the document a merge patch applies to).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplaceDeployment {
    pub spec: DeploymentSpec,
}

/// The body of `POST …/scale`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScaleDeployment {
    /// 0 up to the server's `MODELPLANE_MAX_REPLICAS` (default 100).
    #[schema(minimum = 0, maximum = 100)]
    pub replicas: i64,
}

/// The body of `POST …/rollback`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackDeployment {
    /// The revision whose spec becomes current again.
    pub revision: i64,
    /// Replicas after the rollback; the current count when omitted.
    #[serde(default)]
    pub replicas: Option<i64>,
}

/// Filters for listing deployments.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListDeployments {
    /// Only deployments in this phase.
    pub phase: Option<String>,
    /// A Kubernetes label selector over `spec.labels`, e.g. `team=nlp,tier in (gold,silver)`.
    pub label_selector: Option<String>,
    /// Only names starting with this.
    pub name_prefix: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `nextCursor` from the previous page, with the same filters.
    #[param(min_length = 1)]
    pub cursor: Option<String>,
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
    let serving = match request.spec.parse(&request.name, &ctx.limits) {
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
    // the key, the quota and a taken name.
    if idempotency_key.is_none()
        && !options.dry_run
        && tracks.iter().all(|t| t.gpu.is_none())
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

#[instrument(skip(ctx, actor))]
pub async fn get_deployment(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
) -> Result<Deployment, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    get_deployment_in(ctx, &project, name).await
}

/// [`get_deployment`] in a project already authorised.
pub async fn get_deployment_in(
    ctx: &Context,
    project: &Authorized,
    name: &str,
) -> Result<Deployment, ServiceError> {
    project.require(Role::Viewer)?;
    let row = find(ctx, project, name).await?;
    Ok(row.into_record(&project.name))
}

async fn find(ctx: &Context, project: &Project, name: &str) -> Result<DeploymentRow, ServiceError> {
    check_name_could_exist(name)?;
    let row = ctx.lookups.find(project.id, name).await?;
    row.ok_or_else(|| ServiceError::not_found("deployment", name))
}

#[instrument(skip(ctx, actor))]
pub async fn list_deployments(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    query: &ListDeployments,
) -> Result<Page<Deployment>, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    list_deployments_in(ctx, &project, query).await
}

/// [`list_deployments`] in a project already authorised.
pub async fn list_deployments_in(
    ctx: &Context,
    project: &Authorized,
    query: &ListDeployments,
) -> Result<Page<Deployment>, ServiceError> {
    project.require(Role::Viewer)?;
    let mut errors = FieldErrors::new();
    let phase = match &query.phase {
        Some(p) => errors.check("phase", p.parse::<Phase>()),
        None => None,
    };
    let selector = match &query.label_selector {
        Some(s) => errors
            .check("labelSelector", LabelSelector::parse(s))
            .unwrap_or_default(),
        None => LabelSelector::default(),
    };
    if let Some(prefix) = &query.name_prefix {
        let ok = prefix.len() <= 45
            && prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok {
            errors.push(
                "namePrefix",
                "must be at most 45 lowercase letters, digits or '-'",
            );
        }
    }
    let limit = match page_size(query.limit) {
        Ok(limit) => limit,
        Err(ServiceError::Invalid(e)) => {
            errors.extend(e);
            0
        }
        Err(other) => return Err(other),
    };
    let filters = format!(
        "deployments|{}|{:?}|{:?}|{:?}",
        project.id, query.phase, query.label_selector, query.name_prefix
    );
    let after = match &query.cursor {
        Some(c) => match cursor::decode(c, &filters).and_then(|k| parse_uuid_cursor(&k)) {
            Ok(id) => Some(id),
            Err(e) => {
                errors.extend(e);
                None
            }
        },
        None => None,
    };
    errors.finish(|| ())?;

    let filter = DeploymentFilter {
        phase,
        selector,
        name_prefix: query.name_prefix.clone(),
        after,
        limit: limit + 1,
    };
    let mut conn = ctx.hot.acquire().await?;
    let rows = store::deployments::list_deployments(&mut *conn, project.id, &filter).await?;
    conn.reuse();
    let page = cursor::page(rows, limit, &filters, |row| row.id.to_string());
    Ok(Page {
        items: page
            .items
            .into_iter()
            .map(|row| row.into_record(&project.name))
            .collect(),
        next_cursor: page.next_cursor,
        cursors: page.cursors,
    })
}

/// A deployment by its id, wherever it is, if the caller may read its project.
pub async fn get_deployment_by_id(
    ctx: &Context,
    actor: &Actor,
    id: Uuid,
) -> Result<(Authorized, Deployment), ServiceError> {
    let not_found = || ServiceError::not_found("deployment", id.to_string());
    let found = store::deployments::find_reconcile_target(&ctx.pool, id)
        .await?
        .ok_or_else(not_found)?;
    let row = found.row;
    // Another project's id reads as missing, as a name would.
    let project = authorize(ctx, actor, &found.project, Role::Viewer)
        .await
        .map_err(|_| not_found())?;
    let deployment = row.into_record(&project.name);
    Ok((project, deployment))
}

/// The newest `per` (at most 20) timeline entries of each deployment of an authorised
/// project, newest first, in one read (GraphQL pages of deployments batch through this).
pub async fn latest_events_in(
    ctx: &Context,
    project: &Authorized,
    deployment_ids: &[Uuid],
    per: i64,
) -> Result<std::collections::HashMap<Uuid, Vec<TimelineEvent>>, ServiceError> {
    project.require(Role::Viewer)?;
    if !(1..=20).contains(&per) {
        return Err(FieldErrors::single("count", "must be between 1 and 20").into());
    }
    let mut by_deployment: std::collections::HashMap<Uuid, Vec<TimelineEvent>> =
        std::collections::HashMap::new();
    for event in store::events::latest_events(&ctx.pool, project.id, deployment_ids, per).await? {
        by_deployment
            .entry(event.deployment_id)
            .or_default()
            .push(event);
    }
    Ok(by_deployment)
}

/// How many revisions each deployment of an authorised project has, in one read.
pub async fn revision_counts_in(
    ctx: &Context,
    project: &Authorized,
    deployment_ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, i64>, ServiceError> {
    project.require(Role::Viewer)?;
    Ok(
        store::revisions::revision_counts(&ctx.pool, project.id, deployment_ids)
            .await?
            .into_iter()
            .collect(),
    )
}

/// How many deployments of the project are in each phase (phases with none are left out).
pub async fn phase_counts(
    ctx: &Context,
    project: &Authorized,
) -> Result<Vec<(Phase, i64)>, ServiceError> {
    project.require(Role::Viewer)?;
    let counts = store::deployments::phase_counts(&ctx.pool, project.id).await?;
    Ok(counts
        .into_iter()
        .filter_map(|(phase, n)| Some((phase.parse::<Phase>().ok()?, n)))
        .collect())
}

/// GPUs the project's deployments ask for (replicas × GPUs per pod) and hold in ready pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuUsage {
    pub requested: i64,
    pub in_use: i64,
}

pub async fn gpu_usage(ctx: &Context, project: &Authorized) -> Result<GpuUsage, ServiceError> {
    project.require(Role::Viewer)?;
    let mut usage = GpuUsage::default();
    for d in store::deployments::specs_of_project(&ctx.pool, project.id).await? {
        // A stored spec that does not resolve asks for nothing the worker would apply.
        let Ok(serving) = d.spec.serving(&d.name) else {
            continue;
        };
        let per_pod = i64::from(serving.gpus);
        usage.requested += i64::from(serving.replicas) * per_pod;
        usage.in_use += d.status.replicas.ready * per_pod;
        // A canary's pods take GPUs of their own.
        if let Some(canary) = &d.canary
            && let Ok(serving) = canary.spec.serving(&d.name)
        {
            let per_pod = i64::from(serving.gpus);
            usage.requested += i64::from(serving.replicas) * per_pod;
            if let Some(track) = &d.status.canary {
                usage.in_use += track.replicas.ready * per_pod;
            }
        }
    }
    Ok(usage)
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

/// The one path every spec change takes.
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
    record_event(&mut tx, &updated, kind, &message, actor).await?;
    store::work_queue::enqueue_reconcile(
        &mut *tx,
        row.id,
        crate::telemetry::current_traceparent().as_deref(),
    )
    .await?;
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
        SpecChange::MergePatch(patch) => {
            let mut document = serde_json::json!({ "spec": serde_json::to_value(&row.spec.0).expect("spec serialises") });
            json_patch::merge(&mut document, &patch);
            leaving_pool_mode_drops_its_settings(&patch, &mut document);
            let request: ReplaceDeployment = from_json_value(document)?;
            (
                parse(request.spec)?,
                "updated".into(),
                EventKind::SpecChanged,
            )
        }
        SpecChange::Replace(spec) => (parse(*spec)?, "replaced".into(), EventKind::SpecChanged),
        SpecChange::Scale(replicas) => {
            check_replicas(ctx, replicas)?;
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

/// The hostnames a route on `route`'s Gateway may not claim: the platform's
/// (`MODELPLANE_RESERVED_HOSTNAMES`) and, always, those the Gateway itself answers for, as
/// the worker last saw it (its listeners' hostnames and its status's hostname addresses).
async fn reserved_hostnames<'a>(
    ctx: &'a Context,
    route: &RouteClaim,
) -> Result<std::borrow::Cow<'a, [String]>, ServiceError> {
    if route.hostname.is_none() {
        return Ok(std::borrow::Cow::Borrowed(
            ctx.routing.reserved_hostnames.as_slice(),
        ));
    }
    let gateway = if route.gateway.is_empty() {
        match ctx
            .routing
            .default_gateway
            .as_deref()
            .map(crate::domain::parse_gateway_ref)
        {
            Some(Ok((namespace, name, _))) => format!("{namespace}/{name}"),
            _ => {
                return Ok(std::borrow::Cow::Borrowed(
                    ctx.routing.reserved_hostnames.as_slice(),
                ));
            }
        }
    } else {
        route.gateway.clone()
    };
    let mut reserved = ctx.routing.reserved_hostnames.clone();
    reserved.extend(store::gateways::hostnames_of_gateway(&ctx.pool, &gateway).await?);
    Ok(std::borrow::Cow::Owned(reserved))
}

pub(super) fn route_claim(
    ctx: &Context,
    project: &Project,
    name: &str,
    spec: &DeploymentSpec,
) -> RouteClaim {
    RouteClaim::of(
        spec,
        &project.name,
        name,
        ctx.routing.default_gateway.as_deref(),
    )
}

/// Refuses a route that another project's or another deployment's route would collide
/// with on a shared Gateway (see `domain::routing`).
async fn check_route(
    ctx: &Context,
    tx: &mut Transaction<'_, Postgres>,
    project: &Project,
    deployment_id: Uuid,
    spec: &DeploymentSpec,
    route: &RouteClaim,
) -> Result<(), ServiceError> {
    let reserved = reserved_hostnames(ctx, route).await?;
    check_shared_gateway_rules(spec, project, route, &reserved)?;
    lock_route_space(tx, project, route).await?;
    // The rules that need the other deployments live in SQL only, where creates run them too.
    match store::deployments::check_route_claim(&mut **tx, project.id, deployment_id, route).await?
    {
        None => Ok(()),
        Some(RouteRefusal::HostnameTaken) => Err(hostname_conflict(
            route.hostname.as_deref().unwrap_or_default(),
        )),
        Some(RouteRefusal::Overlaps { name, path }) => Err(path_conflict(route, &name, &path)),
    }
}

/// Takes the part of the Gateways' request space a route lives in, so two concurrent
/// writers cannot both find it free (see [`RouteSpace`]).
async fn lock_route_space(
    tx: &mut Transaction<'_, Postgres>,
    project: &Project,
    route: &RouteClaim,
) -> Result<(), sqlx::Error> {
    let space = RouteSpace::of(project.id, route);
    store::deployments::lock_route_space(&mut **tx, &space.space, &space.paths).await
}

fn hostname_conflict(host: &str) -> ServiceError {
    ServiceError::conflict(
        Some("spec.routing.hostname"),
        format!("hostname `{host}` is already used by another project"),
    )
}

fn path_conflict(route: &RouteClaim, other: &str, path: &str) -> ServiceError {
    ServiceError::conflict(
        Some("spec.routing.pathPrefix"),
        format!(
            "path prefix `{}` overlaps `{path}` of deployment `{other}` on the same Gateway and hostname: \
             one would receive the other's requests",
            route.path_prefix
        ),
    )
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
    record_event(
        &mut tx,
        &updated,
        EventKind::RestartRequested,
        "restart requested: pods will be replaced",
        actor,
    )
    .await?;
    store::work_queue::enqueue_reconcile(
        &mut *tx,
        row.id,
        crate::telemetry::current_traceparent().as_deref(),
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
    record_event(
        &mut tx,
        &updated,
        EventKind::DeleteRequested,
        "delete requested",
        actor,
    )
    .await?;
    store::work_queue::enqueue_reconcile(
        &mut *tx,
        row.id,
        crate::telemetry::current_traceparent().as_deref(),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(deployment_id = %updated.id, "deployment delete requested");
    Ok(updated.into_record(&project.name))
}

#[instrument(skip(ctx, actor))]
pub async fn list_revisions(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    limit: Option<i64>,
    cursor_param: Option<&str>,
) -> Result<Page<Revision>, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    let row = find(ctx, &project, name).await?;
    list_revisions_in(ctx, &project, row.id, limit, cursor_param).await
}

/// The revisions of the deployment `deployment_id` of a project already authorised (none
/// when the id is another project's).
pub async fn list_revisions_in(
    ctx: &Context,
    project: &Authorized,
    deployment_id: Uuid,
    limit: Option<i64>,
    cursor_param: Option<&str>,
) -> Result<Page<Revision>, ServiceError> {
    project.require(Role::Viewer)?;
    let limit = page_size(limit)?;
    let filters = format!("revisions|{deployment_id}");
    let before = match cursor_param {
        Some(c) => Some(parse_i64_cursor(&cursor::decode(c, &filters)?)?),
        None => None,
    };
    let rows =
        store::revisions::list_revisions(&ctx.pool, project.id, deployment_id, before, limit + 1)
            .await?;
    Ok(cursor::page(rows, limit, &filters, |r| {
        r.revision.to_string()
    }))
}

/// The timeline of a deployment by id: it outlives the deployment.
#[instrument(skip(ctx, actor))]
pub async fn list_events(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    deployment: DeploymentRef<'_>,
    limit: Option<i64>,
    cursor_param: Option<&str>,
) -> Result<Page<TimelineEvent>, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    let deployment_id = match deployment {
        DeploymentRef::Name(name) => find(ctx, &project, name).await?.id,
        DeploymentRef::Id(id) => id,
    };
    list_events_in(ctx, &project, deployment_id, limit, cursor_param).await
}

/// The timeline of the deployment `deployment_id` of a project already authorised (empty
/// when the id is another project's).
pub async fn list_events_in(
    ctx: &Context,
    project: &Authorized,
    deployment_id: Uuid,
    limit: Option<i64>,
    cursor_param: Option<&str>,
) -> Result<Page<TimelineEvent>, ServiceError> {
    project.require(Role::Viewer)?;
    let limit = page_size(limit)?;
    let filters = format!("events|{}|{deployment_id}", project.id);
    let after = match cursor_param {
        Some(c) => Some(parse_i64_cursor(&cursor::decode(c, &filters)?)?),
        None => None,
    };
    let rows =
        store::events::list_events(&ctx.pool, project.id, deployment_id, after, limit + 1).await?;
    Ok(cursor::page(rows, limit, &filters, |e| e.id.to_string()))
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
    let value = serde_json::to_value(request).expect("request serialises");
    hex::encode(Sha256::digest(canonical_json(&value).as_bytes()))
}

fn parse_i64_cursor(key: &str) -> Result<i64, FieldErrors> {
    key.parse()
        .map_err(|_| FieldErrors::single("cursor", "is not a cursor returned by this list"))
}
