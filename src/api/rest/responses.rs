//! Parameters and error responses that several operations share, documented once.
//!
//! Every `/api/v1` operation also gets the generic problem responses (400, 401, 403, 404,
//! 413, 415, 422, 429, 500, 503) from `CommonResponses` in `api/openapi.rs`; the types here
//! say more where an operation can say more.

use serde::Deserialize;
use utoipa::{IntoParams, IntoResponses};

use crate::api::error::Problem;

/// `/projects/{project}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ProjectPath {
    /// Project name
    pub project: String,
}

/// `/projects/{project}/deployments/{name}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct DeploymentPath {
    /// Project name
    pub project: String,
    /// Deployment name
    pub name: String,
}

/// `/projects/{project}/deployments/{name}/adapters/{adapter}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct AdapterPath {
    /// Project name
    pub project: String,
    /// Deployment name
    pub name: String,
    /// Adapter name
    pub adapter: String,
}

/// `/projects/{project}/…/{id}`: a token or a role binding of a project.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ProjectItemPath {
    /// Project name
    pub project: String,
    /// The item's id
    pub id: String,
}

/// `/…/{id}`: a platform item.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct IdPath {
    /// The item's id
    pub id: String,
}

/// `If-Match` on a change to a deployment.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IfMatchHeader {
    /// Refuse the change (412) unless the spec's ETag still matches: `*`, or a list of
    /// entity tags (`"…"` or `W/"…"`, RFC 9110 §13.1.1)
    #[param(
        rename = "If-Match",
        pattern = r#"^(\*|(W/)?"[^"]*"(\s*,\s*(W/)?"[^"]*")*)$"#
    )]
    pub if_match: Option<String>,
}

macro_rules! problem_response {
    ($($(#[$doc:meta])* $name:ident = $status:literal, $description:literal;)*) => {$(
        $(#[$doc])*
        #[derive(IntoResponses)]
        #[allow(dead_code)]
        pub enum $name {
            #[response(status = $status, description = $description, content_type = "application/problem+json")]
            Problem(Problem),
        }
    )*};
}

problem_response! {
    NoSuchProject = 404, "No such project";
    /// For callers who may only see some projects.
    NoSuchVisibleProject = 404, "No such project (or not yours)";
    NoSuchDeployment = 404, "No such project or deployment";
    NotProjectAdmin = 403, "Not a project admin";
    NotPlatformAdmin = 403, "Not a platform admin";
    BeingDeleted = 409, "The deployment is being deleted";
    /// For changes that can ask for more replicas or GPUs.
    BeingDeletedOrOverQuota = 409, "The deployment is being deleted, or the project's quota would be exceeded (`urn:modelplane:problem:quota-exceeded`, with `quota`)";
    ETagMismatch = 412, "If-Match does not match";
    InvalidField = 422, "Invalid field";
    InvalidParameter = 422, "Invalid parameter";
}
