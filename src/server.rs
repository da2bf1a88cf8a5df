//! What the process runs: `serve` (the API, the reconciler worker or both, by `--role`)
//! and `migrate`.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::api::rate_limit::RateLimiter;
use crate::api::{self, AppState};
use crate::auth::oidc::JwksSource;
use crate::auth::{Authenticator, OidcConfig, OidcVerifier};
use crate::config::{AuthConfig, DatabaseConfig, ReconcilerConfig, ServeConfig};
use crate::domain::SpecLimits;
use crate::domain::{CheckResult, EngineDefaults, ReadinessCheck};
use crate::reconciler::cluster::{self, ClusterError};
use crate::reconciler::desired::BuildConfig;
use crate::reconciler::health::ReconcilerReadiness;
use crate::reconciler::status::Budgets;
use crate::reconciler::worker::{Worker, WorkerConfig};
use crate::service;
use crate::store;

/// Why the process could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot connect to the database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("cannot apply migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(
        "cannot listen on {addr} (set MODELPLANE_LISTEN or --listen to another address): {source}"
    )]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Serve(std::io::Error),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot store the bootstrap token: {0}")]
    Bootstrap(#[from] service::ServiceError),
    #[error("{0}")]
    Cluster(#[from] ClusterError),
}

/// `modelplane migrate`
pub async fn migrate(config: &DatabaseConfig) -> Result<(), StartupError> {
    let pool = store::connect(config.database_url.expose(), 2).await?;
    store::migrate(&pool).await?;
    tracing::info!("migrations applied");
    Ok(())
}

/// `modelplane serve`: migrate, then serve HTTP until SIGINT or SIGTERM.
pub async fn serve(config: ServeConfig, metrics: PrometheusHandle) -> Result<(), StartupError> {
    // The port first: a process that cannot listen must not start the worker or anything
    // else that it would have to stop again.
    let listener =
        TcpListener::bind(config.listen)
            .await
            .map_err(|source| StartupError::Listen {
                addr: config.listen,
                source,
            })?;
    let addr = listener.local_addr().map_err(StartupError::Serve)?;
    let pool = store::connect(
        config.database.database_url.expose(),
        config.database.db_max_connections,
    )
    .await?;
    store::migrate(&pool).await?;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let draining = Arc::new(Draining::default());
    let ctx = service_context(&config, &pool, &shutdown).await?;
    bootstrap_token(&config, &ctx).await?;
    let oidc = oidc_verifier(&config.auth).await?;
    // The worker drives only a cluster named explicitly; the API needs none.
    let worker_config = worker_config(
        &config.reconciler,
        &config.load,
        &config.activator,
        &config.keys,
    );
    let cluster = if config.role.runs_worker() || config.cluster.kubeconfig.is_some() {
        let cluster = cluster::connect(
            config.cluster.kubeconfig.as_ref(),
            config.cluster.context.as_deref(),
            Some(&worker_config.worker_id),
        )
        .await?;
        tracing::info!(cluster = %cluster.description, "Kubernetes cluster");
        Some(cluster)
    } else {
        None
    };
    let (worker, worker_health) = match (&cluster, config.role.runs_worker()) {
        (Some(cluster), true) => {
            let (worker, health) =
                start_worker(&config, cluster.clone(), worker_config, &shutdown).await?;
            (Some(worker), Some(health))
        }
        _ => (None, None),
    };
    let changes = crate::service::live::ChangeHub::start_with(
        pool.clone(),
        shutdown.clone(),
        config.http.stream_limits(),
    )
    .await?;
    let hub = changes.clone();
    let models = crate::service::chat::ModelClient::new(
        config.http.chat_via,
        std::time::Duration::from_secs(config.http.chat_timeout_secs),
        cluster.as_ref().map(|c| c.client_once.clone()),
        config.http.chat_allow_local_addresses,
    );
    if config.role != crate::config::ServeRole::Worker {
        start_activator(&config, &ctx, &changes, &models, &shutdown).await?;
        start_key_check(&config, &ctx, &shutdown).await?;
    }
    let state = AppState::new(crate::api::SharedState {
        auth: Arc::new(Authenticator::new(ctx.clone(), oidc)),
        changes,
        graphql: crate::api::graphql::schema(crate::api::graphql::GraphqlLimits {
            introspection: config.http.graphql_introspection,
            max_aliases: config.http.graphql_max_aliases,
            max_mutations: config.http.graphql_max_mutations,
            ..Default::default()
        }),
        graphiql_assets: config.http.graphiql_dir.clone().into(),
        web_dir: config.http.web_dir.clone().into(),
        models: models.clone(),
        ctx: ctx.clone(),
        metrics,
        limiter: Arc::new(RateLimiter::new(
            config.auth.rate_limit_per_minute,
            config.auth.rate_limit_burst,
        )),
        metrics_require_auth: config.auth.metrics_require_auth,
        readiness: vec![
            draining.clone() as Arc<dyn ReadinessCheck>,
            Arc::new(ReconcilerReadiness {
                cluster,
                cluster_required: config.role == crate::config::ServeRole::Worker,
                worker: worker_health,
            }),
        ]
        .into(),
    });
    let app = if config.role == crate::config::ServeRole::Worker {
        api::health_router(state)
    } else {
        api::router(state, &config.http)
    };
    tracing::info!(%addr, "modelplane API listening: REST at http://{addr}/api/v1, reference at http://{addr}/api/docs");
    // SIGTERM: readiness goes false while requests are still served (the drain), then the
    // listener closes, watches and subscriptions end, the worker stops claiming, and what is
    // in flight gets `shutdown_timeout` to finish.
    let stop = shutdown.clone();
    let drain = Duration::from_secs(config.http.shutdown_drain_secs);
    let grace = Duration::from_secs(config.http.shutdown_timeout_secs);
    let flag = draining.clone();
    let served = crate::listener::serve(
        listener,
        app,
        config.http.connection_limits(),
        async move {
            shutdown_signal().await;
            flag.start();
            tracing::info!(drain = ?drain, "shutting down: readiness is false; still serving while load balancers notice");
            tokio::time::sleep(drain).await;
            tracing::info!(grace = ?grace, "shutting down: no new connections; finishing requests in flight");
            stop.cancel();
        },
    );
    let served = tokio::select! {
        () = served => Ok(()),
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(grace = ?grace, "requests still in flight after the shutdown timeout; stopping anyway");
            Ok(())
        }
    };
    shutdown.cancel();
    wind_down(&hub, worker, grace).await;
    pool.close().await;
    tracing::info!("stopped");
    served
}

