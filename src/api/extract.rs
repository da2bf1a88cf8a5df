//! Request extractors that turn every bad input into a problem response naming the field.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::domain::{FieldErrors, from_json_value, parse_json_strict};
use crate::service::Precondition;

/// Largest request body accepted, in bytes.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The client's address (`unknown` when not served over TCP), for per-address caps.
#[derive(Debug, Clone)]
pub struct ClientAddress(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(super::request::client_address(&parts.extensions)))
    }
}

/// A JSON body (`application/json`) deserialised into `T`; unknown fields are refused.
pub struct JsonBody<T>(pub T);

/// A JSON merge patch body (`application/merge-patch+json`).
pub struct MergePatch(pub serde_json::Value);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let value = read_json(req, state, "application/json").await?;
        Ok(Self(from_json_value(value)?))
    }
}

impl<S: Send + Sync> FromRequest<S> for MergePatch {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            read_json(req, state, "application/merge-patch+json").await?,
        ))
    }
}

async fn read_json<S: Send + Sync>(
    req: Request,
    state: &S,
    media_type: &str,
) -> Result<serde_json::Value, ApiError> {
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case(media_type) {
        let got = if essence.is_empty() { "none" } else { essence };
        return Err(ApiError::UnsupportedMediaType(format!(
            "expected Content-Type `{media_type}`, got `{got}`"
        )));
    }
    let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(MAX_BODY_BYTES)
        } else {
            ApiError::MalformedBody(format!("could not read the request body: {rejection}"))
        }
    })?;
    parse_json_strict(&bytes)
        .map_err(|err| ApiError::MalformedBody(format!("the body is not valid JSON: {err}")))
}

/// Query parameters deserialised into `T`; a bad or unknown parameter is a 422 naming it.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(Query)
            .map_err(|err| {
                let path = err.path().to_string();
                let message = err.into_inner().to_string();
                let field = if path == "." {
                    "query".to_owned()
                } else {
                    path
                };
                ApiError::Invalid(FieldErrors::single(field, message))
            })
    }
}

/// The `If-Match` header as a [`Precondition`] (none when the header is absent).
pub struct IfMatch(pub Precondition);

/// The `Idempotency-Key` header, if any (1 to 255 visible ASCII characters).
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IfMatch {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let Some(value) = header_string(parts, "if-match", "If-Match")? else {
            return Ok(Self(Precondition::None));
        };
        if !is_if_match(&value) {
            return Err(FieldErrors::single(
                "If-Match",
                "must be `*` or a comma-separated list of entity tags such as `\"…\"` (RFC 9110)",
            )
            .into());
        }
        if value == "*" {
            return Ok(Self(Precondition::Exists));
        }
        let tags = value
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        Ok(Self(Precondition::OneOf(tags)))
    }
}

/// `If-Match = "*" / #entity-tag` (RFC 9110 §13.1.1), with `entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE`.
fn is_if_match(value: &str) -> bool {
    if value == "*" {
        return true;
    }
    let mut any = false;
    for tag in value.split(',').map(str::trim) {
        if tag.is_empty() {
            continue; // the list syntax allows empty elements
        }
        let opaque = tag.strip_prefix("W/").unwrap_or(tag);
        let quoted = opaque.len() >= 2 && opaque.starts_with('"') && opaque.ends_with('"');
        let etagc = |b: u8| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80;
        if !quoted || !opaque[1..opaque.len() - 1].bytes().all(etagc) {
            return false;
        }
        any = true;
    }
    any
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let key = header_string(parts, "idempotency-key", "Idempotency-Key")?;
        if let Some(k) = &key
            && (k.is_empty() || k.len() > 255 || !k.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(FieldErrors::single(
                "Idempotency-Key",
                "must be 1 to 255 visible ASCII characters",
            )
            .into());
        }
        Ok(Self(key))
    }
}

fn header_string(parts: &Parts, name: &str, display: &str) -> Result<Option<String>, ApiError> {
    match parts.headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(|s| Some(s.trim().to_owned()))
            .map_err(|_| FieldErrors::single(display, "must be visible ASCII characters").into()),
    }
}
