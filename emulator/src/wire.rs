//! The wire format shared by every handler: JSON responses (with `Warning` headers),
//! request bodies (JSON, or the protobuf envelope kubectl sends) and the write options a
//! request carries in its query and `User-Agent`.
//!
//! It sits below `http`, `subresources` and `watch` so that they all use it without
//! importing one another.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::ops::{FieldValidation, WriteOptions};
use crate::status::{ApiError, ApiResult, Cause};

pub(crate) fn json_response(code: StatusCode, body: &Value, warnings: &[String]) -> Response {
    let mut resp = (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(body).unwrap_or_default(),
    )
        .into_response();
    for w in warnings {
        if let Ok(v) = HeaderValue::from_str(&format!("299 - {w:?}")) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

/// The options of a write from its query, validated like `ValidateCreateOptions`,
/// `ValidateUpdateOptions` and `ValidatePatchOptions` (apimachinery
/// `pkg/apis/meta/v1/validation/validation.go`): a bad value is a 422 Invalid on
/// `options_kind` (`CreateOptions`, `UpdateOptions`, `PatchOptions`) in `meta.k8s.io`.
pub(crate) fn write_options(
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    options_kind: &str,
) -> ApiResult<WriteOptions> {
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown");
    // The real server derives the default manager from the User-Agent up to the first '/'.
    let default_manager = ua.split('/').next().unwrap_or("unknown").to_string();
    let mut causes = Vec::new();
    if let Some(m) = query.get("fieldManager") {
        causes.extend(field_manager_errors(m, "fieldManager"));
    }
    let dry_run = dry_run(query, &mut causes);
    let field_validation = match query.get("fieldValidation").map(String::as_str) {
        None | Some("") | Some("Warn") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        Some(other) => {
            causes.push(Cause::not_supported(
                "fieldValidation",
                &Value::String(other.into()),
                &["", "Ignore", "Strict", "Warn"],
            ));
            FieldValidation::Warn
        }
    };
    if !causes.is_empty() {
        return Err(ApiError::invalid_options(options_kind, causes));
    }
    let force = match query.get("force").map(String::as_str) {
        None => None,
        Some("true") | Some("1") => Some(true),
        Some(_) => Some(false),
    };
    Ok(WriteOptions {
        dry_run,
        field_manager: query.get("fieldManager").cloned(),
        default_manager,
        field_validation,
        force,
        internal: false,
    })
}

/// `ValidateFieldManager`: at most 128 bytes, printable characters only.
pub(crate) fn field_manager_errors(m: &str, field: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    if m.len() > 128 {
        out.push(Cause::new(
            "FieldValueTooLong",
            field,
            "Too long: may not be more than 128 bytes",
        ));
    }
    for (i, c) in m.char_indices() {
        if c.is_control() {
            out.push(Cause::invalid(
                field,
                &Value::String(m.into()),
                &format!("invalid character U+{:04X} (at position {i})", c as u32),
            ));
        }
    }
    out
}

/// `ValidateDryRun`: only `All` (the value is a list, printed as Go's `[]string{...}`).
pub(crate) fn dry_run(query: &HashMap<String, String>, causes: &mut Vec<Cause>) -> bool {
    match query.get("dryRun").map(String::as_str) {
        None => false,
        Some("All") => true,
        Some(other) => {
            causes.push(Cause::new(
                "FieldValueNotSupported",
                "dryRun",
                format!("Unsupported value: []string{{{other:?}}}: supported values: \"All\""),
            ));
            false
        }
    }
}

pub(crate) fn parse_body(body: &Bytes) -> ApiResult<Value> {
    // Kubernetes protobuf envelopes start with "k8s\0" (kubectl's imperative create commands).
    if body.starts_with(b"k8s\0") {
        return crate::protobuf::decode(body).map_err(|what| {
            ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the emulator cannot decode protobuf for {what}; send JSON instead"),
            )
        });
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding body: {e}")))
}
