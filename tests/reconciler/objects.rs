//! What the worker applies, repairs, scales and removes, and what it leaves alone.

use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use super::*;

#[sqlx::test]
async fn a_new_deployment_is_applied_with_its_namespace_and_reported(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let record = h.wait_applied("qwen", 1).await;
    assert_eq!(
        record["status"]["phase"], "Deploying",
        "no kubelets in the API-server emulator: nothing becomes available"
    );
    assert_eq!(
        record["status"]["endpoints"]["cluster"],
        "http://qwen.team-a.svc.cluster.local:8000"
    );
    let id = record["id"].as_str().unwrap();

    let namespace = Api::<DynamicObject>::all_with(h.kube.clone(), &resource_of("v1", "Namespace"))
        .get("team-a")
        .await
        .unwrap();
    assert_eq!(
        namespace.metadata.labels.unwrap()["modelplane.io/project"],
        "team-a"
    );
    let deployment = h.live("apps/v1", "Deployment", "qwen").await.unwrap();
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "model-server", "app.kubernetes.io/instance": "qwen", "modelplane.io/deployment-id": id})
    );
    assert_eq!(
        deployment["metadata"]["labels"]["modelplane.io/installation"],
        "test"
    );
    let managers: Vec<&str> = deployment["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert!(managers.contains(&"modelplane"));
    let service = h.live("v1", "Service", "qwen").await.unwrap();
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    let route = h
        .live("gateway.networking.k8s.io/v1", "HTTPRoute", "qwen")
        .await
        .unwrap();
    assert_eq!(route["spec"]["parentRefs"][0]["name"], "inference");
    assert_eq!(
        route["spec"]["rules"][0]["matches"][0]["path"]["value"],
        "/team-a/qwen"
    );
    assert_eq!(
        h.events("qwen").await,
        ["Created", "Applied", "PhaseChanged"]
    );
}

#[sqlx::test]
async fn a_resync_of_unchanged_records_makes_no_kubernetes_writes(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    for i in 0..100 {
        create(&h, &format!("model-{i}")).await;
    }
    for i in 0..100 {
        h.wait_applied(&format!("model-{i}"), 1).await;
    }
    let pool = h.app.pool.clone();
    wait_for("an empty queue", Duration::from_secs(30), || async {
        sqlx::query_scalar::<_, i64>("select count(*) from reconcile_work where run_after <= now()")
            .fetch_one(&pool)
            .await
            .unwrap()
            == 0
    })
    .await;
    let writes = h.writes();
    // Requeue everything now, as the periodic resync does, and let the worker go through it.
    sqlx::query("update reconcile_work set run_after = now()")
        .execute(&pool)
        .await
        .unwrap();
    modelplane::store::work_queue::enqueue_all(&pool)
        .await
        .unwrap();
    wait_for(
        "the resync to be worked off",
        Duration::from_secs(30),
        || async {
            sqlx::query_scalar::<_, i64>(
                "select count(*) from reconcile_work where run_after <= now()",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
                == 0
        },
    )
    .await;
    assert_eq!(
        h.writes(),
        writes,
        "unchanged records were written to Kubernetes"
    );
}

#[sqlx::test]
async fn drift_is_repaired_and_recorded(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;

    h.api("v1", "Service")
        .delete("qwen", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the Service to come back",
        Duration::from_secs(10),
        || async { h.live("v1", "Service", "qwen").await.is_some() },
    )
    .await;

    let patch = json!({"spec": {"replicas": 5}});
    h.api("apps/v1", "Deployment")
        .patch("qwen", &kube::api::PatchParams::apply("someone-else").force(), &kube::api::Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "qwen"}, "spec": patch["spec"]})))
        .await
        .unwrap();
    wait_for(
        "replicas restored to 1",
        Duration::from_secs(10),
        || async {
            h.live("apps/v1", "Deployment", "qwen").await.unwrap()["spec"]["replicas"] == 1
        },
    )
    .await;
    // The repair lands a moment before its timeline entry is written.
    wait_for(
        "two repairs on the timeline",
        Duration::from_secs(10),
        || async { h.timeline("qwen", "DriftRepaired").await.len() == 2 },
    )
    .await;
    // Each says what happened: a deleted object is not "changed".
    assert_eq!(
        h.timeline("qwen", "DriftRepaired").await,
        [
            "repaired what was done outside modelplane: Service qwen was deleted",
            "repaired what was done outside modelplane: Deployment qwen was changed"
        ]
    );
}

