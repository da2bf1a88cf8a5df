//! The spec of a deployment served by prefill and decode roles (`spec.disaggregation`);
//! validated in `validate.rs`, resolved in `serving.rs`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{EnvVar, ResourceSpec};

/// The two roles of a disaggregated deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DisaggregationSpec {
    /// The pods that compute the prompt's KV cache.
    pub prefill: RoleSpec,
    /// The pods that generate the tokens (and take every request first).
    pub decode: RoleSpec,
}

/// One role's pods: how many, and what differs from the rest of the spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoleSpec {
    /// The role's pods. Default 1.
    #[serde(default)]
    pub replicas: Option<i64>,
    /// The role's CPU, memory and GPU count; `spec.resources` when omitted (the GPU kind,
    /// `resourceName` and `product`, is always `spec.resources.gpu`'s).
    #[serde(default)]
    pub resources: Option<ResourceSpec>,
    /// Arguments appended to `spec.engine.args` for this role.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables added to `spec.engine.env` for this role (a name in both is
    /// the role's).
    #[serde(default)]
    pub env: Vec<EnvVar>,
}
