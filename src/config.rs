//! Command line and environment configuration: every option is also an environment variable.

use std::fmt;
use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "modelplane",
    version,
    about = "A control plane for LLM and model servers on Kubernetes",
    long_about = "modelplane stores model deployments in Postgres and serves them through a REST API.\n\
                  Every option can also be set with the environment variable shown in brackets."
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogConfig,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply pending database migrations, then serve the API.
    Serve(Box<ServeConfig>),
    /// Apply pending database migrations and exit.
    Migrate(DatabaseConfig),
    /// Print the OpenAPI document generated from the handlers.
    Openapi,
    /// Print the GraphQL schema (SDL).
    GraphqlSchema,
}

#[derive(Debug, Clone, Args)]
pub struct LogConfig {
    /// Log output format.
    #[arg(long, env = "MODELPLANE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Log filter in `tracing` syntax, e.g. `info` or `modelplane=debug,sqlx=warn`.
    #[arg(long, env = "MODELPLANE_LOG", default_value = "info", global = true)]
    pub log: String,
    /// Export traces over OTLP/HTTP to this collector (e.g. `http://otel-collector:4318`;
    /// spans go to `<endpoint>/v1/traces`). Off when unset.
    #[arg(long, env = "MODELPLANE_OTLP_ENDPOINT", global = true)]
    pub otlp_endpoint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct DatabaseConfig {
    /// Postgres connection URL, e.g. `postgres://modelplane@127.0.0.1:5432/modelplane`.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Secret,
    /// Largest number of pooled database connections.
    #[arg(long, env = "MODELPLANE_DB_MAX_CONNECTIONS", default_value_t = 10)]
    pub db_max_connections: u32,
    /// Database connections of the reconciler worker's own pool (when the process runs
    /// it), which API requests cannot take: a flood of requests cannot stop reconciling.
    #[arg(long, env = "MODELPLANE_DB_WORKER_CONNECTIONS", default_value_t = 5)]
    pub db_worker_connections: u32,
}

#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    #[command(flatten)]
    pub database: DatabaseConfig,
    /// Address the HTTP server listens on.
    #[arg(long, env = "MODELPLANE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub http: HttpConfig,
    /// Largest `replicas` a deployment may ask for.
    #[arg(long, env = "MODELPLANE_MAX_REPLICAS", default_value_t = 100)]
    pub max_replicas: i64,
    /// Accept literal values for env vars named like credentials (`HF_TOKEN`, `*_KEY`,
    /// `*_TOKEN`, `*_SECRET`, `*_PASSWORD`). Off: such values must come from a Secret.
    #[arg(long, env = "MODELPLANE_ALLOW_PLAINTEXT_CREDENTIALS")]
    pub allow_plaintext_credentials: bool,
    #[command(flatten)]
    pub auth: AuthConfig,
    /// What this process runs: the API, the reconciler worker, or both.
    #[arg(long, env = "MODELPLANE_ROLE", value_enum, default_value_t = ServeRole::All)]
    pub role: ServeRole,
    #[command(flatten)]
    pub cluster: ClusterConfig,
    #[command(flatten)]
    pub reconciler: ReconcilerConfig,
    #[command(flatten)]
    pub load: LoadConfig,
    #[command(flatten)]
    pub activator: ActivatorConfig,
    #[command(flatten)]
    pub keys: KeysConfig,
}

/// The model key check the Gateway calls (the routes' `ExternalAuth` filter).
#[derive(Debug, Clone, Args)]
pub struct KeysConfig {
    /// Port of the key check's listener (Envoy ext_authz's HTTP protocol, on every
    /// interface: the Gateway must reach it). Unset: no key check here.
    #[arg(long, env = "MODELPLANE_AUTHZ_PORT")]
    pub authz_port: Option<u16>,
    /// How the routes' `ExternalAuth` filter calls it: `http` (the filter's HTTP protocol,
    /// the deployment named in the check's path) or `grpc` (Envoy's ext_authz v3 `Check`,
    /// the deployment found from the request's host and path). The listener speaks both.
    #[arg(long, env = "MODELPLANE_AUTHZ_PROTOCOL", default_value = "http", value_parser = ["http", "grpc"])]
    pub authz_protocol: String,
}

