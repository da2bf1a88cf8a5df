//! The API server's pod proxy: the `proxy` subresource of Pods, served at
//!
//! ```text
//! /api/v1/namespaces/{namespace}/pods/{name}/proxy
//! /api/v1/namespaces/{namespace}/pods/{name}/proxy/{path...}
//! ```
//!
//! for GET, POST, PUT, PATCH, DELETE, HEAD and OPTIONS (`proxyMethods` of the Pods'
//! ProxyREST, kubernetes pkg/registry/core/pod/rest/subresources.go). The URL is taken
//! apart by the service proxy's `parse` (the same `path` connect option, joined with
//! `net.JoinPreservingTrailingSlash` by `ProxyREST.Connect`), and the request goes to the
//! pod itself: a pod is how modelplane's worker reads a model server's `/metrics` from
//! outside the cluster (`GET /api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/metrics`).
//!
//! Where it goes and the errors follow `ResourceLocation` of the pod storage (kubernetes
//! pkg/registry/core/pod/strategy.go):
//!
//! - `{name}` is split by `utilnet.SplitSchemeNamePort` (`name`, `name:port`,
//!   `scheme:name:port`); otherwise 400 BadRequest `invalid pod request "{id}"`;
//! - the pod is read: 404 `pods "{name}" not found`;
//! - without a port, the first port of the first container (in `spec.containers` order)
//!   that declares any is used; a pod declaring none is reached on the scheme's default
//!   port (80, 443 for `https`) since the location then has no port at all;
//! - the pod's primary IP (`status.podIPs[0]`) must parse and be a global unicast
//!   address, else 400 BadRequest `address not allowed`: a pod that is not scheduled or
//!   has no sandbox yet has no IP, so this is the answer for a Pending pod.
//!
//! The location is then dialled by the proxy transport, whose failures come back as 503
//! ServiceUnavailable `error trying to reach service: {err}` (k8s.io/apimachinery
//! pkg/util/proxy/transport.go, the transport ProxyREST wraps, as `wrapTransport` is
//! true). The emulator models the dial: an emulated container listens on exactly the TCP
//! ports it declares (`containerPort`), and only while its state is `running`; any other
//! port gives Go's `dial tcp {ip}:{port}: connect: connection refused`. A port given by
//! name is resolved as Go's dialer resolves a service name (`net.LookupPort`: `http` is
//! 80, `https` 443, ...; not the container port of that name), an unknown one failing
//! with `dial tcp: lookup tcp/{name}: unknown port`.
//!
//! A reachable pod answers as it does behind the Gateway, through the data plane
//! (`dataplane/sim.rs`): a `sim` pod with its OpenAI-compatible simulator (including the
//! vLLM-style `/metrics`), any other pod 503 `no real model server runs in the Kubernetes
//! emulator`, both with the `x-emulator-pod`/`x-emulator-namespace` headers that tell a
//! pod's answer from the API server's own errors; the request counts in the pod's
//! in-flight load like Gateway and service proxy traffic. The emulator does no
//! authorization; a real server needs verb `create` (POST), `get` (GET, HEAD), `update`,
//! `patch` or `delete` on `pods/proxy`.

use std::net::IpAddr;

use axum::body::Bytes;
use axum::http::Method;
use axum::response::Response;
use serde_json::Value;

use super::dataplane::Plane;
use super::service_proxy::{PROXY_METHODS, ProxyRequest, split_scheme_name_port};
use crate::status::{ApiError, ApiResult};
use crate::store::Store;

/// `ResourceLocation`'s port when the id names none: the first port of the first
/// container that declares ports (init containers are not looked at).
fn first_container_port(pod: &Value) -> Option<i64> {
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(|c| c.get("ports").and_then(Value::as_array))
        .find(|ports| !ports.is_empty())
        .and_then(|ports| ports[0].get("containerPort"))
        .and_then(Value::as_i64)
}

/// `getPodIP`: the first of `status.podIPs` (the empty string without one).
fn pod_ip(pod: &Value) -> &str {
    pod.pointer("/status/podIPs/0/ip")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Go's `net.IP.IsGlobalUnicast`: not unspecified, loopback, multicast, link-local
/// unicast or the IPv4 broadcast address (private ranges count as global).
fn is_global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_link_local()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
            !(v6.is_unspecified() || v6.is_loopback() || v6.is_multicast() || link_local)
        }
    }
}

/// The TCP port Go's dialer uses for `port` (`net.LookupPort` on "tcp"): a number up to
/// 65535, or a service name from Go's built-in table (net/lookup.go `services`; the
/// apiserver's static image has no /etc/services to add to it).
fn dial_port(port: &str) -> Result<u16, String> {
    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        return port
            .parse::<u16>()
            .map_err(|_| format!("address {port}: invalid port"));
    }
    let known = [
        ("ftp", 21),
        ("ftps", 990),
        ("gopher", 70),
        ("http", 80),
        ("https", 443),
        ("imap2", 143),
        ("imap3", 220),
        ("imaps", 993),
        ("pop3", 110),
        ("pop3s", 995),
        ("smtp", 25),
        ("submissions", 465),
        ("ssh", 22),
        ("telnet", 23),
    ];
    let lower = port.to_ascii_lowercase();
    known
        .iter()
        .find(|(name, _)| *name == lower)
        .map(|(_, n)| *n)
        .ok_or_else(|| format!("lookup tcp/{port}: unknown port"))
}

