//! Canaries on the emulator's simulated cluster: the split through the reported URL, the
//! header, promotion without a failed request, a failing canary, abort.
//!
//! Where a request went is read from the emulator data plane's `x-emulator-pod` response
//! header (the pod that answered; see emulator/README.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::{Harness, create, harness_on, wait_for};

const CANARY: &str = "/api/v1/projects/team-a/deployments/qwen/canary";
const NEW_IMAGE: &str = "ghcr.io/llm-d/llm-d-inference-sim:v0.6.0";

fn cluster() -> modelplane_emulator::EmulatorBuilder {
    super::emulator()
        .nodes(2)
        .gpus_per_node(8)
        .start_delay(Duration::from_millis(100))
        .restart_backoff(Duration::from_millis(200))
        .fail_images("*nope*")
        .gateway("gateway-system", "inference")
}

async fn ready(h: &Harness) -> Value {
    wait_for("qwen to be Ready", Duration::from_secs(30), || async {
        h.deployment("qwen").await["status"]["phase"] == "Ready"
    })
    .await;
    h.deployment("qwen").await
}

/// Sends one chat request; returns its status and the pod that answered.
async fn call(client: &reqwest::Client, url: &str, canary_header: bool) -> (StatusCode, String) {
    let mut request = client
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}));
    if canary_header {
        request = request.header("x-modelplane-canary", "true");
    }
    let response = request.send().await.unwrap();
    let pod = response
        .headers()
        .get("x-emulator-pod")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (response.status(), pod)
}

fn is_canary_pod(pod: &str) -> bool {
    pod.starts_with("qwen-canary-")
}

