use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::PgPool;

use crate::common::{TestApp, expect_problem, valid_spec};

#[sqlx::test]
async fn malformed_json_is_a_400(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let response = app
        .request(Method::POST, "/api/v1/projects/team-a/deployments")
        .header("content-type", "application/json")
        .body(r#"{"name": "qwen", "spec": "#)
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(app.count_rows("model_deployment").await, 0);
}

#[sqlx::test]
async fn a_body_over_one_mebibyte_is_a_413(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let mut spec = valid_spec();
    spec["annotations"]["example.com/big"] = json!("x".repeat(1024 * 1024 + 1));
    let response = app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": "qwen", "spec": spec}),
        )
        .await;
    expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert_eq!(app.count_rows("model_deployment").await, 0);
}

#[sqlx::test]
async fn a_wrong_content_type_is_a_415(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let body = json!({"name": "qwen", "spec": valid_spec()}).to_string();
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/merge-patch+json"),
    ] {
        let mut request = app
            .request(Method::POST, "/api/v1/projects/team-a/deployments")
            .body(body.clone());
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        expect_problem(
            request.send().await.unwrap(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        )
        .await;
    }
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let response = app
        .request(Method::PATCH, "/api/v1/projects/team-a/deployments/qwen")
        .json(&json!({"spec": {"replicas": 2}}))
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::UNSUPPORTED_MEDIA_TYPE).await;
}

#[sqlx::test]
async fn unknown_paths_and_resources_are_404_problems(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    expect_problem(app.get("/api/v1/nope").await, StatusCode::NOT_FOUND).await;
    expect_problem(
        app.get("/api/v1/projects/ghost/deployments").await,
        StatusCode::NOT_FOUND,
    )
    .await;
    app.create_project("team-a").await;
    let problem = expect_problem(
        app.get("/api/v1/projects/team-a/deployments/ghost").await,
        StatusCode::NOT_FOUND,
    )
    .await;
    assert!(problem["detail"].as_str().unwrap().contains("ghost"));
}

#[sqlx::test]
async fn the_request_id_is_accepted_or_made_and_echoed(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let response = app
        .request(Method::GET, "/healthz")
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "abc-123");
    let response = app.get("/api/v1/projects/ghost").await;
    let made = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(!made.is_empty());
    let problem = expect_problem(response, StatusCode::NOT_FOUND).await;
    assert_eq!(problem["requestId"], made.as_str());
}

#[sqlx::test]
async fn an_internal_error_is_an_opaque_500_with_the_request_id(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    pool.close().await;
    let response = app
        .request(Method::GET, "/api/v1/projects")
        .header("x-request-id", "req-500")
        .send()
        .await
        .unwrap();
    let problem = expect_problem(response, StatusCode::INTERNAL_SERVER_ERROR).await;
    assert_eq!(problem["requestId"], "req-500");
    let text = problem.to_string().to_lowercase();
    assert!(
        !text.contains("pool") && !text.contains("sqlx"),
        "leaks internals: {text}"
    );
}

#[sqlx::test]
async fn health_and_readiness_report_the_database(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
    let ready: serde_json::Value = app.get("/readyz").await.json().await.unwrap();
    assert_eq!(ready["status"], "ready");
    pool.close().await;
    let response = app.get("/readyz").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
}

#[sqlx::test]
async fn the_api_reference_is_served_without_internet(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let page = app.get("/api/docs/").await;
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("swagger-ui"));
    assert!(
        !html.contains("https://"),
        "the page must not load assets from the internet"
    );
    let bundle = app.get("/api/docs/swagger-ui-bundle.js").await;
    assert_eq!(bundle.status(), StatusCode::OK);
    let document: serde_json::Value = app.get("/api/openapi.json").await.json().await.unwrap();
    assert!(document["openapi"].as_str().unwrap().starts_with("3.1"));
}

#[sqlx::test]
async fn no_input_produces_a_500(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let mut nul_annotation = valid_spec();
    nul_annotation["annotations"]["example.com/x"] = json!("a\u{0}b");
    let mut nul_env = valid_spec();
    nul_env["engine"]["env"][0]["value"] = json!("\u{0}");
    let bodies = [
        deep,
        r#"{"name": "qwen", "spec": {"model": {"source": "hf://a/b"}, "replicas": 1e400}}"#.to_owned(),
        r#"{"name": "qwen", "spec": {"model": {"source": "hf://a/b"}, "replicas": 9223372036854775808}}"#.to_owned(),
        r#"{"name": "q\u0000", "spec": {"model": {"source": "hf://a/b"}}}"#.to_owned(),
        json!({"name": "qwen", "spec": nul_annotation}).to_string(),
        json!({"name": "qwen", "spec": nul_env}).to_string(),
        r#"{"name": "ünïcødé", "spec": {"model": {"source": "hf://ü/ö"}}}"#.to_owned(),
        "null".to_owned(),
        "[]".to_owned(),
        "\"just a string\"".to_owned(),
    ];
    for body in bodies {
        let response = app
            .request(Method::POST, "/api/v1/projects/team-a/deployments")
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let status = response.status();
        assert!(
            status.is_client_error(),
            "{status} for {}",
            &body[..body.len().min(80)]
        );
    }
    for path in [
        "/api/v1/projects/team%00a",
        "/api/v1/projects/team-a/deployments/q%00wen",
        "/api/v1/projects/team-a/deployments/q%00wen/events",
        "/api/v1/projects/team-a/events?deploymentId=not-a-uuid",
        "/api/v1/projects/team-a/deployments?labelSelector=a%00%3Db",
        "/api/v1/projects/team-a/deployments?namePrefix=%00",
    ] {
        let status = app.get(path).await.status();
        assert!(status.is_client_error(), "{status} for {path}");
    }
    for (method, path) in [
        (
            Method::DELETE,
            "/api/v1/projects/team-a/deployments/q%00wen",
        ),
        (
            Method::POST,
            "/api/v1/projects/team-a/deployments/q%00wen/restart",
        ),
        (Method::DELETE, "/api/v1/projects/%00"),
    ] {
        let status = app.request(method, path).send().await.unwrap().status();
        assert!(status.is_client_error(), "{status} for {path}");
    }
    assert_eq!(app.count_rows("model_deployment").await, 0);
}

#[sqlx::test]
async fn cors_allows_only_the_configured_origins(pool: PgPool) {
    let options = crate::common::Options {
        cors_origins: vec!["https://portal.example.com".into()],
        ..crate::common::Options::default()
    };
    let app = TestApp::spawn_with(pool, options).await;
    let preflight = |origin: &'static str| {
        app.request_as(None, Method::OPTIONS, "/api/v1/projects")
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
    };
    let allowed = preflight("https://portal.example.com").await.unwrap();
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://portal.example.com"
    );
    let refused = preflight("https://evil.example.com").await.unwrap();
    assert!(
        refused
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
}

#[sqlx::test]
async fn responses_are_compressed_when_the_client_accepts_gzip(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let response = app
        .request(Method::GET, "/api/openapi.json")
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-encoding"], "gzip");
    let plain = app
        .request(Method::GET, "/api/openapi.json")
        .send()
        .await
        .unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
}
