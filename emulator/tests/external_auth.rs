//! The HTTPRoute `ExternalAuth` filter with the HTTP and gRPC protocols (Gateway API
//! GEP-1494, the experimental channel): the data plane asks the auth service first and
//! carries out its answer as an Envoy-based Gateway does
//! (`emulator/src/cluster/external_auth/` cites the filter's field descriptions and Envoy's
//! ext_authz for each rule checked here).
//! Both the auth service and the backend are selector-less Services whose EndpointSlices
//! name real listeners on this machine's network address.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::any;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Client, Config};
use modelplane_emulator::{Crds, Emulator};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

fn host_address() -> IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    socket
        .connect("192.0.2.255:9")
        .or_else(|_| socket.connect("10.255.255.255:9"))
        .expect("this test needs a network interface with a non-loopback address");
    socket.local_addr().unwrap().ip()
}

/// What one listener received: method, URI, headers (lower-case names), body.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    uri: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

type Log = Arc<Mutex<Vec<Seen>>>;

async fn seen(req: Request) -> Seen {
    let method = req.method().to_string();
    let uri = req.uri().to_string();
    let headers = req
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .unwrap();
    Seen {
        method,
        uri,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Listens on every interface with `app`; its port.
async fn listen(app: Router) -> u16 {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// The auth service: `Bearer good` is allowed (with a header for the backend, one it must
/// not get, and the credentials to remove); `Bearer busy` gets 429; anything else 401.
async fn auth_service(log: Log) -> u16 {
    listen(Router::new().fallback(any(move |req: Request| {
        let log = log.clone();
        async move {
            let s = seen(req).await;
            let authorization = s.header("authorization").unwrap_or("").to_owned();
            log.lock().unwrap().push(s);
            match authorization.as_str() {
                "Bearer good" => (
                    StatusCode::OK,
                    [
                        ("x-user", "alice"),
                        ("x-internal", "not for the backend"),
                        ("x-envoy-auth-headers-to-remove", "authorization, x-api-key"),
                    ],
                )
                    .into_response(),
                "Bearer busy" => (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "7")],
                    axum::Json(json!({"error": "slow down"})),
                )
                    .into_response(),
                _ => (
                    StatusCode::UNAUTHORIZED,
                    [("www-authenticate", "Bearer realm=\"test\"")],
                    axum::Json(json!({"error": "who are you"})),
                )
                    .into_response(),
            }
        }
    })))
    .await
}

/// The backend: answers with what it received.
async fn backend(log: Log) -> u16 {
    listen(Router::new().fallback(any(move |req: Request| {
        let log = log.clone();
        async move {
            let s = seen(req).await;
            log.lock().unwrap().push(s);
            "from the backend"
        }
    })))
    .await
}

async fn apply<K>(api: &Api<K>, name: &str, object: Value) -> Result<K, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&object),
    )
    .await
}

async fn selectorless(client: &Client, name: &str, ip: IpAddr, port: u16, ready: bool) {
    let services: Api<Service> = Api::default_namespaced(client.clone());
    apply(
        &services,
        name,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
               "spec": {"ports": [{"name": "http", "port": 80}]}}),
    )
    .await
    .unwrap();
    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    apply(
        &slices,
        &format!("{name}-1"),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-1"), "labels": {
                "kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": "test",
            }},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": ready}}],
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        }),
    )
    .await
    .unwrap();
}

fn routes(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute"),
            "httproutes",
        ),
    )
}

fn guarded_route() -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
           "metadata": {"name": "guarded"},
           "spec": {"parentRefs": [{"namespace": "gateway-system", "name": "public"}],
                    "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                               "filters": [{"type": "ExternalAuth", "externalAuth": {
                                   "protocol": "HTTP",
                                   "backendRef": {"name": "authz", "port": 80},
                                   "http": {"path": "/check/abc",
                                            "allowedHeaders": ["x-api-key"],
                                            "allowedResponseHeaders": ["x-user"]}}}],
                               "backendRefs": [{"name": "model", "port": 80}]}]}})
}

