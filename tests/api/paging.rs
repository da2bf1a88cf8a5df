//! Cursor paging and list filters.

use std::collections::HashSet;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{TestApp, error_fields, expect_problem, valid_spec};

#[sqlx::test]
async fn paging_through_250_records_has_no_gap_and_no_duplicate(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    for i in 0..250 {
        let response = app
            .create_deployment("team-a", &format!("model-{i:03}"))
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/projects/team-a/deployments?limit=40&cursor={c}"),
            None => "/api/v1/projects/team-a/deployments?limit=40".to_owned(),
        };
        let page: Value = app.get(&path).await.json().await.unwrap();
        pages += 1;
        for item in page["items"].as_array().unwrap() {
            seen.push(item["name"].as_str().unwrap().to_owned());
        }
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 7);
    let expected: Vec<String> = (0..250).map(|i| format!("model-{i:03}")).collect();
    assert_eq!(seen, expected, "creation order, no gap, no duplicate");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 250);
}

#[sqlx::test]
async fn the_page_size_is_bounded(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    for limit in ["0", "201", "x"] {
        let problem = expect_problem(
            app.get(&format!(
                "/api/v1/projects/team-a/deployments?limit={limit}"
            ))
            .await,
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert_eq!(error_fields(&problem), ["limit"]);
    }
    let problem = expect_problem(
        app.get("/api/v1/projects/team-a/deployments?colour=red")
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(problem["detail"].as_str().unwrap().contains("colour"));
}

#[sqlx::test]
async fn filters_select_by_phase_labels_and_name_prefix(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    for (name, labels) in [
        ("llama-8b", json!({"team": "nlp", "tier": "gold"})),
        ("llama-70b", json!({"team": "nlp", "tier": "silver"})),
        ("qwen", json!({"team": "search"})),
        ("mistral", json!({})),
    ] {
        let mut spec = valid_spec();
        spec["labels"] = labels;
        let response = app
            .post_json(
                "/api/v1/projects/team-a/deployments",
                &json!({"name": name, "spec": spec}),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    app.request(
        reqwest::Method::DELETE,
        "/api/v1/projects/team-a/deployments/mistral",
    )
    .send()
    .await
    .unwrap();

    let names = |query: &'static str| {
        let app = &app;
        async move {
            let page: Value = app
                .get(&format!("/api/v1/projects/team-a/deployments?{query}"))
                .await
                .json()
                .await
                .unwrap();
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        names("labelSelector=team%3Dnlp").await,
        ["llama-8b", "llama-70b"]
    );
    assert_eq!(
        names("labelSelector=team%3D%3Dnlp,tier!%3Dgold").await,
        ["llama-70b"]
    );
    assert_eq!(
        names("labelSelector=tier%20in%20(gold,silver)").await,
        ["llama-8b", "llama-70b"]
    );
    assert_eq!(
        names("labelSelector=team%20notin%20(nlp)").await,
        ["qwen", "mistral"]
    );
    assert_eq!(names("labelSelector=tier").await, ["llama-8b", "llama-70b"]);
    assert_eq!(names("labelSelector=!team").await, ["mistral"]);
    assert_eq!(names("namePrefix=llama").await, ["llama-8b", "llama-70b"]);
    assert_eq!(
        names("phase=Pending").await,
        ["llama-8b", "llama-70b", "qwen"]
    );
    assert_eq!(names("phase=Deleting").await, ["mistral"]);
    assert_eq!(names("phase=Pending&namePrefix=q").await, ["qwen"]);

    let problem = expect_problem(
        app.get("/api/v1/projects/team-a/deployments?phase=Sleeping")
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["phase"]);
    let problem = expect_problem(
        app.get("/api/v1/projects/team-a/deployments?labelSelector=a%20in%20(b")
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["labelSelector"]);
}

#[sqlx::test]
async fn a_cursor_is_bound_to_its_filters(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    for name in ["a-1", "a-2", "a-3"] {
        app.create_deployment("team-a", name).await;
    }
    let page: Value = app
        .get("/api/v1/projects/team-a/deployments?limit=1&namePrefix=a")
        .await
        .json()
        .await
        .unwrap();
    let cursor = page["nextCursor"].as_str().unwrap();
    let next: Value = app
        .get(&format!(
            "/api/v1/projects/team-a/deployments?limit=1&namePrefix=a&cursor={cursor}"
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(next["items"][0]["name"], "a-2");
    let problem = expect_problem(
        app.get(&format!(
            "/api/v1/projects/team-a/deployments?limit=1&phase=Ready&cursor={cursor}"
        ))
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["cursor"]);
    let problem = expect_problem(
        app.get("/api/v1/projects/team-a/deployments?cursor=garbage")
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(error_fields(&problem), ["cursor"]);
}
