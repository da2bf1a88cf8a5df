//! The key check's gRPC protocol (Envoy's ext_authz v3 `Check` over HTTP/2, on the same
//! listener as the HTTP protocol), and the limits beyond the request rate: requests in
//! flight at once, and the daily token budget checked from the metered tokens, which the
//! key's and the project's usage report.

use std::time::Duration;

use envoy_types::ext_authz::v3::pb::{CheckRequest, CheckResponse};
use envoy_types::pb::envoy::service::auth::v3::AttributeContext;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::common::{TestApp, valid_spec};
use crate::model_keys::secret_of;

type Check = std::sync::Arc<modelplane::service::key_check::KeyCheck>;

/// The key check on a listener as the server opens it (HTTP/1.1 and HTTP/2); its address.
async fn serve_check(pool: PgPool) -> (std::net::SocketAddr, Check) {
    let stop = tokio_util::sync::CancellationToken::new();
    let check = modelplane::service::key_check::KeyCheck::start(pool, stop.clone())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = modelplane::listener::ConnectionLimits {
        h2c: true,
        ..Default::default()
    };
    let app = modelplane::api::authz::router(check.clone());
    tokio::spawn(modelplane::listener::serve(
        listener,
        app,
        limits,
        async move { stop.cancelled().await },
    ));
    (addr, check)
}