/// Whether a container of the pod that declares TCP port `port` is running: the
/// emulator's model of something listening there.
fn listens(pod: &Value, port: u16) -> bool {
    let running = |name: &str| {
        pod.pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|s| {
                s.get("name").and_then(Value::as_str) == Some(name)
                    && s.pointer("/state/running").is_some()
            })
    };
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| {
            c.get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|p| {
                    p.get("containerPort").and_then(Value::as_i64) == Some(i64::from(port))
                        && p.get("protocol").and_then(Value::as_str).unwrap_or("TCP") == "TCP"
                })
        })
        .any(|c| c.get("name").and_then(Value::as_str).is_some_and(running))
}

fn unreachable(err: String) -> ApiError {
    ApiError::new(
        503,
        "ServiceUnavailable",
        format!("error trying to reach service: {err}"),
    )
}

/// Serves one pod proxy request.
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
    let Some((scheme, name, port)) = split_scheme_name_port(id) else {
        return Err(ApiError::bad_request(format!("invalid pod request {id:?}")));
    };
    let pods = store
        .kinds()
        .by_resource("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("pods are not served"))?;
    let Some(pod) = store.get(pods, ns, name) else {
        return Err(ApiError::not_found(pods, name));
    };
    let port = match port {
        "" => first_container_port(&pod).map_or(String::new(), |p| p.to_string()),
        p => p.to_string(),
    };
    let ip_text = pod_ip(&pod);
    let Some(ip) = ip_text
        .parse::<IpAddr>()
        .ok()
        .filter(|ip| is_global_unicast(*ip))
    else {
        return Err(ApiError::bad_request("address not allowed"));
    };
    // The UpgradeAwareHandler defaults an empty scheme to http; a location without a
    // port is dialled on the scheme's default port.
    let port = match (port.as_str(), scheme) {
        ("", "https") => 443,
        ("", _) => 80,
        (p, _) => dial_port(p).map_err(|e| unreachable(format!("dial tcp: {e}")))?,
    };
    if !listens(&pod, port) {
        let host = match ip {
            IpAddr::V4(_) => format!("{ip}:{port}"),
            IpAddr::V6(_) => format!("[{ip}]:{port}"),
        };
        return Err(unreachable(format!(
            "dial tcp {host}: connect: connection refused"
        )));
    }
    let path = if req.path.is_empty() { "/" } else { &req.path };
    tracing::debug!(namespace = ns, pod = name, port, path, "pod proxy");
    Ok(plane.answer_for_pod(pod, method, path, body).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // ResourceLocation's port when none is given (pkg/registry/core/pod/strategy.go).
    #[test]
    fn the_first_declared_container_port_is_the_default() {
        let pod = json!({"spec": {"containers": [
            {"name": "a"},
            {"name": "b", "ports": []},
            {"name": "c", "ports": [{"containerPort": 9090}, {"containerPort": 8000}]},
            {"name": "d", "ports": [{"containerPort": 7000}]},
        ]}});
        assert_eq!(first_container_port(&pod), Some(9090));
        assert_eq!(
            first_container_port(&json!({"spec": {"containers": [{"name": "a"}]}})),
            None
        );
    }

    // Go's net.IP.IsGlobalUnicast, which ResourceLocation requires of the pod IP.
    #[test]
    fn only_global_unicast_addresses_are_proxied() {
        let ok = |s: &str| is_global_unicast(s.parse().unwrap());
        assert!(ok("10.244.1.5"));
        assert!(ok("192.168.0.1"));
        assert!(ok("2001:db8::1"));
        assert!(!ok("127.0.0.1"));
        assert!(!ok("0.0.0.0"));
        assert!(!ok("169.254.1.1"));
        assert!(!ok("255.255.255.255"));
        assert!(!ok("224.0.0.1"));
        assert!(!ok("::1"));
        assert!(!ok("fe80::1"));
    }

    // net.LookupPort("tcp", port) as the proxy transport's dialer resolves it.
    #[test]
    fn ports_resolve_like_gos_dialer() {
        assert_eq!(dial_port("8000"), Ok(8000));
        assert_eq!(dial_port("http"), Ok(80));
        assert_eq!(dial_port("HTTPS"), Ok(443));
        assert_eq!(
            dial_port("metrics"),
            Err("lookup tcp/metrics: unknown port".into())
        );
        assert_eq!(
            dial_port("70000"),
            Err("address 70000: invalid port".into())
        );
    }

    #[test]
    fn a_port_is_listened_on_while_its_container_runs() {
        let pod = |state: Value| {
            json!({"spec": {"containers": [{"name": "s", "ports": [
                        {"containerPort": 8000}, {"containerPort": 53, "protocol": "UDP"}]}]},
                   "status": {"containerStatuses": [{"name": "s", "state": state}]}})
        };
        let running = pod(json!({"running": {"startedAt": "2025-01-01T00:00:00Z"}}));
        assert!(listens(&running, 8000));
        assert!(!listens(&running, 53));
        assert!(!listens(&running, 9000));
        let waiting = pod(json!({"waiting": {"reason": "CrashLoopBackOff"}}));
        assert!(!listens(&waiting, 8000));
    }
}
