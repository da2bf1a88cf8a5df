//! The simulated cluster: controllers, scheduler, kubelets, networking, the
//! Gateway data plane and fault injection, driven through the real `kube` client.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use modelplane_emulator::{Emulator, EmulatorBuilder, RunningEmulator};
use serde_json::{Value, json};

#[path = "support/wait.rs"]
mod wait;
use wait::{DEADLINE, wait_for};

fn builder() -> EmulatorBuilder {
    Emulator::builder()
        .nodes(3)
        .gpus_per_node(8)
        .gpu_product("NVIDIA-H100-80GB-HBM3")
        .start_delay(Duration::from_millis(150))
        .restart_backoff(Duration::from_millis(200))
        .fail_images("*:does-not-exist")
        .crash_images("registry.example/crasher*")
}

async fn start(b: EmulatorBuilder) -> (RunningEmulator, Client) {
    let emu = b.start().await.expect("emulator starts");
    let client = Client::try_from(Config::new(emu.url().parse().unwrap())).unwrap();
    (emu, client)
}

fn deployment(name: &str, replicas: i32, container: Value, extra_spec: Value) -> Deployment {
    let mut c = json!({
        "name": "server", "image": "ghcr.io/example/server:1",
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
    });
    for (k, v) in container.as_object().unwrap() {
        c[k] = v.clone();
    }
    let mut d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [c]}},
        },
    });
    for (k, v) in extra_spec.as_object().unwrap() {
        if k == "pod" {
            for (pk, pv) in v.as_object().unwrap() {
                d["spec"]["template"]["spec"][pk] = pv.clone();
            }
        } else {
            d["spec"][k] = v.clone();
        }
    }
    serde_json::from_value(d).unwrap()
}

fn to_json<T: serde::Serialize>(o: &T) -> Value {
    serde_json::to_value(o).unwrap()
}

fn cond(obj: &Value, ty: &str) -> Option<Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .cloned()
}

async fn pods_of(client: &Client, app: &str) -> Vec<Value> {
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .iter()
        .map(to_json)
        .collect()
}

/// The first container's waiting state of the first pod of `app`, once it has `reason`.
async fn wait_waiting(client: &Client, app: &str, reason: &str) -> Value {
    wait_for(&format!("{app} waiting {reason}"), || async {
        pods_of(client, app).await.into_iter().find_map(|p| {
            let w = p
                .pointer("/status/containerStatuses/0/state/waiting")?
                .clone();
            (w["reason"] == reason).then_some(p)
        })
    })
    .await
}

async fn events_for(client: &Client, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::default_namespaced(client.clone());
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn deployment_becomes_available_with_real_conditions_and_counts() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &deployment("web", 2, json!({}), json!({})),
    )
    .await
    .unwrap();
    let d = wait_for("Available", || async {
        let d = to_json(&api.get("web").await.unwrap());
        let avail = cond(&d, "Available")?;
        let prog = cond(&d, "Progressing")?;
        (avail["status"] == "True" && prog["reason"] == "NewReplicaSetAvailable").then_some(d)
    })
    .await;
    let s = &d["status"];
    assert_eq!(
        (
            s["replicas"].clone(),
            s["updatedReplicas"].clone(),
            s["readyReplicas"].clone(),
            s["availableReplicas"].clone()
        ),
        (json!(2), json!(2), json!(2), json!(2))
    );
    assert!(s.get("unavailableReplicas").is_none());
    assert_eq!(s["observedGeneration"], d["metadata"]["generation"]);
    let avail = cond(&d, "Available").unwrap();
    assert_eq!(avail["reason"], "MinimumReplicasAvailable");
    assert_eq!(avail["message"], "Deployment has minimum availability.");
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );

    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let rs = rss.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(rs.len(), 1);
    let rs = to_json(&rs[0]);
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    assert_eq!(rs["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash
    );
    assert_eq!(
        cond(&d, "Progressing").unwrap()["message"],
        format!("ReplicaSet \"web-{hash}\" has successfully progressed.")
    );

    let pods = pods_of(&client, "web").await;
    assert_eq!(pods.len(), 2);
    for p in &pods {
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(cond(p, "Ready").unwrap()["status"], "True");
        assert_eq!(
            p["status"]["observedGeneration"],
            p["metadata"]["generation"]
        );
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["name"],
            rs["metadata"]["name"]
        );
        assert!(p["spec"]["nodeName"].as_str().unwrap().starts_with("node-"));
        assert!(
            p["status"]["podIP"]
                .as_str()
                .unwrap()
                .starts_with("10.244.")
        );
        assert!(p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
        let name = p["metadata"]["name"].as_str().unwrap();
        let reasons: Vec<String> = events_for(&client, name)
            .await
            .into_iter()
            .filter_map(|e| e.reason)
            .collect();
        for r in ["Scheduled", "Created", "Started"] {
            assert!(
                reasons.iter().any(|x| x == r),
                "{r} event for {name}: {reasons:?}"
            );
        }
    }
    // Scale down: one pod goes, the counts follow.
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    wait_for("scaled to 1", || async {
        let d = to_json(&api.get("web").await.unwrap());
        let n = pods_of(&client, "web").await.len();
        (d["status"]["replicas"] == 1 && d["status"]["availableReplicas"] == 1 && n == 1)
            .then_some(())
    })
    .await;
    emu.shutdown().await;
}

#[tokio::test]
async fn rolling_update_stays_within_surge_bounds() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    let strategy = json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}});
    api.create(
        &PostParams::default(),
        &deployment("roll", 3, json!({}), strategy),
    )
    .await
    .unwrap();
    let available = |want_image: &'static str| {
        let api = api.clone();
        async move {
            let d = to_json(&api.get("roll").await.unwrap());
            let done = cond(&d, "Progressing")
                .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable")
                && d["status"]["updatedReplicas"] == 3
                && d["status"]["availableReplicas"] == 3
                && d["status"].get("replicas") == Some(&json!(3))
                && d["spec"]["template"]["spec"]["containers"][0]["image"] == want_image
                // The status must describe this generation (as `kubectl rollout status` checks).
                && d["status"]["observedGeneration"] == d["metadata"]["generation"];
            done.then_some(d)
        }
    };
    wait_for("first rollout", || available("ghcr.io/example/server:1")).await;

    // Watch every pod change during the update.
    let mut changes = emu.store().subscribe();
    let before = pods_of(&client, "roll").await;
    api.patch(
        "roll",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "server", "image": "ghcr.io/example/server:2"}]}}}})),
    )
    .await
    .unwrap();
    let d = wait_for("second rollout", || available("ghcr.io/example/server:2")).await;
    let mut pods: HashMap<String, Value> = before
        .into_iter()
        .map(|p| (p["metadata"]["name"].as_str().unwrap().to_string(), p))
        .collect();
    let (mut max_pods, mut min_ready) = (0usize, usize::MAX);
    while let Ok(c) = changes.try_recv() {
        if c.kind.kind != "Pod" {
            continue;
        }
        match c.event {
            modelplane_emulator::EventType::Deleted => {
                pods.remove(&c.name);
            }
            _ => {
                pods.insert(c.name.clone(), (*c.object).clone());
            }
        }
        let live: Vec<&Value> = pods
            .values()
            .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
            .collect();
        max_pods = max_pods.max(live.len());
        min_ready = min_ready.min(
            live.iter()
                .filter(|p| cond(p, "Ready").is_some_and(|c| c["status"] == "True"))
                .count(),
        );
    }
    assert!(
        max_pods <= 4,
        "maxSurge 1 over 3 replicas, saw {max_pods} pods"
    );
    assert!(
        min_ready >= 3,
        "maxUnavailable 0, saw only {min_ready} ready pods"
    );
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let rs: Vec<Value> = rss
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(to_json)
        .collect();
    assert_eq!(rs.len(), 2);
    let old = rs
        .iter()
        .find(|r| r["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1")
        .unwrap();
    assert_eq!(old["spec"]["replicas"], 0);
    let pods = pods_of(&client, "roll").await;
    assert!(
        pods.iter()
            .all(|p| p["spec"]["containers"][0]["image"] == "ghcr.io/example/server:2")
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn recreate_replaces_all_pods_at_once() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &deployment(
            "rec",
            2,
            json!({}),
            json!({"strategy": {"type": "Recreate"}}),
        ),
    )
    .await
    .unwrap();
    let ready = |image: &'static str| {
        let client = client.clone();
        async move {
            let pods = pods_of(&client, "rec").await;
            (pods.len() == 2
                && pods.iter().all(|p| {
                    p["spec"]["containers"][0]["image"] == image
                        && cond(p, "Ready").is_some_and(|c| c["status"] == "True")
                }))
            .then_some(())
        }
    };
    wait_for("first pods", || ready("ghcr.io/example/server:1")).await;
    let mut changes = emu.store().subscribe();
    api.patch(
        "rec",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "server", "image": "ghcr.io/example/server:2"}]}}}})),
    )
    .await
    .unwrap();
    wait_for("new pods", || ready("ghcr.io/example/server:2")).await;
    // No new pod was created while an old one still existed.
    let mut old_alive: i32 = 2;
    while let Ok(c) = changes.try_recv() {
        if c.kind.kind != "Pod" {
            continue;
        }
        let image = c.object["spec"]["containers"][0]["image"].clone();
        match c.event {
            modelplane_emulator::EventType::Deleted if image == "ghcr.io/example/server:1" => {
                old_alive -= 1
            }
            modelplane_emulator::EventType::Added => {
                assert_eq!(old_alive, 0, "new pod while old ones run")
            }
            _ => {}
        }
    }
    emu.shutdown().await;
}

