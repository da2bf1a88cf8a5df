//! Creating a deployment: the one use case with idempotency keys, write-time admission and
//! a batched one-call path, so it has a file of its own.

use sha2::{Digest, Sha256};
use sqlx::{Postgres, Transaction};
use tracing::instrument;
use uuid::Uuid;

use super::CreateDeployment;
use super::routes::{hostname_conflict, path_conflict, reserved_hostnames, route_claim};
use crate::domain::{
    Deployment, DeploymentName, DeploymentStatus, FieldErrors, Project, Role, RouteClaim,
    canonical_json, check_not_canary_name, check_shared_gateway_rules,
};
use crate::service::access::authorize;
use crate::service::capacity::{self, WriteOptions};
use crate::service::{Actor, Context, ServiceError};
use crate::store;
use crate::store::deployments::{CreateOutcome, DeploymentRow, NewDeployment};
use crate::store::routes::RouteSpace;

/// The outcome of a create: the record, and whether it replays an earlier request.
#[derive(Debug)]
pub struct Created {
    pub deployment: Deployment,
    pub replayed: bool,
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

    let change = capacity::Change {
        project_id: project.id,
        before: &[],
        after: &tracks,
        status: None,
    };

    // One call, committed with the creates that wait beside it, unless something must share
    // its transaction: a key to claim, a dry run to roll back, (answered by the call) a
    // quota to admit, or a refusal by the shared Gateway's rules or the GPU fit, which come
    // after the key, the quota and a taken name. The fit reads only the worker's last report
    // of the cluster, so it is checked first, outside any transaction; a refusal takes the
    // transactional path, which reports refusals in order.
    if idempotency_key.is_none() && !options.dry_run && rules.is_ok() {
        let fit = if tracks
            .iter()
            .all(|t| t.gpu.is_none() && t.node_selector.is_empty())
        {
            Ok(Vec::new())
        } else {
            let mut conn = ctx.hot.acquire().await?;
            let fit = capacity::check_fit(&mut conn, &change, options).await;
            conn.reuse();
            fit
        };
        if let Ok(warnings) = fit {
            match written(ctx.creates.create(new, &space).await, &route) {
                Ok(Some(row)) => return Ok(created(row, &project, warnings)),
                Ok(None) => {}
                Err(refused) => {
                    return Err(refused.into_error(ctx, &project, name.as_str()).await);
                }
            }
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

fn hash_request(request: &CreateDeployment) -> String {
    // Canonical JSON: equal requests hash equally whatever their key order.
    let value = serde_json::json!({ "name": request.name, "spec": request.spec });
    hex::encode(Sha256::digest(canonical_json(&value).as_bytes()))
}