/// The activator: where requests to a deployment at zero replicas wait while one starts.
/// Unset port: no activator, and `minReplicas: 0` is refused.
#[derive(Debug, Clone, Args)]
pub struct ActivatorConfig {
    /// Port of the activator's listener (on every interface: the Gateway must reach it). The
    /// API serves it; the worker writes it in each deployment's activator EndpointSlice.
    #[arg(long, env = "MODELPLANE_ACTIVATOR_PORT")]
    pub activator_port: Option<u16>,
    /// The activator's addresses, as the Gateway reaches them (the API processes' pod IPs,
    /// or this machine's network address): comma-separated IPs. Loopback and link-local
    /// addresses are refused by Kubernetes in an EndpointSlice.
    #[arg(long, env = "MODELPLANE_ACTIVATOR_ADDRESSES", value_delimiter = ',')]
    pub activator_addresses: Vec<std::net::IpAddr>,
    /// In a cluster: `namespace/name` of the Service in front of the API pods' activator
    /// port; the worker follows its ready endpoints instead of fixed addresses.
    #[arg(long, env = "MODELPLANE_ACTIVATOR_SERVICE")]
    pub activator_service: Option<String>,
    /// Most requests held per deployment per process; more answer 429.
    #[arg(long, env = "MODELPLANE_ACTIVATOR_MAX_HELD", default_value_t = 1000)]
    pub activator_max_held: usize,
    /// Largest request body the activator holds; larger ones answer 413.
    #[arg(long, env = "MODELPLANE_ACTIVATOR_MAX_BODY_BYTES", default_value_t = 4 << 20)]
    pub activator_max_body_bytes: usize,
}

impl ActivatorConfig {
    /// Whether deployments may scale to zero: the activator listens and can be reached.
    pub fn enabled(&self) -> bool {
        self.activator_port.is_some() && self.addressed()
    }

    /// Whether the Gateway can be told where the API processes are (fixed addresses or the
    /// Service in front of them): the activator's and the key check's addresses.
    pub fn addressed(&self) -> bool {
        !self.activator_addresses.is_empty() || self.activator_service.is_some()
    }

    /// The Service the worker follows, as (namespace, name), when one is set.
    pub fn service(&self) -> Option<(String, String)> {
        let (namespace, name) = self.activator_service.as_deref()?.split_once('/')?;
        Some((namespace.to_owned(), name.to_owned()))
    }
}

/// How the worker reads what the model servers serve (`status.load` and the metric series).
#[derive(Debug, Clone, Args)]
pub struct LoadConfig {
    /// Seconds between readings of the model servers' metrics; 0 turns collection off.
    #[arg(long, env = "MODELPLANE_LOAD_INTERVAL_SECS", default_value_t = 15)]
    pub load_interval_secs: u64,
    /// A Prometheus to query (PromQL over its HTTP API) instead of reading the pods; a
    /// PodMonitor is applied per deployment when the cluster serves that kind.
    #[arg(long, env = "MODELPLANE_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,
    /// How pods are read without Prometheus: `direct` (the pod IP, from inside the
    /// cluster), `proxy` (the API server's pods/proxy), or `auto` (direct in a cluster,
    /// proxy with a kubeconfig).
    #[arg(long, env = "MODELPLANE_LOAD_SCRAPE", value_enum, default_value_t = ScrapeVia::Auto)]
    pub load_scrape: ScrapeVia,
    /// Seconds one pod's (or Prometheus') answer may take.
    #[arg(long, env = "MODELPLANE_LOAD_TIMEOUT_SECS", default_value_t = 5)]
    pub load_timeout_secs: u64,
    /// Most bytes read of one pod's metrics page; a larger page is reported, not read.
    #[arg(long, env = "MODELPLANE_LOAD_MAX_BYTES", default_value_t = 8 << 20)]
    pub load_max_bytes: usize,
}

/// How pods' metrics pages are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScrapeVia {
    Auto,
    Direct,
    Proxy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ServeRole {
    /// The HTTP API only.
    Api,
    /// The reconciler worker only (health endpoints are still served).
    Worker,
    /// Both, in one process.
    All,
}

