//! A canary: a second track of a deployment that runs another spec on a slice of its
//! traffic (by weight) and on every request carrying a header, until it is promoted (its
//! spec becomes the deployment's) or aborted.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::spec::DeploymentSpec;
use super::{DeploymentName, FieldErrors};

/// Appended to a deployment's name for its canary's Kubernetes objects, and therefore
/// reserved: no deployment may be named `<anything>-canary`.
pub const CANARY_SUFFIX: &str = "-canary";
/// The LeaderWorkerSet of a deployment whose replicas span nodes, and the headless Service
/// LWS names after it ([`super::group_object_name`]).
pub const GROUP_SUFFIX: &str = "-group";
/// The header that sends a request to the canary when the user names none.
pub const DEFAULT_CANARY_HEADER: &str = "x-modelplane-canary";
/// The highest weight a canary can have: at 100 the canary would be the deployment, which
/// is what promoting is for.
pub const MAX_CANARY_WEIGHT: i32 = 99;

/// The name of a deployment's canary objects.
pub fn canary_object_name(deployment: &str) -> String {
    format!("{deployment}{CANARY_SUFFIX}")
}

/// A request header match that always reaches the canary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryHeader {
    /// A header name (a lower-case RFC 7230 token), default `x-modelplane-canary`.
    pub name: String,
    /// The exact value, default `true`.
    pub value: String,
}

impl Default for CanaryHeader {
    fn default() -> Self {
        Self {
            name: DEFAULT_CANARY_HEADER.into(),
            value: "true".into(),
        }
    }
}

impl CanaryHeader {
    /// Checks a header as the Gateway API's HTTPHeaderMatch allows it (a header name of at
    /// most 256 characters; a value of at most 4096), and lower-cases the name, since
    /// header names compare case-insensitively.
    pub fn parse(mut self, field: &str) -> Result<Self, FieldErrors> {
        let mut errors = FieldErrors::new();
        self.name = self.name.to_ascii_lowercase();
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if self.name.is_empty() || self.name.len() > 256 || !self.name.chars().all(token) {
            errors.push(
                format!("{field}.name"),
                "must be an HTTP header name: 1 to 256 letters, digits or !#$%&'*+-.^_`|~",
            );
        }
        if matches!(self.name.as_str(), "host" | "content-length" | "connection") {
            errors.push(
                format!("{field}.name"),
                format!("`{}` cannot select a canary", self.name),
            );
        }
        if self.value.is_empty()
            || self.value.len() > 4096
            || self.value.chars().any(|c| c.is_control())
        {
            errors.push(
                format!("{field}.value"),
                "must be 1 to 4096 characters without control characters",
            );
        }
        if errors.is_empty() {
            Ok(self)
        } else {
            Err(errors)
        }
    }
}

/// Checks a requested canary weight.
pub fn check_canary_weight(weight: i32, field: &str) -> Result<(), FieldErrors> {
    if (0..=MAX_CANARY_WEIGHT).contains(&weight) {
        Ok(())
    } else {
        Err(FieldErrors::single(
            field,
            format!(
                "must be between 0 and {MAX_CANARY_WEIGHT} (percent of requests); \
                 promote the canary to send it everything"
            ),
        ))
    }
}

/// The suffix of the Service through which a deployment at zero reaches the activator.
pub const ACTIVATOR_SUFFIX: &str = "-activator";

/// The name of the Service through which a project's Gateway routes reach the key check.
pub const KEY_CHECK_SERVICE: &str = "modelplane-authz";

/// Whether a deployment name is free of the suffixes of the objects made beside a
/// deployment's own (a canary's, the activator's Service, a LeaderWorkerSet's headless
/// Service): names ending in them are reserved,
/// as is the key check's Service's name.
pub fn check_not_canary_name(name: &DeploymentName) -> Result<(), FieldErrors> {
    if name.as_str() == KEY_CHECK_SERVICE {
        return Err(FieldErrors::single(
            "name",
            format!("`{KEY_CHECK_SERVICE}` is reserved for the key check's Service"),
        ));
    }
    for (suffix, what) in [
        (CANARY_SUFFIX, "canaries"),
        (ACTIVATOR_SUFFIX, "the activator's Services"),
        (
            GROUP_SUFFIX,
            "the LeaderWorkerSets (and their Services) of models that span nodes",
        ),
    ] {
        if name.as_str().ends_with(suffix) {
            return Err(FieldErrors::single(
                "name",
                format!("names ending in `{suffix}` are reserved for {what}"),
            ));
        }
    }
    Ok(())
}

/// A deployment's canary, as stored with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Canary {
    /// The canary's whole spec (validated like any deployment's).
    pub spec: DeploymentSpec,
    /// Percent of the requests without the header that go to the canary while it is ready.
    pub weight: i32,
    /// Requests with this header always go to the canary.
    pub header: CanaryHeader,
    /// The revision the canary's spec came from, when it was started from one.
    pub from_revision: Option<i64>,
    /// Promotion is under way: the deployment's spec is already the canary's; the canary
    /// carries the traffic until the stable track has rolled to it, then it is removed.
    #[serde(default)]
    pub promoting: bool,
    /// Who started it, and when.
    pub started_by: String,
    pub started_at: DateTime<Utc>,
}