async fn send(
    http: &reqwest::Client,
    gateway: SocketAddr,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = http
        .post(format!("http://{gateway}/v1/chat?x=1"))
        .header("content-type", "application/json")
        .header("x-other", "kept")
        .body("{\"model\":\"m\"}");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// An emulator with the experimental channel's CRDs and a Gateway: it, a client, the
/// Gateway's address and this machine's address (where the test's listeners are reached).
async fn experimental() -> (
    modelplane_emulator::RunningEmulator,
    Client,
    SocketAddr,
    IpAddr,
) {
    let crds = modelplane_emulator::experimental_crds_dir().unwrap();
    let emu = Emulator::builder()
        .nodes(1)
        .crds(Crds::Manifests(crds))
        .gateway("gateway-system", "public")
        .start()
        .await
        .expect("emulator starts");
    let client = Client::try_from(Config::new(emu.url().parse().unwrap())).unwrap();
    let gateway = emu.gateway_addr().unwrap();
    (emu, client, gateway, host_address())
}

/// With the auth service's endpoint no longer ready, a request that it would let through
/// is refused (403, Envoy's `status_on_error`) and never reaches the backend.
async fn fails_closed(
    client: &Client,
    gateway: SocketAddr,
    ip: IpAddr,
    auth_port: u16,
    backend_log: &Log,
) {
    let http = reqwest::Client::new();
    selectorless(client, "authz", ip, auth_port, false).await;
    let before = backend_log.lock().unwrap().len();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let r = send(&http, gateway, &[("authorization", "Bearer good")]).await;
        if r.status() == StatusCode::FORBIDDEN {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", r.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(backend_log.lock().unwrap().len(), before);
}

#[tokio::test]
async fn the_external_auth_filter_asks_first_and_carries_out_the_answer() {
    let (_emu, client, gateway, ip) = experimental().await;
    let (auth_log, backend_log): (Log, Log) = Default::default();
    let auth_port = auth_service(auth_log.clone()).await;
    let backend_port = backend(backend_log.clone()).await;
    selectorless(&client, "authz", ip, auth_port, true).await;
    selectorless(&client, "model", ip, backend_port, true).await;
    apply(&routes(&client), "guarded", guarded_route())
        .await
        .expect("the experimental channel's HTTPRoute takes the ExternalAuth filter");

    // The GatewayClass says it carries the filter out.
    let classes = Api::<DynamicObject>::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "GatewayClass"),
            "gatewayclasses",
        ),
    );
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let class = classes.list(&Default::default()).await.unwrap().items;
        let features: Vec<&str> = class
            .iter()
            .flat_map(|c| {
                c.data["status"]["supportedFeatures"]
                    .as_array()
                    .into_iter()
                    .flatten()
            })
            .filter_map(|f| f["name"].as_str())
            .collect();
        if features.contains(&"HTTPRouteExternalAuthHTTP") {
            let mut sorted = features.clone();
            sorted.sort_unstable();
            assert_eq!(features, sorted, "sorted by name");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{features:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let http = reqwest::Client::new();
    // Until the route is programmed, anything; then: no credential, the auth service's 401
    // with its headers and body, and the backend never asked.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let refused = loop {
        let r = send(&http, gateway, &[]).await;
        if r.status() == StatusCode::UNAUTHORIZED {
            break r;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", r.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        refused.headers()["www-authenticate"],
        "Bearer realm=\"test\""
    );
    assert_eq!(
        refused.json::<Value>().await.unwrap()["error"],
        "who are you"
    );
    let busy = send(&http, gateway, &[("authorization", "Bearer busy")]).await;
    assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(busy.headers()["retry-after"], "7");
    assert!(backend_log.lock().unwrap().is_empty());

    // Allowed: the backend gets the request with the auth service's allowed header, without
    // the credentials it asked to remove or the header it was not allowed to add.
    let allowed = send(
        &http,
        gateway,
        &[("authorization", "Bearer good"), ("x-api-key", "k-1")],
    )
    .await;
    assert_eq!(allowed.status(), StatusCode::OK);
    assert_eq!(allowed.text().await.unwrap(), "from the backend");
    let to_backend = backend_log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(to_backend.uri, "/v1/chat?x=1");
    assert_eq!(to_backend.header("x-user"), Some("alice"));
    assert_eq!(to_backend.header("authorization"), None);
    assert_eq!(to_backend.header("x-api-key"), None);
    assert_eq!(to_backend.header("x-internal"), None);
    assert_eq!(to_backend.header("x-other"), Some("kept"));
    assert_eq!(to_backend.body, "{\"model\":\"m\"}");

    // What the auth service was asked: the client's method, the prefixed path and query,
    // Host, Authorization and the allowed header only, and no body (forwardBody unset).
    let asked = auth_log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(asked.method, "POST");
    assert_eq!(asked.uri, "/check/abc/v1/chat?x=1");
    assert_eq!(asked.header("host"), Some(gateway.to_string().as_str()));
    assert_eq!(asked.header("authorization"), Some("Bearer good"));
    assert_eq!(asked.header("x-api-key"), Some("k-1"));
    assert_eq!(asked.header("x-other"), None);
    assert_eq!(asked.header("content-length"), Some("0"));
    assert_eq!(asked.body, "");

    // The auth service unreachable: fail closed, 403, and the backend is not asked.
    fails_closed(&client, gateway, ip, auth_port, &backend_log).await;
}

/// The standard channel's HTTPRoute has no ExternalAuth filter: the API server refuses a
/// route that asks for one (the filter type is outside its enum), as a cluster with the
/// standard CRDs does.
#[tokio::test]
async fn the_standard_channel_refuses_the_filter() {
    let crds = modelplane_emulator::published_crds_dir().unwrap();
    let emu = Emulator::builder()
        .nodes(1)
        .crds(Crds::Manifests(crds))
        .gateway("gateway-system", "public")
        .start()
        .await
        .expect("emulator starts");
    let client = Client::try_from(Config::new(emu.url().parse().unwrap())).unwrap();
    let refused = apply(&routes(&client), "guarded", guarded_route())
        .await
        .expect_err("the standard channel has no ExternalAuth");
    let kube::Error::Api(status) = refused else {
        panic!("{refused}")
    };
    assert_eq!(status.code, 422, "{status:?}");
}

/// What the gRPC auth service was asked: the request's attributes.
type Asked = Arc<Mutex<Vec<envoy_types::ext_authz::v3::pb::CheckRequest>>>;

/// Envoy's ext_authz gRPC service: `Bearer good` is allowed (a header set, one appended,
/// the credentials removed); `Bearer busy` is denied with 429 and a body; else denied with
/// no status (Envoy sends 403).
struct GrpcAuth(Asked);

#[tonic::async_trait]
impl envoy_types::ext_authz::v3::pb::Authorization for GrpcAuth {
    async fn check(
        &self,
        request: tonic::Request<envoy_types::ext_authz::v3::pb::CheckRequest>,
    ) -> Result<tonic::Response<envoy_types::ext_authz::v3::pb::CheckResponse>, tonic::Status> {
        use envoy_types::ext_authz::v3::pb::{CheckResponse, HeaderAppendAction, HttpStatusCode};
        use envoy_types::ext_authz::v3::{
            CheckRequestExt, CheckResponseExt, DeniedHttpResponseBuilder, OkHttpResponseBuilder,
        };
        let request = request.into_inner();
        let authorization = request
            .get_client_headers()
            .and_then(|h| h.get("authorization").cloned())
            .unwrap_or_default();
        self.0.lock().unwrap().push(request);
        let response = match authorization.as_str() {
            "Bearer good" => {
                let mut ok = OkHttpResponseBuilder::new();
                ok.add_header(
                    "x-user",
                    "alice",
                    Some(HeaderAppendAction::OverwriteIfExistsOrAdd),
                    false,
                )
                .add_header(
                    "x-other",
                    "added",
                    Some(HeaderAppendAction::AppendIfExistsOrAdd),
                    false,
                )
                .remove_header("authorization");
                let mut r = CheckResponse::with_status(tonic::Status::ok(""));
                r.set_http_response(ok);
                r
            }
            "Bearer busy" => {
                let mut denied = DeniedHttpResponseBuilder::new();
                denied
                    .set_http_status(HttpStatusCode::TooManyRequests)
                    .add_header("retry-after", "7", None, false)
                    .set_body("slow down");
                let mut r = CheckResponse::with_status(tonic::Status::resource_exhausted("busy"));
                r.set_http_response(denied);
                r
            }
            _ => CheckResponse::with_status(tonic::Status::unauthenticated("who are you")),
        };
        Ok(tonic::Response::new(response))
    }
}

async fn grpc_auth_service(asked: Asked) -> u16 {
    let incoming =
        tonic::transport::server::TcpIncoming::bind("0.0.0.0:0".parse().unwrap()).unwrap();
    let port = incoming.local_addr().unwrap().port();
    let service = envoy_types::ext_authz::v3::pb::AuthorizationServer::new(GrpcAuth(asked));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming),
    );
    port
}

