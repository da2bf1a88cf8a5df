//! The reconciler against the Kubernetes emulator over HTTP, with a real Postgres.

mod canary;
mod capacity;
#[allow(dead_code)]
#[path = "../api/common.rs"]
mod common;
mod inference_pool;
mod kube_events;
mod lifecycle;
mod rbac;
mod shutdown;
mod traces;

use std::future::Future;
use std::time::Duration;

use common::{TestApp, valid_spec};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use modelplane::domain::EngineDefaults;
use modelplane::reconciler::cluster;
use modelplane::reconciler::desired::BuildConfig;
use modelplane::reconciler::status::Budgets;
use modelplane::reconciler::worker::{Worker, WorkerConfig};
use modelplane_emulator::{Emulator, RunningEmulator};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// The API resource of a kind, for reading objects as the JSON a user of kubectl sees.
fn resource_of(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

struct Harness {
    app: TestApp,
    emulator: Option<RunningEmulator>,
    kube: kube::Client,
    shutdown: CancellationToken,
    _dir: TempDir,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn worker_config(id: &str) -> WorkerConfig {
    WorkerConfig {
        build: BuildConfig {
            installation: "test".into(),
            engines: EngineDefaults {
                vllm_image: "vllm/vllm-openai:v0.11.0".into(),
                sglang_image: "lmsysorg/sglang:v0.5.4".into(),
                tgi_image: "ghcr.io/huggingface/text-generation-inference:3.3.6".into(),
                sim_image: "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1".into(),
                gpu_resource_name: "nvidia.com/gpu".into(),
                startup_timeout_seconds: 600,
                pods: modelplane::domain::PodDefaults::default(),
            },
            default_gateway: Some("gateway-system/inference".into()),
            gpu_product_label: "nvidia.com/gpu.product".into(),
            s3_downloader_image: "amazon/aws-cli:2.22.0".into(),
            epp_image: "registry.k8s.io/gateway-api-inference-extension/epp:v1.4.0".into(),
        },
        budgets: Budgets {
            unschedulable_seconds: 300,
            crash_restarts: 3,
        },
        worker_id: id.into(),
        lease: Duration::from_secs(5),
        resync: Duration::from_secs(3600),
        concurrency: 8,
    }
}

async fn harness(
    pool: PgPool,
    gateway_api: bool,
    tweak: impl FnOnce(&mut WorkerConfig),
) -> Harness {
    harness_on(pool, Emulator::builder().gateway_api(gateway_api), tweak).await
}

/// A harness on an emulator configured by the caller (e.g. with the simulated cluster).
async fn harness_on(
    pool: PgPool,
    builder: modelplane_emulator::EmulatorBuilder,
    tweak: impl FnOnce(&mut WorkerConfig),
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
    let app = TestApp::spawn_with(
        pool.clone(),
        common::Options {
            cluster: Some((cluster.clone(), false)),
            ..common::Options::default()
        },
    )
    .await;
    let shutdown = CancellationToken::new();
    tokio::spawn(Worker::new(pool, cluster, config).run(shutdown.clone()));
    Harness {
        app,
        emulator: Some(emulator),
        kube,
        shutdown,
        _dir: TempDir(dir),
    }
}

/// Polls `check` until it holds; fails with `what` after `limit`.
async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F)
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
    async fn delete_and_wait_gone(&self, name: &str) {
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
    async fn record_id(&self, name: &str) -> uuid::Uuid {
        sqlx::query_scalar("select id from model_deployment where name = $1")
            .bind(name)
            .fetch_one(&self.app.pool)
            .await
            .unwrap()
    }

    /// Stores a path prefix the API server refuses in an HTTPRoute (as a record stored before
    /// modelplane validated prefixes as the Gateway API does) on applied record `name`, and
    /// returns the record once generation 2 is reported.
    async fn store_a_route_kubernetes_refuses(&self, name: &str) -> Value {
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
    async fn requeue(&self, name: &str) {
        let id = self.record_id(name).await;
        modelplane::store::work_queue::enqueue_reconcile(&self.app.pool, id, None)
            .await
            .unwrap();
    }

    async fn deployment(&self, name: &str) -> Value {
        self.app
            .get(&format!("/api/v1/projects/team-a/deployments/{name}"))
            .await
            .json()
            .await
            .unwrap()
    }

    async fn wait_applied(&self, name: &str, generation: i64) -> Value {
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

    fn api(&self, api_version: &str, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.kube.clone(), "team-a", &resource_of(api_version, kind))
    }

    async fn live(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.api(api_version, kind)
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap())
    }

    fn writes(&self) -> usize {
        let log = self.emulator.as_ref().unwrap().requests().snapshot();
        log.iter()
            .filter(|r| !matches!(r.method.as_str(), "GET" | "HEAD"))
            .count()
    }

    async fn events(&self, name: &str) -> Vec<String> {
        let events: Value = self
            .app
            .get(&format!(
                "/api/v1/projects/team-a/deployments/{name}/events"
            ))
            .await
            .json()
            .await
            .unwrap();
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    }
}

fn sim_spec() -> Value {
    let mut spec = valid_spec();
    spec["engine"] = json!({"kind": "sim"});
    // No hub token: the simulated kubelet (rightly) refuses to start a pod whose Secret is missing.
    spec["model"] = json!({"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"});
    spec["resources"] = json!({"cpu": "1", "memory": "1Gi"});
    spec["scheduling"] = json!({});
    spec["storage"] = json!({});
    spec
}

async fn create(h: &Harness, name: &str) {
    create_with(h, name, sim_spec()).await;
}

/// Creates deployment `name` in team-a with `spec`, which must be accepted.
async fn create_with(h: &Harness, name: &str, spec: Value) {
    let response = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": name, "spec": spec}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED, "creating {name}");
}

#[sqlx::test]
async fn a_new_deployment_is_applied_with_its_namespace_and_reported(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let record = h.wait_applied("qwen", 1).await;
    assert_eq!(
        record["status"]["phase"], "Deploying",
        "no kubelets in the API-server emulator: nothing becomes available"
    );
    assert_eq!(
        record["status"]["endpoints"]["cluster"],
        "http://qwen.team-a.svc.cluster.local:8000"
    );
    let id = record["id"].as_str().unwrap();

    let namespace = Api::<DynamicObject>::all_with(h.kube.clone(), &resource_of("v1", "Namespace"))
        .get("team-a")
        .await
        .unwrap();
    assert_eq!(
        namespace.metadata.labels.unwrap()["modelplane.io/project"],
        "team-a"
    );
    let deployment = h.live("apps/v1", "Deployment", "qwen").await.unwrap();
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "model-server", "app.kubernetes.io/instance": "qwen", "modelplane.io/deployment-id": id})
    );
    assert_eq!(
        deployment["metadata"]["labels"]["modelplane.io/installation"],
        "test"
    );
    let managers: Vec<&str> = deployment["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert!(managers.contains(&"modelplane"));
    let service = h.live("v1", "Service", "qwen").await.unwrap();
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    let route = h
        .live("gateway.networking.k8s.io/v1", "HTTPRoute", "qwen")
        .await
        .unwrap();
    assert_eq!(route["spec"]["parentRefs"][0]["name"], "inference");
    assert_eq!(
        route["spec"]["rules"][0]["matches"][0]["path"]["value"],
        "/team-a/qwen"
    );
    assert_eq!(
        h.events("qwen").await,
        ["Created", "Applied", "PhaseChanged"]
    );
}

