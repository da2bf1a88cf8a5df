//! The security regression suite: each finding of the independent security run (issue #36)
//! reproduced as its attacker did it, against the real router on a real listener.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{ADMIN_TOKEN, Options, TestApp, WsClient};

async fn graphql_as(app: &TestApp, token: &str, query: &str) -> Value {
    app.request_as(Some(token), Method::POST, "/graphql")
        .json(&json!({"query": query}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Reads messages until the server closes the socket; its close code and reason.
async fn closed(client: &mut WsClient) -> (u16, String) {
    while client.next().await.is_some() {}
    client.closed.clone().expect("a close frame")
}

const SCALE: &str =
    r#"mutation { scaleDeployment(project: "team-a", name: "qwen", replicas: 2) { generation } }"#;

/// Finding 1: a revoked token kept running mutations on a socket it had opened.
#[sqlx::test]
async fn a_revoked_token_runs_nothing_more_on_its_open_websocket(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    app.create_deployment("team-a", "qwen").await;
    let editor = app.token_for("team-a", "editor", "editor").await;
    let mut socket = WsClient::connect(&app, &editor).await.unwrap();
    // While the token holds, operations run.
    socket
        .send(json!({"id": "1", "type": "subscribe", "payload": {"query": "{ viewer { name } }"}}))
        .await;
    let answer = socket.next().await.unwrap();
    assert_eq!(answer["payload"]["data"]["viewer"]["name"], "token:editor");

    app.revoke_token("team-a", "editor").await;
    // The next operation on the same socket is refused, and the socket is closed.
    socket
        .send(json!({"id": "2", "type": "subscribe", "payload": {"query": SCALE}}))
        .await;
    let mut refused = false;
    while let Some(message) = socket.next().await {
        if message["id"] == "2" && message["type"] == "next" {
            assert!(message["payload"]["data"].is_null(), "{message}");
            assert_eq!(
                message["payload"]["errors"][0]["extensions"]["code"],
                "UNAUTHENTICATED"
            );
            refused = true;
        }
    }
    let (code, reason) = socket.closed.clone().expect("a close frame");
    assert_eq!(code, 4403);
    assert!(reason.contains("revoked"), "{reason}");
    let deployment: Value = app
        .get("/api/v1/projects/team-a/deployments/qwen")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(deployment["spec"]["replicas"], 1, "nothing was scaled");
    assert!(refused, "the mutation was answered with a refusal");
    // A socket doing nothing is closed too once its token is revoked (the watchdog).
    let viewer = app.token_for("team-a", "viewer", "viewer").await;
    let mut idle = WsClient::connect(&app, &viewer).await.unwrap();
    app.revoke_token("team-a", "viewer").await;
    assert_eq!(closed(&mut idle).await.0, 4403);
}

/// Finding 1, expiry: a token created to expire kept working on its socket afterwards.
#[sqlx::test]
async fn an_expired_token_closes_its_websocket(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    app.create_deployment("team-a", "qwen").await;
    let expires = (chrono::Utc::now() + chrono::Duration::seconds(3)).to_rfc3339();
    let created = app
        .post_json(
            "/api/v1/projects/team-a/tokens",
            &json!({"name": "short", "role": "editor", "expiresAt": expires}),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let secret = created.json::<Value>().await.unwrap()["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut socket = WsClient::connect(&app, &secret).await.unwrap();
    // Waits for the server to close it (within the client's 20 s per message).
    let (code, reason) = closed(&mut socket).await;
    assert_eq!(code, 4403);
    assert!(reason.contains("expired"), "{reason}");
    assert!(chrono::Utc::now().to_rfc3339() >= expires);
    assert!(WsClient::connect(&app, &secret).await.is_err());
}

/// Finding 2: an IP address as a route's hostname captured another tenant's traffic. The
/// Gateway API's `Hostname` allows no IPs; every spelling a client accepts is refused.
#[sqlx::test]
async fn ip_addresses_are_not_hostnames(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    for (i, host) in [
        "127.0.0.1",
        "127.1",
        "0x7f.0.0.1",
        "2130706433.",
        "169.254.169.254",
    ]
    .into_iter()
    .enumerate()
    {
        let mut spec = crate::common::valid_spec();
        spec["routing"] = json!({"hostname": host, "pathPrefix": "/b/demo/v1"});
        let response = app
            .post_json(
                "/api/v1/projects/team-a/deployments",
                &json!({"name": format!("capture-{i}"), "spec": spec}),
            )
            .await;
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{host}"
        );
        let problem: Value = response.json().await.unwrap();
        assert_eq!(
            problem["errors"][0]["field"], "spec.routing.hostname",
            "{problem}"
        );
        assert!(
            problem["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("IP address"),
            "{problem}"
        );
    }
    // IPv6 too, and through a patch.
    app.create_deployment("team-a", "qwen").await;
    let patched = app
        .request(Method::PATCH, "/api/v1/projects/team-a/deployments/qwen")
        .header("content-type", "application/merge-patch+json")
        .body(json!({"spec": {"routing": {"hostname": "::1"}}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

/// Finding 3: connections that never finished their headers held the server's file
/// descriptors until nobody else could connect. A request's headers now have a deadline,
/// and one address can hold only so many connections.
#[sqlx::test]
async fn half_open_connections_cannot_shut_others_out(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            connections: modelplane::listener::ConnectionLimits {
                header_read_timeout: Duration::from_secs(1),
                max_connections: 1000,
                max_connections_per_address: 40,
                ..Default::default()
            },
            ..Options::default()
        },
    )
    .await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..100 {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        // A request line, and headers that never end.
        let _ = stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await;
        held.push(stream);
    }
    // Another client (another loopback address) is served while they are held.
    let other = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let health = other
        .get(format!("{}/healthz", app.base))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    // Every held connection is closed by the server: past the cap at once, the rest when
    // their header deadline passes.
    for mut stream in held {
        let mut buf = [0u8; 512];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("the server closes a connection that never finishes its headers");
        // Closed (0 bytes, or reset), or answered 408 and then closed.
        if let Ok(n) = read
            && n > 0
        {
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        }
    }
    // And the address they came from is served again.
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
}

/// Finding 5: one document with 300 aliased mutations ran all of them under a 60/min limit.
#[sqlx::test]
async fn every_mutation_of_a_document_counts_against_the_rate_limit(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            rate_per_minute: 60,
            rate_burst: 10,
            ..Options::default()
        },
    )
    .await;
    app.create_project("team-a").await;
    app.create_deployment("team-a", "qwen").await;
    let editor = app.token_for("team-a", "editor", "editor").await;
    let restarts = |n: usize| {
        let fields: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"r{i}: restartDeployment(project: "team-a", name: "qwen") {{ generation }}"#
                )
            })
            .collect();
        format!("mutation {{ {} }}", fields.join(" "))
    };
    // More than a document may hold: refused, naming the cap.
    let too_many = graphql_as(&app, &editor, &restarts(21)).await;
    assert_eq!(
        too_many["errors"][0]["extensions"]["code"], "INVALID_INPUT",
        "{too_many}"
    );
    assert!(
        too_many["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("at most 20")
    );
    // Within the cap but past the budget (10 in a burst): refused, nothing runs.
    let over = graphql_as(&app, &editor, &restarts(15)).await;
    assert_eq!(
        over["errors"][0]["extensions"]["code"], "RATE_LIMITED",
        "{over}"
    );
    assert!(over["data"].is_null(), "{over}");
    let record: Value = app
        .get("/api/v1/projects/team-a/deployments/qwen")
        .await
        .json()
        .await
        .unwrap();
    assert!(record["restartedAt"].is_null(), "no restart ran: {record}");

    // Over a WebSocket each operation is charged: of 30 sent at once, most are refused.
    let mut socket = WsClient::connect(&app, &editor).await.unwrap();
    for i in 0..30 {
        socket
            .send(json!({"id": i.to_string(), "type": "subscribe", "payload": {"query": "{ viewer { name } }"}}))
            .await;
    }
    let mut limited = 0;
    let mut answered = 0;
    while answered < 30 {
        let message = socket.next().await.expect("an answer to every operation");
        if message["type"] == "next" {
            answered += 1;
            if message["payload"]["errors"][0]["extensions"]["code"] == "RATE_LIMITED" {
                limited += 1;
            }
        }
    }
    assert!(
        limited >= 20,
        "{limited} of 30 operations were rate limited"
    );
}

/// Finding 6: 1,000 aliases of `viewer` ran for 30 s and starved the database pool.
#[sqlx::test]
async fn alias_amplification_is_refused_before_it_runs(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let viewers = |n: usize| {
        let fields: Vec<String> = (0..n)
            .map(|i| format!("v{i}: viewer {{ name roles {{ project role }} }}"))
            .collect();
        format!("{{ {} }}", fields.join(" "))
    };
    let amplified = graphql_as(&app, ADMIN_TOKEN, &viewers(1000)).await;
    assert!(amplified["data"].is_null(), "{amplified}");
    assert!(
        amplified["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("more than 50 aliases"),
        "{amplified}"
    );
    // Under the alias cap, fields that read the database still cost what they cost.
    let costly = graphql_as(&app, ADMIN_TOKEN, &viewers(49)).await;
    assert!(
        costly["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("too complex"),
        "{costly}"
    );
    let fine = graphql_as(&app, ADMIN_TOKEN, &viewers(3)).await;
    assert!(fine["errors"].is_null(), "{fine}");
    assert_eq!(fine["data"]["v2"]["roles"][0]["project"], "team-a");
}

/// Finding 7: one viewer token held 4,000 SSE watches. Streams are capped per credential.
#[sqlx::test]
async fn open_watches_are_capped_per_credential(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            streams: modelplane::service::live::StreamLimits {
                per_caller: 3,
                per_address: 100,
                ..Default::default()
            },
            ..Options::default()
        },
    )
    .await;
    app.create_project("team-a").await;
    let viewer = app.token_for("team-a", "viewer", "viewer").await;
    let watch = || {
        app.request_as(Some(&viewer), Method::GET, "/api/v1/projects/team-a/watch")
            .send()
    };
    let mut open = Vec::new();
    for _ in 0..3 {
        let response = watch().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        open.push(response);
    }
    let refused = watch().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let problem: Value = refused.json().await.unwrap();
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("too-many-streams"),
        "{problem}"
    );
    // A subscription counts against the same cap.
    let mut socket = WsClient::connect(&app, &viewer).await.unwrap();
    socket
        .send(json!({"id": "1", "type": "subscribe", "payload": {"query":
            r#"subscription { deploymentsChanged(project: "team-a") { seq } }"#}}))
        .await;
    let message = socket.next().await.unwrap();
    assert_eq!(
        message["payload"]["errors"][0]["extensions"]["code"], "RATE_LIMITED",
        "{message}"
    );
    // Another credential is not affected; a closed watch gives its place back.
    let admin = app.get("/api/v1/projects/team-a/watch").await;
    assert_eq!(admin.status(), StatusCode::OK);
    drop(open.pop());
    crate::common::wait_until("the closed watch's place to come back", || async {
        watch().await.unwrap().status() == StatusCode::OK
    })
    .await;
}

/// Finding 8: with introspection off, errors still suggested field names.
#[sqlx::test]
async fn without_introspection_errors_suggest_no_field_names(pool: PgPool) {
    let _app = TestApp::spawn(pool).await;
    let closed = modelplane::api::graphql::schema(modelplane::api::graphql::GraphqlLimits {
        introspection: false,
        ..Default::default()
    });
    let response = closed.execute("{ deploymen { name } }").await;
    let message = &response.errors[0].message;
    assert!(!message.contains("Did you mean"), "{message}");
    let open = modelplane::api::graphql::schema(Default::default());
    let response = open.execute("{ deploymen { name } }").await;
    assert!(response.errors[0].message.contains("Did you mean"));
}

/// Finding 7: a client that never reads kept its watch, and memory, growing. Its watch is
/// bounded (64 queued events) and ended once it has read nothing for the slow-client time,
/// which gives its place back; the client resumes from its last sequence number.
#[sqlx::test]
async fn a_watch_whose_client_reads_nothing_is_ended(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            streams: modelplane::service::live::StreamLimits {
                per_caller: 1,
                per_address: 100,
                slow_client: Duration::from_secs(1),
            },
            ..Options::default()
        },
    )
    .await;
    app.create_project("team-a").await;
    let viewer = app.token_for("team-a", "viewer", "viewer").await;
    // A client with a tiny receive window that sends its request and never reads.
    let addr: std::net::SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(addr).await.unwrap();
    stalled
        .write_all(
            format!(
                "GET /api/v1/projects/team-a/watch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {viewer}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // Its watch started (the status line is read; nothing more ever is)...
    let mut head = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(20), stalled.read(&mut head))
        .await
        .unwrap()
        .unwrap();
    assert!(
        head[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&head[..n])
    );
    // ...and holds the credential's one place.
    let watch = || {
        app.request_as(Some(&viewer), Method::GET, "/api/v1/projects/team-a/watch")
            .send()
    };
    assert_eq!(
        watch().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Changes pile up: far more than its queue and the sockets' buffers hold.
    let mut spec = crate::common::valid_spec();
    spec["labels"] = json!({"padding": "x".repeat(60)});
    spec["engine"]["env"] = json!(
        (0..40)
            .map(|i| json!({"name": format!("VAR_{i}"), "value": "y".repeat(1500)}))
            .collect::<Vec<_>>()
    );
    for i in 0..150 {
        let created = app
            .post_json(
                "/api/v1/projects/team-a/deployments",
                &json!({"name": format!("d{i}"), "spec": spec}),
            )
            .await;
        assert_eq!(
            created.status(),
            StatusCode::CREATED,
            "{}",
            created.text().await.unwrap()
        );
    }
    // The stalled watch is ended and its place comes back.
    crate::common::wait_until("the stalled watch to be ended", || async {
        watch().await.unwrap().status() == StatusCode::OK
    })
    .await;
    drop(stalled);
}

/// Finding 3, the other half: out of file descriptors, the listener keeps accepting once
/// connections close (the test process's own limit is lowered: nextest runs each test in its
/// own process).
#[sqlx::test]
async fn the_listener_outlives_running_out_of_file_descriptors(pool: PgPool) {
    let app = TestApp::spawn_with(
        pool,
        Options {
            connections: modelplane::listener::ConnectionLimits {
                header_read_timeout: Duration::from_secs(1),
                max_connections: 100_000,
                max_connections_per_address: 100_000,
                ..Default::default()
            },
            ..Options::default()
        },
    )
    .await;
    assert_eq!(app.get("/healthz").await.status(), StatusCode::OK);
    let open_now = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let limit = libc::rlimit {
        rlim_cur: open_now + 64,
        rlim_max: libc::RLIM_INFINITY,
    };
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on this process's own limit, with valid pointers.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut old), 0);
        assert_eq!(
            libc::setrlimit(
                libc::RLIMIT_NOFILE,
                &libc::rlimit {
                    rlim_max: old.rlim_max,
                    ..limit
                }
            ),
            0
        );
    }
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    // Until this process (client and server share its table) has no descriptor left.
    for _ in 0..200 {
        match tokio::net::TcpStream::connect(&addr).await {
            Ok(stream) => held.push(stream),
            Err(_) => break,
        }
    }
    assert!(held.len() < 200, "the descriptor table filled up");
    drop(held);
    // SAFETY: as above.
    unsafe {
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &old), 0);
    }
    crate::common::wait_until("the listener to serve again", || async {
        app.request(Method::GET, "/healthz")
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
    })
    .await;
}
