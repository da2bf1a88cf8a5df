//! Models that span nodes on the emulator: each replica a LeaderWorkerSet group
//! (leaderworkerset.x-k8s.io/v1, the published v0.10 CRD), placed and refused as whole
//! groups, served by its leader, restarted whole.
//!
//! The emulator's LWS controller makes a group's pods as LWS does (`<set>-<group>` the
//! leader, `<set>-<group>-<worker>` the workers, the `leaderworkerset.sigs.k8s.io/*`
//! labels, `LWS_LEADER_ADDRESS`/`LWS_WORKER_INDEX` in every container:
//! `pkg/utils/pod/pod_utils.go` `AddLWSVariables`), keeps the headless Service that gives
//! them DNS names (`CreateHeadlessServiceIfNotExists`), counts a group ready when all its
//! pods are (`updateStatus`) and recreates a group any of whose pods is deleted or
//! restarted (`RecreateGroupOnPodRestart`, `pkg/controllers/pod_controller.go`). Its sim
//! engine takes vLLM's multi-node flags (`--nnodes`, `--node-rank`, `--master-addr`,
//! `--headless`: vLLM 0.11.1 `vllm/engine/arg_utils.py`): the leader serves only once
//! every worker has joined it at its address, and names them in `x-emulator-group`.

use std::time::Duration;

use kube::api::DeleteParams;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::{Harness, create_with, harness_on, sim_spec, wait_for};

const PATH: &str = "/api/v1/projects/team-a/deployments";

/// Four nodes of two GPUs: two groups of two 2-GPU pods fit, a third does not.
fn cluster() -> modelplane_emulator::EmulatorBuilder {
    super::emulator()
        .nodes(4)
        .gpus_per_node(2)
        .start_delay(Duration::from_millis(100))
        .gateway("gateway-system", "inference")
}

/// Tensor × pipeline parallel = 4 GPUs per replica, over 2 nodes: 2 GPUs per pod.
fn spec(replicas: i64, nodes: i64) -> Value {
    let mut spec = sim_spec();
    spec["replicas"] = json!(replicas);
    spec["nodesPerReplica"] = json!(nodes);
    spec["engine"]["tensorParallelSize"] = json!(2);
    spec["engine"]["pipelineParallelSize"] = json!(nodes);
    spec["resources"]["gpu"] = json!({});
    spec
}

/// The live pods of the group set `set`: (name, uid).
async fn group_pods(h: &Harness, set: &str) -> Vec<(String, String)> {
    h.live_pods(&format!("leaderworkerset.sigs.k8s.io/name={set}"))
        .await
}

async fn ready(h: &Harness, name: &str, groups: i64) -> Value {
    wait_for(
        &format!("{name} Ready with {groups} group(s)"),
        Duration::from_secs(30),
        || async {
            let d = h.deployment(name).await;
            d["status"]["phase"] == "Ready" && d["status"]["replicas"]["ready"] == groups
        },
    )
    .await;
    h.deployment(name).await
}

