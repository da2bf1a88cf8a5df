//! Live status, measured on this machine (not asserted by the tests):
//! - a committed change → delivered to N concurrent SSE watchers of one deployment (p50/p99);
//! - the GraphQL query of a page of 100 deployments with status, endpoints, their 5 newest
//!   events and revision counts (p50/p99), beside REST's list of the same page.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench --bench live -- 1000`
//! (the argument is N; each watcher is a TCP connection on both ends, so N needs twice as many
//! file descriptors: `ulimit -n` must allow it). It creates (and drops) its own database.

use modelplane_testkit::scratch as support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use modelplane::api::rate_limit::RateLimiter;
use modelplane::api::{self, AppState};
use modelplane::auth::Authenticator;
use modelplane::config::HttpConfig;
use modelplane::domain::{DeploymentSpec, SpecLimits};
use modelplane::service::capacity::WriteOptions;
use modelplane::service::deployments::{
    CreateDeployment, ScaleDeployment, create_deployment, scale_deployment,
};
use modelplane::service::projects::{CreateProject, create_project};
use modelplane::service::{self, Actor, Context, Precondition};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "mpt_bench-admin-token-0123456789abcdef0123456789";
const CHANGES: i64 = 20;

#[tokio::main]
async fn main() {
    modelplane::install_crypto_provider();
    let watchers: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1000);
    let database = support::ScratchDatabase::create("modelplane_bench_live").await;
    let pool = database.pool.clone();

    let hot = modelplane::store::hot::HotConnections::new(pool.clone());

    let ctx = Context {
        pool: pool.clone(),
        hot: hot.clone(),
        lookups: modelplane::store::lookups::DeploymentLookups::new(hot.clone()),
        creates: modelplane::store::creates::DeploymentCreates::new(hot),
        access: Default::default(),
        limits: SpecLimits::default(),
        routing: Default::default(),
        gpu_resource_name: "nvidia.com/gpu".into(),
        load_interval: std::time::Duration::from_secs(15),
    };
    service::tokens::ensure_bootstrap_token(&ctx, TOKEN)
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let state = AppState::new(modelplane::api::SharedState {
        changes: service::live::ChangeHub::start_with(
            pool.clone(),
            stop.clone(),
            service::live::StreamLimits {
                per_caller: usize::MAX,
                per_address: usize::MAX,
                ..Default::default()
            },
        )
        .await
        .unwrap(),
        graphql: api::graphql::schema(api::graphql::GraphqlLimits::default()),
        graphiql_assets: std::path::Path::new("web/graphiql/node_modules").into(),
        web_dir: std::path::Path::new("web/dist").into(),
        models: service::chat::ModelClient::new(
            service::chat::ChatVia::ApiServer,
            std::time::Duration::from_secs(10),
            None,
            false,
        ),
        auth: Arc::new(Authenticator::new(ctx.clone(), None)),
        ctx: ctx.clone(),
        metrics: PrometheusBuilder::new().build_recorder().handle(),
        limiter: Arc::new(RateLimiter::new(10_000_000, 1_000_000)),
        metrics_require_auth: false,
        readiness: Arc::new([]),
    });
    let app = api::router(state, &HttpConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        // Every watcher of the bench is one caller on one address: no caps in the way.
        let limits = modelplane::listener::ConnectionLimits {
            max_connections: 1_000_000,
            max_connections_per_address: 1_000_000,
            ..Default::default()
        };
        modelplane::listener::serve(listener, app, limits, std::future::pending()).await;
    });

    let actor = Actor::system();
    create_project(
        &ctx,
        &actor,
        CreateProject {
            name: "bench".into(),
            namespace: None,
            adopt_namespace: false,
        },
    )
    .await
    .unwrap();
    let spec: DeploymentSpec =
        serde_json::from_value(json!({"model": {"source": "hf://a/b"}, "engine": {"kind": "sim"}}))
            .unwrap();
    let create = |name: String| {
        let (ctx, actor, spec) = (ctx.clone(), actor.clone(), spec.clone());
        async move {
            create_deployment(
                &ctx,
                &actor,
                "bench",
                CreateDeployment { name, spec },
                None,
                WriteOptions::default(),
            )
            .await
            .unwrap();
        }
    };
    create("model-000".into()).await;

    // 1. One change, many watchers.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    // received[w] = (generation, when) for every `spec` event watcher w saw.
    let received: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let mut ready = Vec::new();
    for _ in 0..watchers {
        let (client, received, url) = (
            client.clone(),
            received.clone(),
            format!("{base_url}/api/v1/projects/bench/deployments/model-000/watch"),
        );
        let (tx, rx) = tokio::sync::oneshot::channel();
        ready.push(rx);
        tokio::spawn(async move {
            let mut response = client.get(url).bearer_auth(TOKEN).send().await.unwrap();
            let mut buffer = String::new();
            let mut tx = Some(tx);
            while let Ok(Some(chunk)) = response.chunk().await {
                let now = Instant::now();
                buffer.push_str(std::str::from_utf8(&chunk).unwrap());
                while let Some(end) = buffer.find("\n\n") {
                    let block: String = buffer.drain(..end + 2).collect();
                    let field = |name: &str| {
                        block
                            .lines()
                            .find_map(|l| l.strip_prefix(name))
                            .map(str::trim_start)
                    };
                    let event = field("event:");
                    if event == Some("state") {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(());
                        }
                    } else if event == Some("spec") {
                        let data = field("data:").unwrap();
                        let deployment: Value = serde_json::from_str(data).unwrap();
                        let generation = deployment["generation"].as_i64().unwrap();
                        received.lock().unwrap().push((generation, now));
                    }
                }
            }
        });
    }
    for rx in ready {
        rx.await.unwrap();
    }
    println!("{watchers} watchers connected; {CHANGES} changes follow");
    let mut latencies = Vec::new();
    for generation in 2..=CHANGES + 1 {
        let committed = Instant::now();
        scale_deployment(
            &ctx,
            &actor,
            "bench",
            "model-000",
            // 2, 1, 2, …: each a real change (the same count again would be no generation).
            ScaleDeployment {
                replicas: 2 - generation % 2,
                role: None,
            },
            &Precondition::None,
            WriteOptions::default(),
        )
        .await
        .unwrap();
        let limit = Instant::now() + Duration::from_secs(30);
        loop {
            let seen: Vec<Instant> = received
                .lock()
                .unwrap()
                .iter()
                .filter(|(g, _)| *g == generation)
                .map(|(_, at)| *at)
                .collect();
            if seen.len() == watchers {
                latencies.extend(seen.iter().map(|at| at.duration_since(committed)));
                break;
            }
            assert!(
                Instant::now() < limit,
                "only {} of {watchers} watchers saw generation {generation}",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    latencies.sort();
    println!(
        "change committed → delivered to {watchers} SSE watchers: p50 {:?}, p99 {:?}, max {:?} ({} deliveries)",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies.last().unwrap(),
        latencies.len()
    );

    // 2. A page of 100 deployments.
    for i in 1..100 {
        create(format!("model-{i:03}")).await;
    }
    let query = r#"{ deployments(project: "bench", first: 100) { edges { node {
        name phase message replicas { desired ready } endpoints { cluster external }
        latestEvents(count: 5) { kind message } revisionCount } } } }"#;
    let mut graphql = Vec::new();
    let mut rest = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let body: Value = client
            .post(format!("{base_url}/graphql"))
            .bearer_auth(TOKEN)
            .json(&json!({"query": query}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        graphql.push(started.elapsed());
        assert_eq!(
            body["data"]["deployments"]["edges"]
                .as_array()
                .unwrap()
                .len(),
            100,
            "{body}"
        );
        let started = Instant::now();
        let list = client
            .get(format!(
                "{base_url}/api/v1/projects/bench/deployments?limit=100"
            ))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        rest.push(started.elapsed());
        assert!(!list.is_empty());
    }
    graphql.sort();
    rest.sort();
    println!(
        "GraphQL page of 100 with status, endpoints, 5 newest events, revision count: p50 {:?}, p99 {:?}",
        percentile(&graphql, 0.50),
        percentile(&graphql, 0.99)
    );
    println!(
        "REST list of the same 100 (no events): p50 {:?}, p99 {:?}",
        percentile(&rest, 0.50),
        percentile(&rest, 0.99)
    );

    stop.cancel();
    database.drop().await;
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
