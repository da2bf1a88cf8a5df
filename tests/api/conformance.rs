//! The OpenAPI document describes what the server does: every operation in it is called
//! with the inputs that provoke each generic answer (no or a wrong credential, a viewer,
//! another project, malformed, mistyped, oversized or invalid input, bad headers, unknown
//! resources, a spent rate limit), as a conformance fuzzer's status-code check would, and
//! every status the server returns must be documented for that operation, with errors as
//! problem documents.

use std::collections::BTreeSet;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{ADMIN_TOKEN, Options, TestApp, valid_spec};

struct Operation {
    method: Method,
    path: String,
    documented: BTreeSet<String>,
    body_type: Option<String>,
    query: Vec<String>,
    headers: Vec<String>,
}

fn operations() -> Vec<Operation> {
    let document: Value = serde_json::from_str(&modelplane::api::openapi_document()).unwrap();
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Ok(method) = method.to_uppercase().parse::<Method>() else {
                continue;
            };
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            let named = |place: &str| -> Vec<String> {
                params
                    .iter()
                    .filter(|p| p["in"] == place)
                    .map(|p| p["name"].as_str().unwrap().to_owned())
                    .collect()
            };
            operations.push(Operation {
                method,
                path: path.clone(),
                documented: op["responses"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .cloned()
                    .collect(),
                body_type: op["requestBody"]["content"]
                    .as_object()
                    .and_then(|c| c.keys().next().cloned()),
                query: named("query"),
                headers: named("header"),
            });
        }
    }
    // Destructive operations last, so the others meet the records they expect.
    operations.sort_by_key(|o| o.method == Method::DELETE);
    operations
}

/// The path with its parameters filled, in `project`.
fn concrete(path: &str, project: &str) -> String {
    path.replace("{project}", project)
        .replace("{name}", "qwen")
        .replace("{id}", &uuid::Uuid::now_v7().to_string())
}

struct Checker {
    violations: Vec<String>,
    seen: usize,
}

impl Checker {
    async fn check(&mut self, op: &Operation, probe: &str, response: reqwest::Response) {
        self.seen += 1;
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if !op.documented.contains(status.as_str()) {
            self.violations.push(format!(
                "{} {} ({probe}): {status} is not documented (documented: {:?})",
                op.method, op.path, op.documented
            ));
        }
        if status.is_client_error() || status.is_server_error() {
            let body: Value = response.json().await.unwrap_or(Value::Null);
            if content_type != "application/problem+json" || body["status"] != status.as_u16() {
                self.violations.push(format!(
                    "{} {} ({probe}): {status} is not a problem document ({content_type})",
                    op.method, op.path
                ));
            }
        }
    }
}

fn request(
    app: &TestApp,
    token: Option<&str>,
    op: &Operation,
    project: &str,
    query: &str,
) -> reqwest::RequestBuilder {
    let url = format!("{}{query}", concrete(&op.path, project));
    app.request_as(token, op.method.clone(), &url)
}

/// A small body of the operation's media type that is at least syntactically right.
fn body_for(op: &Operation) -> String {
    if op.path.ends_with("/deployments") {
        json!({"name": "probe", "spec": valid_spec()}).to_string()
    } else if op.path.ends_with("/scale") {
        json!({"replicas": 2}).to_string()
    } else if op.path.ends_with("/rollback") {
        json!({"revision": 1}).to_string()
    } else {
        "{}".to_owned()
    }
}