#[sqlx::test]
async fn a_resync_of_unchanged_records_makes_no_kubernetes_writes(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    for i in 0..100 {
        create(&h, &format!("model-{i}")).await;
    }
    for i in 0..100 {
        h.wait_applied(&format!("model-{i}"), 1).await;
    }
    let pool = h.app.pool.clone();
    wait_for("an empty queue", Duration::from_secs(30), || async {
        sqlx::query_scalar::<_, i64>("select count(*) from reconcile_work where run_after <= now()")
            .fetch_one(&pool)
            .await
            .unwrap()
            == 0
    })
    .await;
    let writes = h.writes();
    // Requeue everything now, as the periodic resync does, and let the worker go through it.
    sqlx::query("update reconcile_work set run_after = now()")
        .execute(&pool)
        .await
        .unwrap();
    modelplane::store::work_queue::enqueue_all(&pool)
        .await
        .unwrap();
    wait_for(
        "the resync to be worked off",
        Duration::from_secs(30),
        || async {
            sqlx::query_scalar::<_, i64>(
                "select count(*) from reconcile_work where run_after <= now()",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
                == 0
        },
    )
    .await;
    assert_eq!(
        h.writes(),
        writes,
        "unchanged records were written to Kubernetes"
    );
}

#[sqlx::test]
async fn drift_is_repaired_and_recorded(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;

    h.api("v1", "Service")
        .delete("qwen", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the Service to come back",
        Duration::from_secs(10),
        || async { h.live("v1", "Service", "qwen").await.is_some() },
    )
    .await;

    let patch = json!({"spec": {"replicas": 5}});
    h.api("apps/v1", "Deployment")
        .patch("qwen", &kube::api::PatchParams::apply("someone-else").force(), &kube::api::Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "qwen"}, "spec": patch["spec"]})))
        .await
        .unwrap();
    wait_for(
        "replicas restored to 1",
        Duration::from_secs(10),
        || async {
            h.live("apps/v1", "Deployment", "qwen").await.unwrap()["spec"]["replicas"] == 1
        },
    )
    .await;
    let events = h.events("qwen").await;
    assert_eq!(
        events.iter().filter(|e| *e == "DriftRepaired").count(),
        2,
        "{events:?}"
    );
    // Each says what happened: a deleted object is not "changed".
    let timeline: Value = h
        .app
        .get("/api/v1/projects/team-a/deployments/qwen/events")
        .await
        .json()
        .await
        .unwrap();
    let repairs: Vec<&str> = timeline["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "DriftRepaired")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        repairs,
        [
            "repaired what was done outside modelplane: Service qwen was deleted",
            "repaired what was done outside modelplane: Deployment qwen was changed"
        ]
    );
}

