//! Nodes that stop reporting (issue #41): on a real cluster the node lifecycle controller
//! marks the node Unknown, taints it `node.kubernetes.io/unreachable` and marks its pods not
//! ready, while the Deployment keeps `NewReplicaSetAvailable`. That is not a rollout: the
//! record reads Degraded naming the node, and is Ready again once the pods, evicted after
//! their toleration, are replaced on the nodes that remain.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use sqlx::PgPool;

use super::{Harness, create_with, harness_on, sim_spec, wait_for};

/// Two nodes whose silence is noticed within a second (the real grace period is 50 s) and
/// whose pods are evicted 3 s after the taint (the real default toleration is 300 s).
fn cluster() -> modelplane_emulator::EmulatorBuilder {
    super::emulator()
        .nodes(2)
        .start_delay(Duration::from_millis(100))
        .node_monitor_grace_period(Duration::from_secs(1))
        .default_toleration(Duration::from_secs(3))
        .gateway("gateway-system", "inference")
}

/// The record's pods that are not being deleted, with their nodes.
async fn pods(h: &Harness, name: &str) -> Vec<(String, String)> {
    let id = h.record_id(name).await;
    let pods: Api<Pod> = Api::all(h.kube.clone());
    pods.list(&ListParams::default().labels(&format!("modelplane.io/deployment-id={id}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.spec.and_then(|s| s.node_name).unwrap_or_default(),
            )
        })
        .collect()
}

fn condition<'a>(record: &'a Value, type_: &str) -> &'a Value {
    record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or(&Value::Null)
}

/// The record's phase changes, oldest first (`Ready → Degraded`, ...).
async fn phase_changes(h: &Harness, name: &str) -> Vec<String> {
    let events: Value = h
        .app
        .get(&format!(
            "/api/v1/projects/team-a/deployments/{name}/events"
        ))
        .await
        .json()
        .await
        .unwrap();
    let mut changes: Vec<(i64, String)> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "PhaseChanged")
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["message"]
                    .as_str()
                    .unwrap()
                    .split(':')
                    .next()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    changes.sort();
    changes.into_iter().map(|(_, change)| change).collect()
}

#[sqlx::test]
async fn a_node_that_stops_reporting_degrades_naming_it_then_its_replicas_move(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["replicas"] = json!(2);
    create_with(&h, "qwen", spec).await;
    wait_for(
        "qwen Ready on two nodes",
        Duration::from_secs(30),
        || async {
            let nodes: std::collections::BTreeSet<String> =
                pods(&h, "qwen").await.into_iter().map(|(_, n)| n).collect();
            h.deployment("qwen").await["status"]["phase"] == "Ready" && nodes.len() == 2
        },
    )
    .await;
    let lost = pods(&h, "qwen").await[0].1.clone();
    let emulator = h.emulator.as_ref().unwrap();

    emulator.stop_node_heartbeats(&lost);
    let seen = std::cell::RefCell::new(Vec::new());
    wait_for(
        "qwen Degraded naming the node",
        Duration::from_secs(30),
        || async {
            let record = h.deployment("qwen").await;
            let status = &record["status"];
            seen.borrow_mut()
                .push(format!("{}: {}", status["phase"], status["message"]));
            status["phase"] == "Degraded"
                && status["message"].as_str().unwrap().starts_with(&format!(
                    "node {lost} stopped reporting (NotReady, Ready=Unknown since "
                ))
        },
    )
    .await;
    let record = h.deployment("qwen").await;
    let message = record["status"]["message"].as_str().unwrap();
    assert!(
        message.ends_with("1 of 1 replicas there are not ready; 1/2 replicas available"),
        "{message}"
    );
    let progressing = condition(&record, "Progressing");
    assert_eq!(progressing["status"], "False", "{progressing}");
    assert_eq!(progressing["reason"], "NodeNotReady", "{progressing}");
    assert_eq!(condition(&record, "Available")["status"], "False");
    assert!(
        !seen.borrow().iter().any(|s| s.starts_with("\"Deploying\"")),
        "never Deploying: {seen:?}"
    );

    // After the toleration the pod is evicted and replaced on the node that remains.
    wait_for(
        "qwen Ready again on the other node",
        Duration::from_secs(30),
        || async {
            let pods = pods(&h, "qwen").await;
            h.deployment("qwen").await["status"]["phase"] == "Ready"
                && pods.len() == 2
                && pods.iter().all(|(_, node)| *node != lost)
        },
    )
    .await;
    let changes = phase_changes(&h, "qwen").await;
    let after_ready = changes
        .iter()
        .skip_while(|c| !c.ends_with("→ Ready"))
        .skip(1)
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(
        after_ready,
        ["Ready → Degraded", "Degraded → Ready"],
        "all changes: {changes:?}"
    );
    emulator.resume_node_heartbeats(&lost);
}