#[tokio::test]
async fn too_many_gpus_stay_pending_and_the_deadline_passes() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    let gpus = json!({"resources": {"limits": {"nvidia.com/gpu": "16"}}});
    api.create(
        &PostParams::default(),
        &deployment("big", 1, gpus, json!({"progressDeadlineSeconds": 1})),
    )
    .await
    .unwrap();
    let pod = wait_for("unschedulable", || async {
        pods_of(&client, "big")
            .await
            .into_iter()
            .find(|p| cond(p, "PodScheduled").is_some_and(|c| c["status"] == "False"))
    })
    .await;
    let c = cond(&pod, "PodScheduled").unwrap();
    assert_eq!(c["reason"], "Unschedulable");
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.starts_with("0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
        "{msg}"
    );
    assert_eq!(pod["status"]["phase"], "Pending");
    let name = pod["metadata"]["name"].as_str().unwrap();
    let ev = events_for(&client, name).await;
    let failed = ev
        .iter()
        .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .expect("FailedScheduling event");
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(failed.message.as_deref(), Some(msg));

    let d = wait_for("ProgressDeadlineExceeded", || async {
        let d = to_json(&api.get("big").await.unwrap());
        cond(&d, "Progressing")
            .is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded")
            .then_some(d)
    })
    .await;
    let p = cond(&d, "Progressing").unwrap();
    assert_eq!(p["status"], "False");
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .ends_with("has timed out progressing.")
    );
    let a = cond(&d, "Available").unwrap();
    assert_eq!(
        (a["status"].as_str(), a["reason"].as_str()),
        (Some("False"), Some("MinimumReplicasUnavailable"))
    );
    assert_eq!(d["status"]["unavailableReplicas"], 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn node_affinity_taints_and_missing_claims() {
    let b = builder()
        .node(modelplane_emulator::NodeConfig::new("gpu-a").gpus(8, Some("NVIDIA-A100-SXM4-80GB")))
        .node(
            modelplane_emulator::NodeConfig::new("gpu-h")
                .gpus(8, Some("NVIDIA-H100-80GB-HBM3"))
                .taint("nvidia.com/gpu", "present", "NoSchedule"),
        );
    let (emu, client) = start(b).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    let affinity = |product: &str| {
        json!({"pod": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]}]}]}}}}})
    };
    api.create(
        &PostParams::default(),
        &deployment("h100", 1, json!({}), affinity("NVIDIA-H100-80GB-HBM3")),
    )
    .await
    .unwrap();
    let pod = wait_for("taint refusal", || async {
        pods_of(&client, "h100")
            .await
            .into_iter()
            .find(|p| cond(p, "PodScheduled").is_some_and(|c| c["status"] == "False"))
    })
    .await;
    assert_eq!(
        cond(&pod, "PodScheduled").unwrap()["message"]
            .as_str()
            .unwrap()
            .split(". preemption")
            .next()
            .unwrap(),
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {nvidia.com/gpu: present}"
    );
    // Tolerating the taint lets it schedule on the H100 node.
    let mut tolerated = affinity("NVIDIA-H100-80GB-HBM3");
    tolerated["pod"]["tolerations"] =
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
    api.create(
        &PostParams::default(),
        &deployment("h100t", 1, json!({}), tolerated),
    )
    .await
    .unwrap();
    wait_for("scheduled on gpu-h", || async {
        pods_of(&client, "h100t")
            .await
            .into_iter()
            .find(|p| p["spec"]["nodeName"] == "gpu-h")
    })
    .await;
    let claim = json!({"pod": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "weights"}}]}});
    api.create(
        &PostParams::default(),
        &deployment("pvc", 1, json!({}), claim),
    )
    .await
    .unwrap();
    let pod = wait_for("missing claim", || async {
        pods_of(&client, "pvc")
            .await
            .into_iter()
            .find(|p| cond(p, "PodScheduled").is_some_and(|c| c["status"] == "False"))
    })
    .await;
    assert!(
        cond(&pod, "PodScheduled").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("persistentvolumeclaim \"weights\" not found")
    );
    assert_eq!(pod["status"]["phase"], "Pending");
    // Once the claim exists it binds, and the pod schedules and runs.
    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::default_namespaced(client.clone());
    let claim = serde_json::from_value(json!({"metadata": {"name": "weights"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}}))
    .unwrap();
    pvcs.create(&PostParams::default(), &claim).await.unwrap();
    let bound = wait_for("claim bound", || async {
        let c = to_json(&pvcs.get("weights").await.unwrap());
        (c["status"]["phase"] == "Bound").then_some(c)
    })
    .await;
    assert_eq!(bound["status"]["capacity"]["storage"], "10Gi");
    assert!(
        bound["spec"]["volumeName"]
            .as_str()
            .unwrap()
            .starts_with("pvc-")
    );
    wait_for("pod with claim ready", || async {
        pods_of(&client, "pvc")
            .await
            .into_iter()
            .find(|p| cond(p, "Ready").is_some_and(|c| c["status"] == "True"))
    })
    .await;
    emu.shutdown().await;
}