#[sqlx::test(migrations = "./migrations")]
async fn a_model_larger_than_a_node_runs_as_whole_groups_served_by_their_leaders(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "big", spec(1, 2)).await;
    let record = ready(&h, "big", 1).await;
    assert_eq!(record["status"]["replicas"]["desired"], 1);

    // One LeaderWorkerSet in place of the Deployment: a group of a leader and a worker,
    // each pod with its half of the 4 GPUs, the worker headless.
    assert!(h.live("apps/v1", "Deployment", "big").await.is_none());
    let set = h
        .live(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "big-group",
        )
        .await
        .unwrap();
    assert_eq!(set["spec"]["leaderWorkerTemplate"]["size"], 2);
    assert_eq!(set["status"]["readyReplicas"], 1, "{}", set["status"]);
    let pods = group_pods(&h, "big-group").await;
    let names: Vec<&str> = pods.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["big-group-0", "big-group-0-1"]);
    let worker = h.live("v1", "Pod", "big-group-0-1").await.unwrap();
    let args = worker["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("\"--headless\""), "{args}");
    assert_eq!(
        worker["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "2"
    );
    // The worker's Events about it regard the set.
    let events = h
        .api("events.k8s.io/v1", "Event")
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.data["regarding"]["kind"] == "LeaderWorkerSet"
                && e.data["regarding"]["name"] == "big-group"
                && e.data["reason"] == "Applied"),
        "{:?}",
        events
            .items
            .iter()
            .map(|e| &e.data["regarding"])
            .collect::<Vec<_>>()
    );
    // The Service (the in-cluster URL) reaches the leader only.
    let service = h.live("v1", "Service", "big").await.unwrap();
    assert_eq!(
        service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"],
        "0"
    );

    // Through the Gateway: the leader answers, for the group its worker joined.
    let url = record["status"]["endpoints"]["external"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = reqwest::Client::new()
        .post(format!("{url}/v1/completions"))
        .json(&json!({"model": "big", "prompt": "hello", "max_tokens": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let header = |name: &str| {
        answer
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(header("x-emulator-pod").as_deref(), Some("big-group-0"));
    assert_eq!(header("x-emulator-group").as_deref(), Some("big-group-0-1"));

    // A second group fits on the two free nodes; a third does not, said when asked.
    let scale = |replicas: i64| {
        let app = &h.app;
        async move {
            let response = app
                .post_json(&format!("{PATH}/big/scale"), &json!({"replicas": replicas}))
                .await;
            assert_eq!(response.status(), StatusCode::OK);
            response.json::<Value>().await.unwrap()
        }
    };
    let scaled = scale(2).await;
    assert!(
        scaled["warnings"].as_array().is_none_or(Vec::is_empty),
        "{scaled}"
    );
    ready(&h, "big", 2).await;
    // The fit is checked against the worker's last report of the nodes, which follows the
    // pods a moment after the status does: wait until it counts both groups' GPUs.
    wait_for(
        "the inventory to count both groups' 8 GPUs",
        Duration::from_secs(20),
        || async {
            let report: Value = h.app.get("/api/v1/capacity").await.json().await.unwrap();
            report["gpus"][0]["requested"] == 8
        },
    )
    .await;
    let scaled = scale(3).await;
    let warning = scaled["warnings"][0].as_str().unwrap_or_default();
    assert!(
        warning.starts_with("only 2 of 3 replica(s) fit"),
        "{scaled}"
    );
    wait_for(
        "the third group's pods Pending, the deployment still serving two",
        Duration::from_secs(20),
        || async {
            let d = h.deployment("big").await;
            d["status"]["replicas"]["ready"] == 2 && group_pods(&h, "big-group").await.len() == 6
        },
    )
    .await;

    // A group larger than all the nodes together is refused, naming the field.
    let refused = h
        .app
        .post_json(PATH, &json!({"name": "huge", "spec": spec(1, 8)}))
        .await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(
        problem["errors"][0]["field"], "spec.nodesPerReplica",
        "{problem}"
    );
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("the cluster's nodes together hold only 4 such pods"),
        "{problem}"
    );
    assert_eq!(
        h.app.get(&format!("{PATH}/huge")).await.status(),
        StatusCode::NOT_FOUND
    );
}

#[sqlx::test(migrations = "./migrations")]
async fn a_group_whose_worker_is_lost_restarts_whole_and_serves_again(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "big", spec(1, 2)).await;
    ready(&h, "big", 1).await;
    let before = group_pods(&h, "big-group").await;

    // RecreateGroupOnPodRestart: the worker's deletion takes its leader with it.
    h.api("v1", "Pod")
        .delete("big-group-0-1", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the group recreated whole and Ready again",
        Duration::from_secs(30),
        || async {
            let now = group_pods(&h, "big-group").await;
            now.len() == 2
                && now
                    .iter()
                    .zip(&before)
                    .all(|(a, b)| a.0 == b.0 && a.1 != b.1)
                && h.deployment("big").await["status"]["phase"] == "Ready"
        },
    )
    .await;
    // The record's deletion removes the set, its pods and its headless Service.
    h.delete_and_wait_gone("big").await;
    assert!(
        h.live(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "big-group"
        )
        .await
        .is_none()
    );
    wait_for("the group's pods gone", Duration::from_secs(20), || async {
        group_pods(&h, "big-group").await.is_empty()
    })
    .await;
}

#[sqlx::test(migrations = "./migrations")]
async fn without_the_leader_worker_set_crd_nothing_is_applied_and_the_status_says_why(
    pool: PgPool,
) {
    // The published manifests, all but LeaderWorkerSet's.
    let all = modelplane_emulator::published_crds_dir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&all).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("leaderworkerset.") {
            std::fs::copy(&path, dir.path().join(&name)).unwrap();
        }
    }
    let cluster = modelplane_emulator::Emulator::builder()
        .crds(modelplane_emulator::Crds::Manifests(dir.path().to_owned()))
        .nodes(4)
        .gpus_per_node(2)
        .gateway("gateway-system", "inference");
    let h = harness_on(pool, cluster, |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "big", spec(1, 2)).await;
    wait_for("Failed, saying why", Duration::from_secs(20), || async {
        h.deployment("big").await["status"]["phase"] == "Failed"
    })
    .await;
    let record = h.deployment("big").await;
    let applied = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Applied")
        .unwrap()
        .clone();
    assert_eq!(applied["status"], "False");
    assert_eq!(applied["reason"], "KindNotServed");
    assert!(
        record["status"]["message"]
            .as_str()
            .unwrap()
            .contains("does not serve LeaderWorkerSets"),
        "{record}"
    );
    // Nothing of the deployment is in the cluster: no Service, route or Deployment.
    for (api_version, kind) in [
        ("v1", "Service"),
        ("apps/v1", "Deployment"),
        ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ] {
        assert!(h.live(api_version, kind, "big").await.is_none(), "{kind}");
    }
}
