//! What the REST API reads and writes besides the domain's resources: request bodies, query
//! parameters and the page and token envelopes, with their OpenAPI schemas. Each body
//! converts into the service command of the same name; the service layer knows nothing of
//! JSON field names, query strings or schemas. (GraphQL builds the same commands from its
//! arguments in `api/graphql/mutation.rs`.)

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::domain::{ApiToken, CanaryHeader, DeploymentSpec, ModelKey, Role};
use crate::service::{
    self, canary, capacity, deployments, model_keys, projects, role_bindings, tokens,
};

/// The body of `POST …/deployments`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateDeployment {
    /// A DNS-1035 label of at most 45 characters, unique in the project.
    #[schema(
        pattern = "^[a-z]([-a-z0-9]*[a-z0-9])?$",
        min_length = 1,
        max_length = 45
    )]
    pub name: String,
    pub spec: DeploymentSpec,
}

impl From<CreateDeployment> for deployments::CreateDeployment {
    fn from(body: CreateDeployment) -> Self {
        Self {
            name: body.name,
            spec: body.spec,
        }
    }
}

/// The body of `PUT …/deployments/{name}` (and the document a merge patch applies to).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplaceDeployment {
    pub spec: DeploymentSpec,
}

impl From<ReplaceDeployment> for deployments::ReplaceDeployment {
    fn from(body: ReplaceDeployment) -> Self {
        Self { spec: body.spec }
    }
}

/// The body of `POST …/scale`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScaleDeployment {
    /// 0 up to the server's `MODELPLANE_MAX_REPLICAS` (default 100).
    #[schema(minimum = 0, maximum = 100)]
    pub replicas: i64,
    /// `prefill` or `decode`: the role to scale, for (and only for) a disaggregated
    /// deployment.
    #[serde(default)]
    pub role: Option<String>,
}

impl From<ScaleDeployment> for deployments::ScaleDeployment {
    fn from(body: ScaleDeployment) -> Self {
        Self {
            replicas: body.replicas,
            role: body.role,
        }
    }
}

/// The body of `POST …/adapters`: a LoRA adapter to serve.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddAdapter {
    /// The OpenAI `model` id it answers to: letters, digits, `.`, `_`, `-`, at most 64.
    #[schema(max_length = 64)]
    pub name: String,
    /// `hf://org/name`, `pvc://claim/path` or `s3://bucket/prefix`.
    pub source: String,
    /// For `s3://` only: the Secret whose keys (`AWS_ACCESS_KEY_ID`, …) the pods' fetcher
    /// uses.
    #[serde(default)]
    pub secret_ref: Option<crate::domain::SecretRef>,
}

impl From<AddAdapter> for deployments::AddAdapter {
    fn from(body: AddAdapter) -> Self {
        Self {
            adapter: crate::domain::AdapterSpec {
                name: body.name,
                source: body.source,
                secret_ref: body.secret_ref,
            },
        }
    }
}

/// The body of `POST …/rollback`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackDeployment {
    /// The revision whose spec becomes current again.
    pub revision: i64,
    /// Replicas after the rollback; the current count when omitted.
    #[serde(default)]
    pub replicas: Option<i64>,
}

impl From<RollbackDeployment> for deployments::RollbackDeployment {
    fn from(body: RollbackDeployment) -> Self {
        Self {
            revision: body.revision,
            replicas: body.replicas,
        }
    }
}

/// Filters for listing deployments.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListDeployments {
    /// Only deployments in this phase.
    pub phase: Option<String>,
    /// A Kubernetes label selector over `spec.labels`, e.g. `team=nlp,tier in (gold,silver)`.
    pub label_selector: Option<String>,
    /// Only names starting with this.
    pub name_prefix: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `nextCursor` from the previous page, with the same filters.
    #[param(min_length = 1)]
    pub cursor: Option<String>,
}

