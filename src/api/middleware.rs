//! Request ids, trace spans and HTTP metrics.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::error::{ApiError, PROBLEM_JSON, problem_response};
use super::extract::MAX_BODY_BYTES;
use super::rate_limit::RateLimiter;
pub use super::request::{REQUEST_ID, client_address, current_request_id};

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The method as a metric label: the standard ones by name, anything invented as `OTHER`,
/// so a client cannot grow the label set (unmatched routes already share one label).
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// Accepts the caller's `x-request-id` (if sane) or makes one, echoes it on the response,
/// wraps the request in a span with method, route and id, and records metrics.
pub async fn observe(request: Request, next: Next) -> Response {
    let request_id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let span = tracing::info_span!(
        "http",
        %method,
        route = %route,
        request_id = %request_id,
        actor = tracing::field::Empty,
    );
    let started = Instant::now();
    let mut response = REQUEST_ID
        .scope(
            request_id.clone(),
            next.run(request).instrument(span.clone()),
        )
        .await;
    let latency = started.elapsed();
    let status = response.status().as_u16();
    span.in_scope(|| {
        tracing::info!(
            status,
            latency_ms = latency.as_millis() as u64,
            "request finished"
        )
    });

    let labels = [
        ("method", method_label(&method).to_owned()),
        ("route", route),
        ("status", status.to_string()),
    ];
    metrics::counter!(crate::metrics::HTTP_REQUESTS, &labels).increment(1);
    metrics::histogram!(crate::metrics::HTTP_REQUEST_DURATION, &labels)
        .record(latency.as_secs_f64());

    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

/// Reads the whole request body (bounded by [`MAX_BODY_BYTES`]) before routing, so a
/// response decided before a handler looks at the body (401, 404, 405, 415) still leaves
/// the connection usable for the client's next request. A body that is too large is
/// answered 413 with `Connection: close`, since its unread rest would follow on the wire.
pub async fn read_body_first(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        let mut response = ApiError::PayloadTooLarge(MAX_BODY_BYTES).into_response();
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
        response
    };
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return too_large();
    }
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(err) => {
            let too_big = std::error::Error::source(&err)
                .is_some_and(|e| e.is::<http_body_util::LengthLimitError>());
            if too_big {
                return too_large();
            }
            return ApiError::MalformedBody(format!("could not read the request body: {err}"))
                .into_response();
        }
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

/// Gives an error response that has no body (axum's 405, the timeout's 503, …) a problem
/// document, so every error the API returns is `application/problem+json`.
pub async fn problem_for_bare_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error())
        || response
            .headers()
            .contains_key(axum::http::header::CONTENT_TYPE)
    {
        return response;
    }
    let (parts, _) = response.into_parts();
    let (slug, title, detail) = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = parts
                .headers
                .get(axum::http::header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            (
                "method-not-allowed",
                "Method not allowed",
                format!("this resource allows: {allowed}"),
            )
        }
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::REQUEST_TIMEOUT => (
            "timeout",
            "Request timed out",
            "the request took longer than the server allows; retry later".to_owned(),
        ),
        other => (
            "http-error",
            other.canonical_reason().unwrap_or("Error"),
            other.canonical_reason().unwrap_or("error").to_owned(),
        ),
    };
    let mut problem = problem_response(
        status,
        slug,
        title,
        detail,
        current_request_id(),
        Vec::new(),
    );
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_LENGTH {
            problem.headers_mut().insert(name.clone(), value.clone());
        }
    }
    problem.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static(PROBLEM_JSON),
    );
    problem
}

/// Counts requests that carry no credential against the client's address (health checks
/// excepted), so anonymous traffic cannot flood the process; see [`RateLimiter`].
pub async fn limit_anonymous(
    axum::extract::State(limiter): axum::extract::State<std::sync::Arc<RateLimiter>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    let exempt = path == "/healthz" || path == "/readyz";
    if !exempt
        && !request
            .headers()
            .contains_key(axum::http::header::AUTHORIZATION)
    {
        let client = client_address(request.extensions());
        if let Err(wait) = limiter.check(&format!("anonymous:{client}")) {
            return ApiError::RateLimited(wait).into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::method_label;

    #[test]
    fn invented_methods_share_one_metric_label() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        let labels: std::collections::HashSet<&str> = (0..1000)
            .map(|i| method_label(&Method::from_bytes(format!("X{i}").as_bytes()).unwrap()))
            .collect();
        assert_eq!(labels.into_iter().collect::<Vec<_>>(), ["OTHER"]);
    }
}
