//! Project quotas: platform admins set them; every API that can ask for more replicas or
//! GPUs (create, scale, patch, rollback, canary; REST and GraphQL) is refused past them
//! with the numbers, and nothing is written. Quotas count the specs (replicas x GPUs per
//! replica), so no cluster is needed here.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{ADMIN_TOKEN, TestApp, error_fields, expect_problem};

/// A spec asking for `gpus` GPUs per replica and `replicas` replicas (no product, so every
/// `nvidia.com/gpu` quota counts it).
fn gpu_spec(gpus: i64, replicas: i64) -> Value {
    json!({
        "model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"},
        "engine": {"kind": "vllm"},
        "replicas": replicas,
        "resources": {"gpu": {"count": gpus}}
    })
}

async fn set_quota(app: &TestApp, project: &str, quota: Value) -> Value {
    let response = app
        .request(Method::PUT, &format!("/api/v1/projects/{project}/quota"))
        .json(&quota)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

async fn create(app: &TestApp, name: &str, spec: Value) -> reqwest::Response {
    app.post_json(
        "/api/v1/projects/team-a/deployments",
        &json!({"name": name, "spec": spec}),
    )
    .await
}

#[sqlx::test]
async fn an_over_quota_scale_is_refused_with_the_numbers_and_nothing_written(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let quota = set_quota(
        &app,
        "team-a",
        json!({"replicas": 10, "gpus": [{"resourceName": "nvidia.com/gpu", "limit": 8}]}),
    )
    .await;
    assert_eq!(
        quota["gpus"][0],
        json!({"resourceName": "nvidia.com/gpu", "product": null, "limit": 8, "used": 0})
    );

    assert_eq!(
        create(&app, "a", gpu_spec(2, 2)).await.status(),
        StatusCode::CREATED
    );
    let events_before = app.count_rows("deployment_event").await;
    let revisions_before = app.count_rows("deployment_revision").await;

    // 2 x 2 in use; scaling to 5 asks for 10 of 8.
    let response = app
        .post_json(
            "/api/v1/projects/team-a/deployments/a/scale",
            &json!({"replicas": 5}),
        )
        .await;
    let problem = expect_problem(response, StatusCode::CONFLICT).await;
    assert_eq!(problem["type"], "urn:modelplane:problem:quota-exceeded");
    assert_eq!(
        problem["quota"],
        json!({"name": "nvidia.com/gpu", "limit": 8, "used": 4, "requested": 10})
    );
    // The GPUs past the quota come from the replicas asked for: the scale body's field.
    assert_eq!(error_fields(&problem), ["replicas"]);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("nvidia.com/gpu quota: 4 of 8 in use"),
        "{problem}"
    );
    // Nothing written: same generation, no revision, no timeline entry.
    let record: Value = app
        .get("/api/v1/projects/team-a/deployments/a")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            record["generation"].as_i64(),
            record["spec"]["replicas"].as_i64()
        ),
        (Some(1), Some(2))
    );
    assert_eq!(app.count_rows("deployment_event").await, events_before);
    assert_eq!(
        app.count_rows("deployment_revision").await,
        revisions_before
    );

    // A patch and a new deployment are held to the same quota; within it they pass.
    let patch = app
        .patch(
            "/api/v1/projects/team-a/deployments/a",
            &json!({"spec": {"resources": {"gpu": {"count": 8}}}}),
            None,
        )
        .await;
    expect_problem(patch, StatusCode::CONFLICT).await;
    let problem = expect_problem(
        create(&app, "b", gpu_spec(4, 2)).await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(problem["quota"]["requested"], 12);
    assert_eq!(
        create(&app, "b", gpu_spec(4, 1)).await.status(),
        StatusCode::CREATED
    );

    // The usage on the project.
    let quota: Value = app
        .get("/api/v1/projects/team-a/quota")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(quota["gpus"][0]["used"], 8);
    assert_eq!(quota["replicas"], json!({"limit": 10, "used": 3}));
    assert_eq!(
        quota["requested"],
        json!([{"resourceName": "nvidia.com/gpu", "product": null, "gpus": 8}])
    );

    // Scaling down is always allowed, even above a lowered quota.
    set_quota(
        &app,
        "team-a",
        json!({"gpus": [{"resourceName": "nvidia.com/gpu", "limit": 2}]}),
    )
    .await;
    let down = app
        .post_json(
            "/api/v1/projects/team-a/deployments/a/scale",
            &json!({"replicas": 1}),
        )
        .await;
    assert_eq!(down.status(), StatusCode::OK);

    // Revoking the quota allows what it refused.
    let removed = app
        .request(Method::DELETE, "/api/v1/projects/team-a/quota")
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::NO_CONTENT);
    let up = app
        .post_json(
            "/api/v1/projects/team-a/deployments/a/scale",
            &json!({"replicas": 5}),
        )
        .await;
    assert_eq!(up.status(), StatusCode::OK);
    let quota: Value = app
        .get("/api/v1/projects/team-a/quota")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(quota["gpus"], json!([]));
    assert_eq!(quota["replicas"]["limit"], Value::Null);

    // The audit log tells who set and removed it.
    let audit: Value = app
        .get("/api/v1/projects/team-a/audit")
        .await
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"QuotaSet") && kinds.contains(&"QuotaRemoved"),
        "{kinds:?}"
    );
}

