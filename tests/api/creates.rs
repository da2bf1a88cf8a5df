//! Concurrent creates committed in one transaction (`store::creates`): each still gets its
//! own outcome, a refused one leaves nothing behind, and the locks and checks of creates
//! made one by one hold inside a batch too.

use modelplane::domain::{DeploymentSpec, DeploymentStatus, RouteClaim, SpecLimits};
use modelplane::store::creates::DeploymentCreates;
use modelplane::store::deployments::{CreateOutcome, NewDeployment};
use modelplane::store::hot::HotConnections;
use modelplane::store::routes::RouteSpace;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::common::TestApp;

/// What a create of `name` with `routing` in project `project` asks the store for.
struct Asked {
    id: Uuid,
    project_id: Uuid,
    name: String,
    spec: DeploymentSpec,
    route: RouteClaim,
    space: RouteSpace,
    status: DeploymentStatus,
}

async fn asked(pool: &PgPool, project: &str, name: &str, routing: Value) -> Asked {
    let project_id = sqlx::query_scalar("select id from project where name = $1")
        .bind(project)
        .fetch_one(pool)
        .await
        .unwrap();
    let spec: DeploymentSpec = serde_json::from_value(json!({
        "model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"},
        "engine": {"kind": "sim"},
        "replicas": 1,
        "routing": routing,
    }))
    .unwrap();
    let serving = spec.parse(name, &SpecLimits::default()).unwrap();
    let route = RouteClaim::of(&serving.spec, project, name, None);
    Asked {
        id: Uuid::now_v7(),
        project_id,
        name: name.to_owned(),
        space: RouteSpace::of(project_id, &route),
        spec: serving.spec,
        route,
        status: DeploymentStatus::pending(1),
    }
}

impl Asked {
    fn new_deployment(&self) -> NewDeployment<'_> {
        NewDeployment {
            id: self.id,
            project_id: self.project_id,
            name: &self.name,
            spec: &self.spec,
            route: &self.route,
            status: &self.status,
            message: "created in a test",
            actor: "test",
            trace_parent: None,
        }
    }
}

async fn count(pool: &PgPool, sql: &'static str, id: Uuid) -> i64 {
    sqlx::query_scalar(sql)
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test]
async fn concurrent_creates_share_one_transaction_and_each_gets_its_own_outcome(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("alpha").await;
    app.create_project("beta").await;
    assert_eq!(
        app.create_deployment("alpha", "taken").await.status(),
        StatusCode::CREATED
    );
    let creates = DeploymentCreates::new(HotConnections::new(pool.clone()));

    let asks = [
        asked(&pool, "alpha", "one", json!({})).await,
        asked(
            &pool,
            "alpha",
            "taken",
            json!({"pathPrefix": "/alpha/elsewhere"}),
        )
        .await,
        asked(&pool, "alpha", "twice", json!({})).await,
        asked(
            &pool,
            "alpha",
            "twice",
            json!({"pathPrefix": "/alpha/other"}),
        )
        .await,
        // Under `one`'s path, which the same batch writes first.
        asked(
            &pool,
            "alpha",
            "under",
            json!({"pathPrefix": "/alpha/one/v1"}),
        )
        .await,
        // The same name in another project is another deployment.
        asked(&pool, "beta", "one", json!({})).await,
    ];
    // All are queued before the test's (single-threaded) runtime runs a batch.
    let outcomes = futures::future::join_all(
        asks.iter()
            .map(|a| creates.create(a.new_deployment(), &a.space)),
    )
    .await;
    assert_eq!(
        creates.statements(),
        1,
        "the six creates waiting together were one statement"
    );
    let outcomes: Vec<CreateOutcome> = outcomes.into_iter().map(Result::unwrap).collect();
    match &outcomes[..] {
        [
            CreateOutcome::Created(one),
            CreateOutcome::NameTaken,
            CreateOutcome::Created(twice),
            CreateOutcome::NameTaken,
            CreateOutcome::Overlaps { name, path },
            CreateOutcome::Created(beta_one),
        ] => {
            assert_eq!((one.id, one.name.as_str()), (asks[0].id, "one"));
            assert_eq!((twice.id, twice.name.as_str()), (asks[2].id, "twice"));
            assert_eq!((name.as_str(), path.as_str()), ("one", "/alpha/one"));
            assert_eq!(beta_one.project_id, asks[5].project_id);
        }
        other => panic!("unexpected outcomes: {other:?}"),
    }

    // The refused left nothing: no row, no timeline entry, no change for subscribers.
    for refused in [&asks[1], &asks[3], &asks[4]] {
        for sql in [
            "select count(*) from model_deployment where id = $1",
            "select count(*) from deployment_event where deployment_id = $1",
            "select count(*) from deployment_change where deployment_id = $1",
            "select count(*) from reconcile_work where deployment_id = $1",
        ] {
            assert_eq!(count(&pool, sql, refused.id).await, 0, "{sql}");
        }
    }
    // The written are whole: row, revision 1, the Created entry, two changes, a work item.
    for written in [&asks[0], &asks[2], &asks[5]] {
        for (sql, expected) in [
            ("select count(*) from model_deployment where id = $1", 1),
            (
                "select count(*) from deployment_revision where deployment_id = $1 and revision = 1",
                1,
            ),
            (
                "select count(*) from deployment_event where deployment_id = $1 and kind = 'Created'",
                1,
            ),
            (
                "select count(*) from deployment_change where deployment_id = $1",
                2,
            ),
            (
                "select count(*) from reconcile_work where deployment_id = $1",
                1,
            ),
        ] {
            assert_eq!(count(&pool, sql, written.id).await, expected, "{sql}");
        }
    }
    // And the API reads them as any other.
    let read = app
        .request(Method::GET, "/api/v1/projects/alpha/deployments/twice")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);

    // Alone, a create is a batch of its own.
    let alone = asked(&pool, "alpha", "alone", json!({})).await;
    let outcome = creates.create(alone.new_deployment(), &alone.space).await;
    assert!(matches!(outcome, Ok(CreateOutcome::Created(_))));
    assert_eq!(creates.statements(), 2);
}

