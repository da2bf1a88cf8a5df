//! The GraphQL view of model keys.

use async_graphql::SimpleObject;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain;

/// A credential for calling a project's models through the Gateway (never its secret).
#[derive(SimpleObject)]
pub struct ModelKey {
    pub id: Uuid,
    pub project: String,
    pub name: String,
    /// The secret's first characters, to tell keys apart.
    pub prefix: String,
    /// The deployments it may call, by name; null: every deployment of the project.
    pub deployments: Option<Vec<String>>,
    /// Requests a minute it may send; null: no limit.
    pub requests_per_minute: Option<i32>,
    /// Model tokens a day it may use; null: no budget.
    pub daily_token_budget: Option<i64>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

impl From<domain::ModelKey> for ModelKey {
    fn from(k: domain::ModelKey) -> Self {
        Self {
            id: k.id,
            project: k.project,
            name: k.name,
            prefix: k.prefix,
            deployments: k.deployments,
            requests_per_minute: k.requests_per_minute,
            daily_token_budget: k.daily_token_budget,
            created_by: k.created_by,
            created_at: k.created_at,
            expires_at: k.expires_at,
            revoked_at: k.revoked_at,
            last_used_at: k.last_used_at,
        }
    }
}

/// A new model key: its secret is shown here once; only its hash is stored.
#[derive(SimpleObject)]
pub struct CreatedModelKey {
    pub key: ModelKey,
    /// Send as `Authorization: Bearer <secret>` or `x-api-key`.
    pub secret: String,
}