#[tokio::test]
async fn failing_images_go_to_image_pull_back_off() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &deployment(
            "pull",
            1,
            json!({"image": "ghcr.io/example/server:does-not-exist"}),
            json!({}),
        ),
    )
    .await
    .unwrap();
    let pod = wait_waiting(&client, "pull", "ImagePullBackOff").await;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "Back-off pulling image \"ghcr.io/example/server:does-not-exist\": ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image \"ghcr.io/example/server:does-not-exist\": failed to resolve reference \"ghcr.io/example/server:does-not-exist\": ghcr.io/example/server:does-not-exist: not found"
    );
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(pod_table(&emu).await[0].1, "ImagePullBackOff");
    // A model image volume that cannot be pulled fails the same way.
    let volume = json!({"pod": {"volumes": [{"name": "model", "image": {"reference": "registry.example.com/models/tiny:does-not-exist"}}]}});
    api.create(
        &PostParams::default(),
        &deployment("model", 1, json!({}), volume),
    )
    .await
    .unwrap();
    let pod = wait_waiting(&client, "model", "ImagePullBackOff").await;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "Back-off pulling image \"registry.example.com/models/tiny:does-not-exist\": ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image \"registry.example.com/models/tiny:does-not-exist\": failed to resolve reference \"registry.example.com/models/tiny:does-not-exist\": registry.example.com/models/tiny:does-not-exist: not found"
    );
    let reasons: Vec<(String, String)> =
        events_for(&client, pod["metadata"]["name"].as_str().unwrap())
            .await
            .into_iter()
            .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect();
    assert!(
        reasons
            .iter()
            .any(|(r, m)| r == "Failed" && m == "Error: ErrImagePull"),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|(r, m)| r == "Failed" && m == "Error: ImagePullBackOff"),
        "{reasons:?}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn crashing_images_loop_with_growing_restarts() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &deployment(
            "crash",
            1,
            json!({"image": "registry.example/crasher:1"}),
            json!({}),
        ),
    )
    .await
    .unwrap();
    let first = wait_waiting(&client, "crash", "CrashLoopBackOff").await;
    let cs = &first["status"]["containerStatuses"][0];
    assert!(
        cs["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("back-off 200ms restarting failed container=server pod=")
    );
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
    assert!(
        cs["lastState"]["terminated"]["message"]
            .as_str()
            .unwrap()
            .contains("crash")
    );
    let pod = wait_for("restartCount >= 3", || async {
        pods_of(&client, "crash")
            .await
            .into_iter()
            .find(|p| p["status"]["containerStatuses"][0]["restartCount"].as_i64() >= Some(3))
    })
    .await;
    assert_eq!(pod["metadata"]["name"], first["metadata"]["name"]);
    assert_eq!(pod["status"]["phase"], "Running");
    let ev = events_for(&client, pod["metadata"]["name"].as_str().unwrap()).await;
    assert!(ev.iter().any(|e| e.reason.as_deref() == Some("BackOff")));
    // `kubectl get pods` shows the waiting reason and the last restart's age.
    let rows = wait_for("CrashLoopBackOff row", || async {
        let rows = pod_table(&emu).await;
        rows.iter()
            .any(|r| r.1 == "CrashLoopBackOff")
            .then_some(rows)
    })
    .await;
    assert!(rows[0].2.contains(" ago)"), "{rows:?}");
    let d = to_json(&api.get("crash").await.unwrap());
    assert_eq!(cond(&d, "Available").unwrap()["status"], "False");
    emu.shutdown().await;
}

#[tokio::test]
async fn missing_secret_is_a_config_error_until_it_exists() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    let env = json!({"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]});
    api.create(
        &PostParams::default(),
        &deployment("sec", 1, env, json!({})),
    )
    .await
    .unwrap();
    let pod = wait_waiting(&client, "sec", "CreateContainerConfigError").await;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "secret \"creds\" not found"
    );
    let ev = events_for(&client, pod["metadata"]["name"].as_str().unwrap()).await;
    assert!(
        ev.iter()
            .any(|e| e.message.as_deref() == Some("Error: secret \"creds\" not found"))
    );
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let s: Secret = serde_json::from_value(
        json!({"metadata": {"name": "creds"}, "stringData": {"token": "x"}}),
    )
    .unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    wait_for("ready after the secret appears", || async {
        pods_of(&client, "sec")
            .await
            .into_iter()
            .find(|p| cond(p, "Ready").is_some_and(|c| c["status"] == "True"))
    })
    .await;
    emu.shutdown().await;
}

#[tokio::test]
async fn unknown_priority_class_is_refused_at_pod_creation() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &deployment(
            "prio",
            1,
            json!({}),
            json!({"pod": {"priorityClassName": "nope"}}),
        ),
    )
    .await
    .unwrap();
    let d = wait_for("ReplicaFailure", || async {
        let d = to_json(&api.get("prio").await.unwrap());
        cond(&d, "ReplicaFailure").map(|_| d)
    })
    .await;
    let f = cond(&d, "ReplicaFailure").unwrap();
    assert_eq!(f["reason"], "FailedCreate");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .ends_with("is forbidden: no PriorityClass with name nope was found"),
        "{f}"
    );
    assert!(pods_of(&client, "prio").await.is_empty());
    // Once the class exists the pods are created with its priority and the failure clears.
    let classes: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(client.clone());
    let pc = serde_json::from_value(json!({"metadata": {"name": "nope"}, "value": 1000})).unwrap();
    classes.create(&PostParams::default(), &pc).await.unwrap();
    let pod = wait_for("pod with priority", || async {
        pods_of(&client, "prio").await.into_iter().next()
    })
    .await;
    assert_eq!(pod["spec"]["priority"], 1000);
    wait_for("failure cleared", || async {
        let d = to_json(&api.get("prio").await.unwrap());
        cond(&d, "ReplicaFailure").is_none().then_some(())
    })
    .await;
    emu.shutdown().await;
}

/// A minimal HTTP/1.1 client (one request per connection): status, headers, de-chunked body.
async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, String, String) {
    http_with(addr, method, host, path, body, "application/json").await
}

/// The pod table `kubectl get pods` shows: (name, status, restarts) per row.
async fn pod_table(emu: &RunningEmulator) -> Vec<(String, String, String)> {
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let (_, _, body) = http_with(
        emu.addr(),
        "GET",
        "x",
        "/api/v1/namespaces/default/pods",
        None,
        accept,
    )
    .await;
    let t: Value = serde_json::from_str(&body).unwrap();
    t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let c = |i: usize| r["cells"][i].as_str().unwrap_or("").to_string();
            (c(0), c(2), c(3))
        })
        .collect()
}

async fn http_with(
    addr: std::net::SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    body: Option<Value>,
    accept: &str,
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: {accept}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = rest;
        loop {
            let (size, after) = rest.split_once("\r\n").unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        out
    } else {
        rest.to_string()
    };
    (status, head.to_string(), body)
}

fn dynamic(client: &Client, kind: &str, ns: &str) -> Api<kube::api::DynamicObject> {
    let (group, version, plural) = match kind {
        "HTTPRoute" => ("gateway.networking.k8s.io", "v1", "httproutes"),
        "Gateway" => ("gateway.networking.k8s.io", "v1", "gateways"),
        "EndpointSlice" => ("discovery.k8s.io", "v1", "endpointslices"),
        "Service" => ("", "v1", "services"),
        "Namespace" => ("", "v1", "namespaces"),
        _ => unreachable!(),
    };
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
    if kind == "Namespace" {
        Api::all_with(client.clone(), &ar)
    } else {
        Api::namespaced_with(client.clone(), ns, &ar)
    }
}

async fn apply(client: &Client, kind: &str, ns: &str, obj: Value) {
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let api = dynamic(client, kind, ns);
    let obj: kube::api::DynamicObject = serde_json::from_value(obj).unwrap();
    api.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap();
}

fn service(name: &str, ns: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
           "spec": {"selector": {"app": app}, "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]}})
}

fn http_route(name: &str, ns: &str, parent: Value, backend: &str, path: &str) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
    "metadata": {"name": name, "namespace": ns},
    "spec": {"parentRefs": [parent], "rules": [{
        "matches": [{"path": {"type": "PathPrefix", "value": path}}],
        "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
        "backendRefs": [{"name": backend, "port": 8000}],
    }]}})
}

/// The conditions our Gateway controller reported for the route's first parent.
async fn route_conditions(client: &Client, ns: &str, name: &str) -> Vec<Value> {
    let api = dynamic(client, "HTTPRoute", ns);
    wait_for(&format!("status of route {name}"), || async {
        let r = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
        let conds = r
            .pointer("/status/parents/0/conditions")?
            .as_array()?
            .clone();
        Some(conds)
    })
    .await
}

