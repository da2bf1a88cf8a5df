//! Reconciler latency targets, measured on this machine (not asserted by the tests):
//! - an idle system applies a new record within 100 ms of its creation;
//! - a cluster status change reaches the record within a second;
//! - N records are applied (not run: the emulator here simulates no cluster) in seconds.
//!
//! End-to-end convergence (pods running, records Ready) is `bench/converge.sh`.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench --bench latency -- 1000`
//! It creates (and drops) its own database.

use modelplane_testkit::scratch as support;

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use modelplane::domain::{DeploymentSpec, EngineDefaults, SpecLimits};
use modelplane::reconciler::cluster::connect;
use modelplane::reconciler::desired::BuildConfig;
use modelplane::reconciler::status::Budgets;
use modelplane::reconciler::worker::{Worker, WorkerConfig};
use modelplane::service::deployments::{CreateDeployment, create_deployment};
use modelplane::service::projects::{CreateProject, create_project};
use modelplane::service::{Actor, Context};
use modelplane_emulator::Emulator;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() {
    let records: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1000);
    let database = support::ScratchDatabase::create("modelplane_bench").await;
    let (name, pool) = (database.name.clone(), database.pool.clone());

    let emulator = Emulator::builder().start().await.unwrap();
    let kubeconfig = std::env::temp_dir().join(format!("{name}.kubeconfig"));
    std::fs::write(&kubeconfig, emulator.kubeconfig_yaml()).unwrap();
    let cluster = connect(Some(&kubeconfig), None, Some("bench"))
        .await
        .unwrap();
    let kube = cluster.client.clone();
    let shutdown = CancellationToken::new();
    let config = WorkerConfig {
        build: BuildConfig {
            installation: "bench".into(),
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
            default_gateway: None,
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
        worker_id: "bench".into(),
        lease: Duration::from_secs(30),
        resync: Duration::from_secs(3600),
        concurrency: 16,
        gateway_silence: Duration::from_secs(300),
        activator_service: None,
    };
    tokio::spawn(Worker::new(pool.clone(), cluster, config).run(shutdown.clone()));

    let hot = modelplane::store::hot::HotConnections::new(pool.clone());

    let ctx = Context {
        pool: pool.clone(),
        hot: hot.clone(),
        lookups: modelplane::store::lookups::DeploymentLookups::new(hot.clone()),
        creates: modelplane::store::creates::DeploymentCreates::new(hot),
        access: Default::default(),
        limits: SpecLimits::default(),
        routing: Default::default(),
        gpu_resource_name: "nvidia.com/gpu".into(),
        load_interval: std::time::Duration::from_secs(15),
    };
    let actor = Actor::system();
    create_project(
        &ctx,
        &actor,
        CreateProject {
            name: "bench".into(),
            namespace: None,
            adopt_namespace: false,
        },
    )
    .await
    .unwrap();
    let spec: DeploymentSpec =
        serde_json::from_value(json!({"model": {"source": "hf://a/b"}, "engine": {"kind": "sim"}}))
            .unwrap();
    let create = |name: String| {
        let (ctx, actor, spec) = (ctx.clone(), actor.clone(), spec.clone());
        async move {
            create_deployment(
                &ctx,
                &actor,
                "bench",
                CreateDeployment { name, spec },
                None,
                modelplane::service::capacity::WriteOptions::default(),
            )
            .await
            .unwrap()
            .deployment
            .id
        }
    };
    let applied = |id: uuid::Uuid| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, bool>(
                "select applied_digest is not null from model_deployment where id = $1",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };

    // 1. Idle latency: one record at a time.
    let mut latencies = Vec::new();
    for i in 0..20 {
        let started = Instant::now();
        let id = create(format!("idle-{i}")).await;
        while !applied(id).await {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        latencies.push(started.elapsed());
    }
    latencies.sort();
    println!(
        "idle create → applied: p50 {:?}, p95 {:?} (target < 100 ms)",
        latencies[10], latencies[18]
    );

    // 2. A status change in the cluster reaches the record.
    let id = create("watched".into()).await;
    while !applied(id).await {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        kube.clone(),
        "bench",
        &ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
    );
    let generation = deployments
        .get("watched")
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap_or(1);
    let started = Instant::now();
    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "watched"},
        "status": {"observedGeneration": generation, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}});
    deployments
        .patch_status(
            "watched",
            &PatchParams::apply("bench-controller").force(),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    loop {
        let phase: String = sqlx::query_scalar("select phase from model_deployment where id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
        if phase == "Ready" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the status change never arrived"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    println!(
        "cluster status change → record Ready: {:?} (target < 1 s)",
        started.elapsed()
    );

    // 3. Many records at once.
    let started = Instant::now();
    let mut ids = Vec::with_capacity(records);
    for i in 0..records {
        ids.push(create(format!("bulk-{i}")).await);
    }
    let created = started.elapsed();
    loop {
        let done: i64 = sqlx::query_scalar("select count(*) from model_deployment where name like 'bulk-%' and applied_digest is not null")
            .fetch_one(&pool)
            .await
            .unwrap();
        if done as usize == records {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "{records} records: created in {created:?}, all applied after {:?} (target: seconds)",
        started.elapsed()
    );

    shutdown.cancel();
    emulator.shutdown().await;
    let _ = std::fs::remove_file(&kubeconfig);
    database.drop().await;
}
