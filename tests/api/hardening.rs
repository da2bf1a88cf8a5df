//! Input that must not exhaust or confuse a shared process: strict JSON, bounded specs,
//! header syntax, rate limits before the database, usable connections after early errors,
//! problem documents for every error, and a readiness check that always answers.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Options, TestApp, error_fields, expect_problem, valid_spec};

async fn app_with_project(pool: PgPool) -> TestApp {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    app
}

async fn post_raw(app: &TestApp, path: &str, body: &str) -> reqwest::Response {
    app.request(Method::POST, path)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

#[sqlx::test]
async fn arrays_never_stand_in_for_objects(pool: PgPool) {
    let app = app_with_project(pool).await;
    assert_eq!(app.create_deployment("team-a", "qwen").await.status(), 201);
    let scale = expect_problem(
        post_raw(
            &app,
            "/api/v1/projects/team-a/deployments/qwen/scale",
            "[3]",
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(
        scale["detail"].as_str().unwrap().contains("object"),
        "{scale}"
    );
    expect_problem(
        post_raw(&app, "/api/v1/projects/team-a/tokens", r#"["ci","viewer"]"#).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    let mut spec = valid_spec();
    spec["storage"] = json!({"cache": [null, null]});
    let nested = expect_problem(
        app.post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": "other", "spec": spec}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&nested), ["spec.storage.cache"]);
    // And through a merge patch, which is applied before it is read.
    let patched = expect_problem(
        app.patch(
            "/api/v1/projects/team-a/deployments/qwen",
            &json!({"spec": {"resources": {"gpu": [1]}}}),
            None,
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&patched), ["spec.resources.gpu"]);
    assert_eq!(app.count_rows("model_deployment").await, 1);
    assert_eq!(
        app.count_rows("api_token").await,
        1,
        "only the bootstrap token"
    );
}

#[sqlx::test]
async fn duplicate_json_keys_are_refused(pool: PgPool) {
    let app = app_with_project(pool).await;
    let body = format!(
        r#"{{"name": "qwen", "spec": {}, "name": "other"}}"#,
        valid_spec()
    );
    let problem = expect_problem(
        post_raw(&app, "/api/v1/projects/team-a/deployments", &body).await,
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("duplicate key `name`"),
        "{problem}"
    );
    assert_eq!(app.count_rows("model_deployment").await, 0);
}

#[sqlx::test]
async fn lists_and_sizes_in_a_spec_are_bounded(pool: PgPool) {
    let app = app_with_project(pool).await;
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"labels": (0..65).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>()}),
            "spec.labels",
        ),
        (
            json!({"annotations": (0..65).map(|i| (format!("example.com/k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>()}),
            "spec.annotations",
        ),
        (
            json!({"engine": {"kind": "vllm", "args": vec!["--x"; 129]}}),
            "spec.engine.args",
        ),
        (
            json!({"engine": {"kind": "vllm", "env": (0..129).map(|i| json!({"name": format!("V{i}"), "value": "x"})).collect::<Vec<_>>()}}),
            "spec.engine.env",
        ),
        (
            json!({"scheduling": {"tolerations": vec![json!({"operator": "Exists"}); 33]}}),
            "spec.scheduling.tolerations",
        ),
        (
            json!({"engine": {"kind": "vllm", "env": [{"name": "BIG", "value": "x".repeat(33 * 1024)}]}}),
            "spec.engine.env[0].value",
        ),
        // Each part within its own limit, the whole over 256 KiB.
        (
            json!({"engine": {"kind": "vllm", "env": (0..9).map(|i| json!({"name": format!("V{i}"), "value": "x".repeat(30 * 1024)})).collect::<Vec<_>>()}}),
            "spec",
        ),
    ];
    for (patch, field) in cases {
        let mut spec = valid_spec();
        json_patch::merge(&mut spec, &patch);
        let problem = expect_problem(
            app.post_json(
                "/api/v1/projects/team-a/deployments",
                &json!({"name": "qwen", "spec": spec}),
            )
            .await,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(error_fields(&problem), [field]);
        let message = problem["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("at most"), "names the limit: {message}");
    }
    assert_eq!(app.count_rows("model_deployment").await, 0);
}

#[sqlx::test]
async fn header_values_outside_their_syntax_name_the_header(pool: PgPool) {
    let app = app_with_project(pool).await;
    assert_eq!(app.create_deployment("team-a", "qwen").await.status(), 201);
    for key in ["with\ttab", "with space"] {
        let problem = expect_problem(
            app.request(Method::POST, "/api/v1/projects/team-a/deployments")
                .header("idempotency-key", key)
                .json(&json!({"name": "other", "spec": valid_spec()}))
                .send()
                .await
                .unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(error_fields(&problem), ["Idempotency-Key"], "{key:?}");
    }
    for tag in ["", "abc", "\"unterminated", "W/", "\"a\" \"b\""] {
        let problem = expect_problem(
            app.patch(
                "/api/v1/projects/team-a/deployments/qwen",
                &json!({"spec": {"replicas": 2}}),
                Some(tag),
            )
            .await,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(error_fields(&problem), ["If-Match"], "{tag:?}");
    }
    // A well-formed but stale tag is still the 412 it always was.
    expect_problem(
        app.patch(
            "/api/v1/projects/team-a/deployments/qwen",
            &json!({"spec": {"replicas": 2}}),
            Some("\"stale\""),
        )
        .await,
        StatusCode::PRECONDITION_FAILED,
    )
    .await;
    assert_eq!(app.count_rows("deployment_revision").await, 1);
}

#[sqlx::test]
async fn every_error_is_a_problem_document(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            request_timeout_secs: 1,
            ..Options::default()
        },
    )
    .await;
    let not_allowed = app
        .request(Method::PUT, "/api/v1/projects")
        .send()
        .await
        .unwrap();
    assert!(not_allowed.headers().contains_key("allow"));
    expect_problem(not_allowed, StatusCode::METHOD_NOT_ALLOWED).await;

    // A body that never finishes arriving runs into the request timeout.
    let mut stream = TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap();
    stream
        .write_all(
            format!(
                "POST /api/v1/projects HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
                 content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"name\"",
                crate::common::ADMIN_TOKEN
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let response = read_response(&mut stream).await;
    assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    assert!(
        response.contains("application/problem+json")
            && response.contains("urn:modelplane:problem:timeout"),
        "{response}"
    );
}

/// Reads one HTTP/1.1 response with a `content-length` body from `stream`.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("a response in time")
            .expect("the connection stays readable");
        assert!(
            n > 0,
            "the server closed the connection: {}",
            String::from_utf8_lossy(&buffer)
        );
        buffer.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buffer).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if buffer.len() >= end + 4 + length {
                return text;
            }
        }
    }
}

#[sqlx::test]
async fn a_connection_stays_usable_after_an_early_refusal(pool: PgPool) {
    let app = app_with_project(pool).await;
    let mut stream = TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let body = json!({"name": "qwen", "spec": valid_spec()}).to_string();
    // 401 (no credential), 415 (wrong type) and 405 are decided before the body is read.
    for (head, status) in [
        (
            "POST /api/v1/projects/team-a/deployments HTTP/1.1\r\ncontent-type: application/json\r\n",
            "401",
        ),
        (
            &*format!(
                "POST /api/v1/projects/team-a/deployments HTTP/1.1\r\nauthorization: Bearer {}\r\ncontent-type: text/plain\r\n",
                crate::common::ADMIN_TOKEN
            ),
            "415",
        ),
        (
            "PUT /api/v1/projects HTTP/1.1\r\ncontent-type: application/json\r\n",
            "405",
        ),
    ] {
        stream
            .write_all(
                format!(
                    "{head}host: x\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let response = read_response(&mut stream).await;
        assert!(
            response.starts_with(&format!("HTTP/1.1 {status}")),
            "{response}"
        );
    }
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let response = read_response(&mut stream).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

#[sqlx::test]
async fn a_flood_is_refused_before_the_database(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            rate_per_minute: 1,
            rate_burst: 3,
            ..Options::default()
        },
    )
    .await;
    let token = app.token_for_platform("flood").await;
    for _ in 0..3 {
        let response = app
            .request_as(Some(&token), Method::GET, "/api/v1/projects")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    // With the database gone, a limited credential is still answered 429, not 500:
    // the limit was checked without it.
    app.pool.close().await;
    let limited = app
        .request_as(Some(&token), Method::GET, "/api/v1/projects")
        .send()
        .await
        .unwrap();
    expect_problem(limited, StatusCode::TOO_MANY_REQUESTS).await;
}

#[sqlx::test]
async fn anonymous_traffic_is_limited_per_address(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            rate_per_minute: 1,
            rate_burst: 5,
            ..Options::default()
        },
    )
    .await;
    let mut statuses = Vec::new();
    for i in 0..8 {
        let response = app
            .request_as(None, Method::GET, &format!("/api/v1/no/such/path/{i}"))
            .send()
            .await
            .unwrap();
        statuses.push(response.status());
    }
    assert_eq!(&statuses[..5], &[StatusCode::NOT_FOUND; 5]);
    assert_eq!(statuses[7], StatusCode::TOO_MANY_REQUESTS);
    // Health checks are never limited.
    let health = app
        .request_as(None, Method::GET, "/healthz")
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
}

#[sqlx::test]
async fn token_lists_are_paged_and_filter_live_tokens(pool: PgPool) {
    let app = app_with_project(pool).await;
    for name in ["a", "b", "c"] {
        app.token_for("team-a", name, "viewer").await;
    }
    let tokens: Value = app
        .get("/api/v1/projects/team-a/tokens?limit=2")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(tokens["items"].as_array().unwrap().len(), 2);
    let cursor = tokens["nextCursor"].as_str().unwrap();
    let rest: Value = app
        .get(&format!(
            "/api/v1/projects/team-a/tokens?limit=2&cursor={cursor}"
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert!(rest["nextCursor"].is_null());
    assert_eq!(rest["items"][0]["name"], "a", "newest first");
    let revoked_id = rest["items"][0]["id"].as_str().unwrap();
    let revoked = app
        .request(
            Method::DELETE,
            &format!("/api/v1/projects/team-a/tokens/{revoked_id}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);
    let live: Value = app
        .get("/api/v1/projects/team-a/tokens?live=true")
        .await
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = live["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c", "b"]);
    // A cursor made for one filter is refused with another.
    let problem = expect_problem(
        app.get(&format!(
            "/api/v1/projects/team-a/tokens?live=true&cursor={cursor}"
        ))
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["cursor"]);
    let bindings: Value = app
        .get("/api/v1/projects/team-a/role-bindings?limit=1")
        .await
        .json()
        .await
        .unwrap();
    assert!(bindings["items"].as_array().unwrap().is_empty());
    assert!(bindings["nextCursor"].is_null());
}

/// A kubeconfig for an API server that accepts connections and never answers.
async fn silent_cluster(dir: &std::path::Path) -> modelplane::reconciler::cluster::Cluster {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: silent\nclusters:\n- name: silent\n  cluster:\n    server: http://{addr}\n\
             contexts:\n- name: silent\n  context:\n    cluster: silent\n    user: u\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .unwrap();
    modelplane::reconciler::cluster::connect(Some(&kubeconfig), None, None)
        .await
        .unwrap()
}

#[sqlx::test]
async fn readiness_answers_in_time_when_the_cluster_does_not(pool: PgPool) {
    let dir = std::env::temp_dir().join(format!("modelplane-readyz-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    for (gates, status, word) in [
        (false, StatusCode::OK, "degraded"),
        (true, StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    ] {
        let app = TestApp::spawn_with(
            pool.clone(),
            Options {
                cluster: Some((silent_cluster(&dir).await, gates)),
                ..Options::default()
            },
        )
        .await;
        let started = Instant::now();
        let response = app.get("/readyz").await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(response.status(), status);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["status"], word);
        let cluster = &body["checks"][1];
        assert_eq!(cluster["name"], "cluster");
        assert_eq!(cluster["ok"], false);
        assert_eq!(cluster["required"], gates);
        assert!(
            cluster["message"].as_str().unwrap().contains("no answer"),
            "{body}"
        );
        assert_eq!(body["checks"][0]["ok"], true, "the database is fine");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[sqlx::test]
async fn readiness_reports_a_worker_that_stopped_beating(pool: PgPool) {
    let health = std::sync::Arc::new(modelplane::reconciler::health::WorkerHealth::default());
    let app = TestApp::spawn_with(
        pool,
        Options {
            worker: Some(health.clone()),
            ..Options::default()
        },
    )
    .await;
    let response = app.get("/readyz").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = response.json().await.unwrap();
    let worker = body["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "worker")
        .unwrap()
        .clone();
    assert_eq!(worker["ok"], false);
    assert_eq!(worker["message"], "the worker loop has not started");
    health.beat();
    let response = app.get("/readyz").await;
    assert_eq!(response.status(), StatusCode::OK);
}

/// A live `/version` is not enough: when the worker's last reconcile failed against the
/// cluster (etcd down behind a live API server answers reads and `/version`, but not
/// writes), readiness says so.
#[sqlx::test]
async fn readiness_reports_a_cluster_whose_writes_fail(pool: PgPool) {
    let emulator = modelplane_emulator::Emulator::builder()
        .start()
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("modelplane-readyz-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, emulator.kubeconfig_yaml()).unwrap();
    let cluster = modelplane::reconciler::cluster::connect(Some(&kubeconfig), None, None)
        .await
        .unwrap();
    let health = std::sync::Arc::new(modelplane::reconciler::health::WorkerHealth::default());
    health.beat();
    let app = TestApp::spawn_with(
        pool,
        Options {
            cluster: Some((cluster, true)),
            worker: Some(health.clone()),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
    health.cluster_failed("Kubernetes: etcdserver: request timed out");
    let response = app.get("/readyz").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = response.json().await.unwrap();
    let message = body["checks"][1]["message"].as_str().unwrap();
    assert!(
        message
            .contains("but the last reconcile failed: Kubernetes: etcdserver: request timed out"),
        "{body}"
    );
    health.cluster_succeeded();
    assert_eq!(app.get("/readyz").await.status(), StatusCode::OK);
    let _ = std::fs::remove_dir_all(&dir);
}

#[sqlx::test]
async fn respelling_the_authorization_header_buys_no_fresh_bucket(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            rate_per_minute: 1,
            rate_burst: 2,
            ..Options::default()
        },
    )
    .await;
    let token = app.token_for_platform("spelled").await;
    let mut statuses = Vec::new();
    for header in [
        format!("Bearer {token}"),
        format!("bearer {token}"),
        format!("Bearer   {token}  "),
    ] {
        let response = reqwest::Client::new()
            .get(format!("{}/api/v1/projects", app.base))
            .header("authorization", header)
            .send()
            .await
            .unwrap();
        statuses.push(response.status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

#[sqlx::test]
async fn failed_attempts_from_an_address_do_not_lock_out_a_good_credential_there(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            rate_per_minute: 1,
            rate_burst: 3,
            ..Options::default()
        },
    )
    .await;
    let token = app.token_for_platform("good").await;
    let ok = app
        .request_as(Some(&token), Method::GET, "/api/v1/projects")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    // Someone else behind the same address guesses until the address is refused.
    let mut last = StatusCode::OK;
    for i in 0..5 {
        last = app
            .request_as(
                Some(&format!("mpt_guess{i}")),
                Method::GET,
                "/api/v1/projects",
            )
            .send()
            .await
            .unwrap()
            .status();
    }
    assert_eq!(last, StatusCode::TOO_MANY_REQUESTS);
    // The credential that just proved good still works from there.
    let still = app
        .request_as(Some(&token), Method::GET, "/api/v1/projects")
        .send()
        .await
        .unwrap();
    assert_eq!(still.status(), StatusCode::OK);
}