#[sqlx::test]
async fn a_batch_leaves_quota_projects_to_be_admitted_and_writes_the_rest(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("alpha").await;
    app.create_project("capped").await;
    let quota = app
        .request(Method::PUT, "/api/v1/projects/capped/quota")
        .json(&json!({"replicas": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(quota.status(), StatusCode::OK);
    let creates = DeploymentCreates::new(HotConnections::new(pool.clone()));

    let asks = [
        asked(&pool, "capped", "a", json!({})).await,
        asked(&pool, "alpha", "a", json!({})).await,
    ];
    let outcomes = futures::future::join_all(
        asks.iter()
            .map(|a| creates.create(a.new_deployment(), &a.space)),
    )
    .await;
    assert_eq!(creates.statements(), 1);
    assert!(matches!(outcomes[0], Ok(CreateOutcome::NeedsAdmission)));
    assert!(matches!(outcomes[1], Ok(CreateOutcome::Created(_))));
    assert_eq!(
        count(
            &pool,
            "select count(*) from model_deployment where id = $1",
            asks[0].id
        )
        .await,
        0,
        "a create that must be admitted is not written"
    );

    // Through the API, the quota project's create is admitted and written.
    assert_eq!(
        app.create_deployment("capped", "a").await.status(),
        StatusCode::CREATED
    );
    assert_eq!(
        app.create_deployment("capped", "b").await.status(),
        StatusCode::CONFLICT,
        "past the quota of one replica"
    );
}

#[sqlx::test]
async fn with_no_connection_every_create_of_a_batch_gets_the_error(pool: PgPool) {
    let app = TestApp::spawn(pool.clone()).await;
    app.create_project("alpha").await;
    let asks = [
        asked(&pool, "alpha", "a", json!({})).await,
        asked(&pool, "alpha", "b", json!({})).await,
    ];
    let creates = DeploymentCreates::new(HotConnections::new(pool.clone()));
    pool.close().await;
    let outcomes = futures::future::join_all(
        asks.iter()
            .map(|a| creates.create(a.new_deployment(), &a.space)),
    )
    .await;
    for outcome in outcomes {
        assert!(
            matches!(outcome, Err(sqlx::Error::PoolClosed)),
            "{outcome:?}"
        );
    }
}