#[sqlx::test]
async fn scale_and_restart_reach_the_cluster(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let hash = |d: &Value| {
        d["spec"]["template"]["metadata"]["annotations"]["modelplane.io/config-hash"].clone()
    };
    let before = hash(&h.live("apps/v1", "Deployment", "qwen").await.unwrap());

    h.app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 3}),
        )
        .await;
    h.wait_applied("qwen", 2).await;
    let live = h.live("apps/v1", "Deployment", "qwen").await.unwrap();
    assert_eq!(live["spec"]["replicas"], 3);
    assert_eq!(hash(&live), before, "scaling does not roll the pods");

    h.app
        .request(
            Method::POST,
            "/api/v1/projects/team-a/deployments/qwen/restart",
        )
        .send()
        .await
        .unwrap();
    wait_for(
        "a new config hash after the restart",
        Duration::from_secs(10),
        || async { hash(&h.live("apps/v1", "Deployment", "qwen").await.unwrap()) != before },
    )
    .await;
}

#[sqlx::test]
async fn delete_removes_every_object_then_the_record(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let id = h.wait_applied("qwen", 1).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    h.delete_and_wait_gone("qwen").await;
    for (api_version, kind) in [
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ] {
        assert!(
            h.live(api_version, kind, "qwen").await.is_none(),
            "{kind} left behind"
        );
    }
    let events: Value = h
        .app
        .get(&format!("/api/v1/projects/team-a/events?deploymentId={id}"))
        .await
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.last(), Some(&"Deleted"));
    create(&h, "qwen").await;
}

#[sqlx::test]
async fn orphaned_objects_of_this_installation_are_removed(pool: PgPool) {
    let h = harness(pool, true, |c| c.resync = Duration::from_secs(1)).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let orphan = |name: &str, installation: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "team-a", "labels": {
                "app.kubernetes.io/managed-by": "modelplane", "modelplane.io/installation": installation,
                "modelplane.io/deployment-id": uuid::Uuid::now_v7().to_string()}},
            "spec": {"ports": [{"port": 80}]}
        })).unwrap()
    };
    let services = h.api("v1", "Service");
    services
        .create(&PostParams::default(), &orphan("ghost", "test"))
        .await
        .unwrap();
    services
        .create(&PostParams::default(), &orphan("other-install", "staging"))
        .await
        .unwrap();
    wait_for(
        "the orphan to be removed",
        Duration::from_secs(15),
        || async { h.live("v1", "Service", "ghost").await.is_none() },
    )
    .await;
    assert!(
        h.live("v1", "Service", "other-install").await.is_some(),
        "another installation's object was touched"
    );
    assert!(h.live("v1", "Service", "qwen").await.is_some());
}