fn by_type(conds: &[Value], ty: &str) -> (String, String, i64) {
    let c = conds.iter().find(|c| c["type"] == ty).unwrap();
    (
        c["status"].as_str().unwrap().to_string(),
        c["reason"].as_str().unwrap().to_string(),
        c["observedGeneration"].as_i64().unwrap(),
    )
}

#[tokio::test]
async fn gateway_status_and_route_conditions() {
    let (emu, client) = start(builder().gateway("gateway-system", "public")).await;
    let port = emu.gateway_addr().unwrap().port();
    let gws = dynamic(&client, "Gateway", "gateway-system");
    let gw = wait_for("gateway status", || async {
        let g = serde_json::to_value(gws.get("public").await.unwrap()).unwrap();
        (g.pointer("/status/addresses/0/value") == Some(&json!("127.0.0.1"))).then_some(g)
    })
    .await;
    assert_eq!(gw["spec"]["listeners"][0]["port"], port);
    assert_eq!(
        gw["spec"]["listeners"][0]["allowedRoutes"]["namespaces"]["from"],
        "All"
    );
    assert_eq!(cond(&gw, "Programmed").unwrap()["status"], "True");

    apply(
        &client,
        "Namespace",
        "",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
    )
    .await;
    apply(
        &client,
        "Service",
        "team-a",
        service("qwen", "team-a", "qwen"),
    )
    .await;
    let parent = |section: Option<&str>, gw: &str| {
        let mut p = json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "gateway-system", "name": gw});
        if let Some(s) = section {
            p["sectionName"] = json!(s);
        }
        p
    };
    apply(
        &client,
        "HTTPRoute",
        "team-a",
        http_route(
            "ok",
            "team-a",
            parent(Some("http"), "public"),
            "qwen",
            "/team-a/qwen",
        ),
    )
    .await;
    let c = route_conditions(&client, "team-a", "ok").await;
    assert_eq!(
        by_type(&c, "Accepted"),
        ("True".into(), "Accepted".into(), 1)
    );
    assert_eq!(
        by_type(&c, "ResolvedRefs"),
        ("True".into(), "ResolvedRefs".into(), 1)
    );

    apply(
        &client,
        "HTTPRoute",
        "team-a",
        http_route(
            "wrong-section",
            "team-a",
            parent(Some("https"), "public"),
            "qwen",
            "/x",
        ),
    )
    .await;
    let c = route_conditions(&client, "team-a", "wrong-section").await;
    assert_eq!(
        by_type(&c, "Accepted"),
        ("False".into(), "NoMatchingParent".into(), 1)
    );

    apply(
        &client,
        "HTTPRoute",
        "team-a",
        http_route(
            "no-backend",
            "team-a",
            parent(None, "public"),
            "missing",
            "/y",
        ),
    )
    .await;
    let c = route_conditions(&client, "team-a", "no-backend").await;
    assert_eq!(by_type(&c, "Accepted").0, "True");
    assert_eq!(
        by_type(&c, "ResolvedRefs"),
        ("False".into(), "BackendNotFound".into(), 1)
    );

    // A Gateway whose listener only admits routes from its own namespace.
    apply(
        &client,
        "Gateway",
        "gateway-system",
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "private", "namespace": "gateway-system"},
            "spec": {"gatewayClassName": modelplane_emulator::GATEWAY_CLASS,
                     "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]},
        }),
    )
    .await;
    apply(
        &client,
        "HTTPRoute",
        "team-a",
        http_route("refused", "team-a", parent(None, "private"), "qwen", "/z"),
    )
    .await;
    let c = route_conditions(&client, "team-a", "refused").await;
    assert_eq!(
        by_type(&c, "Accepted"),
        ("False".into(), "NotAllowedByListeners".into(), 1)
    );

    // A listener for another hostname, and a backend in another namespace.
    apply(
        &client,
        "Gateway",
        "gateway-system",
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "hosts", "namespace": "gateway-system"},
            "spec": {"gatewayClassName": modelplane_emulator::GATEWAY_CLASS,
                     "listeners": [{"name": "web", "protocol": "HTTP", "port": 80, "hostname": "*.example.com",
                                    "allowedRoutes": {"namespaces": {"from": "All"}}}]},
        }),
    )
    .await;
    let mut other_host = http_route("other-host", "team-a", parent(None, "hosts"), "qwen", "/");
    other_host["spec"]["hostnames"] = json!(["models.example.org"]);
    apply(&client, "HTTPRoute", "team-a", other_host).await;
    let c = route_conditions(&client, "team-a", "other-host").await;
    assert_eq!(
        by_type(&c, "Accepted"),
        ("False".into(), "NoMatchingListenerHostname".into(), 1)
    );
    let mut cross = http_route("cross", "team-a", parent(None, "public"), "qwen", "/cross");
    cross["spec"]["rules"][0]["backendRefs"][0]["namespace"] = json!("default");
    apply(&client, "HTTPRoute", "team-a", cross).await;
    let c = route_conditions(&client, "team-a", "cross").await;
    assert_eq!(
        by_type(&c, "ResolvedRefs"),
        ("False".into(), "RefNotPermitted".into(), 1)
    );

    // A spec change bumps the generation the conditions observe.
    let mut changed = http_route(
        "ok",
        "team-a",
        parent(Some("http"), "public"),
        "qwen",
        "/team-a/qwen2",
    );
    changed["spec"]["hostnames"] = json!(["qwen.example"]);
    apply(&client, "HTTPRoute", "team-a", changed).await;
    wait_for("observedGeneration 2", || async {
        let c = route_conditions(&client, "team-a", "ok").await;
        (by_type(&c, "Accepted").2 == 2).then_some(())
    })
    .await;
    // Attached routes: "ok", "no-backend" and "cross" on the public listener.
    wait_for("attachedRoutes", || async {
        let g = serde_json::to_value(gws.get("public").await.unwrap()).unwrap();
        (g.pointer("/status/listeners/0/attachedRoutes") == Some(&json!(3))).then_some(())
    })
    .await;
    emu.shutdown().await;
}

fn sim_deployment(name: &str, model: &str) -> Deployment {
    let mut d = deployment(
        name,
        2,
        // As modelplane renders the sim engine.
        json!({
            "image": "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1",
            "command": ["/app/llm-d-inference-sim"],
            "args": ["--model", model, "--port", "8000"],
            "startupProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "failureThreshold": 180},
            "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "failureThreshold": 6},
        }),
        json!({}),
    );
    let labels = d
        .spec
        .as_mut()
        .unwrap()
        .template
        .metadata
        .as_mut()
        .unwrap()
        .labels
        .as_mut()
        .unwrap();
    labels.insert("modelplane.io/engine".into(), "sim".into());
    d
}

