//! The API server's service proxy: the `proxy` subresource of Services, served at
//!
//! ```text
//! /api/v1/namespaces/{namespace}/services/{name}/proxy
//! /api/v1/namespaces/{namespace}/services/{name}/proxy/{path...}
//! ```
//!
//! for GET, POST, PUT, PATCH, DELETE, HEAD and OPTIONS (`proxyMethods` of ProxyREST in
//! kubernetes pkg/registry/core/service/proxy.go). `{name}` is `name`, `name:port` or
//! `scheme:name:port` (`utilnet.SplitSchemeNamePort`, k8s.io/apimachinery
//! pkg/util/net/port_split.go), the port a Service port's name or number. The request is
//! sent, with its method, the path after `/proxy` (cleaned by `path.Join`, a trailing
//! slash kept: `net.JoinPreservingTrailingSlash`), its query and body, to a ready endpoint
//! of the Service, and the endpoint's status, headers and body come back unchanged
//! (`ProxyREST.Connect` and the UpgradeAwareHandler of k8s.io/apimachinery
//! pkg/util/proxy/upgradeaware.go).
//!
//! Where the request goes and the errors follow `ResourceLocation` of the Service storage
//! (kubernetes pkg/registry/core/service/storage/storage.go), which reads the Service's
//! Endpoints object:
//!
//! - an id that does not parse: 400 BadRequest `invalid service request "{id}"`;
//! - a port *number*: the Service is read (404 `services "{name}" not found`) and the
//!   number must be one of its ports, else 503 ServiceUnavailable
//!   `no service port {n} found for service "{name}"`; the port's name is used from here;
//! - the Endpoints object is read: 404 `endpoints "{name}" not found` when there is none
//!   (the endpoints controller keeps one for each Service with a selector, so a missing
//!   Service asked for by port name, or without a port, is a 404 on `endpoints`);
//! - no endpoint subsets at all (no pod selected that has an IP): 503
//!   `no endpoints available for service "{name}"`;
//! - a ready address of a subset whose port has the asked-for name (the empty name when
//!   no port is given: only a Service with a single unnamed port matches) is picked; when
//!   none, 503 `no endpoints available for service "{id}"` (the whole id, as written).
//!
//! The emulator serves no Endpoints kind, so the Endpoints object is derived from the
//! Service and its pods exactly as the endpoints controller builds it (kubernetes
//! pkg/controller/endpoint/endpoints_controller.go `syncService`: pods that
//! `ShouldPodBeInEndpoints`, ports by `podutil.FindPort`, ready or
//! `publishNotReadyAddresses` pods as addresses), and the address is picked, and the
//! request answered, by the Gateway data plane (`dataplane/`): round robin over the
//! Service's addresses with the same per-pod in-flight accounting as Gateway traffic,
//! a `sim` pod answering with its OpenAI-compatible simulator and any other pod with 503.
//! The emulator does no authorization; a real server needs verb `create` (POST), `get`
//! (GET, HEAD), `update`, `patch` or `delete` on `services/proxy` (the verb follows the
//! HTTP method: k8s.io/apiserver pkg/endpoints/request/requestinfo.go).
//!
//! The URL parsing, the path joining and `SplitSchemeNamePort` here are shared with the
//! Pods' `proxy` subresource (`pod_proxy.rs`), which takes its URL the same way.

use axum::body::Bytes;
use axum::http::Method;
use axum::response::Response;
use serde_json::Value;

use super::dataplane::Plane;
use super::networking::{selected_pods, target_port};
use super::{deleting, is_true};
use crate::status::{ApiError, ApiResult};
use crate::store::Store;

/// The methods ProxyREST connects: `proxyMethods` of the Services' (pkg/registry/core/
/// service/proxy.go) and, the same list, of the Pods' (pkg/registry/core/pod/rest/
/// subresources.go).
pub(crate) const PROXY_METHODS: [Method; 7] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::HEAD,
    Method::OPTIONS,
];

/// The resources whose `proxy` subresource the API server serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proxied {
    /// `services/{name}/proxy`: served here.
    Service,
    /// `pods/{name}/proxy`: served by `pod_proxy.rs`.
    Pod,
}

/// A service or pod proxy URL, taken apart.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ProxyRequest {
    pub resource: Proxied,
    pub namespace: String,
    /// `name`, `name:port` or `scheme:name:port`, as written.
    pub id: String,
    /// The path sent to the endpoint or pod (empty: the root).
    pub path: String,
}