#[sqlx::test]
async fn scale_and_restart_reach_the_cluster(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let hash = |d: &Value| {
        d["spec"]["template"]["metadata"]["annotations"]["modelplane.io/config-hash"].clone()
    };
    let before = hash(&h.live("apps/v1", "Deployment", "qwen").await.unwrap());

    h.app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 3}),
        )
        .await;
    h.wait_applied("qwen", 2).await;
    let live = h.live("apps/v1", "Deployment", "qwen").await.unwrap();
    assert_eq!(live["spec"]["replicas"], 3);
    assert_eq!(hash(&live), before, "scaling does not roll the pods");

    h.app
        .request(
            Method::POST,
            "/api/v1/projects/team-a/deployments/qwen/restart",
        )
        .send()
        .await
        .unwrap();
    wait_for(
        "a new config hash after the restart",
        Duration::from_secs(10),
        || async { hash(&h.live("apps/v1", "Deployment", "qwen").await.unwrap()) != before },
    )
    .await;
}

#[sqlx::test]
async fn delete_removes_every_object_then_the_record(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    let id = h.wait_applied("qwen", 1).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    h.delete_and_wait_gone("qwen").await;
    for (api_version, kind) in [
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ] {
        assert!(
            h.live(api_version, kind, "qwen").await.is_none(),
            "{kind} left behind"
        );
    }
    let events: Value = h
        .app
        .get(&format!("/api/v1/projects/team-a/events?deploymentId={id}"))
        .await
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.last(), Some(&"Deleted"));
    create(&h, "qwen").await;
}

#[sqlx::test]
async fn orphaned_objects_of_this_installation_are_removed(pool: PgPool) {
    let h = harness(pool, true, |c| c.resync = Duration::from_secs(1)).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let orphan = |name: &str, installation: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "team-a", "labels": {
                "app.kubernetes.io/managed-by": "modelplane", "modelplane.io/installation": installation,
                "modelplane.io/deployment-id": uuid::Uuid::now_v7().to_string()}},
            "spec": {"ports": [{"port": 80}]}
        })).unwrap()
    };
    let services = h.api("v1", "Service");
    services
        .create(&PostParams::default(), &orphan("ghost", "test"))
        .await
        .unwrap();
    services
        .create(&PostParams::default(), &orphan("other-install", "staging"))
        .await
        .unwrap();
    wait_for(
        "the orphan to be removed",
        Duration::from_secs(15),
        || async { h.live("v1", "Service", "ghost").await.is_none() },
    )
    .await;
    assert!(
        h.live("v1", "Service", "other-install").await.is_some(),
        "another installation's object was touched"
    );
    assert!(h.live("v1", "Service", "qwen").await.is_some());
}