#[tokio::test]
async fn sim_pods_answer_openai_requests_through_the_gateway() {
    let (emu, client) = start(builder().gateway("gateway-system", "public")).await;
    let addr = emu.gateway_addr().unwrap();
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &sim_deployment("qwen", "qwen-small"),
    )
    .await
    .unwrap();
    api.create(
        &PostParams::default(),
        &deployment(
            "vllm",
            1,
            json!({"image": "vllm/vllm-openai:v0.9.0"}),
            json!({}),
        ),
    )
    .await
    .unwrap();
    // Labelled, one of them a label the EndpointSlice controller reserves for itself.
    let mut labelled = service("qwen", "default", "qwen");
    labelled["metadata"]["labels"] =
        json!({"team": "nlp", "endpointslice.kubernetes.io/managed-by": "someone"});
    apply(&client, "Service", "default", labelled).await;
    apply(
        &client,
        "Service",
        "default",
        service("vllm", "default", "vllm"),
    )
    .await;
    let parent = json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "gateway-system", "name": "public"});
    apply(
        &client,
        "HTTPRoute",
        "default",
        http_route("qwen", "default", parent.clone(), "qwen", "/default/qwen"),
    )
    .await;
    let mut by_host = http_route("qwen-host", "default", parent.clone(), "qwen", "/");
    by_host["spec"]["hostnames"] = json!(["qwen.example.com"]);
    by_host["spec"]["rules"][0]
        .as_object_mut()
        .unwrap()
        .remove("filters");
    apply(&client, "HTTPRoute", "default", by_host).await;
    apply(
        &client,
        "HTTPRoute",
        "default",
        http_route("vllm", "default", parent, "vllm", "/default/vllm"),
    )
    .await;

    // The EndpointSlice lists both ready pods on the resolved container port.
    let slices = dynamic(&client, "EndpointSlice", "default");
    let slice = wait_for("ready endpoints", || async {
        let list = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=qwen"))
            .await
            .unwrap();
        let s = serde_json::to_value(list.items.first()?).unwrap();
        let ready = s["endpoints"]
            .as_array()?
            .iter()
            .filter(|e| e["conditions"]["ready"] == true)
            .count();
        (ready == 2).then_some(s)
    })
    .await;
    assert_eq!(slice["ports"][0]["port"], 8000);
    assert_eq!(slice["addressType"], "IPv4");
    // It carries the Service's labels but the reserved ones, which the controller sets
    // (`setEndpointSliceLabels`, pkg/controller/endpointslice).
    assert_eq!(
        slice["metadata"]["labels"],
        json!({"team": "nlp", "kubernetes.io/service-name": "qwen",
               "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"})
    );

    let chat = json!({"model": "qwen-small", "messages": [{"role": "user", "content": "hello there emulator"}]});
    let (status, _, body) = wait_for("a routed answer", || async {
        let r = http(
            addr,
            "POST",
            "127.0.0.1",
            "/default/qwen/v1/chat/completions",
            Some(chat.clone()),
        )
        .await;
        (r.0 == 200).then_some(r)
    })
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "qwen-small");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "hello there emulator"
    );
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(
        v["usage"]["total_tokens"],
        v["usage"]["prompt_tokens"].as_i64().unwrap() + 3
    );

    let mut stream = chat.clone();
    stream["stream"] = json!(true);
    stream["stream_options"] = json!({"include_usage": true});
    let (status, head, body) = http(
        addr,
        "POST",
        "127.0.0.1",
        "/default/qwen/v1/chat/completions",
        Some(stream),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{head}"
    );
    let frames: Vec<&str> = body.split("\n\n").filter(|f| !f.is_empty()).collect();
    assert_eq!(*frames.last().unwrap(), "data: [DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "hello there emulator");
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 3);

    let (status, _, body) = http(
        addr,
        "POST",
        "127.0.0.1",
        "/default/qwen/v1/completions",
        Some(json!({"model": "qwen-small", "prompt": "one two", "max_tokens": 1})),
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            v["choices"][0]["text"].as_str(),
            v["choices"][0]["finish_reason"].as_str()
        ),
        (Some("one"), Some("length"))
    );

    let (status, _, body) = http(addr, "GET", "qwen.example.com", "/v1/models", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["data"][0]["id"],
        "qwen-small"
    );

    let (status, _, _) = http(
        addr,
        "POST",
        "127.0.0.1",
        "/default/qwen/v1/chat/completions",
        Some(json!({"model": "other", "messages": []})),
    )
    .await;
    assert_eq!(status, 404);
    let (status, _, body) = wait_for("vllm answer", || async {
        let r = http(addr, "GET", "127.0.0.1", "/default/vllm/v1/models", None).await;
        (r.2.contains("emulator")).then_some(r)
    })
    .await;
    assert_eq!(status, 503);
    assert!(
        body.contains("no real model server runs in the Kubernetes emulator"),
        "{body}"
    );
    let (status, _, _) = http(addr, "GET", "127.0.0.1", "/nothing/here", None).await;
    assert_eq!(status, 404);
    emu.shutdown().await;
}

fn configmaps(client: &Client) -> Api<k8s_openapi::api::core::v1::ConfigMap> {
    Api::default_namespaced(client.clone())
}

#[tokio::test]
async fn refuse_all_looks_like_a_server_that_is_down() {
    let (emu, client) = start(Emulator::builder()).await;
    configmaps(&client)
        .list(&ListParams::default())
        .await
        .unwrap();
    emu.faults().refuse_all(true);
    // New connections are closed before any response.
    let (status, _, _) = http_raw(emu.addr(), "GET", "/api/v1/namespaces").await;
    assert_eq!(status, None);
    // A pooled client connection gets 503 (and is closed), never a success.
    let err = configmaps(&client)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        !matches!(err, kube::Error::Api(ref s) if s.code == 200),
        "{err:?}"
    );
    emu.faults().refuse_all(false);
    wait_for("recovery", || async {
        configmaps(&client).list(&ListParams::default()).await.ok()
    })
    .await;
    // refuse_for lifts itself.
    emu.faults().refuse_for(Duration::from_millis(200));
    assert_eq!(http_raw(emu.addr(), "GET", "/version").await.0, None);
    wait_for("automatic recovery", || async {
        http_raw(emu.addr(), "GET", "/version")
            .await
            .0
            .filter(|s| *s == 200)
    })
    .await;
    emu.shutdown().await;
}

/// Like `http`, but a connection closed without a response gives `None`.
async fn http_raw(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> (Option<u16>, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return (None, String::new(), String::new());
    };
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Client-Id: raw-test\r\n\r\n"
    );
    let _ = s.write_all(req.as_bytes()).await;
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw).await;
    let raw = String::from_utf8_lossy(&raw).to_string();
    let Some((head, body)) = raw.split_once("\r\n\r\n") else {
        return (None, raw, String::new());
    };
    (
        head.split(' ').nth(1).and_then(|c| c.parse().ok()),
        head.to_string(),
        body.to_string(),
    )
}

#[tokio::test]
async fn latency_and_failure_fractions() {
    let (emu, client) = start(Emulator::builder()).await;
    let cms = configmaps(&client);
    emu.faults().latency(Duration::from_millis(150));
    let t = std::time::Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(150));
    emu.faults().latency(Duration::ZERO);

    emu.faults().fail_fraction(0.5, 500);
    let mut codes = Vec::new();
    for _ in 0..10 {
        codes.push(match cms.list(&ListParams::default()).await {
            Ok(_) => 200,
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.reason, "InternalError");
                s.code
            }
            Err(e) => panic!("{e:?}"),
        });
    }
    assert_eq!(codes.iter().filter(|c| **c == 500).count(), 5, "{codes:?}");
    emu.faults().fail_fraction(1.0, 429);
    let (status, head, body) = http_raw(emu.addr(), "GET", "/api/v1/namespaces").await;
    assert_eq!(status, Some(429));
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    assert!(body.contains("TooManyRequests"));
    emu.faults().clear();
    cms.list(&ListParams::default()).await.unwrap();
    emu.shutdown().await;
}

