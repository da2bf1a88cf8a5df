//! The metrics catalogue (`src/metrics.rs`), the README's table of it, and `/metrics`.

use std::path::{Path, PathBuf};

use metrics::Unit;
use modelplane::metrics::{ALL, Kind};
use reqwest::StatusCode;
use sqlx::PgPool;

use crate::common::{TestApp, sample};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The README's metrics table: the header line and every `|` line after it.
fn readme_table() -> String {
    let readme = std::fs::read_to_string(repo("README.md")).expect("README.md exists");
    let mut lines = readme
        .lines()
        .skip_while(|line| !line.starts_with("| Metric | Type | Labels | Meaning |"));
    let mut table = String::new();
    for line in lines.by_ref().take_while(|line| line.starts_with('|')) {
        table.push_str(line);
        table.push('\n');
    }
    table
}

#[test]
fn the_readme_table_is_the_metrics_catalogue() {
    let expected = modelplane::metrics::readme_table();
    let table = readme_table();
    assert!(
        !table.is_empty(),
        "README.md has no `| Metric | Type | Labels | Meaning |` table; it should be:\n\n{expected}"
    );
    assert!(
        table == expected,
        "README.md's metrics table differs from src/metrics.rs; it should be:\n\n{expected}"
    );
}

/// Every `NAME = "modelplane_…"` entry of `src/metrics.rs`, as (constant, metric name).
fn declared_in_source() -> Vec<(String, String)> {
    let source = std::fs::read_to_string(repo("src/metrics.rs")).unwrap();
    source
        .lines()
        .filter_map(|line| {
            let (ident, rest) = line.trim().split_once(" = \"modelplane_")?;
            let name = rest.split('"').next()?;
            Some((ident.to_owned(), format!("modelplane_{name}")))
        })
        .collect()
}

fn rust_sources(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path, text));
        }
    }
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
}

/// `src/metrics.rs` owns every name: each is declared there once, used somewhere (nobody
/// describes a metric nothing records), and spelled nowhere else.
#[test]
fn every_metric_is_declared_in_src_metrics_rs_and_recorded() {
    let declared = declared_in_source();
    let catalogue: Vec<&str> = ALL.iter().map(|m| m.name).collect();
    assert_eq!(
        declared.iter().map(|(_, n)| n.as_str()).collect::<Vec<_>>(),
        catalogue,
        "the names parsed from src/metrics.rs differ from metrics::ALL"
    );
    for metric in ALL {
        assert!(
            metric.name.starts_with("modelplane_"),
            "{} lacks the prefix",
            metric.name
        );
        match metric.kind {
            Kind::Counter => assert!(metric.name.ends_with("_total"), "{}", metric.name),
            // A histogram is of durations (`_seconds`) or of counts (no unit suffix).
            Kind::Histogram => match metric.unit {
                Some(Unit::Seconds) => {
                    assert!(metric.name.ends_with("_seconds"), "{}", metric.name)
                }
                Some(Unit::Count) => assert!(
                    !metric.name.ends_with("_seconds") && !metric.name.ends_with("_total"),
                    "{}",
                    metric.name
                ),
                other => panic!("{}: a histogram in {other:?}", metric.name),
            },
            Kind::Gauge => assert!(!metric.name.ends_with("_total"), "{}", metric.name),
        }
    }

    let mut sources = Vec::new();
    rust_sources(&repo("src"), &mut sources);
    let catalogue_file = repo("src/metrics.rs");
    for (ident, name) in &declared {
        let uses: usize = sources
            .iter()
            .map(|(_, text)| words(text).filter(|w| w == ident).count())
            .sum();
        assert!(
            uses >= 2,
            "{ident} ({name}) is declared in src/metrics.rs but nothing records it"
        );
    }
    for (path, text) in &sources {
        if *path == catalogue_file {
            continue;
        }
        for (_, name) in &declared {
            assert!(
                !text.contains(name.as_str()),
                "{} spells out {name}: use the constant in src/metrics.rs",
                path.display()
            );
        }
        for macro_name in ["counter!(\"", "gauge!(\"", "histogram!(\""] {
            assert!(
                !text.contains(macro_name),
                "{} names a metric with a literal: declare it in src/metrics.rs",
                path.display()
            );
        }
    }
}

#[sqlx::test]
async fn metrics_show_http_requests_by_route_and_status_and_the_pool(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("metrics-a").await;
    assert_eq!(app.get("/api/v1/projects").await.status(), StatusCode::OK);
    assert_eq!(
        app.get("/api/v1/projects/metrics-absent").await.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.get("/api/v1/no-such-route").await.status(),
        StatusCode::NOT_FOUND
    );

    let response = app.get("/metrics").await;
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.text().await.unwrap();

    // Every series this scrape must hold is described.
    for name in [
        modelplane::metrics::HTTP_REQUESTS,
        modelplane::metrics::HTTP_REQUEST_DURATION,
        modelplane::metrics::DB_POOL_CONNECTIONS,
        modelplane::metrics::DB_POOL_IDLE_CONNECTIONS,
        modelplane::metrics::DB_POOL_MAX_CONNECTIONS,
        modelplane::metrics::QUEUE_DEPTH,
    ] {
        let help = ALL.iter().find(|m| m.name == name).unwrap().help;
        assert!(
            body.contains(&format!("# HELP {name} {help}")),
            "no HELP for {name} in:\n{body}"
        );
    }
    assert!(body.contains("# TYPE modelplane_http_requests_total counter"));
    assert!(body.contains("# TYPE modelplane_http_request_duration_seconds histogram"));
    assert!(body.contains("# TYPE modelplane_db_pool_connections gauge"));

    // Requests by method, route template and status (other tests of this binary share the
    // recorder, so counts are at least ours).
    let get = "method=\"GET\"";
    let post = "method=\"POST\"";
    let projects = "route=\"/api/v1/projects\"";
    let project = "route=\"/api/v1/projects/{project}\"";
    let requests = modelplane::metrics::HTTP_REQUESTS;
    assert!(sample(&body, requests, &[post, projects, "status=\"201\""]).unwrap() >= 1.0);
    assert!(sample(&body, requests, &[get, projects, "status=\"200\""]).unwrap() >= 1.0);
    assert!(sample(&body, requests, &[get, project, "status=\"404\""]).unwrap() >= 1.0);
    assert!(
        sample(
            &body,
            requests,
            &[get, "route=\"unmatched\"", "status=\"404\""]
        )
        .unwrap()
            >= 1.0
    );
    let count = format!("{}_count", modelplane::metrics::HTTP_REQUEST_DURATION);
    assert!(sample(&body, &count, &[get, projects, "status=\"200\""]).unwrap() >= 1.0);
    let bucket = format!("{}_bucket", modelplane::metrics::HTTP_REQUEST_DURATION);
    assert!(
        sample(
            &body,
            &bucket,
            &[get, projects, "status=\"200\"", "le=\"+Inf\""]
        )
        .unwrap()
            >= 1.0
    );

    // The pool served those requests and the scrape's queue query. (Another test's scrape
    // may set the gauges from its own pool between ours, so they are not compared.)
    let open = sample(&body, modelplane::metrics::DB_POOL_CONNECTIONS, &[]).unwrap();
    let idle = sample(&body, modelplane::metrics::DB_POOL_IDLE_CONNECTIONS, &[]).unwrap();
    let max = sample(&body, modelplane::metrics::DB_POOL_MAX_CONNECTIONS, &[]).unwrap();
    assert!(open >= 1.0, "open connections: {open}");
    assert!(idle >= 0.0, "idle connections: {idle}");
    assert!(max >= 1.0, "max connections: {max}");
}
