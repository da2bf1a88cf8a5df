//! Scale benchmark (ignored by default): N modelplane-like deployments (a Deployment with
//! one `sim` pod, a Service, a PodDisruptionBudget) server-side applied over the real
//! `kube` client into one namespace, then timed until every Deployment reports
//! availableReplicas=1.
//!
//! ```sh
//! cargo nextest run -p modelplane-emulator --run-ignored only scale_1k   # or scale_10k
//! SCALE_N=3000 cargo nextest run -p modelplane-emulator --run-ignored only scale_n
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Config};
use modelplane_emulator::Emulator;
use serde_json::json;

const NS: &str = "default";
const CONCURRENCY: usize = 16;

fn deployment(i: usize) -> serde_json::Value {
    let name = format!("m{i}");
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"modelplane.io/deployment": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"modelplane.io/deployment": name}},
            "template": {
                "metadata": {"labels": {"modelplane.io/deployment": name, "modelplane.io/engine": "sim"}},
                "spec": {"containers": [{
                    "name": "engine",
                    "image": "ghcr.io/llm-d/llm-d-inference-sim:v0.5.0",
                    "args": ["--model", name, "--port", "8000"],
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
                }]},
            },
        },
    })
}

fn service(i: usize) -> serde_json::Value {
    let name = format!("m{i}");
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": {"modelplane.io/deployment": name},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    })
}

fn pdb(i: usize) -> serde_json::Value {
    let name = format!("m{i}");
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"modelplane.io/deployment": name}}},
    })
}

async fn run(n: usize) -> Duration {
    // 110 pods per node (the kubelet default): enough nodes for n pods with room to spare.
    let nodes = n.div_ceil(100).max(3);
    let emu = Emulator::builder()
        .nodes(nodes)
        .start_delay(Duration::ZERO)
        .start()
        .await
        .expect("emulator starts");
    let client = Client::try_from(Config::new(emu.url().parse().unwrap())).unwrap();
    let t0 = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let client = client.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let deps: Api<Deployment> = Api::namespaced(client.clone(), NS);
                let svcs: Api<Service> = Api::namespaced(client.clone(), NS);
                let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
                let pp = PatchParams::apply("scale-bench").force();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let name = format!("m{i}");
                    deps.patch(&name, &pp, &Patch::Apply(deployment(i)))
                        .await
                        .expect("apply deployment");
                    svcs.patch(&name, &pp, &Patch::Apply(service(i)))
                        .await
                        .expect("apply service");
                    pdbs.patch(&name, &pp, &Patch::Apply(pdb(i)))
                        .await
                        .expect("apply pdb");
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let applied = t0.elapsed();
    eprintln!("n={n}: applied in {:.1}s", applied.as_secs_f64());
    let deps: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let deadline = t0 + Duration::from_secs(60 + n as u64 / 10);
    loop {
        let mut available = 0;
        let mut lp = ListParams::default().limit(500);
        loop {
            let page = deps.list(&lp).await.expect("list deployments");
            available += page
                .items
                .iter()
                .filter(|d| {
                    d.status
                        .as_ref()
                        .and_then(|s| s.available_replicas)
                        .unwrap_or(0)
                        == 1
                })
                .count();
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => break,
            }
        }
        if available == n {
            break;
        }
        if std::env::var_os("SCALE_VERBOSE").is_some() {
            eprintln!(
                "  t={:.1}s available={available}",
                t0.elapsed().as_secs_f64()
            );
        }
        assert!(
            Instant::now() < deadline,
            "n={n}: only {available} available after {:.1}s",
            t0.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = t0.elapsed();
    eprintln!(
        "n={n}: all {n} deployments available after {:.1}s ({:.2} ms per deployment)",
        took.as_secs_f64(),
        took.as_secs_f64() * 1000.0 / n as f64
    );
    // Every pod has its endpoints.
    let slices: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
        )),
    );
    let count = slices
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    eprintln!("n={n}: {count} EndpointSlices");
    emu.shutdown().await;
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --run-ignored only"]
async fn scale_1k() {
    run(1_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --run-ignored only"]
async fn scale_10k() {
    run(10_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --run-ignored only"]
async fn scale_n() {
    let n = std::env::var("SCALE_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000);
    run(n).await;
}
