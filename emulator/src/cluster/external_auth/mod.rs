//! The HTTPRoute `ExternalAuth` filter, HTTP protocol (Gateway API GEP-1494; the
//! experimental channel's `HTTPRouteRulesFiltersExternalAuth`, feature
//! `HTTPRouteExternalAuthHTTP`), as an Envoy-based Gateway carries it out with Envoy's
//! HTTP ext_authz filter:
//!
//! - The auth request goes to the filter's `backendRef` (a Service; here, one without a
//!   selector, whose EndpointSlices name a real address) with the client's method, and the
//!   path `http.path` followed by the client's path and query ("Path sets the prefix that
//!   paths from the client request will have added when forwarded to the authorization
//!   server").
//! - Its headers: `Host` and `Authorization` always (the filter's `http.allowedHeaders`
//!   description lists Host, Method, Path, Content-Length and Authorization as always sent),
//!   plus each header of `http.allowedHeaders`; `Content-Length` is the length of the body
//!   sent, which is the client's body up to `forwardBody.maxSize` bytes, and none when that
//!   is unset or 0 ("If unset, or `forwardBody.maxSize` is set to `0`, then the body will not
//!   be forwarded"; a larger body is truncated to it).
//! - A 200 lets the request through: the auth response's headers are copied into the
//!   request to the backend, only those of `http.allowedResponseHeaders` when it lists any,
//!   else all of them but Host (its description), and not the ones that describe the auth
//!   response's own body and connection (a proxy never forwards them). The headers the
//!   auth response names in `x-envoy-auth-headers-to-remove` (comma-separated; Envoy's
//!   `OkHttpResponse.headers_to_remove`, in `envoy/service/auth/v3/external_auth.proto`:
//!   "When using the HTTP service this must instead be set by the HTTP authorization service
//!   as a comma separated list") are removed from it, Host excepted.
//! - Any other status is a denial ("Any other code is considered an authorization
//!   failure"): the client gets the auth response's status, headers and body, as Envoy's
//!   HTTP ext_authz sends them downstream.
//! - A failure to reach the auth service fails closed ("If there is any problem
//!   communicating with the external service, this filter MUST fail closed"): 403, Envoy's
//!   default `status_on_error`.
//!
//! The gRPC protocol (`HTTPRouteExternalAuthGRPC`), as Envoy's gRPC ext_authz carries it
//! out (`envoy/service/auth/v3/external_auth.proto`, `attribute_context.proto`):
//!
//! - One `Authorization/Check` call per request, over HTTP/2 to the `backendRef`, whose
//!   `CheckRequest.attributes.request.http` holds the client's method, `Host` (as `host`),
//!   path with its query (`path`, "The request target, as it appears in the first line of
//!   the HTTP request"), scheme, body size and headers, lower-cased, values of a repeated
//!   header joined by `,`. Which headers: "If this list is empty, then all headers must be
//!   sent. If the list has entries, only those entries must be sent" (`grpc.allowedHeaders`).
//!   The body as with HTTP (`forwardBody.maxSize`).
//! - `status.code` 0 (OK) lets the request through with `ok_response`'s `headers` (set,
//!   appended or added as their `append_action` says) and `headers_to_remove` (never Host).
//! - Any other code is a denial: the client gets `denied_response`'s status (403 when it
//!   names none, the proto's "If not set, Envoy will send a 403 Forbidden"), headers and body.
//! - A call that fails (no endpoint, refused, timed out, a gRPC error) fails closed: 403.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::Value;

mod grpc;

/// What the auth service allowed: headers to set on the request to the backend, and
/// headers to remove from it.
#[derive(Debug, Default)]
pub(crate) struct Allowed {
    /// Set, replacing any value.
    pub(crate) set: Vec<(HeaderName, HeaderValue)>,
    /// Added beside any value (gRPC's `APPEND_IF_EXISTS_OR_ADD`).
    pub(crate) append: Vec<(HeaderName, HeaderValue)>,
    /// Set only where absent (`ADD_IF_ABSENT`).
    pub(crate) if_absent: Vec<(HeaderName, HeaderValue)>,
    /// Replaced only where present (`OVERWRITE_IF_EXISTS`).
    pub(crate) if_present: Vec<(HeaderName, HeaderValue)>,
    pub(crate) remove: Vec<HeaderName>,
}

