//! GPU capacity, project quotas and GPU usage: reading them, and admitting a change of a
//! deployment against them.

use chrono::{Duration, Utc};
use sqlx::{Postgres, Transaction};
use tracing::instrument;
use uuid::Uuid;

use super::access::{authorize, require_platform_admin};
use super::{Actor, Context, ServiceError};
use crate::domain::{
    CapacityReport, DailyUsage, Demand, DeploymentSpec, DeploymentStatus, DeploymentUsage,
    FieldErrors, Fit, GpuShape, ProjectQuota, QuotaSpec, Role, TrackDemand, UsageReport,
    check_quota, fit,
};
use crate::store;

/// How a write is carried out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Check everything (validation, quota, fit) and answer as if written, but write
    /// nothing.
    pub dry_run: bool,
    /// Accept replicas that ask for more GPUs than any node has (for nodes still being
    /// added, e.g. by an autoscaler).
    pub force: bool,
}

/// The cluster's GPUs as the worker last reported them (any authenticated caller).
#[instrument(skip(ctx, _actor))]
pub async fn get_capacity(ctx: &Context, _actor: &Actor) -> Result<CapacityReport, ServiceError> {
    let (observed_at, nodes) = store::capacity::gpu_inventory(&ctx.pool, None).await?;
    Ok(CapacityReport::of(observed_at, &nodes))
}

/// A project's quota next to what its specs ask for (any member).
#[instrument(skip(ctx, actor))]
pub async fn get_quota(
    ctx: &Context,
    actor: &Actor,
    project: &str,
) -> Result<ProjectQuota, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    let quota = store::quota::find_quota(&ctx.pool, project.project().id).await?;
    let demand = project_demand(ctx, &mut *ctx.pool.acquire().await?, project.project().id).await?;
    Ok(ProjectQuota::of(quota.as_ref(), &demand))
}

