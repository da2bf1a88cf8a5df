//! Pod admission by LimitRange and ResourceQuota, as the real API server's LimitRanger and
//! ResourceQuota plugins do it, and how a refusal shows on a ReplicaSet and Deployment;
//! and the kubelet's image pull back-off message.
//!
//! Sources (kubernetes): plugin/pkg/admission/limitranger/admission.go (defaults,
//! `minConstraint`, `maxConstraint`, the `kubernetes.io/limit-ranger` annotation);
//! staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go
//! (`CheckRequest`: "failed quota: <name>: <constraints>", "exceeded quota: <name>,
//! requested: …, used: …, limited: …"); pkg/quota/v1/evaluator/core/pods.go
//! (`Constraints`: "must specify <resource> for: <containers>"); the validating admission
//! names the pod by its generated name (apiserver `rest.AdmissionToValidateObjectFunc`);
//! pkg/controller/replicaset/replica_set.go and replica_set_utils.go (`FailedCreate`
//! event, `ReplicaFailure` condition with the API error); pkg/kubelet/images/image_manager.go
//! (`pullImage`: the back-off message carries the previous pull's error).

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use modelplane_emulator::{Emulator, RunningEmulator};
use serde_json::{Value, json};

#[path = "support/wait.rs"]
mod wait;
use wait::wait_for;

async fn start() -> (RunningEmulator, Client) {
    let emu = Emulator::builder()
        .nodes(2)
        .start_delay(Duration::from_millis(100))
        .fail_images("*:does-not-exist")
        .start()
        .await
        .expect("emulator starts");
    let client = Client::try_from(Config::new(emu.url().parse().unwrap())).unwrap();
    (emu, client)
}

fn core(client: &Client, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", kind));
    Api::default_namespaced_with(client.clone(), &resource)
}

async fn create(client: &Client, kind: &str, body: Value) -> Value {
    let obj: DynamicObject = serde_json::from_value(body).unwrap();
    let created = core(client, kind)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
    serde_json::to_value(created).unwrap()
}

/// Creates a pod; the API server's refusal as (code, reason, message).
async fn create_pod(client: &Client, body: Value) -> Result<Value, (u16, String, String)> {
    let pod: Pod = serde_json::from_value(body).unwrap();
    let api: Api<Pod> = Api::default_namespaced(client.clone());
    match api.create(&PostParams::default(), &pod).await {
        Ok(p) => Ok(serde_json::to_value(p).unwrap()),
        Err(kube::Error::Api(e)) => Err((e.code, e.reason, e.message)),
        Err(e) => panic!("{e}"),
    }
}

fn pod(name: &str, containers: Value, init: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": containers, "initContainers": init},
    })
}

