//! modelplane as separate processes: several workers, and a port that is taken.

use std::time::Duration;

use crate::common::TestApp;
use reqwest::StatusCode;
use serde_json::json;
use sqlx::PgPool;

use super::*;

#[sqlx::test]
async fn two_worker_processes_share_the_work_and_a_killed_one_loses_nothing(pool: PgPool) {
    let emulator = super::emulator().start().await.unwrap();
    let (_dir, kubeconfig, database_url) = process_setup(&pool, &emulator, "workers");

    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    // A thousand records (the issue that made the worker fast asked this test to hold at that
    // size): created before the workers start, so both find a full queue.
    for i in 0..1000 {
        let response = app
            .post_json(
                "/api/v1/projects/team-a/deployments",
                &json!({"name": format!("m-{i}"), "spec": sim_spec()}),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let mut a = spawn_worker("worker-a", &database_url, &kubeconfig);
    let mut b = spawn_worker("worker-b", &database_url, &kubeconfig);
    let applied = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from model_deployment where applied_digest is not null and phase = 'Deploying'")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    wait_for("some records applied", Duration::from_secs(60), || async {
        applied().await >= 100
    })
    .await;
    a.kill().unwrap(); // SIGKILL: no chance to release its leases
    a.wait().unwrap();
    wait_for(
        "all 1,000 records to converge",
        Duration::from_secs(300),
        || async { applied().await == 1000 },
    )
    .await;
    b.kill().unwrap();
    b.wait().unwrap();

    // Every record's Deployment exists, and no record was applied by both workers interleaved.
    let log = emulator.requests().snapshot();
    let mut by_record: std::collections::HashMap<String, Vec<String>> =
        std::collections::HashMap::new();
    for request in log
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("/deployments/m-"))
    {
        let name = request.path.rsplit('/').next().unwrap().to_owned();
        by_record
            .entry(name)
            .or_default()
            .push(request.client_id.clone().unwrap_or_default());
    }
    assert_eq!(by_record.len(), 1000, "every record was applied");
    for (name, writers) in &by_record {
        let mut switches = writers.windows(2).filter(|w| w[0] != w[1]).count();
        if writers.first() == writers.last() && switches > 0 {
            switches += 1;
        }
        assert!(
            switches <= 1,
            "{name} was applied by both workers interleaved: {writers:?}"
        );
    }
    let writers: std::collections::HashSet<&String> = by_record.values().flatten().collect();
    assert!(
        writers.contains(&"worker-b".to_owned()),
        "worker-b took over"
    );
    emulator.shutdown().await;
}

/// A process that cannot listen on its port starts nothing else: before, the worker began
/// claiming and applying work, then the process exited 160 ms later on `Address already in
/// use`. Now the port is bound first, and the error names it and the setting that moves it.
#[sqlx::test]
async fn a_taken_port_stops_the_process_before_the_worker_starts(pool: PgPool) {
    let emulator = super::emulator().start().await.unwrap();
    let (_dir, kubeconfig, database_url) = process_setup(&pool, &emulator, "port");
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("team-a").await;
    create_in(&app, "waiting", sim_spec()).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_modelplane"))
            .args(["serve", "--listen", &address])
            .env("DATABASE_URL", database_url)
            .env("MODELPLANE_KUBECONFIG", kubeconfig)
            .env("MODELPLANE_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("MODELPLANE_BOOTSTRAP_TOKEN")
            .output()
            .expect("the modelplane binary runs")
    })
    .await
    .unwrap();
    drop(taken);
    assert!(!output.status.success());
    let log = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("cannot listen on 127.0.0.1:"), "{log}");
    assert!(log.contains("MODELPLANE_LISTEN"), "{log}");
    assert!(!log.contains("reconciler started"), "{log}");
    // Nothing was applied: the waiting record's work item is there, never claimed.
    let untouched: i64 = sqlx::query_scalar(
        "select count(*) from reconcile_work where attempts = 0 and lease_owner is null",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(untouched, 1);
}
