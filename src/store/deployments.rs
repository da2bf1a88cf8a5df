//! The `model_deployment` table.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgExecutor, Postgres, QueryBuilder};
use tracing::instrument;
use uuid::Uuid;

use super::events::Note;
use super::routes::{RouteRefusal, RouteSpace, refused_route, route_refusal};
use crate::domain::{
    AutoscalingStatus, Canary, Condition, Deployment, DeploymentSpec, DeploymentStatus,
    LabelRequirement, LabelSelector, Load, Phase, RouteClaim,
};

/// A row of `model_deployment`; [`DeploymentRow::into_record`] adds the project's name.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeploymentRow {
    pub id: Uuid,
    pub project_id: Uuid,
    pub name: String,
    pub generation: i64,
    pub spec: Json<DeploymentSpec>,
    pub status: Json<DeploymentStatus>,
    pub restarted_at: Option<DateTime<Utc>>,
    pub deletion_requested_at: Option<DateTime<Utc>>,
    pub canary: Option<Json<Canary>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DeploymentRow {
    pub fn into_record(self, project: &str) -> Deployment {
        Deployment {
            id: self.id,
            project: project.to_owned(),
            name: self.name,
            generation: self.generation,
            spec: self.spec.0,
            status: self.status.0,
            restarted_at: self.restarted_at,
            deletion_requested_at: self.deletion_requested_at,
            canary: self.canary.map(|c| c.0),
            created_at: self.created_at,
            updated_at: self.updated_at,
            warnings: Vec::new(),
        }
    }
}

/// A row of `model_deployment` as the API reads it: with what is shown beside its status,
/// read in the same statement (a get is one statement, not one per table): the current load
/// of the whole deployment and of its canary track (`deployment_load`), and the
/// autoscaler's last decision (`deployment_autoscaling`) for a spec that autoscales.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeploymentRead {
    #[sqlx(flatten)]
    pub row: DeploymentRow,
    pub load: Option<Json<Load>>,
    pub canary_load: Option<Json<Load>>,
    pub autoscaling: Option<Json<AutoscalingStatus>>,
}

/// The columns of a [`DeploymentRead`] of `model_deployment d` (a macro, so statements
/// can `concat!` it into one `&'static str`). Each extra is one probe of a primary key; the
/// autoscaler's is skipped (CASE is evaluated lazily) when the spec does not autoscale.
/// The batched get's function `read_deployments` (its migration) returns the same columns.
#[macro_export]
macro_rules! deployment_read_columns {
    () => {
        "d.id, d.project_id, d.name, d.generation, d.spec, d.status,
         d.restarted_at, d.deletion_requested_at, d.canary, d.created_at, d.updated_at,
         (select l.load from deployment_load l where l.deployment_id = d.id and l.track = 'all') as load,
         (select l.load from deployment_load l where l.deployment_id = d.id and l.track = 'canary') as canary_load,
         case when d.spec ? 'autoscaling' then
             (select a.state from deployment_autoscaling a where a.deployment_id = d.id)
         end as autoscaling"
    };
}

/// The deployment `name` of `project_id` as the API reads it ([`DeploymentRead`]).
#[instrument(skip(db))]
pub async fn read_deployment(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    name: &str,
) -> Result<Option<DeploymentRead>, sqlx::Error> {
    sqlx::query_as(concat!(
        "select ",
        deployment_read_columns!(),
        " from model_deployment d where d.project_id = $1 and d.name = $2"
    ))
    .bind(project_id)
    .bind(name)
    .fetch_optional(db)
    .await
}

/// Filters and paging for [`list_deployments`].
#[derive(Debug, Default)]
pub struct DeploymentFilter {
    pub phase: Option<Phase>,
    pub selector: LabelSelector,
    pub name_prefix: Option<String>,
    /// Return rows with an id greater than this (the previous page's last id).
    pub after: Option<Uuid>,
    pub limit: i64,
}