/// Binds a listener for the Gateway on every interface at `port` (the Gateway must reach
/// it); serve it with [`serve_for_gateway`].
async fn bind_for_gateway(port: u16) -> Result<TcpListener, StartupError> {
    let addr = std::net::SocketAddr::from(([0, 0, 0, 0], port));
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartupError::Listen { addr, source })
}

/// Serves `app` on `listener` until `shutdown`. The Gateway is its one client: the
/// per-address cap is the whole cap.
fn serve_for_gateway(
    config: &ServeConfig,
    listener: TcpListener,
    app: axum::Router,
    h2c: bool,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    let limits = crate::listener::ConnectionLimits {
        max_connections_per_address: config.http.max_connections,
        h2c,
        ..config.http.connection_limits()
    };
    let stop = shutdown.clone();
    tokio::spawn(crate::listener::serve(listener, app, limits, async move {
        stop.cancelled().await
    }));
}

/// The activator's listener, when a port is set (the requests it takes are only those the
/// worker's routes send).
async fn start_activator(
    config: &ServeConfig,
    ctx: &service::Context,
    changes: &Arc<crate::service::live::ChangeHub>,
    models: &crate::service::chat::ModelClient,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<(), StartupError> {
    let Some(port) = config.activator.activator_port else {
        return Ok(());
    };
    let listener = bind_for_gateway(port).await?;
    let activator = crate::service::activation::Activator::new(
        ctx.pool.clone(),
        changes.clone(),
        config.activator.activator_max_held,
    );
    let app = crate::api::activator::router(
        activator,
        models.clone(),
        config.activator.activator_max_body_bytes,
    );
    serve_for_gateway(config, listener, app, false, shutdown);
    tracing::info!(port, addresses = ?config.activator.activator_addresses, "activator listening");
    Ok(())
}

/// The key check's listener, when a port is set (the routes' `ExternalAuth` filter).
async fn start_key_check(
    config: &ServeConfig,
    ctx: &service::Context,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<(), StartupError> {
    let Some(port) = config.keys.authz_port else {
        return Ok(());
    };
    let listener = bind_for_gateway(port).await?;
    let check =
        crate::service::key_check::KeyCheck::start(ctx.pool.clone(), shutdown.clone()).await?;
    let keys = check.keys();
    // HTTP/2 too: Envoy's gRPC ext_authz.
    serve_for_gateway(
        config,
        listener,
        crate::api::authz::router(check),
        true,
        shutdown,
    );
    tracing::info!(port, keys, "key check listening");
    Ok(())
}

/// The service layer's context: the pools and batchers over Postgres, the access cache and
/// the policies every request applies.
async fn service_context(
    config: &ServeConfig,
    pool: &sqlx::PgPool,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<service::Context, StartupError> {
    let hot = crate::store::hot::HotConnections::new(pool.clone());
    Ok(service::Context {
        pool: pool.clone(),
        hot: hot.clone(),
        lookups: crate::store::lookups::DeploymentLookups::new(hot.clone()),
        creates: crate::store::creates::DeploymentCreates::new(hot),
        access: service::access_cache::AccessCache::start(pool.clone(), shutdown.clone()).await?,
        limits: SpecLimits {
            max_replicas: config.max_replicas,
            allow_plaintext_credentials: config.allow_plaintext_credentials,
            scale_to_zero: config.activator.enabled(),
            model_keys: config.keys.authz_port.is_some() && config.activator.addressed(),
        },
        routing: Arc::new(service::RoutingPolicy {
            default_gateway: config.reconciler.gateway.clone(),
            reserved_hostnames: config
                .reconciler
                .reserved_hostnames
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
        }),
        gpu_resource_name: config.reconciler.gpu_resource_name.as_str().into(),
        load_interval: Duration::from_secs(config.load.load_interval_secs.max(1)),
    })
}

/// Stores `MODELPLANE_BOOTSTRAP_TOKEN` as a platform-admin token, when it is set.
async fn bootstrap_token(config: &ServeConfig, ctx: &service::Context) -> Result<(), StartupError> {
    let Some(token) = &config.auth.bootstrap_token else {
        return Ok(());
    };
    if token.expose().len() < 32 {
        return Err(StartupError::Config(
            "MODELPLANE_BOOTSTRAP_TOKEN must be at least 32 characters".into(),
        ));
    }
    if service::tokens::ensure_bootstrap_token(ctx, token.expose()).await? {
        tracing::info!("bootstrap platform-admin token stored from configuration");
    }
    Ok(())
}

type WorkerTask = tokio::task::JoinHandle<Result<(), sqlx::Error>>;

/// Starts the reconciler on a pool of its own: API requests, however many, cannot take the
/// worker's connections.
async fn start_worker(
    config: &ServeConfig,
    cluster: cluster::Cluster,
    worker_config: crate::reconciler::worker::WorkerConfig,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<(WorkerTask, Arc<crate::reconciler::health::WorkerHealth>), StartupError> {
    let worker_pool = store::connect(
        config.database.database_url.expose(),
        config.database.db_worker_connections.max(1),
    )
    .await?;
    let installation = worker_config.build.installation.clone();
    let gpu_resource_name = worker_config.build.engines.gpu_resource_name.clone();
    let worker_id = worker_config.worker_id.clone();
    let client = cluster.client.clone();
    let worker = Worker::new(worker_pool.clone(), cluster, worker_config);
    let health = worker.health();
    // LoRA adapters reach the model servers the way serving metrics are read from them.
    let loader = crate::reconciler::adapters::AdapterLoader::new(
        worker_pool.clone(),
        client.clone(),
        pod_via(config, client.clone())?,
        worker.seen(),
    );
    tokio::spawn(loader.run(shutdown.clone()));
    // An interval of 0 turns the collection off, and with it the autoscaler (its signal).
    if config.load.load_interval_secs > 0 {
        let settings = load_settings(config, installation, client.clone())?;
        let autoscaler = crate::reconciler::autoscaler::Autoscaler::new(
            worker_pool.clone(),
            client.clone(),
            gpu_resource_name,
            &worker_id,
        )
        .with_seen(worker.seen());
        tokio::spawn(
            crate::reconciler::load::Collector::new(worker_pool, client, settings, health.clone())
                .with_pods_from(worker.seen())
                .with_autoscaler(autoscaler)
                .run(shutdown.clone()),
        );
    } else {
        tracing::info!(
            "serving metrics are not collected and nothing is autoscaled (MODELPLANE_LOAD_INTERVAL_SECS=0)"
        );
    }
    Ok((tokio::spawn(worker.run(shutdown.clone())), health))
}

/// How the worker reads serving metrics: from `MODELPLANE_PROMETHEUS_URL` when set, else
/// from each pod (by IP inside the cluster, through the API server outside it).
fn load_settings(
    config: &ServeConfig,
    installation: String,
    client: kube::Client,
) -> Result<crate::reconciler::load::LoadSettings, StartupError> {
    use crate::reconciler::load::{LoadSettings, PromSource, Source};
    let load = &config.load;
    let timeout = Duration::from_secs(load.load_timeout_secs.max(1));
    let source = match &load.prometheus_url {
        Some(url) => Source::Prometheus(
            PromSource::new(url, timeout).map_err(|e| StartupError::Config(e.to_string()))?,
        ),
        None => Source::Pods(pod_via(config, client)?),
    };
    Ok(LoadSettings {
        interval: Duration::from_secs(load.load_interval_secs.max(1)),
        timeout,
        max_bytes: load.load_max_bytes.max(1024),
        source,
        installation,
    })
}

/// How the worker reaches a model server pod (`MODELPLANE_LOAD_SCRAPE`): by its IP inside
/// the cluster, through the API server's pod proxy outside it.
fn pod_via(
    config: &ServeConfig,
    client: kube::Client,
) -> Result<crate::reconciler::load::Via, StartupError> {
    use crate::config::ScrapeVia;
    use crate::reconciler::load::Via;
    let timeout = Duration::from_secs(config.load.load_timeout_secs.max(1));
    let direct = match config.load.load_scrape {
        ScrapeVia::Direct => true,
        ScrapeVia::Proxy => false,
        ScrapeVia::Auto => config.cluster.kubeconfig.is_none(),
    };
    if !direct {
        return Ok(Via::Proxy(client));
    }
    let http = reqwest::Client::builder()
        .connect_timeout(timeout)
        .build()
        .map_err(|e| StartupError::Config(format!("cannot build an HTTP client: {e}")))?;
    Ok(Via::Direct(http))
}

/// After the listener closed: WebSockets get `grace` to close, then the worker to stop.
async fn wind_down(
    hub: &crate::service::live::ChangeHub,
    worker: Option<WorkerTask>,
    grace: Duration,
) {
    if !hub.close_sockets(grace).await {
        tracing::warn!("WebSocket connections still open after the shutdown timeout");
    }
    if let Some(worker) = worker {
        match tokio::time::timeout(grace, worker).await {
            Ok(Ok(Err(err))) => {
                tracing::error!(error = %err, "the reconciler stopped with an error")
            }
            Ok(Err(err)) => tracing::error!(error = %err, "the reconciler panicked"),
            Ok(Ok(Ok(()))) => {}
            Err(_) => tracing::warn!("the reconciler did not stop within the shutdown timeout"),
        }
    }
}

/// Readiness during shutdown: false from the signal on, so nothing new is routed here.
#[derive(Default)]
struct Draining(std::sync::atomic::AtomicBool);

impl Draining {
    fn start(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

impl ReadinessCheck for Draining {
    fn check(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<CheckResult>> + Send + '_>> {
        let draining = self.0.load(std::sync::atomic::Ordering::Acquire);
        Box::pin(async move {
            if draining {
                vec![CheckResult {
                    name: "shutdown".into(),
                    ok: false,
                    required: true,
                    message: "shutting down: finishing requests in flight".into(),
                }]
            } else {
                Vec::new()
            }
        })
    }
}

fn worker_config(
    config: &ReconcilerConfig,
    load: &crate::config::LoadConfig,
    activator: &crate::config::ActivatorConfig,
    keys: &crate::config::KeysConfig,
) -> WorkerConfig {
    let worker_id = config.worker_id.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .unwrap_or_else(|| "worker".into());
        format!("{}-{}", host.trim(), std::process::id())
    });
    WorkerConfig {
        build: BuildConfig {
            installation: config.installation.clone(),
            engines: EngineDefaults {
                vllm_image: config.image_vllm.clone(),
                sglang_image: config.image_sglang.clone(),
                tgi_image: config.image_tgi.clone(),
                sim_image: config.image_sim.clone(),
                vllm_multinode_image: config.image_vllm_multinode.clone(),
                gpu_resource_name: config.gpu_resource_name.clone(),
                startup_timeout_seconds: config.startup_timeout_secs,
                pods: crate::domain::PodDefaults {
                    cpu_request: config.default_cpu_request.clone(),
                    memory_request: config.default_memory_request.clone(),
                    termination_grace_seconds: config.termination_grace_secs,
                    drain_seconds: config.drain_secs,
                },
            },
            default_gateway: config.gateway.clone(),
            gpu_product_label: config.gpu_product_label.clone(),
            s3_downloader_image: config.s3_downloader_image.clone(),
            epp_image: config.epp_image.clone(),
            pd_epp_image: config.pd_epp_image.clone(),
            pd_sidecar_image: config.pd_sidecar_image.clone(),
            // Prometheus scrapes the pods as often as the worker reads it.
            pod_monitor_interval_secs: load
                .prometheus_url
                .as_ref()
                .filter(|_| load.load_interval_secs > 0)
                .map(|_| load.load_interval_secs),
            activator: activator
                .activator_port
                .filter(|_| activator.enabled())
                .map(|port| crate::reconciler::desired::ActivatorAddress {
                    addresses: activator.activator_addresses.clone(),
                    port,
                }),
            // The key check runs in the API processes, at the activator's addresses.
            key_check: keys
                .authz_port
                .filter(|_| activator.addressed())
                .map(|port| crate::reconciler::desired::ActivatorAddress {
                    addresses: activator.activator_addresses.clone(),
                    port,
                }),
            key_check_grpc: keys.authz_protocol == "grpc",
        },
        budgets: Budgets {
            unschedulable_seconds: config.unschedulable_budget_secs,
            crash_restarts: config.crash_restarts,
        },
        worker_id,
        lease: std::time::Duration::from_secs(config.lease_secs),
        resync: std::time::Duration::from_secs(config.resync_secs.max(1)),
        concurrency: config.concurrency.max(1),
        gateway_silence: std::time::Duration::from_secs(config.gateway_silence_secs),
        activator_service: activator.activator_port.zip(activator.service()).map(
            |(port, (namespace, name))| crate::reconciler::worker::ActivatorService {
                namespace,
                name,
                port,
            },
        ),
    }
}

/// The OIDC verifier, when issuer, audience and keys are all configured.
async fn oidc_verifier(auth: &AuthConfig) -> Result<Option<OidcVerifier>, StartupError> {
    let jwks = match (&auth.oidc_jwks_file, &auth.oidc_jwks_url) {
        (Some(file), _) => Some(JwksSource::File(file.clone())),
        (None, Some(url)) => Some(JwksSource::Url(url.clone())),
        (None, None) => None,
    };
    match (&auth.oidc_issuer, &auth.oidc_audience, jwks) {
        (None, None, None) if auth.oidc_client_id.is_some() => Err(StartupError::Config(
            "MODELPLANE_OIDC_CLIENT_ID needs OIDC: MODELPLANE_OIDC_ISSUER, MODELPLANE_OIDC_AUDIENCE and a JWKS file or URL".into(),
        )),
        (None, None, None) => Ok(None),
        (Some(issuer), Some(audience), Some(jwks)) => {
            let config = OidcConfig {
                issuer: issuer.clone(),
                audience: audience.clone(),
                jwks,
                username_claim: auth.oidc_username_claim.clone(),
                groups_claim: auth.oidc_groups_claim.clone(),
                platform_admin_groups: auth.oidc_platform_admin_groups.clone(),
                client_id: auth.oidc_client_id.clone(),
                scopes: auth.oidc_scopes.clone(),
            };
            let verifier = OidcVerifier::new(config).await.map_err(StartupError::Config)?;
            tracing::info!(%issuer, "OIDC enabled");
            Ok(Some(verifier))
        }
        _ => Err(StartupError::Config(
            "OIDC needs all of MODELPLANE_OIDC_ISSUER, MODELPLANE_OIDC_AUDIENCE and a JWKS file or URL".into(),
        )),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}
