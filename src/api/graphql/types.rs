//! The GraphQL view of the domain: thin wrappers, so the domain needs no GraphQL derive.

use std::sync::Arc;

use async_graphql::connection::{Connection, Edge, EmptyFields};
use async_graphql::{
    ComplexObject, Context, Enum, ErrorExtensions, Json, Object, Result, SimpleObject,
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::errors::service_error;
use super::state;
use crate::domain::{self, Deployment, Revision, TimelineEvent};
use crate::service::access::Authorized;
use crate::service::{self, Page};

/// A connection over a service page: `first` and `after` are the REST `limit` and `cursor`.
pub type Page_<T> = Connection<String, T, EmptyFields, EmptyFields>;

pub fn connection<T, N>(page: Page<T>, had_cursor: bool, node: impl Fn(T) -> N) -> Page_<N>
where
    N: async_graphql::OutputType,
{
    let mut connection = Connection::new(had_cursor, page.next_cursor.is_some());
    connection.edges.extend(
        page.items
            .into_iter()
            .zip(page.cursors)
            .map(|(item, cursor)| Edge::new(cursor, node(item))),
    );
    connection
}

#[derive(Enum, Copy, Clone, Eq, PartialEq)]
#[graphql(remote = "crate::domain::Phase")]
pub enum Phase {
    Pending,
    Deploying,
    Ready,
    Degraded,
    Failed,
    ScaledToZero,
    Deleting,
}

#[derive(Enum, Copy, Clone, Eq, PartialEq)]
#[graphql(remote = "crate::domain::Role")]
pub enum Role {
    Viewer,
    Editor,
    Admin,
}

#[derive(Enum, Copy, Clone, Eq, PartialEq)]
#[graphql(remote = "crate::domain::ConditionStatus")]
pub enum ConditionStatus {
    #[graphql(name = "TRUE")]
    True,
    #[graphql(name = "FALSE")]
    False,
    #[graphql(name = "UNKNOWN")]
    Unknown,
}

#[derive(Enum, Copy, Clone, Eq, PartialEq)]
#[graphql(remote = "crate::domain::ChangeKind")]
pub enum ChangeKind {
    Created,
    Spec,
    Status,
    Restart,
    Deleting,
    Deleted,
    Event,
    Load,
}

#[derive(SimpleObject)]
pub struct ReplicaCounts {
    pub desired: i64,
    pub updated: i64,
    pub ready: i64,
    pub available: i64,
}

#[derive(SimpleObject)]
pub struct Condition {
    #[graphql(name = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    pub last_transition_time: DateTime<Utc>,
}

#[derive(SimpleObject)]
pub struct Endpoints {
    /// The in-cluster URL of the Service.
    pub cluster: Option<String>,
    /// URLs through the Gateway.
    pub external: Vec<String>,
    /// Where an OpenAI client points (`…/v1`).
    pub openai_base: Option<String>,
    /// Why there is no external URL, when there is none.
    pub reason: Option<String>,
}

impl From<&domain::ReplicaCounts> for ReplicaCounts {
    fn from(r: &domain::ReplicaCounts) -> Self {
        Self {
            desired: r.desired,
            updated: r.updated,
            ready: r.ready,
            available: r.available,
        }
    }
}

impl From<&domain::Endpoints> for Endpoints {
    fn from(e: &domain::Endpoints) -> Self {
        Self {
            cluster: e.cluster.clone(),
            external: e.external.clone(),
            openai_base: e.openai_base.clone(),
            reason: e.reason.clone(),
        }
    }
}

/// A deployment's canary track: what was asked and what the worker observed.
#[derive(SimpleObject)]
pub struct Canary {
    /// The canary's whole spec.
    pub spec: Json<domain::DeploymentSpec>,
    /// Percent of requests without the header asked to go to the canary.
    pub weight: i32,
    pub header_name: String,
    pub header_value: String,
    pub from_revision: Option<i64>,
    /// The promotion is under way.
    pub promoting: bool,
    pub started_by: String,
    pub started_at: DateTime<Utc>,
    /// The track as observed; null until the worker has reported on it.
    pub status: Option<CanaryStatus>,
}

#[derive(SimpleObject)]
pub struct CanaryStatus {
    pub phase: Phase,
    /// One line: what is happening on the canary track, or why not.
    pub message: String,
    pub replicas: ReplicaCounts,
    /// Percent of requests without the header the live route sends to the canary now.
    pub routed_weight: i32,
    pub endpoints: Endpoints,
    /// What the canary track alone serves now.
    pub load: Option<super::load::Load>,
}

/// A LoRA adapter as the model servers report it.
#[derive(SimpleObject)]
pub struct AdapterStatus {
    pub name: String,
    /// Serving pods that have it loaded.
    pub loaded: i64,
    /// Serving pods.
    pub pods: i64,
    /// Why it is not loaded everywhere, or empty.
    pub message: String,
}

/// One role of a disaggregated deployment (`spec.disaggregation`).
#[derive(SimpleObject)]
pub struct RoleStatus {
    /// `prefill` or `decode`.
    pub role: String,
    pub replicas: ReplicaCounts,
    /// Why the role is not ready, or empty.
    pub message: String,
}

/// A Kubernetes object a deployment owns.
#[derive(SimpleObject)]
pub struct OwnedObject {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

#[derive(SimpleObject)]
pub struct PhaseCount {
    pub phase: Phase,
    pub count: i64,
}

#[derive(SimpleObject)]
pub struct GpuUsage {
    /// Replicas × GPUs per pod, over every deployment and canary.
    pub requested: i64,
    /// GPUs held by ready pods.
    pub in_use: i64,
}

#[derive(SimpleObject)]
pub struct ProjectRole {
    pub project: String,
    pub role: Role,
}

/// Who the credential is.
#[derive(SimpleObject)]
pub struct Viewer {
    /// `token:<name>` or `user:<subject>`.
    pub name: String,
    pub platform_admin: bool,
    /// The roles the caller holds, per project it can see.
    pub roles: Vec<ProjectRole>,
}

#[derive(SimpleObject)]
#[graphql(complex)]
pub struct Project {
    pub id: Uuid,
    pub name: String,
    pub namespace: String,
    pub created_at: DateTime<Utc>,
}

#[ComplexObject]
impl Project {
    /// The caller's effective role on the project (from a project token, the role
    /// bindings of the user and their groups, or the platform-admin role): what the API
    /// will allow them here.
    #[graphql(complexity = "super::DB_COST")]
    async fn my_role(&self, ctx: &Context<'_>) -> Result<Role> {
        let (state, actor) = super::state(ctx)?;
        let access = service::access::my_access(&state.ctx, actor, &self.name)
            .await
            .map_err(service_error)?;
        Ok(access.role.into())
    }

    /// The deployments of the project in each phase.
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn phase_counts(&self, ctx: &Context<'_>) -> Result<Vec<PhaseCount>> {
        let project = authorized(ctx, &self.name).await?;
        phase_counts(ctx, &project).await
    }

    /// The project's quota next to what its specs ask for.
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn quota(&self, ctx: &Context<'_>) -> Result<super::capacity::ProjectQuota> {
        let (state, actor) = super::state(ctx)?;
        let quota = crate::service::capacity::get_quota(&state.ctx, actor, &self.name)
            .await
            .map_err(super::errors::service_error)?;
        Ok(quota.into())
    }

    /// Serving metrics over a window, summed over the project's deployments.
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn metrics(
        &self,
        ctx: &Context<'_>,
        window: Option<String>,
        step: Option<String>,
        series: Option<Vec<super::load::SeriesName>>,
    ) -> Result<super::load::Metrics> {
        let project = authorized(ctx, &self.name).await?;
        let (state, _) = super::state(ctx)?;
        let query = super::load::query(window, step, series, None);
        let metrics = service::load::project_metrics_in(&state.ctx, &project, &query)
            .await
            .map_err(service_error)?;
        Ok(metrics.into())
    }

    /// The project's model keys, newest first (project admins).
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn model_keys(
        &self,
        ctx: &Context<'_>,
        live: Option<bool>,
        first: Option<i64>,
        after: Option<String>,
    ) -> Result<Page_<super::keys::ModelKey>> {
        let (state, actor) = super::state(ctx)?;
        let query = service::model_keys::ListKeys {
            live,
            limit: first,
            cursor: after.clone(),
        };
        let page = service::model_keys::list_keys(&state.ctx, actor, &self.name, &query)
            .await
            .map_err(service_error)?;
        Ok(connection(page, after.is_some(), Into::into))
    }

    /// GPU-hours of the project's ready replicas over the last `days` days (project
    /// admins).
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn usage(&self, ctx: &Context<'_>, days: Option<i64>) -> Result<super::capacity::Usage> {
        let (state, actor) = super::state(ctx)?;
        let query = crate::service::capacity::UsageQuery { days };
        let usage = crate::service::capacity::get_usage(&state.ctx, actor, &self.name, &query)
            .await
            .map_err(super::errors::service_error)?;
        Ok(usage.into())
    }
}

impl From<domain::Project> for Project {
    fn from(p: domain::Project) -> Self {
        Self {
            id: p.id,
            name: p.name,
            namespace: p.namespace,
            created_at: p.created_at,
        }
    }
}

pub async fn authorized(ctx: &Context<'_>, project: &str) -> Result<Arc<Authorized>> {
    let (state, actor) = state(ctx)?;
    let project = service::access::authorize(&state.ctx, actor, project, domain::Role::Viewer)
        .await
        .map_err(service_error)?;
    Ok(Arc::new(project))
}

pub async fn phase_counts(ctx: &Context<'_>, project: &Authorized) -> Result<Vec<PhaseCount>> {
    let (state, _) = state(ctx)?;
    let counts = service::deployments::phase_counts(&state.ctx, project)
        .await
        .map_err(service_error)?;
    Ok(counts
        .into_iter()
        .map(|(phase, count)| PhaseCount {
            phase: phase.into(),
            count,
        })
        .collect())
}

/// A model deployment, read in a project authorised once for the whole query.
pub struct DeploymentNode {
    pub deployment: Deployment,
    pub project: Arc<Authorized>,
}

#[Object(name = "Deployment")]
impl DeploymentNode {
    async fn id(&self) -> Uuid {
        self.deployment.id
    }
    async fn project(&self) -> &str {
        &self.deployment.project
    }
    async fn name(&self) -> &str {
        &self.deployment.name
    }
    /// Bumped by every accepted spec change; pass as `expectedGeneration` to change safely.
    async fn generation(&self) -> i64 {
        self.deployment.generation
    }
    /// The spec as stored (the same JSON as REST's `spec`).
    async fn spec(&self) -> Json<&domain::DeploymentSpec> {
        Json(&self.deployment.spec)
    }
    async fn phase(&self) -> Phase {
        self.deployment.status.phase.into()
    }
    /// One line: what is happening, or why not.
    async fn message(&self) -> &str {
        &self.deployment.status.message
    }
    async fn observed_generation(&self) -> i64 {
        self.deployment.status.observed_generation
    }
    /// Nodes (pods) each replica spans: 1, or a LeaderWorkerSet group's size; the replica
    /// counts then count groups.
    async fn nodes_per_replica(&self) -> i64 {
        self.deployment.spec.nodes()
    }
    async fn replicas(&self) -> ReplicaCounts {
        let r = &self.deployment.status.replicas;
        ReplicaCounts {
            desired: r.desired,
            updated: r.updated,
            ready: r.ready,
            available: r.available,
        }
    }
    async fn conditions(&self) -> Vec<Condition> {
        self.deployment
            .status
            .conditions
            .iter()
            .map(|c| Condition {
                type_: c.type_.clone(),
                status: c.status.into(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time,
            })
            .collect()
    }
    async fn endpoints(&self) -> Endpoints {
        let e = &self.deployment.status.endpoints;
        Endpoints {
            cluster: e.cluster.clone(),
            external: e.external.clone(),
            openai_base: e.openai_base.clone(),
            reason: e.reason.clone(),
        }
    }
    /// Each LoRA adapter of the spec: on how many serving pods it is loaded, and why not.
    async fn adapters(&self) -> Vec<AdapterStatus> {
        self.deployment
            .status
            .adapters
            .iter()
            .map(|a| AdapterStatus {
                name: a.name.clone(),
                loaded: a.loaded,
                pods: a.pods,
                message: a.message.clone(),
            })
            .collect()
    }
    /// A disaggregated deployment's roles (prefill, then decode): each one's replicas and
    /// what holds it back; empty otherwise.
    async fn roles(&self) -> Vec<RoleStatus> {
        self.deployment
            .status
            .roles
            .iter()
            .map(|r| RoleStatus {
                role: r.role.clone(),
                replicas: ReplicaCounts {
                    desired: r.replicas.desired,
                    updated: r.replicas.updated,
                    ready: r.replicas.ready,
                    available: r.replicas.available,
                },
                message: r.message.clone(),
            })
            .collect()
    }
    /// The canary track, while there is one.
    async fn canary(&self) -> Option<Canary> {
        let c = self.deployment.canary.as_ref()?;
        Some(Canary {
            spec: Json(c.spec.clone()),
            weight: c.weight,
            header_name: c.header.name.clone(),
            header_value: c.header.value.clone(),
            from_revision: c.from_revision,
            promoting: c.promoting,
            started_by: c.started_by.clone(),
            started_at: c.started_at,
            status: self
                .deployment
                .status
                .canary
                .as_ref()
                .map(|t| CanaryStatus {
                    phase: t.phase.into(),
                    message: t.message.clone(),
                    replicas: (&t.replicas).into(),
                    routed_weight: t.routed_weight,
                    endpoints: (&t.endpoints).into(),
                    load: t.load.as_ref().map(Into::into),
                }),
        })
    }
    /// What the deployment serves now, from its model servers' metrics (all tracks);
    /// null until the first reading. Read with the deployment: a page costs no more
    /// statements with it.
    async fn load(&self) -> Option<super::load::Load> {
        self.deployment.status.load.as_ref().map(Into::into)
    }
    /// With `spec.autoscaling`: the replica count the autoscaler set, what the load asked
    /// for, what limited it and why, in one sentence; null before its first decision.
    async fn autoscaling(&self) -> Option<super::autoscaling::Autoscaling> {
        self.deployment.status.autoscaling.as_ref().map(Into::into)
    }
    /// Serving metrics over a window (`window` like `1h`, default 1 hour; `step` like
    /// `1m`; `series` default all; `track` default every pod).
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn metrics(
        &self,
        ctx: &Context<'_>,
        window: Option<String>,
        step: Option<String>,
        series: Option<Vec<super::load::SeriesName>>,
        track: Option<super::load::Track>,
    ) -> Result<super::load::Metrics> {
        let (state, _) = state(ctx)?;
        let query = super::load::query(window, step, series, track);
        let metrics = service::load::deployment_metrics_in(
            &state.ctx,
            &self.project,
            &self.deployment.name,
            &query,
        )
        .await
        .map_err(service_error)?;
        Ok(metrics.into())
    }
    async fn restarted_at(&self) -> Option<DateTime<Utc>> {
        self.deployment.restarted_at
    }
    async fn deletion_requested_at(&self) -> Option<DateTime<Utc>> {
        self.deployment.deletion_requested_at
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.deployment.created_at
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        self.deployment.updated_at
    }

    /// Only in the answer to a change: what it was accepted despite (e.g. replicas that
    /// do not fit on the GPUs free now).
    async fn warnings(&self) -> &[String] {
        &self.deployment.warnings
    }
    /// The Kubernetes objects modelplane keeps for it (named after the deployment; a
    /// disaggregated one's Deployments `<name>-prefill` and `<name>-decode`; a model that
    /// spans nodes has a LeaderWorkerSet `<name>-group` in place of its Deployment).
    async fn objects(&self, ctx: &Context<'_>) -> Result<Vec<OwnedObject>> {
        let (state, _) = state(ctx)?;
        let spec = &self.deployment.spec;
        let mut kinds = vec!["Deployment", "Service"];
        // A route only when a Gateway is named (the spec's or the server's default), a
        // budget only above one replica: as the worker builds them.
        if spec.routing.gateway.is_some() || state.ctx.routing.default_gateway.is_some() {
            kinds.push("HTTPRoute");
        }
        if spec
            .serving(&self.deployment.name)
            .is_ok_and(|serving| serving.replicas > 1 && serving.nodes <= 1)
        {
            kinds.push("PodDisruptionBudget");
        }
        let name = &self.deployment.name;
        let object = |kind: &str, name: String| OwnedObject {
            kind: kind.into(),
            namespace: self.project.namespace.clone(),
            name,
        };
        let mut objects: Vec<OwnedObject> = Vec::new();
        for kind in kinds {
            match kind {
                // A disaggregated deployment's pods are two Deployments, one per role.
                "Deployment" if spec.disaggregation.is_some() => objects.extend(
                    domain::ServingRole::ALL
                        .map(|role| object(kind, format!("{name}-{}", role.as_str()))),
                ),
                "Deployment" if spec.nodes() > 1 => {
                    objects.push(object("LeaderWorkerSet", domain::group_object_name(name)))
                }
                _ => objects.push(object(kind, name.clone())),
            }
        }
        Ok(objects)
    }
    /// The newest `count` (1 to 20) timeline entries, newest first; a page of deployments
    /// reads them for all its deployments at once.
    #[graphql(complexity = "count.clamp(1, 20) as usize * child_complexity + 1")]
    async fn latest_events(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 5)] count: i64,
    ) -> Result<Vec<TimelineEventNode>> {
        let key = super::loaders::LatestEvents(self.key(count));
        let events = loader(ctx)?
            .load_one(key)
            .await
            .map_err(|e| service_error_shared(&e))?;
        Ok(events
            .map(|e| e.0)
            .unwrap_or_default()
            .into_iter()
            .map(TimelineEventNode)
            .collect())
    }
    /// How many spec revisions it has (read for a whole page at once).
    async fn revision_count(&self, ctx: &Context<'_>) -> Result<i64> {
        let key = super::loaders::RevisionCount(self.key(0));
        Ok(loader(ctx)?
            .load_one(key)
            .await
            .map_err(|e| service_error_shared(&e))?
            .unwrap_or(0))
    }
    /// Spec revisions, newest first.
    #[graphql(
        complexity = "first.unwrap_or(50).clamp(1, 200) as usize * child_complexity + super::DB_COST"
    )]
    async fn revisions(
        &self,
        ctx: &Context<'_>,
        first: Option<i64>,
        after: Option<String>,
    ) -> Result<Page_<RevisionNode>> {
        let (state, _) = state(ctx)?;
        let page = service::deployments::list_revisions_in(
            &state.ctx,
            &self.project,
            self.deployment.id,
            first,
            after.as_deref(),
        )
        .await
        .map_err(service_error)?;
        Ok(connection(page, after.is_some(), RevisionNode))
    }
    /// The timeline, oldest first.
    #[graphql(
        complexity = "first.unwrap_or(50).clamp(1, 200) as usize * child_complexity + super::DB_COST"
    )]
    async fn events(
        &self,
        ctx: &Context<'_>,
        first: Option<i64>,
        after: Option<String>,
    ) -> Result<Page_<TimelineEventNode>> {
        let (state, _) = state(ctx)?;
        let page = service::deployments::list_events_in(
            &state.ctx,
            &self.project,
            self.deployment.id,
            first,
            after.as_deref(),
        )
        .await
        .map_err(service_error)?;
        Ok(connection(page, after.is_some(), TimelineEventNode))
    }
}

