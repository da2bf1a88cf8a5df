//! What modelplane reports about a deployment: phase, conditions, replicas, endpoints.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::autoscaling::AutoscalingStatus;
use super::canary::CanaryHeader;
use super::load::Load;

/// Where a deployment stands. Each phase's meaning, when it is entered and left, and what
/// to do about it: the table in the repository's `docs/API-DESIGN.md#phases`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum Phase {
    Pending,
    Deploying,
    Ready,
    Degraded,
    Failed,
    ScaledToZero,
    Deleting,
}

impl Phase {
    pub const ALL: [Phase; 7] = [
        Phase::Pending,
        Phase::Deploying,
        Phase::Ready,
        Phase::Degraded,
        Phase::Failed,
        Phase::ScaledToZero,
        Phase::Deleting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Deploying => "Deploying",
            Self::Ready => "Ready",
            Self::Degraded => "Degraded",
            Self::Failed => "Failed",
            Self::ScaledToZero => "ScaledToZero",
            Self::Deleting => "Deleting",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Phase {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|p| p.as_str()).collect();
                format!("`{s}` is not a phase; use one of {}", names.join(", "))
            })
    }
}

/// A Kubernetes-style condition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// e.g. `Applied`, `Available`, `Progressing`, `Routed`, `ClusterReachable`.
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    pub last_transition_time: DateTime<Utc>,
}

/// Whether a condition holds, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn holds(ok: bool) -> Self {
        if ok { Self::True } else { Self::False }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaCounts {
    pub desired: i64,
    pub updated: i64,
    pub ready: i64,
    pub available: i64,
}

/// Where to call the model; empty (with `reason`) until it can be reached.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    /// In-cluster URL of the Service, e.g. `http://qwen.team-a.svc.cluster.local:8000`.
    pub cluster: Option<String>,
    /// URLs through the Gateway.
    pub external: Vec<String>,
    /// OpenAI-compatible base URL (`…/v1`), external when there is one.
    pub openai_base: Option<String>,
    /// Why an endpoint is missing, when one is.
    pub reason: Option<String>,
}

/// The observed state the worker writes; the API never changes it except for `phase` on delete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatus {
    pub phase: Phase,
    /// The spec generation this status describes.
    pub observed_generation: i64,
    /// One line naming the cause when something is wrong.
    pub message: String,
    pub replicas: ReplicaCounts,
    pub conditions: Vec<Condition>,
    pub endpoints: Endpoints,
    /// The canary track, while the deployment has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStatus>,
    /// Each LoRA adapter of `spec.adapters`: on how many of the serving pods it is loaded,
    /// and why not where it is not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<AdapterStatus>,
    /// A disaggregated deployment's roles (`prefill`, then `decode`): each one's pods, and
    /// what holds it back; `replicas` counts both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<RoleStatus>,
    /// What the deployment serves now, from its model servers' metrics (all tracks
    /// together); absent until the first reading. Read beside the status, never stored in
    /// it: a new reading is not a status change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Load>,
    /// What the autoscaler decided last and why, with `spec.autoscaling`. Read beside the
    /// status, never stored in it, like `load`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingStatus>,
}

impl DeploymentStatus {
    /// The status of a record nobody has applied yet.
    pub fn pending(desired_replicas: i64) -> Self {
        Self {
            phase: Phase::Pending,
            observed_generation: 0,
            message: "Waiting for the reconciler to apply the deployment".into(),
            replicas: ReplicaCounts {
                desired: desired_replicas,
                ..ReplicaCounts::default()
            },
            conditions: Vec::new(),
            endpoints: Endpoints::default(),
            canary: None,
            adapters: Vec::new(),
            roles: Vec::new(),
            load: None,
            autoscaling: None,
        }
    }
}

/// One role of a disaggregated deployment, as its Kubernetes Deployment reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleStatus {
    /// `prefill` or `decode`.
    pub role: String,
    pub replicas: ReplicaCounts,
    /// Why the role is not ready, or empty.
    pub message: String,
}

/// A LoRA adapter as the model servers report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdapterStatus {
    pub name: String,
    /// Serving pods (containers ready, on the current engine process) that have it loaded.
    pub loaded: i64,
    /// Serving pods.
    pub pods: i64,
    /// Why it is not loaded everywhere (the engine's answer on a pod), or empty.
    pub message: String,
}

/// What the reconciler reports about a canary track.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// The canary track's own phase (`Deploying`, `Ready`, `Failed`, …).
    pub phase: Phase,
    /// One line naming the cause when something is wrong with the canary track.
    pub message: String,
    pub replicas: ReplicaCounts,
    /// The weight asked for.
    pub weight: i32,
    /// The percent of header-less requests the applied route sends to the canary now: the
    /// weight once the canary has a ready replica, 0 before (so stable keeps them), 100
    /// while a promotion rolls the stable track.
    pub routed_weight: i32,
    pub header: CanaryHeader,
    pub promoting: bool,
    /// The canary's own in-cluster Service URL; the external URLs are the deployment's
    /// (send the header to reach the canary through them).
    pub endpoints: Endpoints,
    /// What the canary track alone serves now (see [`DeploymentStatus::load`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Load>,
}
