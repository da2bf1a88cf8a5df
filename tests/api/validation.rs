//! Each validation rule with a bad value: 422, the field path, and nothing written.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, error_fields, expect_problem, valid_spec};

/// (name, a merge patch applied to the valid spec, the field the error must name)
fn cases() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        (
            "qwen",
            json!({"model": {"source": "Qwen/Qwen2.5"}}),
            "spec.model.source",
        ),
        (
            "qwen",
            json!({"model": {"source": "ftp://host/model"}}),
            "spec.model.source",
        ),
        (
            "qwen",
            json!({"model": {"source": "pvc://Bad_Claim/x"}}),
            "spec.model.source",
        ),
        (
            "qwen",
            json!({"model": {"servedName": "has space"}}),
            "spec.model.servedName",
        ),
        (
            "qwen",
            json!({"model": {"secretRef": {"name": "Not_Valid", "key": "token"}}}),
            "spec.model.secretRef.name",
        ),
        (
            "qwen",
            json!({"engine": {"kind": "triton"}}),
            "spec.engine.kind",
        ),
        (
            "qwen",
            json!({"engine": {"image": "Not An Image"}}),
            "spec.engine.image",
        ),
        ("qwen", json!({"engine": {"port": 0}}), "spec.engine.port"),
        (
            "qwen",
            json!({"engine": {"port": 65536}}),
            "spec.engine.port",
        ),
        (
            "qwen",
            json!({"engine": {"port": "8000"}}),
            "spec.engine.port",
        ),
        (
            "qwen",
            json!({"engine": {"env": [{"name": "1BAD", "value": "x"}]}}),
            "spec.engine.env[0].name",
        ),
        (
            "qwen",
            json!({"engine": {"env": [{"name": "A", "value": "x"}, {"name": "A", "value": "y"}]}}),
            "spec.engine.env[1].name",
        ),
        (
            "qwen",
            json!({"engine": {"maxModelLen": 0}}),
            "spec.engine.maxModelLen",
        ),
        (
            "qwen",
            json!({"engine": {"tensorParallelSize": 0}}),
            "spec.engine.tensorParallelSize",
        ),
        (
            "qwen",
            json!({"engine": {"tensorParallelSize": 2}}),
            "spec.resources.gpu.count",
        ),
        ("qwen", json!({"replicas": -1}), "spec.replicas"),
        ("qwen", json!({"replicas": 21}), "spec.replicas"),
        (
            "qwen",
            json!({"resources": {"cpu": "four"}}),
            "spec.resources.cpu",
        ),
        (
            "qwen",
            json!({"resources": {"memory": "16GB"}}),
            "spec.resources.memory",
        ),
        (
            "qwen",
            json!({"resources": {"sharedMemory": "-1Gi"}}),
            "spec.resources.sharedMemory",
        ),
        (
            "qwen",
            json!({"resources": {"gpu": {"count": 65}}}),
            "spec.resources.gpu.count",
        ),
        (
            "qwen",
            json!({"resources": {"gpu": {"count": -1}}}),
            "spec.resources.gpu.count",
        ),
        (
            "qwen",
            json!({"resources": {"gpu": {"resourceName": "gpu"}}}),
            "spec.resources.gpu.resourceName",
        ),
        (
            "qwen",
            json!({"resources": {"gpu": {"product": "NVIDIA A100"}}}),
            "spec.resources.gpu.product",
        ),
        (
            "qwen",
            json!({"scheduling": {"nodeSelector": {"bad key": "x"}}}),
            "spec.scheduling.nodeSelector.bad key",
        ),
        (
            "qwen",
            json!({"scheduling": {"tolerations": [{"key": "a", "operator": "Sometimes"}]}}),
            "spec.scheduling.tolerations[0].operator",
        ),
        (
            "qwen",
            json!({"scheduling": {"tolerations": [{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}]}}),
            "spec.scheduling.tolerations[0].tolerationSeconds",
        ),
        (
            "qwen",
            json!({"scheduling": {"priorityClassName": "High_Priority"}}),
            "spec.scheduling.priorityClassName",
        ),
        (
            "qwen",
            json!({"storage": {"cache": {"sizeLimit": "10Gi", "claimName": "cache"}}}),
            "spec.storage.cache",
        ),
        (
            "qwen",
            json!({"storage": {"cache": {"sizeLimit": "lots"}}}),
            "spec.storage.cache.sizeLimit",
        ),
        (
            "qwen",
            json!({"routing": {"gateway": "only-a-name"}}),
            "spec.routing.gateway",
        ),
        (
            "qwen",
            json!({"routing": {"hostname": "not a host"}}),
            "spec.routing.hostname",
        ),
        (
            "qwen",
            json!({"routing": {"pathPrefix": "no-slash"}}),
            "spec.routing.pathPrefix",
        ),
        (
            "qwen",
            json!({"probes": {"startupTimeoutSeconds": 0}}),
            "spec.probes.startupTimeoutSeconds",
        ),
        (
            "qwen",
            json!({"security": {"profile": "privileged"}}),
            "spec.security.profile",
        ),
        (
            "qwen",
            json!({"rollout": {"maxSurge": 0, "maxUnavailable": "0%"}}),
            "spec.rollout.maxUnavailable",
        ),
        (
            "qwen",
            json!({"rollout": {"maxSurge": "150%"}}),
            "spec.rollout.maxSurge",
        ),
        (
            "qwen",
            json!({"shutdown": {"drainSeconds": 30, "gracePeriodSeconds": 20}}),
            "spec.shutdown.gracePeriodSeconds",
        ),
        (
            "qwen",
            json!({"engine": {"kind": "vllm", "args": ["--port", "9000"]}}),
            "spec.engine.args[0]",
        ),
        (
            "qwen",
            json!({"engine": {"kind": "vllm", "args": ["--port=9000"], "port": 8000}}),
            "spec.engine.args[0]",
        ),
        (
            "qwen",
            json!({"engine": {"kind": "vllm", "image": null, "tensorParallelSize": null}, "resources": {"gpu": {"count": 0}}}),
            "spec.resources.gpu.count",
        ),
        (
            "qwen",
            json!({"engine": {"kind": "vllm", "env": [{"name": "HF_TOKEN", "value": "hf_abc"}]}}),
            "spec.engine.env[0].value",
        ),
        (
            "qwen",
            json!({"engine": {"kind": "vllm", "env": [{"name": "OPENAI_API_KEY", "value": "sk-x"}]}}),
            "spec.engine.env[0].value",
        ),
        (
            "qwen",
            json!({"probes": {"healthPath": "health"}}),
            "spec.probes.healthPath",
        ),
        (
            "qwen",
            json!({"labels": {"modelplane.io/owner": "me"}}),
            "spec.labels.modelplane.io/owner",
        ),
        (
            "qwen",
            json!({"labels": {"app.kubernetes.io/instance": "x"}}),
            "spec.labels.app.kubernetes.io/instance",
        ),
        (
            "qwen",
            json!({"labels": {"team": "has space"}}),
            "spec.labels.team",
        ),
        (
            "qwen",
            json!({"annotations": {"modelplane.io/restart": "x"}}),
            "spec.annotations.modelplane.io/restart",
        ),
        (
            "qwen",
            json!({"autoscaling": {"minReplicas": 3, "maxReplicas": 2, "target": {"metric": "waitingPerReplica", "value": 4}}}),
            "spec.autoscaling.maxReplicas",
        ),
        (
            "qwen",
            json!({"autoscaling": {"minReplicas": 1, "maxReplicas": 2, "target": {"metric": "queue", "value": 4}}}),
            "spec.autoscaling.target.metric",
        ),
        (
            "qwen",
            json!({"autoscaling": {"minReplicas": 1, "maxReplicas": 2, "target": {"metric": "kvCacheUsage", "value": 80}}}),
            "spec.autoscaling.target.value",
        ),
        (
            "qwen",
            json!({"autoscaling": {"minReplicas": 1, "maxReplicas": 2, "target": {"metric": "runningPerReplica", "value": 0}}}),
            "spec.autoscaling.target.value",
        ),
        (
            "qwen",
            json!({"autoscaling": {"minReplicas": 1, "maxReplicas": 4, "target": {"metric": "waitingPerReplica", "value": 4}, "scaleDownDelaySeconds": -1}}),
            "spec.autoscaling.scaleDownDelaySeconds",
        ),
        (
            "qwen",
            json!({"autoscaling": {"minReplicas": 1, "maxReplicas": 4, "target": {"metric": "waitingPerReplica", "value": 4}, "scaleToZeroAfterSeconds": 300}}),
            "spec.autoscaling.scaleToZeroAfterSeconds",
        ),
        (
            "qwen",
            json!({"autoscaling": {"minReplicas": 0, "maxReplicas": 4, "target": {"metric": "waitingPerReplica", "value": 4}, "activationTimeoutSeconds": 0}}),
            "spec.autoscaling.activationTimeoutSeconds",
        ),
        ("qwen-activator", json!({}), "name"),
        ("qwen-group", json!({}), "name"),
        (
            "qwen",
            json!({"nodesPerReplica": 2}),
            "spec.nodesPerReplica",
        ),
        (
            "qwen",
            json!({"nodesPerReplica": 2, "engine": {"tensorParallelSize": null}, "resources": {"gpu": {"count": 2}}}),
            "spec.engine.tensorParallelSize",
        ),
        (
            "qwen",
            json!({"nodesPerReplica": 2, "engine": {"tensorParallelSize": 4, "args": ["--headless"]}, "resources": {"gpu": {"count": 2}}}),
            "spec.engine.args[0]",
        ),
        (
            "qwen",
            json!({"nodesPerReplica": 2, "engine": {"tensorParallelSize": 4}, "resources": {"gpu": {"count": 4}}}),
            "spec.resources.gpu.count",
        ),
        (
            "qwen",
            json!({"replicas": 5, "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "target": {"metric": "waitingPerReplica", "value": 4}}}),
            "spec.replicas",
        ),
        (
            "qwen",
            json!({"autoscaling": {"minReplicas": 1, "maxReplicas": 4}}),
            "spec.autoscaling.target",
        ),
        ("qwen", json!({"specVersion": 7}), "spec.specVersion"),
        ("qwen", json!({"unknownField": true}), "spec.unknownField"),
        ("2qwen", json!({}), "name"),
        ("Qwen", json!({}), "name"),
        (
            "a-name-that-is-much-too-long-for-a-deployment-x",
            json!({}),
            "name",
        ),
    ]
}

