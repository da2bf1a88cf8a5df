//! Concurrent gets of single deployments, read from Postgres together (`store::lookups`):
//! each request still gets its own row, sees every write committed before it, and is not
//! hurt by another request going away or by a failed batch.

use std::time::Duration;

use futures::FutureExt;
use modelplane::domain::{Load, LoadFigures, MetricsDialect};
use modelplane::store::hot::HotConnections;
use modelplane::store::lookups::DeploymentLookups;
use reqwest::StatusCode;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::common::TestApp;

async fn project_id(pool: &PgPool, name: &str) -> Uuid {
    sqlx::query_scalar("select id from project where name = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn concurrent_gets_share_one_statement_and_each_gets_its_own_row(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    for project in ["alpha", "beta"] {
        app.create_project(project).await;
    }
    for (project, name) in [
        ("alpha", "a"),
        ("alpha", "b"),
        ("alpha", "c"),
        ("beta", "a"),
    ] {
        let response = app.create_deployment(project, name).await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let alpha = project_id(&pool, "alpha").await;
    let beta = project_id(&pool, "beta").await;
    // alpha/a has a load reading, alpha/b one of its canary track only: the batch reads them
    // in the same statement as the rows, each into its own column.
    for (name, track, rps) in [("a", "all", 7.5), ("b", "canary", 2.5)] {
        sqlx::query(
            "insert into deployment_load (deployment_id, track, load)
             select id, $3, $4 from model_deployment where project_id = $1 and name = $2",
        )
        .bind(alpha)
        .bind(name)
        .bind(track)
        .bind(sqlx::types::Json(Load {
            as_of: chrono::Utc::now(),
            stale: false,
            reason: None,
            dialect: MetricsDialect::Vllm,
            pods: 1,
            pods_read: 1,
            figures: LoadFigures {
                requests_per_second: Some(rps),
                ..LoadFigures::default()
            },
        }))
        .execute(&pool)
        .await
        .unwrap();
    }
    let lookups = DeploymentLookups::new(HotConnections::new(pool.clone()));

    // The same name in two projects, a name asked twice, and names that do not exist (one
    // of them in a project that has no such deployment).
    let asked = [
        (alpha, "a"),
        (beta, "a"),
        (alpha, "b"),
        (alpha, "c"),
        (alpha, "a"),
        (alpha, "missing"),
        (beta, "b"),
        (Uuid::now_v7(), "a"),
    ];
    // All are queued before the test's (single-threaded) runtime runs a read.
    let rows = futures::future::join_all(
        asked
            .iter()
            .map(|(project, name)| lookups.find(*project, name)),
    )
    .await;
    for ((project, name), row) in asked.iter().zip(rows) {
        let row = row.unwrap();
        let exists = (*project == alpha && ["a", "b", "c"].contains(name))
            || (*project == beta && *name == "a");
        match row {
            Some(read) => {
                assert!(exists, "{name} in {project} does not exist");
                assert_eq!(
                    (read.row.project_id, read.row.name.as_str()),
                    (*project, *name)
                );
                let rps = read.load.map(|l| l.0.figures.requests_per_second);
                let canary_rps = read.canary_load.map(|l| l.0.figures.requests_per_second);
                match (*project == alpha).then_some(*name) {
                    Some("a") => assert_eq!(
                        (rps, canary_rps),
                        (Some(Some(7.5)), None),
                        "alpha/a's reading, each time it is asked"
                    ),
                    Some("b") => assert_eq!(
                        (rps, canary_rps),
                        (None, Some(Some(2.5))),
                        "alpha/b's canary reading"
                    ),
                    _ => assert_eq!(
                        (rps, canary_rps),
                        (None, None),
                        "{name} in {project} has no reading"
                    ),
                }
                assert!(read.autoscaling.is_none(), "no spec here autoscales");
            }
            None => assert!(!exists, "{name} in {project} was not found"),
        }
    }
    assert_eq!(
        lookups.statements(),
        1,
        "the eight gets waiting together were read in one statement"
    );

    // Alone, a get is its own statement.
    let read = lookups.find(beta, "a").await.unwrap().unwrap();
    assert_eq!(read.row.project_id, beta);
    assert_eq!(lookups.statements(), 2);
}

#[sqlx::test]
async fn a_get_sees_every_write_committed_before_it_arrived(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("alpha").await;
    for name in ["a", "b"] {
        assert_eq!(
            app.create_deployment("alpha", name).await.status(),
            StatusCode::CREATED
        );
    }
    let alpha = project_id(&pool, "alpha").await;
    let lookups = DeploymentLookups::new(HotConnections::new(pool.clone()));
    for replicas in 2..=6 {
        let scaled = app
            .post_json(
                "/api/v1/projects/alpha/deployments/a/scale",
                &json!({ "replicas": replicas }),
            )
            .await;
        assert_eq!(scaled.status(), StatusCode::OK);
        // Once the scale has answered, every get that starts sees it, batched or not.
        let rows = futures::future::join_all(
            ["a", "b", "a", "a"]
                .into_iter()
                .map(|name| lookups.find(alpha, name)),
        )
        .await;
        for row in rows {
            let row = row.unwrap().unwrap().row;
            if row.name == "a" {
                assert_eq!(row.spec.0.replicas, Some(replicas));
            }
        }
    }
}

#[sqlx::test]
async fn a_get_that_goes_away_does_not_take_the_others_with_it(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("alpha").await;
    for name in ["a", "b", "c", "d"] {
        assert_eq!(
            app.create_deployment("alpha", name).await.status(),
            StatusCode::CREATED
        );
    }
    let alpha = project_id(&pool, "alpha").await;
    let lookups = DeploymentLookups::new(HotConnections::new(pool.clone()));

    let mut gets: Vec<_> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|name| lookups.find(alpha, name).boxed())
        .collect();
    // Each is queued by its first poll; then two go away before any read ran.
    for get in &mut gets {
        assert!(get.as_mut().now_or_never().is_none());
    }
    let kept: Vec<_> = gets
        .drain(..)
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .collect();
    for (i, get) in kept {
        let row = get.await.unwrap().unwrap();
        assert_eq!(row.row.name, ["a", "b", "c", "d"][i]);
    }
    // The batch tasks gave their places back: a later get is read.
    let row = tokio::time::timeout(Duration::from_secs(10), lookups.find(alpha, "a"))
        .await
        .expect("a later get is answered")
        .unwrap();
    assert_eq!(row.unwrap().row.name, "a");
}

#[sqlx::test]
async fn when_the_database_is_gone_each_get_gets_an_error(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("alpha").await;
    let alpha = project_id(&pool, "alpha").await;
    let lookups = DeploymentLookups::new(HotConnections::new(pool.clone()));
    pool.close().await;
    let answers = tokio::time::timeout(
        Duration::from_secs(30),
        futures::future::join_all(
            ["a", "b", "c"]
                .into_iter()
                .map(|name| lookups.find(alpha, name)),
        ),
    )
    .await
    .expect("every get is answered");
    for answer in answers {
        assert!(
            matches!(answer, Err(sqlx::Error::PoolClosed)),
            "a get without a database is the pool's error, not an empty answer: {answer:?}"
        );
    }
}