/// A new deployment's row and what its creation writes beside it.
#[derive(Clone, Copy)]
pub struct NewDeployment<'a> {
    pub id: Uuid,
    pub project_id: Uuid,
    pub name: &'a str,
    pub spec: &'a DeploymentSpec,
    pub route: &'a RouteClaim,
    pub status: &'a DeploymentStatus,
    /// The timeline entry's message and the actor of it and of the first revision.
    pub message: &'a str,
    pub actor: &'a str,
    /// The request's trace, carried to the reconcile (when traces are exported).
    pub trace_parent: Option<&'a str>,
}

/// What [`create_deployment_record`] did. Nothing is written unless it is `Created`.
#[derive(Debug)]
pub enum CreateOutcome {
    Created(Box<DeploymentRow>),
    /// The project has a quota: admit the create against it, then call again (in the same
    /// transaction) without the quota check.
    NeedsAdmission,
    /// The project has a deployment of that name.
    NameTaken,
    /// Another project's deployment routes the hostname.
    HostnameTaken,
    /// A deployment of the project routes an overlapping path on the same Gateway and
    /// hostname: its name and path.
    Overlaps {
        name: String,
        path: String,
    },
}

/// Creates a deployment in one call (migration `create_in_one_call`): takes the quota lock
/// when `check_quota` (answering `NeedsAdmission` if the project has a quota), then the route
/// space's lock, checks the name and the route, and writes the row, revision 1, the `Created`
/// timeline entry and its reconcile work item (waking the workers). Run alone it is one
/// round trip and commits; in a transaction, it commits with it.
#[instrument(skip(db, new, space), fields(deployment_id = %new.id))]
pub async fn create_deployment_record(
    db: impl PgExecutor<'_>,
    new: NewDeployment<'_>,
    space: &RouteSpace,
    check_quota: bool,
) -> Result<CreateOutcome, sqlx::Error> {
    let result = sqlx::query_as!(
        CreatedRecord,
        r#"select r.outcome as "outcome!", null::text as "error_code?", null::text as "error_detail?",
                  (r.created).id as "id?", (r.created).project_id as "project_id?",
                  (r.created).name as "name?", (r.created).generation as "generation?",
                  (r.created).spec as "spec?: Json<DeploymentSpec>",
                  (r.created).status as "status?: Json<DeploymentStatus>",
                  (r.created).restarted_at as "restarted_at?",
                  (r.created).deletion_requested_at as "deletion_requested_at?",
                  (r.created).canary as "canary?: Json<Canary>",
                  (r.created).created_at as "created_at?", (r.created).updated_at as "updated_at?"
           from create_deployment_record($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                                         $13, $14, $15, $16, $17, $18, $19) r"#,
        check_quota,
        new.id,
        new.project_id,
        new.name,
        Json(new.spec) as _,
        new.spec.spec_version as i32,
        Json(&new.spec.labels) as _,
        new.spec.engine.kind.as_str(),
        new.status.phase.as_str(),
        Json(new.status) as _,
        new.route.gateway,
        new.route.hostname,
        new.route.path_prefix,
        space.space,
        &space.paths,
        &new.route.path_and_ancestors() as &[String],
        new.message,
        new.actor,
        new.trace_parent,
    )
    .fetch_one(db)
    .await;
    match result {
        Ok(record) => record.outcome(),
        // A route another deployment holds fails the call (nothing of it stays written).
        Err(err) => refused_route(err).map(CreateOutcome::from),
    }
}

