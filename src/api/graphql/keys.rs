//! The GraphQL view of model keys.

use async_graphql::{ComplexObject, Context, Result, SimpleObject};
use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

use super::errors::service_error;
use crate::domain;
use crate::service;

/// A credential for calling a project's models through the Gateway (never its secret).
#[derive(SimpleObject)]
#[graphql(complex)]
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
    /// Model tokens a UTC day it may use (checked against its metered usage); null: no
    /// budget.
    pub daily_token_budget: Option<i64>,
    /// Requests it may have in flight at once (estimated from the deployment's latency);
    /// null: no limit.
    pub max_concurrent: Option<i32>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

#[ComplexObject]
impl ModelKey {
    /// Requests its checks let through per UTC day over the last `days` days (1 to 366,
    /// default 30) (project admins).
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn usage(&self, ctx: &Context<'_>, days: Option<i64>) -> Result<KeyUsage> {
        let (state, actor) = super::state(ctx)?;
        let usage = service::model_keys::key_usage(&state.ctx, actor, &self.project, self.id, days)
            .await
            .map_err(service_error)?;
        Ok(KeyUsage {
            from: usage.from,
            to: usage.to,
            requests: usage.requests,
            tokens: usage.tokens,
            daily: usage
                .daily
                .into_iter()
                .map(|d| KeyUsageDay {
                    date: d.date,
                    requests: d.requests,
                    tokens: d.tokens,
                })
                .collect(),
            deployments: usage
                .deployments
                .into_iter()
                .map(|d| KeyUsageDeployment {
                    deployment: d.deployment,
                    requests: d.requests,
                    tokens: d.tokens,
                })
                .collect(),
        })
    }
}

/// A model key's requests per UTC day, and its share of the tokens of the deployments it
/// called (a deployment's metered tokens of a day divided among the keys that called it,
/// by their requests).
#[derive(SimpleObject)]
pub struct KeyUsage {
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub requests: i64,
    pub tokens: i64,
    pub daily: Vec<KeyUsageDay>,
    /// Per deployment called, most requests first.
    pub deployments: Vec<KeyUsageDeployment>,
}

#[derive(SimpleObject)]
pub struct KeyUsageDay {
    pub date: NaiveDate,
    pub requests: i64,
    pub tokens: i64,
}

#[derive(SimpleObject)]
pub struct KeyUsageDeployment {
    /// Null: requests counted before they were counted per deployment, or of a deployment
    /// since deleted.
    pub deployment: Option<String>,
    pub requests: i64,
    pub tokens: i64,
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
            max_concurrent: k.max_concurrent,
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
