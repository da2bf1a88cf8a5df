//! GraphQL errors: the same cases as REST's problems, named in `extensions.code`, with
//! `extensions.errors: [{field, message}]` (REST's field paths) for invalid input.

use async_graphql::{Error, ErrorExtensions};

use crate::api::error::ApiError;
use crate::domain::FieldErrors;
use crate::service::ServiceError;

/// `extensions.code` of every error the API returns.
pub fn code(err: &ApiError) -> &'static str {
    match err {
        ApiError::MalformedBody(_) | ApiError::Invalid(_) => "INVALID_INPUT",
        ApiError::Unauthorized(_) => "UNAUTHENTICATED",
        ApiError::Forbidden(_) => "FORBIDDEN",
        ApiError::RateLimited(_) | ApiError::TooManyStreams(_) => "RATE_LIMITED",
        ApiError::NotFound(_) => "NOT_FOUND",
        ApiError::Conflict { .. } => "CONFLICT",
        ApiError::QuotaExceeded(_) => "QUOTA_EXCEEDED",
        ApiError::PreconditionFailed(_) => "PRECONDITION_FAILED",
        ApiError::PayloadTooLarge(_) | ApiError::UnsupportedMediaType(_) => "INVALID_INPUT",
        ApiError::BadGateway(_) => "BAD_GATEWAY",
        ApiError::Internal(_) => "INTERNAL",
    }
}

pub fn api_error(err: ApiError) -> Error {
    let code = code(&err);
    let fields = match &err {
        ApiError::Invalid(errors) => Some(errors.as_slice().to_vec()),
        ApiError::Conflict {
            field: Some(field),
            message,
        } => Some(FieldErrors::single(*field, message.clone()).into_vec()),
        ApiError::QuotaExceeded(exceeded) => {
            Some(FieldErrors::single(exceeded.field, exceeded.to_string()).into_vec())
        }
        _ => None,
    };
    let message = match &err {
        ApiError::Invalid(errors) => errors.to_string(),
        ApiError::Internal(cause) => {
            tracing::error!(error = %cause, "internal error in a GraphQL resolver");
            "internal error; quote the request id when reporting it".to_owned()
        }
        other => other.to_string(),
    };
    Error::new(message).extend_with(|_, e| {
        e.set("code", code);
        if let Some(fields) = &fields {
            let list: Vec<async_graphql::Value> = fields
                .iter()
                .map(|f| {
                    let mut entry = async_graphql::indexmap::IndexMap::new();
                    entry.insert(
                        async_graphql::Name::new("field"),
                        async_graphql::Value::from(f.field.clone()),
                    );
                    entry.insert(
                        async_graphql::Name::new("message"),
                        async_graphql::Value::from(f.message.clone()),
                    );
                    async_graphql::Value::Object(entry)
                })
                .collect();
            e.set("errors", list);
        }
        if let ApiError::QuotaExceeded(exceeded) = &err {
            e.set("quota", exceeded.quota.clone());
            e.set("limit", exceeded.limit);
            e.set("used", exceeded.used);
            e.set("requested", exceeded.requested);
        }
        if let Some(id) = crate::api::middleware::current_request_id() {
            e.set("requestId", id);
        }
    })
}

pub fn service_error(err: ServiceError) -> Error {
    api_error(err.into())
}

pub fn field_errors(errors: FieldErrors) -> Error {
    api_error(ApiError::Invalid(errors))
}
