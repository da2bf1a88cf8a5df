//! Full lifecycles on the emulator's simulated cluster: scheduler, kubelets, Gateway.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use super::{Harness, create, create_with, harness_on, sim_spec, wait_for};

/// A cluster of 2 nodes with 8 GPUs each, quick kubelets, a Gateway, and failing images.
/// Pods that take long enough to start that the worker reports `Deploying` before `Ready`
/// even on a loaded machine (at 100 ms, a slow first reconcile saw them ready already and
/// went straight from Pending to Ready, which is right but not what these tests look at).
fn slow_starting_cluster() -> modelplane_emulator::EmulatorBuilder {
    cluster().start_delay(Duration::from_secs(1))
}

fn cluster() -> modelplane_emulator::EmulatorBuilder {
    super::emulator()
        .nodes(2)
        .gpus_per_node(8)
        .start_delay(Duration::from_millis(100))
        .restart_backoff(Duration::from_millis(200))
        .fail_images("*nope*")
        .crash_images("*crashy*")
        .gateway("gateway-system", "inference")
}

async fn wait_phase(h: &Harness, name: &str, phase: &str, limit: Duration) -> Value {
    wait_for(&format!("{name} to be {phase}"), limit, || async {
        h.deployment(name).await["status"]["phase"] == phase
    })
    .await;
    h.deployment(name).await
}

