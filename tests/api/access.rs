//! Authentication and authorisation: the role matrix, tokens, OIDC, rate limits.

use std::path::PathBuf;

use chrono::{Duration, Utc};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use modelplane::auth::OidcConfig;
use modelplane::auth::oidc::JwksSource;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{ADMIN_TOKEN, Options, TestApp, error_fields, expect_problem, valid_spec};

/// A fingerprint of everything a request could change.
async fn state_of(app: &TestApp) -> Value {
    let row: (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from project),
                (select count(*) from model_deployment),
                (select coalesce(sum(generation), 0)::bigint from model_deployment),
                (select count(*) from model_deployment where restarted_at is not null),
                (select count(*) from model_deployment where deletion_requested_at is not null),
                (select count(*) from api_token where revoked_at is null),
                (select count(*) from role_binding),
                (select count(*) from deployment_event),
                (select count(*) from audit_event),
                (select count(*) from model_key)",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    json!([
        row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7, row.8, row.9
    ])
}

#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Need {
    Viewer,
    Editor,
    Admin,
    Platform,
}

/// One operation on project `p`, given a counter for unique names.
struct Op {
    name: &'static str,
    need: Need,
    make: fn(&str, usize) -> (Method, String, Option<Value>),
}

fn ops() -> Vec<Op> {
    vec![
        Op {
            name: "get project",
            need: Need::Viewer,
            make: |p, _| (Method::GET, format!("/api/v1/projects/{p}"), None),
        },
        Op {
            name: "list deployments",
            need: Need::Viewer,
            make: |p, _| {
                (
                    Method::GET,
                    format!("/api/v1/projects/{p}/deployments"),
                    None,
                )
            },
        },
        Op {
            name: "get deployment",
            need: Need::Viewer,
            make: |p, _| {
                (
                    Method::GET,
                    format!("/api/v1/projects/{p}/deployments/qwen"),
                    None,
                )
            },
        },
        Op {
            name: "list revisions",
            need: Need::Viewer,
            make: |p, _| {
                (
                    Method::GET,
                    format!("/api/v1/projects/{p}/deployments/qwen/revisions"),
                    None,
                )
            },
        },
        Op {
            name: "list events",
            need: Need::Viewer,
            make: |p, _| {
                (
                    Method::GET,
                    format!("/api/v1/projects/{p}/deployments/qwen/events"),
                    None,
                )
            },
        },
        Op {
            name: "create deployment",
            need: Need::Editor,
            make: |p, n| {
                (
                    Method::POST,
                    format!("/api/v1/projects/{p}/deployments"),
                    Some(json!({"name": format!("new-{n}"), "spec": valid_spec()})),
                )
            },
        },
        Op {
            name: "patch deployment",
            need: Need::Editor,
            make: |p, n| {
                (
                    Method::PATCH,
                    format!("/api/v1/projects/{p}/deployments/qwen"),
                    Some(json!({"spec": {"labels": {"n": n.to_string()}}})),
                )
            },
        },
        Op {
            name: "replace deployment",
            need: Need::Editor,
            make: |p, n| {
                let mut spec = valid_spec();
                spec["labels"]["n"] = json!(format!("put-{n}"));
                (
                    Method::PUT,
                    format!("/api/v1/projects/{p}/deployments/qwen"),
                    Some(json!({"spec": spec})),
                )
            },
        },
        Op {
            name: "scale",
            need: Need::Editor,
            make: |p, n| {
                (
                    Method::POST,
                    format!("/api/v1/projects/{p}/deployments/qwen/scale"),
                    Some(json!({"replicas": (n % 5) as i64 + 2})),
                )
            },
        },
        Op {
            name: "restart",
            need: Need::Editor,
            make: |p, _| {
                (
                    Method::POST,
                    format!("/api/v1/projects/{p}/deployments/qwen/restart"),
                    None,
                )
            },
        },
        Op {
            name: "rollback",
            need: Need::Editor,
            make: |p, _| {
                (
                    Method::POST,
                    format!("/api/v1/projects/{p}/deployments/qwen/rollback"),
                    Some(json!({"revision": 1})),
                )
            },
        },
        Op {
            name: "delete deployment",
            need: Need::Editor,
            make: |p, _| {
                (
                    Method::DELETE,
                    format!("/api/v1/projects/{p}/deployments/victim"),
                    None,
                )
            },
        },
        Op {
            name: "list tokens",
            need: Need::Admin,
            make: |p, _| (Method::GET, format!("/api/v1/projects/{p}/tokens"), None),
        },
        Op {
            name: "create token",
            need: Need::Admin,
            make: |p, n| {
                (
                    Method::POST,
                    format!("/api/v1/projects/{p}/tokens"),
                    Some(json!({"name": format!("t-{n}"), "role": "viewer"})),
                )
            },
        },
        Op {
            name: "list model keys",
            need: Need::Admin,
            make: |p, _| (Method::GET, format!("/api/v1/projects/{p}/keys"), None),
        },
        Op {
            name: "create model key",
            need: Need::Admin,
            make: |p, n| {
                (
                    Method::POST,
                    format!("/api/v1/projects/{p}/keys"),
                    Some(json!({"name": format!("k-{n}")})),
                )
            },
        },
        Op {
            name: "list role bindings",
            need: Need::Admin,
            make: |p, _| {
                (
                    Method::GET,
                    format!("/api/v1/projects/{p}/role-bindings"),
                    None,
                )
            },
        },
        Op {
            name: "create role binding",
            need: Need::Admin,
            make: |p, n| {
                (
                    Method::POST,
                    format!("/api/v1/projects/{p}/role-bindings"),
                    Some(
                        json!({"subjectKind": "group", "subject": format!("g-{n}"), "role": "viewer"}),
                    ),
                )
            },
        },
        Op {
            name: "read audit log",
            need: Need::Admin,
            make: |p, _| (Method::GET, format!("/api/v1/projects/{p}/audit"), None),
        },
        Op {
            name: "delete project",
            need: Need::Platform,
            make: |p, _| (Method::DELETE, format!("/api/v1/projects/{p}"), None),
        },
    ]
}