/// Sets (replaces) a project's quota (platform admins). A quota below what the project
/// already asks for is accepted: it blocks growth, not what runs.
#[instrument(skip(ctx, actor, quota))]
pub async fn set_quota(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    quota: QuotaSpec,
) -> Result<ProjectQuota, ServiceError> {
    // A caller with no role on the project is told it does not exist (404), as everywhere.
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    require_platform_admin(actor)?;
    quota.validate()?;
    let project = project.project();
    let mut tx = ctx.pool.begin().await?;
    // Waits for changes checked against the old quota to commit.
    store::quota::lock_quota(&mut *tx, project.id).await?;
    store::quota::upsert_quota(&mut *tx, project.id, &quota, actor.name()).await?;
    let demand = project_demand(ctx, &mut tx, project.id).await?;
    let report = ProjectQuota::of(Some(&quota), &demand);
    store::audit::insert_audit_event(
        &mut *tx,
        Some(project.id),
        "QuotaSet",
        &format!("project/{}", project.name),
        &describe(&quota),
        actor.name(),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(project_id = %project.id, quota = %describe(&quota), "quota set");
    Ok(report)
}

/// Removes a project's quota (platform admins); nothing to remove is not an error.
#[instrument(skip(ctx, actor))]
pub async fn delete_quota(ctx: &Context, actor: &Actor, project: &str) -> Result<(), ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    require_platform_admin(actor)?;
    let project = project.project();
    let mut tx = ctx.pool.begin().await?;
    if store::quota::delete_quota(&mut *tx, project.id).await? {
        store::audit::insert_audit_event(
            &mut *tx,
            Some(project.id),
            "QuotaRemoved",
            &format!("project/{}", project.name),
            "quota removed: no limits",
            actor.name(),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

fn describe(quota: &QuotaSpec) -> String {
    let mut parts: Vec<String> = quota
        .gpus
        .iter()
        .map(|g| {
            format!(
                "{} GPUs of {}",
                g.limit,
                crate::domain::gpu_quota_name(&g.resource_name, g.product.as_deref())
            )
        })
        .collect();
    if let Some(replicas) = quota.replicas {
        parts.push(format!("{replicas} replicas"));
    }
    if parts.is_empty() {
        "quota set: no limits".into()
    } else {
        format!("quota set: at most {}", parts.join(", "))
    }
}

/// Which days a usage report covers.
#[derive(Debug, Clone, Copy, Default)]
pub struct UsageQuery {
    /// Whole days (UTC) up to and including today, 1 to 366 (default 30).
    pub days: Option<i64>,
}

/// GPU-hours of a project's ready replicas per day and deployment (project admins).
#[instrument(skip(ctx, actor))]
pub async fn get_usage(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    query: &UsageQuery,
) -> Result<UsageReport, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    let days = query.days.unwrap_or(30);
    if !(1..=366).contains(&days) {
        return Err(FieldErrors::single("days", "must be between 1 and 366").into());
    }
    let to = Utc::now().date_naive();
    let from = to - Duration::days(days - 1);
    let rows = store::usage::usage_by_day(&ctx.pool, project.project().id, from, to).await?;
    let mut daily: Vec<DailyUsage> = from
        .iter_days()
        .take_while(|d| *d <= to)
        .map(|date| DailyUsage {
            date,
            gpu_hours: 0.0,
            requests: 0,
            tokens: 0,
        })
        .collect();
    let since = from.and_time(chrono::NaiveTime::MIN).and_utc();
    let until = (to + Duration::days(1))
        .and_time(chrono::NaiveTime::MIN)
        .and_utc();
    for (date, requests, tokens) in
        store::model_keys::project_days(&ctx.pool, project.project().id, since, until).await?
    {
        if let Some(day) = daily.get_mut((date - from).num_days() as usize) {
            day.requests = requests;
            day.tokens = tokens.round() as i64;
        }
    }
    let mut deployments: Vec<DeploymentUsage> = Vec::new();
    for row in rows {
        let index = (row.day - from).num_days() as usize;
        if let Some(day) = daily.get_mut(index) {
            day.gpu_hours += row.gpu_hours;
        }
        match deployments.iter_mut().find(|d| {
            d.name == row.deployment_name
                && d.role == row.role
                && d.resource_name == row.resource_name
                && d.product == row.product
        }) {
            Some(d) => d.gpu_hours += row.gpu_hours,
            None => deployments.push(DeploymentUsage {
                name: row.deployment_name,
                role: row.role,
                resource_name: row.resource_name,
                product: row.product,
                gpu_hours: row.gpu_hours,
            }),
        }
    }
    deployments.sort_by(|a, b| b.gpu_hours.total_cmp(&a.gpu_hours));
    Ok(UsageReport {
        from,
        to,
        gpu_hours: daily.iter().map(|d| d.gpu_hours).sum(),
        requests: daily.iter().map(|d| d.requests).sum(),
        tokens: daily.iter().map(|d| d.tokens).sum(),
        deployments,
        daily,
    })
}

/// What a deployment's stable track (and canary, if any) ask for.
pub(super) fn tracks_of(
    ctx: &Context,
    name: &str,
    spec: &DeploymentSpec,
    canary: Option<&DeploymentSpec>,
) -> Vec<TrackDemand> {
    tracks(&ctx.gpu_resource_name, name, spec, canary)
}

fn tracks(
    gpu_resource_name: &str,
    name: &str,
    spec: &DeploymentSpec,
    canary: Option<&DeploymentSpec>,
) -> Vec<TrackDemand> {
    [Some(spec), canary]
        .into_iter()
        .flatten()
        // A stored spec that does not resolve asks for nothing the worker would apply.
        .filter_map(|s| s.serving(name).ok())
        .flat_map(|serving| TrackDemand::all_of(&serving, gpu_resource_name))
        .collect()
}

/// What every deployment of the project asks for (those being deleted do not count).
async fn project_demand(
    ctx: &Context,
    db: &mut sqlx::PgConnection,
    project_id: Uuid,
) -> Result<Demand, ServiceError> {
    Ok(demand_of_project(db, &ctx.gpu_resource_name, project_id).await?)
}

/// [`project_demand`] for the worker's autoscaler. An autoscaled deployment counts the
/// replicas the autoscaler set, not its spec's starting point; a change to its spec then
/// adds and removes the same starting count, so its live count stays counted.
pub(crate) async fn demand_of_project(
    db: &mut sqlx::PgConnection,
    gpu_resource_name: &str,
    project_id: Uuid,
) -> Result<Demand, sqlx::Error> {
    let live = store::autoscaling::project_replicas(&mut *db, project_id).await?;
    let mut demand = Demand::default();
    for d in store::deployments::specs_of_project(&mut *db, project_id).await? {
        if d.deleting {
            continue;
        }
        let canary = d.canary.as_ref().map(|c| &c.spec);
        let mut tracks = tracks(gpu_resource_name, &d.name, &d.spec, canary);
        if let (Some(autoscaling), Some(stable)) = (&d.spec.autoscaling, tracks.first_mut()) {
            stable.replicas =
                autoscaling.live_replicas(live.get(&d.name).copied(), d.spec.replicas);
        }
        for track in &tracks {
            demand.add(track);
        }
    }
    Ok(demand)
}

/// A change of one deployment's tracks, from `before` to `after` (empty `before`: a new
/// deployment).
pub(super) struct Change<'a> {
    pub project_id: Uuid,
    pub before: &'a [TrackDemand],
    pub after: &'a [TrackDemand],
    /// The deployment's status, for the replicas that already hold their GPUs.
    pub status: Option<&'a DeploymentStatus>,
}

/// Admits a change against the project's quota (locked until the transaction ends, so
/// concurrent changes are counted one after the other) and the cluster's free GPUs.
/// Returns the warnings to answer with. Runs before the change is written. One function
/// (~90 lines) on purpose: quota first, then fit, then the warnings, in the order the API
/// reports refusals; the rules themselves are in `domain/capacity.rs`.
pub(super) async fn admit(
    ctx: &Context,
    tx: &mut Transaction<'_, Postgres>,
    change: Change<'_>,
    options: WriteOptions,
) -> Result<Vec<String>, ServiceError> {
    if let Some(quota) = store::quota::lock_quota(&mut **tx, change.project_id).await? {
        let before = project_demand(ctx, tx, change.project_id).await?;
        let mut after = before.clone();
        change.before.iter().for_each(|t| after.remove(t));
        change.after.iter().for_each(|t| after.add(t));
        check_quota(&quota, &before, &after).map_err(|mut exceeded| {
            // GPUs past the quota because replicas were added (each of the same shape) are
            // the replica count's doing, and the refusal names that field.
            let same_shapes = change.before.len() == change.after.len()
                && change.before.iter().zip(change.after).all(|(b, a)| b.gpu == a.gpu);
            if same_shapes {
                exceeded.field = "spec.replicas";
            }
            metrics::counter!(crate::metrics::CAPACITY_REFUSALS, "reason" => "quota").increment(1);
            tracing::info!(quota = %exceeded.quota, used = exceeded.used, requested = exceeded.requested, limit = exceeded.limit, "refused: quota exceeded");
            ServiceError::QuotaExceeded(exceeded)
        })?;
    }
    check_fit(&mut *tx, &change, options).await
}

/// The fit half of [`admit`]: the warnings for tracks whose nodeSelector matches no node or
/// whose GPUs fit only partly, and the refusal of replicas that could never fit (unless
/// forced). It reads only what the worker last reported of the cluster, so it needs no
/// transaction: a create that writes in one call checks it first (`deployments::create`).
pub(super) async fn check_fit(
    db: &mut sqlx::PgConnection,
    change: &Change<'_>,
    options: WriteOptions,
) -> Result<Vec<String>, ServiceError> {
    let mut warnings = Vec::new();
    for (i, track) in change.after.iter().enumerate() {
        let was = change.before.get(i);
        if was == Some(track) || track.replicas == 0 {
            continue;
        }
        if let Some(warning) = no_node_matches(db, &track.node_selector).await? {
            warnings.push(warning);
            // Where the pods could run is unknown: the GPU fit would only repeat it.
            continue;
        }
        let Some(shape) = &track.gpu else { continue };
        // Pods of the same shape already running keep their GPUs through the change.
        let running = match (was, change.status) {
            (Some(was), Some(status)) if was.gpu.as_ref() == Some(shape) => {
                if !status.roles.is_empty() {
                    // A disaggregated deployment's tracks are its roles, in the same order.
                    status.roles.get(i).map_or(0, |r| r.replicas.ready)
                } else if i == 0 {
                    status.replicas.ready
                } else {
                    status.canary.as_ref().map_or(0, |c| c.replicas.ready)
                }
            }
            _ => 0,
        };
        let (observed_at, nodes) =
            store::capacity::gpu_inventory(&mut *db, Some(&shape.resource_name)).await?;
        if observed_at.is_none() {
            // No worker has reported the cluster yet: nothing to check against.
            continue;
        }
        if nodes.is_empty() {
            // No node offers the resource at all: a node pool scaled to zero, or not yet
            // joined. Nothing says it never will.
            warnings.push(format!(
                "no node in the cluster offers {} now: the replicas stay Pending until one joins (an autoscaled node pool, say)",
                shape.resource_name
            ));
            continue;
        }
        match fit(&nodes, shape, track.replicas, running) {
            Fit::Fits => {}
            Fit::Never {
                largest_node,
                pod_slots,
            } => {
                let message = never_fits(shape, largest_node, pod_slots);
                if options.force {
                    warnings.push(format!("{message} (accepted with force=true)"));
                } else {
                    metrics::counter!(crate::metrics::CAPACITY_REFUSALS, "reason" => "never_fits")
                        .increment(1);
                    // The pods of a group that could never all find room: the group's
                    // size is at fault; else one pod's GPUs.
                    let field = if shape.pods_per_replica > 1 && shape.per_pod <= largest_node {
                        "spec.nodesPerReplica"
                    } else {
                        "spec.resources.gpu.count"
                    };
                    return Err(FieldErrors::single(
                        field,
                        format!("{message}; pass force=true if such nodes are being added"),
                    )
                    .into());
                }
            }
            Fit::Partly {
                fits,
                free,
                ready_nodes,
                largest_free_block,
            } => warnings.push(format!(
                "only {fits} of {} replica(s) fit on the free {} now ({free} free on {ready_nodes} Ready, schedulable node(s); largest free block {largest_free_block}, each replica needs {}): the rest stay Pending until GPUs free up",
                track.replicas,
                kind(shape),
                shape.per_pod
            )),
        }
    }
    Ok(warnings)
}

/// A warning when `selector` (a nodeSelector) matches none of the nodes the worker last
/// saw: the pods would stay Pending until the unschedulable budget made the deployment
/// Failed. A warning, not a refusal: a node pool with those labels may be on its way.
async fn no_node_matches(
    db: &mut sqlx::PgConnection,
    selector: &std::collections::BTreeMap<String, String>,
) -> Result<Option<String>, ServiceError> {
    if selector.is_empty() {
        return Ok(None);
    }
    let Some((total, matching)) =
        store::capacity::nodes_matching(&mut *db, &serde_json::json!(selector)).await?
    else {
        return Ok(None);
    };
    if matching > 0 {
        return Ok(None);
    }
    let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(Some(format!(
        "spec.scheduling.nodeSelector: none of the {total} node(s) in the cluster has {}: the replicas stay Pending until such a node joins",
        labels.join(", ")
    )))
}

fn kind(shape: &GpuShape) -> String {
    crate::domain::gpu_quota_name(&shape.resource_name, shape.product.as_deref())
}

fn never_fits(shape: &GpuShape, largest_node: i64, pod_slots: i64) -> String {
    if largest_node == 0 {
        return format!(
            "asks for {} {} per replica, but no node in the cluster offers {}",
            shape.per_pod,
            kind(shape),
            kind(shape)
        );
    }
    if shape.per_pod <= largest_node {
        // A group of several pods larger than the nodes can hold together.
        return format!(
            "asks for {} pods of {} {} per replica, but the cluster's nodes together hold only {pod_slots} such pods: no replica would ever be scheduled whole",
            shape.pods_per_replica,
            shape.per_pod,
            kind(shape)
        );
    }
    let message = format!(
        "asks for {} {} per pod, but the largest node offering it has {largest_node}: no replica would ever be scheduled",
        shape.per_pod,
        kind(shape)
    );
    // A replica larger than a node can span nodes when its GPUs split evenly over them.
    let total = shape.per_pod * shape.pods_per_replica;
    let nodes = (total + largest_node - 1) / largest_node;
    match (nodes..=total).find(|n| total % n == 0) {
        Some(n) if n <= crate::domain::MAX_NODES_PER_REPLICA => format!(
            "{message}; set spec.nodesPerReplica: {n} to run each replica on {n} nodes of {} {} (with spec.engine.tensorParallelSize × pipelineParallelSize = {total})",
            total / n,
            kind(shape)
        ),
        _ => message,
    }
}
