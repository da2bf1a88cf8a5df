//! Serving metrics through the API: readings written as the worker's collector writes them
//! (`store::load::write_round`), read back as `status.load`, the metric series (REST and
//! GraphQL), and `load` events on the watches that asked for them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use modelplane::domain::{Load, LoadFigures, LoadSample, MetricsDialect, Track};
use modelplane::store::load::{Reading, Scope, write_round};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::common::{SseStream, TestApp};

const QWEN: &str = "/api/v1/projects/team-a/deployments/qwen";

async fn ids(pool: &PgPool, name: &str) -> (Uuid, Uuid) {
    sqlx::query_as("select id, project_id from model_deployment where name = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn figures(rps: f64) -> LoadFigures {
    LoadFigures {
        requests_per_second: Some(rps),
        prompt_tokens_per_second: Some(rps * 8.0),
        generation_tokens_per_second: Some(rps * 3.0),
        ttft_p50_seconds: Some(0.175),
        ttft_p95_seconds: Some(0.2425),
        waiting: Some(2.0),
        running: Some(4.0),
        kv_cache_usage: Some(1.0),
        error_rate: Some(0.0),
        ..LoadFigures::default()
    }
}

fn reading(ids: (Uuid, Uuid), scope: Scope, at: DateTime<Utc>, rps: f64) -> Reading {
    Reading {
        deployment_id: ids.0,
        project_id: ids.1,
        scope,
        load: Load {
            as_of: at,
            stale: false,
            reason: None,
            dialect: MetricsDialect::Vllm,
            pods: 1,
            pods_read: 1,
            figures: figures(rps),
        },
        sample: Some(LoadSample {
            at,
            replicas: 1,
            figures: figures(rps),
        }),
    }
}

async fn write(pool: &PgPool, readings: &[Reading]) -> Vec<Uuid> {
    let mut conn = pool.acquire().await.unwrap();
    write_round(&mut conn, readings).await.unwrap()
}

async fn setup(pool: PgPool) -> (TestApp, (Uuid, Uuid)) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let ids = ids(&pool, "qwen").await;
    (app, ids)
}

#[sqlx::test]
async fn the_last_reading_is_status_load_in_get_and_list(pool: PgPool) {
    let (app, ids) = setup(pool.clone()).await;
    let before: Value = app.get(QWEN).await.json().await.unwrap();
    assert!(
        before["status"].get("load").is_none(),
        "no reading yet: {before}"
    );

    let now = Utc::now();
    let announced = write(&pool, &[reading(ids, Scope::All, now, 21.5)]).await;
    assert_eq!(announced, vec![ids.0]);
    let got: Value = app.get(QWEN).await.json().await.unwrap();
    let load = &got["status"]["load"];
    assert_eq!(load["requestsPerSecond"], 21.5);
    assert_eq!(load["generationTokensPerSecond"], 64.5);
    assert_eq!(load["dialect"], "vllm");
    assert_eq!(load["stale"], false);
    assert!(
        load["interTokenLatencyP50Seconds"].is_null(),
        "not measured is null, not zero: {load}"
    );
    let list: Value = app
        .get("/api/v1/projects/team-a/deployments")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["items"][0]["status"]["load"], *load);

    // The same figures a moment later announce nothing (only the time moved).
    let later = now + chrono::Duration::seconds(15);
    assert!(
        write(&pool, &[reading(ids, Scope::All, later, 21.5)])
            .await
            .is_empty()
    );
    // A reading the worker left behind turns stale, with the reason.
    let old = Utc::now() - chrono::Duration::seconds(300);
    write(&pool, &[reading(ids, Scope::All, old, 21.5)]).await;
    let got: Value = app.get(QWEN).await.json().await.unwrap();
    assert_eq!(got["status"]["load"]["stale"], true);
    assert!(
        got["status"]["load"]["reason"]
            .as_str()
            .unwrap()
            .contains("is the worker running?"),
        "{got}"
    );
}