#[sqlx::test]
async fn each_rule_names_its_field_and_nothing_is_written(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    for (name, patch, field) in cases() {
        let mut spec = valid_spec();
        json_patch::merge(&mut spec, &patch);
        let response = app
            .post_json(
                "/api/v1/projects/team-a/deployments",
                &json!({"name": name, "spec": spec}),
            )
            .await;
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(error_fields(&problem), [field], "patch {patch} for {name}");
    }
    assert_eq!(app.count_rows("model_deployment").await, 0);
    assert_eq!(app.count_rows("deployment_event").await, 0);
    assert_eq!(app.count_rows("reconcile_work").await, 0);
}

#[sqlx::test]
async fn an_invalid_patch_changes_nothing(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let path = "/api/v1/projects/team-a/deployments/qwen";
    for (_, patch, field) in cases().into_iter().filter(|(name, ..)| *name == "qwen") {
        let problem = expect_problem(
            app.patch(path, &json!({"spec": patch}), None).await,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(error_fields(&problem), [field], "patch {patch}");
    }
    let problem = expect_problem(
        app.patch(path, &json!({"status": {"phase": "Ready"}}), None)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["status"]);
    let body: Value = app.get(path).await.json().await.unwrap();
    assert_eq!(body["generation"], 1);
    assert_eq!(app.count_rows("deployment_revision").await, 1);
}

#[sqlx::test]
async fn several_problems_are_reported_at_once(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let mut spec = valid_spec();
    json_patch::merge(
        &mut spec,
        &json!({"replicas": -1, "resources": {"cpu": "x"}, "routing": {"pathPrefix": "x"}}),
    );
    let problem = expect_problem(
        app.post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": "Bad", "spec": spec}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    let mut fields = error_fields(&problem);
    fields.sort();
    assert_eq!(
        fields,
        [
            "name",
            "spec.replicas",
            "spec.resources.cpu",
            "spec.routing.pathPrefix"
        ]
    );
}

/// Without an activator (no MODELPLANE_ACTIVATOR_PORT and addresses), a deployment at zero
/// would answer 503: `minReplicas: 0` is refused, naming the field and what is missing.
#[sqlx::test]
async fn scaling_to_zero_is_refused_where_no_activator_runs(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        crate::common::Options {
            scale_to_zero: false,
            ..crate::common::Options::default()
        },
    )
    .await;
    app.create_project("team-a").await;
    let mut spec = valid_spec();
    spec["autoscaling"] = json!({"minReplicas": 0, "maxReplicas": 2,
                                 "target": {"metric": "waitingPerReplica", "value": 4}});
    let response = app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": "qwen", "spec": spec}),
        )
        .await;
    let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(
        problem["errors"][0]["field"], "spec.autoscaling.minReplicas",
        "{problem}"
    );
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("this installation does not run"),
        "{problem}"
    );
}
