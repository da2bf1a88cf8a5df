//! The GraphQL view of the autoscaler's state: `Deployment.autoscaling`.

use async_graphql::{Enum, SimpleObject};
use chrono::{DateTime, Utc};

use crate::domain;

/// What held the replica count from what the load asked for.
#[derive(Enum, Copy, Clone, Eq, PartialEq)]
#[graphql(remote = "crate::domain::ScalingLimit")]
pub enum ScalingLimit {
    MinReplicas,
    MaxReplicas,
    Quota,
    Capacity,
    ScaleUpStabilization,
    ScaleDownDelay,
    StaleMetrics,
    NotServing,
}

/// What the autoscaler decided last and why (with `spec.autoscaling`).
#[derive(SimpleObject)]
pub struct Autoscaling {
    /// The replicas the deployment is set to now.
    pub replicas: i64,
    /// What the load asked for at the last decision, before stabilization and clamps.
    pub wanted: i64,
    pub limited_by: Option<ScalingLimit>,
    /// The last decision in one sentence.
    pub reason: String,
    pub decided_at: DateTime<Utc>,
    /// The last change of the count.
    pub last_scaled: Option<ScalingChange>,
}

/// One change of the replica count, and why.
#[derive(SimpleObject)]
pub struct ScalingChange {
    pub at: DateTime<Utc>,
    pub from: i64,
    pub to: i64,
    pub reason: String,
}

impl From<&domain::AutoscalingStatus> for Autoscaling {
    fn from(s: &domain::AutoscalingStatus) -> Self {
        Self {
            replicas: s.replicas,
            wanted: s.wanted,
            limited_by: s.limited_by.map(Into::into),
            reason: s.reason.clone(),
            decided_at: s.decided_at,
            last_scaled: s.last_scaled.as_ref().map(|c| ScalingChange {
                at: c.at,
                from: c.from,
                to: c.to,
                reason: c.reason.clone(),
            }),
        }
    }
}
