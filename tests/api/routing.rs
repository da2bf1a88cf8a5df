//! Tenant isolation on the shared Gateway: no spec lets one project's route take another's
//! requests, and no two deployments of a project shadow each other.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, error_fields, expect_problem, valid_spec};

fn spec_with_routing(routing: Value) -> Value {
    let mut spec = valid_spec();
    spec["routing"] = routing;
    spec
}

async fn create(app: &TestApp, project: &str, name: &str, routing: Value) -> reqwest::Response {
    app.post_json(
        &format!("/api/v1/projects/{project}/deployments"),
        &json!({"name": name, "spec": spec_with_routing(routing)}),
    )
    .await
}

/// [`create`], taking the other way when `batched`: without a GPU to fit, a create is
/// committed with the creates waiting beside it (`store::creates`), and with one, in a
/// transaction of its own. Racing both ways checks that they lock the same things in the
/// same order.
async fn create_either_way(
    app: &TestApp,
    project: &str,
    name: &str,
    routing: Value,
    batched: bool,
) -> reqwest::Response {
    let mut spec = spec_with_routing(routing);
    if batched {
        spec["resources"]
            .as_object_mut()
            .expect("the valid spec has resources")
            .remove("gpu");
    }
    app.post_json(
        &format!("/api/v1/projects/{project}/deployments"),
        &json!({"name": name, "spec": spec}),
    )
    .await
}

async fn two_projects(pool: PgPool) -> TestApp {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    app.create_project("team-b").await;
    app
}

