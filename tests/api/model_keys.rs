//! Model keys over REST and GraphQL: the secret shown once and stored hashed, a scope of
//! existing deployments, every wrong field named, revocation, the audit log, the role each
//! operation needs.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::access::LogCapture;
use crate::common::{ADMIN_TOKEN, TestApp, error_fields, expect_problem};

async fn create_key(app: &TestApp, project: &str, body: Value) -> Value {
    let response = app
        .post_json(&format!("/api/v1/projects/{project}/keys"), &body)
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.unwrap()
}

#[sqlx::test]
async fn a_key_is_shown_once_stored_hashed_listed_and_revoked(pool: PgPool) {
    let logs = LogCapture::default();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(logs.clone())
            .finish(),
    );
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let created = create_key(
        &app,
        "team-a",
        json!({"name": "chat-app", "deployments": ["qwen"], "requestsPerMinute": 600,
               "dailyTokenBudget": 1000000}),
    )
    .await;
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("mpk_") && secret.len() == 47, "{secret}");
    assert_eq!(created["prefix"], &secret[..12]);
    assert_eq!(created["project"], "team-a");
    assert_eq!(created["deployments"], json!(["qwen"]));
    assert_eq!(created["requestsPerMinute"], 600);
    assert_eq!(created["dailyTokenBudget"], 1_000_000);
    assert!(created["expiresAt"].is_null(), "keys last until revoked");
    assert_eq!(created["createdBy"], "token:bootstrap");

    // Listed and read without the secret; only its SHA-256 is stored.
    let id = created["id"].as_str().unwrap().to_owned();
    let list = app.get("/api/v1/projects/team-a/keys").await;
    assert_eq!(list.status(), StatusCode::OK);
    let list: Value = list.json().await.unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    assert_eq!(list["items"][0]["id"], id.as_str());
    assert!(!list.to_string().contains(&secret) && list["items"][0].get("secret").is_none());
    let one: Value = app
        .get(&format!("/api/v1/projects/team-a/keys/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(one["name"], "chat-app");
    let stored: Vec<String> = sqlx::query_scalar("select key_hash from model_key")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        stored,
        vec![modelplane::service::tokens::hash_secret(&secret)]
    );

    // A model key manages nothing: the API refuses it as a credential.
    let refused = app
        .request_as(Some(&secret), Method::GET, "/api/v1/projects/team-a")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);

    // Another project sees no such key.
    app.create_project("team-b").await;
    expect_problem(
        app.request(
            Method::DELETE,
            &format!("/api/v1/projects/team-b/keys/{id}"),
        )
        .send()
        .await
        .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;

    let revoked = app
        .request(
            Method::DELETE,
            &format!("/api/v1/projects/team-a/keys/{id}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);
    let revoked: Value = revoked.json().await.unwrap();
    assert!(revoked["revokedAt"].is_string());
    // Revoked once; the name is free again; live lists leave it out.
    expect_problem(
        app.request(
            Method::DELETE,
            &format!("/api/v1/projects/team-a/keys/{id}"),
        )
        .send()
        .await
        .unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
    create_key(&app, "team-a", json!({"name": "chat-app"})).await;
    let live: Value = app
        .get("/api/v1/projects/team-a/keys?live=true")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(live["items"].as_array().unwrap().len(), 1);
    assert!(live["items"][0]["deployments"].is_null());

    let audit: Value = app
        .get("/api/v1/projects/team-a/audit")
        .await
        .json()
        .await
        .unwrap();
    let actions: Vec<(&str, &str)> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"].as_str().unwrap().starts_with("ModelKey"))
        .map(|e| (e["kind"].as_str().unwrap(), e["actor"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [
            ("ModelKeyCreated", "token:bootstrap"),
            ("ModelKeyRevoked", "token:bootstrap"),
            ("ModelKeyCreated", "token:bootstrap")
        ]
    );
    let captured = logs.text();
    assert!(captured.contains("model key created"), "the capture works");
    assert!(!captured.contains(&secret), "the secret was logged");
    assert!(!captured.contains(ADMIN_TOKEN));
}

#[sqlx::test]
async fn every_wrong_field_is_named_and_nothing_is_written(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let problem = expect_problem(
        app.post_json(
            "/api/v1/projects/team-a/keys",
            &json!({"name": "no good", "deployments": ["qwen", "nope", "qwen"],
                    "requestsPerMinute": 0, "dailyTokenBudget": -5,
                    "expiresAt": "2020-01-01T00:00:00Z"}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(
        error_fields(&problem),
        [
            "name",
            "deployments[2]",
            "requestsPerMinute",
            "dailyTokenBudget",
            "expiresAt",
            "deployments[1]"
        ]
    );
    assert!(
        problem
            .to_string()
            .contains("project `team-a` has no deployment `nope`")
    );
    let unknown = expect_problem(
        app.post_json(
            "/api/v1/projects/team-a/keys",
            &json!({"name": "x", "role": "admin"}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(unknown.to_string().contains("role"), "{unknown}");
    create_key(&app, "team-a", json!({"name": "twice"})).await;
    let conflict = expect_problem(
        app.post_json("/api/v1/projects/team-a/keys", &json!({"name": "twice"}))
            .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(error_fields(&conflict), ["name"]);
    assert_eq!(app.count_rows("model_key").await, 1);
    assert_eq!(
        sqlx::query_scalar::<_, i64>(
            "select count(*) from audit_event where kind = 'ModelKeyCreated'"
        )
        .fetch_one(&app.pool)
        .await
        .unwrap(),
        1
    );
}

#[sqlx::test]
async fn only_project_admins_hand_out_keys(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let editor = app.token_for("team-a", "ed", "editor").await;
    let admin = app.token_for("team-a", "ad", "admin").await;
    for (method, path, body) in [
        (Method::GET, "/api/v1/projects/team-a/keys", None),
        (
            Method::POST,
            "/api/v1/projects/team-a/keys",
            Some(json!({"name": "k"})),
        ),
    ] {
        let mut request = app.request_as(Some(&editor), method.clone(), path);
        if let Some(body) = &body {
            request = request.json(body);
        }
        assert_eq!(
            request.send().await.unwrap().status(),
            StatusCode::FORBIDDEN,
            "{method} {path}"
        );
    }
    let created = app
        .request_as(Some(&admin), Method::POST, "/api/v1/projects/team-a/keys")
        .json(&json!({"name": "k"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(app.count_rows("model_key").await, 1);
}

#[sqlx::test]
async fn graphql_creates_lists_and_revokes_keys(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let gql = |query: &'static str, variables: Value| {
        let app = &app;
        async move {
            app.request(Method::POST, "/graphql")
                .json(&json!({"query": query, "variables": variables}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let created = gql(
        "mutation($p: String!) { createModelKey(project: $p, name: \"dash\", requestsPerMinute: 60) { secret key { id prefix requestsPerMinute deployments } } }",
        json!({"p": "team-a"}),
    )
    .await;
    let key = &created["data"]["createModelKey"];
    let secret = key["secret"].as_str().unwrap();
    assert!(secret.starts_with(key["key"]["prefix"].as_str().unwrap()));
    assert_eq!(key["key"]["requestsPerMinute"], 60);
    assert!(key["key"]["deployments"].is_null());
    let id = key["key"]["id"].as_str().unwrap().to_owned();

    let listed = gql(
        "query($p: String!) { project(name: $p) { modelKeys(live: true) { edges { node { id name } } } } }",
        json!({"p": "team-a"}),
    )
    .await;
    assert_eq!(
        listed["data"]["project"]["modelKeys"]["edges"][0]["node"]["id"],
        id.as_str()
    );
    let bad = gql(
        "mutation($p: String!) { createModelKey(project: $p, name: \"x\", deployments: [\"ghost\"]) { secret } }",
        json!({"p": "team-a"}),
    )
    .await;
    assert_eq!(
        bad["errors"][0]["extensions"]["code"], "INVALID_INPUT",
        "{bad}"
    );
    assert!(bad.to_string().contains("deployments[0]"), "{bad}");
    let revoked = gql(
        "mutation($p: String!, $id: UUID!) { revokeModelKey(project: $p, id: $id) { revokedAt } }",
        json!({"p": "team-a", "id": id}),
    )
    .await;
    assert!(
        revoked["data"]["revokeModelKey"]["revokedAt"].is_string(),
        "{revoked}"
    );
}

/// The key check served as the Gateway calls it (the HTTP protocol of the routes'
/// `ExternalAuth` filter), on a port of its own; its base URL.
async fn serve_check(
    pool: PgPool,
) -> (
    String,
    std::sync::Arc<modelplane::service::key_check::KeyCheck>,
) {
    let stop = tokio_util::sync::CancellationToken::new();
    let check = modelplane::service::key_check::KeyCheck::start(pool, stop.clone())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = modelplane::api::authz::router(check.clone());
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
        drop(stop);
    });
    (format!("http://{addr}"), check)
}

async fn deployment_id(app: &TestApp, project: &str, name: &str) -> String {
    let response = app.create_deployment(project, name).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// Asks the check about a request to deployment `id` with the given headers.
async fn ask(base: &str, id: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    static CLIENT: std::sync::LazyLock<reqwest::Client> =
        std::sync::LazyLock::new(reqwest::Client::new);
    let mut request = CLIENT
        .post(format!("{base}/check/{id}/v1/chat/completions"))
        .header("content-length", "0");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Creates a key; its secret and id.
pub(crate) async fn secret_of(app: &TestApp, project: &str, body: Value) -> (String, String) {
    let created = create_key(app, project, body).await;
    (
        created["secret"].as_str().unwrap().to_owned(),
        created["id"].as_str().unwrap().to_owned(),
    )
}

#[sqlx::test]
async fn the_check_lets_a_key_call_only_its_projects_deployments_in_scope(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    app.create_project("team-b").await;
    let qwen = deployment_id(&app, "team-a", "qwen").await;
    let llama = deployment_id(&app, "team-a", "llama").await;
    let theirs = deployment_id(&app, "team-b", "qwen").await;
    let (all, all_id) = secret_of(&app, "team-a", json!({"name": "all"})).await;
    let (only_qwen, _) = secret_of(
        &app,
        "team-a",
        json!({"name": "q", "deployments": ["qwen"]}),
    )
    .await;
    let (base, _check) = serve_check(pool).await;

    // Neither header, another scheme, an unknown key: 401, the same answer for each.
    for headers in [
        vec![],
        vec![("authorization", "Basic dXNlcjpwYXNz")],
        vec![("authorization", "Bearer mpk_not-a-key")],
        vec![("x-api-key", "mpk_not-a-key")],
    ] {
        let refused = ask(&base, &qwen, &headers).await;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "{headers:?}");
        assert_eq!(
            refused.headers()["www-authenticate"],
            "Bearer realm=\"modelplane\""
        );
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
    }
    let unknown: Value = ask(&base, &qwen, &[("authorization", "Bearer mpk_x")])
        .await
        .json()
        .await
        .unwrap();
    let huge = "k".repeat(10_000);
    let oversized = ask(&base, &qwen, &[("x-api-key", huge.as_str())]).await;
    assert_eq!(oversized.status(), StatusCode::UNAUTHORIZED);

    // The project's key, as OpenAI clients send it and as x-api-key: 200, naming the key
    // and project for the model server, and asking Envoy to drop the key itself.
    let bearer = format!("Bearer {all}");
    for headers in [
        [("authorization", bearer.as_str())],
        [("x-api-key", all.as_str())],
    ] {
        let allowed = ask(&base, &qwen, &headers).await;
        assert_eq!(allowed.status(), StatusCode::OK);
        let h = allowed.headers();
        assert_eq!(h["x-modelplane-key"], "all");
        assert_eq!(h["x-modelplane-key-id"], all_id.as_str());
        assert_eq!(h["x-modelplane-project"], "team-a");
        assert_eq!(
            h["x-envoy-auth-headers-to-remove"],
            "authorization,x-api-key"
        );
        assert!(
            !format!("{h:?}").contains(&all),
            "the secret is never echoed"
        );
    }
    assert_eq!(
        ask(&base, &llama, &[("x-api-key", &all)]).await.status(),
        StatusCode::OK
    );
    // Out of scope, another project's deployment, a deployment that does not exist: 403.
    let bearer_q = format!("Bearer {only_qwen}");
    assert_eq!(
        ask(&base, &qwen, &[("authorization", &bearer_q)])
            .await
            .status(),
        StatusCode::OK
    );
    for id in [
        llama.as_str(),
        theirs.as_str(),
        "00000000-0000-7000-8000-000000000000",
    ] {
        let refused = ask(&base, id, &[("authorization", &bearer_q)]).await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{id}");
    }

    // Revoked: refused like a key that never was; a key made now works at once.
    let revoked = app
        .request(
            Method::DELETE,
            &format!("/api/v1/projects/team-a/keys/{all_id}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);
    crate::common::wait_until("the revoked key refused", || async {
        ask(&base, &qwen, &[("x-api-key", &all)]).await.status() == StatusCode::UNAUTHORIZED
    })
    .await;
    let after: Value = ask(&base, &qwen, &[("x-api-key", &all)])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        after, unknown,
        "a revoked key is told apart from no key at all"
    );
    let (fresh, _) = secret_of(&app, "team-a", json!({"name": "fresh"})).await;
    crate::common::wait_until("the new key let through", || async {
        ask(&base, &qwen, &[("x-api-key", &fresh)]).await.status() == StatusCode::OK
    })
    .await;
}

/// A flood of bad keys reaches memory only: with no database connection to be had, the
/// check still answers every bad key (401), and only a good key, which needs its
/// deployment read, finds none (503: it fails closed).
#[sqlx::test]
async fn bad_keys_cost_no_database_round_trip(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    let qwen = deployment_id(&app, "team-a", "qwen").await;
    let (good, _) = secret_of(&app, "team-a", json!({"name": "good"})).await;
    let small = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(std::time::Duration::from_millis(300))
        .connect_with((*pool.connect_options()).clone())
        .await
        .unwrap();
    let (base, check) = serve_check(small.clone()).await;
    assert_eq!(check.keys(), 1);
    // Every connection the check could use, taken.
    let mut held = Vec::new();
    while let Ok(connection) = small.acquire().await {
        held.push(connection);
    }
    for i in 0..500 {
        let bad = format!("mpk_guess-{i}");
        let refused = ask(&base, &qwen, &[("x-api-key", &bad)]).await;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    }
    let good = ask(&base, &qwen, &[("x-api-key", &good)]).await;
    assert_eq!(good.status(), StatusCode::SERVICE_UNAVAILABLE);
    drop(held);
}

/// `requestsPerMinute`: past it 429 with Retry-After; two processes share the count through
/// the database, each seeing the other's as of its last flush.
#[sqlx::test]
async fn a_keys_rate_is_shared_by_every_process(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    let qwen = deployment_id(&app, "team-a", "qwen").await;
    let (limited, key_id) = secret_of(
        &app,
        "team-a",
        json!({"name": "slow", "requestsPerMinute": 5}),
    )
    .await;
    let (free, _) = secret_of(&app, "team-a", json!({"name": "free"})).await;
    let (a, check_a) = serve_check(pool.clone()).await;
    let (b, check_b) = serve_check(pool.clone()).await;
    // One minute's window for the whole test: start early in a minute.
    crate::common::wait_until("early in a minute", || async {
        chrono::Utc::now().timestamp() % 60 < 45
    })
    .await;

    for _ in 0..5 {
        assert_eq!(
            ask(&a, &qwen, &[("x-api-key", &limited)]).await.status(),
            StatusCode::OK
        );
    }
    let over = ask(&a, &qwen, &[("x-api-key", &limited)]).await;
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = over.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let body: Value = over.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    // Another key is not held back by it.
    assert_eq!(
        ask(&a, &qwen, &[("x-api-key", &free)]).await.status(),
        StatusCode::OK
    );

    // Process B has not heard of A's five yet: the documented tolerance, one request here.
    check_a.flush().await.unwrap();
    assert_eq!(
        ask(&b, &qwen, &[("x-api-key", &limited)]).await.status(),
        StatusCode::OK
    );
    check_b.flush().await.unwrap();
    assert_eq!(
        ask(&b, &qwen, &[("x-api-key", &limited)]).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let counted: i64 = sqlx::query_scalar(
        "select sum(requests)::bigint from model_key_usage where key_id = $1::uuid",
    )
    .bind(&key_id)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(counted, 6);
    let used: Option<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("select last_used_at from model_key where id = $1::uuid")
            .bind(&key_id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert!(used.is_some(), "lastUsedAt written with the counts");

    // The key's usage: today's six, every day of the range present.
    let usage: Value = app
        .get(&format!(
            "/api/v1/projects/team-a/keys/{key_id}/usage?days=7"
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(usage["requests"], 6, "{usage}");
    assert_eq!(usage["key"], "slow");
    let daily = usage["daily"].as_array().unwrap();
    assert_eq!(daily.len(), 7);
    assert_eq!(daily[6]["requests"], 6);
    assert_eq!(daily[6]["date"], usage["to"]);
    assert!(daily[..6].iter().all(|d| d["requests"] == 0));
    let bad = expect_problem(
        app.get(&format!(
            "/api/v1/projects/team-a/keys/{key_id}/usage?days=0"
        ))
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&bad), ["days"]);
    let graphql: Value = app
        .request(Method::POST, "/graphql")
        .json(&json!({"query": "query { project(name: \"team-a\") { modelKeys(live: true) { edges { node { name usage(days: 2) { requests daily { requests } } } } } } }"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let nodes = graphql["data"]["project"]["modelKeys"]["edges"]
        .as_array()
        .unwrap();
    let slow = nodes
        .iter()
        .find(|e| e["node"]["name"] == "slow")
        .unwrap_or_else(|| panic!("{graphql}"));
    assert_eq!(slow["node"]["usage"]["requests"], 6);
    assert_eq!(slow["node"]["usage"]["daily"].as_array().unwrap().len(), 2);
}
