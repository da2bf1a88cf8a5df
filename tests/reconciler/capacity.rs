//! GPU capacity against the simulated cluster: the worker's inventory follows nodes added,
//! cordoned and removed, and the pods on them (modelplane's and others'); a create is
//! checked against it (refused when no node can ever hold a replica, warned when not every
//! replica fits now); GPU-hours accumulate while replicas are Ready and stop at zero.
//!
//! What a node reports is what the kubelet registers (k8s.io/kubernetes
//! `pkg/kubelet/kubelet_node_status.go`: `status.allocatable` with the device plugin's
//! extended resources, the `Ready` condition) and what `kubectl cordon` sets
//! (`spec.unschedulable: true`, k8s.io/kubectl `pkg/drain/cordon.go`). Pods count as the
//! scheduler counts them (`pkg/scheduler/framework/types.go` `computePodResourceRequest`:
//! the containers' sum, or the largest init container; extended resources' requests
//! default to their limits, `pkg/apis/core/v1/defaults.go`), and not once `Succeeded` or
//! `Failed`.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use super::{Harness, create_with, harness_on, sim_spec, wait_for};

const A100: &str = "NVIDIA-A100-SXM4-80GB";

fn cluster() -> modelplane_emulator::EmulatorBuilder {
    super::emulator()
        .nodes(2)
        .gpus_per_node(8)
        .gpu_product(A100)
        .start_delay(Duration::from_millis(50))
        .gateway("gateway-system", "inference")
}

fn gpu_spec(gpus: i64, replicas: i64) -> Value {
    let mut spec = sim_spec();
    spec["resources"]["gpu"] = json!({"count": gpus});
    spec["replicas"] = json!(replicas);
    spec
}

async fn capacity(h: &Harness) -> Value {
    h.app.get("/api/v1/capacity").await.json().await.unwrap()
}

/// Waits until the one GPU entry of the capacity report satisfies `check`.
async fn wait_capacity(h: &Harness, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_for(what, Duration::from_secs(20), || async {
        let report = capacity(h).await;
        report["gpus"].as_array().is_some_and(|g| g.len() == 1) && check(&report["gpus"][0])
    })
    .await;
    capacity(h).await["gpus"][0].clone()
}