#[sqlx::test]
async fn a_path_outside_the_projects_prefix_is_refused_on_the_shared_gateway(pool: PgPool) {
    let app = two_projects(pool).await;
    assert_eq!(
        create(&app, "team-b", "qwen", json!({})).await.status(),
        StatusCode::CREATED
    );
    // The attack from the report: a longer prefix under another project's path wins on the Gateway.
    for prefix in [
        "/team-b/qwen/v1/chat",
        "/team-b",
        "/",
        "/team-ab",
        "/other/team-a",
    ] {
        let problem = expect_problem(
            create(&app, "team-a", "evil", json!({"pathPrefix": prefix})).await,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(
            error_fields(&problem),
            ["spec.routing.pathPrefix"],
            "{prefix}"
        );
    }
    // A merge patch cannot move an existing route there either.
    assert_eq!(
        create(&app, "team-a", "mine", json!({})).await.status(),
        StatusCode::CREATED
    );
    let problem = expect_problem(
        app.patch(
            "/api/v1/projects/team-a/deployments/mine",
            &json!({"spec": {"routing": {"pathPrefix": "/team-b/qwen/v1"}}}),
            None,
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["spec.routing.pathPrefix"]);
    assert_eq!(app.count_rows("model_deployment").await, 2);
    assert_eq!(app.count_rows("deployment_revision").await, 2);
}

#[sqlx::test]
async fn paths_under_the_projects_own_prefix_are_accepted(pool: PgPool) {
    let app = two_projects(pool).await;
    for (name, prefix) in [("a", "/team-a/models/a"), ("b", "/team-a/models/b/")] {
        assert_eq!(
            create(&app, "team-a", name, json!({"pathPrefix": prefix}))
                .await
                .status(),
            StatusCode::CREATED,
            "{prefix}"
        );
    }
}

#[sqlx::test]
async fn a_hostname_belongs_to_the_first_project_that_routes_it(pool: PgPool) {
    let app = two_projects(pool).await;
    let host = json!({"hostname": "qwen.models.example.com", "pathPrefix": "/qwen"});
    assert_eq!(
        create(&app, "team-a", "qwen", host.clone()).await.status(),
        StatusCode::CREATED
    );
    // Another deployment of the same project may share it on another path.
    assert_eq!(
        create(
            &app,
            "team-a",
            "other",
            json!({"hostname": "qwen.models.example.com", "pathPrefix": "/other"})
        )
        .await
        .status(),
        StatusCode::CREATED
    );
    let problem = expect_problem(
        create(&app, "team-b", "qwen", host.clone()).await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(error_fields(&problem), ["spec.routing.hostname"]);
    assert!(
        !problem["detail"].as_str().unwrap().contains("team-a"),
        "the holder is not revealed: {problem}"
    );
    // Not by a patch either, and the hostname stays held while the holder is being deleted.
    assert_eq!(
        create(&app, "team-b", "mine", json!({})).await.status(),
        StatusCode::CREATED
    );
    for name in ["qwen", "other"] {
        let deleted = app
            .request(
                Method::DELETE,
                &format!("/api/v1/projects/team-a/deployments/{name}"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), StatusCode::ACCEPTED);
    }
    let problem = expect_problem(
        app.patch(
            "/api/v1/projects/team-b/deployments/mine",
            &json!({"spec": {"routing": {"hostname": "qwen.models.example.com"}}}),
            None,
        )
        .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(error_fields(&problem), ["spec.routing.hostname"]);
    // Once the holder's records are gone, the hostname is free.
    sqlx::query("delete from model_deployment where name in ('qwen', 'other')")
        .execute(&app.pool)
        .await
        .unwrap();
    let moved = app
        .patch(
            "/api/v1/projects/team-b/deployments/mine",
            &json!({"spec": {"routing": {"hostname": "qwen.models.example.com"}}}),
            None,
        )
        .await;
    assert_eq!(moved.status(), StatusCode::OK);
}

#[sqlx::test]
async fn concurrent_claims_of_one_hostname_leave_it_with_one_project(pool: PgPool) {
    let app = two_projects(pool).await;
    let app = &app;
    let attempts = (0..16).map(|i| async move {
        let project = if i % 2 == 0 { "team-a" } else { "team-b" };
        let routing = json!({"hostname": "race.example.com", "pathPrefix": format!("/p{i}")});
        create_either_way(app, project, &format!("d{i}"), routing, i % 4 < 2)
            .await
            .status()
    });
    let statuses: Vec<StatusCode> = futures::future::join_all(attempts).await;
    assert!(statuses.contains(&StatusCode::CREATED));
    let holders: Vec<String> = sqlx::query_scalar(
        "select distinct p.name from model_deployment d join project p on p.id = d.project_id
         where d.route_hostname = 'race.example.com'",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(holders.len(), 1, "{holders:?} ({statuses:?})");
}

/// Writers of one project's host-less routes lock by path (shared on ancestors, exclusive
/// on the path), so only overlapping paths take turns: of concurrent creates at nested
/// paths, exactly one wins, while creates at unrelated paths all succeed together. Half of
/// them are committed in batches and half alone ([`create_either_way`]).
#[sqlx::test]
async fn concurrent_creates_of_nested_paths_leave_exactly_one(pool: PgPool) {
    let app = two_projects(pool).await;
    let app = &app;
    for round in 0..5 {
        let paths = [
            format!("/team-a/r{round}"),
            format!("/team-a/r{round}/v1"),
            format!("/team-a/r{round}/v1/chat"),
            format!("/team-a/r{round}/v1/chat/x"),
        ];
        let attempts = paths.iter().enumerate().map(|(i, path)| async move {
            let routing = json!({"pathPrefix": path});
            let batched = (i + round) % 2 == 0;
            create_either_way(app, "team-a", &format!("n{round}-{i}"), routing, batched)
                .await
                .status()
        });
        let unrelated = (0..4).map(|i| async move {
            let routing = json!({"pathPrefix": format!("/team-a/u{round}-{i}")});
            create_either_way(app, "team-a", &format!("u{round}-{i}"), routing, i % 2 == 0)
                .await
                .status()
        });
        let (nested, unrelated): (Vec<StatusCode>, Vec<StatusCode>) = futures::join!(
            futures::future::join_all(attempts),
            futures::future::join_all(unrelated)
        );
        let created = nested.iter().filter(|s| **s == StatusCode::CREATED).count();
        assert_eq!(created, 1, "round {round}: {nested:?}");
        assert!(
            nested
                .iter()
                .all(|s| *s == StatusCode::CREATED || *s == StatusCode::CONFLICT),
            "{nested:?}"
        );
        assert!(
            unrelated.iter().all(|s| *s == StatusCode::CREATED),
            "{unrelated:?}"
        );
    }
}

#[sqlx::test]
async fn wildcard_and_reserved_hostnames_are_refused_on_the_shared_gateway(pool: PgPool) {
    let app = two_projects(pool).await;
    // `gateway.example.com` is the shared Gateway's own hostname in the test configuration.
    for host in ["*.example.com", "gateway.example.com"] {
        let problem = expect_problem(
            create(&app, "team-a", "qwen", json!({"hostname": host})).await,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(error_fields(&problem), ["spec.routing.hostname"], "{host}");
    }
}

#[sqlx::test]
async fn the_projects_own_gateway_takes_any_path(pool: PgPool) {
    let app = two_projects(pool).await;
    let response = create(
        &app,
        "team-a",
        "qwen",
        json!({"gateway": "team-a/own", "pathPrefix": "/"}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    // Another project's Gateway is not its own.
    let problem = expect_problem(
        create(
            &app,
            "team-b",
            "qwen",
            json!({"gateway": "team-a/own", "pathPrefix": "/"}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["spec.routing.pathPrefix"]);
}

#[sqlx::test]
async fn two_deployments_of_a_project_may_not_shadow_each_other(pool: PgPool) {
    let app = two_projects(pool).await;
    assert_eq!(
        create(&app, "team-a", "qwen", json!({})).await.status(),
        StatusCode::CREATED
    );
    for prefix in ["/team-a/qwen/v1", "/team-a/qwen", "/team-a"] {
        let problem = expect_problem(
            create(&app, "team-a", "other", json!({"pathPrefix": prefix})).await,
            StatusCode::CONFLICT,
        )
        .await;
        assert_eq!(
            error_fields(&problem),
            ["spec.routing.pathPrefix"],
            "{prefix}"
        );
        assert!(
            problem["detail"].as_str().unwrap().contains("`qwen`"),
            "names the other deployment: {problem}"
        );
    }
    // Element-wise: `/team-a/qwen2` does not overlap `/team-a/qwen`.
    assert_eq!(
        create(
            &app,
            "team-a",
            "qwen2",
            json!({"pathPrefix": "/team-a/qwen2"})
        )
        .await
        .status(),
        StatusCode::CREATED
    );
    // The same prefix on another Gateway is another space.
    assert_eq!(
        create(
            &app,
            "team-a",
            "elsewhere",
            json!({"gateway": "gw/other", "pathPrefix": "/team-a/qwen"})
        )
        .await
        .status(),
        StatusCode::CREATED
    );
    // A rollback cannot bring an overlapping route back: move qwen2, take its old path, roll back.
    let moved = app
        .patch(
            "/api/v1/projects/team-a/deployments/qwen2",
            &json!({"spec": {"routing": {"pathPrefix": "/team-a/moved"}}}),
            None,
        )
        .await;
    assert_eq!(moved.status(), StatusCode::OK);
    assert_eq!(
        create(
            &app,
            "team-a",
            "taker",
            json!({"pathPrefix": "/team-a/qwen2"})
        )
        .await
        .status(),
        StatusCode::CREATED
    );
    let problem = expect_problem(
        app.post_json(
            "/api/v1/projects/team-a/deployments/qwen2/rollback",
            &json!({"revision": 1}),
        )
        .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(error_fields(&problem), ["spec.routing.pathPrefix"]);
}

#[sqlx::test]
async fn paths_the_gateway_api_refuses_are_refused_here(pool: PgPool) {
    let app = two_projects(pool).await;
    // gateway-api apis/v1/httproute_types.go, HTTPPathMatch: the real API server refuses these.
    for prefix in [
        "/team-a/../admin",
        "/team-a/./b",
        "/team-a/..",
        "/team-a/.",
        "/team-a//x",
    ] {
        let problem = expect_problem(
            create(&app, "team-a", "qwen", json!({"pathPrefix": prefix})).await,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(
            error_fields(&problem),
            ["spec.routing.pathPrefix"],
            "{prefix}"
        );
    }
    assert_eq!(app.count_rows("model_deployment").await, 0);
}

/// Creates and spec changes run their route-overlap lookup on a generic plan
/// (`store::begin_route_write`), which a connection keeps until the table's statistics
/// change. Planned on tables without statistics, as in a fresh installation, the lookup of
/// migration `route_overlap_index` walked the whole project through the name or phase
/// index on every create; it must be index probes of its own key whatever the planner knows.
#[sqlx::test]
async fn the_route_overlap_lookup_probes_its_own_index_even_without_statistics(pool: PgPool) {
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("set plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query(
        "prepare overlap(uuid, uuid, text, text, text, text[]) as
         select * from first_overlapping_route($1, $2, $3, $4, $5, $6)",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "explain execute overlap(gen_random_uuid(), gen_random_uuid(), '', null, '/a/b',
                                 array['/', '/a', '/a/b'])",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    // Plain or bitmap, every index scan is of the route key; nothing scans the table.
    let text = plan.join("\n");
    assert!(!text.contains("Seq Scan"), "{text}");
    let index_scans: Vec<&String> = plan
        .iter()
        .filter(|line| line.contains("Index Scan") || line.contains("Index Only Scan"))
        .collect();
    assert_eq!(index_scans.len(), 2, "{text}");
    for scan in index_scans {
        assert!(scan.contains("model_deployment_route_key_idx"), "{text}");
    }
}

/// What a refused create answers does not depend on how it is written (batched or in a
/// transaction of its own): a taken name first, then the shared Gateway's rules, then a
/// route another deployment holds.
#[sqlx::test]
async fn a_refused_create_answers_the_same_error_either_way(pool: PgPool) {
    let app = two_projects(pool).await;
    for batched in [true, false] {
        let taken = if batched { "taken-b" } else { "taken-t" };
        assert_eq!(
            create_either_way(&app, "team-a", taken, json!({}), batched)
                .await
                .status(),
            StatusCode::CREATED
        );
        let refusals = [
            // Its name is taken, and its path breaks the rules: the name.
            (
                taken,
                json!({"pathPrefix": "/team-b"}),
                StatusCode::CONFLICT,
                "name",
            ),
            // A free name and a path that breaks the rules and overlaps `taken`: the rules.
            (
                "free",
                json!({"pathPrefix": "/"}),
                StatusCode::UNPROCESSABLE_ENTITY,
                "spec.routing.pathPrefix",
            ),
            // A free name under `taken`'s path: the overlap.
            (
                "free",
                json!({"pathPrefix": format!("/team-a/{taken}/v1")}),
                StatusCode::CONFLICT,
                "spec.routing.pathPrefix",
            ),
        ];
        for (name, routing, status, field) in refusals {
            let problem = expect_problem(
                create_either_way(&app, "team-a", name, routing.clone(), batched).await,
                status,
            )
            .await;
            assert_eq!(
                error_fields(&problem),
                [field],
                "{name} {routing} {batched}"
            );
        }
    }
    assert_eq!(app.count_rows("model_deployment").await, 2);
    assert_eq!(app.count_rows("deployment_event").await, 2);
}
