use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, error_fields, expect_problem};

#[sqlx::test]
async fn a_project_is_created_read_listed_and_deleted(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let response = app
        .post_json(
            "/api/v1/projects",
            &json!({"name": "team-a", "namespace": "models-a"}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(response.headers()["location"], "/api/v1/projects/team-a");
    let created: Value = response.json().await.unwrap();
    assert_eq!(created["namespace"], "models-a");
    assert_eq!(created["namespaceAdopted"], false);
    assert_eq!(
        created["id"].as_str().unwrap().as_bytes()[14],
        b'7',
        "a UUIDv7"
    );

    let got: Value = app
        .get("/api/v1/projects/team-a")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got, created);

    app.create_project("team-b").await;
    let list: Value = app.get("/api/v1/projects").await.json().await.unwrap();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["team-a", "team-b"]);
    assert!(list["nextCursor"].is_null());

    let response = app
        .request(Method::DELETE, "/api/v1/projects/team-a")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    expect_problem(
        app.get("/api/v1/projects/team-a").await,
        StatusCode::NOT_FOUND,
    )
    .await;
}

#[sqlx::test]
async fn the_namespace_defaults_to_the_name(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let project = app.create_project("team-a").await;
    assert_eq!(project["namespace"], "team-a");
}

#[sqlx::test]
async fn system_namespaces_and_bad_names_are_refused(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    for (body, field) in [
        (json!({"name": "kube-system"}), "name"),
        (json!({"name": "default"}), "name"),
        (
            json!({"name": "team-a", "namespace": "kube-public"}),
            "namespace",
        ),
        (
            json!({"name": "team-a", "namespace": "kube-node-lease"}),
            "namespace",
        ),
        (json!({"name": "Team_A"}), "name"),
        (json!({"name": "team-a", "extra": 1}), "extra"),
    ] {
        let problem = expect_problem(
            app.post_json("/api/v1/projects", &body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(error_fields(&problem), [field], "{body}");
    }
    assert_eq!(app.count_rows("project").await, 0);
}

#[sqlx::test]
async fn names_and_namespaces_are_unique(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let problem = expect_problem(
        app.post_json(
            "/api/v1/projects",
            &json!({"name": "team-a", "namespace": "other"}),
        )
        .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(error_fields(&problem), ["name"]);
    let problem = expect_problem(
        app.post_json(
            "/api/v1/projects",
            &json!({"name": "team-b", "namespace": "team-a"}),
        )
        .await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(error_fields(&problem), ["namespace"]);
    assert_eq!(app.count_rows("project").await, 1);
}

#[sqlx::test]
async fn a_project_with_deployments_cannot_be_deleted(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let response = app
        .request(Method::DELETE, "/api/v1/projects/team-a")
        .send()
        .await
        .unwrap();
    let problem = expect_problem(response, StatusCode::CONFLICT).await;
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("still has deployments")
    );
    assert_eq!(app.count_rows("project").await, 1);
}
