//! A test server: the real router on a random port over a fresh database.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use modelplane::api::rate_limit::RateLimiter;
use modelplane::api::{self, AppState};
use modelplane::auth::{Authenticator, OidcConfig, OidcVerifier};
use modelplane::config::HttpConfig;
use modelplane::domain::SpecLimits;
use modelplane::reconciler::health::ReconcilerReadiness;
use modelplane::service;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use reqwest::{Client, Method, RequestBuilder, Response, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

/// The platform-admin token every test app is bootstrapped with.
pub const ADMIN_TOKEN: &str = "mpt_test-bootstrap-admin-token-0123456789abcdef";

/// How a test app differs from the default.
pub struct Options {
    pub oidc: Option<OidcConfig>,
    pub rate_per_minute: u32,
    pub rate_burst: u32,
    pub metrics_require_auth: bool,
    pub cors_origins: Vec<String>,
    pub request_timeout_secs: u64,
    /// A cluster for `/readyz` to check, and whether it decides readiness.
    pub cluster: Option<(modelplane::reconciler::cluster::Cluster, bool)>,
    /// A worker whose health `/readyz` reports.
    pub worker: Option<Arc<modelplane::reconciler::health::WorkerHealth>>,
    /// The built portal served at `/` (none: a directory with nothing in it).
    pub web_dir: std::path::PathBuf,
    /// The listener's bounds (header deadline, connection caps).
    pub connections: modelplane::listener::ConnectionLimits,
    /// Open watches and subscriptions per caller and per address.
    pub streams: service::live::StreamLimits,
    pub graphql: api::graphql::GraphqlLimits,
    /// How "try it" reaches a model (the cluster's client goes with `cluster` above).
    pub chat_via: service::chat::ChatVia,
    /// The collection interval the API assumes when it ages `status.load`.
    pub load_interval: std::time::Duration,
    /// Requests the activator holds per deployment before it answers 429.
    pub activator_max_held: usize,
    /// Whether `minReplicas: 0` is allowed (the installation runs the activator).
    pub scale_to_zero: bool,
    /// Whether the key check runs (on its own port, every interface): `access: keys` is
    /// allowed and new deployments default to it.
    pub model_keys: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            oidc: None,
            rate_per_minute: 100_000,
            rate_burst: 10_000,
            metrics_require_auth: false,
            cors_origins: Vec::new(),
            request_timeout_secs: 30,
            cluster: None,
            worker: None,
            web_dir: "/nonexistent/modelplane-web".into(),
            connections: modelplane::listener::ConnectionLimits::default(),
            streams: service::live::StreamLimits::default(),
            load_interval: std::time::Duration::from_secs(15),
            graphql: api::graphql::GraphqlLimits::default(),
            chat_via: service::chat::ChatVia::ApiServer,
            activator_max_held: 1000,
            scale_to_zero: true,
            model_keys: false,
        }
    }
}

/// This machine's address on its network (the interface its default route leaves by), found
/// without sending anything: a UDP socket "connected" to a non-local address. What an
/// EndpointSlice may name for a process on this machine (Kubernetes refuses loopback).
pub fn host_address() -> std::net::IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    socket
        .connect("192.0.2.255:9")
        .or_else(|_| socket.connect("10.255.255.255:9"))
        .expect("the activator tests need a network interface with a non-loopback address");
    let ip = socket.local_addr().unwrap().ip();
    assert!(!ip.is_loopback() && !ip.is_unspecified(), "{ip}");
    ip
}

/// The process's metrics recorder, installed (as `serve` does) by the first app: every app
/// of this test binary renders the same series, so a test looks only for what it caused.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(modelplane::telemetry::init_metrics)
        .clone()
}