impl ServeRole {
    pub fn runs_worker(self) -> bool {
        matches!(self, Self::Worker | Self::All)
    }
}

/// Which cluster the worker drives: named explicitly, never guessed.
#[derive(Debug, Clone, Args)]
pub struct ClusterConfig {
    /// Kubeconfig of the cluster to drive. Without it the worker uses in-cluster
    /// credentials, and refuses to start outside a cluster.
    #[arg(long, env = "MODELPLANE_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Context in the kubeconfig (its current context when omitted).
    #[arg(long, env = "MODELPLANE_KUBE_CONTEXT")]
    pub context: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ReconcilerConfig {
    /// Names this installation on every object it makes, so installations sharing a cluster
    /// never touch each other's objects.
    #[arg(long, env = "MODELPLANE_INSTALLATION", default_value = "default")]
    pub installation: String,
    /// Default Gateway for routes, `namespace/name[/section]`; none: no routes are made.
    #[arg(long, env = "MODELPLANE_GATEWAY")]
    pub gateway: Option<String>,
    /// Hostnames no project may route on a shared Gateway (comma-separated; `*.suffix`
    /// reserves a whole domain). List the shared Gateway's own hostnames here, or a project
    /// could take every path under them.
    #[arg(long, env = "MODELPLANE_RESERVED_HOSTNAMES", value_delimiter = ',')]
    pub reserved_hostnames: Vec<String>,
    /// Default image of the vllm engine.
    #[arg(
        long,
        env = "MODELPLANE_IMAGE_VLLM",
        default_value = "vllm/vllm-openai:v0.11.0"
    )]
    pub image_vllm: String,
    /// Default image of the vllm engine for a model that spans nodes (`nodesPerReplica`):
    /// v0.11.1 or later, whose multiprocessing backend runs one model over several nodes
    /// (`--nnodes`, `--node-rank`, `--headless`; v0.11.0 has no such flags).
    #[arg(
        long,
        env = "MODELPLANE_IMAGE_VLLM_MULTINODE",
        default_value = "vllm/vllm-openai:v0.11.1"
    )]
    pub image_vllm_multinode: String,
    /// Default image of the sglang engine.
    #[arg(
        long,
        env = "MODELPLANE_IMAGE_SGLANG",
        default_value = "lmsysorg/sglang:v0.5.4"
    )]
    pub image_sglang: String,
    /// Default image of the tgi engine.
    #[arg(
        long,
        env = "MODELPLANE_IMAGE_TGI",
        default_value = "ghcr.io/huggingface/text-generation-inference:3.3.6"
    )]
    pub image_tgi: String,
    /// Image of the `sim` engine (an OpenAI-compatible simulator).
    #[arg(
        long,
        env = "MODELPLANE_IMAGE_SIM",
        default_value = "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1"
    )]
    pub image_sim: String,
    /// GPU resource name when a spec names none.
    #[arg(
        long,
        env = "MODELPLANE_GPU_RESOURCE_NAME",
        default_value = "nvidia.com/gpu"
    )]
    pub gpu_resource_name: String,
    /// Node label holding the GPU product, for `resources.gpu.product`.
    #[arg(
        long,
        env = "MODELPLANE_GPU_PRODUCT_LABEL",
        default_value = "nvidia.com/gpu.product"
    )]
    pub gpu_product_label: String,
    /// Image of the init container that copies `s3://` models and of the sidecar that
    /// fetches `s3://` LoRA adapters (it needs `aws` and `/bin/sh`).
    #[arg(
        long,
        env = "MODELPLANE_S3_DOWNLOADER_IMAGE",
        default_value = "amazon/aws-cli:2.22.0"
    )]
    pub s3_downloader_image: String,
    /// Image of the endpoint picker (EPP) of deployments in InferencePool mode.
    #[arg(
        long,
        env = "MODELPLANE_EPP_IMAGE",
        default_value = "registry.k8s.io/gateway-api-inference-extension/epp:v1.4.0"
    )]
    pub epp_image: String,
    /// Image of the endpoint picker of disaggregated deployments: llm-d's, whose plugins
    /// include the prefill/decode profiles the upstream image lacks.
    #[arg(
        long,
        env = "MODELPLANE_PD_EPP_IMAGE",
        default_value = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.8.0"
    )]
    pub pd_epp_image: String,
    /// Image of the routing sidecar on the decode pods of disaggregated deployments.
    #[arg(
        long,
        env = "MODELPLANE_PD_SIDECAR_IMAGE",
        default_value = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.8.0"
    )]
    pub pd_sidecar_image: String,
    /// Default time a model may take to load, in seconds.
    #[arg(long, env = "MODELPLANE_STARTUP_TIMEOUT_SECS", default_value_t = 1800)]
    pub startup_timeout_secs: i64,
    /// CPU a GPU engine's pod requests when its spec names none.
    #[arg(long, env = "MODELPLANE_DEFAULT_CPU_REQUEST", default_value = "2")]
    pub default_cpu_request: String,
    /// Memory a GPU engine's pod requests when its spec names none.
    #[arg(long, env = "MODELPLANE_DEFAULT_MEMORY_REQUEST", default_value = "8Gi")]
    pub default_memory_request: String,
    /// Seconds a model server pod may take to shut down, unless its spec says otherwise.
    #[arg(long, env = "MODELPLANE_TERMINATION_GRACE_SECS", default_value_t = 120)]
    pub termination_grace_secs: i64,
    /// Seconds a stopping pod keeps serving while traffic moves away, unless its spec says
    /// otherwise.
    #[arg(long, env = "MODELPLANE_DRAIN_SECS", default_value_t = 10)]
    pub drain_secs: i64,
    /// Seconds a pod may stay unschedulable before the deployment is Failed.
    #[arg(
        long,
        env = "MODELPLANE_UNSCHEDULABLE_BUDGET_SECS",
        default_value_t = 300
    )]
    pub unschedulable_budget_secs: i64,
    /// Restarts after which a crash loop makes the deployment Failed.
    #[arg(long, env = "MODELPLANE_CRASH_RESTARTS", default_value_t = 3)]
    pub crash_restarts: i32,
    /// This worker's id in leases (default: host name and process id).
    #[arg(long, env = "MODELPLANE_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Seconds a claimed work item stays leased to one worker.
    #[arg(long, env = "MODELPLANE_LEASE_SECS", default_value_t = 30)]
    pub lease_secs: u64,
    /// Seconds between full resyncs (a safety net; watches do the real work).
    #[arg(long, env = "MODELPLANE_RESYNC_SECS", default_value_t = 300)]
    pub resync_secs: u64,
    /// Records reconciled at once.
    #[arg(long, env = "MODELPLANE_WORKER_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,
    /// Seconds clean-up waits for a Gateway that has never reported on a route before it
    /// removes the objects the route no longer uses (a canary's, InferencePool mode's).
    #[arg(long, env = "MODELPLANE_GATEWAY_SILENCE_SECS", default_value_t = 300)]
    pub gateway_silence_secs: u64,
}