/// What `create_deployment_record` (or one item of `create_deployment_records`) answered.
#[derive(Debug)]
pub struct CreatedRecord {
    pub outcome: String,
    /// For an item that failed: its SQLSTATE and DETAIL.
    pub error_code: Option<String>,
    pub error_detail: Option<String>,
    pub id: Option<Uuid>,
    pub project_id: Option<Uuid>,
    pub name: Option<String>,
    pub generation: Option<i64>,
    pub spec: Option<Json<DeploymentSpec>>,
    pub status: Option<Json<DeploymentStatus>>,
    pub restarted_at: Option<DateTime<Utc>>,
    pub deletion_requested_at: Option<DateTime<Utc>>,
    pub canary: Option<Json<Canary>>,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

impl CreatedRecord {
    /// The outcome; an item that failed answers its route refusal, or its error as a
    /// database error (`error_code` then holds the SQLSTATE).
    pub fn outcome(self) -> Result<CreateOutcome, sqlx::Error> {
        let missing = |column: &str| sqlx::Error::ColumnNotFound(format!("created.{column}"));
        Ok(match self.outcome.as_str() {
            "created" => CreateOutcome::Created(Box::new(DeploymentRow {
                id: self.id.ok_or_else(|| missing("id"))?,
                project_id: self.project_id.ok_or_else(|| missing("project_id"))?,
                name: self.name.ok_or_else(|| missing("name"))?,
                generation: self.generation.ok_or_else(|| missing("generation"))?,
                spec: self.spec.ok_or_else(|| missing("spec"))?,
                status: self.status.ok_or_else(|| missing("status"))?,
                restarted_at: self.restarted_at,
                deletion_requested_at: self.deletion_requested_at,
                canary: self.canary,
                created_at: self.created_at.ok_or_else(|| missing("created_at"))?,
                updated_at: self.updated_at.ok_or_else(|| missing("updated_at"))?,
            })),
            "admission" => CreateOutcome::NeedsAdmission,
            "name_taken" => CreateOutcome::NameTaken,
            _ => {
                let code = self.error_code.unwrap_or_default();
                return route_refusal(&code, self.error_detail.as_deref())
                    .map(CreateOutcome::from)
                    .ok_or_else(|| {
                        sqlx::Error::Protocol(format!(
                            "create answered `{}` ({code})",
                            self.outcome
                        ))
                    });
            }
        })
    }
}

impl From<RouteRefusal> for CreateOutcome {
    fn from(refusal: RouteRefusal) -> Self {
        match refusal {
            RouteRefusal::HostnameTaken => Self::HostnameTaken,
            RouteRefusal::Overlaps { name, path } => Self::Overlaps { name, path },
        }
    }
}

#[instrument(skip(db))]
pub async fn find_deployment(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    name: &str,
) -> Result<Option<DeploymentRow>, sqlx::Error> {
    sqlx::query_as!(
        DeploymentRow,
        r#"select id, project_id, name, generation,
                  spec as "spec: Json<DeploymentSpec>", status as "status: Json<DeploymentStatus>",
                  restarted_at, deletion_requested_at,
                  canary as "canary: Json<Canary>", created_at, updated_at
           from model_deployment where project_id = $1 and name = $2"#,
        project_id,
        name
    )
    .fetch_optional(db)
    .await
}

/// A deployment of `project_id` by its id.
#[instrument(skip(db))]
pub async fn find_deployment_by_id(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    id: Uuid,
) -> Result<Option<DeploymentRow>, sqlx::Error> {
    sqlx::query_as!(
        DeploymentRow,
        r#"select id, project_id, name, generation,
                  spec as "spec: Json<DeploymentSpec>", status as "status: Json<DeploymentStatus>",
                  restarted_at, deletion_requested_at,
                  canary as "canary: Json<Canary>", created_at, updated_at
           from model_deployment where project_id = $1 and id = $2"#,
        project_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// How many deployments of a project are in each phase.
#[instrument(skip(db))]
pub async fn phase_counts(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"select phase, count(*) as "count!" from model_deployment
           where project_id = $1 group by phase order by phase"#,
        project_id
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.phase, r.count)).collect())
}

/// Every deployment of a project: name, spec and status (for totals over the project).
#[instrument(skip(db))]
pub async fn specs_of_project(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
) -> Result<Vec<ProjectSpec>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"select name, spec as "spec: Json<DeploymentSpec>", status as "status: Json<DeploymentStatus>",
                  canary as "canary: Json<Canary>",
                  deletion_requested_at is not null as "deleting!"
           from model_deployment where project_id = $1"#,
        project_id
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| ProjectSpec {
            name: r.name,
            spec: r.spec.0,
            status: r.status.0,
            canary: r.canary.map(|c| c.0),
            deleting: r.deleting,
        })
        .collect())
}

