//! The harness every reconciler test uses: an emulator, a worker, the API on a test
//! database, and ways to wait for what they do.

use std::future::Future;
use std::time::Duration;

use crate::common::{TestApp, valid_spec};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use modelplane::domain::EngineDefaults;
use modelplane::reconciler::cluster;
use modelplane::reconciler::desired::BuildConfig;
use modelplane::reconciler::status::Budgets;
use modelplane::reconciler::worker::{Worker, WorkerConfig};
use modelplane_emulator::{Crds, Emulator, EmulatorBuilder, RunningEmulator};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// An emulator with the published CRD manifests installed (`scripts/crds.sh`; the test
/// command sets MODELPLANE_CRDS): everything modelplane applies is validated, defaulted
/// and pruned by the real schemas and CEL rules. Missing manifests fail the test.
pub fn emulator() -> EmulatorBuilder {
    let crds = modelplane_emulator::published_crds_dir().unwrap_or_else(|e| panic!("{e}"));
    Emulator::builder().crds(Crds::Manifests(crds))
}

/// The API resource of a kind, for reading objects as the JSON a user of kubectl sees.
pub(crate) fn resource_of(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}
pub(crate) struct Harness {
    pub(crate) app: TestApp,
    /// The worker's database (the collector writes with it).
    pub(crate) pool: PgPool,
    pub(crate) health: std::sync::Arc<modelplane::reconciler::health::WorkerHealth>,
    /// The worker's watch caches (the collector reads the pods from them).
    pub(crate) seen: std::sync::Arc<modelplane::reconciler::seen::SeenKinds>,
    pub(crate) emulator: Option<RunningEmulator>,
    pub(crate) kube: kube::Client,
    pub(crate) shutdown: CancellationToken,
    pub(crate) _dir: TempDir,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub(crate) struct TempDir(pub(crate) std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn worker_config(id: &str) -> WorkerConfig {
    WorkerConfig {
        build: BuildConfig {
            installation: "test".into(),
            engines: EngineDefaults {
                vllm_image: "vllm/vllm-openai:v0.11.0".into(),
                sglang_image: "lmsysorg/sglang:v0.5.4".into(),
                tgi_image: "ghcr.io/huggingface/text-generation-inference:3.3.6".into(),
                sim_image: "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1".into(),
                vllm_multinode_image: "vllm/vllm-openai:v0.11.1".into(),
                gpu_resource_name: "nvidia.com/gpu".into(),
                startup_timeout_seconds: 600,
                pods: modelplane::domain::PodDefaults::default(),
            },
            default_gateway: Some("gateway-system/inference".into()),
            gpu_product_label: "nvidia.com/gpu.product".into(),
            s3_downloader_image: "amazon/aws-cli:2.22.0".into(),
            epp_image: "registry.k8s.io/gateway-api-inference-extension/epp:v1.4.0".into(),
            pd_epp_image: "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.8.0".into(),
            pd_sidecar_image: "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.8.0".into(),
            pod_monitor_interval_secs: None,
            activator: None,
            key_check: None,
            key_check_grpc: false,
        },
        budgets: Budgets {
            unschedulable_seconds: 300,
            crash_restarts: 3,
        },
        worker_id: id.into(),
        lease: Duration::from_secs(5),
        resync: Duration::from_secs(3600),
        concurrency: 8,
        gateway_silence: Duration::from_secs(300),
        activator_service: None,
    }
}

pub(crate) async fn harness(
    pool: PgPool,
    gateway_api: bool,
    tweak: impl FnOnce(&mut WorkerConfig),
) -> Harness {
    harness_on(pool, emulator().gateway_api(gateway_api), tweak).await
}

/// A harness on an emulator configured by the caller (e.g. with the simulated cluster).
pub(crate) async fn harness_on(
    pool: PgPool,
    builder: modelplane_emulator::EmulatorBuilder,
    tweak: impl FnOnce(&mut WorkerConfig),
) -> Harness {
    harness_with(pool, builder, tweak, |_| {}).await
}

/// A harness whose API differs from the default as `app` says.
pub(crate) async fn harness_with(
    pool: PgPool,
    builder: modelplane_emulator::EmulatorBuilder,
    tweak: impl FnOnce(&mut WorkerConfig),
    app: impl FnOnce(&mut crate::common::Options),
) -> Harness {
    let emulator = builder.start().await.unwrap();
    let dir = std::env::temp_dir().join(format!("modelplane-reconciler-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, emulator.kubeconfig_yaml()).unwrap();
    let mut config = worker_config("worker-a");
    tweak(&mut config);
    let cluster = cluster::connect(Some(&kubeconfig), None, Some(&config.worker_id))
        .await
        .unwrap();
    let kube = cluster.client.clone();
    // The API has the cluster too, as `serve` gives it: "try it" goes through its API server.
    let mut options = crate::common::Options {
        cluster: Some((cluster.clone(), false)),
        // The collector of `Harness::collect_load` reads every second.
        load_interval: LOAD_INTERVAL,
        ..crate::common::Options::default()
    };
    app(&mut options);
    let app = TestApp::spawn_with(pool.clone(), options).await;
    // The app's activator, as the Gateway reaches it (its port on this machine's address).
    config.build.activator = Some(modelplane::reconciler::desired::ActivatorAddress {
        addresses: vec![modelplane_testkit::server::host_address()],
        port: app.activator_port,
    });
    // And its key check, when it runs one (unless the test names another).
    if config.build.key_check.is_none() {
        config.build.key_check =
            app.authz_port
                .map(|port| modelplane::reconciler::desired::ActivatorAddress {
                    addresses: vec![modelplane_testkit::server::host_address()],
                    port,
                });
    }
    let shutdown = CancellationToken::new();
    let worker = Worker::new(pool.clone(), cluster, config);
    let health = worker.health();
    let seen = worker.seen();
    tokio::spawn(worker.run(shutdown.clone()));
    Harness {
        pool,
        health,
        seen,
        app,
        emulator: Some(emulator),
        kube,
        shutdown,
        _dir: TempDir(dir),
    }
}

/// How often the serving-metrics collector of the tests reads (and the API's idea of it).
pub(crate) const LOAD_INTERVAL: Duration = Duration::from_secs(1);

impl Harness {
    /// Starts the serving-metrics collector, reading pods through the API server's
    /// pods/proxy (as a worker outside the cluster does) every [`LOAD_INTERVAL`], and the
    /// autoscaler after it.
    pub(crate) fn collect_load(&self) {
        use modelplane::reconciler::load::{Collector, LoadSettings, Source, Via};
        let settings = LoadSettings {
            interval: LOAD_INTERVAL,
            timeout: Duration::from_secs(5),
            max_bytes: 8 << 20,
            source: Source::Pods(Via::Proxy(self.kube.clone())),
            installation: "test".into(),
        };
        // Its pods come from the worker's watch, and the autoscaler decides after each
        // round, as `serve` runs them.
        let autoscaler = modelplane::reconciler::autoscaler::Autoscaler::new(
            self.pool.clone(),
            self.kube.clone(),
            "nvidia.com/gpu".into(),
            "worker-a",
        )
        .with_seen(self.seen.clone());
        let collector = Collector::new(
            self.pool.clone(),
            self.kube.clone(),
            settings,
            self.health.clone(),
        )
        .with_pods_from(self.seen.clone())
        .with_autoscaler(autoscaler);
        tokio::spawn(collector.run(self.shutdown.clone()));
    }
}

impl Harness {
    /// Starts the LoRA adapter loader as `serve` runs it beside the worker (through the
    /// API server's pod proxy, as from outside a cluster).
    pub(crate) fn load_adapters(&self) {
        let loader = modelplane::reconciler::adapters::AdapterLoader::new(
            self.pool.clone(),
            self.kube.clone(),
            modelplane::reconciler::load::Via::Proxy(self.kube.clone()),
            self.seen.clone(),
        );
        tokio::spawn(loader.run(self.shutdown.clone()));
    }
}

/// Polls `check` until it holds; fails with `what` after `limit`.
pub(crate) async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Harness {
    /// Deletes deployment `name` of team-a (202) and waits until the worker has removed its
    /// objects and the record is gone.
    pub(crate) async fn delete_and_wait_gone(&self, name: &str) {
        let path = format!("/api/v1/projects/team-a/deployments/{name}");
        let response = self
            .app
            .request(Method::DELETE, &path)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        wait_for("the record to be gone", Duration::from_secs(20), || async {
            self.app.get(&path).await.status() == StatusCode::NOT_FOUND
        })
        .await;
    }

    /// The id of deployment `name` (in any project), read from the database.
    pub(crate) async fn record_id(&self, name: &str) -> uuid::Uuid {
        sqlx::query_scalar("select id from model_deployment where name = $1")
            .bind(name)
            .fetch_one(&self.app.pool)
            .await
            .unwrap()
    }

    /// Stores a path prefix the API server refuses in an HTTPRoute (as a record stored before
    /// modelplane validated prefixes as the Gateway API does) on applied record `name`, and
    /// returns the record once generation 2 is reported.
    pub(crate) async fn store_a_route_kubernetes_refuses(&self, name: &str) -> Value {
        sqlx::query(
            "update model_deployment
             set spec = jsonb_set(spec, '{routing}', '{\"pathPrefix\": \"/team-a/../admin\"}'),
                 generation = generation + 1
             where name = $1",
        )
        .bind(name)
        .execute(&self.app.pool)
        .await
        .unwrap();
        self.requeue(name).await;
        self.wait_applied(name, 2).await
    }

    /// Queues deployment `name` for a reconcile, as a watch event or the resync would.
    pub(crate) async fn requeue(&self, name: &str) {
        let id = self.record_id(name).await;
        modelplane::store::work_queue::enqueue_reconcile(&self.app.pool, id, None)
            .await
            .unwrap();
    }

    pub(crate) async fn deployment(&self, name: &str) -> Value {
        self.app
            .get(&format!("/api/v1/projects/team-a/deployments/{name}"))
            .await
            .json()
            .await
            .unwrap()
    }

    pub(crate) async fn wait_applied(&self, name: &str, generation: i64) -> Value {
        wait_for(
            &format!("{name} applied at generation {generation}"),
            Duration::from_secs(20),
            || async {
                let record = self.deployment(name).await;
                record["status"]["observedGeneration"] == generation
                    && record["status"]["phase"] != "Pending"
            },
        )
        .await;
        self.deployment(name).await
    }

    pub(crate) fn api(&self, api_version: &str, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.kube.clone(), "team-a", &resource_of(api_version, kind))
    }

    /// The pods matching a label `selector` that are not being deleted: (name, uid), by name.
    pub(crate) async fn live_pods(&self, selector: &str) -> Vec<(String, String)> {
        let list = self
            .api("v1", "Pod")
            .list(&kube::api::ListParams::default().labels(selector))
            .await
            .unwrap();
        let mut pods: Vec<(String, String)> = list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| {
                (
                    p.metadata.name.clone().unwrap(),
                    p.metadata.uid.clone().unwrap(),
                )
            })
            .collect();
        pods.sort();
        pods
    }

    pub(crate) async fn live(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.api(api_version, kind)
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap())
    }

    pub(crate) fn writes(&self) -> usize {
        let log = self.emulator.as_ref().unwrap().requests().snapshot();
        log.iter()
            .filter(|r| !matches!(r.method.as_str(), "GET" | "HEAD"))
            .count()
    }

    /// The kinds of `name`'s timeline entries, oldest first.
    pub(crate) async fn events(&self, name: &str) -> Vec<String> {
        self.timeline_entries(name)
            .await
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The messages of `name`'s timeline entries of `kind`, oldest first.
    pub(crate) async fn timeline(&self, name: &str, kind: &str) -> Vec<String> {
        self.timeline_entries(name)
            .await
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| e["message"].as_str().unwrap().to_owned())
            .collect()
    }

    async fn timeline_entries(&self, name: &str) -> Vec<Value> {
        let events: Value = self
            .app
            .get(&format!(
                "/api/v1/projects/team-a/deployments/{name}/events"
            ))
            .await
            .json()
            .await
            .unwrap();
        events["items"].as_array().unwrap().clone()
    }
}

pub(crate) fn sim_spec() -> Value {
    let mut spec = valid_spec();
    spec["engine"] = json!({"kind": "sim"});
    // No hub token: the simulated kubelet (rightly) refuses to start a pod whose Secret is missing.
    spec["model"] = json!({"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"});
    spec["resources"] = json!({"cpu": "1", "memory": "1Gi"});
    spec["scheduling"] = json!({});
    spec["storage"] = json!({});
    spec
}

pub(crate) async fn create(h: &Harness, name: &str) {
    create_with(h, name, sim_spec()).await;
}

/// Creates deployment `name` in team-a with `spec`, which must be accepted.
pub(crate) async fn create_with(h: &Harness, name: &str, spec: Value) {
    create_in(&h.app, name, spec).await;
}

/// Creates deployment `name` in team-a with `spec` through `app`; it must be accepted.
pub(crate) async fn create_in(app: &TestApp, name: &str, spec: Value) {
    let response = app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": name, "spec": spec}),
        )
        .await;
    let status = response.status();
    assert_eq!(
        status,
        StatusCode::CREATED,
        "creating {name}: {}",
        response.text().await.unwrap_or_default()
    );
}