#[derive(Debug, Clone, Args)]
pub struct AuthConfig {
    /// A platform-admin token stored on first start (when no live platform-admin token
    /// exists), so a fresh install can be used at once. At least 32 characters.
    #[arg(long, env = "MODELPLANE_BOOTSTRAP_TOKEN", hide_env_values = true)]
    pub bootstrap_token: Option<Secret>,
    /// OIDC issuer (`iss`) accepted in user tokens; enables OIDC together with the audience and keys.
    #[arg(long, env = "MODELPLANE_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// OIDC audience (`aud`) user tokens must carry.
    #[arg(long, env = "MODELPLANE_OIDC_AUDIENCE")]
    pub oidc_audience: Option<String>,
    /// JWKS file with the provider's signing keys (re-read when an unknown key id appears).
    #[arg(
        long,
        env = "MODELPLANE_OIDC_JWKS_FILE",
        conflicts_with = "oidc_jwks_url"
    )]
    pub oidc_jwks_file: Option<std::path::PathBuf>,
    /// JWKS URL with the provider's signing keys (re-fetched when an unknown key id appears).
    #[arg(long, env = "MODELPLANE_OIDC_JWKS_URL")]
    pub oidc_jwks_url: Option<String>,
    /// Claim that names the user in role bindings and audit logs.
    #[arg(long, env = "MODELPLANE_OIDC_USERNAME_CLAIM", default_value = "sub")]
    pub oidc_username_claim: String,
    /// Claim listing the user's groups.
    #[arg(long, env = "MODELPLANE_OIDC_GROUPS_CLAIM", default_value = "groups")]
    pub oidc_groups_claim: String,
    /// The portal's OIDC client id (a public client: Authorization Code with PKCE, no
    /// secret). When set with the rest of OIDC, the portal offers single sign-on.
    #[arg(long, env = "MODELPLANE_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,
    /// Scopes the portal asks the identity provider for (comma-separated). Add the
    /// provider's groups scope if it needs one, and `offline_access` for refresh tokens
    /// where the provider gives them only then.
    #[arg(
        long,
        env = "MODELPLANE_OIDC_SCOPES",
        value_delimiter = ',',
        default_value = "openid,profile,email"
    )]
    pub oidc_scopes: Vec<String>,
    /// Groups whose members are platform admins (comma-separated).
    #[arg(
        long,
        env = "MODELPLANE_OIDC_PLATFORM_ADMIN_GROUPS",
        value_delimiter = ','
    )]
    pub oidc_platform_admin_groups: Vec<String>,
    /// Require a platform-admin credential for `/metrics` (open by default, for scrapers).
    #[arg(long, env = "MODELPLANE_METRICS_REQUIRE_AUTH", default_value_t = false)]
    pub metrics_require_auth: bool,
    /// Requests per minute allowed per token or user (and per client address for unauthenticated requests).
    #[arg(long, env = "MODELPLANE_RATE_LIMIT_PER_MINUTE", default_value_t = 600)]
    pub rate_limit_per_minute: u32,
    /// Requests allowed in a burst above the steady rate.
    #[arg(long, env = "MODELPLANE_RATE_LIMIT_BURST", default_value_t = 100)]
    pub rate_limit_burst: u32,
}