/// One deployment of a project, as [`specs_of_project`] reads it.
pub struct ProjectSpec {
    pub name: String,
    pub spec: DeploymentSpec,
    pub status: DeploymentStatus,
    pub canary: Option<Canary>,
    /// Its deletion was asked for.
    pub deleting: bool,
}

/// Like [`find_deployment`], but locks the row until the transaction ends, so
/// read-check-write sequences (If-Match, rollback) cannot interleave.
#[instrument(skip(db))]
pub async fn lock_deployment(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    name: &str,
) -> Result<Option<DeploymentRow>, sqlx::Error> {
    sqlx::query_as!(
        DeploymentRow,
        r#"select id, project_id, name, generation,
                  spec as "spec: Json<DeploymentSpec>", status as "status: Json<DeploymentStatus>",
                  restarted_at, deletion_requested_at,
                  canary as "canary: Json<Canary>", created_at, updated_at
           from model_deployment where project_id = $1 and name = $2
           for update"#,
        project_id,
        name
    )
    .fetch_optional(db)
    .await
}

/// Stores a new spec and bumps the generation.
#[instrument(skip(db, spec, route))]
pub async fn update_deployment_spec(
    db: impl PgExecutor<'_>,
    id: Uuid,
    spec: &DeploymentSpec,
    route: &RouteClaim,
) -> Result<DeploymentRow, sqlx::Error> {
    sqlx::query_as!(
        DeploymentRow,
        r#"update model_deployment
           set spec = $2, spec_version = $3, labels = $4, engine = $5,
               route_gateway = $6, route_hostname = $7, route_path = $8,
               generation = generation + 1, updated_at = now(),
               -- Until the worker applies the new generation, nothing is Ready for it.
               phase = 'Pending',
               status = jsonb_set(jsonb_set(jsonb_set(status, '{phase}', '"Pending"'), '{message}',
                                  to_jsonb('generation ' || (generation + 1) || ' accepted; not applied yet')),
                                  '{conditions}',
                                  -- and Applied says so too, so the conditions agree with the phase
                                  coalesce((select jsonb_agg(c) from jsonb_array_elements(status -> 'conditions') c
                                            where c ->> 'type' <> 'Applied'), '[]'::jsonb)
                                  || jsonb_build_array(jsonb_build_object(
                                         'type', 'Applied', 'status', 'False', 'reason', 'NotApplied',
                                         'message', 'generation ' || (generation + 1) || ' not applied yet',
                                         'lastTransitionTime',
                                         to_char(now() at time zone 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))))
           where id = $1
           returning id, project_id, name, generation,
                     spec as "spec: Json<DeploymentSpec>", status as "status: Json<DeploymentStatus>",
                     restarted_at, deletion_requested_at,
                  canary as "canary: Json<Canary>", created_at, updated_at"#,
        id,
        Json(spec) as _,
        spec.spec_version as i32,
        Json(&spec.labels) as _,
        spec.engine.kind.as_str(),
        route.gateway,
        route.hostname,
        route.path_prefix,
    )
    .fetch_one(db)
    .await
}

/// Sets (or removes, with `None`) the canary. The generation stays: the canary is not the
/// spec (a promotion changes the spec, and with it the generation).
#[instrument(skip(db, canary))]
pub async fn set_canary(
    db: impl PgExecutor<'_>,
    id: Uuid,
    canary: Option<&Canary>,
) -> Result<DeploymentRow, sqlx::Error> {
    sqlx::query_as!(
        DeploymentRow,
        r#"update model_deployment
           set canary = $2, updated_at = now()
           where id = $1
           returning id, project_id, name, generation,
                     spec as "spec: Json<DeploymentSpec>", status as "status: Json<DeploymentStatus>",
                     restarted_at, deletion_requested_at,
                     canary as "canary: Json<Canary>", created_at, updated_at"#,
        id,
        canary.map(Json) as _,
    )
    .fetch_one(db)
    .await
}