/// `modelplane serve --role all` as a separate process against `emulator`, on a free port,
/// with a bootstrap token; ready when returned. `env` adds or overrides settings.
pub(crate) struct ServeProcess {
    pub(crate) child: std::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub(crate) base: String,
    pub(crate) port: u16,
    /// Sends the bootstrap token.
    pub(crate) client: reqwest::Client,
    pub(crate) _dir: TempDir,
}

pub(crate) const SERVE_TOKEN: &str = "mpt_serve-process-bootstrap-token-0123456789abcdef";

impl ServeProcess {
    pub(crate) async fn start(
        pool: &PgPool,
        emulator: &RunningEmulator,
        env: &[(&str, &str)],
    ) -> Self {
        let (dir, kubeconfig, database_url) = process_setup(pool, emulator, "serve");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_modelplane"));
        command
            .args([
                "serve",
                "--role",
                "all",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .env("DATABASE_URL", &database_url)
            .env("MODELPLANE_KUBECONFIG", &kubeconfig)
            .env("MODELPLANE_INSTALLATION", "test")
            .env("MODELPLANE_BOOTSTRAP_TOKEN", SERVE_TOKEN)
            .env("MODELPLANE_LOG", "warn")
            .stdout(std::process::Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().expect("the modelplane binary starts");
        modelplane::install_crypto_provider();
        let client = reqwest::Client::builder()
            .default_headers(
                [(
                    reqwest::header::AUTHORIZATION,
                    format!("Bearer {SERVE_TOKEN}").parse().unwrap(),
                )]
                .into_iter()
                .collect(),
            )
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        wait_for("the process ready", Duration::from_secs(30), || async {
            client
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
        Self {
            child,
            base,
            port,
            client,
            _dir: dir,
        }
    }

    /// Sends SIGTERM.
    pub(crate) fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// Starts `modelplane serve --role worker` as a separate process.
pub(crate) fn spawn_worker(
    id: &str,
    database_url: &str,
    kubeconfig: &std::path::Path,
) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_modelplane"))
        .args(["serve", "--role", "worker", "--listen", "127.0.0.1:0"])
        .env("DATABASE_URL", database_url)
        .env("MODELPLANE_KUBECONFIG", kubeconfig)
        .env("MODELPLANE_WORKER_ID", id)
        .env("MODELPLANE_INSTALLATION", "test")
        .env("MODELPLANE_LEASE_SECS", "3")
        .env("MODELPLANE_LOG", "warn")
        .env_remove("MODELPLANE_BOOTSTRAP_TOKEN")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("the modelplane binary starts")
}

/// Makes the namespace `gateway-system` and the Gateway `inference` in it.
pub(crate) async fn create_gateway(
    h: &Harness,
    class: &str,
    listeners: Value,
) -> Api<DynamicObject> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(h.kube.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "gateway-system"}})).unwrap(),
        )
        .await
        .unwrap();
    let gateways = Api::<DynamicObject>::namespaced_with(
        h.kube.clone(),
        "gateway-system",
        &resource_of("gateway.networking.k8s.io/v1", "Gateway"),
    );
    gateways
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "inference"},
                "spec": {"gatewayClassName": class, "listeners": listeners}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    gateways
}

/// What a modelplane process started by a test needs: a folder (removed when dropped) with
/// the emulator's kubeconfig in it, and the test database's URL.
pub(crate) fn process_setup(
    pool: &PgPool,
    emulator: &RunningEmulator,
    what: &str,
) -> (TempDir, std::path::PathBuf, String) {
    let dir =
        TempDir(std::env::temp_dir().join(format!("modelplane-{what}-{}", uuid::Uuid::now_v7())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let kubeconfig = dir.0.join("kubeconfig");
    std::fs::write(&kubeconfig, emulator.kubeconfig_yaml()).unwrap();
    let options = pool.connect_options();
    let database_url = format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap()
    );
    (dir, kubeconfig, database_url)
}
