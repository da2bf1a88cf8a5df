//! The key check as Envoy's gRPC ext_authz service (`envoy.service.auth.v3.Authorization`,
//! `Check`), for routes whose `ExternalAuth` filter says `protocol: GRPC`. Envoy sends the
//! client's request (method, host, path, headers) in a `CheckRequest`; the answer's
//! `status` lets it through (`OK`) or not, `ok_response` names the headers to add to the
//! request and to remove from it, and `denied_response` is what the client gets (Envoy's
//! `ext_authz` filter: a denial's HTTP status, headers and body go downstream).
//!
//! The route does not name the deployment here (Gateway API gives a route no way to add
//! to Envoy's request), so the check finds it from the host and path as the Gateway does.

use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use envoy_types::ext_authz::v3::pb::{
    Authorization, AuthorizationServer, CheckRequest, CheckResponse, HttpStatusCode,
};
use envoy_types::ext_authz::v3::{
    CheckResponseExt, DeniedHttpResponseBuilder, OkHttpResponseBuilder,
};

use super::{KEY_HEADER, KEY_HEADERS, KEY_ID_HEADER, PROJECT_HEADER, error_body, outcome_of};
use crate::service::key_check::{KeyCheck, Presented, Verdict};

/// The service's path prefix on the key check's listener.
pub const PATH: &str = "/envoy.service.auth.v3.Authorization/{*method}";

/// The gRPC service, to mount on the key check's router.
pub fn service(check: Arc<KeyCheck>) -> AuthorizationServer<Grpc> {
    AuthorizationServer::new(Grpc { check })
}

/// Answers `Check` from the key check.
#[derive(Debug)]
pub struct Grpc {
    check: Arc<KeyCheck>,
}

#[tonic::async_trait]
impl Authorization for Grpc {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let started = Instant::now();
        let request = request.into_inner();
        let http = request
            .attributes
            .as_ref()
            .and_then(|a| a.request.as_ref())
            .and_then(|r| r.http.as_ref());
        let Some(http) = http else {
            return Err(tonic::Status::invalid_argument(
                "the CheckRequest has no HTTP request in its attributes",
            ));
        };
        // Envoy lower-cases header names in `headers`; `header_map` (raw) when configured.
        let header = |name: &str| -> Option<String> {
            http.headers.get(name).cloned().or_else(|| {
                let map = http.header_map.as_ref()?;
                map.headers
                    .iter()
                    .find(|h| h.key.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
            })
        };
        let (authorization, api_key) = (header("authorization"), header("x-api-key"));
        let presented = Presented {
            authorization: authorization.as_deref(),
            api_key: api_key.as_deref(),
        };
        let host = if http.host.is_empty() {
            header(":authority").unwrap_or_default()
        } else {
            http.host.clone()
        };
        let verdict = self.check.check_at(presented, &host, &http.path).await;
        let (outcome, response) = answer(verdict);
        super::measured(outcome, started);
        Ok(tonic::Response::new(response))
    }
}

/// The `CheckResponse` for a verdict, and the metric's outcome.
fn answer(verdict: Result<Verdict, sqlx::Error>) -> (&'static str, CheckResponse) {
    let (status, message, retry_after) = match verdict {
        Ok(Verdict::Allowed {
            key,
            key_id,
            project,
        }) => {
            let mut ok = OkHttpResponseBuilder::new();
            for (name, value) in [
                (KEY_HEADER, key),
                (KEY_ID_HEADER, key_id.to_string()),
                (PROJECT_HEADER, project),
            ] {
                // Overwrite: a client cannot pass its own values on.
                ok.add_header(name, value, Some(OVERWRITE), false);
            }
            for name in KEY_HEADERS {
                ok.remove_header(name);
            }
            let mut response = CheckResponse::with_status(tonic::Status::ok(""));
            response.set_http_response(ok);
            return ("allowed", response);
        }
        Ok(Verdict::Refused {
            status,
            message,
            retry_after,
        }) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN),
            message,
            retry_after,
        ),
        Err(err) => {
            // Fail closed: the Gateway refuses what it cannot have checked.
            tracing::error!(error = %err, "key check: database error");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the model key cannot be checked right now; retry shortly".to_owned(),
                None,
            )
        }
    };
    let (outcome, code) = outcome_of(status);
    let mut denied = DeniedHttpResponseBuilder::new();
    denied
        .set_http_status(http_status(status))
        .add_header("content-type", "application/json", Some(OVERWRITE), false)
        .set_body(error_body(status, code, &message).to_string());
    if status == StatusCode::UNAUTHORIZED {
        denied.add_header(
            "www-authenticate",
            "Bearer realm=\"modelplane\"",
            Some(OVERWRITE),
            false,
        );
    }
    if let Some(seconds) = retry_after {
        denied.add_header("retry-after", seconds.to_string(), Some(OVERWRITE), false);
    }
    let grpc = match status {
        StatusCode::UNAUTHORIZED => tonic::Status::unauthenticated(message),
        StatusCode::TOO_MANY_REQUESTS => tonic::Status::resource_exhausted(message),
        StatusCode::SERVICE_UNAVAILABLE => tonic::Status::unavailable(message),
        _ => tonic::Status::permission_denied(message),
    };
    let mut response = CheckResponse::with_status(grpc);
    response.set_http_response(denied);
    (outcome, response)
}

const OVERWRITE: envoy_types::ext_authz::v3::pb::HeaderAppendAction =
    envoy_types::ext_authz::v3::pb::HeaderAppendAction::OverwriteIfExistsOrAdd;

fn http_status(status: StatusCode) -> HttpStatusCode {
    match status {
        StatusCode::UNAUTHORIZED => HttpStatusCode::Unauthorized,
        StatusCode::TOO_MANY_REQUESTS => HttpStatusCode::TooManyRequests,
        StatusCode::SERVICE_UNAVAILABLE => HttpStatusCode::ServiceUnavailable,
        StatusCode::NOT_FOUND => HttpStatusCode::NotFound,
        _ => HttpStatusCode::Forbidden,
    }
}