/// The worker's last step of a promotion: the canary's objects are gone, so the record
/// forgets the promoted canary, if the record is still at `generation` (the promoted spec's). The timeline entry commits with it. Returns whether
/// the record was at `generation`.
#[instrument(skip(db, note))]
pub async fn finish_canary(
    db: impl PgExecutor<'_>,
    id: Uuid,
    generation: i64,
    note: Note<'_>,
) -> Result<bool, sqlx::Error> {
    let finished = sqlx::query_scalar!(
        r#"with d as (
               update model_deployment
               set canary = null, updated_at = now()
               where id = $1 and generation = $2
                 and (canary is null or (canary ->> 'promoting')::boolean)
               returning id, project_id, name
           ), noted as (
               insert into deployment_event
                   (deployment_id, project_id, deployment_name, kind, message, actor)
               select id, project_id, name, $3, $4, $5 from d
           )
           select count(*) as "finished!" from d"#,
        id,
        generation,
        note.kind.as_str(),
        note.message,
        note.actor,
    )
    .fetch_one(db)
    .await?;
    Ok(finished == 1)
}

/// Sets the restart marker to now; the generation is unchanged (a restart is not a spec change).
#[instrument(skip(db))]
pub async fn set_restart_marker(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<DeploymentRow, sqlx::Error> {
    sqlx::query_as!(
        DeploymentRow,
        r#"update model_deployment set restarted_at = now(), updated_at = now()
           where id = $1
           returning id, project_id, name, generation,
                     spec as "spec: Json<DeploymentSpec>", status as "status: Json<DeploymentStatus>",
                     restarted_at, deletion_requested_at,
                  canary as "canary: Json<Canary>", created_at, updated_at"#,
        id
    )
    .fetch_one(db)
    .await
}

/// Moves the record to `Deleting`; the row stays (and the name stays taken) until the
/// worker has removed every Kubernetes object.
#[instrument(skip(db))]
pub async fn mark_deployment_deleting(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<DeploymentRow, sqlx::Error> {
    sqlx::query_as!(
        DeploymentRow,
        r#"update model_deployment
           set phase = 'Deleting',
               status = jsonb_set(jsonb_set(status, '{phase}', '"Deleting"'), '{message}',
                                  '"delete requested: the Kubernetes objects are being removed"'),
               deletion_requested_at = coalesce(deletion_requested_at, now()),
               updated_at = now()
           where id = $1
           returning id, project_id, name, generation,
                     spec as "spec: Json<DeploymentSpec>", status as "status: Json<DeploymentStatus>",
                     restarted_at, deletion_requested_at,
                  canary as "canary: Json<Canary>", created_at, updated_at"#,
        id
    )
    .fetch_one(db)
    .await
}

/// A page of a project's deployments in id order (UUIDv7, so creation order).
///
/// Built with `QueryBuilder` because the filters are optional and the label selector
/// has a variable shape; every value is still a bound parameter.
#[instrument(skip(db))]
pub async fn list_deployments(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    filter: &DeploymentFilter,
) -> Result<Vec<DeploymentRow>, sqlx::Error> {
    let mut query = QueryBuilder::<Postgres>::new(
        "select id, project_id, name, generation, spec, status, restarted_at,
                deletion_requested_at, canary, created_at, updated_at
         from model_deployment d where ",
    );
    push_filter(&mut query, project_id, filter);
    query.build_query_as().fetch_all(db).await
}

/// A page of a project's deployments as the API reads them ([`DeploymentRead`]), in id
/// order.
#[instrument(skip(db))]
pub async fn list_deployment_reads(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    filter: &DeploymentFilter,
) -> Result<Vec<DeploymentRead>, sqlx::Error> {
    let mut query = QueryBuilder::<Postgres>::new(concat!(
        "select ",
        deployment_read_columns!(),
        " from model_deployment d where "
    ));
    push_filter(&mut query, project_id, filter);
    query.build_query_as().fetch_all(db).await
}

/// `project_id = … and <filter> order by id limit …`, of `model_deployment d`.
fn push_filter(query: &mut QueryBuilder<Postgres>, project_id: Uuid, filter: &DeploymentFilter) {
    query.push("d.project_id = ").push_bind(project_id);
    if let Some(phase) = filter.phase {
        query.push(" and d.phase = ").push_bind(phase.as_str());
    }
    if let Some(prefix) = &filter.name_prefix {
        // starts_with avoids LIKE's wildcards in user input.
        query
            .push(" and starts_with(d.name, ")
            .push_bind(prefix.clone())
            .push(")");
    }
    for requirement in &filter.selector.0 {
        push_label_requirement(query, requirement);
    }
    if let Some(after) = filter.after {
        query.push(" and d.id > ").push_bind(after);
    }
    query.push(" order by d.id limit ").push_bind(filter.limit);
}

fn push_label_requirement(query: &mut QueryBuilder<Postgres>, requirement: &LabelRequirement) {
    match requirement {
        LabelRequirement::Equals(key, value) => {
            query
                .push(" and d.labels ->> ")
                .push_bind(key.clone())
                .push(" = ")
                .push_bind(value.clone());
        }
        // As in Kubernetes, `!=` also matches objects without the label.
        LabelRequirement::NotEquals(key, value) => {
            query
                .push(" and (d.labels ->> ")
                .push_bind(key.clone())
                .push(") is distinct from ")
                .push_bind(value.clone());
        }
        LabelRequirement::In(key, values) => {
            query
                .push(" and d.labels ->> ")
                .push_bind(key.clone())
                .push(" = any(")
                .push_bind(values.clone())
                .push(")");
        }
        LabelRequirement::NotIn(key, values) => {
            query
                .push(" and not coalesce(d.labels ->> ")
                .push_bind(key.clone())
                .push(" = any(")
                .push_bind(values.clone())
                .push("), false)");
        }
        LabelRequirement::Exists(key) => {
            query.push(" and d.labels ? ").push_bind(key.clone());
        }
        LabelRequirement::DoesNotExist(key) => {
            query.push(" and not d.labels ? ").push_bind(key.clone());
        }
    }
}

/// A record as the reconciler sees it: with its project's name and namespace.
#[derive(Debug, Clone)]
pub struct ReconcileTarget {
    pub row: DeploymentRow,
    pub project: String,
    pub namespace: String,
    /// The namespace existed before the project: never deleted by modelplane.
    pub namespace_adopted: bool,
    pub applied_digest: Option<String>,
}

#[instrument(skip(db))]
pub async fn find_reconcile_target(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<Option<ReconcileTarget>, sqlx::Error> {
    let row = sqlx::query!(
        r#"select d.id, d.project_id, d.name, d.generation,
                  d.spec as "spec: Json<DeploymentSpec>", d.status as "status: Json<DeploymentStatus>",
                  d.restarted_at, d.deletion_requested_at,
                  d.canary as "canary: Json<Canary>", d.created_at, d.updated_at,
                  d.applied_digest, p.name as project, p.namespace, p.namespace_adopted
           from model_deployment d join project p on p.id = d.project_id
           where d.id = $1"#,
        id
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| ReconcileTarget {
        row: DeploymentRow {
            id: r.id,
            project_id: r.project_id,
            name: r.name,
            generation: r.generation,
            spec: r.spec,
            status: r.status,
            restarted_at: r.restarted_at,
            deletion_requested_at: r.deletion_requested_at,
            canary: r.canary,
            created_at: r.created_at,
            updated_at: r.updated_at,
        },
        project: r.project,
        namespace: r.namespace,
        namespace_adopted: r.namespace_adopted,
        applied_digest: r.applied_digest,
    }))
}

/// Records what was applied; `None` forgets it (the next reconcile re-applies).
#[instrument(skip(db))]
pub async fn set_applied_digest(
    db: impl PgExecutor<'_>,
    id: Uuid,
    digest: Option<&str>,
    note: Option<Note<'_>>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "with d as (
             update model_deployment set applied_digest = $2, reconciled_at = now() where id = $1
             returning id, project_id, name
         )
         insert into deployment_event (deployment_id, project_id, deployment_name, kind, message, actor)
         select id, project_id, name, $3, $4, $5 from d where $3::text is not null",
        id,
        digest,
        note.map(|n| n.kind.as_str()),
        note.map(|n| n.message),
        note.map(|n| n.actor),
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Writes the observed status (the caller only calls this when it changed), if the record
/// is still at `generation`: a status worked out for an older spec must not overwrite what
/// a newer one says (the newer generation is queued and reports for itself). Returns
/// whether it was written.
#[instrument(skip(db, status))]
pub async fn update_status(
    db: impl PgExecutor<'_>,
    id: Uuid,
    generation: i64,
    status: &DeploymentStatus,
    note: Option<Note<'_>>,
) -> Result<bool, sqlx::Error> {
    let updated = sqlx::query_scalar!(
        // Nor may it undo a delete: once deletion is requested, only a `Deleting` status goes.
        r#"with d as (
               update model_deployment set phase = $3, status = $4
               where id = $1 and generation = $2
                 and (deletion_requested_at is null or $3 = 'Deleting')
               returning id, project_id, name
           ), noted as (
               insert into deployment_event
                   (deployment_id, project_id, deployment_name, kind, message, actor)
               select id, project_id, name, $5, $6, $7 from d where $5::text is not null
           )
           select count(*) as "updated!" from d"#,
        id,
        generation,
        status.phase.as_str(),
        Json(status) as _,
        note.map(|n| n.kind.as_str()),
        note.map(|n| n.message),
        note.map(|n| n.actor),
    )
    .fetch_one(db)
    .await?;
    Ok(updated == 1)
}

/// Adds `condition` (a `ClusterReachable=False`) to every record that does not already
/// say the cluster is unreachable, keeping the rest of its last status, and records it in
/// each record's timeline. Returns how many records it marked.
#[instrument(skip(db, condition))]
pub async fn mark_cluster_unreachable(
    db: impl PgExecutor<'_>,
    condition: &Condition,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"with marked as (
               update model_deployment
               set status = jsonb_set(status, '{conditions}',
                       coalesce((select jsonb_agg(c) from jsonb_array_elements(status -> 'conditions') c
                                 where c ->> 'type' <> 'ClusterReachable'), '[]'::jsonb)
                       || jsonb_build_array($1::jsonb))
               where not exists (select 1 from jsonb_array_elements(status -> 'conditions') c
                                 where c ->> 'type' = 'ClusterReachable' and c ->> 'status' = 'False')
               returning id, project_id, name
           ), logged as (
               insert into deployment_event (deployment_id, project_id, deployment_name, kind, message, actor)
               select id, project_id, name, $3, $2, 'worker' from marked
           )
           select count(*) as "count!" from marked"#,
        Json(condition) as _,
        condition.message,
        crate::domain::EventKind::ClusterUnreachable.as_str(),
    )
    .fetch_one(db)
    .await
}

/// Removes a record whose objects are gone; its revisions go with it, its timeline stays.
#[instrument(skip(db))]
pub async fn delete_deployment_record(
    db: impl PgExecutor<'_>,
    id: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from model_deployment where id = $1", id)
        .execute(db)
        .await?;
    Ok(())
}

/// Which of `ids` name no record (their objects are orphans).
#[instrument(skip(db, ids))]
pub async fn missing_deployment_ids(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select id as "id!" from unnest($1::uuid[]) as candidate(id)
           where not exists (select 1 from model_deployment d where d.id = candidate.id)"#,
        ids
    )
    .fetch_all(db)
    .await
}
