//! The use cases shared by every front-end (REST and GraphQL; the portal uses REST):
//! authorise → parse → transaction → store → enqueue → timeline. Handlers and resolvers
//! stay thin.

pub mod access;
pub mod access_cache;
pub mod activation;
pub mod audit;
pub mod canary;
pub mod capacity;
pub mod chat;
mod cursor;
pub mod deployments;
mod diff;
pub mod forward;
pub mod health;
pub mod key_check;
pub mod live;
pub mod load;
pub mod model_keys;
pub mod projects;
pub mod role_bindings;
pub mod streams;
pub mod tokens;

use std::sync::Arc;

use sqlx::PgPool;

use crate::domain::{FieldErrors, QuotaExceeded, SpecLimits};

pub use access::{Actor, Identity};
pub use cursor::Page;

/// Everything a use case needs: the database and the rules from configuration.
#[derive(Clone)]
pub struct Context {
    pub pool: PgPool,
    /// Connections passed from request to request on the busiest paths (get, list,
    /// create, spec changes) without sqlx's ping on every return; see `store::hot`.
    pub hot: Arc<crate::store::hot::HotConnections>,
    /// Gets of one deployment, read together while they arrive faster than Postgres
    /// answers; see `store::lookups`.
    pub lookups: Arc<crate::store::lookups::DeploymentLookups>,
    /// Creates, committing those that wait together in one transaction; see `store::creates`.
    pub creates: Arc<crate::store::creates::DeploymentCreates>,
    /// Tokens, projects and roles read on every request (off unless started).
    pub access: access_cache::AccessCache,
    pub limits: SpecLimits,
    pub routing: Arc<RoutingPolicy>,
    /// The GPU resource name of specs that name none (for quotas and the fit check).
    pub gpu_resource_name: Arc<str>,
    /// How often the worker reads the model servers' metrics: a reading older than a few
    /// intervals is shown stale.
    pub load_interval: std::time::Duration,
}

/// How routes on shared Gateways are kept apart (see `domain::routing`).
#[derive(Debug, Clone, Default)]
pub struct RoutingPolicy {
    /// The server's default Gateway, `namespace/name[/section]`.
    pub default_gateway: Option<String>,
    /// Hostnames no project may use on a shared Gateway.
    pub reserved_hostnames: Vec<String>,
}

/// The service layer's one error type; front-ends map it to their protocol.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The input is invalid; every problem names its field.
    #[error("invalid input: {0}")]
    Invalid(FieldErrors),
    /// The caller may see the project but lacks the role for this.
    #[error("{0}")]
    Forbidden(String),
    #[error("{kind} `{name}` not found")]
    NotFound { kind: &'static str, name: String },
    /// The request conflicts with the current state (name taken, deleting, …).
    #[error("{message}")]
    Conflict {
        message: String,
        field: Option<&'static str>,
    },
    /// The change would take the project past its quota.
    #[error("{0}")]
    QuotaExceeded(QuotaExceeded),
    /// `If-Match` did not match the current entity tag.
    #[error("{0}")]
    PreconditionFailed(String),
    /// An `Idempotency-Key` was reused with a different request.
    #[error("the Idempotency-Key `{0}` was already used with a different request")]
    IdempotencyKeyReused(String),
    /// A model server could not be reached or did not answer usefully ("try it").
    #[error("{message}")]
    ModelUnreachable { message: String },
    /// The caller (or its address) holds as many open watches and subscriptions as allowed.
    #[error("{0}")]
    TooManyStreams(String),
    #[error("database error")]
    Database(#[from] sqlx::Error),
}

impl From<FieldErrors> for ServiceError {
    fn from(errors: FieldErrors) -> Self {
        Self::Invalid(errors)
    }
}

impl ServiceError {
    fn not_found(kind: &'static str, name: impl Into<String>) -> Self {
        Self::NotFound {
            kind,
            name: name.into(),
        }
    }

    fn conflict(field: Option<&'static str>, message: impl Into<String>) -> Self {
        Self::Conflict {
            message: message.into(),
            field,
        }
    }
}

/// A condition on the current state of a deployment's spec, built by each front-end from
/// its own way of saying it (HTTP `If-Match`, a GraphQL argument).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Precondition {
    /// Apply whatever the current spec is.
    #[default]
    None,
    /// The deployment must exist (`If-Match: *`).
    Exists,
    /// The spec must still be one of these versions (entity tags, strongly compared).
    OneOf(Vec<String>),
    /// The spec must still be at this generation (GraphQL's `expectedGeneration`).
    Generation(i64),
}

/// Page sizes: the default when none is asked, and the most a caller may ask.
pub const DEFAULT_PAGE_SIZE: i64 = 50;
pub const MAX_PAGE_SIZE: i64 = 200;

/// Validates a requested page size.
pub fn page_size(limit: Option<i64>) -> Result<i64, ServiceError> {
    match limit {
        None => Ok(DEFAULT_PAGE_SIZE),
        Some(n) if (1..=MAX_PAGE_SIZE).contains(&n) => Ok(n),
        Some(_) => Err(FieldErrors::single(
            "limit",
            format!("must be between 1 and {MAX_PAGE_SIZE}"),
        )
        .into()),
    }
}
