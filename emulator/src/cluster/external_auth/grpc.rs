//! The `ExternalAuth` filter's gRPC protocol: Envoy's ext_authz v3 `Check` (see the parent
//! module for what is sent and how answers are carried out, with their sources).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
use serde_json::Value;
use tonic::transport::{Channel, Endpoint};

use super::{Allowed, Asked, TIMEOUT, closed, names};

/// One HTTP/2 connection per auth service address, shared by every request (as Envoy keeps
/// one to each gRPC cluster host).
fn channel(address: SocketAddr) -> Channel {
    static CHANNELS: OnceLock<Mutex<HashMap<SocketAddr, Channel>>> = OnceLock::new();
    let mut channels = CHANNELS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    channels
        .entry(address)
        .or_insert_with(|| {
            Endpoint::from_shared(format!("http://{address}"))
                .expect("a valid URI")
                .connect_timeout(TIMEOUT)
                .timeout(TIMEOUT)
                .connect_lazy()
        })
        .clone()
}

/// The client's headers as Envoy puts them in `HttpRequest.headers`: names lower-cased, a
/// repeated header's values joined by `,`; only `allowed` ones when it lists any.
fn headers_of(headers: &HeaderMap, allowed: &[String]) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = HashMap::new();
    for (name, value) in headers {
        let name = name.as_str();
        if !allowed.is_empty() && !allowed.iter().any(|a| a == name) {
            continue;
        }
        let value = String::from_utf8_lossy(value.as_bytes());
        out.entry(name.to_owned())
            .and_modify(|v| {
                v.push(',');
                v.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    out
}

pub(super) async fn check(
    address: SocketAddr,
    filter: &Value,
    asked: Asked<'_>,
) -> Result<Allowed, Response> {
    let max_body = filter
        .pointer("/forwardBody/maxSize")
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize;
    let body = asked.body.slice(..asked.body.len().min(max_body));
    let allowed = names(filter, "/grpc/allowedHeaders");
    let mut headers = headers_of(asked.headers, &allowed);
    if allowed.is_empty() || allowed.iter().any(|a| a == "host") {
        headers.insert(":authority".into(), asked.host.to_owned());
    }
    let request = CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                http: Some(HttpRequest {
                    method: asked.method.as_str().to_owned(),
                    headers,
                    path: asked.path_and_query.to_owned(),
                    host: asked.host.to_owned(),
                    scheme: "http".into(),
                    protocol: "HTTP/1.1".into(),
                    size: asked.body.len() as i64,
                    raw_body: body.to_vec(),
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            ..AttributeContext::default()
        }),
    };
    let answer = match AuthorizationClient::new(channel(address))
        .check(request)
        .await
    {
        Ok(answer) => answer.into_inner(),
        Err(_) => return Err(closed("the authorization service could not be reached")),
    };
    let ok = answer.status.as_ref().is_some_and(|s| s.code == 0);
    match (ok, answer.http_response) {
        (true, Some(HttpResponse::OkResponse(response))) => Ok(allowed_by(&response)),
        (true, _) => Ok(Allowed::default()),
        (false, Some(HttpResponse::DeniedResponse(denied))) => {
            let status = denied
                .status
                .and_then(|s| u16::try_from(s.code).ok())
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::FORBIDDEN);
            let mut response = Response::builder().status(status);
            for option in denied.headers {
                if let Some(h) = option.header
                    && let Some((name, value)) = header(&h.key, &h.value, &h.raw_value)
                {
                    response = response.header(name, value);
                }
            }
            Err(response
                .body(Body::from(denied.body))
                .expect("a valid response"))
        }
        (false, _) => Err(Response::builder()
            .status(StatusCode::FORBIDDEN)
            .body(Body::empty())
            .expect("a valid response")),
    }
}

fn header(key: &str, value: &str, raw: &[u8]) -> Option<(HeaderName, HeaderValue)> {
    let name = HeaderName::from_bytes(key.to_ascii_lowercase().as_bytes()).ok()?;
    let value = if raw.is_empty() {
        HeaderValue::from_str(value).ok()?
    } else {
        HeaderValue::from_bytes(raw).ok()?
    };
    Some((name, value))
}

/// What an `OkHttpResponse` does to the request to the backend.
fn allowed_by(response: &envoy_types::pb::envoy::service::auth::v3::OkHttpResponse) -> Allowed {
    let mut allowed = Allowed::default();
    for option in &response.headers {
        let Some(h) = &option.header else { continue };
        let Some(pair) = header(&h.key, &h.value, &h.raw_value) else {
            continue;
        };
        if pair.0 == axum::http::header::HOST {
            continue;
        }
        match HeaderAppendAction::try_from(option.append_action) {
            Ok(HeaderAppendAction::OverwriteIfExistsOrAdd) => allowed.set.push(pair),
            Ok(HeaderAppendAction::AddIfAbsent) => allowed.if_absent.push(pair),
            Ok(HeaderAppendAction::OverwriteIfExists) => allowed.if_present.push(pair),
            _ => allowed.append.push(pair),
        }
    }
    allowed.remove = response
        .headers_to_remove
        .iter()
        .map(|n| n.to_ascii_lowercase())
        .filter(|n| n != "host" && !n.starts_with(':'))
        .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
        .collect();
    allowed
}
