//! The worker through outages: the cluster, the database, the API server, the Gateway.

use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::*;

#[sqlx::test]
async fn without_the_gateway_api_the_deployment_runs_and_routed_says_why(pool: PgPool) {
    let h = harness(pool, false, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let record = h.wait_applied("qwen", 1).await;
    assert!(h.live("apps/v1", "Deployment", "qwen").await.is_some());
    let routed = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Routed")
        .unwrap()
        .clone();
    assert_eq!(routed["status"], "False");
    assert!(
        routed["message"].as_str().unwrap().contains("Gateway API"),
        "{routed}"
    );
    assert!(
        record["status"]["endpoints"]["external"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[sqlx::test]
async fn a_cluster_outage_is_reported_and_then_converges(pool: PgPool) {
    let mut h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    create(&h, "idle").await;
    h.wait_applied("qwen", 1).await;
    h.wait_applied("idle", 1).await;
    let emulator = h.emulator.take().unwrap();
    let addr = emulator.addr();
    emulator.shutdown().await;

    h.app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 2}),
        )
        .await;
    wait_for(
        "ClusterReachable=False",
        Duration::from_secs(60),
        || async {
            let record = h.deployment("qwen").await;
            record["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "ClusterReachable" && c["status"] == "False")
        },
    )
    .await;
    let record = h.deployment("qwen").await;
    assert_eq!(
        (
            record["status"]["phase"].as_str(),
            record["status"]["message"].as_str()
        ),
        (
            Some("Pending"),
            Some("generation 2 accepted; not applied yet")
        ),
        "a generation not yet applied is never reported as rolled out"
    );
    let applied = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Applied")
        .unwrap()
        .clone();
    assert_eq!(
        (applied["status"].as_str(), applied["reason"].as_str()),
        (Some("False"), Some("NotApplied")),
        "the conditions agree with the phase"
    );
    // A record with no work pending learns of the outage too, its last status kept.
    wait_for(
        "the idle record to say so",
        Duration::from_secs(60),
        || async {
            let record = h.deployment("idle").await;
            record["status"]["phase"] == "Deploying"
                && record["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["type"] == "ClusterReachable" && c["status"] == "False")
        },
    )
    .await;

    h.emulator = Some(super::emulator().listen(addr).start().await.unwrap());
    let record = h.wait_applied("qwen", 2).await;
    wait_for(
        "the idle record's condition gone",
        Duration::from_secs(60),
        || async {
            h.deployment("idle").await["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["type"] != "ClusterReachable")
        },
    )
    .await;
    assert!(
        record["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["type"] != "ClusterReachable")
    );
    assert_eq!(
        h.live("apps/v1", "Deployment", "qwen").await.unwrap()["spec"]["replicas"],
        2
    );
    assert!(
        h.events("qwen")
            .await
            .contains(&"ClusterUnreachable".to_owned())
    );
}

/// A Gateway that does not exist, or that no controller runs (the Gateway API CRD's default
/// status: `Accepted=Unknown`, reason `Pending`, "Waiting for controller"), is named as such,
/// not reported as a Gateway that is merely slow.
#[sqlx::test]
async fn a_missing_or_unrun_gateway_is_named_in_the_status(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let routed = |record: &Value| {
        record["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Routed")
            .map(|c| c["message"].as_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    wait_for(
        "the missing Gateway to be named",
        Duration::from_secs(20),
        || async {
            routed(&h.deployment("qwen").await) == "Gateway gateway-system/inference does not exist"
        },
    )
    .await;
    // Now the Gateway exists, but no controller runs its class.
    create_gateway(
        &h,
        "nobody-runs-this",
        json!([{"name": "http", "port": 80, "protocol": "HTTP"}]),
    )
    .await;
    wait_for("the unrun Gateway to be named", Duration::from_secs(20), || async {
        routed(&h.deployment("qwen").await)
            == "Gateway gateway-system/inference is not accepted: Accepted=Unknown (Pending): Waiting for controller"
    })
    .await;
}

/// The worker's queries fail for a while (as during a database failover): it rides the
/// outage out with backoff and goes on working, rather than ending its loop.
#[sqlx::test]
async fn the_worker_survives_a_database_outage(pool: PgPool) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "before").await;
    h.wait_applied("before", 1).await;
    // The outage: the queue's table is gone for half a second, and the worker is woken to
    // claim from it meanwhile, so its claims fail.
    sqlx::query("alter table reconcile_work rename to reconcile_work_away")
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..5 {
        sqlx::query("select pg_notify('modelplane_reconcile', 'outage')")
            .execute(&pool)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sqlx::query("alter table reconcile_work_away rename to reconcile_work")
        .execute(&pool)
        .await
        .unwrap();
    // And every connection drops, as on a failover.
    sqlx::query(
        "select pg_terminate_backend(pid) from pg_stat_activity
         where datname = current_database() and pid <> pg_backend_pid()",
    )
    .execute(&pool)
    .await
    .unwrap();
    create(&h, "after").await;
    h.wait_applied("after", 1).await;
}

/// A project's namespace deleted outside modelplane comes back with the project's objects,
/// brought by the watches rather than the (here hour-long) periodic resync.
#[sqlx::test]
async fn a_deleted_project_namespace_is_restored_without_waiting_for_a_resync(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let namespaces: Api<DynamicObject> =
        Api::all_with(h.kube.clone(), &resource_of("v1", "Namespace"));
    namespaces
        .delete("team-a", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the namespace and the Deployment back",
        Duration::from_secs(30),
        || async {
            namespaces
                .get_opt("team-a")
                .await
                .unwrap()
                .is_some_and(|ns| ns.metadata.deletion_timestamp.is_none())
                && h.live("apps/v1", "Deployment", "qwen").await.is_some()
        },
    )
    .await;
}

/// An API server that stops answering in time (as with etcd down behind it) costs one
/// reconcile its budget, not minutes: the attempt ends as a timeout, is retried, and the
/// record converges once the server answers again.
#[sqlx::test]
async fn a_cluster_that_hangs_costs_a_reconcile_its_budget_not_minutes(pool: PgPool) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let emulator = h.emulator.as_ref().unwrap();
    emulator.faults().latency(Duration::from_secs(60));
    let patched = h
        .app
        .patch(
            "/api/v1/projects/team-a/deployments/qwen",
            &json!({"spec": {"replicas": 2}}),
            None,
        )
        .await;
    assert_eq!(patched.status(), StatusCode::OK);
    // The harness's lease is 5 s, so a reconcile's budget is 4 s.
    wait_for("the hung reconcile to time out", Duration::from_secs(20), || async {
        let error: Option<String> = sqlx::query_scalar(
            "select w.last_error from reconcile_work w join model_deployment d on d.id = w.deployment_id
             where d.name = 'qwen'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap()
        .flatten();
        error.is_some_and(|e| e.contains("took longer than"))
    })
    .await;
    emulator.faults().clear();
    h.wait_applied("qwen", 2).await;
}

/// The API server restarts and comes back empty (its store lost, as with an etcd restore):
/// the worker's watches are told their resourceVersion is gone (410), relist, and every
/// record is looked at again, so the objects are back within seconds and drift is repaired
/// at once afterwards. (The hour-long periodic resync plays no part.)
#[sqlx::test]
async fn after_the_api_server_restarts_every_record_converges_at_once(pool: PgPool) {
    let mut h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    for i in 0..3 {
        create(&h, &format!("model-{i}")).await;
    }
    for i in 0..3 {
        h.wait_applied(&format!("model-{i}"), 1).await;
    }
    let old = h.emulator.take().unwrap();
    let addr = old.addr();
    old.shutdown().await;
    h.emulator = Some(
        super::emulator()
            .gateway_api(true)
            .listen(addr)
            .start()
            .await
            .unwrap(),
    );
    wait_for(
        "every record's objects back",
        Duration::from_secs(30),
        || async {
            let mut all = true;
            for i in 0..3 {
                all &= h
                    .live("apps/v1", "Deployment", &format!("model-{i}"))
                    .await
                    .is_some();
            }
            all
        },
    )
    .await;
    let services: Api<DynamicObject> =
        Api::namespaced_with(h.kube.clone(), "team-a", &resource_of("v1", "Service"));
    services
        .delete("model-0", &DeleteParams::default())
        .await
        .unwrap();
    // The Service watch may still be in kube-runtime's reconnect backoff (0.8 s doubling
    // with each failure while the API server was down, capped at 30 s), so allow for it.
    wait_for(
        "the deleted Service restored",
        Duration::from_secs(60),
        || async { h.live("v1", "Service", "model-0").await.is_some() },
    )
    .await;

    // The watches saw the API server go and restarted (the recorder is shared by this
    // binary's tests, so this counts at least ours).
    let metrics = h.app.get("/metrics").await.text().await.unwrap();
    let restarts = modelplane::metrics::WATCH_RESTARTS;
    assert!(
        metrics.contains(&format!("# HELP {restarts} ")),
        "{metrics}"
    );
    let deployments = common::sample(&metrics, restarts, &["kind=\"Deployment\""]);
    assert!(deployments.is_some_and(|n| n >= 1.0), "{metrics}");
    let reconciled = format!("{}_count", modelplane::metrics::RECONCILE_DURATION);
    let ok = common::sample(&metrics, &reconciled, &["outcome=\"ok\""]);
    assert!(ok.is_some_and(|n| n >= 3.0), "{metrics}");
}

/// Security finding 2: the Gateway's own names are reserved whatever the platform listed.
/// A route with one of them as its hostname would outrank every project's host-less routes
/// for that host (Gateway API: `HTTPRouteSpec.Hostnames`, precedence to "the largest number
/// of characters in a matching non-wildcard hostname"), so the worker records the names a
/// Gateway answers for (its listeners' hostnames, its status's Hostname addresses) and no
/// route on it may claim them.
#[sqlx::test]
async fn a_gateways_own_hostnames_cannot_be_claimed(pool: PgPool) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    let gateways = create_gateway(
        &h,
        "any",
        json!([
            {"name": "http", "port": 80, "protocol": "HTTP", "hostname": "models.example.net"},
            {"name": "wild", "port": 8080, "protocol": "HTTP", "hostname": "*.apps.example.net"}
        ]),
    )
    .await;
    wait_for(
        "the Gateway's hostnames to be recorded",
        Duration::from_secs(20),
        || async {
            modelplane::store::gateways::hostnames_of_gateway(&pool, "gateway-system/inference")
                .await
                .unwrap()
                == ["models.example.net"]
        },
    )
    .await;
    let mut spec = sim_spec();
    spec["routing"] = json!({"hostname": "models.example.net", "pathPrefix": "/"});
    let refused = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": "capture", "spec": spec}),
        )
        .await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = refused.json().await.unwrap();
    assert_eq!(
        problem["errors"][0]["field"], "spec.routing.hostname",
        "{problem}"
    );
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("reserved")
    );
    // A name the Gateway does not answer for by itself is the project's to take.
    spec["routing"] = json!({"hostname": "qwen.apps.example.net", "pathPrefix": "/"});
    let created = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": "qwen", "spec": spec}),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    // A deleted Gateway's names are forgotten.
    gateways
        .delete("inference", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the deleted Gateway's hostnames to go",
        Duration::from_secs(20),
        || async {
            modelplane::store::gateways::hostnames_of_gateway(&pool, "gateway-system/inference")
                .await
                .unwrap()
                .is_empty()
        },
    )
    .await;
}

/// Issue #41, item 8: a repair is told only once it is made. A Service deleted behind the
/// worker's back while the API server refuses to write Services (403, as a narrowed RBAC
/// would) is drift the worker cannot repair yet: its pass fails, and neither the timeline
/// nor a Kubernetes Event says `DriftRepaired`. Once writes pass, the Service is back and
/// the repair is told once.
#[sqlx::test]
async fn a_repair_that_failed_is_not_told_as_made(pool: PgPool) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let emulator = h.emulator.as_ref().unwrap();
    emulator.faults().forbid("patch", "services");
    let services: Api<DynamicObject> =
        Api::namespaced_with(h.kube.clone(), "team-a", &resource_of("v1", "Service"));
    services
        .delete("qwen", &DeleteParams::default())
        .await
        .unwrap();
    let last_error = || async {
        sqlx::query_scalar::<_, Option<String>>(
            "select w.last_error from reconcile_work w join model_deployment d on d.id = w.deployment_id
             where d.name = 'qwen'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap()
        .flatten()
    };
    wait_for(
        "the repair to fail on the forbidden write",
        Duration::from_secs(20),
        || async { last_error().await.is_some_and(|e| e.contains("forbidden")) },
    )
    .await;
    assert!(h.live("v1", "Service", "qwen").await.is_none());
    let timeline = h.events("qwen").await;
    assert!(
        !timeline.iter().any(|k| k == "DriftRepaired"),
        "nothing was repaired: {timeline:?}"
    );
    let kube_events: Api<DynamicObject> = Api::namespaced_with(
        h.kube.clone(),
        "team-a",
        &resource_of("events.k8s.io/v1", "Event"),
    );
    let told = |events: &[DynamicObject]| {
        events
            .iter()
            .filter(|e| e.data["reason"] == "DriftRepaired")
            .count()
    };
    let listed = kube_events.list(&Default::default()).await.unwrap().items;
    assert_eq!(told(&listed), 0, "no DriftRepaired Event: {listed:?}");

    emulator.faults().allow("patch", "services");
    wait_for(
        "the Service back and the repair told",
        Duration::from_secs(30),
        || async {
            h.live("v1", "Service", "qwen").await.is_some()
                && h.events("qwen").await.iter().any(|k| k == "DriftRepaired")
        },
    )
    .await;
    let timeline = h.events("qwen").await;
    assert_eq!(
        timeline.iter().filter(|k| *k == "DriftRepaired").count(),
        1,
        "{timeline:?}"
    );
    wait_for(
        "the DriftRepaired Event",
        Duration::from_secs(10),
        || async { told(&kube_events.list(&Default::default()).await.unwrap().items) == 1 },
    )
    .await;
}

/// Issue #41, item 8: while the API server does not answer, a deployment last seen Ready
/// does not stay a green `Ready` (nobody can tell that it serves): it reads `Degraded`, and
/// its `ClusterReachable=False` condition says which API server does not answer and why in
/// words (not `ServiceError: client error (Connect)`). When the cluster answers again, it
/// converges back to Ready.
#[sqlx::test]
async fn a_ready_deployment_is_not_green_while_the_cluster_does_not_answer(pool: PgPool) {
    let cluster = || {
        super::emulator()
            .nodes(1)
            .start_delay(Duration::from_millis(50))
            .gateway("gateway-system", "inference")
    };
    let mut h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    wait_for("qwen Ready", Duration::from_secs(30), || async {
        h.deployment("qwen").await["status"]["phase"] == "Ready"
    })
    .await;
    let emulator = h.emulator.take().unwrap();
    let addr = emulator.addr();
    emulator.shutdown().await;

    wait_for(
        "ClusterReachable=False",
        Duration::from_secs(60),
        || async {
            h.deployment("qwen").await["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "ClusterReachable" && c["status"] == "False")
        },
    )
    .await;
    let record = h.deployment("qwen").await;
    let status = &record["status"];
    assert_eq!(status["phase"], "Degraded", "{status}");
    let reachable = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ClusterReachable")
        .unwrap();
    assert_eq!(
        reachable["message"],
        format!(
            "the Kubernetes API server at http://{addr} does not answer: connection refused; \
             the status below is the last seen"
        )
    );
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with("whether it still serves is unknown: the Kubernetes API server at")
            && message.ends_with("last seen Ready (1/1 replicas available)"),
        "{message}"
    );
    assert_eq!(status["replicas"]["available"], 1, "the counts last seen");
    let events: Value = h
        .app
        .get("/api/v1/projects/team-a/deployments/qwen/events")
        .await
        .json()
        .await
        .unwrap();
    assert!(
        events["items"].as_array().unwrap().iter().any(|e| {
            e["kind"] == "PhaseChanged"
                && e["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("Ready → Degraded: whether it still serves is unknown")
        }),
        "{events}"
    );

    // Back (empty: the worker makes its objects again), and Ready again.
    h.emulator = Some(cluster().listen(addr).start().await.unwrap());
    wait_for("qwen Ready again", Duration::from_secs(60), || async {
        let status = h.deployment("qwen").await["status"].clone();
        status["phase"] == "Ready"
            && status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["type"] != "ClusterReachable")
    })
    .await;
}

/// Issue #41, item 5: a write of the record's objects that the API server forbids (403: the
/// worker's RBAC does not grant `patch` on Deployments) fails the pass, is counted as
/// `modelplane_reconcile_errors_total{kind="forbidden"}` (not `api_refused`), and the record
/// says so once, in an `Authorized=False` condition naming the verb, the resource and the
/// namespace, while its attempts go on. Granted again, it is applied and the condition goes.
#[sqlx::test]
async fn a_forbidden_write_is_said_in_the_conditions_and_counted(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    let faults = h.emulator.as_ref().unwrap().faults();
    faults.forbid("patch", "deployments");
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let authorized = |record: &Value| {
        let found: Vec<Value> = record["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] == "Authorized")
            .cloned()
            .collect();
        assert!(found.len() <= 1, "once: {found:?}");
        found.into_iter().next()
    };
    wait_for(
        "Authorized=False on the record",
        Duration::from_secs(20),
        || async { authorized(&h.deployment("qwen").await).is_some() },
    )
    .await;
    let record = h.deployment("qwen").await;
    let condition = authorized(&record).unwrap();
    assert_eq!(
        (condition["status"].as_str(), condition["reason"].as_str()),
        (Some("False"), Some("Forbidden"))
    );
    let message = condition["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "the worker may not patch deployments.apps in namespace team-a: its RBAC is too narrow"
        ),
        "{message}"
    );
    assert_eq!(record["status"]["phase"], "Pending", "nothing applied yet");
    let metrics = h.app.get("/metrics").await.text().await.unwrap();
    let forbidden = common::sample(
        &metrics,
        modelplane::metrics::RECONCILE_ERRORS,
        &["kind=\"forbidden\""],
    );
    assert!(forbidden.is_some_and(|n| n >= 1.0), "{metrics}");

    faults.allow("patch", "deployments");
    let record = h.wait_applied("qwen", 1).await;
    assert!(authorized(&record).is_none(), "{record}");
    assert!(h.live("apps/v1", "Deployment", "qwen").await.is_some());
}

/// Clean-up that waits for a Gateway is bounded: an aborted canary's objects wait for the
/// Gateway to take in the route without them, and the status and timeline say so
/// (`CleanedUp=False`, `WaitingForGateway`); a Gateway that never reports on the route (no
/// controller runs its class, the CRD's default status) is waited for
/// `MODELPLANE_GATEWAY_SILENCE_SECS` only, then the objects go, so nothing is left behind.
#[sqlx::test]
async fn clean_up_waits_for_a_silent_gateway_only_so_long(pool: PgPool) {
    let h = harness(pool, true, |c| c.gateway_silence = Duration::from_secs(3)).await;
    h.app.create_project("team-a").await;
    create_gateway(
        &h,
        "nobody-runs-this",
        json!([{"name": "http", "port": 80, "protocol": "HTTP"}]),
    )
    .await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let started = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/canary",
            &json!({"spec": {"engine": {"args": ["--max-model-len=2048"]}}, "weight": 10}),
        )
        .await;
    assert_eq!(started.status(), StatusCode::CREATED);
    wait_for("the canary's objects", Duration::from_secs(20), || async {
        h.live("apps/v1", "Deployment", "qwen-canary")
            .await
            .is_some()
    })
    .await;
    let aborted = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/canary/abort",
            &json!({}),
        )
        .await;
    assert_eq!(aborted.status(), StatusCode::OK);

    let cleaned_up = |record: Value| {
        record["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "CleanedUp")
            .cloned()
    };
    wait_for("the wait said", Duration::from_secs(20), || async {
        cleaned_up(h.deployment("qwen").await)
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "WaitingForGateway")
    })
    .await;
    let waiting = cleaned_up(h.deployment("qwen").await).unwrap();
    let message = waiting["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "waiting for Gateway gateway-system/inference to take in route generation"
        ) && message.contains("before removing the canary's objects")
            && message.contains("it has never reported on the route, so they go anyway at"),
        "{message}"
    );
    assert!(
        h.live("apps/v1", "Deployment", "qwen-canary")
            .await
            .is_some()
    );
    assert!(h.events("qwen").await.iter().any(|e| e == "CleanupWaiting"));

    // The Gateway stays silent: after the wait the objects go, and the condition with them.
    wait_for(
        "the canary's objects removed",
        Duration::from_secs(20),
        || async {
            h.live("apps/v1", "Deployment", "qwen-canary")
                .await
                .is_none()
                && h.live("v1", "Service", "qwen-canary").await.is_none()
        },
    )
    .await;
    wait_for("the condition gone", Duration::from_secs(20), || async {
        cleaned_up(h.deployment("qwen").await).is_none()
    })
    .await;
    let events = h.events("qwen").await;
    assert_eq!(
        events.iter().filter(|e| *e == "CleanupWaiting").count(),
        2,
        "the wait told once and its end once: {events:?}"
    );
    assert!(events.iter().any(|e| e == "CanaryRemoved"), "{events:?}");
}