/// The value of the first sample of `name` in a Prometheus text `body` whose line contains
/// every one of `labels` (each written `key="value"`).
pub fn sample(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .find(|line| labels.iter().all(|l| line.contains(l)))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

pub struct TestApp {
    pub base: String,
    /// Sends the platform-admin token.
    pub client: Client,
    pub pool: PgPool,
    /// The activator's port, on every interface (`host_address` reaches it).
    pub activator_port: u16,
    /// The key check's port, on every interface, when `Options::model_keys`.
    pub authz_port: Option<u16>,
    /// Stops the app's background tasks (the change feed) when the test ends.
    _stop: tokio_util::sync::DropGuard,
}

impl TestApp {
    pub async fn spawn(pool: PgPool) -> Self {
        Self::spawn_with(pool, Options::default()).await
    }

    pub async fn spawn_with(pool: PgPool, options: Options) -> Self {
        let stop = tokio_util::sync::CancellationToken::new();
        let hot = modelplane::store::hot::HotConnections::new(pool.clone());
        let ctx = service::Context {
            pool: pool.clone(),
            hot: hot.clone(),
            lookups: modelplane::store::lookups::DeploymentLookups::new(hot.clone()),
            creates: modelplane::store::creates::DeploymentCreates::new(hot),
            access: service::access_cache::AccessCache::start(pool.clone(), stop.clone())
                .await
                .unwrap(),
            limits: SpecLimits {
                max_replicas: 20,
                scale_to_zero: options.scale_to_zero,
                model_keys: options.model_keys,
                ..SpecLimits::default()
            },
            routing: Arc::new(service::RoutingPolicy {
                default_gateway: Some("gateway-system/inference".into()),
                reserved_hostnames: vec!["gateway.example.com".into()],
            }),
            gpu_resource_name: "nvidia.com/gpu".into(),
            load_interval: options.load_interval,
        };
        service::tokens::ensure_bootstrap_token(&ctx, ADMIN_TOKEN)
            .await
            .unwrap();
        let oidc = match options.oidc {
            Some(config) => Some(OidcVerifier::new(config).await.unwrap()),
            None => None,
        };
        let changes =
            service::live::ChangeHub::start_with(pool.clone(), stop.clone(), options.streams)
                .await
                .unwrap();
        let models = service::chat::ModelClient::new(
            options.chat_via,
            std::time::Duration::from_secs(10),
            options.cluster.as_ref().map(|(c, _)| c.client_once.clone()),
            false,
        );
        let activator = service::activation::Activator::new(
            pool.clone(),
            changes.clone(),
            options.activator_max_held,
        );
        let activator_listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
        let activator_port = activator_listener.local_addr().unwrap().port();
        let serving = stop.clone();
        tokio::spawn(modelplane::listener::serve(
            activator_listener,
            api::activator::router(activator, models.clone(), 1 << 20),
            modelplane::listener::ConnectionLimits::default(),
            async move { serving.cancelled().await },
        ));
        let authz_port = if options.model_keys {
            let check = service::key_check::KeyCheck::start(pool.clone(), stop.clone())
                .await
                .unwrap();
            let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let serving = stop.clone();
            tokio::spawn(modelplane::listener::serve(
                listener,
                api::authz::router(check),
                // HTTP/2 too, as the server opens it: Envoy's gRPC ext_authz.
                modelplane::listener::ConnectionLimits {
                    h2c: true,
                    ..Default::default()
                },
                async move { serving.cancelled().await },
            ));
            Some(port)
        } else {
            None
        };
        let state = AppState::new(api::SharedState {
            changes,
            graphql: api::graphql::schema(options.graphql),
            graphiql_assets: crate::repository_root()
                .join("web/graphiql/node_modules")
                .into(),
            web_dir: options.web_dir.clone().into(),
            models,
            auth: Arc::new(Authenticator::new(ctx.clone(), oidc)),
            ctx,
            metrics: metrics_handle(),
            limiter: Arc::new(RateLimiter::new(
                options.rate_per_minute,
                options.rate_burst,
            )),
            metrics_require_auth: options.metrics_require_auth,
            readiness: vec![Arc::new(ReconcilerReadiness {
                cluster_required: options.cluster.as_ref().is_some_and(|(_, gates)| *gates),
                cluster: options.cluster.map(|(cluster, _)| cluster),
                worker: options.worker,
            })
                as Arc<dyn modelplane::domain::ReadinessCheck>]
            .into(),
        });
        let http = HttpConfig {
            cors_origins: options.cors_origins,
            request_timeout_secs: options.request_timeout_secs,
            ..HttpConfig::default()
        };
        let app = api::router(state, &http);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = options.connections;
        let serving = stop.clone();
        tokio::spawn(async move {
            modelplane::listener::serve(
                listener,
                app,
                limits,
                async move { serving.cancelled().await },
            )
            .await
        });
        Self {
            base: format!("http://{addr}"),
            client: client_with_token(Some(ADMIN_TOKEN)),
            pool,
            activator_port,
            authz_port,
            _stop: stop.drop_guard(),
        }
    }

    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.client.request(method, format!("{}{path}", self.base))
    }

    /// A request with another credential (or none).
    pub fn request_as(&self, token: Option<&str>, method: Method, path: &str) -> RequestBuilder {
        client_with_token(token).request(method, format!("{}{path}", self.base))
    }

    /// Creates a token with `role` on `project` and returns its secret.
    pub async fn token_for(&self, project: &str, name: &str, role: &str) -> String {
        let response = self
            .post_json(
                &format!("/api/v1/projects/{project}/tokens"),
                &json!({"name": name, "role": role}),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let body: Value = response.json().await.unwrap();
        body["secret"].as_str().unwrap().to_owned()
    }

    /// Revokes the project token named `name` (it must exist and be live).
    #[allow(dead_code)]
    pub async fn revoke_token(&self, project: &str, name: &str) {
        let list: Value = self
            .get(&format!("/api/v1/projects/{project}/tokens"))
            .await
            .json()
            .await
            .unwrap();
        let id = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let revoked = self
            .request(
                Method::DELETE,
                &format!("/api/v1/projects/{project}/tokens/{id}"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(revoked.status(), StatusCode::OK);
    }

    /// Creates a platform-admin token and returns its secret.
    pub async fn token_for_platform(&self, name: &str) -> String {
        let response = self
            .post_json("/api/v1/tokens", &json!({"name": name}))
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let body: Value = response.json().await.unwrap();
        body["secret"].as_str().unwrap().to_owned()
    }

    pub async fn get(&self, path: &str) -> Response {
        self.request(Method::GET, path).send().await.unwrap()
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Response {
        self.request(Method::POST, path)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn patch(&self, path: &str, body: &Value, if_match: Option<&str>) -> Response {
        let mut req = self
            .request(Method::PATCH, path)
            .header("content-type", "application/merge-patch+json")
            .body(body.to_string());
        if let Some(tag) = if_match {
            req = req.header("if-match", tag);
        }
        req.send().await.unwrap()
    }

    /// Creates project `name` and returns its JSON.
    pub async fn create_project(&self, name: &str) -> Value {
        let response = self
            .post_json("/api/v1/projects", &json!({ "name": name }))
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json().await.unwrap()
    }

    /// Creates deployment `name` in `project` with [`valid_spec`] and returns the response.
    pub async fn create_deployment(&self, project: &str, name: &str) -> Response {
        self.post_json(
            &format!("/api/v1/projects/{project}/deployments"),
            &json!({ "name": name, "spec": valid_spec() }),
        )
        .await
    }

    pub async fn count_rows(&self, table: &'static str) -> i64 {
        // Only ever called with literal table names from the tests.
        let sql = sqlx::AssertSqlSafe(format!("select count(*) from {table}"));
        sqlx::query_scalar(sql).fetch_one(&self.pool).await.unwrap()
    }
}

fn client_with_token(token: Option<&str>) -> Client {
    modelplane::install_crypto_provider();
    let mut headers = HeaderMap::new();
    if let Some(token) = token {
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
    }
    Client::builder().default_headers(headers).build().unwrap()
}

/// A spec that exercises most fields and is valid.
pub fn valid_spec() -> Value {
    json!({
        "model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct", "secretRef": {"name": "hf-token", "key": "token"}},
        "engine": {"kind": "vllm", "image": "vllm/vllm-openai:v0.11.0", "args": ["--enable-prefix-caching"],
                   "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}], "maxModelLen": 8192, "tensorParallelSize": 1},
        "replicas": 1,
        "resources": {"cpu": "4", "memory": "16Gi", "gpu": {"count": 1, "resourceName": "nvidia.com/gpu", "product": "NVIDIA-L4"}, "sharedMemory": "2Gi"},
        "scheduling": {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        "storage": {"cache": {"sizeLimit": "50Gi"}},
        "probes": {"startupTimeoutSeconds": 1800, "healthPath": "/health"},
        "labels": {"team": "nlp"},
        "annotations": {"example.com/owner": "nlp-team"}
    })
}

/// The `field`s of a problem document's `errors`.
pub fn error_fields(problem: &Value) -> Vec<String> {
    problem["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .map(|e| e["field"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts a problem+json response with `status` and returns its body.
pub async fn expect_problem(response: Response, status: StatusCode) -> Value {
    assert_eq!(response.status(), status, "unexpected status");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(content_type, "application/problem+json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], status.as_u16());
    assert!(
        body["type"]
            .as_str()
            .unwrap()
            .starts_with("urn:modelplane:problem:")
    );
    assert!(body["title"].is_string() && body["detail"].is_string());
    body
}

/// One Server-Sent Event as a client parses it.
#[derive(Debug, Clone)]
#[allow(dead_code)]
pub struct SseEvent {
    pub id: Option<i64>,
    pub event: String,
    pub data: Value,
}

/// Reads a `text/event-stream` response event by event, as curl or EventSource would.
#[allow(dead_code)]
pub struct SseStream {
    response: Response,
    buffer: String,
}

#[allow(dead_code)]
impl SseStream {
    pub fn new(response: Response) -> Self {
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The next event, skipping comments (keep-alives); `None` when the stream ended.
    /// Fails the test when none comes within `within`.
    pub async fn next_within(&mut self, within: std::time::Duration) -> Option<SseEvent> {
        tokio::time::timeout(within, self.next())
            .await
            .expect("an event (or the end of the stream) in time")
    }

    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = SseEvent {
                    id: None,
                    event: "message".into(),
                    data: Value::Null,
                };
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        event.id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event.event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue; // a comment: `: keep-alive`
                }
                event.data = serde_json::from_str(&data).expect("data is JSON");
                return Some(event);
            }
            match self.response.chunk().await {
                Ok(Some(bytes)) => self.buffer.push_str(std::str::from_utf8(&bytes).unwrap()),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Events until one named `name` (returned with those before it).
    pub async fn until(&mut self, name: &str) -> (Vec<SseEvent>, SseEvent) {
        let mut before = Vec::new();
        loop {
            let event = self
                .next_within(std::time::Duration::from_secs(20))
                .await
                .unwrap_or_else(|| panic!("the stream ended before `{name}`: {before:?}"));
            if event.event == name {
                return (before, event);
            }
            before.push(event);
        }
    }
}

/// A `graphql-transport-ws` client, as graphql-ws and Apollo speak it.
#[allow(dead_code)]
pub struct WsClient {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    /// The close frame's code and reason, once the server closed the connection.
    pub closed: Option<(u16, String)>,
}

#[allow(dead_code)]
impl WsClient {
    pub async fn connect(app: &TestApp, token: &str) -> Result<Self, Value> {
        let url = format!("{}/graphql/ws", app.base.replace("http://", "ws://"));
        let mut request =
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
                .unwrap();
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "graphql-transport-ws".parse().unwrap(),
        );
        let (socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
        assert_eq!(
            response.headers()["sec-websocket-protocol"],
            "graphql-transport-ws"
        );
        let mut client = Self {
            socket,
            closed: None,
        };
        client
            .send(json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {token}")}}))
            .await;
        match client.next().await {
            Some(message) if message["type"] == "connection_ack" => Ok(client),
            Some(message) => Err(message),
            None => Err(Value::Null),
        }
    }

    pub async fn send(&mut self, message: Value) {
        let text = tokio_tungstenite::tungstenite::Message::Text(message.to_string().into());
        futures::SinkExt::send(&mut self.socket, text)
            .await
            .unwrap();
    }

    /// The next JSON message; `None` when the server closed the connection.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            let next = futures::StreamExt::next(&mut self.socket);
            let message = tokio::time::timeout(std::time::Duration::from_secs(20), next)
                .await
                .expect("a message in time")?;
            match message.ok()? {
                tokio_tungstenite::tungstenite::Message::Text(text) => {
                    return Some(serde_json::from_str(&text).unwrap());
                }
                tokio_tungstenite::tungstenite::Message::Close(frame) => {
                    self.closed = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                    return None;
                }
                _ => continue,
            }
        }
    }
}

/// Polls `check` until it holds; fails naming `what` after 20 s.
#[allow(dead_code)]
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
