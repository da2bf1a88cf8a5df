//! The portal's two server-side pieces: its files at `/` (with the SPA fallback and cache
//! headers) and the "try it" proxy that forwards one chat completion to a model server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::http::StatusCode as AxumStatus;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{Options, TestApp};

/// A built portal in a temporary directory: `index.html`, a favicon and one hashed asset.
fn built_portal() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("index.html"),
        "<!doctype html><title>modelplane</title><div id=root></div>",
    )
    .unwrap();
    std::fs::write(dir.path().join("favicon.svg"), "<svg/>").unwrap();
    std::fs::create_dir(dir.path().join("assets")).unwrap();
    std::fs::write(dir.path().join("assets/index-Ab12Cd.js"), "console.log(1)").unwrap();
    dir
}

async fn app_with_portal(pool: PgPool, dir: &tempfile::TempDir) -> TestApp {
    TestApp::spawn_with(
        pool,
        Options {
            web_dir: dir.path().to_owned(),
            ..Options::default()
        },
    )
    .await
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap())
        .unwrap_or("")
}

#[sqlx::test]
async fn the_portal_is_served_at_the_root_and_deep_links_open_the_app(pool: PgPool) {
    let dir = built_portal();
    let app = app_with_portal(pool, &dir).await;

    for path in ["/", "/projects/team-a/deployments/qwen", "/sign-in"] {
        let response = app
            .request_as(None, Method::GET, path)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert!(header(&response, "content-type").starts_with("text/html"));
        // index.html must be revalidated so a new build shows at once, and it may not be framed
        // or load anything from another origin.
        assert_eq!(header(&response, "cache-control"), "no-cache");
        assert!(header(&response, "content-security-policy").contains("default-src 'self'"));
        assert_eq!(header(&response, "x-frame-options"), "DENY");
        assert!(response.text().await.unwrap().contains("<div id=root>"));
    }

    let asset = app
        .request_as(None, Method::GET, "/assets/index-Ab12Cd.js")
        .send()
        .await
        .unwrap();
    assert_eq!(asset.status(), StatusCode::OK);
    assert!(header(&asset, "content-type").contains("javascript"));
    assert_eq!(
        header(&asset, "cache-control"),
        "public, max-age=31536000, immutable"
    );

    let favicon = app
        .request_as(None, Method::GET, "/favicon.svg")
        .send()
        .await
        .unwrap();
    assert_eq!(favicon.status(), StatusCode::OK);
    assert_eq!(header(&favicon, "content-type"), "image/svg+xml");
    assert_eq!(header(&favicon, "cache-control"), "no-cache");
}

#[sqlx::test]
async fn a_missing_asset_and_unknown_api_paths_are_404s_not_the_app(pool: PgPool) {
    let dir = built_portal();
    let app = app_with_portal(pool, &dir).await;

    for path in [
        "/assets/index-gone.js",
        "/api/v1/nothing-here",
        "/api",
        "/graphql/nothing",
        "/metrics/x",
    ] {
        let response = app.get(path).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        assert_eq!(
            header(&response, "content-type"),
            "application/problem+json",
            "{path}"
        );
    }
    // Only reads fall back to the app.
    let post = app.post_json("/projects/x", &json!({})).await;
    assert_eq!(post.status(), StatusCode::NOT_FOUND);
    // Path traversal out of the directory finds nothing.
    let traversal = app.get("/assets/..%2f..%2fetc%2fpasswd").await;
    assert_eq!(traversal.status(), StatusCode::NOT_FOUND);
}

#[sqlx::test]
async fn an_unbuilt_portal_says_how_to_build_it(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let response = app.request_as(None, Method::GET, "/").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = response.text().await.unwrap();
    assert!(body.contains("scripts/portal.sh"), "{body}");
    // The API is unaffected.
    assert_eq!(app.get("/api/v1/projects").await.status(), StatusCode::OK);
}

/// A model server that answers chat completions and records what it was sent: what an
/// attacker would point a route's hostname, or a forged status URL, at.
struct FakeModel {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Value>>>,
}

async fn fake_model() -> FakeModel {
    let received = Arc::new(Mutex::new(Vec::new()));
    let seen = received.clone();
    let app = axum::Router::new().fallback(move |Json(body): Json<Value>| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(body);
            (AxumStatus::OK, "{\"choices\": []}")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    FakeModel { addr, received }
}

/// Endpoints as the worker writes them, here all pointing at `url`.
async fn set_endpoints(pool: &PgPool, url: &str) {
    sqlx::query(
        "update model_deployment set status = jsonb_set(status, '{endpoints}', \
         jsonb_build_object('cluster', $1::text, 'external', jsonb_build_array($1::text), \
         'openaiBase', $1::text || '/v1')) where name = 'qwen'",
    )
    .bind(url)
    .execute(pool)
    .await
    .unwrap();
}

const CHAT: &str = "/api/v1/projects/team-a/deployments/qwen/chat/completions";

#[sqlx::test]
async fn try_it_needs_a_caller_of_the_project_and_a_chat_body(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    app.create_project("team-b").await;
    app.create_deployment("team-a", "qwen").await;
    let message = json!({"messages": [{"role": "user", "content": "Hi"}]});

    let anonymous = app
        .request_as(None, Method::POST, CHAT)
        .json(&message)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let outsider = app.token_for("team-b", "outsider", "admin").await;
    let other = app
        .request_as(Some(&outsider), Method::POST, CHAT)
        .json(&message)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::NOT_FOUND);

    for (body, field) in [
        (json!({"messages": "Hi"}), "messages"),
        (json!([1, 2]), "body"),
        (
            json!({"messages": [{"role": "user", "content": "Hi"}], "stream": true}),
            "stream",
        ),
    ] {
        let response = app.post_json(CHAT, &body).await;
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}"
        );
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["errors"][0]["field"], field, "{problem}");
    }

    // No endpoint yet: a conflict that says why.
    let early = app.post_json(CHAT, &message).await;
    assert_eq!(early.status(), StatusCode::CONFLICT);
    let problem: Value = early.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("no endpoint yet"),
        "{problem}"
    );
}

/// Security finding 4: "try it" followed the status's URL, which a route's hostname made
/// any address (another tenant's model, a metadata service). It now reaches only the
/// deployment's own Service, by an address modelplane builds, and echoes no upstream body.
#[sqlx::test]
async fn try_it_never_goes_where_a_status_url_or_route_points(pool: PgPool) {
    let message = json!({"messages": [{"role": "user", "content": "Hi"}]});
    let model = fake_model().await;
    // Through the API server (the default): without a cluster there is nowhere to go.
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    app.create_deployment("team-a", "qwen").await;
    set_endpoints(&pool, &format!("http://{}/b/demo", model.addr)).await;
    let response = app.post_json(CHAT, &message).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let problem: Value = response.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("needs a cluster connection"),
        "{problem}"
    );
    // In the cluster: the Service's own DNS name, which does not resolve here.
    let in_cluster = TestApp::spawn_with(
        pool.clone(),
        Options {
            chat_via: modelplane::service::chat::ChatVia::Cluster,
            ..Options::default()
        },
    )
    .await;
    let response = in_cluster.post_json(CHAT, &message).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let problem: Value = response.json().await.unwrap();
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("could not be reached"), "{detail}");
    assert!(!detail.contains(&model.addr.to_string()), "{detail}");
    assert!(
        model.received.lock().unwrap().is_empty(),
        "nothing reached the address the status named"
    );
}
