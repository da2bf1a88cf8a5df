//! Canary use cases: start one, change its weight or header, promote it, abort it.
//!
//! Each runs in one transaction like every spec change (lock the row, check `If-Match`,
//! validate, store with a timeline entry, queue a reconcile). A canary lives beside the
//! spec, like the restart marker: starting, changing or aborting one makes no new
//! generation, so the stable track's objects are not touched and the ETag stays; the
//! worker reports the canary in `status.canary`. Promoting changes the spec, and so makes a
//! new generation and a revision.

use chrono::Utc;
use tracing::instrument;

use super::access::authorize;
use super::capacity::{self, WriteOptions};
use super::deployments::{SpecDocument, lock_for_change, record_and_queue, route_claim};
use super::diff::changed_paths;
use super::{Actor, Context, Precondition, ServiceError};
use crate::domain::{
    Canary, CanaryHeader, Deployment, DeploymentSpec, EventKind, FieldErrors, Phase, Role,
    RoutingMode, canary_object_name, check_canary_weight,
};
use crate::store;
use crate::store::deployments::DeploymentRow;

/// Start a canary: the spec it runs (a merge patch of the current spec, or a revision's),
/// its replicas, its share of traffic and the header that always reaches it.
#[derive(Debug, Clone)]
pub struct StartCanary {
    /// A JSON merge patch (RFC 7386) of the deployment's current spec. This or `revision`.
    pub spec: Option<serde_json::Value>,
    /// A revision whose spec the canary runs. This or `spec`.
    pub revision: Option<i64>,
    /// Replicas of the canary; the chosen spec's when `None`.
    pub replicas: Option<i64>,
    /// Percent (0–99) of the requests without the header that go to the canary.
    pub weight: i32,
    /// The header that always reaches the canary; `x-modelplane-canary: true` when `None`.
    pub header: Option<CanaryHeader>,
}

/// Change a running canary's weight or header.
#[derive(Debug, Clone, Default)]
pub struct UpdateCanary {
    pub weight: Option<i32>,
    pub header: Option<CanaryHeader>,
}

#[instrument(skip(ctx, actor, request, precondition))]
pub async fn start_canary(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    request: StartCanary,
    precondition: &Precondition,
    options: WriteOptions,
) -> Result<Deployment, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Editor).await?;
    let mut tx = ctx.pool.begin().await?;
    let row = lock_for_change(&mut tx, &project, name, precondition).await?;
    if row.canary.is_some() {
        return Err(ServiceError::conflict(
            None,
            format!(
                "deployment `{name}` already has a canary: change it with PATCH …/canary, or promote or abort it first"
            ),
        ));
    }
    if row.spec.0.routing.mode == Some(RoutingMode::InferencePool) {
        return Err(ServiceError::conflict(
            Some("spec.routing.mode"),
            format!(
                "deployment `{name}` routes through an InferencePool, whose endpoint picker chooses the pod: \
                 a canary needs weighted Service backends (mode `Service`)"
            ),
        ));
    }
    if row.spec.0.nodes() > 1 {
        return Err(ServiceError::conflict(
            Some("spec.nodesPerReplica"),
            format!(
                "deployment `{name}` runs each replica as a group of {} nodes: a canary of groups is not built yet",
                row.spec.0.nodes()
            ),
        ));
    }
    let (spec, header) = requested_track(ctx, &mut tx, &row, &request).await?;
    // The canary's objects are named `<name>-canary`: a deployment of that name (from before
    // such names were reserved) would share them.
    let object_name = canary_object_name(name);
    if store::deployments::find_deployment(&mut *tx, project.id, &object_name)
        .await?
        .is_some()
    {
        return Err(ServiceError::conflict(
            None,
            format!(
                "deployment `{object_name}` exists in this project, and a canary of `{name}` would use that name for its objects"
            ),
        ));
    }
    let old = serde_json::to_value(&row.spec.0).expect("spec serialises");
    let new = serde_json::to_value(&spec).expect("spec serialises");
    let changes = changed_paths(&old, &new, 3).join(", ");
    let canary = Canary {
        spec,
        weight: request.weight,
        header,
        from_revision: request.revision,
        promoting: false,
        started_by: actor.name().to_owned(),
        started_at: Utc::now(),
    };
    // The canary's pods count against the quota and need GPUs of their own.
    let change = capacity::Change {
        project_id: project.id,
        before: &capacity::tracks_of(ctx, &row.name, &row.spec.0, None),
        after: &capacity::tracks_of(ctx, &row.name, &row.spec.0, Some(&canary.spec)),
        status: Some(&row.status.0),
    };
    let warnings = capacity::admit(ctx, &mut tx, change, options).await?;
    let updated = store::deployments::set_canary(&mut *tx, row.id, Some(&canary)).await?;
    let source = match request.revision {
        Some(revision) => format!("revision {revision}"),
        None if changes.is_empty() => "the current spec".to_owned(),
        None => format!("changes to {changes}"),
    };
    let message = format!(
        "canary started from {source} at weight {}% (and every request with `{}: {}`)",
        canary.weight, canary.header.name, canary.header.value
    );
    let mut record = updated.clone().into_record(&project.name);
    record.warnings = warnings;
    if options.dry_run {
        tx.rollback().await?;
        return Ok(record);
    }
    finish(tx, &updated, EventKind::CanaryStarted, &message, actor).await?;
    Ok(record)
}