impl From<ListDeployments> for deployments::ListDeployments {
    fn from(query: ListDeployments) -> Self {
        Self {
            phase: query.phase,
            label_selector: query.label_selector,
            name_prefix: query.name_prefix,
            limit: query.limit,
            cursor: query.cursor,
        }
    }
}

/// How a write is carried out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WriteOptions {
    /// Check everything (validation, quota, fit) and answer as if written, but write
    /// nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Accept replicas that ask for more GPUs than any node has (for nodes still being
    /// added, e.g. by an autoscaler).
    #[serde(default)]
    pub force: bool,
}

impl From<WriteOptions> for capacity::WriteOptions {
    fn from(options: WriteOptions) -> Self {
        Self {
            dry_run: options.dry_run,
            force: options.force,
        }
    }
}

/// The query of `GET …/usage`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// Whole days (UTC) up to and including today, 1 to 366 (default 30).
    #[param(minimum = 1, maximum = 366)]
    pub days: Option<i64>,
}

impl From<UsageQuery> for capacity::UsageQuery {
    fn from(query: UsageQuery) -> Self {
        Self { days: query.days }
    }
}

/// The body of `POST …/deployments/{name}/canary`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartCanary {
    /// A JSON merge patch (RFC 7386) of the deployment's current spec: the canary's spec.
    /// Give this or `revision`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub spec: Option<serde_json::Value>,
    /// A revision whose spec the canary runs. Give this or `spec`.
    #[serde(default)]
    pub revision: Option<i64>,
    /// Replicas of the canary; the chosen spec's when omitted.
    #[serde(default)]
    pub replicas: Option<i64>,
    /// Percent (0–99) of the requests without the header that go to the canary once it has
    /// a ready replica.
    pub weight: i32,
    /// Requests with this header always go to the canary; default `x-modelplane-canary: true`.
    #[serde(default)]
    pub header: Option<CanaryHeader>,
}

impl From<StartCanary> for canary::StartCanary {
    fn from(body: StartCanary) -> Self {
        Self {
            spec: body.spec,
            revision: body.revision,
            replicas: body.replicas,
            weight: body.weight,
            header: body.header,
        }
    }
}

/// The body of `PATCH …/canary`: what to change.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateCanary {
    #[serde(default)]
    pub weight: Option<i32>,
    #[serde(default)]
    pub header: Option<CanaryHeader>,
}

impl From<UpdateCanary> for canary::UpdateCanary {
    fn from(body: UpdateCanary) -> Self {
        Self {
            weight: body.weight,
            header: body.header,
        }
    }
}

/// The body of `POST /api/v1/projects`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateProject {
    /// A DNS-1123 label; not a system namespace.
    #[schema(
        pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        min_length = 1,
        max_length = 63
    )]
    pub name: String,
    /// The Kubernetes namespace; defaults to the name. Fixed once created.
    #[serde(default)]
    #[schema(
        pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        min_length = 1,
        max_length = 63
    )]
    pub namespace: Option<String>,
    /// Adopt an existing namespace instead of creating one; it then survives the project.
    #[serde(default)]
    pub adopt_namespace: bool,
}

impl From<CreateProject> for projects::CreateProject {
    fn from(body: CreateProject) -> Self {
        Self {
            name: body.name,
            namespace: body.namespace,
            adopt_namespace: body.adopt_namespace,
        }
    }
}

/// The body of `POST …/role-bindings`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateRoleBinding {
    /// `user` (the token's subject claim) or `group` (an entry of its groups claim).
    #[schema(pattern = "^(user|group)$")]
    pub subject_kind: String,
    pub subject: String,
    pub role: Role,
}

impl From<CreateRoleBinding> for role_bindings::CreateRoleBinding {
    fn from(body: CreateRoleBinding) -> Self {
        Self {
            subject_kind: body.subject_kind,
            subject: body.subject,
            role: body.role,
        }
    }
}