/// A forbidden verb is answered as the RBAC authorizer's denial is
/// (k8s.io/apiserver `endpoints/handlers/responsewriters/errors.go` `Forbidden`, through
/// apimachinery's `NewForbidden`): 403, reason Forbidden, the resource in `details`, and the
/// message naming the user, verb, resource, group and namespace. Other verbs still work.
#[tokio::test]
async fn a_forbidden_verb_answers_as_rbac_would() {
    let (emu, client) = start(Emulator::builder()).await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    emu.faults().forbid("patch", "deployments");
    emu.faults().forbid("create", "events.events.k8s.io");
    let apply = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    let err = deployments
        .patch("web", &PatchParams::apply("t"), &Patch::Apply(&apply))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "deployments.apps \"web\" is forbidden: User \"system:anonymous\" cannot patch resource \"deployments\" in API group \"apps\" in the namespace \"default\""
    );
    let details = status.details.unwrap();
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        ("web", "apps", "deployments")
    );
    // A create without a name, in the events.k8s.io group, over the raw wire.
    let (code, _, body) = http(
        emu.addr(),
        "POST",
        "x",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        Some(json!({"metadata": {"name": "e"}})),
    )
    .await;
    assert_eq!(code, 403);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "events.events.k8s.io is forbidden: User \"system:anonymous\" cannot create resource \"events\" in API group \"events.k8s.io\" in the namespace \"default\"",
               "reason": "Forbidden", "details": {"group": "events.k8s.io", "kind": "events"}, "code": 403})
    );
    // Other verbs pass; the admin endpoint shows the rules; allow lifts one.
    deployments.list(&ListParams::default()).await.unwrap();
    let (_, _, shown) = http(emu.addr(), "GET", "x", "/emulator/faults", None).await;
    assert_eq!(
        serde_json::from_str::<Value>(&shown).unwrap()["forbid"][0],
        json!({"verb": "patch", "resource": "deployments"})
    );
    emu.faults().allow("patch", "deployments");
    deployments
        .patch("web", &PatchParams::apply("t"), &Patch::Apply(&apply))
        .await
        .unwrap();
    emu.shutdown().await;
}

#[tokio::test]
async fn cut_watches_ends_open_streams() {
    use futures::StreamExt;
    let (emu, client) = start(Emulator::builder()).await;
    let cms = configmaps(&client);
    let mut stream = cms
        .watch(&kube::api::WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let cm: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let first = tokio::time::timeout(DEADLINE, stream.next()).await.unwrap();
    assert!(
        matches!(first, Some(Ok(kube::api::WatchEvent::Added(_)))),
        "{first:?}"
    );
    emu.faults().cut_watches();
    // The stream ends (after any events already sent, such as the ADDED of the
    // namespace's kube-root-ca.crt and of "a").
    let ended = tokio::time::timeout(DEADLINE, async {
        while let Some(e) = stream.next().await {
            assert!(matches!(e, Ok(kube::api::WatchEvent::Added(_))), "{e:?}");
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch ends");
    // New watches work.
    let mut again = cms
        .watch(&kube::api::WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let ev = tokio::time::timeout(DEADLINE, again.next()).await.unwrap();
    assert!(
        matches!(ev, Some(Ok(kube::api::WatchEvent::Added(_)))),
        "{ev:?}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn admin_endpoint_sets_faults_and_requests_are_timestamped() {
    let (emu, client) = start(Emulator::builder()).await;
    let addr = emu.addr();
    let (status, _, body) = http(
        addr,
        "POST",
        "x",
        "/emulator/faults",
        Some(json!({"failFraction": 1.0, "failCode": 429})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["failCode"],
        429
    );
    assert_eq!(
        http_raw(addr, "GET", "/api/v1/namespaces").await.0,
        Some(429)
    );
    let (_, _, body) = http(addr, "GET", "x", "/emulator/faults", None).await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["failFraction"],
        1.0
    );
    http(
        addr,
        "POST",
        "x",
        "/emulator/faults",
        Some(json!({"clear": true})),
    )
    .await;
    assert_eq!(
        http_raw(addr, "GET", "/api/v1/namespaces").await.0,
        Some(200)
    );

    emu.requests().clear();
    let before = std::time::SystemTime::now();
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
    )
    .unwrap();
    configmaps(&client)
        .patch("c", &PatchParams::apply("writer-1"), &Patch::Apply(&cm))
        .await
        .unwrap();
    http_raw(addr, "GET", "/api/v1/namespaces/default/configmaps/c").await;
    let log = emu.requests().snapshot();
    let apply = log.iter().find(|r| r.method == "PATCH").unwrap();
    assert_eq!(apply.field_manager.as_deref(), Some("writer-1"));
    assert!(apply.at >= before && apply.finished >= apply.at);
    let get = log
        .iter()
        .find(|r| r.client_id.as_deref() == Some("raw-test"))
        .unwrap();
    assert!(get.at >= apply.finished);
    emu.shutdown().await;
}

#[tokio::test]
async fn kubectl_wait_for_available() {
    let kubectl = std::env::var_os("KUBECTL")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kubectl/bin/kubectl")
        });
    if !kubectl.is_file() {
        assert!(
            std::env::var("CI").map(|v| v != "true").unwrap_or(true),
            "kubectl missing under CI"
        );
        eprintln!("SKIPPED: kubectl not found at {}", kubectl.display());
        return;
    }
    let (emu, client) = start(builder()).await;
    let dir = std::env::temp_dir().join(format!("emulator-cluster-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kubeconfig"), emu.kubeconfig_yaml()).unwrap();
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &deployment("x", 2, json!({}), json!({})),
    )
    .await
    .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(kubectl)
            .args([
                "wait",
                "--for=condition=Available",
                "deployment/x",
                "--timeout=30s",
            ])
            .env("KUBECONFIG", dir.join("kubeconfig"))
            .env("HOME", &dir)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "deployment.apps/x condition met");
    emu.shutdown().await;
}

#[tokio::test]
async fn a_settled_cluster_stops_writing() {
    let (emu, client) = start(builder().gateway("gateway-system", "public")).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &sim_deployment("calm", "m"))
        .await
        .unwrap();
    apply(
        &client,
        "Service",
        "default",
        service("calm", "default", "calm"),
    )
    .await;
    let parent = json!({"namespace": "gateway-system", "name": "public"});
    apply(
        &client,
        "HTTPRoute",
        "default",
        http_route("calm", "default", parent, "calm", "/calm"),
    )
    .await;
    wait_for("Available", || async {
        let d = to_json(&api.get("calm").await.unwrap());
        cond(&d, "Progressing")
            .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable")
            .then_some(())
    })
    .await;
    // Once settled, a second of ticks (deadline checks included) writes nothing but the
    // kubelets' node Lease renewals (every 10 s, the real heartbeat).
    let heartbeat = |c: &modelplane_emulator::Change| {
        c.kind.kind == "Lease" && c.namespace == "kube-node-lease"
    };
    let mut changes = emu.store().subscribe();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let rv = loop {
        let before = emu.store().lock().current_rv();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut quiet = true;
        while let Ok(c) = changes.try_recv() {
            quiet &= heartbeat(&c);
        }
        if quiet {
            break before;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for quiet"
        );
    };
    let until = tokio::time::Instant::now() + Duration::from_secs(1);
    while let Ok(Ok(c)) = tokio::time::timeout_at(until, changes.recv()).await {
        assert!(
            heartbeat(&c),
            "unexpected write after rv {rv}: {} {}/{}",
            c.kind.kind,
            c.namespace,
            c.name
        );
    }
    emu.shutdown().await;
}