async fn probe_all(app: &TestApp, tokens: &Tokens, checker: &mut Checker) {
    for op in operations() {
        let body = body_for(&op);
        let with_body =
            |b: reqwest::RequestBuilder, content_type: &str, body: String| match &op.body_type {
                Some(_) => b.header("content-type", content_type).body(body),
                None => b,
            };
        let media = op.body_type.clone().unwrap_or_default();
        let send = |b: reqwest::RequestBuilder| async move { b.send().await.unwrap() };

        let probes: Vec<(&str, reqwest::RequestBuilder)> = vec![
            (
                "no credential",
                with_body(request(app, None, &op, "team-a", ""), &media, body.clone()),
            ),
            (
                "unknown credential",
                with_body(
                    request(app, Some("mpt_unknown"), &op, "team-a", ""),
                    &media,
                    body.clone(),
                ),
            ),
            (
                "viewer",
                with_body(
                    request(app, Some(&tokens.viewer), &op, "team-a", ""),
                    &media,
                    body.clone(),
                ),
            ),
            (
                "another project's admin",
                with_body(
                    request(app, Some(&tokens.other_admin), &op, "team-a", ""),
                    &media,
                    body.clone(),
                ),
            ),
            (
                "unknown project",
                with_body(
                    request(app, Some(ADMIN_TOKEN), &op, "team-x", ""),
                    &media,
                    body.clone(),
                ),
            ),
            (
                "platform admin",
                with_body(
                    request(app, Some(ADMIN_TOKEN), &op, "team-a", ""),
                    &media,
                    body.clone(),
                ),
            ),
            (
                "unknown query parameter",
                with_body(
                    request(app, Some(ADMIN_TOKEN), &op, "team-a", "?bogus=1"),
                    &media,
                    body.clone(),
                ),
            ),
        ];
        for (name, builder) in probes {
            checker.check(&op, name, send(builder).await).await;
        }
        if op.query.iter().any(|q| q == "limit") {
            for query in ["?limit=0", "?limit=201", "?limit=x", "?cursor=garbage"] {
                let response = send(request(app, Some(ADMIN_TOKEN), &op, "team-a", query)).await;
                checker.check(&op, query, response).await;
            }
        }
        if op.body_type.is_some() {
            let admin = || request(app, Some(ADMIN_TOKEN), &op, "team-a", "");
            let cases = [
                ("malformed body", media.clone(), "{".to_owned()),
                (
                    "duplicate key",
                    media.clone(),
                    r#"{"a": 1, "a": 2}"#.to_owned(),
                ),
                ("array body", media.clone(), "[1]".to_owned()),
                ("wrong content type", "text/plain".to_owned(), body.clone()),
                (
                    "oversized body",
                    media.clone(),
                    format!(r#"{{"x": "{}"}}"#, "x".repeat(1024 * 1024)),
                ),
                ("empty object", media.clone(), "{}".to_owned()),
            ];
            for (name, content_type, payload) in cases {
                let response =
                    send(admin().header("content-type", content_type).body(payload)).await;
                checker.check(&op, name, response).await;
            }
        }
        for header in &op.headers {
            let values: &[&str] = match header.as_str() {
                "If-Match" => &["garbage", "\"stale\"", "*"],
                "Idempotency-Key" => &["with\ttab", "fine-key"],
                _ => &["x"],
            };
            for value in values {
                let builder = with_body(
                    request(app, Some(ADMIN_TOKEN), &op, "team-a", "")
                        .header(header.as_str(), *value),
                    &media,
                    body.clone(),
                );
                checker
                    .check(&op, &format!("{header}: {value:?}"), send(builder).await)
                    .await;
            }
        }
    }
}

struct Tokens {
    viewer: String,
    other_admin: String,
}

async fn setup(app: &TestApp) -> Tokens {
    app.create_project("team-a").await;
    app.create_project("team-b").await;
    assert_eq!(app.create_deployment("team-a", "qwen").await.status(), 201);
    Tokens {
        viewer: app.token_for("team-a", "viewer", "viewer").await,
        other_admin: app.token_for("team-b", "admin", "admin").await,
    }
}

#[sqlx::test]
async fn every_status_the_server_returns_is_documented(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let tokens = setup(&app).await;
    let mut checker = Checker {
        violations: Vec::new(),
        seen: 0,
    };
    probe_all(&app, &tokens, &mut checker).await;
    assert!(checker.seen > 300, "only {} probes ran", checker.seen);
    assert!(
        checker.violations.is_empty(),
        "{} of {} answers are not described by the document:\n{}",
        checker.violations.len(),
        checker.seen,
        checker.violations.join("\n")
    );
}

#[sqlx::test]
async fn a_spent_rate_limit_is_documented_on_every_operation(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            rate_per_minute: 1,
            rate_burst: 1,
            ..Options::default()
        },
    )
    .await;
    // The bootstrap token's single request of this minute.
    let first = app.get("/api/v1/whoami").await;
    assert_eq!(first.status(), StatusCode::OK);
    let mut checker = Checker {
        violations: Vec::new(),
        seen: 0,
    };
    for op in operations()
        .iter()
        .filter(|o| o.path.starts_with("/api/v1/"))
    {
        // An operation open to anyone (how to sign in) takes no credential: it is limited
        // per client address, whose one request of this minute goes first.
        let public = !op.documented.contains("401");
        let token = if public {
            request(&app, None, op, "team-a", "").send().await.unwrap();
            None
        } else {
            Some(ADMIN_TOKEN)
        };
        let response = request(&app, token, op, "team-a", "").send().await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{} {}",
            op.method,
            op.path
        );
        checker.check(op, "rate limited", response).await;
    }
    assert!(
        checker.violations.is_empty(),
        "{}",
        checker.violations.join("\n")
    );
}