#[sqlx::test]
async fn a_sim_deployment_becomes_ready_and_answers_at_its_external_url(pool: PgPool) {
    let h = harness_on(pool, slow_starting_cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let record = wait_phase(&h, "qwen", "Ready", Duration::from_secs(30)).await;
    assert_eq!(
        record["status"]["replicas"],
        json!({"desired": 1, "updated": 1, "ready": 1, "available": 1})
    );
    let gateway = h.emulator.as_ref().unwrap().gateway_url().unwrap();
    let external = record["status"]["endpoints"]["external"][0]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(external, format!("{gateway}/team-a/qwen"));
    assert_eq!(
        record["status"]["endpoints"]["openaiBase"],
        format!("{external}/v1")
    );
    let phases: Vec<String> = {
        let events: Value = h
            .app
            .get("/api/v1/projects/team-a/deployments/qwen/events")
            .await
            .json()
            .await
            .unwrap();
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "PhaseChanged")
            .map(|e| {
                e["message"]
                    .as_str()
                    .unwrap()
                    .split(':')
                    .next()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(
        phases.first().map(String::as_str),
        Some("Pending → Deploying")
    );
    assert_eq!(phases.last().map(String::as_str), Some("Deploying → Ready"));

    // The reported URL really answers, as an OpenAI client would call it.
    let client = reqwest::Client::new();
    let answer: Value = client
        .post(format!("{external}/v1/chat/completions"))
        .json(&json!({"model": "qwen", "messages": [{"role": "user", "content": "Hello"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["model"], "qwen");
    assert!(answer["choices"][0]["message"]["content"].is_string());
    assert!(answer["usage"]["total_tokens"].as_i64().unwrap() > 0);
}

/// "Try it" reaches the deployment's own Service through the Kubernetes API server's service
/// proxy (`/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/…`), whatever its route's
/// hostname says: two projects' models each answer for themselves.
#[sqlx::test]
async fn try_it_reaches_the_deployments_own_service(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    for (project, served) in [("team-a", "a-model"), ("team-b", "b-model")] {
        h.app.create_project(project).await;
        let mut spec = sim_spec();
        spec["model"]["servedName"] = json!(served);
        let created = h
            .app
            .post_json(
                &format!("/api/v1/projects/{project}/deployments"),
                &json!({"name": "qwen", "spec": spec}),
            )
            .await;
        assert_eq!(created.status(), StatusCode::CREATED);
    }
    for project in ["team-a", "team-b"] {
        wait_for(
            &format!("{project}/qwen to be Ready"),
            Duration::from_secs(30),
            || async {
                let record: Value = h
                    .app
                    .get(&format!("/api/v1/projects/{project}/deployments/qwen"))
                    .await
                    .json()
                    .await
                    .unwrap();
                record["status"]["phase"] == "Ready"
            },
        )
        .await;
    }
    let viewer = h.app.token_for("team-a", "viewer", "viewer").await;
    let answer = h
        .app
        .request_as(
            Some(&viewer),
            Method::POST,
            "/api/v1/projects/team-a/deployments/qwen/chat/completions",
        )
        .json(&json!({"messages": [{"role": "user", "content": "Hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["model"], "a-model");
    assert!(answer["choices"][0]["message"]["content"].is_string());
    let other: Value = h
        .app
        .post_json(
            "/api/v1/projects/team-b/deployments/qwen/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Hello"}]}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(other["model"], "b-model");
}

#[sqlx::test]
async fn scale_restart_and_rollback_roll_out_to_ready(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    wait_phase(&h, "qwen", "Ready", Duration::from_secs(30)).await;

    h.app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 3}),
        )
        .await;
    wait_for("3 available", Duration::from_secs(30), || async {
        let r = h.deployment("qwen").await;
        r["status"]["phase"] == "Ready"
            && r["status"]["replicas"]["available"] == 3
            && r["status"]["observedGeneration"] == 2
    })
    .await;

    let pods = |h: &Harness| {
        let api = h.api("v1", "Pod");
        async move {
            let mut names: Vec<String> = api
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
            names.sort();
            names
        }
    };
    let before = pods(&h).await;
    h.app
        .request(
            Method::POST,
            "/api/v1/projects/team-a/deployments/qwen/restart",
        )
        .send()
        .await
        .unwrap();
    wait_for(
        "every pod replaced and Ready again",
        Duration::from_secs(60),
        || async {
            let now = pods(&h).await;
            now.len() == 3
                && now.iter().all(|p| !before.contains(p))
                && h.deployment("qwen").await["status"]["phase"] == "Ready"
        },
    )
    .await;

    let patch = json!({"spec": {"engine": {"image": "ghcr.io/llm-d/llm-d-inference-sim:v0.6.0"}}});
    assert_eq!(
        h.app
            .patch("/api/v1/projects/team-a/deployments/qwen", &patch, None)
            .await
            .status(),
        StatusCode::OK
    );
    wait_for("generation 3 ready", Duration::from_secs(60), || async {
        let r = h.deployment("qwen").await;
        r["status"]["observedGeneration"] == 3 && r["status"]["phase"] == "Ready"
    })
    .await;
    h.app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/rollback",
            &json!({"revision": 2}),
        )
        .await;
    wait_for("the rollback ready", Duration::from_secs(60), || async {
        let r = h.deployment("qwen").await;
        r["status"]["observedGeneration"] == 4 && r["status"]["phase"] == "Ready"
    })
    .await;
    let live = h.live("apps/v1", "Deployment", "qwen").await.unwrap();
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1"
    );
    assert_eq!(live["spec"]["replicas"], 3);
}

#[sqlx::test]
async fn more_gpus_than_any_node_has_waits_with_the_schedulers_message_then_fails(pool: PgPool) {
    let h = harness_on(pool, cluster(), |c| c.budgets.unschedulable_seconds = 3).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["resources"]["gpu"] = json!({"count": 16});
    // Refused at write time once the worker has reported the nodes (tests/reconciler/
    // capacity.rs); forced, it is up to the scheduler.
    let response = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments?force=true",
            &json!({"name": "big", "spec": spec}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    wait_for(
        "the scheduler's message",
        Duration::from_secs(20),
        || async {
            let r = h.deployment("big").await;
            r["status"]["phase"] == "Deploying"
                && r["status"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("Insufficient nvidia.com/gpu")
        },
    )
    .await;
    let record = wait_phase(&h, "big", "Failed", Duration::from_secs(20)).await;
    let message = record["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        "{message}"
    );
}

#[sqlx::test]
async fn an_image_that_cannot_be_pulled_fails_naming_the_image(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["engine"]["image"] = json!("registry.example.com/nope:missing");
    create_with(&h, "bad", spec).await;
    let record = wait_phase(&h, "bad", "Failed", Duration::from_secs(30)).await;
    let message = record["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("image `registry.example.com/nope:missing` cannot be pulled"),
        "{message}"
    );
    assert!(
        message.contains("ErrImagePull") || message.contains("ImagePullBackOff"),
        "{message}"
    );
}

#[sqlx::test]
async fn a_crash_loop_fails_with_the_restart_count(pool: PgPool) {
    let h = harness_on(pool, cluster(), |c| c.budgets.crash_restarts = 2).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["engine"]["image"] = json!("registry.example.com/crashy:1");
    create_with(&h, "crashy", spec).await;
    let record = wait_phase(&h, "crashy", "Failed", Duration::from_secs(60)).await;
    let message = record["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("CrashLoopBackOff") && message.contains("restarts"),
        "{message}"
    );
}

#[sqlx::test]
async fn a_failing_new_generation_is_degraded_while_the_old_one_serves(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    wait_phase(&h, "qwen", "Ready", Duration::from_secs(30)).await;
    let patch = json!({"spec": {"engine": {"image": "registry.example.com/nope:v2"}}});
    h.app
        .patch("/api/v1/projects/team-a/deployments/qwen", &patch, None)
        .await;
    let record = wait_phase(&h, "qwen", "Degraded", Duration::from_secs(30)).await;
    let message = record["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("generation 2 is failing") && message.contains("still serve"),
        "{message}"
    );
}

/// The defect from the fuzzing report: project A published a longer prefix under project
/// B's path on the shared Gateway and received B's prompts. Now no spec can; B's clients
/// always reach B, while A routes freely on its own hostname.
#[sqlx::test]
async fn one_projects_spec_cannot_take_another_projects_traffic_on_the_gateway(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    h.app.create_project("team-b").await;
    let deploy =
        |project: &'static str, name: &'static str, served: &'static str, routing: Value| {
            let mut spec = super::sim_spec();
            spec["model"]["servedName"] = json!(served);
            spec["routing"] = routing;
            let app = &h.app;
            async move {
                app.post_json(
                    &format!("/api/v1/projects/{project}/deployments"),
                    &json!({"name": name, "spec": spec}),
                )
                .await
                .status()
            }
        };
    assert_eq!(
        deploy("team-b", "qwen", "b-model", json!({})).await,
        StatusCode::CREATED
    );
    for routing in [
        json!({"pathPrefix": "/team-b/qwen/v1/chat"}),
        json!({"pathPrefix": "/team-b/qwen"}),
        json!({"pathPrefix": "/"}),
    ] {
        assert_eq!(
            deploy("team-a", "evil", "a-model", routing.clone()).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{routing}"
        );
    }
    assert_eq!(
        deploy(
            "team-a",
            "qwen",
            "a-model",
            json!({"hostname": "a.example.com"})
        )
        .await,
        StatusCode::CREATED
    );
    assert_eq!(
        deploy(
            "team-b",
            "grab",
            "b-model",
            json!({"hostname": "a.example.com"})
        )
        .await,
        StatusCode::CONFLICT
    );
    for project in ["team-a", "team-b"] {
        wait_for(
            &format!("{project}/qwen Ready"),
            Duration::from_secs(30),
            || async {
                let r: Value = h
                    .app
                    .get(&format!("/api/v1/projects/{project}/deployments/qwen"))
                    .await
                    .json()
                    .await
                    .unwrap();
                r["status"]["phase"] == "Ready"
            },
        )
        .await;
    }
    let gateway = h.emulator.as_ref().unwrap().gateway_url().unwrap();
    let client = reqwest::Client::new();
    let ask = |host: Option<&'static str>, path: &'static str, model: &'static str| {
        let mut request = client.post(format!("{gateway}{path}")).json(
            &json!({"model": model, "messages": [{"role": "user", "content": "secret prompt"}]}),
        );
        if let Some(host) = host {
            request = request.header("host", host);
        }
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            let body: Value = response.json().await.unwrap();
            body["model"].as_str().unwrap().to_owned()
        }
    };
    for _ in 0..5 {
        assert_eq!(
            ask(None, "/team-b/qwen/v1/chat/completions", "b-model").await,
            "b-model"
        );
    }
    assert_eq!(
        ask(Some("a.example.com"), "/v1/chat/completions", "a-model").await,
        "a-model"
    );
}

/// Pods the cluster refuses to create (Priority admission: the class does not exist) are
/// reported at once with the API server's message, not as a slow rollout. The ReplicaSet
/// controller raises `ReplicaFailure=True FailedCreate` and the Deployment carries it
/// (kubernetes `pkg/controller/replicaset/replica_set.go`, `pkg/controller/deployment/sync.go`).
#[sqlx::test]
async fn pods_the_cluster_refuses_to_create_fail_with_the_refusal(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = super::sim_spec();
    spec["scheduling"] = json!({"priorityClassName": "no-such-class"});
    create_with(&h, "qwen", spec).await;
    let record = wait_phase(&h, "qwen", "Failed", Duration::from_secs(20)).await;
    let message = record["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("pods cannot be created (FailedCreate)")
            && message.contains("no PriorityClass with name no-such-class was found"),
        "{message}"
    );
}

/// Pods that no scheduler picks up (here: `schedulerName` names one that does not run; the
/// pods stay Pending with no `PodScheduled` condition, as kube-scheduler only acts on its
/// own pods) are reported as unscheduled, with how long, rather than as progress.
#[sqlx::test]
async fn pods_no_scheduler_picks_up_are_reported_as_unscheduled(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = super::sim_spec();
    spec["scheduling"] = json!({"schedulerName": "nobody"});
    create_with(&h, "qwen", spec).await;
    wait_for(
        "the unscheduled pod to be reported",
        Duration::from_secs(30),
        || async {
            let record = h.deployment("qwen").await;
            let message = record["status"]["message"].as_str().unwrap_or("");
            // Said since when (a moment, which stays true), and why.
            message.contains("is pending and not scheduled (since ")
                && message.contains("Z): no scheduler has placed it")
        },
    )
    .await;
    assert_eq!(h.deployment("qwen").await["status"]["phase"], "Deploying");
}

/// What a dashboard sees over SSE while the worker drives a deployment on the emulator:
/// its state, each phase as it comes (Pending → Deploying → Ready), the scale, and the
/// deletion, which ends the stream.
#[sqlx::test]
async fn a_watcher_sees_the_rollout_the_scale_and_the_deletion_live(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let path = "/api/v1/projects/team-a/deployments/qwen";
    let mut stream = crate::common::SseStream::new(
        h.app
            .request(Method::GET, &format!("{path}/watch"))
            .send()
            .await
            .unwrap(),
    );
    let mut phases = Vec::new();
    let mut last_id = 0;
    loop {
        let event = stream
            .next_within(Duration::from_secs(30))
            .await
            .expect("the stream stays open");
        if let Some(id) = event.id {
            assert!(id >= last_id, "ids only grow: {id} after {last_id}");
            last_id = id;
        }
        if let Some(phase) = event.data["status"]["phase"].as_str()
            && phases.last().map(String::as_str) != Some(phase)
        {
            phases.push(phase.to_owned());
        }
        if phases.last().map(String::as_str) == Some("Ready") {
            break;
        }
    }
    assert!(
        ["Pending", "Deploying"].contains(&phases[0].as_str()),
        "{phases:?}"
    );
    assert!(phases.contains(&"Deploying".to_owned()), "{phases:?}");

    let scaled = h
        .app
        .post_json(&format!("{path}/scale"), &json!({"replicas": 2}))
        .await;
    assert_eq!(scaled.status(), StatusCode::OK);
    let (_, spec) = stream.until("spec").await;
    assert_eq!(spec.data["spec"]["replicas"], 2);

    let deleted = h.app.request(Method::DELETE, path).send().await.unwrap();
    assert_eq!(deleted.status(), StatusCode::ACCEPTED);
    stream.until("deleting").await;
    let (_, gone) = stream.until("deleted").await;
    assert!(gone.data["id"].is_string());
    assert!(
        stream.next_within(Duration::from_secs(10)).await.is_none(),
        "a deleted deployment's watch ends"
    );
}

/// The same over GraphQL: a `graphql-transport-ws` subscription sees the rollout go Ready
/// on the emulator, then the scale.
#[sqlx::test]
async fn a_graphql_subscriber_sees_the_rollout_go_ready_live(pool: PgPool) {
    let h = harness_on(pool, slow_starting_cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let mut client = crate::common::WsClient::connect(&h.app, crate::common::ADMIN_TOKEN)
        .await
        .expect("connection_ack");
    client
        .send(json!({"id": "1", "type": "subscribe", "payload": {"query":
            r#"subscription { deploymentChanged(project: "team-a", name: "qwen") {
                 seq kind deletedId deployment { phase spec replicas { ready } } } }"#}}))
        .await;
    let mut phases: Vec<String> = Vec::new();
    while phases.last().map(String::as_str) != Some("READY") {
        let message = client.next().await.expect("the subscription stays open");
        assert_eq!(message["type"], "next", "{message}");
        let phase = message["payload"]["data"]["deploymentChanged"]["deployment"]["phase"]
            .as_str()
            .unwrap()
            .to_owned();
        if phases.last() != Some(&phase) {
            phases.push(phase);
        }
    }
    assert!(phases.contains(&"DEPLOYING".to_owned()), "{phases:?}");
    let scaled = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 2}),
        )
        .await;
    assert_eq!(scaled.status(), StatusCode::OK);
    loop {
        let message = client.next().await.unwrap();
        let change = &message["payload"]["data"]["deploymentChanged"];
        if change["kind"] == "SPEC" {
            assert_eq!(change["deployment"]["spec"]["replicas"], 2);
            break;
        }
    }
    // The deletion is the last message: then the server completes the subscription.
    let deleted = h
        .app
        .request(Method::DELETE, "/api/v1/projects/team-a/deployments/qwen")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::ACCEPTED);
    loop {
        let message = client.next().await.expect("the subscription stays open");
        assert_eq!(message["type"], "next", "before the deletion: {message}");
        let change = &message["payload"]["data"]["deploymentChanged"];
        if change["kind"] == "DELETED" {
            assert!(change["deployment"].is_null());
            assert_eq!(
                client.next().await.unwrap()["type"],
                "complete",
                "nothing after the deletion"
            );
            break;
        }
    }
}

/// Issue #41, item 12: scaling a Ready sim deployment from 1 to 4 replicas is a rollout
/// (`Deploying`) until the new replicas serve, then `Ready`; it never reads `Degraded`
/// ("only 1/4 replicas available") on the way, whichever of the pods' Ready and the
/// Deployment's availableReplicas reaches the worker first. Every phase the status takes
/// is on the timeline (`PhaseChanged`, written in the status's own statement), so none is
/// missed between two polls.
#[sqlx::test]
async fn scaling_up_is_deploying_then_ready_never_degraded(pool: PgPool) {
    // As the run command's emulator (3 nodes, a Gateway), with pods quick enough for a test
    // yet slow enough that the scale is seen in progress.
    let cluster = super::emulator()
        .nodes(3)
        .gpus_per_node(8)
        .start_delay(Duration::from_millis(500))
        .gateway("gateway-system", "inference");
    let h = harness_on(pool, cluster, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    wait_phase(&h, "qwen", "Ready", Duration::from_secs(30)).await;
    let phase_changes = || h.timeline("qwen", "PhaseChanged");
    // Pods count as available only 2 s after they are ready (`minReadySeconds`, set here as
    // a policy engine might, under its own field manager): for that long the pod watch shows
    // them ready while the Deployment's availableReplicas still says 1, the window in which
    // the worker read "only 1/4 replicas available". Without it the window is a few
    // milliseconds (the ReplicaSet, then the Deployment controller catching up with the
    // kubelet), which a loaded machine hits and an idle test rarely does.
    h.api("apps/v1", "Deployment")
        .patch(
            "qwen",
            &kube::api::PatchParams {
                field_manager: Some("policy".into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(json!({"spec": {"minReadySeconds": 2}})),
        )
        .await
        .unwrap();

    // Entries from here on that come before the scale's first status ("Pending → …": the
    // spec change reads Pending until the worker applies it) are generation 1's, e.g. its
    // pod not available for 2 s more after the patch; a write of generation 1 cannot land
    // after the scale (statuses are written only at the record's generation).
    let before = phase_changes().await.len();
    let scaled = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 4}),
        )
        .await;
    assert_eq!(scaled.status(), StatusCode::OK);
    wait_for("4/4 available", Duration::from_secs(30), || async {
        let r = h.deployment("qwen").await;
        r["status"]["phase"] == "Ready"
            && r["status"]["replicas"]["available"] == 4
            && r["status"]["observedGeneration"] == 2
    })
    .await;
    let changes: Vec<String> = phase_changes()
        .await
        .split_off(before)
        .into_iter()
        .skip_while(|m| !m.starts_with("Pending → "))
        .collect();
    let phases: Vec<&str> = changes
        .iter()
        .map(|m| m.split(':').next().unwrap())
        .collect();
    assert!(
        phases.iter().all(|p| !p.contains("Degraded")),
        "a scale-up is never Degraded: {changes:#?}"
    );
    assert_eq!(
        phases,
        // The new generation reads Pending from its spec change until the worker applies it.
        ["Pending → Deploying", "Deploying → Ready"],
        "{changes:#?}"
    );
}