impl DeploymentNode {
    fn key(&self, per: i64) -> super::loaders::Key {
        super::loaders::Key {
            project: self.project.clone(),
            deployment: self.deployment.id,
            per,
        }
    }
}

fn loader<'a>(
    ctx: &Context<'a>,
) -> Result<&'a async_graphql::dataloader::DataLoader<super::loaders::Batch>> {
    ctx.data::<async_graphql::dataloader::DataLoader<super::loaders::Batch>>()
}

/// A batch's error, shared by every key of the batch.
fn service_error_shared(err: &service::ServiceError) -> async_graphql::Error {
    match err {
        service::ServiceError::Invalid(errors) => super::errors::field_errors(errors.clone()),
        other => async_graphql::Error::new(other.to_string())
            .extend_with(|_, e| e.set("code", "INTERNAL")),
    }
}

pub struct RevisionNode(pub Revision);

#[Object(name = "Revision")]
impl RevisionNode {
    async fn revision(&self) -> i64 {
        self.0.revision
    }
    async fn spec(&self) -> Json<&domain::DeploymentSpec> {
        Json(&self.0.spec)
    }
    async fn reason(&self) -> &str {
        &self.0.reason
    }
    async fn actor(&self) -> &str {
        &self.0.actor
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}

pub struct TimelineEventNode(pub TimelineEvent);

#[Object(name = "TimelineEvent")]
impl TimelineEventNode {
    async fn id(&self) -> i64 {
        self.0.id
    }
    async fn deployment_id(&self) -> Uuid {
        self.0.deployment_id
    }
    /// `Created`, `SpecChanged`, `Scaled`, … (as REST reports them).
    async fn kind(&self) -> &'static str {
        self.0.kind.as_str()
    }
    async fn message(&self) -> &str {
        &self.0.message
    }
    async fn actor(&self) -> &str {
        &self.0.actor
    }
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}
