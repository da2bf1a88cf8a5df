use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, error_fields, expect_problem, valid_spec};

const QWEN: &str = "/api/v1/projects/team-a/deployments/qwen";

async fn app_with_qwen(pool: PgPool) -> (TestApp, String) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let response = app.create_deployment("team-a", "qwen").await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    (app, etag)
}

async fn json_of(response: reqwest::Response, status: StatusCode) -> Value {
    assert_eq!(response.status(), status);
    response.json().await.unwrap()
}

#[sqlx::test]
async fn create_returns_201_with_location_etag_and_a_pending_record(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let response = app.create_deployment("team-a", "qwen").await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(response.headers()["location"], QWEN);
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["project"], "team-a");
    assert_eq!(body["generation"], 1);
    assert_eq!(body["status"]["phase"], "Pending");
    assert_eq!(body["spec"]["specVersion"], 1);
    assert_eq!(
        body["spec"]["model"]["servedName"], "qwen",
        "defaults to the name"
    );
    assert_eq!(body["spec"]["engine"]["port"], 8000);
    assert_eq!(body["spec"]["resources"]["gpu"]["count"], 1);

    let got = app.get(QWEN).await;
    assert_eq!(got.headers()["etag"].to_str().unwrap(), etag);
    assert_eq!(json_of(got, StatusCode::OK).await, body);

    // The worker's queue has the record, and the timeline says who created it.
    let queued: i64 = sqlx::query_scalar("select count(*) from reconcile_work")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(queued, 1);
    let events = json_of(app.get(&format!("{QWEN}/events")).await, StatusCode::OK).await;
    assert_eq!(events["items"][0]["kind"], "Created");
    assert_eq!(events["items"][0]["actor"], "token:bootstrap");
}

#[sqlx::test]
async fn a_duplicate_name_is_a_409(pool: PgPool) {
    let (app, _) = app_with_qwen(pool).await;
    let problem = expect_problem(
        app.create_deployment("team-a", "qwen").await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(error_fields(&problem), ["name"]);
    assert_eq!(app.count_rows("model_deployment").await, 1);
}

#[sqlx::test]
async fn an_idempotent_retry_returns_the_original_and_a_changed_body_is_a_422(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let body = json!({"name": "qwen", "spec": valid_spec()});
    let post = |body: Value, key: &'static str| {
        app.request(Method::POST, "/api/v1/projects/team-a/deployments")
            .header("idempotency-key", key)
            .json(&body)
            .send()
    };
    let first = post(body.clone(), "key-1").await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    let retry = post(body.clone(), "key-1").await.unwrap();
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.json::<Value>().await.unwrap(), first);
    assert_eq!(app.count_rows("model_deployment").await, 1);

    let mut changed = body.clone();
    changed["spec"]["replicas"] = json!(3);
    let problem = expect_problem(
        post(changed, "key-1").await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["Idempotency-Key"]);

    // Without the key, the same body is a plain duplicate.
    expect_problem(
        app.post_json("/api/v1/projects/team-a/deployments", &body)
            .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(app.count_rows("model_deployment").await, 1);
}

#[sqlx::test]
async fn concurrent_retries_with_one_key_create_one_deployment(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let body = json!({"name": "qwen", "spec": valid_spec()});
    let send = || {
        app.request(Method::POST, "/api/v1/projects/team-a/deployments")
            .header("idempotency-key", "same")
            .json(&body)
            .send()
    };
    let (a, b) = tokio::join!(send(), send());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        (a.status(), b.status()),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    let (a, b): (Value, Value) = (a.json().await.unwrap(), b.json().await.unwrap());
    assert_eq!(a["id"], b["id"]);
    assert_eq!(app.count_rows("model_deployment").await, 1);
}