/// Decodes `%XX` escapes of a URL path (as Go's `url.URL.Path`; `+` stays `+`).
fn decode_path(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h * 16 + l);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Go's `path.Join` of an empty base and `p`, with `net.JoinPreservingTrailingSlash`'s
/// trailing slash: empty and `.` elements dropped, `..` going up.
fn join_preserving_trailing_slash(p: &str) -> String {
    if p.is_empty() {
        return String::new();
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let mut out = format!("/{}", parts.join("/"));
    if p.ends_with('/') && !out.ends_with('/') {
        out.push('/');
    }
    out
}

/// Recognises `/api/v1/namespaces/{ns}/{services|pods}/{name}/proxy[/{path...}]`: both
/// connecters take the `path` option the same way (`NewConnectOptions` returns `true,
/// "path"` in pkg/registry/core/service/proxy.go and pod/rest/subresources.go). The remaining
/// path is built as the apiserver's `getRequestOptions` builds the `path` connect option
/// (k8s.io/apiserver pkg/endpoints/handlers/rest.go): the request's parts after
/// `proxy`, with a leading slash, and a trailing slash when the request had one.
pub(crate) fn parse(raw_path: &str) -> Option<ProxyRequest> {
    let decoded = decode_path(raw_path);
    let parts: Vec<&str> = decoded.trim_matches('/').split('/').collect();
    let [
        "api",
        "v1",
        "namespaces",
        ns,
        plural,
        id,
        "proxy",
        rest @ ..,
    ] = parts.as_slice()
    else {
        return None;
    };
    let resource = match *plural {
        "services" => Proxied::Service,
        "pods" => Proxied::Pod,
        _ => return None,
    };
    if ns.is_empty() || id.is_empty() {
        return None;
    }
    let mut p = rest.join("/");
    if !p.is_empty() && !p.starts_with('/') {
        p.insert(0, '/');
    }
    if decoded.ends_with('/') && !p.ends_with('/') {
        p.push('/');
    }
    Some(ProxyRequest {
        resource,
        namespace: ns.to_string(),
        id: id.to_string(),
        path: join_preserving_trailing_slash(&p),
    })
}

/// `utilnet.SplitSchemeNamePort` (k8s.io/apimachinery pkg/util/net/port_split.go):
/// `name`, `name:port` or `scheme:name:port`, a non-empty name and a scheme of "",
/// `http` or `https`. Both proxies' `ResourceLocation` split their id with it.
pub(crate) fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    (!name.is_empty() && ["", "http", "https"].contains(&scheme)).then_some((scheme, name, port))
}

/// `ShouldPodBeInEndpoints` (kubernetes pkg/controller/util/endpointslice, used by the
/// endpoints controller): a pod with an IP, not terminating unless terminating pods are
/// included, and not in a terminal phase its restart policy will not leave.
fn should_be_in_endpoints(pod: &Value, include_terminating: bool) -> bool {
    let has_ip = pod
        .pointer("/status/podIP")
        .and_then(Value::as_str)
        .is_some_and(|ip| !ip.is_empty());
    if !has_ip || (!include_terminating && deleting(pod)) {
        return false;
    }
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    match pod.pointer("/spec/restartPolicy").and_then(Value::as_str) {
        Some("Never") => !matches!(phase, Some("Failed" | "Succeeded")),
        Some("OnFailure") => phase != Some("Succeeded"),
        _ => true,
    }
}

fn unavailable(msg: String) -> ApiError {
    ApiError::new(503, "ServiceUnavailable", msg)
}

