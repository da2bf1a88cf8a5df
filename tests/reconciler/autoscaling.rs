//! The autoscaler on the emulator: load sent through the Gateway at a `sim` deployment
//! whose pods take 4 requests at a time (`--max-num-seqs 4`, as vLLM's scheduler: the rest
//! wait in its queue, `vllm:num_requests_waiting`), and what modelplane does with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use super::load::{Sent, cluster, drive, openai, ready};
use super::{Harness, create_with, harness_on, sim_spec, wait_for};

/// A sim whose pods serve 4 requests at once, autoscaled on the queue per replica.
fn autoscaled(max: i64) -> Value {
    let mut spec = sim_spec();
    spec["resources"] = json!({"cpu": "100m", "memory": "256Mi"});
    spec["engine"]["args"] = json!([
        "--max-num-seqs=4",
        "--time-to-first-token=50ms",
        "--inter-token-latency=10ms"
    ]);
    spec["autoscaling"] = json!({
        "minReplicas": 1,
        "maxReplicas": max,
        "target": {"metric": "waitingPerReplica", "value": 4},
        "scaleDownDelaySeconds": 2
    });
    spec
}

/// The timeline's `Autoscaled` entries, oldest first.
async fn decisions(h: &Harness, name: &str) -> Vec<String> {
    h.timeline(name, "Autoscaled").await
}

/// 40 closed-loop clients through the Gateway URL until the returned flag is set.
async fn load(h: &Harness, name: &str) -> (Arc<AtomicBool>, Vec<tokio::task::JoinHandle<()>>) {
    let (base, model) = openai(&ready(h, name).await).await;
    let stop = Arc::new(AtomicBool::new(false));
    let clients = drive(
        format!("{base}/completions"),
        model,
        40,
        stop.clone(),
        Arc::new(Sent::default()),
    );
    (stop, clients)
}

/// `(from, to)` of a decision that changed the count ("1 → 4: …").
fn step(decision: &str) -> (i64, i64) {
    let (counts, _) = decision.split_once(':').unwrap();
    let (from, to) = counts.split_once(" → ").unwrap();
    (from.trim().parse().unwrap(), to.trim().parse().unwrap())
}

async fn autoscaling_of(h: &Harness, name: &str) -> Value {
    h.deployment(name).await["status"]["autoscaling"].clone()
}

/// Waits until the autoscaler has decided `n` more times (each collection interval).
async fn decided_again(h: &Harness, name: &str, n: usize) {
    for _ in 0..n {
        let before = autoscaling_of(h, name).await["decidedAt"].clone();
        wait_for("another decision", Duration::from_secs(10), || {
            let before = before.clone();
            async move { autoscaling_of(h, name).await["decidedAt"] != before }
        })
        .await;
    }
}