#[sqlx::test]
async fn patch_bumps_the_generation_and_records_a_revision(pool: PgPool) {
    let (app, etag) = app_with_qwen(pool).await;
    let response = app
        .patch(QWEN, &json!({"spec": {"engine": {"image": "vllm/vllm-openai:v0.12.0"}, "labels": {"tier": "gold"}}}), Some(&etag))
        .await;
    let new_etag = response.headers()["etag"].to_str().unwrap().to_owned();
    assert_ne!(new_etag, etag);
    let body = json_of(response, StatusCode::OK).await;
    assert_eq!(body["generation"], 2);
    assert_eq!(body["spec"]["engine"]["image"], "vllm/vllm-openai:v0.12.0");
    assert_eq!(
        body["spec"]["labels"],
        json!({"team": "nlp", "tier": "gold"})
    );
    assert_eq!(
        body["spec"]["engine"]["args"],
        json!(["--enable-prefix-caching"]),
        "untouched fields stay"
    );

    // null removes a field (merge patch semantics).
    let body = json_of(
        app.patch(QWEN, &json!({"spec": {"labels": {"team": null}}}), None)
            .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(body["spec"]["labels"], json!({"tier": "gold"}));
    assert_eq!(body["generation"], 3);

    let revisions = json_of(app.get(&format!("{QWEN}/revisions")).await, StatusCode::OK).await;
    let numbers: Vec<i64> = revisions["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["revision"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [3, 2, 1]);
    assert_eq!(revisions["items"][2]["reason"], "created");

    let events = json_of(app.get(&format!("{QWEN}/events")).await, StatusCode::OK).await;
    let message = events["items"][1]["message"].as_str().unwrap();
    assert_eq!(events["items"][1]["kind"], "SpecChanged");
    assert!(
        message.contains("engine.image") && message.contains("labels.tier"),
        "{message}"
    );
}

#[sqlx::test]
async fn an_unchanged_spec_is_not_a_new_generation(pool: PgPool) {
    let (app, etag) = app_with_qwen(pool).await;
    let response = app
        .patch(QWEN, &json!({"spec": {"replicas": 1}}), Some(&etag))
        .await;
    assert_eq!(response.headers()["etag"].to_str().unwrap(), etag);
    assert_eq!(json_of(response, StatusCode::OK).await["generation"], 1);
    assert_eq!(app.count_rows("deployment_revision").await, 1);
}

#[sqlx::test]
async fn a_stale_if_match_is_rejected_with_412_and_nothing_written(pool: PgPool) {
    let (app, stale) = app_with_qwen(pool).await;
    assert_eq!(
        app.patch(QWEN, &json!({"spec": {"replicas": 2}}), Some(&stale))
            .await
            .status(),
        StatusCode::OK
    );

    expect_problem(
        app.patch(QWEN, &json!({"spec": {"replicas": 3}}), Some(&stale))
            .await,
        StatusCode::PRECONDITION_FAILED,
    )
    .await;
    let put = app
        .request(Method::PUT, QWEN)
        .header("if-match", &stale)
        .json(&json!({"spec": valid_spec()}))
        .send()
        .await
        .unwrap();
    expect_problem(put, StatusCode::PRECONDITION_FAILED).await;
    let scale = app
        .request(Method::POST, &format!("{QWEN}/scale"))
        .header("if-match", &stale)
        .json(&json!({"replicas": 5}))
        .send()
        .await
        .unwrap();
    expect_problem(scale, StatusCode::PRECONDITION_FAILED).await;
    let delete = app
        .request(Method::DELETE, QWEN)
        .header("if-match", &stale)
        .send()
        .await
        .unwrap();
    expect_problem(delete, StatusCode::PRECONDITION_FAILED).await;

    let body = json_of(app.get(QWEN).await, StatusCode::OK).await;
    assert_eq!(body["generation"], 2);
    assert_eq!(body["spec"]["replicas"], 2);
    assert_eq!(body["status"]["phase"], "Pending");
    assert_eq!(app.count_rows("deployment_revision").await, 2);
}

#[sqlx::test]
async fn of_two_concurrent_patches_with_one_etag_exactly_one_wins(pool: PgPool) {
    let (app, etag) = app_with_qwen(pool).await;
    let (two, three) = (
        json!({"spec": {"replicas": 2}}),
        json!({"spec": {"replicas": 3}}),
    );
    let (a, b) = tokio::join!(
        app.patch(QWEN, &two, Some(&etag)),
        app.patch(QWEN, &three, Some(&etag)),
    );
    let mut statuses = [a.status(), b.status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::PRECONDITION_FAILED]);
    let winner = if a.status() == StatusCode::OK { 2 } else { 3 };
    let body = json_of(app.get(QWEN).await, StatusCode::OK).await;
    assert_eq!(body["generation"], 2);
    assert_eq!(body["spec"]["replicas"], winner);
}

#[sqlx::test]
async fn put_replaces_the_whole_spec(pool: PgPool) {
    let (app, etag) = app_with_qwen(pool).await;
    let spec =
        json!({"model": {"source": "pvc://models/llama-3-8b"}, "engine": {"kind": "sglang"}});
    let response = app
        .request(Method::PUT, QWEN)
        .header("if-match", &etag)
        .json(&json!({"spec": spec}))
        .send()
        .await
        .unwrap();
    let body = json_of(response, StatusCode::OK).await;
    assert_eq!(body["generation"], 2);
    assert_eq!(body["spec"]["engine"]["kind"], "sglang");
    assert_eq!(
        body["spec"]["engine"]["image"],
        Value::Null,
        "nothing of the old spec survives"
    );
    assert_eq!(body["spec"]["labels"], json!({}));
}

#[sqlx::test]
async fn scale_changes_only_replicas(pool: PgPool) {
    let (app, _) = app_with_qwen(pool).await;
    let body = json_of(
        app.post_json(&format!("{QWEN}/scale"), &json!({"replicas": 0}))
            .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(body["spec"]["replicas"], 0);
    assert_eq!(body["generation"], 2);
    assert_eq!(
        body["spec"]["engine"]["image"],
        valid_spec()["engine"]["image"]
    );
    assert_eq!(body["spec"]["labels"], valid_spec()["labels"]);

    let problem = expect_problem(
        app.post_json(&format!("{QWEN}/scale"), &json!({"replicas": 21}))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["replicas"]);
    let problem = expect_problem(
        app.post_json(
            &format!("{QWEN}/scale"),
            &json!({"replicas": 2, "image": "x"}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["image"]);
    let events = json_of(app.get(&format!("{QWEN}/events")).await, StatusCode::OK).await;
    assert_eq!(events["items"][1]["kind"], "Scaled");
}

#[sqlx::test]
async fn restart_sets_a_marker_outside_the_spec(pool: PgPool) {
    let (app, etag) = app_with_qwen(pool).await;
    let response = app
        .request(Method::POST, &format!("{QWEN}/restart"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["etag"].to_str().unwrap(),
        etag,
        "a restart is not a spec change"
    );
    let body = json_of(response, StatusCode::OK).await;
    assert!(body["restartedAt"].is_string());
    assert_eq!(body["generation"], 1);
    let events = json_of(app.get(&format!("{QWEN}/events")).await, StatusCode::OK).await;
    assert_eq!(events["items"][1]["kind"], "RestartRequested");
}

#[sqlx::test]
async fn rollback_restores_an_earlier_spec_as_a_new_revision(pool: PgPool) {
    let (app, _) = app_with_qwen(pool).await;
    app.patch(
        QWEN,
        &json!({"spec": {"engine": {"image": "vllm/vllm-openai:v0.12.0", "maxModelLen": 4096}}}),
        None,
    )
    .await;
    app.post_json(&format!("{QWEN}/scale"), &json!({"replicas": 4}))
        .await;

    let body = json_of(
        app.post_json(&format!("{QWEN}/rollback"), &json!({"revision": 1}))
            .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(body["generation"], 4);
    assert_eq!(body["spec"]["engine"]["image"], "vllm/vllm-openai:v0.11.0");
    assert_eq!(body["spec"]["engine"]["maxModelLen"], 8192);
    assert_eq!(
        body["spec"]["replicas"], 4,
        "the current replica count is kept"
    );

    let body = json_of(
        app.post_json(
            &format!("{QWEN}/rollback"),
            &json!({"revision": 2, "replicas": 1}),
        )
        .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(body["generation"], 5);
    assert_eq!(body["spec"]["engine"]["image"], "vllm/vllm-openai:v0.12.0");
    assert_eq!(body["spec"]["replicas"], 1);

    let revisions = json_of(app.get(&format!("{QWEN}/revisions")).await, StatusCode::OK).await;
    assert_eq!(revisions["items"][0]["reason"], "rolled back to revision 2");
    assert_eq!(revisions["items"][0]["spec"], body["spec"]);

    let problem = expect_problem(
        app.post_json(&format!("{QWEN}/rollback"), &json!({"revision": 99}))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["revision"]);
    assert_eq!(app.count_rows("deployment_revision").await, 5);
}

#[sqlx::test]
async fn delete_is_accepted_and_keeps_the_name_taken(pool: PgPool) {
    let (app, _) = app_with_qwen(pool).await;
    let response = app.request(Method::DELETE, QWEN).send().await.unwrap();
    let body = json_of(response, StatusCode::ACCEPTED).await;
    assert_eq!(body["status"]["phase"], "Deleting");
    assert_eq!(
        body["status"]["message"], "delete requested: the Kubernetes objects are being removed",
        "the rollout's message does not linger"
    );
    assert!(body["deletionRequestedAt"].is_string());

    let again = app.request(Method::DELETE, QWEN).send().await.unwrap();
    assert_eq!(
        again.status(),
        StatusCode::ACCEPTED,
        "deleting twice is fine"
    );

    let problem = expect_problem(
        app.create_deployment("team-a", "qwen").await,
        StatusCode::CONFLICT,
    )
    .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("being deleted")
    );
    expect_problem(
        app.patch(QWEN, &json!({"spec": {"replicas": 2}}), None)
            .await,
        StatusCode::CONFLICT,
    )
    .await;

    let list = json_of(
        app.get("/api/v1/projects/team-a/deployments?phase=Deleting")
            .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let events = json_of(app.get(&format!("{QWEN}/events")).await, StatusCode::OK).await;
    assert_eq!(
        events["items"].as_array().unwrap().len(),
        2,
        "Created, DeleteRequested"
    );
}

#[sqlx::test]
async fn the_timeline_is_kept_by_id_after_the_record_is_gone(pool: PgPool) {
    let (app, _) = app_with_qwen(pool).await;
    let id = json_of(app.get(QWEN).await, StatusCode::OK).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // What the worker will do once every object is removed.
    sqlx::query("delete from model_deployment where id = $1::uuid")
        .bind(&id)
        .execute(&app.pool)
        .await
        .unwrap();
    expect_problem(app.get(QWEN).await, StatusCode::NOT_FOUND).await;
    let events = json_of(
        app.get(&format!("/api/v1/projects/team-a/events?deploymentId={id}"))
            .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(events["items"][0]["kind"], "Created");
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED,
        "the name is free again"
    );
}