#[sqlx::test]
async fn the_series_fill_every_step_and_gaps_are_null(pool: PgPool) {
    let (app, ids) = setup(pool.clone()).await;
    let now = Utc::now();
    // Readings 15 s apart, two minutes ago to now, with one missing.
    for i in 0..8 {
        if i == 3 {
            continue;
        }
        let at = now - chrono::Duration::seconds(15 * (8 - i));
        write(&pool, &[reading(ids, Scope::All, at, i as f64)]).await;
    }
    let metrics: Value = app
        .get(&format!(
            "{QWEN}/metrics?window=5m&step=15s&series=requestsPerSecond,ttftP95Seconds"
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(metrics["windowSeconds"], 300);
    assert_eq!(metrics["stepSeconds"], 15);
    assert_eq!(metrics["resolutionSeconds"], 15);
    let timestamps = metrics["timestamps"].as_array().unwrap();
    assert_eq!(timestamps.len(), 20);
    let series = metrics["series"].as_array().unwrap();
    assert_eq!(series.len(), 2);
    assert_eq!(series[0]["name"], "requestsPerSecond");
    assert_eq!(series[1]["unit"], "s");
    let values: Vec<Option<f64>> = series[0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::as_f64)
        .collect();
    assert_eq!(values.len(), 20);
    let measured: Vec<f64> = values.iter().flatten().copied().collect();
    assert_eq!(
        measured,
        vec![0.0, 1.0, 2.0, 4.0, 5.0, 6.0, 7.0],
        "{values:?}"
    );
    assert!(
        values[..10].iter().all(Option::is_none),
        "nothing before the readings"
    );
    // Each value sits at the step holding its reading.
    let first = values.iter().position(Option::is_some).unwrap();
    let at: DateTime<Utc> = timestamps[first].as_str().unwrap().parse().unwrap();
    let read_at = now - chrono::Duration::seconds(120);
    assert!(at <= read_at && read_at < at + chrono::Duration::seconds(15));

    // The project's sum: a second deployment adds its rates.
    assert_eq!(
        app.create_deployment("team-a", "llama").await.status(),
        StatusCode::CREATED
    );
    let llama = ids_of(&pool, "llama").await;
    write(
        &pool,
        &[reading(
            llama,
            Scope::All,
            now - chrono::Duration::seconds(15),
            10.0,
        )],
    )
    .await;
    let project: Value = app
        .get("/api/v1/projects/team-a/metrics?window=5m&step=1m&series=requestsPerSecond,running")
        .await
        .json()
        .await
        .unwrap();
    let last_minute = |s: usize| {
        project["series"][s]["values"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find_map(Value::as_f64)
            .unwrap()
    };
    assert!(last_minute(0) > 10.0, "{project}");
    assert_eq!(last_minute(1), 8.0, "running adds up: {project}");
}

async fn ids_of(pool: &PgPool, name: &str) -> (Uuid, Uuid) {
    ids(pool, name).await
}

#[sqlx::test]
async fn bad_queries_name_the_field(pool: PgPool) {
    let (app, _) = setup(pool).await;
    for (query, field, words) in [
        ("window=forever", "window", "is not a duration"),
        ("window=31d", "window", "at most 30d"),
        ("window=2d&step=1m", "step", "at least 5m"),
        ("window=24h&step=15s", "step", "5760 points"),
        (
            "series=requestsPerSecond,bogus",
            "series",
            "`bogus` is not a series",
        ),
        ("track=blue", "track", "is not a track"),
        ("since=1h", "since", "unknown field"),
    ] {
        let response = app.get(&format!("{QWEN}/metrics?{query}")).await;
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}"
        );
        let problem: Value = response.json().await.unwrap();
        let errors = problem["errors"].as_array().unwrap();
        assert!(
            errors
                .iter()
                .any(|e| e["field"] == field && e["message"].as_str().unwrap().contains(words)),
            "{query}: {problem}"
        );
    }
    let response = app
        .get("/api/v1/projects/team-a/metrics?track=canary")
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let missing = app
        .get("/api/v1/projects/team-a/deployments/nope/metrics")
        .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let stranger = app
        .request_as(None, Method::GET, &format!("{QWEN}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), StatusCode::UNAUTHORIZED);
}

#[sqlx::test]
async fn graphql_reads_load_metrics_and_the_canary_track(pool: PgPool) {
    let (app, ids) = setup(pool.clone()).await;
    let started = app
        .post_json(
            &format!("{QWEN}/canary"),
            &json!({"spec": {"engine": {"args": ["--new"]}}, "weight": 10}),
        )
        .await;
    assert_eq!(
        started.status(),
        StatusCode::CREATED,
        "{}",
        started.text().await.unwrap()
    );
    let now = Utc::now();
    write(
        &pool,
        &[
            reading(ids, Scope::All, now, 12.0),
            reading(ids, Scope::Track(Track::Stable), now, 10.0),
            reading(ids, Scope::Track(Track::Canary), now, 2.0),
        ],
    )
    .await;
    let query = r#"{ deployment(project: "team-a", name: "qwen") {
        load { requestsPerSecond stale dialect }
        canary { status { phase } }
        metrics(window: "5m", step: "15s", series: [REQUESTS_PER_SECOND], track: CANARY) {
            stepSeconds series { name values } }
      }
      project(name: "team-a") { metrics(window: "5m", step: "1m", series: [RUNNING]) { series { name unit } } } }"#;
    let body: Value = app
        .post_json("/graphql", &json!({"query": query}))
        .await
        .json()
        .await
        .unwrap();
    assert!(body["errors"].is_null(), "{body}");
    let d = &body["data"]["deployment"];
    assert_eq!(
        d["load"],
        json!({"requestsPerSecond": 12.0, "stale": false, "dialect": "VLLM"})
    );
    // No worker runs here, so the canary track has no status yet to carry its load (the
    // reconciler's load test reads it); its series is its own.
    assert!(d["canary"]["status"].is_null());
    let canary_values = d["metrics"]["series"][0]["values"].as_array().unwrap();
    assert_eq!(
        canary_values
            .iter()
            .filter_map(Value::as_f64)
            .collect::<Vec<_>>(),
        vec![2.0]
    );
    assert_eq!(
        body["data"]["project"]["metrics"]["series"],
        json!([{"name": "RUNNING", "unit": "requests"}])
    );
    let stable: Value = app
        .get(&format!(
            "{QWEN}/metrics?window=5m&step=15s&series=requestsPerSecond&track=stable"
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        stable["series"][0]["values"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_f64)
            .collect::<Vec<_>>(),
        vec![10.0]
    );

    let bad: Value = app
        .post_json(
            "/graphql",
            &json!({"query": r#"{ deployment(project: "team-a", name: "qwen") { metrics(window: "1y") { stepSeconds } } }"#}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(
        bad["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("window"),
        "{bad}"
    );
}

/// Only watches that asked for load get `load` events, at most one per changed reading.
#[sqlx::test]
async fn load_events_reach_only_the_watches_that_asked(pool: PgPool) {
    let (app, ids) = setup(pool.clone()).await;
    let open = |path: String| {
        let app = &app;
        async move { SseStream::new(app.request(Method::GET, &path).send().await.unwrap()) }
    };
    let mut with_load = open(format!("{QWEN}/watch?load=true")).await;
    let mut project = open("/api/v1/projects/team-a/watch?load=true".into()).await;
    let mut without = open(format!("{QWEN}/watch")).await;
    for stream in [&mut with_load, &mut project, &mut without] {
        stream.until("synced").await;
    }
    write(&pool, &[reading(ids, Scope::All, Utc::now(), 3.0)]).await;
    // Unchanged figures: no second event.
    write(&pool, &[reading(ids, Scope::All, Utc::now(), 3.0)]).await;
    let response = app
        .post_json(&format!("{QWEN}/scale"), &json!({"replicas": 2}))
        .await;
    assert_eq!(response.status(), StatusCode::OK);

    for stream in [&mut with_load, &mut project] {
        let (before, load) = stream.until("load").await;
        assert!(before.is_empty(), "{before:?}");
        assert_eq!(load.data["name"], "qwen");
        assert_eq!(load.data["load"]["requestsPerSecond"], 3.0);
        let (between, spec) = stream.until("spec").await;
        assert!(
            between.iter().all(|e| e.event != "load"),
            "one load event: {between:?}"
        );
        assert_eq!(spec.data["spec"]["replicas"], 2);
    }
    let (before, _) = without.until("spec").await;
    assert!(before.iter().all(|e| e.event != "load"), "{before:?}");
    assert!(
        without
            .next_within(Duration::from_millis(300))
            .await
            .is_none_or(|e| e.event != "load")
    );
}