/// The canary's spec (the patched current spec or a revision's, with its replicas) and
/// header, checked: every problem of the request at once, each naming its field.
async fn requested_track(
    ctx: &Context,
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    row: &DeploymentRow,
    request: &StartCanary,
) -> Result<(DeploymentSpec, CanaryHeader), ServiceError> {
    let mut errors = FieldErrors::new();
    if let Err(e) = check_canary_weight(request.weight, "weight") {
        errors.extend(e);
    }
    let header = match request.header.clone().unwrap_or_default().parse("header") {
        Ok(header) => Some(header),
        Err(e) => {
            errors.extend(e);
            None
        }
    };
    let spec = match (&request.spec, request.revision) {
        (Some(patch), None) if patch.is_object() => {
            match SpecDocument::patched(&row.spec.0, &serde_json::json!({ "spec": patch })) {
                Ok(spec) => Some(spec),
                Err(e) => {
                    errors.extend(e);
                    None
                }
            }
        }
        (Some(_), None) => {
            errors.push("spec", "must be a JSON object (a merge patch of the spec)");
            None
        }
        (None, Some(revision)) => {
            match store::revisions::find_revision(&mut **tx, row.id, revision).await? {
                Some(old) => Some(old.spec),
                None => {
                    errors.push("revision", format!("revision {revision} does not exist"));
                    None
                }
            }
        }
        _ => {
            errors.push(
                "spec",
                "give exactly one of `spec` (a merge patch of the deployment's spec) and `revision`",
            );
            None
        }
    };
    let spec = spec.and_then(|mut spec| {
        if let Some(replicas) = request.replicas {
            spec.replicas = Some(replicas);
        }
        match check_canary_spec(ctx, row, spec) {
            Ok(spec) => Some(spec),
            Err(e) => {
                errors.extend(e);
                None
            }
        }
    });
    Ok(errors.finish(|| (spec.unwrap(), header.unwrap()))?)
}

#[instrument(skip(ctx, actor, request, precondition))]
pub async fn update_canary(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    request: UpdateCanary,
    precondition: &Precondition,
) -> Result<Deployment, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Editor).await?;
    let mut tx = ctx.pool.begin().await?;
    let row = lock_for_change(&mut tx, &project, name, precondition).await?;
    let mut canary = current_canary(&row)?;
    if canary.promoting {
        return Err(being_promoted(name));
    }
    let mut errors = FieldErrors::new();
    let mut said = Vec::new();
    if let Some(weight) = request.weight {
        match check_canary_weight(weight, "weight") {
            Ok(()) if weight != canary.weight => {
                said.push(format!("weight {}% → {weight}%", canary.weight));
                canary.weight = weight;
            }
            Ok(()) => {}
            Err(e) => errors.extend(e),
        }
    }
    if let Some(header) = request.header {
        match header.parse("header") {
            Ok(header) if header != canary.header => {
                said.push(format!("header `{}: {}`", header.name, header.value));
                canary.header = header;
            }
            Ok(_) => {}
            Err(e) => errors.extend(e),
        }
    }
    errors.finish(|| ())?;
    if said.is_empty() {
        tx.rollback().await?;
        return Ok(row.into_record(&project.name));
    }
    let updated = store::deployments::set_canary(&mut *tx, row.id, Some(&canary)).await?;
    let message = format!("canary {}", said.join(", "));
    finish(tx, &updated, EventKind::CanaryChanged, &message, actor).await?;
    Ok(updated.into_record(&project.name))
}