/// 40 clients on one replica with 4 slots: 36 wait, 9 times the target of 4 per replica.
/// The autoscaler goes to its maximum at once (ceil(1 × 36 / 4) = 9, clamped to 4), holds
/// there while the load lasts (no flapping: one decision that scales), and after the load
/// stops and the 2 s scale-down delay passes, goes back to its minimum. Each change is a
/// timeline entry and a Kubernetes Event on the Deployment saying why.
#[sqlx::test]
async fn queued_requests_scale_it_up_and_an_idle_one_back_down(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    h.collect_load();
    create_with(&h, "auto", autoscaled(4)).await;
    let (stop, clients) = load(&h, "auto").await;

    wait_for("4 ready replicas", Duration::from_secs(60), || async {
        let d = h.deployment("auto").await;
        d["status"]["autoscaling"]["replicas"] == 4 && d["status"]["replicas"]["ready"] == 4
    })
    .await;
    // Up only, each step saying why; the queue reached the autoscaler's first reading of
    // the load whole (a gauge), so one step normally does it.
    let ups = decisions(&h, "auto").await;
    let steps: Vec<(i64, i64)> = ups.iter().map(|d| step(d)).collect();
    assert!(steps.iter().all(|(from, to)| to > from), "{ups:?}");
    assert_eq!(steps.last().unwrap().1, 4, "{ups:?}");
    assert!(
        ups.iter()
            .all(|d| d.contains("waiting per replica, target 4")),
        "{ups:?}"
    );
    assert!(
        ups.last().unwrap().ends_with(", maxReplicas is 4"),
        "{ups:?}"
    );
    // Steady load at the maximum: held, decision after decision.
    decided_again(&h, "auto", 4).await;
    assert_eq!(decisions(&h, "auto").await.len(), ups.len());
    let held = autoscaling_of(&h, "auto").await;
    assert_eq!(held["replicas"], 4);
    assert_eq!(held["limitedBy"], "maxReplicas", "{held}");
    assert_eq!(held["lastScaled"]["from"], 1);
    assert_eq!(held["lastScaled"]["to"], 4);
    // The spec is not touched: no new generation, the same ETag.
    assert_eq!(h.deployment("auto").await["generation"], 1);

    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    wait_for("back to 1 replica", Duration::from_secs(60), || async {
        let d = h.deployment("auto").await;
        d["status"]["autoscaling"]["replicas"] == 1 && d["status"]["replicas"]["ready"] == 1
    })
    .await;
    let all = decisions(&h, "auto").await;
    assert_eq!(all.len(), ups.len() + 1, "{all:?}");
    assert_eq!(
        all.last().unwrap(),
        "4 → 1: 0 waiting per replica, target 4"
    );

    // The same sentences as Kubernetes Events on the Deployment (the HPA's reason).
    let api: Api<Event> = Api::namespaced(h.kube.clone(), "team-a");
    let notes: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("SuccessfulRescale")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("auto")
        })
        .filter_map(|e| e.note)
        .collect();
    assert!(all.iter().all(|d| notes.contains(d)), "{notes:?}");
}

/// A quota of 3 replicas: the autoscaler stops there, and says so.
#[sqlx::test]
async fn the_quota_stops_the_autoscaler_and_the_timeline_says_why(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    let response = h
        .app
        .request(Method::PUT, "/api/v1/projects/team-a/quota")
        .json(&json!({"replicas": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    h.collect_load();
    create_with(&h, "auto", autoscaled(6)).await;
    let (stop, clients) = load(&h, "auto").await;

    wait_for("3 ready replicas", Duration::from_secs(60), || async {
        let d = h.deployment("auto").await;
        d["status"]["autoscaling"]["replicas"] == 3 && d["status"]["replicas"]["ready"] == 3
    })
    .await;
    let ups = decisions(&h, "auto").await;
    assert_eq!(step(ups.last().unwrap()).1, 3, "{ups:?}");
    assert!(ups.last().unwrap().ends_with(", quota allows 3"), "{ups:?}");
    decided_again(&h, "auto", 3).await;
    let held = autoscaling_of(&h, "auto").await;
    assert_eq!(
        (held["replicas"].clone(), held["limitedBy"].clone()),
        (json!(3), json!("quota")),
        "{held}"
    );
    assert!(
        held["reason"].as_str().unwrap().ends_with("quota allows 3"),
        "{held}"
    );
    assert_eq!(decisions(&h, "auto").await.len(), ups.len());
    // The quota's view counts the replicas that run, not the spec's starting point.
    let quota: Value = h
        .app
        .get("/api/v1/projects/team-a/quota")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(quota["replicas"]["used"], 3, "{quota}");

    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
}

/// Scaling an autoscaled deployment by hand is refused, naming what to change instead.
#[sqlx::test]
async fn scaling_an_autoscaled_deployment_by_hand_is_refused(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "auto", autoscaled(4)).await;
    let response = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/auto/scale",
            &json!({"replicas": 3}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let problem: Value = response.json().await.unwrap();
    assert!(
        problem
            .to_string()
            .contains("autoscaled between 1 and 4 replicas"),
        "{problem}"
    );
}