/// Serves one service proxy request.
pub(crate) async fn serve(
    store: &Store,
    plane: &Plane,
    method: &Method,
    req: ProxyRequest,
    body: &Bytes,
) -> ApiResult<Response> {
    if !PROXY_METHODS.contains(method) {
        return Err(ApiError::method_not_allowed());
    }
    let ns = req.namespace.as_str();
    let id = req.id.as_str();
    // The scheme picks http or https towards the endpoint; the emulated pods answer
    // either way (the emulator has no TLS).
    let Some((_scheme, name, port)) = split_scheme_name_port(id) else {
        return Err(ApiError::bad_request(format!(
            "invalid service request {id:?}"
        )));
    };
    let kinds = store.kinds();
    let services = kinds
        .by_resource("", "v1", "services")
        .ok_or_else(|| ApiError::internal("services are not served"))?;
    let pods_kind = kinds
        .by_resource("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("pods are not served"))?;
    let svc = store.get(services, ns, name);
    let svc_ports: Vec<Value> = svc
        .as_ref()
        .and_then(|s| s.pointer("/spec/ports"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let port_name_of = |p: &Value| {
        p.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    // A port number names the Service port with that number.
    let mut port_name = port.to_string();
    if let Ok(n) = port.parse::<i64>() {
        if svc.is_none() {
            return Err(ApiError::not_found(services, name));
        }
        match svc_ports
            .iter()
            .find(|p| p.get("port").and_then(Value::as_i64) == Some(n))
        {
            Some(p) => port_name = port_name_of(p),
            None => {
                return Err(unavailable(format!(
                    "no service port {n} found for service {name:?}"
                )));
            }
        }
    }
    // The Service's Endpoints: kept by the endpoints controller for Services with a
    // selector (and deleted with the Service).
    let Some(svc) = svc.filter(|s| {
        s.pointer("/spec/selector")
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
    }) else {
        return Err(ApiError::not_found_resource("", "endpoints", name));
    };
    let publish_not_ready = svc
        .pointer("/spec/publishNotReadyAddresses")
        .and_then(Value::as_bool)
        == Some(true);
    let pods = store.list(pods_kind, Some(ns));
    // Each endpoint: the pod, whether it is a (ready) address, and the names of the
    // Service ports its containers resolve.
    let endpoints: Vec<(&Value, bool, Vec<String>)> = selected_pods(&pods, &svc)
        .into_iter()
        .filter(|p| should_be_in_endpoints(p, publish_not_ready))
        .map(|p| {
            let ports: Vec<String> = svc_ports
                .iter()
                .filter(|sp| target_port(p, sp).is_some())
                .map(port_name_of)
                .collect();
            let ready = publish_not_ready || (is_true(p, "Ready") && !deleting(p));
            (p, ready, ports)
        })
        .filter(|(_, _, ports)| !ports.is_empty())
        .collect();
    if endpoints.is_empty() {
        return Err(unavailable(format!(
            "no endpoints available for service {name:?}"
        )));
    }
    let addresses: Vec<Value> = endpoints
        .into_iter()
        .filter(|(_, ready, ports)| *ready && ports.contains(&port_name))
        .map(|(p, _, _)| p.clone())
        .collect();
    if addresses.is_empty() {
        return Err(unavailable(format!(
            "no endpoints available for service {id:?}"
        )));
    }
    let path = if req.path.is_empty() { "/" } else { &req.path };
    tracing::debug!(
        namespace = ns,
        service = name,
        pods = addresses.len(),
        path,
        "service proxy"
    );
    Ok(plane
        .answer_for_service(ns, name, addresses, method, path, body)
        .await)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(p: &str) -> Option<(String, String, String)> {
        parse(p)
            .filter(|r| r.resource == Proxied::Service)
            .map(|r| (r.namespace, r.id, r.path))
    }

    fn t(ns: &str, id: &str, path: &str) -> Option<(String, String, String)> {
        Some((ns.into(), id.into(), path.into()))
    }

    // The `path` connect option (getRequestOptions in k8s.io/apiserver
    // pkg/endpoints/handlers/rest.go) joined to the endpoint's location with
    // net.JoinPreservingTrailingSlash (pkg/registry/core/service/proxy.go).
    #[test]
    fn proxy_urls_are_taken_apart() {
        assert_eq!(
            parsed("/api/v1/namespaces/team-a/services/qwen:8000/proxy/v1/chat/completions"),
            t("team-a", "qwen:8000", "/v1/chat/completions")
        );
        assert_eq!(
            parsed("/api/v1/namespaces/team-a/services/https:qwen:http/proxy"),
            t("team-a", "https:qwen:http", "")
        );
        assert_eq!(
            parsed("/api/v1/namespaces/a/services/qwen/proxy/"),
            t("a", "qwen", "/")
        );
        assert_eq!(
            parsed("/api/v1/namespaces/a/services/qwen%3A8000/proxy/v1//models/"),
            t("a", "qwen:8000", "/v1/models/")
        );
        assert_eq!(
            parsed("/api/v1/namespaces/a/services/q/proxy/x/../v1/./models"),
            t("a", "q", "/v1/models")
        );
        assert_eq!(parsed("/api/v1/namespaces/a/services/q"), None);
        assert_eq!(parsed("/api/v1/namespaces/a/services/q/status"), None);
        assert_eq!(parsed("/apis/v1/namespaces/a/services/q/proxy"), None);
        assert_eq!(parse("/api/v1/namespaces/a/configmaps/q/proxy"), None);
        // The Pods' proxy takes its path the same way.
        assert_eq!(
            parse("/api/v1/namespaces/team-a/pods/qwen-0:8000/proxy/metrics"),
            Some(ProxyRequest {
                resource: Proxied::Pod,
                namespace: "team-a".into(),
                id: "qwen-0:8000".into(),
                path: "/metrics".into(),
            })
        );
        assert_eq!(
            parse("/api/v1/namespaces/a/pods/p/proxy/").map(|r| (r.resource, r.path)),
            Some((Proxied::Pod, "/".into()))
        );
    }

    // utilnet.SplitSchemeNamePort (k8s.io/apimachinery pkg/util/net/port_split.go).
    #[test]
    fn ids_split_like_split_scheme_name_port() {
        assert_eq!(split_scheme_name_port("svc"), Some(("", "svc", "")));
        assert_eq!(split_scheme_name_port("svc:80"), Some(("", "svc", "80")));
        assert_eq!(
            split_scheme_name_port("https:svc:http"),
            Some(("https", "svc", "http"))
        );
        assert_eq!(split_scheme_name_port("svc:"), Some(("", "svc", "")));
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("ftp:svc:80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
    }
}
