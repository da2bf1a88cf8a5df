//! Status tests of whether replicas serve: lost with their node, or not yet listed by the
//! Service's endpoints.

use super::*;

/// A pod of the current generation on `node`: ready, or as the node lifecycle controller
/// leaves it on a lost node (`MarkPodsNotReady`: Ready False, containers still ready).
fn pod_on(name: &str, node: &str, ready: bool, evicted: bool) -> Pod {
    let mut pod = pod(
        name,
        "new",
        json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }},
            {"type": "ContainersReady", "status": "True"},
        ]}),
    );
    pod.spec = Some(serde_json::from_value(json!({"containers": [], "nodeName": node})).unwrap());
    if evicted {
        pod.metadata.deletion_timestamp =
            serde_json::from_value(json!("2026-11-22T12:00:00Z")).unwrap();
    }
    pod
}

fn lost(name: &str) -> LostNode {
    LostNode {
        name: name.into(),
        ready: "Unknown".into(),
        since: Some(Utc.with_ymd_and_hms(2026, 11, 22, 11, 59, 0).unwrap()),
    }
}

#[test]
fn replicas_on_a_node_that_stopped_reporting_are_degraded_naming_the_node_not_a_rollout() {
    // Issue #41: the node went Unknown, its pods were marked not ready, and the Deployment
    // still says NewReplicaSetAvailable; the pods look like a rollout's (not ready, current
    // generation), but nothing rolls out.
    let mut seen = observed(
        deployment(2, 2, 0, 2),
        vec![
            pod_on("qwen-1", "gpu-node-1", false, false),
            pod_on("qwen-2", "gpu-node-1", false, false),
        ],
    );
    seen.lost_nodes = vec![lost("gpu-node-1")];
    let status = run(spec(2), &seen);
    assert_eq!(status.phase, Phase::Degraded, "{}", status.message);
    assert_eq!(
        status.message,
        "node gpu-node-1 stopped reporting (NotReady, Ready=Unknown since 2026-11-22T11:59:00Z): \
         2 of 2 replicas there are not ready; 0/2 replicas available"
    );
    let progressing = condition_of(&status, "Progressing");
    assert_eq!(progressing.status, ConditionStatus::False);
    assert_eq!(progressing.reason, "NodeNotReady");
    assert_eq!(progressing.message, status.message);

    // One of two nodes lost: the other replica serves.
    let mut seen = observed(
        deployment(2, 2, 1, 2),
        vec![
            pod_on("qwen-1", "gpu-node-1", false, false),
            pod_on("qwen-2", "gpu-node-2", true, false),
        ],
    );
    seen.lost_nodes = vec![lost("gpu-node-1")];
    let status = run(spec(2), &seen);
    assert_eq!(status.phase, Phase::Degraded);
    assert!(
        status
            .message
            .starts_with("node gpu-node-1 stopped reporting")
            && status
                .message
                .ends_with("1 of 1 replicas there are not ready; 1/2 replicas available"),
        "{}",
        status.message
    );
    assert_eq!(condition_of(&status, "Progressing").reason, "NodeNotReady");

    // Evicted after the toleration, replacements starting elsewhere: still the node's doing.
    let mut seen = observed(
        deployment(2, 2, 1, 2),
        vec![
            pod_on("qwen-1", "gpu-node-1", false, true),
            pod_on("qwen-2", "gpu-node-2", true, false),
            pod(
                "qwen-3",
                "new",
                json!({"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}),
            ),
        ],
    );
    seen.lost_nodes = vec![lost("gpu-node-1")];
    let status = run(spec(2), &seen);
    assert_eq!(status.phase, Phase::Degraded);
    assert!(
        status.message.contains(
            "1 of 1 replicas there are not ready (1 evicted, being replaced on other nodes)"
        ),
        "{}",
        status.message
    );

    // Replaced: Ready, whatever the lost node still holds.
    let mut seen = observed(
        deployment(2, 2, 2, 2),
        vec![
            pod_on("qwen-1", "gpu-node-1", false, true),
            pod_on("qwen-2", "gpu-node-2", true, false),
            pod_on("qwen-3", "gpu-node-2", true, false),
        ],
    );
    seen.lost_nodes = vec![lost("gpu-node-1")];
    assert_eq!(run(spec(2), &seen).phase, Phase::Ready);

    // The same pods without the node's word are a rollout, as before.
    let seen = observed(
        deployment(2, 2, 0, 2),
        vec![
            pod_on("qwen-1", "gpu-node-1", false, false),
            pod_on("qwen-2", "gpu-node-1", false, false),
        ],
    );
    assert_eq!(run(spec(2), &seen).phase, Phase::Deploying);
}

#[test]
fn ready_waits_for_the_services_endpoints_to_list_a_ready_pod() {
    // Every replica available, but the EndpointSlice controller has not caught up: a request
    // to the URL would find no endpoint yet.
    let mut o = observed(deployment(2, 2, 2, 2), vec![]);
    o.serving_endpoints = Some(0);
    let status = run(spec(2), &o);
    assert_eq!(status.phase, Phase::Deploying, "{}", status.message);
    assert_eq!(
        status.message,
        "2/2 replicas available; waiting for the Service's endpoints (EndpointSlices) to list a ready pod"
    );
    o.serving_endpoints = Some(2);
    assert_eq!(run(spec(2), &o).phase, Phase::Ready);
    // Not known (the slice watch has not listed): nothing held back.
    o.serving_endpoints = None;
    assert_eq!(run(spec(2), &o).phase, Phase::Ready);
}