#[derive(Debug, Clone, Args)]
pub struct HttpConfig {
    /// Browser origins allowed to call the API (comma-separated); none means same-origin only.
    #[arg(long, env = "MODELPLANE_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,
    /// Seconds a request may take before it is answered with 503.
    #[arg(long, env = "MODELPLANE_REQUEST_TIMEOUT_SECS", default_value_t = 30)]
    pub request_timeout_secs: u64,
    /// Where GraphiQL's npm packages are installed (`scripts/graphiql.sh` puts them here).
    #[arg(
        long,
        env = "MODELPLANE_GRAPHIQL_DIR",
        default_value = "web/graphiql/node_modules"
    )]
    pub graphiql_dir: std::path::PathBuf,
    /// Answer GraphQL introspection queries (GraphiQL needs them).
    #[arg(long, env = "MODELPLANE_GRAPHQL_INTROSPECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub graphql_introspection: bool,
    /// Aliases one GraphQL document may use.
    #[arg(long, env = "MODELPLANE_GRAPHQL_MAX_ALIASES", default_value_t = 50)]
    pub graphql_max_aliases: usize,
    /// Mutation fields one GraphQL document may hold; each counts against the rate limit.
    #[arg(long, env = "MODELPLANE_GRAPHQL_MAX_MUTATIONS", default_value_t = 20)]
    pub graphql_max_mutations: usize,
    /// Seconds a client has to send a request's headers; an idle keep-alive connection is
    /// closed after the same time.
    #[arg(
        long,
        env = "MODELPLANE_HEADER_READ_TIMEOUT_SECS",
        default_value_t = 10
    )]
    pub header_read_timeout_secs: u64,
    /// Connections open at once on the API's port (past it, new ones are closed at once).
    #[arg(long, env = "MODELPLANE_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// Connections open at once from one client address.
    #[arg(
        long,
        env = "MODELPLANE_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 256
    )]
    pub max_connections_per_address: usize,
    /// Watches (SSE) and GraphQL subscriptions open at once per credential (token or user).
    #[arg(long, env = "MODELPLANE_MAX_STREAMS_PER_CALLER", default_value_t = 32)]
    pub max_streams_per_caller: usize,
    /// Watches and GraphQL subscriptions open at once from one client address.
    #[arg(
        long,
        env = "MODELPLANE_MAX_STREAMS_PER_ADDRESS",
        default_value_t = 128
    )]
    pub max_streams_per_address: usize,
    /// Seconds a watch or subscription whose client reads nothing is kept (its queue full);
    /// then it ends, and the client resumes from its last sequence number.
    #[arg(long, env = "MODELPLANE_STREAM_SLOW_CLIENT_SECS", default_value_t = 30)]
    pub stream_slow_client_secs: u64,
    /// The built portal (`web/dist`, made by `scripts/portal.sh`), served at `/`.
    #[arg(long, env = "MODELPLANE_WEB_DIR", default_value = "web/dist")]
    pub web_dir: std::path::PathBuf,
    /// How the portal's "try it" calls reach a deployment's own Service: `api-server`
    /// (through the Kubernetes API's service proxy; modelplane outside the cluster) or
    /// `cluster` (its in-cluster DNS name; modelplane in the cluster).
    #[arg(long, env = "MODELPLANE_CHAT_VIA", value_enum, default_value_t = ChatVia::ApiServer)]
    pub chat_via: ChatVia,
    /// Let "try it" (with `cluster`) connect to loopback and link-local addresses, which it
    /// refuses by default (cloud metadata services live there).
    #[arg(
        long,
        env = "MODELPLANE_CHAT_ALLOW_LOCAL_ADDRESSES",
        default_value_t = false
    )]
    pub chat_allow_local_addresses: bool,
    /// Seconds a "try it" call may wait for the model (less than the request timeout).
    #[arg(long, env = "MODELPLANE_CHAT_TIMEOUT_SECS", default_value_t = 25)]
    pub chat_timeout_secs: u64,
    /// On SIGTERM: seconds `/readyz` answers 503 while requests are still served, so load
    /// balancers and Endpoints stop sending new ones before the listener closes.
    #[arg(long, env = "MODELPLANE_SHUTDOWN_DRAIN_SECS", default_value_t = 5)]
    pub shutdown_drain_secs: u64,
    /// On SIGTERM, after the drain: seconds in-flight requests (and the worker's reconciles)
    /// may take to finish before the process stops anyway.
    #[arg(long, env = "MODELPLANE_SHUTDOWN_TIMEOUT_SECS", default_value_t = 20)]
    pub shutdown_timeout_secs: u64,
}

