//! The API's one error type, rendered as `application/problem+json` (RFC 9457).
//!
//! Internal errors are logged here, once, with their cause; the client only sees an
//! opaque 500 carrying the request id to quote when reporting it.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::{FieldError, FieldErrors};
use crate::service::ServiceError;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem document.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// A URN naming the kind of problem, e.g. `urn:modelplane:problem:invalid-input`.
    #[serde(rename = "type")]
    pub type_: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// The request id (also in the `x-request-id` header), to quote when reporting a problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// One entry per invalid field, for 400/422 responses (and the field asking for more,
    /// for a quota refusal).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// For `quota-exceeded`: the quota, its limit, what was in use and what the change asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaProblem>,
}

/// The numbers of a quota refusal.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaProblem {
    /// `replicas`, or a GPU resource name with its product in parentheses.
    pub name: String,
    pub limit: i64,
    pub used: i64,
    pub requested: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON at all.
    #[error("{0}")]
    MalformedBody(String),
    #[error("invalid input")]
    Invalid(FieldErrors),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("too many requests; retry in {} s", .0.as_secs().max(1))]
    RateLimited(std::time::Duration),
    /// Too many open watches or subscriptions for the caller or its address.
    #[error("{0}")]
    TooManyStreams(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{message}")]
    Conflict {
        message: String,
        field: Option<&'static str>,
    },
    #[error("{0}")]
    QuotaExceeded(crate::domain::QuotaExceeded),
    #[error("{0}")]
    PreconditionFailed(String),
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A server modelplane forwarded to failed (the model server behind "try it").
    #[error("{0}")]
    BadGateway(String),
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::Invalid(errors) => Self::Invalid(errors),
            ServiceError::NotFound { .. } => Self::NotFound(err.to_string()),
            ServiceError::Forbidden(message) => Self::Forbidden(message),
            ServiceError::Conflict { message, field } => Self::Conflict { message, field },
            ServiceError::PreconditionFailed(message) => Self::PreconditionFailed(message),
            ServiceError::QuotaExceeded(exceeded) => Self::QuotaExceeded(exceeded),
            ServiceError::IdempotencyKeyReused(_) => {
                Self::Invalid(FieldErrors::single("Idempotency-Key", err.to_string()))
            }
            ServiceError::ModelUnreachable { message } => Self::BadGateway(message),
            ServiceError::TooManyStreams(message) => Self::TooManyStreams(message),
            ServiceError::Database(db) => Self::Internal(Box::new(db)),
        }
    }
}

impl From<FieldErrors> for ApiError {
    fn from(errors: FieldErrors) -> Self {
        Self::Invalid(errors)
    }
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Self::MalformedBody(_) => (
                StatusCode::BAD_REQUEST,
                "malformed-body",
                "Malformed request body",
            ),
            Self::Invalid(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-input",
                "Invalid input",
            ),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden", "Forbidden"),
            Self::RateLimited(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate-limited",
                "Too many requests",
            ),
            Self::TooManyStreams(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                "too-many-streams",
                "Too many open streams",
            ),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not-found", "Not found"),
            Self::Conflict { .. } => (StatusCode::CONFLICT, "conflict", "Conflict"),
            Self::QuotaExceeded(_) => (StatusCode::CONFLICT, "quota-exceeded", "Quota exceeded"),
            Self::PreconditionFailed(_) => (
                StatusCode::PRECONDITION_FAILED,
                "precondition-failed",
                "Precondition failed",
            ),
            Self::PayloadTooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Payload too large",
            ),
            Self::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Unsupported media type",
            ),
            Self::BadGateway(_) => (
                StatusCode::BAD_GATEWAY,
                "bad-gateway",
                "The model server did not answer",
            ),
            Self::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal server error",
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, slug, title) = self.parts();
        let request_id = super::request::current_request_id();
        let extra_header = match &self {
            Self::Unauthorized(_) => Some((header::WWW_AUTHENTICATE, "Bearer".to_owned())),
            Self::RateLimited(wait) => Some((
                header::RETRY_AFTER,
                // Whole seconds, rounded up: never tell a client to retry too early.
                (wait.as_millis().div_ceil(1000).max(1)).to_string(),
            )),
            _ => None,
        };
        let mut quota = None;
        let (detail, errors) = match self {
            Self::Invalid(errors) => {
                let detail = if errors.as_slice().len() == 1 {
                    let e = &errors.as_slice()[0];
                    if e.field.is_empty() {
                        e.message.clone()
                    } else {
                        format!("{}: {}", e.field, e.message)
                    }
                } else {
                    format!("{} fields are invalid", errors.as_slice().len())
                };
                (detail, errors.into_vec())
            }
            Self::Conflict { message, field } => {
                let errors = field
                    .map(|f| {
                        vec![FieldError {
                            field: f.to_owned(),
                            message: message.clone(),
                        }]
                    })
                    .unwrap_or_default();
                (message, errors)
            }
            Self::QuotaExceeded(exceeded) => {
                let message = exceeded.to_string();
                let errors = vec![FieldError {
                    field: exceeded.field.to_owned(),
                    message: message.clone(),
                }];
                quota = Some(QuotaProblem {
                    name: exceeded.quota,
                    limit: exceeded.limit,
                    used: exceeded.used,
                    requested: exceeded.requested,
                });
                (message, errors)
            }
            Self::Internal(source) => {
                tracing::error!(error = %source, error.debug = ?source, request_id = request_id.as_deref(), "internal error");
                (
                    "An internal error occurred; quote the request id when reporting it.".into(),
                    Vec::new(),
                )
            }
            other => (other.to_string(), Vec::new()),
        };
        let mut response = send_problem(Problem {
            type_: format!("urn:modelplane:problem:{slug}"),
            title: title.to_owned(),
            status: status.as_u16(),
            detail,
            request_id,
            errors,
            quota,
        });
        if let Some((name, value)) = extra_header {
            response.headers_mut().insert(
                name,
                HeaderValue::from_str(&value).expect("a valid header value"),
            );
        }
        response
    }
}

pub fn problem_response(
    status: StatusCode,
    slug: &str,
    title: &str,
    detail: String,
    request_id: Option<String>,
    errors: Vec<FieldError>,
) -> Response {
    send_problem(Problem {
        type_: format!("urn:modelplane:problem:{slug}"),
        title: title.to_owned(),
        status: status.as_u16(),
        detail,
        request_id,
        errors,
        quota: None,
    })
}

fn send_problem(problem: Problem) -> Response {
    let status = StatusCode::from_u16(problem.status).expect("a problem carries a valid status");
    let mut response = (status, axum::Json(problem)).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    response
}