#[sqlx::test]
async fn the_role_matrix_holds_for_every_operation_and_refusals_change_nothing(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    for project in ["team-a", "team-b"] {
        app.create_project(project).await;
        assert_eq!(
            app.create_deployment(project, "qwen").await.status(),
            StatusCode::CREATED
        );
    }
    let viewer = app.token_for("team-a", "viewer", "viewer").await;
    let editor = app.token_for("team-a", "editor", "editor").await;
    let admin = app.token_for("team-a", "admin", "admin").await;
    let other_admin = app.token_for("team-b", "admin", "admin").await;
    // (credential, its role on team-a; None: no role on team-a)
    let callers: Vec<(&str, Option<Need>)> = vec![
        (viewer.as_str(), Some(Need::Viewer)),
        (editor.as_str(), Some(Need::Editor)),
        (admin.as_str(), Some(Need::Admin)),
        (other_admin.as_str(), None),
        (ADMIN_TOKEN, Some(Need::Platform)),
    ];

    let mut counter = 0;
    let mut checked = 0;
    for op in ops() {
        for (token, role) in &callers {
            counter += 1;
            if op.name == "delete deployment" {
                // A fresh victim for every attempt.
                app.request(Method::DELETE, "/api/v1/projects/team-a/deployments/victim")
                    .send()
                    .await
                    .unwrap();
                sqlx::query("delete from model_deployment where name = 'victim'")
                    .execute(&app.pool)
                    .await
                    .unwrap();
                assert_eq!(
                    app.create_deployment("team-a", "victim").await.status(),
                    StatusCode::CREATED
                );
            }
            let (method, path, body) = (op.make)("team-a", counter);
            let expected = match role {
                None => StatusCode::NOT_FOUND,
                Some(r) if *r < op.need => StatusCode::FORBIDDEN,
                Some(_) => StatusCode::OK, // any 2xx, except for delete project (409: it has deployments)
            };
            let before = state_of(&app).await;
            let mut request = app.request_as(Some(token), method.clone(), &path);
            if let Some(body) = &body {
                request = if method == Method::PATCH {
                    request
                        .header("content-type", "application/merge-patch+json")
                        .body(body.to_string())
                } else {
                    request.json(body)
                };
            }
            let response = request.send().await.unwrap();
            let status = response.status();
            if expected == StatusCode::OK {
                if op.name == "delete project" {
                    assert_eq!(
                        status,
                        StatusCode::CONFLICT,
                        "{} by {role:?}",
                        op.name,
                        role = role.map(|_| ())
                    );
                } else {
                    assert!(
                        status.is_success(),
                        "{} as a caller with enough rights: {status}",
                        op.name
                    );
                }
            } else {
                let problem = expect_problem(response, expected).await;
                if expected == StatusCode::NOT_FOUND {
                    assert!(
                        !problem.to_string().contains("deployments/"),
                        "no detail leaks"
                    );
                }
                assert_eq!(
                    state_of(&app).await,
                    before,
                    "{} refused with {expected} but changed something",
                    op.name
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 20 * 5);

    // Platform-level operations are refused to every project role.
    for token in [&viewer, &editor, &admin] {
        let before = state_of(&app).await;
        let response = app
            .request_as(Some(token), Method::POST, "/api/v1/projects")
            .json(&json!({"name": "sneaky"}))
            .send()
            .await
            .unwrap();
        expect_problem(response, StatusCode::FORBIDDEN).await;
        let response = app
            .request_as(Some(token), Method::POST, "/api/v1/tokens")
            .json(&json!({"name": "root"}))
            .send()
            .await
            .unwrap();
        expect_problem(response, StatusCode::FORBIDDEN).await;
        assert_eq!(state_of(&app).await, before);
    }
}

#[sqlx::test]
async fn a_project_token_sees_only_its_project(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    app.create_project("team-b").await;
    let token = app.token_for("team-a", "ci", "editor").await;
    let list: Value = app
        .request_as(Some(&token), Method::GET, "/api/v1/projects")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["team-a"]);
    // Another project's name is indistinguishable from a missing one.
    let hidden = app
        .request_as(Some(&token), Method::GET, "/api/v1/projects/team-b")
        .send()
        .await
        .unwrap();
    let missing = app
        .request_as(Some(&token), Method::GET, "/api/v1/projects/team-zzz")
        .send()
        .await
        .unwrap();
    let (hidden, missing) = (
        expect_problem(hidden, StatusCode::NOT_FOUND).await,
        expect_problem(missing, StatusCode::NOT_FOUND).await,
    );
    assert_eq!(hidden["title"], missing["title"]);
}

#[sqlx::test]
async fn missing_bad_expired_and_revoked_credentials_are_401(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let path = "/api/v1/projects/team-a";

    let response = app
        .request_as(None, Method::GET, path)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
    for header in [
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer mpt_not-a-real-token",
    ] {
        let response = app
            .request_as(None, Method::GET, path)
            .header("authorization", header)
            .send()
            .await
            .unwrap();
        expect_problem(response, StatusCode::UNAUTHORIZED).await;
    }

    let expired = app.token_for("team-a", "old", "viewer").await;
    sqlx::query("update api_token set expires_at = now() - interval '1 second' where name = 'old'")
        .execute(&app.pool)
        .await
        .unwrap();
    let problem = expect_problem(
        app.request_as(Some(&expired), Method::GET, path)
            .send()
            .await
            .unwrap(),
        StatusCode::UNAUTHORIZED,
    )
    .await;
    assert!(problem["detail"].as_str().unwrap().contains("expired"));

    let token = app.token_for("team-a", "soon-revoked", "viewer").await;
    assert_eq!(
        app.request_as(Some(&token), Method::GET, path)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    app.revoke_token("team-a", "soon-revoked").await;
    let problem = expect_problem(
        app.request_as(Some(&token), Method::GET, path)
            .send()
            .await
            .unwrap(),
        StatusCode::UNAUTHORIZED,
    )
    .await;
    assert!(problem["detail"].as_str().unwrap().contains("revoked"));
    // The bootstrap token is the only thing the open endpoints never need.
    assert_eq!(
        app.request_as(None, Method::GET, "/healthz")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        app.request_as(None, Method::GET, "/readyz")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        app.request_as(None, Method::GET, "/api/openapi.json")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        app.request_as(None, Method::GET, "/metrics")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
}

#[sqlx::test]
async fn a_token_secret_is_shown_once_stored_hashed_and_never_logged(pool: PgPool) {
    let logs = LogCapture::default();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(logs.clone())
            .finish(),
    );
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let created: Value = app
        .post_json(
            "/api/v1/projects/team-a/tokens",
            &json!({"name": "ci", "role": "editor"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("mpt_") && secret.len() >= 40);
    assert_eq!(created["role"], "editor");
    assert!(created["expiresAt"].is_string(), "tokens expire by default");

    // Use it, list it, revoke it: the secret never comes back and is never logged.
    app.request_as(Some(&secret), Method::GET, "/api/v1/projects/team-a")
        .send()
        .await
        .unwrap();
    let list = app
        .get("/api/v1/projects/team-a/tokens")
        .await
        .text()
        .await
        .unwrap();
    assert!(!list.contains(&secret) && !list.contains("secret"));
    let stored: Vec<String> = sqlx::query_scalar("select token_hash from api_token")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert!(stored.iter().all(|h| h.len() == 64 && !h.contains(&secret)));
    let id = created["id"].as_str().unwrap();
    let revoked = app
        .request(
            Method::DELETE,
            &format!("/api/v1/projects/team-a/tokens/{id}"),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!revoked.contains(&secret));
    let captured = logs.text();
    assert!(captured.contains("token created"), "the capture works");
    assert!(!captured.contains(&secret), "the secret was logged");
    assert!(
        !captured.contains(ADMIN_TOKEN),
        "the admin secret was logged"
    );
}

#[sqlx::test]
async fn token_creation_and_revocation_are_audited_with_their_actor(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let admin = app.token_for("team-a", "team-admin", "admin").await;
    let created: Value = app
        .request_as(Some(&admin), Method::POST, "/api/v1/projects/team-a/tokens")
        .json(&json!({"name": "ci", "role": "viewer"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap();
    app.request_as(
        Some(&admin),
        Method::DELETE,
        &format!("/api/v1/projects/team-a/tokens/{id}"),
    )
    .send()
    .await
    .unwrap();
    let audit: Value = app
        .request_as(Some(&admin), Method::GET, "/api/v1/projects/team-a/audit")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let entries: Vec<(String, String)> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["actor"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("ProjectCreated".to_owned(), "token:bootstrap".to_owned()),
            ("TokenCreated".to_owned(), "token:bootstrap".to_owned()),
            ("TokenCreated".to_owned(), "token:team-admin".to_owned()),
            ("TokenRevoked".to_owned(), "token:team-admin".to_owned()),
        ]
    );
    // Deployment changes name their actor in the deployment timeline.
    let editor = app.token_for("team-a", "deployer", "editor").await;
    app.request_as(
        Some(&editor),
        Method::POST,
        "/api/v1/projects/team-a/deployments",
    )
    .json(&json!({"name": "qwen", "spec": valid_spec()}))
    .send()
    .await
    .unwrap();
    let events: Value = app
        .get("/api/v1/projects/team-a/deployments/qwen/events")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(events["items"][0]["actor"], "token:deployer");
}

#[sqlx::test]
async fn token_requests_are_validated(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    for (body, field) in [
        (json!({"name": "x"}), "role"),
        (json!({"name": "bad name", "role": "viewer"}), "name"),
        (json!({"name": "x", "role": "owner"}), "role"),
        (
            json!({"name": "x", "role": "viewer", "expiresAt": "2001-01-01T00:00:00Z"}),
            "expiresAt",
        ),
        (
            json!({"name": "x", "role": "viewer", "expiresAt": (Utc::now() + Duration::days(4000)).to_rfc3339()}),
            "expiresAt",
        ),
    ] {
        let problem = expect_problem(
            app.post_json("/api/v1/projects/team-a/tokens", &body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(error_fields(&problem), [field], "{body}");
    }
    app.token_for("team-a", "ci", "viewer").await;
    let problem = expect_problem(
        app.post_json(
            "/api/v1/projects/team-a/tokens",
            &json!({"name": "ci", "role": "viewer"}),
        )
        .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(error_fields(&problem), ["name"]);
    let problem = expect_problem(
        app.post_json("/api/v1/tokens", &json!({"name": "root", "role": "admin"}))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["role"]);
    assert_eq!(
        app.post_json("/api/v1/tokens", &json!({"name": "root"}))
            .await
            .status(),
        StatusCode::CREATED
    );
}

#[sqlx::test]
async fn requests_over_the_rate_limit_get_429_with_retry_after(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            rate_per_minute: 60,
            rate_burst: 3,
            ..Options::default()
        },
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(app.get("/api/v1/projects").await);
    }
    assert!(statuses[..3].iter().all(|r| r.status() == StatusCode::OK));
    let limited = statuses.pop().unwrap();
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    expect_problem(limited, StatusCode::TOO_MANY_REQUESTS).await;

    // Unauthenticated failures count per client address.
    let mut last = None;
    for _ in 0..4 {
        last = Some(
            app.request_as(Some("mpt_guess"), Method::GET, "/api/v1/projects")
                .send()
                .await
                .unwrap()
                .status(),
        );
    }
    assert_eq!(last, Some(StatusCode::TOO_MANY_REQUESTS));
}

#[sqlx::test]
async fn metrics_can_require_a_platform_admin(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            metrics_require_auth: true,
            ..Options::default()
        },
    )
    .await;
    assert_eq!(
        app.request_as(None, Method::GET, "/metrics")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::UNAUTHORIZED
    );
    app.create_project("team-a").await;
    let admin = app.token_for("team-a", "admin", "admin").await;
    assert_eq!(
        app.request_as(Some(&admin), Method::GET, "/metrics")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(app.get("/metrics").await.status(), StatusCode::OK);
}

#[sqlx::test]
async fn only_a_platform_admin_adopts_a_namespace(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let body = json!({"name": "legacy", "namespace": "ml-legacy", "adoptNamespace": true});
    // A project admin is refused, and nothing is written.
    let project_admin = app.token_for("team-a", "admin", "admin").await;
    let refused = app
        .request_as(Some(&project_admin), Method::POST, "/api/v1/projects")
        .json(&body)
        .send()
        .await
        .unwrap();
    expect_problem(refused, StatusCode::FORBIDDEN).await;
    assert_eq!(app.count_rows("project").await, 1);
    let response = app
        .post_json(
            "/api/v1/projects",
            &json!({"name": "legacy", "namespace": "ml-legacy", "adoptNamespace": true}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let project: Value = response.json().await.unwrap();
    assert_eq!(project["namespaceAdopted"], true);
    assert_eq!(project["namespace"], "ml-legacy");
}

#[sqlx::test]
async fn no_spec_field_grants_privilege_on_the_node(pool: PgPool) {
    let _ = pool;
    let document = modelplane::api::openapi_document();
    for forbidden in [
        "hostPath",
        "privileged",
        "hostNetwork",
        "hostPID",
        "serviceAccountName",
        "capabilities",
        "runAsUser",
    ] {
        assert!(
            !document.contains(&format!("\"{forbidden}\"")),
            "the API exposes {forbidden}"
        );
    }
    let parsed: Value = serde_json::from_str(&document).unwrap();
    for (path, item) in parsed["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let secured = operation["security"][0].get("bearer").is_some();
            // How to sign in is the one operation under /api/v1 open to anyone.
            let protected = path.starts_with("/api/v1/") && path != "/api/v1/auth/config";
            assert_eq!(secured, protected, "{method} {path}");
        }
    }
    assert_eq!(
        parsed["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}

// ---- OIDC ----

pub(crate) const ISSUER: &str = "https://idp.example.test";
pub(crate) const AUDIENCE: &str = "modelplane";

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/oidc")
        .join(name)
}

pub(crate) fn sign(kid: &str, claims: &Value) -> String {
    let pem = std::fs::read(fixture(&format!("{kid}.pem"))).unwrap();
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    encode(&header, claims, &EncodingKey::from_rsa_pem(&pem).unwrap()).unwrap()
}

pub(crate) fn claims(sub: &str, groups: &[&str]) -> Value {
    let now = Utc::now().timestamp();
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "groups": groups, "iat": now, "exp": now + 600})
}

/// OIDC with keys from `jwks`, `platform-team` members as platform admins, and no portal
/// client.
pub(crate) fn oidc_config(jwks: PathBuf) -> OidcConfig {
    OidcConfig {
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        jwks: JwksSource::File(jwks),
        username_claim: "sub".into(),
        groups_claim: "groups".into(),
        platform_admin_groups: vec!["platform-team".into()],
        client_id: None,
        scopes: vec!["openid".into()],
    }
}

pub(crate) async fn oidc_app(pool: PgPool, jwks: PathBuf) -> TestApp {
    let oidc = oidc_config(jwks);
    TestApp::spawn_with(
        pool,
        Options {
            oidc: Some(oidc),
            ..Options::default()
        },
    )
    .await
}

#[sqlx::test]
async fn oidc_users_get_roles_from_user_and_group_bindings(pool: PgPool) {
    let app = oidc_app(pool, fixture("jwks-key1.json")).await;
    app.create_project("team-a").await;
    app.create_deployment("team-a", "qwen").await;
    for binding in [
        json!({"subjectKind": "group", "subject": "nlp", "role": "viewer"}),
        json!({"subjectKind": "user", "subject": "alice", "role": "editor"}),
    ] {
        assert_eq!(
            app.post_json("/api/v1/projects/team-a/role-bindings", &binding)
                .await
                .status(),
            StatusCode::CREATED
        );
    }
    let alice = sign("key1", &claims("alice", &["nlp"]));
    let bob = sign("key1", &claims("bob", &["nlp"]));
    let carol = sign("key1", &claims("carol", &["finance"]));
    let patch = |token: String| {
        app.request_as(
            Some(&token),
            Method::PATCH,
            "/api/v1/projects/team-a/deployments/qwen",
        )
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"spec": {"replicas": 2}}"#)
        .send()
    };
    assert_eq!(
        patch(alice.clone()).await.unwrap().status(),
        StatusCode::OK,
        "alice is an editor"
    );
    assert_eq!(
        patch(bob.clone()).await.unwrap().status(),
        StatusCode::FORBIDDEN,
        "bob is a viewer through nlp"
    );
    assert_eq!(
        patch(carol.clone()).await.unwrap().status(),
        StatusCode::NOT_FOUND,
        "carol has no role"
    );
    let read = app
        .request_as(
            Some(&bob),
            Method::GET,
            "/api/v1/projects/team-a/deployments/qwen",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    let events: Value = app
        .get("/api/v1/projects/team-a/deployments/qwen/events")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(events["items"][1]["actor"], "user:alice");
    let me: Value = app
        .request_as(Some(&bob), Method::GET, "/api/v1/whoami")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        me,
        json!({"name": "user:bob", "kind": "user", "platformAdmin": false, "groups": ["nlp"], "project": null, "role": null})
    );

    let root = sign("key1", &claims("root", &["platform-team"]));
    let created = app
        .request_as(Some(&root), Method::POST, "/api/v1/projects")
        .json(&json!({"name": "team-z"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        created.status(),
        StatusCode::CREATED,
        "platform-team members are platform admins"
    );
}

#[sqlx::test]
async fn oidc_tokens_with_a_wrong_issuer_audience_expiry_algorithm_or_signature_are_401(
    pool: PgPool,
) {
    let app = oidc_app(pool, fixture("jwks-key1.json")).await;
    app.create_project("team-a").await;
    app.post_json(
        "/api/v1/projects/team-a/role-bindings",
        &json!({"subjectKind": "user", "subject": "alice", "role": "admin"}),
    )
    .await;
    let good = claims("alice", &[]);
    let ok = app
        .request_as(
            Some(&sign("key1", &good)),
            Method::GET,
            "/api/v1/projects/team-a",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);

    let mut wrong_issuer = good.clone();
    wrong_issuer["iss"] = json!("https://evil.example.test");
    let mut wrong_audience = good.clone();
    wrong_audience["aud"] = json!("someone-else");
    let mut expired = good.clone();
    expired["exp"] = json!(Utc::now().timestamp() - 3600);
    let hs256 = encode(
        &Header::new(Algorithm::HS256),
        &good,
        &jsonwebtoken::EncodingKey::from_secret(b"guess"),
    )
    .unwrap();
    let mut forged = sign("key1", &good);
    forged.truncate(forged.len() - 4);
    forged.push_str("AAAA");
    // Signed by key2, which the JWKS file does not publish.
    let unknown_key = sign("key2", &good);
    for (what, token) in [
        ("issuer", sign("key1", &wrong_issuer)),
        ("audience", sign("key1", &wrong_audience)),
        ("expired", sign("key1", &expired)),
        ("algorithm", hs256),
        ("signature", forged),
        ("unknown key", unknown_key),
    ] {
        let response = app
            .request_as(Some(&token), Method::GET, "/api/v1/projects/team-a")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{what}");
    }
}

#[sqlx::test]
async fn oidc_keys_rotate_without_a_restart(pool: PgPool) {
    let dir = std::env::temp_dir().join(format!("modelplane-jwks-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let jwks = dir.join("jwks.json");
    std::fs::copy(fixture("jwks-key1.json"), &jwks).unwrap();
    let app = oidc_app(pool, jwks.clone()).await;
    app.create_project("team-a").await;
    app.post_json(
        "/api/v1/projects/team-a/role-bindings",
        &json!({"subjectKind": "user", "subject": "alice", "role": "viewer"}),
    )
    .await;
    let with_key2 = sign("key2", &claims("alice", &[]));
    let before = app
        .request_as(Some(&with_key2), Method::GET, "/api/v1/projects/team-a")
        .send()
        .await
        .unwrap();
    assert_eq!(
        before.status(),
        StatusCode::UNAUTHORIZED,
        "key2 is not published yet"
    );
    // The provider publishes key2; the next unknown-key token reloads the keys (at most every 5 s).
    std::fs::copy(fixture("jwks-key1-key2.json"), &jwks).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let status = app
            .request_as(Some(&with_key2), Method::GET, "/api/v1/projects/team-a")
            .send()
            .await
            .unwrap()
            .status();
        if status == StatusCode::OK {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "key2 was never picked up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `tracing` writer that keeps everything written to it.
#[derive(Clone, Default)]
pub(crate) struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[sqlx::test]
async fn oidc_keys_can_come_from_a_jwks_url(pool: PgPool) {
    let jwks = std::fs::read_to_string(fixture("jwks-key1.json")).unwrap();
    let router = axum::Router::new().route(
        "/jwks",
        axum::routing::get(move || async move { jwks.clone() }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let oidc = OidcConfig {
        jwks: JwksSource::Url(format!("http://{addr}/jwks")),
        ..oidc_config(PathBuf::new())
    };
    let app = TestApp::spawn_with(
        pool,
        Options {
            oidc: Some(oidc),
            ..Options::default()
        },
    )
    .await;
    let token = sign("key1", &claims("root", &["platform-team"]));
    let me: Value = app
        .request_as(Some(&token), Method::GET, "/api/v1/whoami")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["platformAdmin"], true);
}

#[sqlx::test]
async fn whoami_names_a_project_tokens_project_and_role(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let token = app.token_for("team-a", "ci", "editor").await;
    let me: Value = app
        .request_as(Some(&token), Method::GET, "/api/v1/whoami")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["name"], "token:ci");
    assert_eq!(me["project"], "team-a");
    assert_eq!(me["role"], "editor");
    assert_eq!(me["platformAdmin"], false);
    let admin: Value = app.get("/api/v1/whoami").await.json().await.unwrap();
    assert_eq!(admin["project"], Value::Null);
    assert_eq!(admin["role"], "platform-admin");
}

/// Use is recorded at most once a minute, so most requests make no write (and no round trip
/// for one): the first use sets `lastUsedAt`, a second within the minute leaves it, and a use
/// after a minute moves it on.
#[sqlx::test]
async fn token_use_is_recorded_at_most_once_a_minute(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    let secret = app.token_for("team-a", "ci", "viewer").await;
    let last_used = || async {
        let tokens: Value = app
            .get("/api/v1/projects/team-a/tokens")
            .await
            .json()
            .await
            .unwrap();
        tokens["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "ci")
            .unwrap()["lastUsedAt"]
            .clone()
    };
    let call = || async {
        let response = app
            .request_as(Some(&secret), Method::GET, "/api/v1/whoami")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    };
    assert_eq!(last_used().await, Value::Null);
    call().await;
    let first = last_used().await;
    assert!(first.is_string(), "{first}");
    call().await;
    assert_eq!(
        last_used().await,
        first,
        "a second use within the minute writes nothing"
    );

    // A minute passes (as the database sees it); the API's access cache, which remembers
    // the last recorded use, is told to forget as any access change would tell it.
    sqlx::query(
        "update api_token set last_used_at = now() - interval '2 minutes' where name = 'ci'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let moved_back = last_used().await;
    sqlx::query("select pg_notify('modelplane_access', 'test')")
        .execute(&pool)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let after = loop {
        call().await;
        let after = last_used().await;
        if after != moved_back {
            break after;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a use after a minute is recorded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let after: chrono::DateTime<Utc> = after.as_str().unwrap().parse().unwrap();
    assert!(Utc::now() - after < Duration::seconds(30));
}

/// Polls `request` until it answers `status`, for at most five seconds.
async fn answers_within(
    status: StatusCode,
    request: impl Fn() -> reqwest::RequestBuilder,
) -> Result<(), StatusCode> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let got = request().send().await.unwrap().status();
        if got == status {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(got);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Each API process caches tokens and projects (src/service/access_cache.rs). A revoke or a
/// project deletion takes effect on the next request of the process that made it, and on
/// every other process as soon as the access trigger's notification reaches it.
#[sqlx::test]
async fn a_revoke_reaches_every_api_process_whatever_they_cached(pool: PgPool) {
    let a = TestApp::spawn(pool.clone()).await;
    let b = TestApp::spawn(pool.clone()).await;
    a.create_project("team-a").await;
    a.create_project("team-b").await;
    let token = a.token_for("team-a", "ci", "viewer").await;
    let path = "/api/v1/projects/team-a/deployments";
    for app in [&a, &b] {
        for _ in 0..3 {
            let got = app.request_as(Some(&token), Method::GET, path).send().await;
            assert_eq!(got.unwrap().status(), StatusCode::OK);
        }
    }
    a.revoke_token("team-a", "ci").await;
    let on_a = a.request_as(Some(&token), Method::GET, path).send().await;
    assert_eq!(
        on_a.unwrap().status(),
        StatusCode::UNAUTHORIZED,
        "the process that revoked refuses the very next request"
    );
    answers_within(StatusCode::UNAUTHORIZED, || {
        b.request_as(Some(&token), Method::GET, path)
    })
    .await
    .expect("the other process follows the revoke");

    // A project both processes have cached, deleted through one of them.
    for app in [&a, &b] {
        assert_eq!(
            app.get("/api/v1/projects/team-b/deployments")
                .await
                .status(),
            StatusCode::OK
        );
    }
    let deleted = a
        .request(Method::DELETE, "/api/v1/projects/team-b")
        .send()
        .await;
    assert_eq!(deleted.unwrap().status(), StatusCode::NO_CONTENT);
    assert_eq!(
        a.get("/api/v1/projects/team-b/deployments").await.status(),
        StatusCode::NOT_FOUND
    );
    answers_within(StatusCode::NOT_FOUND, || {
        b.request(Method::GET, "/api/v1/projects/team-b/deployments")
    })
    .await
    .expect("the other process forgets the deleted project");
}

/// The same for an OIDC user's role: a binding removed through one process stops the
/// user's next request there, and on the other process within moments.
#[sqlx::test]
async fn a_removed_role_binding_reaches_every_api_process_whatever_they_cached(pool: PgPool) {
    let a = oidc_app(pool.clone(), fixture("jwks-key1.json")).await;
    let b = oidc_app(pool.clone(), fixture("jwks-key1.json")).await;
    a.create_project("team-a").await;
    let created = a
        .post_json(
            "/api/v1/projects/team-a/role-bindings",
            &json!({"subjectKind": "user", "subject": "alice", "role": "viewer"}),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let binding: Value = created.json().await.unwrap();
    let alice = sign("key1", &claims("alice", &[]));
    let path = "/api/v1/projects/team-a/deployments";
    for app in [&a, &b] {
        for _ in 0..3 {
            let got = app.request_as(Some(&alice), Method::GET, path).send().await;
            assert_eq!(got.unwrap().status(), StatusCode::OK);
        }
    }
    let removed = a
        .request(
            Method::DELETE,
            &format!(
                "/api/v1/projects/team-a/role-bindings/{}",
                binding["id"].as_str().unwrap()
            ),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::NO_CONTENT);
    let on_a = a.request_as(Some(&alice), Method::GET, path).send().await;
    assert_eq!(on_a.unwrap().status(), StatusCode::NOT_FOUND);
    answers_within(StatusCode::NOT_FOUND, || {
        b.request_as(Some(&alice), Method::GET, path)
    })
    .await
    .expect("the other process follows the removed binding");
}