/// A changed minReadySeconds reaches the existing ReplicaSet (kubernetes
/// pkg/controller/deployment/sync.go, `getNewReplicaSet`: `minReadySecondsNeedsUpdate`), so
/// pods scaled up afterwards count as available only that long after they are ready.
#[tokio::test]
async fn a_changed_min_ready_seconds_reaches_the_existing_replica_set() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &deployment("m", 1, json!({}), json!({})),
    )
    .await
    .unwrap();
    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    wait_for("the ReplicaSet", || async {
        (!rss
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty())
        .then_some(())
    })
    .await;
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minReadySeconds": 30}})),
    )
    .await
    .unwrap();
    let rs = wait_for("minReadySeconds on the ReplicaSet", || async {
        let rs = rss.list(&ListParams::default()).await.unwrap().items;
        rs.into_iter()
            .find(|rs| rs.spec.as_ref().and_then(|s| s.min_ready_seconds) == Some(30))
    })
    .await;
    assert_eq!(
        rss.list(&ListParams::default()).await.unwrap().items.len(),
        1,
        "the same ReplicaSet, not a new one"
    );
    // Scaled up: the new pods become ready, but not available within the 30 s.
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    let name = rs.metadata.name.unwrap();
    let rs = wait_for("both pods ready", || async {
        let rs = to_json(&rss.get(&name).await.unwrap());
        (rs["status"]["readyReplicas"] == 2).then_some(rs)
    })
    .await;
    assert!(
        rs["status"]["availableReplicas"].as_i64().unwrap_or(0) < 2,
        "{}",
        rs["status"]
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn paused_deployments_wait_until_resumed() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &deployment("p", 1, json!({}), json!({"paused": true})),
    )
    .await
    .unwrap();
    let d = wait_for("paused condition", || async {
        let d = to_json(&api.get("p").await.unwrap());
        cond(&d, "Progressing")
            .is_some_and(|c| c["reason"] == "DeploymentPaused")
            .then_some(d)
    })
    .await;
    assert_eq!(cond(&d, "Progressing").unwrap()["status"], "Unknown");
    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    assert!(
        rss.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    api.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": false}})),
    )
    .await
    .unwrap();
    wait_for("rolled out after resume", || async {
        let d = to_json(&api.get("p").await.unwrap());
        cond(&d, "Progressing")
            .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable")
            .then_some(())
    })
    .await;
    emu.shutdown().await;
}

