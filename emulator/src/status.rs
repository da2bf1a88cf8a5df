//! API errors rendered as `metav1.Status`, with the codes, reasons and details of the real server.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::resources::ResourceKind;

/// One `details.causes` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

impl Cause {
    pub fn new(reason: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Cause {
            reason: reason.into(),
            message: message.into(),
            field: field.into(),
        }
    }
    /// `FieldValueRequired`: "Required value".
    pub fn required(field: impl Into<String>) -> Self {
        Cause::new("FieldValueRequired", field, "Required value")
    }
    /// `FieldValueInvalid` with the Go-style rendering of the value.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        let msg = format!("Invalid value: {}: {}", go_repr(value), detail);
        Cause::new("FieldValueInvalid", field, msg)
    }
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Cause::new(
            "FieldValueDuplicate",
            field,
            format!("Duplicate value: {}", go_repr(value)),
        )
    }
    pub fn not_supported(field: impl Into<String>, value: &Value, allowed: &[&str]) -> Self {
        let list = allowed
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        Cause::new(
            "FieldValueNotSupported",
            field,
            format!(
                "Unsupported value: {}: supported values: {list}",
                go_repr(value)
            ),
        )
    }
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Cause::new("FieldValueForbidden", field, format!("Forbidden: {detail}"))
    }

    fn to_json(&self) -> Value {
        json!({"reason": self.reason, "message": self.message, "field": self.field})
    }

    /// `field: message`, as the server joins causes into the Status message.
    fn summary(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// How the Go API server prints a value inside a validation message.
fn go_repr(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// An API error; rendered as a `metav1.Status` body with the matching HTTP code.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

pub type ApiResult<T> = Result<T, ApiError>;

/// `metav1.StatusDetails`: its `name`, `group` and `kind` are `omitempty`, so the core
/// group and an empty name are left out.
fn details_of(group: &str, kind: &str, name: &str) -> Value {
    let mut d = serde_json::Map::new();
    for (k, v) in [("name", name), ("group", group), ("kind", kind)] {
        if !v.is_empty() {
            d.insert(k.into(), json!(v));
        }
    }
    Value::Object(d)
}

/// Details naming the resource (`configmaps`: NotFound, AlreadyExists, Conflict,
/// Forbidden) or the Kind (`ConfigMap`: Invalid, failed delete preconditions).
fn details(kind: &ResourceKind, name: &str, use_kind: bool) -> Value {
    details_of(
        kind.group,
        if use_kind { kind.kind } else { kind.plural },
        name,
    )
}

/// Joins causes into the Status message as `errs.ToAggregate()` prints them.
fn aggregate(causes: &[Cause]) -> String {
    if causes.len() == 1 {
        causes[0].summary()
    } else {
        format!(
            "[{}]",
            causes
                .iter()
                .map(Cause::summary)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn not_found(kind: &ResourceKind, name: &str) -> Self {
        ApiError {
            details: Some(details(kind, name, false)),
            ..Self::new(
                404,
                "NotFound",
                format!("{} {name:?} not found", kind.qualified_resource()),
            )
        }
    }

    /// 404 on a group and resource given as strings (e.g. `deployments/scale` in `apps`).
    pub fn not_found_resource(group: &str, resource: &str, name: &str) -> Self {
        let qualified = if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        };
        ApiError {
            details: Some(details_of(group, resource, name)),
            ..Self::new(404, "NotFound", format!("{qualified} {name:?} not found"))
        }
    }

    /// 404 for a namespace that does not exist.
    pub fn namespace_not_found(ns: &str) -> Self {
        ApiError {
            details: Some(details_of("", "namespaces", ns)),
            ..Self::new(404, "NotFound", format!("namespaces {ns:?} not found"))
        }
    }

    /// 404 for a URL that names no served resource.
    pub fn page_not_found() -> Self {
        ApiError {
            details: Some(json!({})),
            ..Self::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
    }

    pub fn already_exists(kind: &ResourceKind, name: &str) -> Self {
        ApiError {
            details: Some(details(kind, name, false)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} {name:?} already exists", kind.qualified_resource()),
            )
        }
    }

    /// Optimistic-concurrency conflict (stale resourceVersion).
    pub fn conflict(kind: &ResourceKind, name: &str, detail: &str) -> Self {
        ApiError {
            details: Some(details(kind, name, false)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} {name:?}: {detail}",
                    kind.qualified_resource()
                ),
            )
        }
    }

    pub fn stale(kind: &ResourceKind, name: &str) -> Self {
        Self::conflict(
            kind,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with one cause per offending field.
    pub fn invalid(kind: &ResourceKind, name: &str, causes: Vec<Cause>) -> Self {
        Self::invalid_kind(kind.group, kind.kind, name, causes)
    }

    /// 422 Invalid for any group and Kind (`errors.NewInvalid`): e.g. `Scale` in
    /// `autoscaling`, or `CreateOptions` in `meta.k8s.io` for bad query options.
    pub fn invalid_kind(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut d = details_of(group, kind, name);
        d["causes"] = Value::Array(causes.iter().map(Cause::to_json).collect());
        ApiError {
            details: Some(d),
            ..Self::new(
                422,
                "Invalid",
                format!("{qualified} {name:?} is invalid: {}", aggregate(&causes)),
            )
        }
    }

    /// A request option that fails validation (`metav1.CreateOptions`, `UpdateOptions`,
    /// `PatchOptions`, `DeleteOptions`): handlers answer `errors.NewInvalid` on the
    /// options kind in group `meta.k8s.io`, with the option as the field.
    pub fn invalid_options(options_kind: &str, causes: Vec<Cause>) -> Self {
        Self::invalid_kind("meta.k8s.io", options_kind, "", causes)
    }

    /// A failed delete precondition: `rest.BeforeDelete` answers `errors.NewConflict` with
    /// the Kind (not the resource) as the qualified resource.
    pub fn precondition_failed(kind: &ResourceKind, name: &str, detail: &str) -> Self {
        let qualified = if kind.group.is_empty() {
            kind.kind.to_string()
        } else {
            format!("{}.{}", kind.kind, kind.group)
        };
        ApiError {
            details: Some(details(kind, name, true)),
            ..Self::new(
                409,
                "Conflict",
                format!("Operation cannot be fulfilled on {qualified} {name:?}: {detail}"),
            )
        }
    }

    /// 422 from a JSON patch that cannot be applied: the handler answers
    /// `errors.NewGenericServerResponse(422, ...)`, whose message is the generic one and
    /// whose details are empty.
    pub fn patch_not_applicable() -> Self {
        ApiError {
            details: Some(json!({})),
            ..Self::new(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            )
        }
    }

    /// Server-side apply conflicts: one `FieldManagerConflict` cause per field.
    pub fn apply_conflict(
        kind: &ResourceKind,
        name: &str,
        conflicts: &[(String, String, String)],
    ) -> Self {
        // conflicts: (manager, apiVersion, field path)
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|(m, av, f)| {
                json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m:?} using {av}"), "field": f})
            })
            .collect();
        let message = if conflicts.len() == 1 {
            let (m, av, f) = &conflicts[0];
            format!("Apply failed with 1 conflict: conflict with {m:?} using {av}: {f}")
        } else {
            let lines: Vec<String> = conflicts
                .iter()
                .map(|(m, av, f)| format!("conflict with {m:?} using {av}: {f}"))
                .collect();
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        };
        // errors.NewApplyConflict: the details carry only the causes.
        let _ = (kind, name);
        ApiError {
            details: Some(json!({"causes": causes})),
            ..Self::new(409, "Conflict", message)
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed() -> Self {
        ApiError {
            details: Some(json!({})),
            ..Self::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        }
    }

    /// `negotiation.NewUnsupportedMediaTypeError`: the media types the endpoint accepts, no details.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// A PATCH whose Content-Type the route does not consume: go-restful refuses it
    /// before the handler runs ("415: Unsupported Media Type"), and the apiserver's
    /// `serviceErrorHandler` wraps that in `NewGenericServerResponse` (empty details).
    pub fn route_unsupported_media_type() -> Self {
        ApiError {
            details: Some(json!({})),
            ..Self::new(415, "UnsupportedMediaType", "415: Unsupported Media Type")
        }
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn forbidden(kind: &ResourceKind, name: &str, detail: &str) -> Self {
        ApiError {
            details: Some(details(kind, name, false)),
            ..Self::new(
                403,
                "Forbidden",
                format!(
                    "{} {name:?} is forbidden: {detail}",
                    kind.qualified_resource()
                ),
            )
        }
    }

    /// A watch or read from a resourceVersion the store has not reached, after waiting for it
    /// (apiserver `storage.NewTooLargeResourceVersionError`: a 504 Timeout with the cause
    /// `ResourceVersionTooLarge` and a retry after 1 s).
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        ApiError {
            details: Some(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1,
            })),
            ..Self::new(
                504,
                "Timeout",
                format!("Too large resource version: {requested}, current: {current}"),
            )
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `metav1.Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        (
            code,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}

/// The success Status returned by some deletes.
pub fn success_status(kind: &ResourceKind, name: &str, uid: &str) -> Value {
    let mut d = details(kind, name, false);
    if !uid.is_empty() {
        d["uid"] = json!(uid);
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": d,
    })
}
