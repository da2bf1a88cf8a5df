//! What the cluster admits and what its nodes and kubelets say, as the status and the
//! usage report tell it: a ResourceQuota on cpu and memory admits a deployment whose
//! every container, the s3 model downloader (an init container) included, states its
//! requests and limits, and a deployment beyond the quota names the refusal in its status
//! (the ReplicaSet controller's `ReplicaFailure`, kubernetes
//! pkg/controller/replicaset/replica_set_utils.go, copied to the Deployment); GPU usage
//! names the product of the node its pods run on (the `nvidia.com/gpu.product` label); an
//! image pull in back-off keeps the pull's error (kubernetes
//! pkg/kubelet/images/image_manager.go, `pullImage`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::{Harness, create_with, harness_on, sim_spec, wait_for};

const A100: &str = "NVIDIA-A100-SXM4-80GB";

fn cluster() -> modelplane_emulator::EmulatorBuilder {
    super::emulator()
        .nodes(2)
        .gpus_per_node(8)
        .gpu_product(A100)
        .start_delay(Duration::from_millis(100))
        .fail_images("*nope*")
        .gateway("gateway-system", "inference")
}

async fn wait_status(h: &Harness, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_for(what, Duration::from_secs(30), || async {
        check(&h.deployment(name).await["status"])
    })
    .await;
    h.deployment(name).await["status"].clone()
}

fn s3_spec(replicas: i64) -> Value {
    let mut spec = sim_spec();
    spec["model"] = json!({"source": "s3://models/qwen/0.5b"});
    spec["replicas"] = json!(replicas);
    spec
}

#[sqlx::test]
async fn a_quota_on_cpu_and_memory_admits_s3_models_and_names_the_refusal_beyond_it(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    // At zero replicas first: the namespace exists, and no pod is made before the quota.
    create_with(&h, "fits", s3_spec(0)).await;
    wait_status(&h, "fits", "fits ScaledToZero", |s| {
        s["phase"] == "ScaledToZero"
    })
    .await;
    let quota: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"},
        "spec": {"hard": {"requests.cpu": "3", "requests.memory": "3Gi",
                          "limits.cpu": "3", "limits.memory": "3Gi"}},
    }))
    .unwrap();
    h.api("v1", "ResourceQuota")
        .create(&PostParams::default(), &quota)
        .await
        .unwrap();

    let scaled = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/fits/scale",
            &json!({"replicas": 1}),
        )
        .await;
    assert_eq!(scaled.status(), StatusCode::OK);
    wait_status(&h, "fits", "fits Ready", |s| s["phase"] == "Ready").await;
    let pods: Api<Pod> = Api::namespaced(h.kube.clone(), "team-a");
    let listed = pods
        .list(&ListParams::default().labels("app.kubernetes.io/instance=fits"))
        .await
        .unwrap();
    let init = listed.items[0]
        .spec
        .as_ref()
        .unwrap()
        .init_containers
        .clone();
    assert_eq!(init.unwrap()[0].name, "fetch-model");

    // The downloader's limits (2 cpu, 2Gi) count: a second replica set is beyond 3.
    create_with(&h, "big", s3_spec(1)).await;
    let status = wait_status(&h, "big", "big refused by the quota", |s| {
        s["message"]
            .as_str()
            .is_some_and(|m| m.contains("exceeded quota"))
    })
    .await;
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("pods cannot be created (FailedCreate): pods \"big-")
            && message.contains(
                "is forbidden: exceeded quota: compute, requested: limits.cpu=2,limits.memory=2Gi, \
                 used: limits.cpu=2,limits.memory=2Gi, limited: limits.cpu=3,limits.memory=3Gi"
            ),
        "{message}"
    );
    // A quota may free up: not Failed before the unschedulable budget.
    assert_eq!(status["phase"], "Deploying", "{status}");
}

#[sqlx::test]
async fn gpu_usage_names_the_product_of_the_node_the_pods_run_on(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    // No product in the spec: it runs on whatever GPU node, here an A100 one.
    spec["resources"]["gpu"] = json!({"count": 1});
    create_with(&h, "qwen", spec).await;
    wait_status(&h, "qwen", "qwen Ready", |s| s["phase"] == "Ready").await;
    let usage = || async {
        let usage: Value = h
            .app
            .get("/api/v1/projects/team-a/usage")
            .await
            .json()
            .await
            .unwrap();
        usage
    };
    // A deployment is listed once its GPU time is above zero.
    wait_for("GPU-hours", Duration::from_secs(10), || async {
        usage().await["deployments"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
    })
    .await;
    let usage = usage().await;
    assert_eq!(usage["deployments"][0]["name"], "qwen", "{usage}");
    assert_eq!(usage["deployments"][0]["product"], A100, "{usage}");
    let open: Vec<(Option<String>, i64)> =
        sqlx::query_as("select product, gpus from gpu_usage where ended_at is null")
            .fetch_all(&h.app.pool)
            .await
            .unwrap();
    assert_eq!(open, [(Some(A100.to_owned()), 1)]);
}

#[sqlx::test]
async fn an_image_pull_in_back_off_keeps_the_pull_error_in_the_status(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["engine"]["image"] = json!("registry.example.com/nope:missing");
    create_with(&h, "bad", spec).await;
    let pods: Api<Pod> = Api::namespaced(h.kube.clone(), "team-a");
    wait_for(
        "the kubelet's back-off",
        Duration::from_secs(30),
        || async {
            pods.list(&ListParams::default().labels("app.kubernetes.io/instance=bad"))
                .await
                .unwrap()
                .items
                .iter()
                .any(|p| {
                    let waiting = serde_json::to_value(p).unwrap()["status"]["containerStatuses"]
                        [0]["state"]["waiting"]["reason"]
                        .clone();
                    waiting == "ImagePullBackOff"
                })
        },
    )
    .await;
    let status = wait_status(&h, "bad", "the back-off in the status", |s| {
        s["message"]
            .as_str()
            .is_some_and(|m| m.contains("(ImagePullBackOff)"))
    })
    .await;
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains(
            "image `registry.example.com/nope:missing` cannot be pulled (ImagePullBackOff): \
             rpc error: code = NotFound desc = failed to pull and unpack image \
             \"registry.example.com/nope:missing\""
        ) && message.ends_with("registry.example.com/nope:missing: not found"),
        "{message}"
    );
    assert_eq!(status["phase"], "Failed");
}
