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

use futures::StreamExt;
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

/// User + system CPU time of this process (emulator and client), from /proc (0 elsewhere).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which ends with ')'): utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
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
    let cpu0 = cpu_seconds();
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
    // Follow the Deployments with a watch (a poll would list all N each time: quadratic).
    let deps: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let deadline = t0 + Duration::from_secs(60 + n as u64 / 10);
    let mut available = std::collections::HashSet::new();
    let mut events = Box::pin(kube::runtime::watcher(deps, Default::default()));
    let mut last_report = Instant::now();
    while available.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = tokio::time::timeout(left, events.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "n={n}: only {} available after {:.1}s",
                    available.len(),
                    t0.elapsed().as_secs_f64()
                )
            })
            .expect("watch stream")
            .expect("watch event");
        let mut see = |d: Deployment| {
            let name = d.metadata.name.clone().unwrap_or_default();
            let ok = d.status.and_then(|s| s.available_replicas).unwrap_or(0) == 1;
            if ok {
                available.insert(name);
            } else {
                available.remove(&name);
            }
        };
        match ev {
            kube::runtime::watcher::Event::Apply(d)
            | kube::runtime::watcher::Event::InitApply(d) => see(d),
            kube::runtime::watcher::Event::Delete(d) => {
                available.remove(&d.metadata.name.unwrap_or_default());
            }
            _ => {}
        }
        if std::env::var_os("SCALE_VERBOSE").is_some()
            && last_report.elapsed() > Duration::from_secs(1)
        {
            last_report = Instant::now();
            eprintln!(
                "  t={:.1}s available={}",
                t0.elapsed().as_secs_f64(),
                available.len()
            );
        }
    }
    let took = t0.elapsed();
    let cpu = cpu_seconds() - cpu0;
    eprintln!(
        "n={n}: all {n} deployments available after {:.1}s ({:.2} ms per deployment); process CPU {cpu:.1}s ({:.2} ms per deployment)",
        took.as_secs_f64(),
        took.as_secs_f64() * 1000.0 / n as f64,
        cpu * 1000.0 / n as f64
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
