//! SIGTERM under load: readiness goes false first while requests are still answered, every
//! request that got a response got all of it, an open watch ends cleanly, the process exits
//! on its own with success, and the worker leaves no lease held.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;

use super::{SERVE_TOKEN, ServeProcess, sim_spec, wait_for};

#[sqlx::test]
async fn sigterm_drains_requests_ends_watches_and_releases_leases(pool: PgPool) {
    let emulator = super::emulator()
        .nodes(2)
        .start_delay(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let serve = ServeProcess::start(
        &pool,
        &emulator,
        &[
            ("MODELPLANE_WORKER_ID", "worker-shutdown"),
            ("MODELPLANE_SHUTDOWN_DRAIN_SECS", "2"),
            ("MODELPLANE_SHUTDOWN_TIMEOUT_SECS", "10"),
            ("MODELPLANE_RATE_LIMIT_PER_MINUTE", "1000000"),
            ("MODELPLANE_RATE_LIMIT_BURST", "1000000"),
        ],
    )
    .await;
    let (client, base, port) = (serve.client.clone(), serve.base.clone(), serve.port);
    let created = client
        .post(format!("{base}/api/v1/projects"))
        .json(&json!({"name": "team-a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    // Work for the worker: records being reconciled while the signal comes.
    for i in 0..40 {
        let response = client
            .post(format!("{base}/api/v1/projects/team-a/deployments"))
            .json(&json!({"name": format!("m-{i}"), "spec": sim_spec()}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
    }

    // An open watch: it must end, not be cut.
    let watch = client
        .get(format!("{base}/api/v1/projects/team-a/watch"))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);
    let watch = tokio::spawn(async move {
        let mut watch = watch;
        let mut text = String::new();
        loop {
            match watch.chunk().await {
                Ok(Some(bytes)) => text.push_str(&String::from_utf8_lossy(&bytes)),
                // The end of the chunked body: the server ended the stream.
                Ok(None) => return Ok(text),
                Err(err) => return Err(format!("the watch was cut: {err}")),
            }
        }
    });

    // An open GraphQL subscription: it must complete, and the socket close with 1001.
    let url = format!("ws://127.0.0.1:{port}/graphql/ws");
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
            .unwrap();
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "graphql-transport-ws".parse().unwrap(),
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as Ws;
    socket
        .send(Ws::text(
            json!({"type": "connection_init", "payload": {"Authorization": format!("Bearer {SERVE_TOKEN}")}})
                .to_string(),
        ))
        .await
        .unwrap();
    socket
        .send(Ws::text(
            json!({"type": "subscribe", "id": "1", "payload": {"query":
                "subscription { deploymentsChanged(project: \"team-a\") { seq } }"}})
            .to_string(),
        ))
        .await
        .unwrap();
    let subscription = tokio::spawn(async move {
        let mut kinds = Vec::new();
        let mut close = None;
        while let Some(message) = socket.next().await {
            match message {
                Ok(Ws::Text(text)) => {
                    let message: Value = serde_json::from_str(&text).unwrap();
                    kinds.push(message["type"].as_str().unwrap_or_default().to_owned());
                }
                Ok(Ws::Close(frame)) => close = frame.map(|f| u16::from(f.code)),
                Ok(_) => {}
                Err(err) => return Err(format!("the socket was cut: {err}")),
            }
        }
        Ok((kinds, close))
    });

    // Load: lists of 40 deployments, each checked complete.
    let complete = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let signalled = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..6)
        .map(|_| {
            let (client, base, complete, refused, signalled) = (
                client.clone(),
                base.clone(),
                complete.clone(),
                refused.clone(),
                signalled.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let url = format!("{base}/api/v1/projects/team-a/deployments?limit=50");
                    let response = match client.get(url).send().await {
                        Ok(response) => response,
                        // No answer at all, once the process is going: the listener is
                        // closed, or a kept-alive connection was closed between requests
                        // (the race every HTTP/1.1 client retries). Never half an answer.
                        Err(err) if signalled.load(Ordering::Relaxed) => {
                            assert!(!err.is_body() && !err.is_decode(), "{err}");
                            refused.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                        Err(err) => panic!("a request failed before the signal: {err}"),
                    };
                    assert_eq!(response.status(), 200);
                    let body: Value = response
                        .json()
                        .await
                        .expect("a response that started is complete");
                    assert_eq!(body["items"].as_array().unwrap().len(), 40);
                    complete.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    wait_for("load flowing", Duration::from_secs(10), || async {
        complete.load(Ordering::Relaxed) >= 20
    })
    .await;

    signalled.store(true, Ordering::Relaxed);
    serve.terminate();
    // Readiness goes false first, while requests are still answered.
    let before = complete.load(Ordering::Relaxed);
    wait_for("readiness false", Duration::from_secs(5), || async {
        client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 503)
    })
    .await;
    wait_for(
        "requests still answered while draining",
        Duration::from_secs(5),
        || async { complete.load(Ordering::Relaxed) > before + 10 },
    )
    .await;

    let mut child = serve.child;
    let exited = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(exited.success(), "the process exits cleanly: {exited:?}");
    for task in load {
        task.await.expect("no request was cut off");
    }
    assert_eq!(
        refused.load(Ordering::Relaxed),
        6,
        "each load task ends refused"
    );
    let text = tokio::time::timeout(Duration::from_secs(5), watch)
        .await
        .expect("the watch ended")
        .unwrap()
        .expect("the watch ended cleanly");
    assert!(text.contains("event: synced"), "{text}");
    let (kinds, close) = tokio::time::timeout(Duration::from_secs(5), subscription)
        .await
        .expect("the socket closed")
        .unwrap()
        .expect("the socket closed cleanly");
    assert_eq!(kinds.first().map(String::as_str), Some("connection_ack"));
    assert!(kinds.iter().any(|k| k == "next"), "{kinds:?}");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("complete"),
        "{kinds:?}"
    );
    assert_eq!(close, Some(1001), "closed with Going Away");

    let held: i64 = sqlx::query_scalar(
        "select count(*) from reconcile_work where lease_owner = 'worker-shutdown' and lease_expires_at > now()",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(held, 0, "no lease left held");
}
