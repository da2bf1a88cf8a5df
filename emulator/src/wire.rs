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
use crate::status::{ApiError, ApiResult};

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

pub(crate) fn write_options(
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> ApiResult<WriteOptions> {
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown");
    // The real server derives the default manager from the User-Agent up to the first '/'.
    let default_manager = ua.split('/').next().unwrap_or("unknown").to_string();
    let dry_run = match query.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid dryRun value: {other:?}; supported values: \"All\""
            )));
        }
    };
    let field_validation = match query.get("fieldValidation").map(String::as_str) {
        None | Some("") | Some("Warn") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation: Invalid value: {other:?}: fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\""
            )));
        }
    };
    let force = match query.get("force").map(String::as_str) {
        None => None,
        Some("true") | Some("1") => Some(true),
        Some(_) => Some(false),
    };
    if let Some(m) = query.get("fieldManager")
        && m.len() > 128
    {
        return Err(ApiError::bad_request(
            "fieldManager: Too long: must have at most 128 bytes",
        ));
    }
    Ok(WriteOptions {
        dry_run,
        field_manager: query.get("fieldManager").cloned(),
        default_manager,
        field_validation,
        force,
    })
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