#[sqlx::test]
async fn a_canary_takes_its_share_and_the_header_then_promotes_without_a_failed_request(
    pool: PgPool,
) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let record = ready(&h).await;
    let url = record["status"]["endpoints"]["external"][0]
        .as_str()
        .unwrap()
        .to_owned();

    let response = h
        .app
        .post_json(
            CANARY,
            &json!({"spec": {"engine": {"image": NEW_IMAGE}}, "weight": 20}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let started: Value = response.json().await.unwrap();
    assert_eq!(started["canary"]["weight"], 20);
    assert_eq!(started["canary"]["header"]["name"], "x-modelplane-canary");
    assert_eq!(started["canary"]["spec"]["engine"]["image"], NEW_IMAGE);
    let generation = started["generation"].as_i64().unwrap();

    wait_for(
        "the canary to take 20%",
        Duration::from_secs(30),
        || async {
            let r = h.deployment("qwen").await;
            r["status"]["observedGeneration"] == generation
                && r["status"]["phase"] == "Ready"
                && r["status"]["canary"]["phase"] == "Ready"
                && r["status"]["canary"]["routedWeight"] == 20
        },
    )
    .await;
    let record = h.deployment("qwen").await;
    let canary = &record["status"]["canary"];
    assert_eq!(
        canary["replicas"],
        json!({"desired": 1, "updated": 1, "ready": 1, "available": 1})
    );
    assert_eq!(
        canary["endpoints"]["cluster"],
        "http://qwen-canary.team-a.svc.cluster.local:8000"
    );
    assert_eq!(canary["endpoints"]["external"][0], url.as_str());

    // 1,000 requests through the reported URL: 20% ± 5 points reach the canary.
    let client = reqwest::Client::new();
    let mut to_canary = 0;
    for _ in 0..1000 {
        let (status, pod) = call(&client, &url, false).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            !pod.is_empty(),
            "the data plane names the pod that answered"
        );
        if is_canary_pod(&pod) {
            to_canary += 1;
        }
    }
    assert!(
        (150..=250).contains(&to_canary),
        "{to_canary} of 1000 requests reached the canary, expected 200 ± 50"
    );
    // The header always reaches the canary.
    for _ in 0..50 {
        let (status, pod) = call(&client, &url, true).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            is_canary_pod(&pod),
            "a request with the header went to {pod}"
        );
    }

    // Promote, with requests flowing the whole time: none may fail.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = tokio::spawn({
        let (stop, sent, failed, url, client) = (
            stop.clone(),
            sent.clone(),
            failed.clone(),
            url.clone(),
            client.clone(),
        );
        async move {
            while !stop.load(Ordering::Relaxed) {
                let (status, pod) = call(&client, &url, false).await;
                sent.fetch_add(1, Ordering::Relaxed);
                if status != StatusCode::OK {
                    eprintln!("failed during the promotion: {status} from {pod:?}");
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let response = h
        .app
        .post_json(&format!("{CANARY}/promote"), &json!({}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let promoted: Value = response.json().await.unwrap();
    assert_eq!(promoted["spec"]["engine"]["image"], NEW_IMAGE);
    assert_eq!(promoted["canary"]["promoting"], true);
    wait_for(
        "the promotion to finish",
        Duration::from_secs(60),
        || async {
            let r = h.deployment("qwen").await;
            r["canary"].is_null()
                && r["status"]["canary"].is_null()
                && r["status"]["phase"] == "Ready"
                && r["status"]["observedGeneration"] == r["generation"]
        },
    )
    .await;
    // A few more requests after the canary is gone.
    let after = sent.load(Ordering::Relaxed) + 20;
    wait_for(
        "requests after the promotion",
        Duration::from_secs(20),
        || async { sent.load(Ordering::Relaxed) >= after },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    eprintln!(
        "{} requests during the promotion",
        sent.load(Ordering::Relaxed)
    );
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "of {} requests during the promotion",
        sent.load(Ordering::Relaxed)
    );

    // One Deployment at the new spec, a route back to one backend, the canary gone.
    let stable = h.live("apps/v1", "Deployment", "qwen").await.unwrap();
    assert_eq!(
        stable["spec"]["template"]["spec"]["containers"][0]["image"],
        NEW_IMAGE
    );
    assert!(
        h.live("apps/v1", "Deployment", "qwen-canary")
            .await
            .is_none()
    );
    assert!(h.live("v1", "Service", "qwen-canary").await.is_none());
    let route = h
        .live("gateway.networking.k8s.io/v1", "HTTPRoute", "qwen")
        .await
        .unwrap();
    let rules = route["spec"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0]["backendRefs"].as_array().unwrap().len(), 1);
    assert_eq!(rules[0]["backendRefs"][0]["name"], "qwen");
    for _ in 0..20 {
        let (status, pod) = call(&client, &url, true).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!is_canary_pod(&pod));
    }
    let revisions: Value = h
        .app
        .get("/api/v1/projects/team-a/deployments/qwen/revisions")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(revisions["items"][0]["reason"], "promoted canary");
    assert_eq!(revisions["items"][0]["spec"]["engine"]["image"], NEW_IMAGE);
    let events = h.events("qwen").await;
    for kind in ["CanaryStarted", "CanaryPromoted", "CanaryRemoved"] {
        assert!(events.iter().any(|e| e == kind), "{kind} in {events:?}");
    }
}

#[sqlx::test]
async fn a_failing_canary_degrades_the_deployment_while_stable_serves_and_abort_removes_it(
    pool: PgPool,
) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let record = ready(&h).await;
    let url = record["status"]["endpoints"]["external"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let response = h
        .app
        .post_json(
            CANARY,
            &json!({"spec": {"engine": {"image": "ghcr.io/llm-d/nope:v1"}}, "weight": 30}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);

    wait_for(
        "Degraded by the canary",
        Duration::from_secs(30),
        || async {
            let r = h.deployment("qwen").await;
            r["status"]["phase"] == "Degraded" && r["status"]["canary"]["phase"] == "Failed"
        },
    )
    .await;
    let record = h.deployment("qwen").await;
    let message = record["status"]["message"].as_str().unwrap();
    assert!(message.contains("canary is failing"), "{message}");
    assert!(
        message.contains("stable track serves every request"),
        "{message}"
    );
    let cause = record["status"]["canary"]["message"].as_str().unwrap();
    assert!(cause.contains("ghcr.io/llm-d/nope:v1"), "{cause}");
    assert_eq!(record["status"]["canary"]["routedWeight"], 0);
    assert_eq!(record["status"]["canary"]["weight"], 30);

    // Stable keeps serving every request without the header.
    let client = reqwest::Client::new();
    for _ in 0..200 {
        let (status, pod) = call(&client, &url, false).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!is_canary_pod(&pod));
    }
    // A canary that is not Ready cannot be promoted.
    let refused = h
        .app
        .post_json(&format!("{CANARY}/promote"), &json!({}))
        .await;
    assert_eq!(refused.status(), StatusCode::CONFLICT);

    let response = h
        .app
        .post_json(&format!("{CANARY}/abort"), &json!({}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.json::<Value>().await.unwrap()["canary"].is_null());
    wait_for(
        "the canary's objects to go",
        Duration::from_secs(30),
        || async {
            h.live("apps/v1", "Deployment", "qwen-canary")
                .await
                .is_none()
                && h.live("v1", "Service", "qwen-canary").await.is_none()
        },
    )
    .await;
    wait_for(
        "Ready without a canary",
        Duration::from_secs(30),
        || async {
            let r = h.deployment("qwen").await;
            r["status"]["phase"] == "Ready" && r["status"]["canary"].is_null()
        },
    )
    .await;
    let events = h.events("qwen").await;
    for kind in ["CanaryStarted", "CanaryAborted", "CanaryRemoved"] {
        assert!(events.iter().any(|e| e == kind), "{kind} in {events:?}");
    }
}