#[sqlx::test]
async fn the_inventory_follows_nodes_added_cordoned_and_removed_and_their_pods(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let gpus = wait_capacity(&h, "two 8-GPU nodes", |g| g["nodes"] == 2).await;
    assert_eq!(
        gpus,
        json!({"resourceName": "nvidia.com/gpu", "product": A100, "nodes": 2, "allocatable": 16,
               "requested": 0, "requestedByModelplane": 0, "free": 16, "largestFreeBlock": 8,
               "largestNode": 8, "unavailableNodes": []})
    );
    assert!(capacity(&h).await["observedAt"].is_string());

    // modelplane's pods: 2 replicas x 2 GPUs.
    create_with(&h, "qwen", gpu_spec(2, 2)).await;
    let gpus = wait_capacity(&h, "modelplane's pods counted", |g| {
        g["requestedByModelplane"] == 4
    })
    .await;
    assert_eq!(
        (gpus["requested"].as_i64(), gpus["free"].as_i64()),
        (Some(4), Some(12))
    );

    // Another team's pod (not modelplane's), asking by limit only, counts as requested.
    let pods: Api<Pod> = Api::namespaced(h.kube.clone(), "team-a");
    let other: Pod = serde_json::from_value(json!({
        "metadata": {"name": "training"},
        "spec": {"containers": [{"name": "train", "image": "example.com/train:1",
                                 "resources": {"limits": {"nvidia.com/gpu": "3"}}}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &other).await.unwrap();
    let gpus = wait_capacity(&h, "the other pod counted", |g| g["requested"] == 7).await;
    assert_eq!(gpus["requestedByModelplane"], 4);

    // A node joins, as a kubelet registers one: the object, then its status.
    let nodes: Api<Node> = Api::all(h.kube.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "gpu-3", "labels": {"nvidia.com/gpu.product": A100}}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    nodes
        .patch_status(
            "gpu-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status"}]
            }})),
        )
        .await
        .unwrap();
    let gpus = wait_capacity(&h, "the third node", |g| g["nodes"] == 3).await;
    assert_eq!(
        (gpus["allocatable"].as_i64(), gpus["free"].as_i64()),
        (Some(24), Some(17))
    );

    // Cordoned: still there, nothing free on it.
    nodes
        .patch(
            "gpu-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let gpus = wait_capacity(&h, "the cordon", |g| g["free"] == 9).await;
    assert_eq!(
        gpus["unavailableNodes"],
        json!([{"name": "gpu-3", "reason": "cordoned"}])
    );

    // Removed.
    nodes
        .delete("gpu-3", &DeleteParams::default())
        .await
        .unwrap();
    let gpus = wait_capacity(&h, "the node gone", |g| g["nodes"] == 2).await;
    assert_eq!(
        (
            gpus["allocatable"].as_i64(),
            gpus["unavailableNodes"].clone()
        ),
        (Some(16), json!([]))
    );

    // GraphQL reads the same.
    let body: Value = h
        .app
        .request(Method::POST, "/graphql")
        .json(&json!({"query": "{ capacity { gpus { product nodes allocatable requestedByModelplane } } }"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["data"]["capacity"]["gpus"],
        json!([{"product": A100, "nodes": 2, "allocatable": 16, "requestedByModelplane": 4}])
    );
}

#[sqlx::test]
async fn a_replica_no_node_can_hold_is_refused_naming_the_field_unless_forced(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    wait_capacity(&h, "the inventory", |g| g["nodes"] == 2).await;
    let path = "/api/v1/projects/team-a/deployments";

    // 16 GPUs per replica on 8-GPU nodes: never.
    let response = h
        .app
        .post_json(path, &json!({"name": "big", "spec": gpu_spec(16, 1)}))
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["errors"][0]["field"], "spec.resources.gpu.count");
    let message = problem["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "asks for 16 nvidia.com/gpu per pod, but the largest node offering it has 8: no replica would ever be scheduled; set spec.nodesPerReplica: 2 to run each replica on 2 nodes of 8 nvidia.com/gpu"
        ),
        "{message}"
    );
    assert_eq!(
        h.app.get(&format!("{path}/big")).await.status(),
        StatusCode::NOT_FOUND,
        "nothing written"
    );
    // A product no node has: never either.
    let mut h100 = gpu_spec(1, 1);
    h100["resources"]["gpu"]["product"] = json!("NVIDIA-H100-80GB-HBM3");
    let response = h
        .app
        .post_json(path, &json!({"name": "h", "spec": h100}))
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // A dry run answers the same checks and writes nothing.
    let response = h
        .app
        .post_json(
            &format!("{path}?dryRun=true"),
            &json!({"name": "wide", "spec": gpu_spec(8, 3)}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let warning = response.headers()["warning"].to_str().unwrap().to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["warnings"][0],
        "only 2 of 3 replica(s) fit on the free nvidia.com/gpu now (16 free on 2 Ready, schedulable node(s); largest free block 8, each replica needs 8): the rest stay Pending until GPUs free up"
    );
    assert!(
        warning.starts_with("299 - \"only 2 of 3 replica(s)"),
        "{warning}"
    );
    assert_eq!(
        h.app.get(&format!("{path}/wide")).await.status(),
        StatusCode::NOT_FOUND
    );

    // Accepted with the warning; forced past "never".
    let response = h
        .app
        .post_json(path, &json!({"name": "wide", "spec": gpu_spec(8, 3)}))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["warnings"].as_array().unwrap().len(), 1);
    let response = h
        .app
        .post_json(
            &format!("{path}?force=true"),
            &json!({"name": "big", "spec": gpu_spec(16, 1)}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["warnings"][0]
            .as_str()
            .unwrap()
            .ends_with("(accepted with force=true)"),
        "{body}"
    );
    // A later read carries no warnings: they belong to the write.
    let read: Value = h
        .app
        .get(&format!("{path}/big"))
        .await
        .json()
        .await
        .unwrap();
    assert!(read.get("warnings").is_none());
}

/// GPU-hours (project admins' `…/usage`) from the `gpu_usage` intervals.
async fn gpu_hours(h: &Harness) -> f64 {
    let usage: Value = h
        .app
        .get("/api/v1/projects/team-a/usage?days=7")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(usage["daily"].as_array().unwrap().len(), 7);
    usage["gpuHours"].as_f64().unwrap()
}

#[sqlx::test]
async fn gpu_hours_accumulate_while_replicas_are_ready_and_stop_at_zero(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "qwen", gpu_spec(2, 2)).await;
    wait_for("qwen Ready", Duration::from_secs(30), || async {
        h.deployment("qwen").await["status"]["phase"] == "Ready"
    })
    .await;
    let first = gpu_hours(&h).await;
    wait_for("GPU-hours to grow", Duration::from_secs(10), || async {
        gpu_hours(&h).await > first
    })
    .await;
    let usage: Value = h
        .app
        .get("/api/v1/projects/team-a/usage")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(usage["deployments"][0]["name"], "qwen");
    // The product of the node its pods run on (the nodes are labelled with it).
    assert_eq!(usage["deployments"][0]["product"], A100);
    let today = usage["daily"].as_array().unwrap().last().unwrap().clone();
    assert!(today["gpuHours"].as_f64().unwrap() > 0.0, "{usage}");
    // Held at 4 GPUs (2 ready replicas x 2).
    let open: Vec<i64> = sqlx::query_scalar("select gpus from gpu_usage where ended_at is null")
        .fetch_all(&h.app.pool)
        .await
        .unwrap();
    assert_eq!(open, [4]);

    let scaled = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 0}),
        )
        .await;
    assert_eq!(scaled.status(), StatusCode::OK);
    wait_for("qwen ScaledToZero", Duration::from_secs(30), || async {
        h.deployment("qwen").await["status"]["phase"] == "ScaledToZero"
    })
    .await;
    // The usage is recorded by the same pass, just after the status it follows.
    wait_for("the GPU time closed", Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i64>("select count(*) from gpu_usage where ended_at is null")
            .fetch_one(&h.app.pool)
            .await
            .unwrap()
            == 0
    })
    .await;
    let open: i64 = sqlx::query_scalar("select count(*) from gpu_usage where ended_at is null")
        .fetch_one(&h.app.pool)
        .await
        .unwrap();
    assert_eq!(open, 0, "no GPU time is open at zero replicas");
    let stopped = gpu_hours(&h).await;
    // Time passes (the point of the check), and the total does not move.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gpu_hours(&h).await, stopped);
    assert!(stopped > first);
}