/// Which of a deployment's URLs modelplane calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ChatVia {
    /// The Kubernetes API server's service proxy, with the cluster credentials modelplane
    /// already holds: works wherever the API server is reachable (modelplane on a laptop
    /// beside the emulator, or outside the cluster).
    ApiServer,
    /// The Service's in-cluster DNS name: for modelplane running inside the cluster.
    Cluster,
}

impl HttpConfig {
    pub fn connection_limits(&self) -> crate::listener::ConnectionLimits {
        crate::listener::ConnectionLimits {
            header_read_timeout: std::time::Duration::from_secs(
                self.header_read_timeout_secs.max(1),
            ),
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_address,
            h2c: false,
        }
    }

    pub fn stream_limits(&self) -> crate::service::live::StreamLimits {
        crate::service::live::StreamLimits {
            per_caller: self.max_streams_per_caller,
            per_address: self.max_streams_per_address,
            slow_client: std::time::Duration::from_secs(self.stream_slow_client_secs.max(1)),
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            cors_origins: Vec::new(),
            request_timeout_secs: 30,
            graphiql_dir: "web/graphiql/node_modules".into(),
            graphql_introspection: true,
            graphql_max_aliases: 50,
            graphql_max_mutations: 20,
            header_read_timeout_secs: 10,
            max_connections: 4096,
            max_connections_per_address: 256,
            max_streams_per_caller: 32,
            max_streams_per_address: 128,
            stream_slow_client_secs: 30,
            web_dir: "web/dist".into(),
            chat_via: ChatVia::ApiServer,
            chat_allow_local_addresses: false,
            chat_timeout_secs: 25,
            shutdown_drain_secs: 5,
            shutdown_timeout_secs: 20,
        }
    }
}

/// A configuration value that must not appear in logs (`Debug` prints `[redacted]`).
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}