#[tokio::test]
async fn the_grpc_protocol_calls_envoys_check_and_carries_out_the_answer() {
    let (_emu, client, gateway, ip) = experimental().await;
    let asked: Asked = Arc::default();
    let backend_log: Log = Log::default();
    let auth_port = grpc_auth_service(asked.clone()).await;
    let backend_port = backend(backend_log.clone()).await;
    selectorless(&client, "authz", ip, auth_port, true).await;
    selectorless(&client, "model", ip, backend_port, true).await;
    let mut route = guarded_route();
    route["spec"]["rules"][0]["filters"][0]["externalAuth"] = json!({
        "protocol": "GRPC",
        "backendRef": {"name": "authz", "port": 80},
        "grpc": {"allowedHeaders": ["authorization", "x-other"]}});
    apply(&routes(&client), "guarded", route).await.unwrap();

    let http = reqwest::Client::new();
    // A denial without an HTTP status is Envoy's 403; the backend is never asked.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let r = send(&http, gateway, &[("authorization", "Bearer nobody")]).await;
        if r.status() == StatusCode::FORBIDDEN && !asked.lock().unwrap().is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", r.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let busy = send(&http, gateway, &[("authorization", "Bearer busy")]).await;
    assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(busy.headers()["retry-after"], "7");
    assert_eq!(busy.text().await.unwrap(), "slow down");
    assert!(backend_log.lock().unwrap().is_empty());

    let allowed = send(
        &http,
        gateway,
        &[("authorization", "Bearer good"), ("x-api-key", "k-1")],
    )
    .await;
    assert_eq!(allowed.status(), StatusCode::OK);
    let to_backend = backend_log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(to_backend.header("x-user"), Some("alice"));
    assert_eq!(to_backend.header("authorization"), None);
    let others: Vec<&str> = to_backend
        .headers
        .iter()
        .filter(|(n, _)| n == "x-other")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(others, ["kept", "added"], "appended, not replaced");

    // What Check was asked: the client's request line, Host, and only the allowed headers.
    let request = asked.lock().unwrap().last().cloned().unwrap();
    let http_request = request.attributes.unwrap().request.unwrap().http.unwrap();
    assert_eq!(http_request.method, "POST");
    assert_eq!(http_request.path, "/v1/chat?x=1");
    assert_eq!(http_request.host, gateway.to_string());
    assert_eq!(http_request.headers["authorization"], "Bearer good");
    assert_eq!(http_request.headers["x-other"], "kept");
    assert!(!http_request.headers.contains_key("x-api-key"));
    assert!(http_request.raw_body.is_empty(), "forwardBody unset");

    // Unreachable: fail closed.
    fails_closed(&client, gateway, ip, auth_port, &backend_log).await;
}