/// A nodeSelector that no node matches is said when the spec is written (a `Warning` and
/// `warnings`), from the labels of every node the worker last saw, instead of after the
/// unschedulable budget; one that matches says nothing. (The scheduler's NodeAffinity
/// filter, `pkg/scheduler/framework/plugins/nodeaffinity`, requires every label of
/// `nodeSelector` on the node.)
#[sqlx::test]
async fn a_node_selector_no_node_matches_is_warned_at_write_time(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    wait_capacity(&h, "the inventory", |g| g["nodes"] == 2).await;
    let path = "/api/v1/projects/team-a/deployments";
    let pinned = |product: &str| {
        let mut spec = sim_spec();
        spec["scheduling"] = json!({"nodeSelector": {"nvidia.com/gpu.product": product}});
        spec
    };

    let response = h
        .app
        .post_json(
            path,
            &json!({"name": "nowhere", "spec": pinned("NVIDIA-H100-80GB-HBM3")}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(response.headers().contains_key("warning"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["warnings"][0],
        "spec.scheduling.nodeSelector: none of the 2 node(s) in the cluster has nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3: the replicas stay Pending until such a node joins"
    );

    let response = h
        .app
        .post_json(path, &json!({"name": "somewhere", "spec": pinned(A100)}))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    assert!(body.get("warnings").is_none(), "{body}");

    // A change to a selector no node matches warns too (a merge patch adds the label).
    let response = h
        .app
        .patch(
            &format!("{path}/somewhere"),
            &json!({"spec": {"scheduling": {"nodeSelector": {"pool": "inference"}}}}),
            None,
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["warnings"][0].as_str().unwrap().contains(&format!(
            "none of the 2 node(s) in the cluster has nvidia.com/gpu.product={A100}, pool=inference"
        )),
        "{body}"
    );
}
