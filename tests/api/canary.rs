//! The canary endpoints' contract without a worker: what is accepted, what is refused and
//! why, and what a start writes (the ETag moves, no revision), over REST and GraphQL.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, error_fields, expect_problem};

const QWEN: &str = "/api/v1/projects/team-a/deployments/qwen";

async fn app_with_qwen(pool: PgPool) -> TestApp {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    app
}

async fn patch_json(app: &TestApp, path: &str, body: &Value) -> reqwest::Response {
    app.request(reqwest::Method::PATCH, path)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[sqlx::test]
async fn a_canary_is_started_changed_and_aborted_with_its_timeline(pool: PgPool) {
    let app = app_with_qwen(pool).await;
    let before = app.get(QWEN).await;
    let etag = before.headers()["etag"].to_str().unwrap().to_owned();
    let revisions = app.count_rows("deployment_revision").await;

    let response = app
        .post_json(
            &format!("{QWEN}/canary"),
            &json!({"spec": {"engine": {"image": "vllm/vllm-openai:v0.12.0"}}, "replicas": 1,
                    "weight": 10, "header": {"name": "X-Try-New", "value": "yes"}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    // A canary is not the spec: the generation and the ETag stay.
    assert_eq!(response.headers()["etag"].to_str().unwrap(), etag);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["canary"]["weight"], 10);
    // Header names compare case-insensitively: stored lower-case.
    assert_eq!(
        body["canary"]["header"],
        json!({"name": "x-try-new", "value": "yes"})
    );
    assert_eq!(
        body["canary"]["spec"]["engine"]["image"],
        "vllm/vllm-openai:v0.12.0"
    );
    assert_eq!(body["canary"]["promoting"], false);
    assert_eq!(body["canary"]["startedBy"], "token:bootstrap");
    // The stable spec is untouched, and a canary makes no revision.
    assert_eq!(body["spec"]["engine"]["image"], "vllm/vllm-openai:v0.11.0");
    assert_eq!(app.count_rows("deployment_revision").await, revisions);

    // A second start is refused; the weight can be changed.
    let again = app
        .post_json(&format!("{QWEN}/canary"), &json!({"spec": {}, "weight": 5}))
        .await;
    let problem = expect_problem(again, StatusCode::CONFLICT).await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("already has a canary")
    );
    let changed = patch_json(&app, &format!("{QWEN}/canary"), &json!({"weight": 40})).await;
    assert_eq!(changed.status(), StatusCode::OK);
    let body: Value = changed.json().await.unwrap();
    assert_eq!(body["canary"]["weight"], 40);

    let aborted = app
        .post_json(&format!("{QWEN}/canary/abort"), &json!({}))
        .await;
    assert_eq!(aborted.status(), StatusCode::OK);
    assert!(aborted.json::<Value>().await.unwrap()["canary"].is_null());
    let events: Value = app
        .get(&format!("{QWEN}/events"))
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
    assert_eq!(
        kinds,
        ["Created", "CanaryStarted", "CanaryChanged", "CanaryAborted"]
    );
    let started = &events["items"][1]["message"];
    assert_eq!(events["items"][1]["actor"], "token:bootstrap");
    assert!(
        started.as_str().unwrap().contains("weight 10%"),
        "{started}"
    );
}

#[sqlx::test]
async fn bad_canary_requests_are_refused_naming_the_field_and_write_nothing(pool: PgPool) {
    let app = app_with_qwen(pool).await;
    let canary = format!("{QWEN}/canary");
    let cases = [
        (json!({"spec": {}, "weight": 100}), "weight"),
        (json!({"spec": {}, "weight": -1}), "weight"),
        (json!({"weight": 10}), "spec"),
        (json!({"spec": {}, "revision": 1, "weight": 10}), "spec"),
        (json!({"revision": 7, "weight": 10}), "revision"),
        (
            json!({"spec": {"routing": {"pathPrefix": "/elsewhere"}}, "weight": 10}),
            "spec.routing",
        ),
        (
            json!({"spec": {"replicas": 0}, "weight": 10}),
            "spec.replicas",
        ),
        (
            json!({"spec": {"engine": {"image": "not an image"}}, "weight": 10}),
            "spec.engine.image",
        ),
        (
            json!({"spec": {}, "weight": 10, "header": {"name": "bad header", "value": "x"}}),
            "header.name",
        ),
        (
            json!({"spec": {}, "weight": 10, "header": {"name": "x-a", "value": ""}}),
            "header.value",
        ),
    ];
    for (body, field) in cases {
        let problem = expect_problem(
            app.post_json(&canary, &body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert!(
            error_fields(&problem).iter().any(|f| f == field),
            "{body} should name {field}: {problem}"
        );
    }
    let record: Value = app.get(QWEN).await.json().await.unwrap();
    assert!(record["canary"].is_null());
    assert_eq!(record["generation"], 1);

    // Without a canary there is nothing to change, promote or abort.
    for response in [
        patch_json(&app, &canary, &json!({"weight": 5})).await,
        app.post_json(&format!("{canary}/promote"), &json!({}))
            .await,
        app.post_json(&format!("{canary}/abort"), &json!({})).await,
    ] {
        let problem = expect_problem(response, StatusCode::NOT_FOUND).await;
        assert!(
            problem["detail"].as_str().unwrap().contains("canary"),
            "{problem}"
        );
    }

    // Not Ready (no worker runs here): promotion is refused with the reason.
    let started = app
        .post_json(&canary, &json!({"spec": {}, "weight": 10}))
        .await;
    assert_eq!(started.status(), StatusCode::CREATED);
    let problem = expect_problem(
        app.post_json(&format!("{canary}/promote"), &json!({}))
            .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("not been reported on yet"),
        "{problem}"
    );

    // A deployment being deleted takes no canary change.
    let deleted = app
        .request(reqwest::Method::DELETE, QWEN)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::ACCEPTED);
    expect_problem(
        patch_json(&app, &canary, &json!({"weight": 5})).await,
        StatusCode::CONFLICT,
    )
    .await;
}

#[sqlx::test]
async fn names_ending_in_canary_are_reserved(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let problem = expect_problem(
        app.create_deployment("team-a", "qwen-canary").await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["name"]);
}

#[sqlx::test]
async fn graphql_starts_and_reads_a_canary(pool: PgPool) {
    let app = app_with_qwen(pool).await;
    let query = r#"mutation { startCanary(project: "team-a", name: "qwen", spec: {engine: {image: "vllm/vllm-openai:v0.12.0"}}, weight: 25) {
        generation canary { weight headerName headerValue promoting spec status { phase } } } }"#;
    let body: Value = app
        .post_json("/graphql", &json!({"query": query}))
        .await
        .json()
        .await
        .unwrap();
    assert!(body["errors"].is_null(), "{body}");
    let canary = &body["data"]["startCanary"]["canary"];
    assert_eq!(canary["weight"], 25);
    assert_eq!(canary["headerName"], "x-modelplane-canary");
    assert_eq!(canary["headerValue"], "true");
    assert_eq!(
        canary["spec"]["engine"]["image"],
        "vllm/vllm-openai:v0.12.0"
    );
    assert!(canary["status"].is_null());

    let query =
        r#"mutation { updateCanary(project: "team-a", name: "qwen", weight: 101) { generation } }"#;
    let body: Value = app
        .post_json("/graphql", &json!({"query": query}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["errors"][0]["extensions"]["errors"][0]["field"], "weight",
        "{body}"
    );
}

#[sqlx::test]
async fn inference_pool_settings_are_checked_and_do_not_mix_with_a_canary(pool: PgPool) {
    let app = app_with_qwen(pool).await;
    for (routing, field) in [
        (json!({"inferencePool": {}}), "spec.routing.inferencePool"),
        (
            json!({"mode": "InferencePool", "inferencePool": {"scorers": {"queue": 101}}}),
            "spec.routing.inferencePool.scorers.queue",
        ),
        (
            json!({"mode": "InferencePool", "inferencePool": {"scorers": {"queue": 0, "kvCache": 0, "prefixCache": 0}}}),
            "spec.routing.inferencePool.scorers",
        ),
        (json!({"mode": "Pool"}), "spec.routing.mode"),
    ] {
        let response = app
            .patch(QWEN, &json!({"spec": {"routing": routing}}), None)
            .await;
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(
            error_fields(&problem).iter().any(|f| f == field),
            "{routing} should name {field}: {problem}"
        );
    }

    // A canary needs weighted Service backends: not in InferencePool mode, and the mode
    // cannot change under a canary.
    let started = app
        .post_json(
            &format!("{QWEN}/canary"),
            &json!({"spec": {}, "weight": 10}),
        )
        .await;
    assert_eq!(started.status(), StatusCode::CREATED);
    let problem = expect_problem(
        app.patch(
            QWEN,
            &json!({"spec": {"routing": {"mode": "InferencePool"}}}),
            None,
        )
        .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert!(
        problem["detail"].as_str().unwrap().contains("canary"),
        "{problem}"
    );
    let aborted = app
        .post_json(&format!("{QWEN}/canary/abort"), &json!({}))
        .await;
    assert_eq!(aborted.status(), StatusCode::OK);
    let pooled = app
        .patch(
            QWEN,
            &json!({"spec": {"routing": {"mode": "InferencePool"}}}),
            None,
        )
        .await;
    assert_eq!(pooled.status(), StatusCode::OK);
    let problem = expect_problem(
        app.post_json(
            &format!("{QWEN}/canary"),
            &json!({"spec": {}, "weight": 10}),
        )
        .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("InferencePool"),
        "{problem}"
    );
}

#[sqlx::test]
async fn a_canarys_gpus_count_in_the_projects_usage(pool: PgPool) {
    let app = app_with_qwen(pool).await;
    let usage = || async {
        let body: Value = app
            .post_json(
                "/graphql",
                &json!({"query": r#"{ gpus(project: "team-a") { requested inUse } }"#}),
            )
            .await
            .json()
            .await
            .unwrap();
        body["data"]["gpus"]["requested"].as_i64().unwrap()
    };
    // valid_spec: one replica with one GPU.
    assert_eq!(usage().await, 1);
    let started = app
        .post_json(
            &format!("{QWEN}/canary"),
            &json!({"spec": {"resources": {"gpu": {"count": 2}}}, "replicas": 2, "weight": 10}),
        )
        .await;
    assert_eq!(started.status(), StatusCode::CREATED);
    assert_eq!(usage().await, 1 + 2 * 2);
}

/// Leaving InferencePool mode is one field: `{"routing": {"mode": "Service"}}` drops the pool
/// settings with it (it used to be refused with `spec.routing.inferencePool: only with mode:
/// InferencePool` until `inferencePool: null` was sent too). Naming the settings while
/// leaving is still refused, since they would not apply.
#[sqlx::test]
async fn switching_the_mode_away_from_inference_pool_drops_its_settings(pool: PgPool) {
    let app = app_with_qwen(pool).await;
    let into_pool = app
        .patch(
            QWEN,
            &json!({"spec": {"routing": {"mode": "InferencePool",
                "inferencePool": {"scorers": {"queue": 2, "kvCache": 1, "prefixCache": 1}}}}}),
            None,
        )
        .await;
    assert_eq!(into_pool.status(), StatusCode::OK);
    let out = app
        .patch(
            QWEN,
            &json!({"spec": {"routing": {"mode": "Service"}}}),
            None,
        )
        .await;
    assert_eq!(
        out.status(),
        StatusCode::OK,
        "{}",
        out.text().await.unwrap()
    );
    let record: Value = app.get(QWEN).await.json().await.unwrap();
    assert_eq!(record["spec"]["routing"]["mode"], "Service");
    assert!(
        record["spec"]["routing"]["inferencePool"].is_null(),
        "{record}"
    );
    let both = app
        .patch(
            QWEN,
            &json!({"spec": {"routing": {"mode": "Service", "inferencePool": {"scorers": {"queue": 1}}}}}),
            None,
        )
        .await;
    let problem = expect_problem(both, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert!(
        error_fields(&problem)
            .iter()
            .any(|f| f == "spec.routing.inferencePool")
    );
}