#[tokio::test]
async fn a_limit_range_defaults_containers_and_init_containers_and_refuses_below_its_min() {
    let (emu, client) = start().await;
    create(
        &client,
        "LimitRange",
        json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits"},
               "spec": {"limits": [{"type": "Container",
                   "default": {"cpu": "500m", "memory": "512Mi"},
                   "defaultRequest": {"cpu": "250m"},
                   "min": {"cpu": "100m"}}]}}),
    )
    .await;
    let created = create_pod(
        &client,
        pod(
            "defaulted",
            json!([{"name": "app", "image": "nginx:1", "resources": {"limits": {"memory": "1Gi"}}}]),
            json!([{"name": "setup", "image": "busybox:1"}]),
        ),
    )
    .await
    .unwrap();
    let app = &created["spec"]["containers"][0]["resources"];
    // The memory request was defaulted from the container's own limit before admission.
    assert_eq!(
        app,
        &json!({"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"cpu": "250m", "memory": "1Gi"}})
    );
    let setup = &created["spec"]["initContainers"][0]["resources"];
    assert_eq!(
        setup,
        &json!({"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "250m", "memory": "512Mi"}})
    );
    assert_eq!(
        created["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu request for container app; cpu limit for container app; \
         cpu, memory request for init container setup; cpu, memory limit for init container setup"
    );

    let refused = create_pod(
        &client,
        pod(
            "small",
            json!([{"name": "app", "image": "nginx:1", "resources": {"requests": {"cpu": "50m"}}}]),
            json!([]),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(
        refused,
        (
            403,
            "Forbidden".into(),
            "pods \"small\" is forbidden: minimum cpu usage per Container is 100m, but request is 50m"
                .into()
        )
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn a_resource_quota_wants_every_container_to_set_its_resources_and_refuses_beyond_hard() {
    let (emu, client) = start().await;
    create(
        &client,
        "ResourceQuota",
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"},
               "spec": {"hard": {"requests.cpu": "2", "limits.memory": "2Gi"}}}),
    )
    .await;
    let sized = |cpu: &str| json!({"requests": {"cpu": cpu}, "limits": {"memory": "1Gi"}});
    // The init container sets no memory limit.
    let refused = create_pod(
        &client,
        pod(
            "unsized",
            json!([{"name": "app", "image": "nginx:1", "resources": sized("1")}]),
            json!([{"name": "setup", "image": "busybox:1", "resources": {"requests": {"cpu": "100m"}}}]),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(
        refused.2,
        "pods \"unsized\" is forbidden: failed quota: compute: must specify limits.memory for: setup"
    );
    assert_eq!(refused.0, 403);

    create_pod(
        &client,
        pod(
            "first",
            json!([{"name": "app", "image": "nginx:1", "resources": sized("1500m")}]),
            json!([]),
        ),
    )
    .await
    .unwrap();
    let refused = create_pod(
        &client,
        pod(
            "second",
            json!([{"name": "app", "image": "nginx:1", "resources": sized("1")}]),
            json!([]),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(
        refused.2,
        "pods \"second\" is forbidden: exceeded quota: compute, requested: requests.cpu=1, \
         used: requests.cpu=1500m, limited: requests.cpu=2"
    );

    // The quota controller keeps status.used.
    let quota = wait_for("status.used", || async {
        let q = serde_json::to_value(core(&client, "ResourceQuota").get("compute").await.unwrap())
            .unwrap();
        (q["status"]["used"] == json!({"requests.cpu": "1500m", "limits.memory": "1Gi"}))
            .then_some(q)
    })
    .await;
    assert_eq!(
        quota["status"]["hard"],
        json!({"requests.cpu": "2", "limits.memory": "2Gi"})
    );
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.delete("first", &Default::default()).await.unwrap();
    wait_for("status.used back to 0", || async {
        let q = serde_json::to_value(core(&client, "ResourceQuota").get("compute").await.unwrap())
            .unwrap();
        (q["status"]["used"] == json!({"requests.cpu": "0", "limits.memory": "0"})).then_some(())
    })
    .await;
    emu.shutdown().await;
}

#[tokio::test]
async fn a_quota_refusal_is_a_replica_failure_and_a_failed_create_event() {
    let (emu, client) = start().await;
    create(
        &client,
        "ResourceQuota",
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"},
               "spec": {"hard": {"limits.memory": "1Gi"}}}),
    )
    .await;
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "server", "image": "nginx:1",
                                       "resources": {"limits": {"memory": "2Gi"}}}]}}},
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let failure = |obj: Value| {
        obj.pointer("/status/conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == "ReplicaFailure")
            .cloned()
    };
    let replicasets: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let (rs, condition) = wait_for("ReplicaFailure on the ReplicaSet", || async {
        let rs = replicasets.list(&ListParams::default()).await.ok()?.items;
        let rs = serde_json::to_value(rs.first()?).unwrap();
        let c = failure(rs.clone())?;
        Some((rs, c))
    })
    .await;
    let rs_name = rs["metadata"]["name"].as_str().unwrap();
    assert_eq!(condition["reason"], "FailedCreate");
    let message = condition["message"].as_str().unwrap();
    let pod_prefix = format!("pods \"{rs_name}-");
    let expected = "\" is forbidden: exceeded quota: compute, requested: limits.memory=2Gi, \
                    used: limits.memory=0, limited: limits.memory=1Gi";
    assert!(
        message.starts_with(&pod_prefix) && message.ends_with(expected),
        "{message}"
    );
    let d = wait_for("ReplicaFailure on the Deployment", || async {
        failure(serde_json::to_value(deployments.get("web").await.ok()?).unwrap())
    })
    .await;
    assert_eq!(d["reason"], "FailedCreate");
    assert!(d["message"].as_str().unwrap().ends_with(expected), "{d}");
    let events: Api<Event> = Api::default_namespaced(client.clone());
    let event = wait_for("FailedCreate event", || async {
        events
            .list(&ListParams::default().fields(&format!("involvedObject.name={rs_name}")))
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedCreate"))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.message.unwrap();
    assert!(
        note.starts_with(&format!("Error creating: {pod_prefix}")) && note.ends_with(expected),
        "{note}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn the_image_pull_back_off_keeps_the_pull_error() {
    let (emu, client) = start().await;
    let image = "ghcr.io/example/server:does-not-exist";
    create_pod(
        &client,
        pod(
            "pull",
            json!([{"name": "server", "image": image}]),
            json!([]),
        ),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let waiting = wait_for("ImagePullBackOff", || async {
        let p = serde_json::to_value(pods.get("pull").await.ok()?).unwrap();
        let w = p
            .pointer("/status/containerStatuses/0/state/waiting")?
            .clone();
        (w["reason"] == "ImagePullBackOff").then_some(w)
    })
    .await;
    assert_eq!(
        waiting["message"],
        format!(
            "Back-off pulling image \"{image}\": ErrImagePull: rpc error: code = NotFound desc = \
             failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": \
             {image}: not found"
        )
    );
    emu.shutdown().await;
}
