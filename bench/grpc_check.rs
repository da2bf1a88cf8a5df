//! The key check's gRPC protocol driven as Envoy's ext_authz filter drives it: one
//! `envoy.service.auth.v3.Authorization/Check` per request over long-lived HTTP/2
//! connections, each naming a random live key (`Authorization: Bearer`) and the path of a
//! random deployment. `bench/authz.sh` starts modelplane and runs this beside wrk (HTTP).
//!
//! Environment: `ADDR` (host:port of the key check), `KEYS` and `PATHS` (files, one key or
//! request path per line), `DURATION` and `WARMUP` (seconds), `CONNECTIONS` (HTTP/2
//! connections, one caller each) and `RATE` (checks/s over all callers; 0: as fast as they
//! go). Prints one line: `checks_per_second p50_us p99_us refused`.

use std::time::{Duration, Instant};

use envoy_types::ext_authz::v3::pb::CheckRequest;
use envoy_types::pb::envoy::service::auth::v3::AttributeContext;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

fn number(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
}

fn lines(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .map(str::to_owned)
        .collect()
}

fn check_request(key: &str, path: &str) -> CheckRequest {
    CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "POST".into(),
                    host: "gateway.bench".into(),
                    path: path.into(),
                    headers: [("authorization".to_owned(), format!("Bearer {key}"))].into(),
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            ..AttributeContext::default()
        }),
    }
}

/// One caller: checks until `until`, one at a time, paced to `every` when set. Returns each
/// check's latency in microseconds, and how many were not let through.
async fn caller(
    mut client: AuthorizationClient<tonic::transport::Channel>,
    keys: std::sync::Arc<Vec<String>>,
    paths: std::sync::Arc<Vec<String>>,
    until: Instant,
    every: Option<Duration>,
) -> (Vec<u64>, u64) {
    let (mut latencies, mut refused) = (Vec::new(), 0);
    let mut next = Instant::now();
    while Instant::now() < until {
        let key = &keys[rand::random_range(0..keys.len())];
        let path = &paths[rand::random_range(0..paths.len())];
        let request = check_request(key, path);
        let started = Instant::now();
        let answer = client.check(request).await;
        latencies.push(started.elapsed().as_micros() as u64);
        let allowed = answer.is_ok_and(|a| a.into_inner().status.is_some_and(|s| s.code == 0));
        refused += u64::from(!allowed);
        if let Some(every) = every {
            next += every;
            tokio::time::sleep_until(next.into()).await;
        }
    }
    (latencies, refused)
}

async fn run(seconds: u64, connections: u64, rate: u64) -> (f64, u64, u64, u64) {
    let keys = std::sync::Arc::new(lines(&var("KEYS")));
    let paths = std::sync::Arc::new(lines(&var("PATHS")));
    let until = Instant::now() + Duration::from_secs(seconds);
    let every = (rate > 0).then(|| Duration::from_secs_f64(connections as f64 / rate as f64));
    let mut callers = Vec::new();
    for _ in 0..connections {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", var("ADDR")))
            .expect("an address")
            .connect()
            .await
            .expect("the key check answers");
        callers.push(tokio::spawn(caller(
            AuthorizationClient::new(channel),
            keys.clone(),
            paths.clone(),
            until,
            every,
        )));
    }
    let (mut all, mut refused) = (Vec::new(), 0);
    for c in callers {
        let (latencies, r) = c.await.expect("a caller");
        all.extend(latencies);
        refused += r;
    }
    all.sort_unstable();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    (
        all.len() as f64 / seconds as f64,
        at(0.5),
        at(0.99),
        refused,
    )
}

// One thread: the callers share this machine's two cores with modelplane and Postgres, and
// a thread hop per call would be the caller's cost, not the check's.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let connections = number("CONNECTIONS", 16);
    let rate = number("RATE", 0);
    run(number("WARMUP", 3), connections, rate).await;
    let (rps, p50, p99, refused) = run(number("DURATION", 10), connections, rate).await;
    println!("{rps:.0} {p50} {p99} {refused}");
}
