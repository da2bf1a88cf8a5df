//! Signing in and seeing one's own role: `GET /api/v1/auth/config` (how to sign in, open to
//! anyone), `GET /api/v1/projects/{p}/me` and GraphQL `project { myRole }` (the caller's
//! effective role, so the portal shows exactly the controls the API allows), and an OIDC
//! user's stream ending with their token and resuming with the refreshed one.

use std::time::Duration;

use chrono::Utc;
use modelplane::auth::OidcConfig;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::access::{AUDIENCE, ISSUER, claims, fixture, oidc_app, oidc_config, sign};
use crate::common::{Options, SseStream, TestApp, WsClient};

async fn sign_in_config(app: &TestApp, credential: Option<&str>) -> Value {
    let response = app
        .request_as(credential, Method::GET, "/api/v1/auth/config")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

#[sqlx::test]
async fn how_to_sign_in_is_open_to_anyone_and_names_the_portal_client(pool: PgPool) {
    // Tokens only.
    let plain = TestApp::spawn(pool.clone()).await;
    assert_eq!(sign_in_config(&plain, None).await, json!({"oidc": null}));
    // A portal client: what a browser needs for the code flow with PKCE, nothing secret.
    let portal = TestApp::spawn_with(
        pool,
        Options {
            oidc: Some(OidcConfig {
                client_id: Some("modelplane-portal".into()),
                scopes: vec![
                    "openid".into(),
                    "profile".into(),
                    "groups".into(),
                    "offline_access".into(),
                ],
                ..oidc_config(fixture("jwks-key1.json"))
            }),
            ..Options::default()
        },
    )
    .await;
    let expected = json!({"oidc": {
        "issuer": ISSUER,
        "clientId": "modelplane-portal",
        "audience": AUDIENCE,
        "scopes": ["openid", "profile", "groups", "offline_access"],
        "usernameClaim": "sub",
        "groupsClaim": "groups",
    }});
    assert_eq!(sign_in_config(&portal, None).await, expected);
    // A credential, even a bad one, changes nothing: the page before sign-in has none.
    assert_eq!(
        sign_in_config(&portal, Some("mpt_not-a-token")).await,
        expected
    );
}

#[sqlx::test]
async fn oidc_for_api_callers_alone_offers_no_single_sign_on(pool: PgPool) {
    let api_only = oidc_app(pool, fixture("jwks-key1.json")).await;
    assert_eq!(sign_in_config(&api_only, None).await, json!({"oidc": null}));
}

async fn me(app: &TestApp, credential: &str, project: &str) -> (StatusCode, Value) {
    let response = app
        .request_as(
            Some(credential),
            Method::GET,
            &format!("/api/v1/projects/{project}/me"),
        )
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

/// A group binding makes alice a viewer on one project and an editor on another; `me` and
/// `myRole` say so, and the API allows exactly that.
#[sqlx::test]
async fn me_says_the_callers_role_on_each_project_and_where_it_comes_from(pool: PgPool) {
    let app = oidc_app(pool, fixture("jwks-key1.json")).await;
    for (project, role) in [("team-a", "viewer"), ("team-b", "editor")] {
        app.create_project(project).await;
        assert_eq!(
            app.create_deployment(project, "qwen").await.status(),
            StatusCode::CREATED
        );
        let binding = json!({"subjectKind": "group", "subject": "nlp", "role": role});
        let created = app
            .post_json(
                &format!("/api/v1/projects/{project}/role-bindings"),
                &binding,
            )
            .await;
        assert_eq!(created.status(), StatusCode::CREATED);
    }
    let alice = sign("key1", &claims("alice", &["nlp"]));
    assert_eq!(
        me(&app, &alice, "team-a").await,
        (
            StatusCode::OK,
            json!({"project": "team-a", "name": "user:alice", "role": "viewer", "via": "role-binding"})
        )
    );
    assert_eq!(me(&app, &alice, "team-b").await.1["role"], "editor");
    // What `me` says is what the API does.
    for (project, allowed) in [
        ("team-a", StatusCode::FORBIDDEN),
        ("team-b", StatusCode::OK),
    ] {
        let scaled = app
            .request_as(
                Some(&alice),
                Method::POST,
                &format!("/api/v1/projects/{project}/deployments/qwen/scale"),
            )
            .json(&json!({"replicas": 2}))
            .send()
            .await
            .unwrap();
        assert_eq!(scaled.status(), allowed, "{project}");
    }
    let graphql: Value = app
        .request_as(Some(&alice), Method::POST, "/graphql")
        .json(&json!({"query": r#"{ a: project(name: "team-a") { myRole } b: project(name: "team-b") { myRole } }"#}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        graphql,
        json!({"data": {"a": {"myRole": "VIEWER"}, "b": {"myRole": "EDITOR"}}})
    );

    // No role: the project does not exist, as everywhere.
    let carol = sign("key1", &claims("carol", &["finance"]));
    let (status, problem) = me(&app, &carol, "team-a").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    // A project token's role, and a platform admin's (a token or a group member).
    let viewer = app.token_for("team-a", "dashboards", "viewer").await;
    assert_eq!(
        me(&app, &viewer, "team-a").await.1,
        json!({"project": "team-a", "name": "token:dashboards", "role": "viewer", "via": "token"})
    );
    assert_eq!(me(&app, &viewer, "team-b").await.0, StatusCode::NOT_FOUND);
    let root = sign("key1", &claims("root", &["platform-team"]));
    assert_eq!(
        me(&app, &root, "team-b").await.1,
        json!({"project": "team-b", "name": "user:root", "role": "admin", "via": "platform-admin"})
    );

    // As of now: the binding removed, alice has no role on team-b any more.
    let bindings: Value = app
        .get("/api/v1/projects/team-b/role-bindings")
        .await
        .json()
        .await
        .unwrap();
    let id = bindings["items"][0]["id"].as_str().unwrap();
    let removed = app
        .request(
            Method::DELETE,
            &format!("/api/v1/projects/team-b/role-bindings/{id}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::NO_CONTENT);
    assert_eq!(me(&app, &alice, "team-b").await.0, StatusCode::NOT_FOUND);
}

/// An OIDC app where alice is a viewer of team-a, which has `qwen`.
async fn alice_viewing_qwen(pool: PgPool) -> TestApp {
    let app = oidc_app(pool, fixture("jwks-key1.json")).await;
    app.create_project("team-a").await;
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let binding = json!({"subjectKind": "user", "subject": "alice", "role": "viewer"});
    let created = app
        .post_json("/api/v1/projects/team-a/role-bindings", &binding)
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    app
}

/// A change while alice's stream is closed.
async fn scale_qwen_to_3(app: &TestApp) {
    let scaled = app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 3}),
        )
        .await;
    assert_eq!(scaled.status(), StatusCode::OK);
}

/// alice's token from the provider, ending at `exp` (Unix seconds).
fn alice_until(exp: i64) -> String {
    let mut claims = claims("alice", &[]);
    claims["exp"] = json!(exp);
    sign("key1", &claims)
}

/// An OIDC user's watch ends when their token expires (not only when access is removed),
/// and resumes with the refreshed token from its last event without losing any.
#[sqlx::test]
async fn an_oidc_users_watch_ends_with_the_token_and_resumes_with_the_next(pool: PgPool) {
    let app = alice_viewing_qwen(pool).await;
    let watch = |token: String, last: Option<i64>| {
        let mut request = app.request_as(
            Some(&token),
            Method::GET,
            "/api/v1/projects/team-a/deployments/qwen/watch",
        );
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last.to_string());
        }
        async move { SseStream::new(request.send().await.unwrap()) }
    };

    // A token that ends in three seconds (the API accepts it until then, and 30 s of clock
    // leeway after, for requests; a stream ends at `exp` itself).
    let mut stream = watch(alice_until(Utc::now().timestamp() + 3), None).await;
    let mut last = None;
    // Fails the test if the stream is still open well after the token's end.
    while let Some(event) = stream.next_within(Duration::from_secs(15)).await {
        last = event.id.or(last);
    }
    assert!(last.is_some(), "the first events carry the feed's position");
    // While nobody watched: a change.
    scale_qwen_to_3(&app).await;
    let refreshed = alice_until(Utc::now().timestamp() + 600);
    let mut resumed = watch(refreshed, last).await;
    let (_, spec) = resumed.until("spec").await;
    assert_eq!(spec.data["spec"]["replicas"], 3);
}

/// The same over a GraphQL subscription: it completes when the token ends, and a new
/// socket with the refreshed token resumes after the last `seq` seen.
#[sqlx::test]
async fn an_oidc_users_subscription_completes_with_the_token(pool: PgPool) {
    let app = alice_viewing_qwen(pool).await;
    let subscribe = |after: Option<i64>| {
        let after = after.map_or(String::new(), |seq| format!(", afterSeq: {seq}"));
        json!({"id": "1", "type": "subscribe", "payload": {"query": format!(
            r#"subscription {{ deploymentChanged(project: "team-a", name: "qwen"{after}) {{
                 seq deployment {{ spec }} }} }}"#
        )}})
    };

    let mut socket = WsClient::connect(&app, &alice_until(Utc::now().timestamp() + 3))
        .await
        .unwrap();
    socket.send(subscribe(None)).await;
    let mut last = None;
    // `next` fails the test if nothing comes within 20 s: the subscription must complete.
    loop {
        let message = socket.next().await.expect("the socket stays open");
        match message["type"].as_str() {
            Some("next") => {
                last = message["payload"]["data"]["deploymentChanged"]["seq"]
                    .as_i64()
                    .or(last)
            }
            Some("complete") => break,
            _ => panic!("unexpected {message}"),
        }
    }
    let last = last.expect("the state carries the feed's position");
    scale_qwen_to_3(&app).await;
    let mut renewed = WsClient::connect(&app, &alice_until(Utc::now().timestamp() + 600))
        .await
        .unwrap();
    renewed.send(subscribe(Some(last))).await;
    let message = renewed.next().await.unwrap();
    assert_eq!(message["type"], "next", "{message}");
    let change = &message["payload"]["data"]["deploymentChanged"];
    assert!(change["seq"].as_i64().unwrap() > last, "{message}");
    assert_eq!(change["deployment"]["spec"]["replicas"], 3, "{message}");
}