async fn create(app: &TestApp, project: &str, name: &str, routing: Value) -> String {
    let mut spec = valid_spec();
    spec["routing"] = routing;
    let response = app
        .post_json(
            &format!("/api/v1/projects/{project}/deployments"),
            &json!({"name": name, "spec": spec}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// Envoy's `Check` for a request to `host` and `path` with these headers.
async fn grpc_check(
    addr: std::net::SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> CheckResponse {
    let request = CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "POST".into(),
                    host: host.into(),
                    path: path.into(),
                    headers: headers
                        .iter()
                        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                        .collect(),
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            ..AttributeContext::default()
        }),
    };
    let mut client = AuthorizationClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    client.check(request).await.unwrap().into_inner()
}

/// The gRPC status code, and the HTTP status of a denial (0 when allowed).
fn outcome(response: &CheckResponse) -> (i32, i32) {
    let code = response.status.as_ref().map_or(-1, |s| s.code);
    let http = match &response.http_response {
        Some(HttpResponse::DeniedResponse(d)) => d.status.as_ref().map_or(0, |s| s.code),
        _ => 0,
    };
    (code, http)
}

#[sqlx::test]
async fn the_grpc_check_finds_the_deployment_from_host_and_path(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    app.create_project("team-b").await;
    create(&app, "team-a", "qwen", json!({})).await;
    create(
        &app,
        "team-a",
        "chat",
        json!({"hostname": "chat.team-a.example.com"}),
    )
    .await;
    create(&app, "team-b", "qwen", json!({})).await;
    let (all, all_id) = secret_of(&app, "team-a", json!({"name": "all"})).await;
    let (only_chat, _) = secret_of(
        &app,
        "team-a",
        json!({"name": "c", "deployments": ["chat"]}),
    )
    .await;
    let (addr, _check) = serve_check(pool).await;
    let bearer = format!("Bearer {all}");

    // Allowed (Envoy's gRPC status OK): headers naming the key, set over any the client
    // sent, and the key's headers removed before the model server.
    let allowed = grpc_check(
        addr,
        "gateway.local:8080",
        "/team-a/qwen/v1/chat/completions?x=1",
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(outcome(&allowed), (0, 0));
    let Some(HttpResponse::OkResponse(ok)) = &allowed.http_response else {
        panic!("{allowed:?}")
    };
    let set: Vec<(&str, &str)> = ok
        .headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert!(set.contains(&("x-modelplane-key", "all")), "{set:?}");
    assert!(
        set.contains(&("x-modelplane-key-id", all_id.as_str())),
        "{set:?}"
    );
    assert!(set.contains(&("x-modelplane-project", "team-a")), "{set:?}");
    assert!(
        ok.headers.iter().all(|h| h.append_action == 2),
        "overwrite, never append"
    );
    assert_eq!(ok.headers_to_remove, ["authorization", "x-api-key"]);
    assert!(
        !format!("{allowed:?}").contains(&all),
        "the secret is never echoed"
    );

    // By hostname (any path under it), x-api-key as well as Bearer.
    let by_host = grpc_check(
        addr,
        "chat.team-a.example.com",
        "/v1/models",
        &[("x-api-key", &all)],
    )
    .await;
    assert_eq!(outcome(&by_host), (0, 0));
    // A key scoped to one deployment: that one only (Envoy's PERMISSION_DENIED, 403).
    let scoped = format!("Bearer {only_chat}");
    let chat = grpc_check(
        addr,
        "chat.team-a.example.com",
        "/v1/chat/completions",
        &[("authorization", &scoped)],
    )
    .await;
    assert_eq!(outcome(&chat), (0, 0));
    for (host, path, key) in [
        ("gw", "/team-a/qwen/v1/chat/completions", scoped.as_str()),
        ("gw", "/team-b/qwen/v1/chat/completions", bearer.as_str()),
        ("gw", "/nobody/v1/chat/completions", bearer.as_str()),
    ] {
        let refused = grpc_check(addr, host, path, &[("authorization", key)]).await;
        assert_eq!(outcome(&refused), (7, 403), "{path}");
        let Some(HttpResponse::DeniedResponse(denied)) = &refused.http_response else {
            panic!()
        };
        let body: Value = serde_json::from_str(&denied.body).unwrap();
        assert_eq!(body["error"]["code"], "permission_denied");
    }
    // No key, or a wrong one: UNAUTHENTICATED, 401 with the challenge, the same for both.
    let none = grpc_check(addr, "gw", "/team-a/qwen/v1/chat/completions", &[]).await;
    let wrong = grpc_check(
        addr,
        "gw",
        "/team-a/qwen/v1/chat/completions",
        &[("authorization", "Bearer mpk_guess")],
    )
    .await;
    for refused in [&none, &wrong] {
        assert_eq!(outcome(refused), (16, 401));
        let Some(HttpResponse::DeniedResponse(denied)) = &refused.http_response else {
            panic!()
        };
        assert!(denied.headers.iter().any(|h| {
            h.header
                .as_ref()
                .is_some_and(|h| h.key == "www-authenticate")
        }));
    }

    // A deployment created after the check's last read of the routes is found once the
    // read is 100 ms old (a miss reads them again; the Gateway cannot route to it sooner
    // anyway: the worker has yet to write its route).
    create(&app, "team-a", "late", json!({})).await;
    crate::common::wait_until("the new deployment found", || async {
        let late = grpc_check(
            addr,
            "gw",
            "/team-a/late/v1/completions",
            &[("authorization", &bearer)],
        )
        .await;
        outcome(&late) == (0, 0)
    })
    .await;

    // The same listener still speaks HTTP/1.1 to the HTTP protocol.
    let http = reqwest::Client::new()
        .post(format!("http://{addr}/check/{}/v1/models", Uuid::nil()))
        .send()
        .await
        .unwrap();
    assert_eq!(http.status(), StatusCode::UNAUTHORIZED);
}

/// Asks the HTTP protocol about deployment `id` with key `secret`.
async fn ask(addr: std::net::SocketAddr, id: &str, secret: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{addr}/check/{id}/v1/chat/completions"))
        .header("x-api-key", secret)
        .send()
        .await
        .unwrap()
}

/// `maxConcurrent`: a request counts as in flight for the deployment's recent p95 latency
/// (10 s before one is known); past the limit 429 with Retry-After until one ends.
#[sqlx::test]
async fn requests_in_flight_are_held_to_the_limit_for_the_deployments_latency(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    let slow = create(&app, "team-a", "slow", json!({})).await;
    let fast = create(&app, "team-a", "fast", json!({})).await;
    // The serving metrics' last reading of `fast`: its requests take 0.3 s (p95).
    sqlx::query(
        "insert into deployment_load (deployment_id, track, load)
         values ($1::uuid, 'all', $2)",
    )
    .bind(&fast)
    .bind(
        json!({"asOf": chrono::Utc::now(), "stale": false, "dialect": "vllm", "pods": 1,
                 "podsRead": 1, "e2eLatencyP95Seconds": 0.3}),
    )
    .execute(&pool)
    .await
    .unwrap();
    let (two, _) = secret_of(&app, "team-a", json!({"name": "two", "maxConcurrent": 2})).await;
    let (free, _) = secret_of(&app, "team-a", json!({"name": "free"})).await;
    let (addr, _check) = serve_check(pool).await;

    for _ in 0..2 {
        assert_eq!(ask(addr, &slow, &two).await.status(), StatusCode::OK);
    }
    let over = ask(addr, &slow, &two).await;
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = over.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=10).contains(&retry), "{retry}");
    let body: Value = over.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2 requests at once"),
        "{body}"
    );
    assert_eq!(
        ask(addr, &slow, &free).await.status(),
        StatusCode::OK,
        "other keys go on"
    );

    // On `fast` the two slots are the slow ones' still (they count for 10 s)…
    assert_eq!(
        ask(addr, &fast, &two).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // …and a fresh key's requests there end after 0.3 s: a third goes through soon after.
    let (other, _) = secret_of(&app, "team-a", json!({"name": "other", "maxConcurrent": 2})).await;
    crate::common::wait_until("the new key known", || async {
        ask(addr, &fast, &other).await.status() == StatusCode::OK
    })
    .await;
    assert_eq!(ask(addr, &fast, &other).await.status(), StatusCode::OK);
    let started = std::time::Instant::now();
    crate::common::wait_until("a slot free again", || async {
        ask(addr, &fast, &other).await.status() == StatusCode::OK
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Two fine samples of deployment `id` (project `project`) one second apart, ending now:
/// `tokens_per_second` over that second.
async fn meter(pool: &PgPool, id: &str, project: Uuid, tokens_per_second: f64) {
    let now = chrono::Utc::now();
    for (ago, rate) in [(2, 0.0), (1, tokens_per_second)] {
        sqlx::query(
            "insert into load_sample_fine (deployment_id, project_id, track, at, replicas,
                 prompt_tokens_per_second, generation_tokens_per_second)
             values ($1::uuid, $2, 0, $3, 1, $4, $4)",
        )
        .bind(id)
        .bind(project)
        .bind(now - chrono::Duration::seconds(ago))
        .bind(rate / 2.0)
        .execute(pool)
        .await
        .unwrap();
    }
}

/// `dailyTokenBudget`: once the key's share of its deployments' metered tokens today reaches
/// it, 429 until midnight UTC; the key's usage and the project's show the tokens.
#[sqlx::test]
async fn a_token_budget_is_checked_from_the_metered_tokens(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    let project = app.create_project("team-a").await;
    let project_id: Uuid = project["id"].as_str().unwrap().parse().unwrap();
    let qwen = create(&app, "team-a", "qwen", json!({})).await;
    let (budgeted, budgeted_id) = secret_of(
        &app,
        "team-a",
        json!({"name": "budgeted", "dailyTokenBudget": 500}),
    )
    .await;
    let (other, _) = secret_of(&app, "team-a", json!({"name": "other"})).await;
    let (addr, check) = serve_check(pool.clone()).await;

    // Three requests from the budgeted key, one from the other, counted.
    for secret in [&budgeted, &budgeted, &budgeted, &other] {
        assert_eq!(ask(addr, &qwen, secret).await.status(), StatusCode::OK);
    }
    check.flush().await.unwrap();
    // The model server metered 1,000 tokens: the budgeted key's share is 3/4 of them.
    meter(&pool, &qwen, project_id, 1000.0).await;
    check.read_spent().await.unwrap();
    let over = ask(addr, &qwen, &budgeted).await;
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: i64 = over.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let midnight = (chrono::Utc::now().date_naive() + chrono::Days::new(1))
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    assert!(
        (retry - (midnight - chrono::Utc::now()).num_seconds()).abs() <= 2,
        "{retry}"
    );
    let body: Value = over.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("500 tokens a day"),
        "{body}"
    );
    assert_eq!(
        ask(addr, &qwen, &other).await.status(),
        StatusCode::OK,
        "no budget, no limit"
    );

    let usage: Value = app
        .get(&format!(
            "/api/v1/projects/team-a/keys/{budgeted_id}/usage?days=1"
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(usage["requests"], 3, "{usage}");
    assert_eq!(usage["tokens"], 750, "{usage}");
    assert_eq!(usage["daily"][0]["tokens"], 750);
    assert_eq!(
        usage["deployments"],
        json!([{"deployment": "qwen", "requests": 3, "tokens": 750}])
    );

    check.flush().await.unwrap();
    let report: Value = app
        .get("/api/v1/projects/team-a/usage?days=2")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(report["tokens"], 1000, "{report}");
    assert_eq!(report["requests"], 5, "{report}");
    assert_eq!(report["daily"][1]["tokens"], 1000);
    assert_eq!(report["daily"][0]["tokens"], 0);
    let graphql: Value = app
        .request(reqwest::Method::POST, "/graphql")
        .json(&json!({"query": "query { project(name: \"team-a\") { usage(days: 1) { requests tokens daily { tokens } } } }"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        graphql["data"]["project"]["usage"]["tokens"], 1000,
        "{graphql}"
    );
}

#[sqlx::test]
async fn a_concurrency_limit_out_of_range_is_named(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let response = app
        .post_json(
            "/api/v1/projects/team-a/keys",
            &json!({"name": "k", "maxConcurrent": 0}),
        )
        .await;
    let problem = crate::common::expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(crate::common::error_fields(&problem), ["maxConcurrent"]);
    assert_eq!(app.count_rows("model_key").await, 0);
}

/// An expired key is refused like a key that never was, from the moment it expires (the
/// check compares `expiresAt` on every request; no notification is needed).
#[sqlx::test]
async fn an_expired_key_is_refused_like_an_unknown_one(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    let qwen = create(&app, "team-a", "qwen", json!({})).await;
    let expires = chrono::Utc::now() + chrono::Duration::seconds(2);
    let (short, _) = secret_of(
        &app,
        "team-a",
        json!({"name": "short", "expiresAt": expires}),
    )
    .await;
    let (addr, _check) = serve_check(pool).await;
    assert_eq!(ask(addr, &qwen, &short).await.status(), StatusCode::OK);
    let unknown: Value = ask(addr, &qwen, "mpk_never-was")
        .await
        .json()
        .await
        .unwrap();
    crate::common::wait_until("the key expired", || async { chrono::Utc::now() > expires }).await;
    let refused = ask(addr, &qwen, &short).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(refused.json::<Value>().await.unwrap(), unknown);
}

/// Headers far past any key's size: the listener refuses them before the check reads a
/// byte of them (hyper's header buffer), and the check stays up for everyone else.
#[sqlx::test]
async fn a_huge_header_is_refused_by_the_listener(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    let qwen = create(&app, "team-a", "qwen", json!({})).await;
    let (good, _) = secret_of(&app, "team-a", json!({"name": "good"})).await;
    let (addr, _check) = serve_check(pool).await;
    let huge = "x".repeat(1 << 20);
    let refused = reqwest::Client::new()
        .post(format!("http://{addr}/check/{qwen}/v1/chat/completions"))
        .header("x-api-key", &huge)
        .send()
        .await;
    match refused {
        Ok(r) => assert_eq!(r.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
        // hyper may close the connection while the client still writes the header.
        Err(err) => assert!(err.is_request() || err.is_connect(), "{err}"),
    }
    assert_eq!(ask(addr, &qwen, &good).await.status(), StatusCode::OK);
}