#[sqlx::test]
async fn a_product_quota_counts_only_that_product_and_replicas_have_their_own(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    set_quota(
        &app,
        "team-a",
        json!({"replicas": 3, "gpus": [{"resourceName": "nvidia.com/gpu", "product": "NVIDIA-H100-80GB-HBM3", "limit": 1}]}),
    )
    .await;
    let mut a100 = gpu_spec(4, 2);
    a100["resources"]["gpu"]["product"] = json!("NVIDIA-A100-SXM4-80GB");
    assert_eq!(create(&app, "a", a100).await.status(), StatusCode::CREATED);
    let mut h100 = gpu_spec(2, 1);
    h100["resources"]["gpu"]["product"] = json!("NVIDIA-H100-80GB-HBM3");
    let problem = expect_problem(create(&app, "h", h100).await, StatusCode::CONFLICT).await;
    assert_eq!(
        problem["quota"]["name"],
        "nvidia.com/gpu (NVIDIA-H100-80GB-HBM3)"
    );
    // Two replicas more than the three allowed.
    let problem = expect_problem(
        create(&app, "c", json!({"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"kind": "sim"}, "replicas": 2})).await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(
        problem["quota"],
        json!({"name": "replicas", "limit": 3, "used": 2, "requested": 4})
    );
    assert_eq!(error_fields(&problem), ["spec.replicas"]);
}

#[sqlx::test]
async fn a_canary_and_a_rollback_count_against_the_quota(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    assert_eq!(
        create(&app, "a", gpu_spec(1, 2)).await.status(),
        StatusCode::CREATED
    );
    let scaled = app
        .post_json(
            "/api/v1/projects/team-a/deployments/a/scale",
            &json!({"replicas": 4}),
        )
        .await;
    assert_eq!(scaled.status(), StatusCode::OK);
    set_quota(
        &app,
        "team-a",
        json!({"gpus": [{"resourceName": "nvidia.com/gpu", "limit": 5}]}),
    )
    .await;

    // A canary of 2 more GPU replicas: 4 + 2 > 5.
    let canary = app
        .post_json(
            "/api/v1/projects/team-a/deployments/a/canary",
            &json!({"spec": {"engine": {"args": ["--max-num-seqs=8"]}}, "replicas": 2, "weight": 10}),
        )
        .await;
    let problem = expect_problem(canary, StatusCode::CONFLICT).await;
    assert_eq!(problem["quota"]["requested"], 6);
    let canary = app
        .post_json(
            "/api/v1/projects/team-a/deployments/a/canary",
            &json!({"spec": {"engine": {"args": ["--max-num-seqs=8"]}}, "replicas": 1, "weight": 10}),
        )
        .await;
    assert_eq!(canary.status(), StatusCode::CREATED);
    let abort = app
        .post_json(
            "/api/v1/projects/team-a/deployments/a/canary/abort",
            &json!({}),
        )
        .await;
    assert_eq!(abort.status(), StatusCode::OK);

    // Revision 1 ran 2 replicas; a rollback naming 6 asks for 6 GPUs.
    let rollback = app
        .post_json(
            "/api/v1/projects/team-a/deployments/a/rollback",
            &json!({"revision": 1, "replicas": 6}),
        )
        .await;
    let problem = expect_problem(rollback, StatusCode::CONFLICT).await;
    assert_eq!(problem["quota"]["requested"], 6);
}

#[sqlx::test]
async fn concurrent_creates_cannot_both_fit_in_the_last_of_a_quota(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    set_quota(
        &app,
        "team-a",
        json!({"gpus": [{"resourceName": "nvidia.com/gpu", "limit": 8}]}),
    )
    .await;
    let attempts = (0..6).map(|i| {
        let app = &app;
        async move { create(app, &format!("d{i}"), gpu_spec(4, 1)).await.status() }
    });
    let statuses = futures::future::join_all(attempts).await;
    let created = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::CONFLICT)
        .count();
    assert_eq!((created, refused), (2, 4), "{statuses:?}");
    let quota: Value = app
        .get("/api/v1/projects/team-a/quota")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(quota["gpus"][0]["used"], 8);
}

#[sqlx::test]
async fn only_platform_admins_set_quotas_and_members_read_them(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let admin = app.token_for("team-a", "project-admin", "admin").await;
    let viewer = app.token_for("team-a", "viewer", "viewer").await;
    let body = json!({"gpus": [{"resourceName": "nvidia.com/gpu", "limit": 64}]});
    let refused = app
        .request_as(Some(&admin), Method::PUT, "/api/v1/projects/team-a/quota")
        .json(&body)
        .send()
        .await
        .unwrap();
    expect_problem(refused, StatusCode::FORBIDDEN).await;
    let removed = app
        .request_as(
            Some(&admin),
            Method::DELETE,
            "/api/v1/projects/team-a/quota",
        )
        .send()
        .await
        .unwrap();
    expect_problem(removed, StatusCode::FORBIDDEN).await;
    // A caller with no role on the project is told it does not exist, as everywhere.
    app.create_project("team-b").await;
    let outsider = app.token_for("team-b", "outsider", "admin").await;
    for method in [Method::PUT, Method::DELETE] {
        let response = app
            .request_as(
                Some(&outsider),
                method.clone(),
                "/api/v1/projects/team-a/quota",
            )
            .json(&body)
            .send()
            .await
            .unwrap();
        expect_problem(response, StatusCode::NOT_FOUND).await;
    }
    let read = app
        .request_as(Some(&viewer), Method::GET, "/api/v1/projects/team-a/quota")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    // GPU-hours are for project admins.
    let usage = app
        .request_as(Some(&viewer), Method::GET, "/api/v1/projects/team-a/usage")
        .send()
        .await
        .unwrap();
    expect_problem(usage, StatusCode::FORBIDDEN).await;
    // Bad input names every field.
    let bad = app
        .request(Method::PUT, "/api/v1/projects/team-a/quota")
        .json(&json!({"replicas": -1, "gpus": [{"resourceName": "gpu", "limit": 1}]}))
        .send()
        .await
        .unwrap();
    let problem = expect_problem(bad, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(error_fields(&problem), ["replicas", "gpus[0].resourceName"]);
}

#[sqlx::test]
async fn graphql_sets_reads_and_enforces_quotas(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let gql = |query: &'static str, variables: Value| {
        let app = &app;
        async move {
            app.request_as(Some(ADMIN_TOKEN), Method::POST, "/graphql")
                .json(&json!({"query": query, "variables": variables}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let set = gql(
        "mutation { setQuota(project: \"team-a\", quota: {replicas: 4, gpus: [{resourceName: \"nvidia.com/gpu\", limit: 2}]}) { replicas { limit used } gpus { limit used } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        set["data"]["setQuota"]["gpus"],
        json!([{"limit": 2, "used": 0}])
    );
    let refused = gql(
        "mutation($spec: JSON!) { createDeployment(project: \"team-a\", name: \"big\", spec: $spec) { name } }",
        json!({"spec": gpu_spec(1, 3)}),
    )
    .await;
    let error = &refused["errors"][0]["extensions"];
    assert_eq!(error["code"], "QUOTA_EXCEEDED");
    assert_eq!(
        (error["limit"].as_i64(), error["requested"].as_i64()),
        (Some(2), Some(3))
    );
    assert_eq!(error["errors"][0]["field"], "spec.resources.gpu.count");
    let read = gql(
        "{ project(name: \"team-a\") { quota { replicas { limit used } gpus { resourceName used } } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        read["data"]["project"]["quota"]["replicas"],
        json!({"limit": 4, "used": 0}),
        "{read}"
    );
    let deleted = gql("mutation { deleteQuota(project: \"team-a\") }", json!({})).await;
    assert_eq!(deleted["data"]["deleteQuota"], "team-a");
}
