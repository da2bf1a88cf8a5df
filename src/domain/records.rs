//! The records the service returns to every front-end (REST now, GraphQL and the portal later).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

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
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Created,
    SpecChanged,
    Scaled,
    RolledBack,
    RestartRequested,
    DeleteRequested,
    Applied,
    DriftRepaired,
    PhaseChanged,
    ClusterUnreachable,
    Deleted,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "Created",
            Self::SpecChanged => "SpecChanged",
            Self::Scaled => "Scaled",
            Self::RolledBack => "RolledBack",
            Self::RestartRequested => "RestartRequested",
            Self::DeleteRequested => "DeleteRequested",
            Self::Applied => "Applied",
            Self::DriftRepaired => "DriftRepaired",
            Self::PhaseChanged => "PhaseChanged",
            Self::ClusterUnreachable => "ClusterUnreachable",
            Self::Deleted => "Deleted",
        }
    }
}

/// One entry of a deployment's timeline; kept after the deployment is deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEvent {
    pub id: i64,
    pub deployment_id: Uuid,
    /// `Created`, `SpecChanged`, `Scaled`, `RolledBack`, `RestartRequested`, `DeleteRequested`
    /// (by people); `Applied`, `DriftRepaired`, `PhaseChanged`, `ClusterUnreachable`,
    /// `Deleted` (by the worker).
    pub kind: String,
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
    /// `viewer`, `editor`, `admin` or `platform-admin`.
    pub role: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// A role granted to an OIDC user or group on a project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleBinding {
    pub id: Uuid,
    /// `user` (matched against the token's subject) or `group` (against its groups claim).
    pub subject_kind: String,
    pub subject: String,
    pub role: String,
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