#[tokio::test]
async fn a_crashing_new_generation_keeps_the_old_pods_and_times_out() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &deployment("gen", 2, json!({}), json!({"progressDeadlineSeconds": 2})),
    )
    .await
    .unwrap();
    wait_for("first rollout", || async {
        let d = to_json(&api.get("gen").await.unwrap());
        cond(&d, "Progressing")
            .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable")
            .then_some(())
    })
    .await;
    let crash = json!({"spec": {"template": {"spec": {"containers": [{"name": "server", "image": "registry.example/crasher:2"}]}}}});
    api.patch("gen", &PatchParams::default(), &Patch::Strategic(crash))
        .await
        .unwrap();
    let d = wait_for("ProgressDeadlineExceeded", || async {
        let d = to_json(&api.get("gen").await.unwrap());
        (cond(&d, "Progressing").is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded")
            && d["status"]["observedGeneration"] == d["metadata"]["generation"])
            .then_some(d)
    })
    .await;
    // maxSurge 1 / maxUnavailable 0: one new pod, both old ones still serving.
    assert_eq!(cond(&d, "Available").unwrap()["status"], "True");
    assert_eq!(d["status"]["updatedReplicas"], 1);
    assert_eq!(d["status"]["availableReplicas"], 2);
    assert_eq!(d["status"]["replicas"], 3);
    let pods = pods_of(&client, "gen").await;
    let old_ready = pods
        .iter()
        .filter(|p| {
            p["spec"]["containers"][0]["image"] == "ghcr.io/example/server:1"
                && cond(p, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .count();
    assert_eq!(old_ready, 2);
    emu.shutdown().await;
}

#[tokio::test]
async fn deleting_a_namespace_stops_its_pods_and_finishes() {
    let (emu, client) = start(builder()).await;
    apply(
        &client,
        "Namespace",
        "",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}}),
    )
    .await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), "gone");
    api.create(
        &PostParams::default(),
        &deployment("web", 2, json!({}), json!({})),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "gone");
    wait_for("ready pods", || async {
        let list = pods.list(&ListParams::default()).await.unwrap().items;
        (list.len() == 2
            && list
                .iter()
                .all(|p| cond(&to_json(p), "Ready").is_some_and(|c| c["status"] == "True")))
        .then_some(())
    })
    .await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.delete("gone", &Default::default()).await.unwrap();
    wait_for("namespace gone", || async {
        nss.get_opt("gone").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(
        emu.store()
            .list(
                emu.store().kinds().by_resource("", "v1", "pods").unwrap(),
                Some("gone")
            )
            .is_empty()
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn probes_initial_delay_holds_readiness_back() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    let probe = json!({"readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "initialDelaySeconds": 1}});
    api.create(
        &PostParams::default(),
        &deployment("slow", 1, probe, json!({})),
    )
    .await
    .unwrap();
    let running = wait_for("running but not ready", || async {
        pods_of(&client, "slow").await.into_iter().find(|p| {
            p.pointer("/status/containerStatuses/0/state/running")
                .is_some()
                && p["status"]["containerStatuses"][0]["ready"] == false
        })
    })
    .await;
    assert_eq!(running["status"]["phase"], "Running");
    assert_eq!(
        cond(&running, "Ready").unwrap()["reason"],
        "ContainersNotReady"
    );
    let ready = wait_for("ready", || async {
        pods_of(&client, "slow")
            .await
            .into_iter()
            .find(|p| cond(p, "Ready").is_some_and(|c| c["status"] == "True"))
    })
    .await;
    // Ready at least initialDelaySeconds after the container started (second precision).
    let at = |s: &Value| chrono::DateTime::parse_from_rfc3339(s.as_str().unwrap()).unwrap();
    let started = at(&ready["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]);
    let ready_at = at(&cond(&ready, "Ready").unwrap()["lastTransitionTime"]);
    assert!(
        (ready_at - started).num_seconds() >= 1,
        "{started} -> {ready_at}"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn rolling_back_reuses_the_old_replica_set_with_the_next_revision() {
    let (emu, client) = start(builder()).await;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &deployment("rb", 1, json!({}), json!({})),
    )
    .await
    .unwrap();
    let image = |tag: &str| {
        Patch::Strategic(
            json!({"spec": {"template": {"spec": {"containers": [{"name": "server", "image": format!("ghcr.io/example/server:{tag}")}]}}}}),
        )
    };
    let rolled_out = |rev: &'static str| {
        let api = api.clone();
        async move {
            let d = to_json(&api.get("rb").await.unwrap());
            (d["status"]["observedGeneration"] == d["metadata"]["generation"]
                && cond(&d, "Progressing").is_some_and(|c| c["reason"] == "NewReplicaSetAvailable")
                && d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == rev)
                .then_some(d)
        }
    };
    wait_for("revision 1", || rolled_out("1")).await;
    api.patch("rb", &PatchParams::default(), &image("2"))
        .await
        .unwrap();
    wait_for("revision 2", || rolled_out("2")).await;
    api.patch("rb", &PatchParams::default(), &image("1"))
        .await
        .unwrap();
    wait_for("revision 3", || rolled_out("3")).await;
    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let rs: Vec<Value> = rss
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(to_json)
        .collect();
    assert_eq!(rs.len(), 2, "the v1 ReplicaSet is reused");
    let v1 = rs
        .iter()
        .find(|r| {
            r["spec"]["template"]["spec"]["containers"][0]["image"] == "ghcr.io/example/server:1"
        })
        .unwrap();
    assert_eq!(
        v1["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    assert_eq!(v1["spec"]["replicas"], 1);
    emu.shutdown().await;
}

fn taint_keys(node: &Value) -> Vec<(String, String, bool)> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["key"].as_str().unwrap_or("").to_owned(),
                t["effect"].as_str().unwrap_or("").to_owned(),
                t.get("timeAdded").is_some(),
            )
        })
        .collect()
}

/// A node whose kubelet stops reporting, as kube-controller-manager sees it (kubernetes
/// `pkg/controller/nodelifecycle/node_lifecycle_controller.go`, `tryUpdateNodeHealth`,
/// `doNoScheduleTaintingPass`, `processTaintBaseEviction`; `pkg/controller/util/node/
/// controller_utils.go`, `MarkPodsNotReady`; `pkg/controller/tainteviction/
/// taint_eviction.go`, `processPodOnNode` and `addConditionAndDeletePod`): the kubelet's
/// Lease stops being renewed; after the grace period the node's conditions are Unknown
/// (`NodeStatusUnknown`, "Kubelet stopped posting node status."), it is tainted
/// `node.kubernetes.io/unreachable` NoSchedule and NoExecute, its pods' Ready condition is
/// False (their containers still count as ready) while the Deployment keeps
/// `NewReplicaSetAvailable`; after the DefaultTolerationSeconds toleration the pods are
/// deleted (DisruptionTarget `DeletionByTaintManager`), stay Terminating without a kubelet,
/// and are replaced on the other node; once the kubelet reports again the taints go and
/// it removes the terminated pods.
#[tokio::test]
async fn a_node_that_stops_reporting_goes_unknown_and_its_pods_are_evicted() {
    let (emu, client) = start(
        Emulator::builder()
            .nodes(2)
            .start_delay(Duration::from_millis(100))
            .node_monitor_grace_period(Duration::from_millis(800))
            .default_toleration(Duration::from_millis(1500)),
    )
    .await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    deployments
        .create(
            &PostParams::default(),
            // Requests, so the least allocated node takes the second pod.
            &deployment(
                "web",
                2,
                json!({"resources": {"requests": {"cpu": "4"}}}),
                json!({}),
            ),
        )
        .await
        .unwrap();
    let ready_on_two_nodes = || async {
        let pods = pods_of(&client, "web").await;
        let nodes: std::collections::BTreeSet<String> = pods
            .iter()
            .filter(|p| {
                p.pointer("/metadata/deletionTimestamp").is_none()
                    && cond(p, "Ready").is_some_and(|c| c["status"] == "True")
            })
            .filter_map(|p| p.pointer("/spec/nodeName")?.as_str().map(String::from))
            .collect();
        (nodes.len() == 2).then_some(pods)
    };
    let pods = wait_for("2 ready pods on 2 nodes", ready_on_two_nodes).await;
    let lost = pods[0]["spec"]["nodeName"].as_str().unwrap().to_owned();
    let lost_pod = pods[0]["metadata"]["name"].as_str().unwrap().to_owned();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kube-node-lease");
    // The kubelet's heartbeat: its Lease, renewed (a fifth of the short grace period here).
    let lease = to_json(&leases.get(&lost).await.unwrap());
    assert_eq!(lease["spec"]["holderIdentity"], json!(lost));
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    let renewed = lease["spec"]["renewTime"].clone();
    wait_for("a lease renewal", || async {
        let now = to_json(&leases.get(&lost).await.unwrap());
        (now["spec"]["renewTime"] != renewed).then_some(())
    })
    .await;

    emu.stop_node_heartbeats(&lost);
    // Within the grace period nothing changes.
    let node = to_json(&nodes.get(&lost).await.unwrap());
    assert_eq!(cond(&node, "Ready").unwrap()["status"], "True");
    let node = wait_for("the node Unknown", || async {
        let n = to_json(&nodes.get(&lost).await.unwrap());
        (cond(&n, "Ready")?["status"] == "Unknown").then_some(n)
    })
    .await;
    for ty in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = cond(&node, ty).unwrap();
        assert_eq!(c["status"], "Unknown", "{ty}");
        assert_eq!(c["reason"], "NodeStatusUnknown", "{ty}");
        assert_eq!(c["message"], "Kubelet stopped posting node status.", "{ty}");
        // The last heartbeat is kept: when the kubelet was last heard of.
        assert_ne!(c["lastHeartbeatTime"], c["lastTransitionTime"], "{ty}");
    }
    let node = wait_for("the unreachable taints", || async {
        let n = to_json(&nodes.get(&lost).await.unwrap());
        (taint_keys(&n).len() == 2).then_some(n)
    })
    .await;
    let mut taints = taint_keys(&node);
    taints.sort();
    assert_eq!(
        taints,
        vec![
            (
                "node.kubernetes.io/unreachable".into(),
                "NoExecute".into(),
                true
            ),
            (
                "node.kubernetes.io/unreachable".into(),
                "NoSchedule".into(),
                true
            ),
        ]
    );
    let node_events: Vec<String> = events_for(&client, &lost)
        .await
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default()
            )
        })
        .collect();
    assert!(
        node_events.contains(&format!(
            "NodeNotReady: Node {lost} status is now: NodeNotReady"
        )),
        "{node_events:?}"
    );

    // MarkPodsNotReady: only the pod's Ready condition; the Deployment says nothing rolls out.
    let pod = wait_for("the lost node's pod not ready", || async {
        let p = pods_of(&client, "web")
            .await
            .into_iter()
            .find(|p| p["metadata"]["name"] == json!(lost_pod))?;
        (cond(&p, "Ready")?["status"] == "False").then_some(p)
    })
    .await;
    assert_eq!(cond(&pod, "ContainersReady").unwrap()["status"], "True");
    assert_eq!(pod["status"]["containerStatuses"][0]["ready"], true);
    let pod_events: Vec<String> = events_for(&client, &lost_pod)
        .await
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default()
            )
        })
        .collect();
    assert!(
        pod_events.contains(&"NodeNotReady: Node is not ready".to_owned()),
        "{pod_events:?}"
    );
    let d = wait_for("1 available replica", || async {
        let d = to_json(&deployments.get("web").await.unwrap());
        (d["status"]["availableReplicas"] == 1).then_some(d)
    })
    .await;
    assert_eq!(
        cond(&d, "Progressing").unwrap()["reason"],
        "NewReplicaSetAvailable"
    );

    // After the toleration: deleted (Terminating: no kubelet confirms it) and replaced.
    let evicted = wait_for("the eviction", || async {
        let p = pods_of(&client, "web")
            .await
            .into_iter()
            .find(|p| p["metadata"]["name"] == json!(lost_pod))?;
        p.pointer("/metadata/deletionTimestamp")
            .is_some()
            .then_some(p)
    })
    .await;
    let target = cond(&evicted, "DisruptionTarget").unwrap();
    assert_eq!(target["reason"], "DeletionByTaintManager");
    assert_eq!(
        target["message"],
        "Taint manager: deleting due to NoExecute taint"
    );
    let pod_events: Vec<String> = events_for(&client, &lost_pod)
        .await
        .iter()
        .map(|e| e.message.clone().unwrap_or_default())
        .collect();
    assert!(
        pod_events.contains(&format!("Marking for deletion Pod default/{lost_pod}")),
        "{pod_events:?}"
    );
    let pods = wait_for("2 available replicas again", || async {
        let d = to_json(&deployments.get("web").await.unwrap());
        (d["status"]["availableReplicas"] == 2).then_some(pods_of(&client, "web").await)
    })
    .await;
    for p in pods
        .iter()
        .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
    {
        assert_ne!(p["spec"]["nodeName"], json!(lost), "{p}");
    }
    assert!(
        pods.iter()
            .any(|p| p["metadata"]["name"] == json!(lost_pod)),
        "the evicted pod stays Terminating while its node is silent"
    );

    // Back: Ready, no taints, and its kubelet removes the deleted pod.
    emu.resume_node_heartbeats(&lost);
    wait_for("the node Ready and untainted", || async {
        let n = to_json(&nodes.get(&lost).await.unwrap());
        (cond(&n, "Ready")?["status"] == "True" && taint_keys(&n).is_empty()).then_some(())
    })
    .await;
    wait_for("the evicted pod gone", || async {
        let pods = pods_of(&client, "web").await;
        (!pods
            .iter()
            .any(|p| p["metadata"]["name"] == json!(lost_pod)))
        .then_some(())
    })
    .await;
    emu.shutdown().await;
}
