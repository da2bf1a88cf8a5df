//! Services without a selector: the Gateway data plane sends their requests to the
//! addresses their EndpointSlices name, over real HTTP, as a cluster's Gateway does.
//!
//! Kubernetes' "Services without selectors" (kubernetes.io/docs/concepts/services-networking/
//! service/#services-without-selectors): no EndpointSlice controller manages such a
//! Service's endpoints; whoever made the Service adds EndpointSlices labelled
//! `kubernetes.io/service-name: <service>`, and traffic goes to the addresses and ports they
//! list. A slice port is matched to the Service port by name (`EndpointPort.Name` in
//! k8s.io/api discovery/v1 types.go: "must match the name of a port in the service"; the
//! empty name for a Service's single unnamed port), and an endpoint whose
//! `conditions.ready` is absent counts as ready ("nil should be interpreted as true",
//! `EndpointConditions.Ready` there). The API server already refuses loopback, link-local
//! and unspecified addresses in a slice (`validation.rs`), so nothing here can be pointed
//! at the emulator's own host by a slice a real cluster would refuse.
//!
//! Envoy-based Gateways (Envoy Gateway, Istio) resolve a Service backendRef the same way,
//! from its EndpointSlices, whether or not it has a selector. Answers stream back as the
//! upstream sends them (no buffering: an SSE token stream arrives token by token).

use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde_json::Value;

use crate::resources::meta_str;
use crate::store::Store;

/// Whether a Service has no selector (its endpoints are whatever slices name).
pub(crate) fn selectorless(svc: &Value) -> bool {
    svc.pointer("/spec/selector")
        .and_then(Value::as_object)
        .is_none_or(|s| s.is_empty())
}

/// The ready addresses of selector-less Service `svc` for its port `port` (the
/// backendRef's; `None`: the Service's only port), from its EndpointSlices.
pub(crate) fn slice_addresses(store: &Store, svc: &Value, port: Option<i64>) -> Vec<SocketAddr> {
    let ns = meta_str(svc, "namespace").unwrap_or("");
    let name = meta_str(svc, "name").unwrap_or("");
    let ports = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let service_port = match port {
        Some(p) => ports
            .iter()
            .find(|sp| sp.get("port").and_then(Value::as_i64) == Some(p)),
        None if ports.len() == 1 => ports.first(),
        None => None,
    };
    let Some(service_port) = service_port else {
        return Vec::new();
    };
    let port_name = service_port
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let Some(kind) = store
        .kinds()
        .by_resource("discovery.k8s.io", "v1", "endpointslices")
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for slice in store.list(kind, Some(ns)) {
        if slice
            .pointer("/metadata/labels/kubernetes.io~1service-name")
            .and_then(Value::as_str)
            != Some(name)
        {
            continue;
        }
        let Some(number) = slice
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
            .and_then(|p| p.get("port").and_then(Value::as_i64))
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for endpoint in slice
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if endpoint
                .pointer("/conditions/ready")
                .and_then(Value::as_bool)
                == Some(false)
            {
                continue;
            }
            for address in endpoint
                .get("addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if let Ok(ip) = address.parse::<IpAddr>() {
                    out.push(SocketAddr::new(ip, number));
                }
            }
        }
    }
    out
}

/// The headers a proxy does not pass on (hop-by-hop, RFC 9110 section 7.6.1), and the
/// length, which the proxied body sets again.
pub(crate) const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

pub(crate) fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        // reqwest is built without a TLS provider of its own (`rustls-no-provider`) and
        // refuses to build a client until one is installed; another may have been already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with no TLS builds")
    })
}

/// Sends the request to `address` and streams its answer back; a connection that fails
/// answers 503 as Envoy does ("upstream connect error"). The client's Host header is kept,
/// as a Gateway keeps it for its backends.
pub(crate) async fn forward(
    address: SocketAddr,
    method: &Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let mut request = client()
        .request(method.clone(), format!("http://{address}{path_and_query}"))
        .body(body);
    for (name, value) in headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            request = request.header(name, value);
        }
    }
    let upstream = match request.send().await {
        Ok(response) => response,
        Err(_) => {
            return Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from(
                    "upstream connect error or disconnect/reset before headers\n",
                ))
                .expect("a valid response");
        }
    };
    let mut response = Response::builder().status(upstream.status());
    for (name, value) in upstream.headers() {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            response = response.header(name, value);
        }
    }
    // Each chunk as it arrives (reqwest's `chunk`, without its `stream` feature).
    let stream = futures::stream::unfold(Some(upstream), |upstream| async move {
        let mut upstream = upstream?;
        match upstream.chunk().await {
            Ok(Some(chunk)) => Some((Ok::<_, std::io::Error>(chunk), Some(upstream))),
            Ok(None) => None,
            // The upstream broke off: the client's answer breaks off too, and ends.
            Err(err) => Some((Err(std::io::Error::other(err)), None)),
        }
    });
    response
        .body(Body::from_stream(stream))
        .expect("a valid response")
}
