//! Request ids, trace spans and HTTP metrics.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

pub const REQUEST_ID_HEADER: &str = "x-request-id";

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request being handled, if called while handling one.
pub fn current_request_id() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
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
        ("method", method.to_string()),
        ("route", route),
        ("status", status.to_string()),
    ];
    metrics::counter!("modelplane_http_requests_total", &labels).increment(1);
    metrics::histogram!("modelplane_http_request_duration_seconds", &labels)
        .record(latency.as_secs_f64());

    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}
