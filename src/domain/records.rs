//! The records the service returns to every front-end (REST and GraphQL).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::access::{Role, SubjectKind, TokenRole};
use super::canary::Canary;
use super::spec::DeploymentSpec;
use super::status::DeploymentStatus;

/// A tenant, mapped to exactly one Kubernetes namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    pub id: Uuid,
    pub name: String,
    /// Fixed at creation.
    pub namespace: String,
    /// The namespace existed before the project and survives its deletion.
    pub namespace_adopted: bool,
    pub created_at: DateTime<Utc>,
}

/// A model deployment: the user's spec and what the worker observed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Deployment {
    pub id: Uuid,
    pub project: String,
    pub name: String,
    /// Bumped by every accepted spec change.
    pub generation: i64,
    pub spec: DeploymentSpec,
    pub status: DeploymentStatus,
    /// The last restart request; pods started before it are replaced.
    pub restarted_at: Option<DateTime<Utc>>,
    pub deletion_requested_at: Option<DateTime<Utc>>,
    /// The canary track, while there is one (`…/canary`).
    pub canary: Option<Canary>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Only in the answer to a write: what the request was accepted despite, e.g. that not
    /// every replica fits on the GPUs free now (also sent as `Warning` headers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Deployment {
    /// The entity tag of the spec: changes with the generation (and the record), not the status.
    pub fn etag(&self) -> String {
        entity_tag(self.id, self.generation)
    }
}

/// The strong entity tag of a deployment's spec at a generation.
pub fn entity_tag(id: Uuid, generation: i64) -> String {
    format!("\"{}.{}\"", id.simple(), generation)
}

/// A spec as it was accepted at one generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// Equal to the generation the spec was accepted as.
    pub revision: i64,
    pub spec: DeploymentSpec,
    /// `created`, `updated`, `replaced`, `scaled` or `rolled back to revision N`.
    pub reason: String,
    pub actor: String,
    pub created_at: DateTime<Utc>,
}

/// What a timeline entry records. Stored (and listed) as its name.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
)]
pub enum EventKind {
    /// By people: the record was created, its spec changed, scaled, rolled back, restarted,
    /// or its deletion asked for.
    Created,
    SpecChanged,
    Scaled,
    RolledBack,
    RestartRequested,
    DeleteRequested,
    /// By people: a canary was started, its weight or header changed, it was promoted or
    /// aborted.
    CanaryStarted,
    CanaryChanged,
    CanaryPromoted,
    CanaryAborted,
    /// By the worker: a generation applied, drift repaired, the phase changed, the cluster
    /// unreachable, every object removed.
    Applied,
    DriftRepaired,
    PhaseChanged,
    ClusterUnreachable,
    Deleted,
    /// By the worker: the canary's objects are gone, all traffic is on one track again.
    CanaryRemoved,
    /// By the worker: InferencePool mode's objects are gone (the route no longer uses them).
    InferencePoolRemoved,
    /// By the worker: objects the record no longer wants (a canary's, InferencePool
    /// mode's) wait for the Gateway to take in the route without them.
    CleanupWaiting,
    /// By the autoscaler: the replica count followed the load (the message says why).
    Autoscaled,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One entry of a deployment's timeline; kept after the deployment is deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEvent {
    pub id: i64,
    pub deployment_id: Uuid,
    pub kind: EventKind,
    pub message: String,
    /// Who did it: `token:<name>`, `user:<name>` (OIDC), or `worker` for the reconciler.
    pub actor: String,
    pub created_at: DateTime<Utc>,
}

/// An API token as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiToken {
    pub id: Uuid,
    pub name: String,
    /// The project it grants a role on; `null` for a platform-admin token.
    pub project: Option<String>,
    pub role: TokenRole,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// A model key as listed: a credential for calling a project's models through the Gateway
/// (an API token manages modelplane; a model key only calls models). Never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelKey {
    pub id: Uuid,
    pub project: String,
    pub name: String,
    /// The secret's first characters, to tell keys apart (`mpk_` and 8 more).
    pub prefix: String,
    /// The deployments it may call, by name; `null`: every deployment of the project.
    pub deployments: Option<Vec<String>>,
    /// Requests a minute it may send; `null`: no limit.
    pub requests_per_minute: Option<i32>,
    /// Model tokens (prompt and completion) a UTC day it may use; `null`: no budget.
    /// Checked against its metered usage (`…/usage`), which trails by up to a minute.
    pub daily_token_budget: Option<i64>,
    /// Requests it may have in flight at once; `null`: no limit. The Gateway's check sees a
    /// request start, not end: a request counts as in flight for the deployment's recent
    /// 95th-percentile latency (10 s before its metrics are read).
    pub max_concurrent: Option<i32>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The last check that let it through (written at most once a minute, up to 10 s after
    /// the check).
    pub last_used_at: Option<DateTime<Utc>>,
}

/// What a model key was used for, per UTC day: the requests its checks let through and
/// its share of the tokens of the deployments it called.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyUsage {
    pub key_id: Uuid,
    pub key: String,
    pub from: chrono::NaiveDate,
    pub to: chrono::NaiveDate,
    /// Requests let through over the whole range.
    pub requests: i64,
    /// Tokens over the whole range: a deployment's metered tokens (prompt and generated,
    /// from its serving metrics) of a day, shared among the keys that called it that day in
    /// proportion to their requests. An estimate: the model server counts tokens, not who
    /// asked for them.
    pub tokens: i64,
    /// Every day of the range, oldest first (days without requests included, as 0).
    pub daily: Vec<KeyUsageDay>,
    /// The deployments it called in the range, by requests.
    pub deployments: Vec<KeyUsageDeployment>,
}

/// One day of a model key's use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyUsageDay {
    pub date: chrono::NaiveDate,
    pub requests: i64,
    pub tokens: i64,
}

/// A model key's use of one deployment over a range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyUsageDeployment {
    /// The deployment's name (`null` for requests counted before they were counted per
    /// deployment, or of a deployment since deleted).
    pub deployment: Option<String>,
    pub requests: i64,
    pub tokens: i64,
}

/// A role granted to an OIDC user or group on a project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleBinding {
    pub id: Uuid,
    pub subject_kind: SubjectKind,
    pub subject: String,
    pub role: Role,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

/// A change to a project, its tokens or its role bindings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    pub id: i64,
    /// e.g. `ProjectCreated`, `TokenCreated`, `TokenRevoked`, `RoleBindingCreated`.
    pub kind: String,
    /// What it was done to, e.g. `token/ci-deployer`.
    pub target: String,
    pub message: String,
    pub actor: String,
    pub created_at: DateTime<Utc>,
}

/// What changed in a [`Change`].
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum ChangeKind {
    Created,
    Spec,
    Status,
    Restart,
    Deleting,
    Deleted,
    /// A new timeline entry.
    Event,
    /// A new reading of the deployment's serving metrics (`status.load`); only watchers
    /// that asked for load receive it.
    Load,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One committed change to a deployment, numbered in commit order: ids only, never a spec
/// or a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub seq: i64,
    pub project_id: Uuid,
    pub deployment_id: Uuid,
    pub kind: ChangeKind,
    /// For [`ChangeKind::Event`]: the timeline entry.
    pub event_id: Option<i64>,
}