/// The body of `POST …/tokens`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateToken {
    /// 1 to 63 letters, digits, '.', '_' or '-'; unique among the live tokens.
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    pub name: String,
    /// `viewer`, `editor` or `admin` on the project: required for a project token (platform
    /// tokens are always `platform-admin` and take none).
    #[serde(default)]
    pub role: Option<Role>,
    /// When the token stops working: in the future, at most 10 years away; default 90 days from now.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

impl From<CreateToken> for tokens::CreateToken {
    fn from(body: CreateToken) -> Self {
        Self {
            name: body.name,
            role: body.role,
            expires_at: body.expires_at,
        }
    }
}

/// Filters and paging for token lists.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListTokens {
    /// Only tokens that still work: neither revoked nor expired.
    pub live: Option<bool>,
    /// Page size, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `nextCursor` from the previous page, with the same filters.
    #[param(min_length = 1)]
    pub cursor: Option<String>,
}

impl From<ListTokens> for tokens::ListTokens {
    fn from(query: ListTokens) -> Self {
        Self {
            live: query.live,
            limit: query.limit,
            cursor: query.cursor,
        }
    }
}

/// A new token and its secret. The secret is never shown again.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedToken {
    #[serde(flatten)]
    pub token: ApiToken,
    /// Use as `Authorization: Bearer <secret>`. Shown once; only its hash is stored.
    pub secret: String,
}

impl From<tokens::CreatedToken> for CreatedToken {
    fn from(created: tokens::CreatedToken) -> Self {
        Self {
            token: created.token,
            secret: created.secret,
        }
    }
}

/// The body of `POST …/keys`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateModelKey {
    /// 1 to 63 letters, digits, '.', '_' or '-'; unique among the project's live keys.
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    pub name: String,
    /// The deployments it may call, by name (1 to 100, each existing now); omit for every
    /// deployment of the project, those made later included.
    #[serde(default)]
    pub deployments: Option<Vec<String>>,
    /// Requests a minute it may send (1 to 1,000,000); omit for no limit.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000000)]
    pub requests_per_minute: Option<i32>,
    /// Model tokens (prompt and completion) a UTC day it may use; omit for no budget.
    /// Checked against its metered usage (`…/usage`), which trails by up to a minute.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub daily_token_budget: Option<i64>,
    /// Requests it may have in flight at once (1 to 100,000); omit for no limit. A request
    /// counts as in flight for the deployment's recent 95th-percentile latency (the
    /// Gateway's check sees requests start, not end).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100000)]
    pub max_concurrent: Option<i32>,
    /// When it stops working: in the future, at most 10 years away; omit for when revoked.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

impl From<CreateModelKey> for model_keys::CreateKey {
    fn from(body: CreateModelKey) -> Self {
        Self {
            name: body.name,
            deployments: body.deployments,
            requests_per_minute: body.requests_per_minute,
            daily_token_budget: body.daily_token_budget,
            max_concurrent: body.max_concurrent,
            expires_at: body.expires_at,
        }
    }
}

/// A new model key and its secret. The secret is never shown again.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedModelKey {
    #[serde(flatten)]
    pub key: ModelKey,
    /// Send as `Authorization: Bearer <secret>` (what OpenAI clients send as their API key)
    /// or as `x-api-key`. Shown once; only its hash is stored.
    pub secret: String,
}

impl From<model_keys::CreatedKey> for CreatedModelKey {
    fn from(created: model_keys::CreatedKey) -> Self {
        Self {
            key: created.key,
            secret: created.secret,
        }
    }
}

impl From<ListTokens> for model_keys::ListKeys {
    fn from(query: ListTokens) -> Self {
        Self {
            live: query.live,
            limit: query.limit,
            cursor: query.cursor,
        }
    }
}

/// One page of a list and the cursor of the next page, if there is one.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `cursor` (with the same filters) for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

impl<T> From<service::Page<T>> for Page<T> {
    fn from(page: service::Page<T>) -> Self {
        Self {
            items: page.items,
            next_cursor: page.next_cursor,
        }
    }
}