impl Allowed {
    /// The client's headers as the backend gets them.
    pub(crate) fn apply(&self, headers: &mut HeaderMap) {
        for name in &self.remove {
            headers.remove(name);
        }
        for (name, value) in &self.set {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in &self.append {
            headers.append(name.clone(), value.clone());
        }
        for (name, value) in &self.if_absent {
            if !headers.contains_key(name) {
                headers.insert(name.clone(), value.clone());
            }
        }
        for (name, value) in &self.if_present {
            if headers.contains_key(name) {
                headers.insert(name.clone(), value.clone());
            }
        }
    }
}

/// Headers of the auth response that describe it, not the request it allows: the ones no
/// proxy passes on, and Host (never copied, as the filter's fields say).
fn own(name: &str) -> bool {
    name == "host" || super::external::HOP_BY_HOP.contains(&name)
}

/// Envoy's: request headers the HTTP auth service asks to remove.
const REMOVE: &str = "x-envoy-auth-headers-to-remove";

/// How long the auth service has to answer (the GEP names no bound; Envoy's `timeout`
/// is per filter: generous here, since a slow answer is a denial anyway).
const TIMEOUT: Duration = Duration::from_secs(10);

/// The request as the client sent it.
pub(crate) struct Asked<'a> {
    pub(crate) method: &'a Method,
    pub(crate) path_and_query: &'a str,
    pub(crate) host: &'a str,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: &'a Bytes,
}

fn closed(why: &str) -> Response {
    Response::builder()
        .status(StatusCode::FORBIDDEN)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(format!(
            "external authorization failed: {why}\n"
        )))
        .expect("a valid response")
}

/// The names a list field of the filter holds, lower-cased.
fn names(filter: &Value, pointer: &str) -> Vec<String> {
    filter
        .pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_ascii_lowercase)
        .collect()
}

/// Asks the auth service at `address` about `asked`, as `filter` (the rule's
/// `externalAuth`) says; `Err` is the answer the client gets instead of the backend's.
pub(crate) async fn check(
    client: &reqwest::Client,
    address: Option<SocketAddr>,
    filter: &Value,
    asked: Asked<'_>,
) -> Result<Allowed, Response> {
    let Some(address) = address else {
        return Err(closed("the authorization service has no ready endpoint"));
    };
    match filter.get("protocol").and_then(Value::as_str) {
        Some("HTTP") => {}
        Some("GRPC") => return grpc::check(address, filter, asked).await,
        _ => {
            return Err(Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from(
                    "the ExternalAuth filter's protocol is not one this Gateway knows\n",
                ))
                .expect("a valid response"));
        }
    }
    let prefix = filter
        .pointer("/http/path")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim_end_matches('/');
    let max_body = filter
        .pointer("/forwardBody/maxSize")
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize;
    let body = asked.body.slice(..asked.body.len().min(max_body));
    let mut request = client
        .request(
            asked.method.clone(),
            format!("http://{address}{prefix}{}", asked.path_and_query),
        )
        .timeout(TIMEOUT)
        .header(header::HOST, asked.host)
        .header(header::CONTENT_LENGTH, body.len())
        .body(body);
    let allowed_headers = names(filter, "/http/allowedHeaders");
    for (name, value) in asked.headers {
        if name == header::AUTHORIZATION || allowed_headers.iter().any(|a| a == name.as_str()) {
            request = request.header(name, value);
        }
    }
    let answer = match request.send().await {
        Ok(answer) => answer,
        Err(_) => return Err(closed("the authorization service could not be reached")),
    };
    if answer.status() != StatusCode::OK {
        let mut denied = Response::builder().status(answer.status());
        for (name, value) in answer.headers() {
            if !own(name.as_str()) {
                denied = denied.header(name, value);
            }
        }
        let body = answer.bytes().await.unwrap_or_default();
        return Err(denied.body(Body::from(body)).expect("a valid response"));
    }
    Ok(allowed(filter, answer.headers()))
}

/// What a 200's `headers` do to the request to the backend, as `filter` says.
fn allowed(filter: &Value, headers: &HeaderMap) -> Allowed {
    let allowed_response = names(filter, "/http/allowedResponseHeaders");
    let mut allowed = Allowed::default();
    for (name, value) in headers {
        let name_str = name.as_str();
        if name_str == REMOVE {
            allowed.remove.extend(
                value
                    .to_str()
                    .unwrap_or("")
                    .split(',')
                    .map(|n| n.trim().to_ascii_lowercase())
                    .filter(|n| !n.is_empty() && n != "host")
                    .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok()),
            );
            continue;
        }
        let copied = if allowed_response.is_empty() {
            !own(name_str)
        } else {
            allowed_response.iter().any(|a| a == name_str)
        };
        if copied {
            allowed.set.push((name.clone(), value.clone()));
        }
    }
    allowed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_headers_are_set_and_removed_ones_go() {
        let allowed = Allowed {
            set: vec![(
                HeaderName::from_static("x-key"),
                HeaderValue::from_static("app"),
            )],
            remove: vec![HeaderName::from_static("authorization")],
            ..Allowed::default()
        };
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s"));
        headers.insert("x-key", HeaderValue::from_static("forged"));
        allowed.apply(&mut headers);
        assert!(headers.get(header::AUTHORIZATION).is_none());
        assert_eq!(headers["x-key"], "app");
    }
}