#[sqlx::test]
async fn the_worker_writes_only_in_its_projects_namespaces(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    let response = h
        .app
        .post_json(
            "/api/v1/projects",
            &json!({"name": "team-b", "namespace": "models-b"}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    create(&h, "qwen").await;
    let response = h
        .app
        .post_json(
            "/api/v1/projects/team-b/deployments",
            &json!({"name": "llama", "spec": sim_spec()}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    h.wait_applied("qwen", 1).await;
    wait_for("llama applied", Duration::from_secs(20), || async {
        let record: Value = h
            .app
            .get("/api/v1/projects/team-b/deployments/llama")
            .await
            .json()
            .await
            .unwrap();
        record["status"]["observedGeneration"] == 1 && record["status"]["phase"] != "Pending"
    })
    .await;
    h.app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 2}),
        )
        .await;
    h.wait_applied("qwen", 2).await;
    h.app
        .request(Method::DELETE, "/api/v1/projects/team-b/deployments/llama")
        .send()
        .await
        .unwrap();
    wait_for("llama deleted", Duration::from_secs(20), || async {
        h.app
            .get("/api/v1/projects/team-b/deployments/llama")
            .await
            .status()
            == StatusCode::NOT_FOUND
    })
    .await;

    let writes: Vec<_> = h
        .emulator
        .as_ref()
        .unwrap()
        .requests()
        .snapshot()
        .into_iter()
        .filter(|r| {
            !matches!(r.method.as_str(), "GET" | "HEAD")
                && r.client_id.as_deref() == Some("worker-a")
        })
        .collect();
    assert!(writes.len() >= 8, "the worker wrote: {writes:?}");
    for write in &writes {
        let namespace = write
            .path
            .split("/namespaces/")
            .nth(1)
            .and_then(|rest| rest.split('/').next());
        assert!(
            matches!(namespace, Some("team-a" | "models-b")),
            "{} {} is outside the projects' namespaces",
            write.method,
            write.path
        );
    }
}

#[sqlx::test]
async fn a_deleted_projects_namespace_goes_unless_it_was_adopted(pool: PgPool) {
    // No periodic resync in this test: the project's deletion itself must bring the cleanup.
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    let adopted = h
        .app
        .post_json(
            "/api/v1/projects",
            &json!({"name": "legacy", "namespace": "ml-legacy", "adoptNamespace": true}),
        )
        .await;
    assert_eq!(adopted.status(), StatusCode::CREATED);
    create(&h, "qwen").await;
    h.app
        .post_json(
            "/api/v1/projects/legacy/deployments",
            &json!({"name": "old", "spec": sim_spec()}),
        )
        .await;
    h.wait_applied("qwen", 1).await;
    let namespaces: Api<DynamicObject> =
        Api::all_with(h.kube.clone(), &resource_of("v1", "Namespace"));
    wait_for("both namespaces", Duration::from_secs(20), || async {
        namespaces.get_opt("team-a").await.unwrap().is_some()
            && namespaces.get_opt("ml-legacy").await.unwrap().is_some()
    })
    .await;
    for (project, name) in [("team-a", "qwen"), ("legacy", "old")] {
        h.app
            .request(
                Method::DELETE,
                &format!("/api/v1/projects/{project}/deployments/{name}"),
            )
            .send()
            .await
            .unwrap();
        wait_for("the deployment gone", Duration::from_secs(20), || async {
            h.app
                .get(&format!("/api/v1/projects/{project}/deployments/{name}"))
                .await
                .status()
                == StatusCode::NOT_FOUND
        })
        .await;
        let deleted = h
            .app
            .request(Method::DELETE, &format!("/api/v1/projects/{project}"))
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    }
    wait_for(
        "the created namespace to be deleted",
        Duration::from_secs(20),
        || async {
            namespaces
                .get_opt("team-a")
                .await
                .unwrap()
                .is_none_or(|ns| ns.metadata.deletion_timestamp.is_some())
        },
    )
    .await;
    wait_for(
        "the adopted namespace to lose modelplane's labels",
        Duration::from_secs(20),
        || async {
            let ns = namespaces.get_opt("ml-legacy").await.unwrap();
            let ns = ns.expect("the adopted namespace survives");
            assert!(ns.metadata.deletion_timestamp.is_none());
            !ns.metadata
                .labels
                .unwrap_or_default()
                .keys()
                .any(|k| k.contains("modelplane"))
        },
    )
    .await;
}

/// A record whose stored spec does not resolve (stored data no parser would accept) fails
/// with the fields at fault, alone; the worker goes on with every other record. (It used to
/// panic the reconcile; a panic from a bug is still caught per record.)
#[sqlx::test]
async fn a_stored_spec_that_is_not_valid_fails_alone_with_its_fields_and_the_worker_goes_on(
    pool: PgPool,
) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "broken").await;
    h.wait_applied("broken", 1).await;
    let id = h.record_id("broken").await;
    // Written past the API (by hand, or by an older schema): the worker must not trust it.
    sqlx::query(
        "update model_deployment set spec = jsonb_set(spec, '{model,source}', '\"not-a-uri\"'),
                generation = generation + 1 where id = $1",
    )
    .bind(id)
    .execute(&pool)
    .await
    .unwrap();
    h.requeue("broken").await;
    let record = h.wait_applied("broken", 2).await;
    assert_eq!(record["status"]["phase"], "Failed", "{record}");
    let message = record["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("the stored spec is not valid") && message.contains("spec.model.source"),
        "{message}"
    );
    let applied = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Applied")
        .unwrap();
    assert_eq!(applied["reason"], "InvalidSpec");
    // What ran before is left running, not replaced by objects built from a guess.
    assert!(h.live("apps/v1", "Deployment", "broken").await.is_some());
    // The worker is still alive: a new record is applied.
    create(&h, "healthy").await;
    h.wait_applied("healthy", 1).await;
}

