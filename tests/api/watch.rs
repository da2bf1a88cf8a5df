//! Server-Sent Events over the wire: `…/watch` sends the state, then every committed change
//! from the change feed, resumes with `Last-Event-ID`, and ends when the credential lapses.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::PgPool;

use crate::common::{SseStream, TestApp};

const QWEN: &str = "/api/v1/projects/team-a/deployments/qwen";

async fn watch(app: &TestApp, path: &str, last_event_id: Option<i64>) -> SseStream {
    let mut request = app.request(Method::GET, path);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id.to_string());
    }
    SseStream::new(request.send().await.unwrap())
}

async fn scale(app: &TestApp, replicas: i64) {
    let response = app
        .post_json(&format!("{QWEN}/scale"), &json!({"replicas": replicas}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[sqlx::test]
async fn a_deployment_watch_sends_its_state_then_each_change_and_resumes_without_a_gap(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let mut stream = watch(&app, &format!("{QWEN}/watch"), None).await;
    let state = stream.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(state.event, "state");
    assert_eq!(state.data["name"], "qwen");
    assert_eq!(state.data["generation"], 1);

    scale(&app, 2).await;
    let (_, spec) = stream.until("spec").await;
    assert_eq!(spec.data["spec"]["replicas"], 2);
    assert_eq!(spec.data["generation"], 2);
    let (_, timeline) = stream.until("event").await;
    assert_eq!(timeline.data["kind"], "Scaled");
    let last = timeline.id.unwrap();
    drop(stream);

    // Changes while nobody watches are sent on resume, in order, and nothing before them.
    let restarted = app
        .request(Method::POST, &format!("{QWEN}/restart"))
        .send()
        .await
        .unwrap();
    assert_eq!(restarted.status(), StatusCode::OK);
    scale(&app, 3).await;
    let mut resumed = watch(&app, &format!("{QWEN}/watch"), Some(last)).await;
    let mut seen = Vec::new();
    loop {
        let event = resumed.next_within(Duration::from_secs(10)).await.unwrap();
        assert!(event.id.unwrap() > last, "{event:?}");
        seen.push(event.event.clone());
        if event.event == "spec" {
            assert_eq!(event.data["spec"]["replicas"], 3);
            break;
        }
    }
    assert_eq!(
        seen.first().map(String::as_str),
        Some("restart"),
        "{seen:?}"
    );
    assert!(!seen.contains(&"state".to_owned()), "{seen:?}");

    // A resume point older than the feed keeps: told to start afresh, then the state.
    sqlx::query("delete from deployment_change")
        .execute(&pool)
        .await
        .unwrap();
    scale(&app, 1).await;
    let mut stale = watch(&app, &format!("{QWEN}/watch"), Some(last)).await;
    let reset = stale.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(reset.event, "reset");
    let state = stale.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(state.event, "state");
    assert_eq!(state.data["spec"]["replicas"], 1);

    // A resume point from the future (another installation's, a restored database's) is
    // no point in this feed: `reset`, then the state, then `synced` (it used to get only
    // `synced`, and a client kept a state it never had).
    let mut future = watch(&app, &format!("{QWEN}/watch"), Some(last + 1_000_000)).await;
    let reset = future.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(reset.event, "reset");
    let state = future.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(state.event, "state");
    assert_eq!(state.data["name"], "qwen");
    assert_eq!(
        future
            .next_within(Duration::from_secs(10))
            .await
            .unwrap()
            .event,
        "synced"
    );

    let bad = app
        .request(Method::GET, &format!("{QWEN}/watch"))
        .header("Last-Event-ID", "yesterday")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

/// Every API process follows the feed on its own connection: a change committed through one
/// reaches the watchers of another.
#[sqlx::test]
async fn a_second_api_process_on_the_same_database_delivers_the_same_changes(pool: PgPool) {
    let first = TestApp::spawn(pool.clone()).await;
    let second = TestApp::spawn(pool.clone()).await;
    first.create_project("team-a").await;
    let mut stream = watch(&second, "/api/v1/projects/team-a/watch", None).await;
    assert_eq!(
        first.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let (_, created) = stream.until("created").await;
    assert_eq!(created.data["name"], "qwen");
    let deleted = first.request(Method::DELETE, QWEN).send().await.unwrap();
    assert_eq!(deleted.status(), StatusCode::ACCEPTED);
    let (_, deleting) = stream.until("deleting").await;
    assert!(deleting.data["deletionRequestedAt"].is_string());
}

#[sqlx::test]
async fn a_watch_needs_a_readable_project_and_ends_when_its_token_is_revoked(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    app.create_project("team-b").await;
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let other = app.token_for("team-b", "other", "viewer").await;
    let refused = app
        .request_as(Some(&other), Method::GET, "/api/v1/projects/team-a/watch")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::NOT_FOUND);
    let anonymous = app
        .request_as(None, Method::GET, &format!("{QWEN}/watch"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);

    let viewer = app.token_for("team-a", "watcher", "viewer").await;
    let mut stream = SseStream::new(
        app.request_as(Some(&viewer), Method::GET, &format!("{QWEN}/watch"))
            .send()
            .await
            .unwrap(),
    );
    assert_eq!(
        stream
            .next_within(Duration::from_secs(10))
            .await
            .unwrap()
            .event,
        "state"
    );
    app.revoke_token("team-a", "watcher").await;
    // The stream ends (within the recheck interval), with no further change needed.
    loop {
        match stream.next_within(Duration::from_secs(10)).await {
            None => break,
            Some(event) => assert_ne!(event.event, "state", "{event:?}"),
        }
    }
}

#[sqlx::test]
async fn a_watch_says_when_the_starting_state_is_complete(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    // An empty project: `synced` at once, so a client can say "no deployments" with certainty.
    let mut empty = watch(&app, "/api/v1/projects/team-a/watch", None).await;
    let first = empty.next_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(first.event, "synced", "{first:?}");

    for name in ["a", "b"] {
        app.create_deployment("team-a", name).await;
    }
    let mut stream = watch(&app, "/api/v1/projects/team-a/watch", None).await;
    let mut names = Vec::new();
    let synced = loop {
        let event = stream.next_within(Duration::from_secs(10)).await.unwrap();
        if event.event != "state" {
            break event;
        }
        names.push(event.data["name"].as_str().unwrap().to_owned());
    };
    assert_eq!(synced.event, "synced", "{synced:?}");
    names.sort();
    assert_eq!(names, ["a", "b"]);

    // Live changes come after it, once.
    scale_named(&app, "a", 2).await;
    let (skipped, spec) = stream.until("spec").await;
    assert_eq!(spec.data["name"], "a");
    assert!(!skipped.iter().any(|e| e.event == "synced"), "{skipped:?}");
}

async fn scale_named(app: &TestApp, name: &str, replicas: i64) {
    let response = app
        .post_json(
            &format!("/api/v1/projects/team-a/deployments/{name}/scale"),
            &json!({"replicas": replicas}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
}