/// Makes the canary's spec the deployment's (a new revision, at the deployment's current
/// scale and route). The worker then sends every request to the canary while the stable
/// Deployment rolls to that spec, moves them back once every stable replica runs it, and
/// removes the canary.
#[instrument(skip(ctx, actor, precondition))]
pub async fn promote_canary(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    precondition: &Precondition,
) -> Result<Deployment, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Editor).await?;
    let mut tx = ctx.pool.begin().await?;
    let row = lock_for_change(&mut tx, &project, name, precondition).await?;
    let mut canary = current_canary(&row)?;
    if canary.promoting {
        // Asked twice: the first is under way.
        tx.rollback().await?;
        return Ok(row.into_record(&project.name));
    }
    // It is about to carry every request: it must be serving now.
    match &row.status.0.canary {
        Some(track)
            if track.phase == Phase::Ready
                && row.status.0.observed_generation == row.generation => {}
        Some(track) => {
            return Err(ServiceError::conflict(
                None,
                format!(
                    "the canary is not Ready ({}: {}); wait for it, or abort it",
                    track.phase, track.message
                ),
            ));
        }
        None => {
            return Err(ServiceError::conflict(
                None,
                "the canary has not been reported on yet; wait until it is Ready",
            ));
        }
    }
    let mut spec = canary.spec.clone();
    // The deployment keeps its scale and its route.
    spec.replicas = row.spec.0.replicas;
    spec.routing = row.spec.0.routing.clone();
    let spec = spec.parse(&row.name, &ctx.limits)?.spec;
    let old = serde_json::to_value(&row.spec.0).expect("spec serialises");
    let new = serde_json::to_value(&spec).expect("spec serialises");
    let changes = changed_paths(&old, &new, 3).join(", ");
    let change = capacity::Change {
        project_id: project.id,
        before: &capacity::tracks_of(ctx, &row.name, &row.spec.0, Some(&canary.spec)),
        after: &capacity::tracks_of(ctx, &row.name, &spec, Some(&canary.spec)),
        status: Some(&row.status.0),
    };
    let warnings = capacity::admit(ctx, &mut tx, change, WriteOptions::default()).await?;
    canary.promoting = true;
    store::deployments::set_canary(&mut *tx, row.id, Some(&canary)).await?;
    let route = route_claim(ctx, &project, &row.name, &spec);
    let updated =
        store::deployments::update_deployment_spec(&mut *tx, row.id, &spec, &route).await?;
    store::revisions::insert_revision(
        &mut *tx,
        row.id,
        updated.generation,
        &spec,
        "promoted canary",
        actor.name(),
    )
    .await?;
    let message = format!(
        "generation {}: canary promoted ({}); the canary carries every request while the stable track rolls to its spec",
        updated.generation,
        if changes.is_empty() {
            "no spec change"
        } else {
            &changes
        }
    );
    finish(tx, &updated, EventKind::CanaryPromoted, &message, actor).await?;
    let mut record = updated.into_record(&project.name);
    record.warnings = warnings;
    Ok(record)
}

/// Forgets the canary: the route sends everything to the stable track again, and the
/// worker removes the canary's objects once the Gateway has that route.
#[instrument(skip(ctx, actor, precondition))]
pub async fn abort_canary(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    precondition: &Precondition,
) -> Result<Deployment, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Editor).await?;
    let mut tx = ctx.pool.begin().await?;
    let row = lock_for_change(&mut tx, &project, name, precondition).await?;
    let canary = current_canary(&row)?;
    if canary.promoting {
        return Err(being_promoted(name));
    }
    let updated = store::deployments::set_canary(&mut *tx, row.id, None).await?;
    let message = "canary aborted; all traffic goes back to the stable track";
    finish(tx, &updated, EventKind::CanaryAborted, message, actor).await?;
    Ok(updated.into_record(&project.name))
}

fn current_canary(row: &DeploymentRow) -> Result<Canary, ServiceError> {
    row.canary
        .as_ref()
        .map(|c| c.0.clone())
        .ok_or_else(|| ServiceError::NotFound {
            kind: "canary of deployment",
            name: row.name.clone(),
        })
}

fn being_promoted(name: &str) -> ServiceError {
    ServiceError::conflict(
        None,
        format!(
            "the canary of `{name}` is being promoted; the deployment's spec is already its spec (roll back to undo)"
        ),
    )
}

/// A canary's spec, validated like any deployment's: it serves the same model name on the
/// deployment's route, with at least one replica.
fn check_canary_spec(
    ctx: &Context,
    row: &DeploymentRow,
    spec: DeploymentSpec,
) -> Result<DeploymentSpec, FieldErrors> {
    let mut errors = FieldErrors::new();
    if spec.routing != row.spec.0.routing {
        errors.push(
            "spec.routing",
            "a canary shares its deployment's route: change the routing on the deployment",
        );
    }
    if spec.replicas == Some(0) {
        errors.push(
            "spec.replicas",
            "a canary needs at least one replica (abort it instead)",
        );
    }
    let parsed = spec.parse(&row.name, &ctx.limits);
    match parsed {
        Ok(serving) if errors.is_empty() => Ok(serving.spec),
        Ok(_) => Err(errors),
        Err(e) => {
            errors.extend(e);
            Err(errors)
        }
    }
}

/// The timeline entry and the reconcile, committed with the change.
async fn finish(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    updated: &DeploymentRow,
    kind: EventKind,
    message: &str,
    actor: &Actor,
) -> Result<(), ServiceError> {
    record_and_queue(&mut tx, updated, kind, message, actor).await?;
    tx.commit().await?;
    tracing::info!(deployment_id = %updated.id, generation = updated.generation, kind = kind.as_str(), "canary changed");
    Ok(())
}