/// A route the API server refuses (here one stored before modelplane validated path prefixes
/// as the Gateway API does) is reported with the server's message, never as "not yet".
#[sqlx::test]
async fn a_route_the_api_server_refuses_is_reported_with_its_message(pool: PgPool) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let record = h.store_a_route_kubernetes_refuses("qwen").await;
    assert_eq!(record["status"]["phase"], "Failed", "{record}");
    let message = record["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("Kubernetes rejected the HTTPRoute")
            && message.contains("must not contain '/../'"),
        "{message}"
    );
    let routed = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Routed")
        .unwrap()
        .clone();
    assert_eq!(routed["status"], "False");
    assert_eq!(routed["reason"], "Rejected");
    let timeline: Value = h
        .app
        .get("/api/v1/projects/team-a/deployments/qwen/events")
        .await
        .json()
        .await
        .unwrap();
    assert!(
        timeline["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["message"]
                .as_str()
                .unwrap()
                .contains("Kubernetes rejected the HTTPRoute")),
        "{timeline}"
    );
}

/// The API server stores quantities in canonical form (`0.5` → `500m`, `1.5Gi` → `1536Mi`,
/// an emptyDir `sizeLimit` of `0.5Gi` → `512Mi`) and drops an env var's empty `value`
/// (apimachinery `resource.Quantity` marshalling; `EnvVar.Value` is `omitempty`). None of it
/// is drift: reconciling such a record again writes nothing and records no repair.
#[sqlx::test]
async fn the_servers_canonical_forms_are_not_mistaken_for_drift(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["resources"] = json!({"cpu": "0.5", "memory": "1.5Gi", "sharedMemory": "0.5Gi"});
    spec["storage"] = json!({"cache": {"sizeLimit": "0.5Gi"}});
    spec["engine"]["env"] = json!([{"name": "EMPTY", "value": ""}]);
    create_with(&h, "qwen", spec).await;
    h.wait_applied("qwen", 1).await;
    let live = h.live("apps/v1", "Deployment", "qwen").await.unwrap();
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"], "500m",
        "the emulator stores the canonical form, as a real server does"
    );
    let pool = h.app.pool.clone();
    let idle = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from reconcile_work where run_after <= now()")
            .fetch_one(&pool)
            .await
            .unwrap()
            == 0
    };
    wait_for("an empty queue", Duration::from_secs(20), idle).await;
    let writes = h.writes();
    for _ in 0..3 {
        h.requeue("qwen").await;
        wait_for(
            "the reconcile to be worked off",
            Duration::from_secs(20),
            idle,
        )
        .await;
    }
    assert_eq!(h.writes(), writes, "a canonical form was taken for drift");
    assert!(
        !h.events("qwen").await.iter().any(|k| k == "DriftRepaired"),
        "{:?}",
        h.events("qwen").await
    );
}

/// More than one replica gets a PodDisruptionBudget (one down at a time in a drain); back
/// to one replica, and when the record goes, it is removed.
#[sqlx::test]
async fn several_replicas_get_a_disruption_budget_that_follows_the_scale(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    assert!(
        h.live("policy/v1", "PodDisruptionBudget", "qwen")
            .await
            .is_none()
    );
    let scale = |replicas: i64| {
        let app = &h.app;
        async move {
            app.post_json(
                "/api/v1/projects/team-a/deployments/qwen/scale",
                &json!({"replicas": replicas}),
            )
            .await
        }
    };
    assert_eq!(scale(3).await.status(), StatusCode::OK);
    h.wait_applied("qwen", 2).await;
    let budget = h
        .live("policy/v1", "PodDisruptionBudget", "qwen")
        .await
        .expect("a budget for three replicas");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert_eq!(scale(1).await.status(), StatusCode::OK);
    h.wait_applied("qwen", 3).await;
    wait_for("the budget removed", Duration::from_secs(10), || async {
        h.live("policy/v1", "PodDisruptionBudget", "qwen")
            .await
            .is_none()
    })
    .await;
}