#[sqlx::test]
async fn without_the_gateway_api_the_deployment_runs_and_routed_says_why(pool: PgPool) {
    let h = harness(pool, false, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let record = h.wait_applied("qwen", 1).await;
    assert!(h.live("apps/v1", "Deployment", "qwen").await.is_some());
    let routed = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Routed")
        .unwrap()
        .clone();
    assert_eq!(routed["status"], "False");
    assert!(
        routed["message"].as_str().unwrap().contains("Gateway API"),
        "{routed}"
    );
    assert!(
        record["status"]["endpoints"]["external"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[sqlx::test]
async fn a_cluster_outage_is_reported_and_then_converges(pool: PgPool) {
    let mut h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    create(&h, "idle").await;
    h.wait_applied("qwen", 1).await;
    h.wait_applied("idle", 1).await;
    let emulator = h.emulator.take().unwrap();
    let addr = emulator.addr();
    emulator.shutdown().await;

    h.app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 2}),
        )
        .await;
    wait_for(
        "ClusterReachable=False",
        Duration::from_secs(60),
        || async {
            let record = h.deployment("qwen").await;
            record["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "ClusterReachable" && c["status"] == "False")
        },
    )
    .await;
    let record = h.deployment("qwen").await;
    assert_eq!(
        (
            record["status"]["phase"].as_str(),
            record["status"]["message"].as_str()
        ),
        (
            Some("Pending"),
            Some("generation 2 accepted; not applied yet")
        ),
        "a generation not yet applied is never reported as rolled out"
    );
    let applied = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Applied")
        .unwrap()
        .clone();
    assert_eq!(
        (applied["status"].as_str(), applied["reason"].as_str()),
        (Some("False"), Some("NotApplied")),
        "the conditions agree with the phase"
    );
    // A record with no work pending learns of the outage too, its last status kept.
    wait_for(
        "the idle record to say so",
        Duration::from_secs(60),
        || async {
            let record = h.deployment("idle").await;
            record["status"]["phase"] == "Deploying"
                && record["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["type"] == "ClusterReachable" && c["status"] == "False")
        },
    )
    .await;

    h.emulator = Some(Emulator::builder().listen(addr).start().await.unwrap());
    let record = h.wait_applied("qwen", 2).await;
    wait_for(
        "the idle record's condition gone",
        Duration::from_secs(60),
        || async {
            h.deployment("idle").await["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["type"] != "ClusterReachable")
        },
    )
    .await;
    assert!(
        record["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["type"] != "ClusterReachable")
    );
    assert_eq!(
        h.live("apps/v1", "Deployment", "qwen").await.unwrap()["spec"]["replicas"],
        2
    );
    assert!(
        h.events("qwen")
            .await
            .contains(&"ClusterUnreachable".to_owned())
    );
}

/// `modelplane serve --role all` as a separate process against `emulator`, on a free port,
/// with a bootstrap token; ready when returned. `env` adds or overrides settings.
struct ServeProcess {
    child: std::process::Child,
    /// `http://127.0.0.1:<port>`.
    base: String,
    port: u16,
    /// Sends the bootstrap token.
    client: reqwest::Client,
    _dir: TempDir,
}

const SERVE_TOKEN: &str = "mpt_serve-process-bootstrap-token-0123456789abcdef";

impl ServeProcess {
    async fn start(pool: &PgPool, emulator: &RunningEmulator, env: &[(&str, &str)]) -> Self {
        let dir = TempDir(
            std::env::temp_dir().join(format!("modelplane-serve-{}", uuid::Uuid::now_v7())),
        );
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
    fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// Starts `modelplane serve --role worker` as a separate process.
fn spawn_worker(id: &str, database_url: &str, kubeconfig: &std::path::Path) -> std::process::Child {
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

#[sqlx::test]
async fn two_worker_processes_share_the_work_and_a_killed_one_loses_nothing(pool: PgPool) {
    let emulator = Emulator::builder().start().await.unwrap();
    let dir =
        TempDir(std::env::temp_dir().join(format!("modelplane-workers-{}", uuid::Uuid::now_v7())));
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

    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    // A thousand records (the issue that made the worker fast asked this test to hold at that
    // size): created before the workers start, so both find a full queue.
    for i in 0..1000 {
        let response = app
            .post_json(
                "/api/v1/projects/team-a/deployments",
                &json!({"name": format!("m-{i}"), "spec": sim_spec()}),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let mut a = spawn_worker("worker-a", &database_url, &kubeconfig);
    let mut b = spawn_worker("worker-b", &database_url, &kubeconfig);
    let applied = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from model_deployment where applied_digest is not null and phase = 'Deploying'")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    wait_for("some records applied", Duration::from_secs(60), || async {
        applied().await >= 100
    })
    .await;
    a.kill().unwrap(); // SIGKILL: no chance to release its leases
    a.wait().unwrap();
    wait_for(
        "all 1,000 records to converge",
        Duration::from_secs(300),
        || async { applied().await == 1000 },
    )
    .await;
    b.kill().unwrap();
    b.wait().unwrap();

    // Every record's Deployment exists, and no record was applied by both workers interleaved.
    let log = emulator.requests().snapshot();
    let mut by_record: std::collections::HashMap<String, Vec<String>> =
        std::collections::HashMap::new();
    for request in log
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("/deployments/m-"))
    {
        let name = request.path.rsplit('/').next().unwrap().to_owned();
        by_record
            .entry(name)
            .or_default()
            .push(request.client_id.clone().unwrap_or_default());
    }
    assert_eq!(by_record.len(), 1000, "every record was applied");
    for (name, writers) in &by_record {
        let mut switches = writers.windows(2).filter(|w| w[0] != w[1]).count();
        if writers.first() == writers.last() && switches > 0 {
            switches += 1;
        }
        assert!(
            switches <= 1,
            "{name} was applied by both workers interleaved: {writers:?}"
        );
    }
    let writers: std::collections::HashSet<&String> = by_record.values().flatten().collect();
    assert!(
        writers.contains(&"worker-b".to_owned()),
        "worker-b took over"
    );
    emulator.shutdown().await;
}

#[sqlx::test]
async fn the_worker_writes_only_in_its_projects_namespaces(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    let response = h
        .app
        .post_json(
            "/api/v1/projects",
            &json!({"name": "team-b", "namespace": "models-b"}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    create(&h, "qwen").await;
    let response = h
        .app
        .post_json(
            "/api/v1/projects/team-b/deployments",
            &json!({"name": "llama", "spec": sim_spec()}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    h.wait_applied("qwen", 1).await;
    wait_for("llama applied", Duration::from_secs(20), || async {
        let record: Value = h
            .app
            .get("/api/v1/projects/team-b/deployments/llama")
            .await
            .json()
            .await
            .unwrap();
        record["status"]["observedGeneration"] == 1 && record["status"]["phase"] != "Pending"
    })
    .await;
    h.app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 2}),
        )
        .await;
    h.wait_applied("qwen", 2).await;
    h.app
        .request(Method::DELETE, "/api/v1/projects/team-b/deployments/llama")
        .send()
        .await
        .unwrap();
    wait_for("llama deleted", Duration::from_secs(20), || async {
        h.app
            .get("/api/v1/projects/team-b/deployments/llama")
            .await
            .status()
            == StatusCode::NOT_FOUND
    })
    .await;

    let writes: Vec<_> = h
        .emulator
        .as_ref()
        .unwrap()
        .requests()
        .snapshot()
        .into_iter()
        .filter(|r| {
            !matches!(r.method.as_str(), "GET" | "HEAD")
                && r.client_id.as_deref() == Some("worker-a")
        })
        .collect();
    assert!(writes.len() >= 8, "the worker wrote: {writes:?}");
    for write in &writes {
        let namespace = write
            .path
            .split("/namespaces/")
            .nth(1)
            .and_then(|rest| rest.split('/').next());
        assert!(
            matches!(namespace, Some("team-a" | "models-b")),
            "{} {} is outside the projects' namespaces",
            write.method,
            write.path
        );
    }
}

#[sqlx::test]
async fn a_deleted_projects_namespace_goes_unless_it_was_adopted(pool: PgPool) {
    // No periodic resync in this test: the project's deletion itself must bring the cleanup.
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    let adopted = h
        .app
        .post_json(
            "/api/v1/projects",
            &json!({"name": "legacy", "namespace": "ml-legacy", "adoptNamespace": true}),
        )
        .await;
    assert_eq!(adopted.status(), StatusCode::CREATED);
    create(&h, "qwen").await;
    h.app
        .post_json(
            "/api/v1/projects/legacy/deployments",
            &json!({"name": "old", "spec": sim_spec()}),
        )
        .await;
    h.wait_applied("qwen", 1).await;
    let namespaces: Api<DynamicObject> =
        Api::all_with(h.kube.clone(), &resource_of("v1", "Namespace"));
    wait_for("both namespaces", Duration::from_secs(20), || async {
        namespaces.get_opt("team-a").await.unwrap().is_some()
            && namespaces.get_opt("ml-legacy").await.unwrap().is_some()
    })
    .await;
    for (project, name) in [("team-a", "qwen"), ("legacy", "old")] {
        h.app
            .request(
                Method::DELETE,
                &format!("/api/v1/projects/{project}/deployments/{name}"),
            )
            .send()
            .await
            .unwrap();
        wait_for("the deployment gone", Duration::from_secs(20), || async {
            h.app
                .get(&format!("/api/v1/projects/{project}/deployments/{name}"))
                .await
                .status()
                == StatusCode::NOT_FOUND
        })
        .await;
        let deleted = h
            .app
            .request(Method::DELETE, &format!("/api/v1/projects/{project}"))
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    }
    wait_for(
        "the created namespace to be deleted",
        Duration::from_secs(20),
        || async {
            namespaces
                .get_opt("team-a")
                .await
                .unwrap()
                .is_none_or(|ns| ns.metadata.deletion_timestamp.is_some())
        },
    )
    .await;
    wait_for(
        "the adopted namespace to lose modelplane's labels",
        Duration::from_secs(20),
        || async {
            let ns = namespaces.get_opt("ml-legacy").await.unwrap();
            let ns = ns.expect("the adopted namespace survives");
            assert!(ns.metadata.deletion_timestamp.is_none());
            !ns.metadata
                .labels
                .unwrap_or_default()
                .keys()
                .any(|k| k.contains("modelplane"))
        },
    )
    .await;
}

/// A record whose stored spec does not resolve (stored data no parser would accept) fails
/// with the fields at fault, alone; the worker goes on with every other record. (It used to
/// panic the reconcile; a panic from a bug is still caught per record.)
#[sqlx::test]
async fn a_stored_spec_that_is_not_valid_fails_alone_with_its_fields_and_the_worker_goes_on(
    pool: PgPool,
) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "broken").await;
    h.wait_applied("broken", 1).await;
    let id = h.record_id("broken").await;
    // Written past the API (by hand, or by an older schema): the worker must not trust it.
    sqlx::query(
        "update model_deployment set spec = jsonb_set(spec, '{model,source}', '\"not-a-uri\"'),
                generation = generation + 1 where id = $1",
    )
    .bind(id)
    .execute(&pool)
    .await
    .unwrap();
    h.requeue("broken").await;
    let record = h.wait_applied("broken", 2).await;
    assert_eq!(record["status"]["phase"], "Failed", "{record}");
    let message = record["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("the stored spec is not valid") && message.contains("spec.model.source"),
        "{message}"
    );
    let applied = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Applied")
        .unwrap();
    assert_eq!(applied["reason"], "InvalidSpec");
    // What ran before is left running, not replaced by objects built from a guess.
    assert!(h.live("apps/v1", "Deployment", "broken").await.is_some());
    // The worker is still alive: a new record is applied.
    create(&h, "healthy").await;
    h.wait_applied("healthy", 1).await;
}

/// A route the API server refuses (here one stored before modelplane validated path prefixes
/// as the Gateway API does) is reported with the server's message, never as "not yet".
#[sqlx::test]
async fn a_route_the_api_server_refuses_is_reported_with_its_message(pool: PgPool) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let record = h.store_a_route_kubernetes_refuses("qwen").await;
    assert_eq!(record["status"]["phase"], "Failed", "{record}");
    let message = record["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("Kubernetes rejected the HTTPRoute")
            && message.contains("must not contain '/../'"),
        "{message}"
    );
    let routed = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Routed")
        .unwrap()
        .clone();
    assert_eq!(routed["status"], "False");
    assert_eq!(routed["reason"], "Rejected");
    let timeline: Value = h
        .app
        .get("/api/v1/projects/team-a/deployments/qwen/events")
        .await
        .json()
        .await
        .unwrap();
    assert!(
        timeline["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["message"]
                .as_str()
                .unwrap()
                .contains("Kubernetes rejected the HTTPRoute")),
        "{timeline}"
    );
}

/// The API server stores quantities in canonical form (`0.5` → `500m`, `1.5Gi` → `1536Mi`,
/// an emptyDir `sizeLimit` of `0.5Gi` → `512Mi`) and drops an env var's empty `value`
/// (apimachinery `resource.Quantity` marshalling; `EnvVar.Value` is `omitempty`). None of it
/// is drift: reconciling such a record again writes nothing and records no repair.
#[sqlx::test]
async fn the_servers_canonical_forms_are_not_mistaken_for_drift(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["resources"] = json!({"cpu": "0.5", "memory": "1.5Gi", "sharedMemory": "0.5Gi"});
    spec["storage"] = json!({"cache": {"sizeLimit": "0.5Gi"}});
    spec["engine"]["env"] = json!([{"name": "EMPTY", "value": ""}]);
    create_with(&h, "qwen", spec).await;
    h.wait_applied("qwen", 1).await;
    let live = h.live("apps/v1", "Deployment", "qwen").await.unwrap();
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"], "500m",
        "the emulator stores the canonical form, as a real server does"
    );
    let pool = h.app.pool.clone();
    let idle = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from reconcile_work where run_after <= now()")
            .fetch_one(&pool)
            .await
            .unwrap()
            == 0
    };
    wait_for("an empty queue", Duration::from_secs(20), idle).await;
    let writes = h.writes();
    for _ in 0..3 {
        h.requeue("qwen").await;
        wait_for(
            "the reconcile to be worked off",
            Duration::from_secs(20),
            idle,
        )
        .await;
    }
    assert_eq!(h.writes(), writes, "a canonical form was taken for drift");
    assert!(
        !h.events("qwen").await.iter().any(|k| k == "DriftRepaired"),
        "{:?}",
        h.events("qwen").await
    );
}

/// A Gateway that does not exist, or that no controller runs (the Gateway API CRD's default
/// status: `Accepted=Unknown`, reason `Pending`, "Waiting for controller"), is named as such,
/// not reported as a Gateway that is merely slow.
#[sqlx::test]
async fn a_missing_or_unrun_gateway_is_named_in_the_status(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let routed = |record: &Value| {
        record["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Routed")
            .map(|c| c["message"].as_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    wait_for(
        "the missing Gateway to be named",
        Duration::from_secs(20),
        || async {
            routed(&h.deployment("qwen").await) == "Gateway gateway-system/inference does not exist"
        },
    )
    .await;
    // Now the Gateway exists, but no controller runs its class.
    create_gateway(
        &h,
        "nobody-runs-this",
        json!([{"name": "http", "port": 80, "protocol": "HTTP"}]),
    )
    .await;
    wait_for("the unrun Gateway to be named", Duration::from_secs(20), || async {
        routed(&h.deployment("qwen").await)
            == "Gateway gateway-system/inference is not accepted: Accepted=Unknown (Pending): Waiting for controller"
    })
    .await;
}

/// The worker's queries fail for a while (as during a database failover): it rides the
/// outage out with backoff and goes on working, rather than ending its loop.
#[sqlx::test]
async fn the_worker_survives_a_database_outage(pool: PgPool) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "before").await;
    h.wait_applied("before", 1).await;
    // The outage: the queue's table is gone for half a second, and the worker is woken to
    // claim from it meanwhile, so its claims fail.
    sqlx::query("alter table reconcile_work rename to reconcile_work_away")
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..5 {
        sqlx::query("select pg_notify('modelplane_reconcile', 'outage')")
            .execute(&pool)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sqlx::query("alter table reconcile_work_away rename to reconcile_work")
        .execute(&pool)
        .await
        .unwrap();
    // And every connection drops, as on a failover.
    sqlx::query(
        "select pg_terminate_backend(pid) from pg_stat_activity
         where datname = current_database() and pid <> pg_backend_pid()",
    )
    .execute(&pool)
    .await
    .unwrap();
    create(&h, "after").await;
    h.wait_applied("after", 1).await;
}

/// A project's namespace deleted outside modelplane comes back with the project's objects,
/// brought by the watches rather than the (here hour-long) periodic resync.
#[sqlx::test]
async fn a_deleted_project_namespace_is_restored_without_waiting_for_a_resync(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let namespaces: Api<DynamicObject> =
        Api::all_with(h.kube.clone(), &resource_of("v1", "Namespace"));
    namespaces
        .delete("team-a", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the namespace and the Deployment back",
        Duration::from_secs(30),
        || async {
            namespaces
                .get_opt("team-a")
                .await
                .unwrap()
                .is_some_and(|ns| ns.metadata.deletion_timestamp.is_none())
                && h.live("apps/v1", "Deployment", "qwen").await.is_some()
        },
    )
    .await;
}

/// An API server that stops answering in time (as with etcd down behind it) costs one
/// reconcile its budget, not minutes: the attempt ends as a timeout, is retried, and the
/// record converges once the server answers again.
#[sqlx::test]
async fn a_cluster_that_hangs_costs_a_reconcile_its_budget_not_minutes(pool: PgPool) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let emulator = h.emulator.as_ref().unwrap();
    emulator.faults().latency(Duration::from_secs(60));
    let patched = h
        .app
        .patch(
            "/api/v1/projects/team-a/deployments/qwen",
            &json!({"spec": {"replicas": 2}}),
            None,
        )
        .await;
    assert_eq!(patched.status(), StatusCode::OK);
    // The harness's lease is 5 s, so a reconcile's budget is 4 s.
    wait_for("the hung reconcile to time out", Duration::from_secs(20), || async {
        let error: Option<String> = sqlx::query_scalar(
            "select w.last_error from reconcile_work w join model_deployment d on d.id = w.deployment_id
             where d.name = 'qwen'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap()
        .flatten();
        error.is_some_and(|e| e.contains("took longer than"))
    })
    .await;
    emulator.faults().clear();
    h.wait_applied("qwen", 2).await;
}

/// The API server restarts and comes back empty (its store lost, as with an etcd restore):
/// the worker's watches are told their resourceVersion is gone (410), relist, and every
/// record is looked at again, so the objects are back within seconds and drift is repaired
/// at once afterwards. (The hour-long periodic resync plays no part.)
#[sqlx::test]
async fn after_the_api_server_restarts_every_record_converges_at_once(pool: PgPool) {
    let mut h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    for i in 0..3 {
        create(&h, &format!("model-{i}")).await;
    }
    for i in 0..3 {
        h.wait_applied(&format!("model-{i}"), 1).await;
    }
    let old = h.emulator.take().unwrap();
    let addr = old.addr();
    old.shutdown().await;
    h.emulator = Some(
        Emulator::builder()
            .gateway_api(true)
            .listen(addr)
            .start()
            .await
            .unwrap(),
    );
    wait_for(
        "every record's objects back",
        Duration::from_secs(30),
        || async {
            let mut all = true;
            for i in 0..3 {
                all &= h
                    .live("apps/v1", "Deployment", &format!("model-{i}"))
                    .await
                    .is_some();
            }
            all
        },
    )
    .await;
    let services: Api<DynamicObject> =
        Api::namespaced_with(h.kube.clone(), "team-a", &resource_of("v1", "Service"));
    services
        .delete("model-0", &DeleteParams::default())
        .await
        .unwrap();
    // The Service watch may still be in kube-runtime's reconnect backoff (0.8 s doubling
    // with each failure while the API server was down, capped at 30 s), so allow for it.
    wait_for(
        "the deleted Service restored",
        Duration::from_secs(60),
        || async { h.live("v1", "Service", "model-0").await.is_some() },
    )
    .await;

    // The watches saw the API server go and restarted (the recorder is shared by this
    // binary's tests, so this counts at least ours).
    let metrics = h.app.get("/metrics").await.text().await.unwrap();
    let restarts = modelplane::metrics::WATCH_RESTARTS;
    assert!(
        metrics.contains(&format!("# HELP {restarts} ")),
        "{metrics}"
    );
    let deployments = common::sample(&metrics, restarts, &["kind=\"Deployment\""]);
    assert!(deployments.is_some_and(|n| n >= 1.0), "{metrics}");
    let reconciled = format!("{}_count", modelplane::metrics::RECONCILE_DURATION);
    let ok = common::sample(&metrics, &reconciled, &["outcome=\"ok\""]);
    assert!(ok.is_some_and(|n| n >= 3.0), "{metrics}");
}

/// More than one replica gets a PodDisruptionBudget (one down at a time in a drain); back
/// to one replica, and when the record goes, it is removed.
#[sqlx::test]
async fn several_replicas_get_a_disruption_budget_that_follows_the_scale(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    assert!(
        h.live("policy/v1", "PodDisruptionBudget", "qwen")
            .await
            .is_none()
    );
    let scale = |replicas: i64| {
        let app = &h.app;
        async move {
            app.post_json(
                "/api/v1/projects/team-a/deployments/qwen/scale",
                &json!({"replicas": replicas}),
            )
            .await
        }
    };
    assert_eq!(scale(3).await.status(), StatusCode::OK);
    h.wait_applied("qwen", 2).await;
    let budget = h
        .live("policy/v1", "PodDisruptionBudget", "qwen")
        .await
        .expect("a budget for three replicas");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert_eq!(scale(1).await.status(), StatusCode::OK);
    h.wait_applied("qwen", 3).await;
    wait_for("the budget removed", Duration::from_secs(10), || async {
        h.live("policy/v1", "PodDisruptionBudget", "qwen")
            .await
            .is_none()
    })
    .await;
}

/// Security finding 2: the Gateway's own names are reserved whatever the platform listed.
/// A route with one of them as its hostname would outrank every project's host-less routes
/// for that host (Gateway API: `HTTPRouteSpec.Hostnames`, precedence to "the largest number
/// of characters in a matching non-wildcard hostname"), so the worker records the names a
/// Gateway answers for (its listeners' hostnames, its status's Hostname addresses) and no
/// route on it may claim them.
#[sqlx::test]
async fn a_gateways_own_hostnames_cannot_be_claimed(pool: PgPool) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    let gateways = create_gateway(
        &h,
        "any",
        json!([
            {"name": "http", "port": 80, "protocol": "HTTP", "hostname": "Models.Example.NET"},
            {"name": "wild", "port": 8080, "protocol": "HTTP", "hostname": "*.apps.example.net"}
        ]),
    )
    .await;
    wait_for(
        "the Gateway's hostnames to be recorded",
        Duration::from_secs(20),
        || async {
            modelplane::store::gateways::hostnames_of_gateway(&pool, "gateway-system/inference")
                .await
                .unwrap()
                == ["models.example.net"]
        },
    )
    .await;
    let mut spec = sim_spec();
    spec["routing"] = json!({"hostname": "models.example.net", "pathPrefix": "/"});
    let refused = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": "capture", "spec": spec}),
        )
        .await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(
        problem["errors"][0]["field"], "spec.routing.hostname",
        "{problem}"
    );
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("reserved")
    );
    // A name the Gateway does not answer for by itself is the project's to take.
    spec["routing"] = json!({"hostname": "qwen.apps.example.net", "pathPrefix": "/"});
    let created = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": "qwen", "spec": spec}),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    // A deleted Gateway's names are forgotten.
    gateways
        .delete("inference", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the deleted Gateway's hostnames to go",
        Duration::from_secs(20),
        || async {
            modelplane::store::gateways::hostnames_of_gateway(&pool, "gateway-system/inference")
                .await
                .unwrap()
                .is_empty()
        },
    )
    .await;
}

/// A process that cannot listen on its port starts nothing else: before, the worker began
/// claiming and applying work, then the process exited 160 ms later on `Address already in
/// use`. Now the port is bound first, and the error names it and the setting that moves it.
#[sqlx::test]
async fn a_taken_port_stops_the_process_before_the_worker_starts(pool: PgPool) {
    let emulator = Emulator::builder().start().await.unwrap();
    let dir =
        TempDir(std::env::temp_dir().join(format!("modelplane-port-{}", uuid::Uuid::now_v7())));
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
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    create_with_app(&app, "waiting").await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["serve", "--listen", &address])
            .env("DATABASE_URL", database_url)
            .env("MODELPLANE_KUBECONFIG", kubeconfig)
            .env("MODELPLANE_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("MODELPLANE_BOOTSTRAP_TOKEN")
            .output()
            .expect("the modelplane binary runs")
    })
    .await
    .unwrap();
    drop(taken);
    assert!(!output.status.success());
    let log = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("cannot listen on 127.0.0.1:"), "{log}");
    assert!(log.contains("MODELPLANE_LISTEN"), "{log}");
    assert!(!log.contains("reconciler started"), "{log}");
    // Nothing was applied: the waiting record's work item is there, never claimed.
    let untouched: i64 = sqlx::query_scalar(
        "select count(*) from reconcile_work where attempts = 0 and lease_owner is null",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(untouched, 1);
}

async fn create_with_app(app: &TestApp, name: &str) {
    let response = app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": name, "spec": sim_spec()}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
}

/// Makes the namespace `gateway-system` and the Gateway `inference` in it.
async fn create_gateway(h: &Harness, class: &str, listeners: Value) -> Api<DynamicObject> {
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
