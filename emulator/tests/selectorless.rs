//! A Service without a selector, its endpoints named by an EndpointSlice, as the Gateway's
//! backend: the data plane sends the request over real HTTP to the address the slice
//! names and streams the answer back.
//!
//! Kubernetes' "Services without selectors" (kubernetes.io/docs/concepts/services-networking/
//! service/#services-without-selectors): the EndpointSlice carries the label
//! `kubernetes.io/service-name`, and the Service's traffic goes to its addresses; its port
//! is matched to the Service port by name (EndpointPort.Name, k8s.io/api discovery/v1), and
//! an endpoint with `conditions.ready: false` gets none (EndpointConditions.Ready). The slice
//! must name a real, non-loopback address (the API server refuses loopback ones), so the
//! upstream listens on this machine's own network address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::routing::{any, get};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Config};
use modelplane_emulator::Emulator;
use serde_json::{Value, json};
use tokio::sync::Notify;

const DEADLINE: Duration = Duration::from_secs(30);

/// This machine's address on its network (the interface its default route leaves by),
/// found without sending anything: a UDP socket "connected" to a non-local address.
fn host_address() -> IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    socket
        .connect("192.0.2.255:9")
        .or_else(|_| socket.connect("10.255.255.255:9"))
        .expect("this test needs a network interface with a non-loopback address");
    let ip = socket.local_addr().unwrap().ip();
    assert!(!ip.is_loopback() && !ip.is_unspecified(), "{ip}");
    ip
}

/// The upstream: `/echo...` answers with what it received; `/stream` sends one chunk,
/// then the second only once `release` is notified.
async fn upstream(release: Arc<Notify>) -> u16 {
    let app = Router::new()
        .route(
            "/stream",
            get(move || {
                let release = release.clone();
                async move {
                    let chunks = futures::stream::unfold(0, move |n| {
                        let release = release.clone();
                        async move {
                            match n {
                                0 => Some((Ok::<_, std::io::Error>("data: one\n\n"), 1)),
                                1 => {
                                    release.notified().await;
                                    Some((Ok("data: two\n\n"), 2))
                                }
                                _ => None,
                            }
                        }
                    });
                    axum::response::Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Body::from_stream(chunks))
                        .unwrap()
                }
            }),
        )
        .fallback(any(|req: Request| async move {
            let host = req
                .headers()
                .get("host")
                .and_then(|h| h.to_str().ok())
                .unwrap_or("")
                .to_string();
            let method = req.method().to_string();
            let uri = req.uri().to_string();
            let body = axum::body::to_bytes(req.into_body(), 1 << 20)
                .await
                .unwrap();
            axum::Json(json!({
                "method": method, "uri": uri, "host": host,
                "body": String::from_utf8_lossy(&body),
            }))
        }));
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

async fn apply<K>(api: &Api<K>, name: &str, object: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

fn slice(ip: IpAddr, port: u16, ready: bool) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "outside-1", "labels": {
            "kubernetes.io/service-name": "outside",
            "endpointslice.kubernetes.io/managed-by": "test",
        }},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": ready}}],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    })
}

/// Sends until the answer's status is `want`, failing after the deadline.
async fn until_status(http: &reqwest::Client, url: &str, want: u16) -> reqwest::Response {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let r = http.post(url).body("{\"x\":1}").send().await.unwrap();
        if r.status().as_u16() == want {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url} still answers {} ({})",
            r.status(),
            r.text().await.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_selectorless_service_routes_to_the_addresses_of_its_endpoint_slices() {
    let emu = Emulator::builder()
        .nodes(1)
        .gateway("gateway-system", "public")
        .start()
        .await
        .expect("emulator starts");
    let client = Client::try_from(Config::new(emu.url().parse().unwrap())).unwrap();
    let gateway: SocketAddr = emu.gateway_addr().unwrap();
    let release = Arc::new(Notify::new());
    let port = upstream(release.clone()).await;
    let ip = host_address();

    let services: Api<Service> = Api::default_namespaced(client.clone());
    apply(
        &services,
        "outside",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "outside"},
               "spec": {"ports": [{"name": "http", "port": 80}]}}),
    )
    .await;
    let routes = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute"),
            "httproutes",
        ),
    );
    apply(
        &routes,
        "outside",
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "outside"},
               "spec": {"parentRefs": [{"namespace": "gateway-system", "name": "public"}],
                        "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/out"}}],
                                   "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
                                       "type": "ReplacePrefixMatch", "replacePrefixMatch": "/echo"}}}],
                                   "backendRefs": [{"name": "outside", "port": 80}]},
                                  {"matches": [{"path": {"type": "PathPrefix", "value": "/live"}}],
                                   "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
                                       "type": "ReplacePrefixMatch", "replacePrefixMatch": "/stream"}}}],
                                   "backendRefs": [{"name": "outside", "port": 80}]}]}}),
    )
    .await;
    let http = reqwest::Client::new();
    let url = format!("http://{gateway}/out/v1/chat?stream=1");
    // No slice yet: the Service has no endpoint.
    let none = until_status(&http, &url, 503).await;
    assert_eq!(none.text().await.unwrap(), "no healthy upstream\n");

    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    apply(&slices, "outside-1", slice(ip, port, true)).await;
    let answer: Value = until_status(&http, &url, 200).await.json().await.unwrap();
    assert_eq!(answer["method"], "POST");
    assert_eq!(answer["uri"], "/echo/v1/chat?stream=1", "{answer}");
    assert_eq!(
        answer["host"],
        gateway.to_string(),
        "the client's Host is kept"
    );
    assert_eq!(answer["body"], "{\"x\":1}");

    // The answer streams: the first chunk arrives while the upstream holds the second.
    let mut streamed = http
        .get(format!("http://{gateway}/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), 200);
    let first = streamed.chunk().await.unwrap().expect("a first chunk");
    assert_eq!(&first[..], b"data: one\n\n");
    release.notify_one();
    let second = streamed.chunk().await.unwrap().expect("a second chunk");
    assert_eq!(&second[..], b"data: two\n\n");
    assert!(streamed.chunk().await.unwrap().is_none());

    // An endpoint that is not ready gets no request.
    apply(&slices, "outside-1", slice(ip, port, false)).await;
    until_status(&http, &url, 503).await;
}
