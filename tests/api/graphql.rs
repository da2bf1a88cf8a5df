//! GraphQL over the wire: queries, mutations with REST's field paths and codes, a
//! `graphql-transport-ws` subscription, GraphiQL served without a CDN, and the committed SDL.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{ADMIN_TOKEN, TestApp, WsClient, valid_spec};

async fn graphql_as(app: &TestApp, token: Option<&str>, query: &str, variables: Value) -> Value {
    let response = app
        .request_as(token, Method::POST, "/graphql")
        .json(&json!({"query": query, "variables": variables}))
        .send()
        .await
        .unwrap();
    response.json().await.unwrap()
}

async fn graphql(app: &TestApp, query: &str, variables: Value) -> Value {
    graphql_as(app, Some(ADMIN_TOKEN), query, variables).await
}

fn code(body: &Value) -> &str {
    body["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("an error with a code: {body}"))
}

async fn seed(app: &TestApp) {
    app.create_project("team-a").await;
    for (name, team) in [("alpha", "nlp"), ("beta", "nlp"), ("gamma", "vision")] {
        let mut spec = valid_spec();
        spec["labels"] = json!({"team": team});
        let created = app
            .post_json(
                "/api/v1/projects/team-a/deployments",
                &json!({"name": name, "spec": spec}),
            )
            .await;
        assert_eq!(created.status(), StatusCode::CREATED);
    }
}

const PAGE: &str = r#"query($after: String, $filter: DeploymentFilter) {
  deployments(project: "team-a", first: 2, after: $after, filter: $filter) {
    edges { cursor node { id name phase generation replicas { desired ready }
                          endpoints { external reason } objects { kind namespace name }
                          spec events(first: 5) { edges { node { kind actor } } }
                          revisions { edges { node { revision reason } } } } }
    pageInfo { hasNextPage endCursor }
  }
}"#;

#[sqlx::test]
async fn queries_page_filter_and_read_deployments_as_rest_does(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    seed(&app).await;

    let first = graphql(&app, PAGE, json!({})).await;
    assert!(first["errors"].is_null(), "{first}");
    let connection = &first["data"]["deployments"];
    let names: Vec<&str> = connection["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert_eq!(connection["pageInfo"]["hasNextPage"], true);
    let alpha = &connection["edges"][0]["node"];
    assert_eq!(alpha["phase"], "PENDING");
    assert_eq!(alpha["replicas"]["desired"], 1);
    assert_eq!(alpha["spec"]["labels"]["team"], "nlp");
    assert_eq!(alpha["events"]["edges"][0]["node"]["kind"], "Created");
    assert_eq!(alpha["revisions"]["edges"][0]["node"]["revision"], 1);
    assert_eq!(
        alpha["objects"][0],
        json!({"kind": "Deployment", "namespace": "team-a", "name": "alpha"})
    );
    // What the worker makes: a route (the test server has a default Gateway), no budget for
    // one replica.
    let kinds: Vec<&str> = alpha["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Deployment", "Service", "HTTPRoute"]);
    // The same as REST reports.
    let rest: Value = app
        .get("/api/v1/projects/team-a/deployments/alpha")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(alpha["spec"], rest["spec"]);
    assert_eq!(alpha["id"], rest["id"]);

    let after = connection["pageInfo"]["endCursor"].clone();
    let second = graphql(&app, PAGE, json!({"after": after})).await;
    let edges = second["data"]["deployments"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 1);
    assert_eq!(edges[0]["node"]["name"], "gamma");
    assert_eq!(
        second["data"]["deployments"]["pageInfo"]["hasNextPage"],
        false
    );

    let filtered = graphql(
        &app,
        PAGE,
        json!({"filter": {"labelSelector": "team=nlp", "namePrefix": "b"}}),
    )
    .await;
    let edges = filtered["data"]["deployments"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 1, "{filtered}");
    assert_eq!(edges[0]["node"]["name"], "beta");

    // By id; the dashboard tiles; who am I.
    let by_id = graphql(
        &app,
        "query($id: UUID) { deployment(id: $id) { name project } }",
        json!({"id": rest["id"]}),
    )
    .await;
    assert_eq!(
        by_id["data"]["deployment"],
        json!({"name": "alpha", "project": "team-a"})
    );
    let tiles = graphql(
        &app,
        r#"{ phaseCounts(project: "team-a") { phase count } gpus(project: "team-a") { requested inUse }
             viewer { name platformAdmin } }"#,
        json!({}),
    )
    .await;
    assert_eq!(
        tiles["data"]["phaseCounts"],
        json!([{"phase": "PENDING", "count": 3}])
    );
    assert_eq!(
        tiles["data"]["gpus"],
        json!({"requested": 3, "inUse": 0}),
        "one GPU per pod, one replica each"
    );
    assert_eq!(tiles["data"]["viewer"]["platformAdmin"], true);

    // A filter REST would refuse is refused with REST's field.
    let bad = graphql(
        &app,
        PAGE,
        json!({"filter": {"labelSelector": "team in nlp"}}),
    )
    .await;
    assert_eq!(code(&bad), "INVALID_INPUT");
    assert_eq!(
        bad["errors"][0]["extensions"]["errors"][0]["field"],
        "labelSelector"
    );
}

#[sqlx::test]
async fn mutations_follow_rests_rules_fields_and_codes(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let create = r#"mutation($name: String!, $spec: JSON!, $key: String) {
      createDeployment(project: "team-a", name: $name, spec: $spec, idempotencyKey: $key) { name generation phase }
    }"#;
    let created = graphql(
        &app,
        create,
        json!({"name": "qwen", "spec": valid_spec(), "key": "k1"}),
    )
    .await;
    assert_eq!(
        created["data"]["createDeployment"],
        json!({"name": "qwen", "generation": 1, "phase": "PENDING"}),
        "{created}"
    );
    // A retry with the same key replays; a second create of the name conflicts.
    let replayed = graphql(
        &app,
        create,
        json!({"name": "qwen", "spec": valid_spec(), "key": "k1"}),
    )
    .await;
    assert!(replayed["errors"].is_null(), "{replayed}");
    let taken = graphql(&app, create, json!({"name": "qwen", "spec": valid_spec()})).await;
    assert_eq!(code(&taken), "CONFLICT");

    // Invalid input names the same fields REST does.
    let mut spec = valid_spec();
    spec["model"]["source"] = json!("ftp://nope");
    spec["replicas"] = json!(-1);
    let invalid = graphql(&app, create, json!({"name": "bad", "spec": spec.clone()})).await;
    assert_eq!(code(&invalid), "INVALID_INPUT");
    let graphql_fields: Vec<String> = invalid["errors"][0]["extensions"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap().to_owned())
        .collect();
    let rest: Value = app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": "bad", "spec": spec}),
        )
        .await
        .json()
        .await
        .unwrap();
    let rest_fields: Vec<String> = rest["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(graphql_fields, rest_fields);
    assert!(graphql_fields.contains(&"spec.model.source".to_owned()));

    // expectedGeneration is If-Match.
    let scale = r#"mutation($replicas: Int!, $generation: Int) {
      scaleDeployment(project: "team-a", name: "qwen", replicas: $replicas, expectedGeneration: $generation) { generation spec }
    }"#;
    let scaled = graphql(&app, scale, json!({"replicas": 2, "generation": 1})).await;
    assert_eq!(
        scaled["data"]["scaleDeployment"]["generation"], 2,
        "{scaled}"
    );
    let stale = graphql(&app, scale, json!({"replicas": 3, "generation": 1})).await;
    assert_eq!(code(&stale), "PRECONDITION_FAILED");
    let out_of_range = graphql(&app, scale, json!({"replicas": -1})).await;
    assert_eq!(
        out_of_range["errors"][0]["extensions"]["errors"][0]["field"],
        "replicas"
    );
    let patched = graphql(
        &app,
        r#"mutation($patch: JSON!) { updateDeployment(project: "team-a", name: "qwen", patch: $patch) { spec } }"#,
        json!({"patch": {"labels": {"team": "nlp"}}}),
    )
    .await;
    assert_eq!(
        patched["data"]["updateDeployment"]["spec"]["labels"]["team"],
        "nlp"
    );

    // Roles: a viewer cannot change; another project's token does not see the project.
    let viewer = app.token_for("team-a", "dash", "viewer").await;
    let forbidden = graphql_as(&app, Some(&viewer), scale, json!({"replicas": 1})).await;
    assert_eq!(code(&forbidden), "FORBIDDEN");
    let read = graphql_as(
        &app,
        Some(&viewer),
        r#"{ deployment(project: "team-a", name: "qwen") { name } }"#,
        json!({}),
    )
    .await;
    assert_eq!(read["data"]["deployment"]["name"], "qwen");
    app.create_project("team-b").await;
    let outsider = app.token_for("team-b", "other", "admin").await;
    let hidden = graphql_as(
        &app,
        Some(&outsider),
        r#"{ deployment(project: "team-a", name: "qwen") { name } }"#,
        json!({}),
    )
    .await;
    assert_eq!(code(&hidden), "NOT_FOUND");

    // No credential: 401, with a GraphQL error body.
    let anonymous = app
        .request_as(None, Method::POST, "/graphql")
        .json(&json!({"query": "{ viewer { name } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let body: Value = anonymous.json().await.unwrap();
    assert_eq!(code(&body), "UNAUTHENTICATED");

    // GET runs queries, never mutations.
    let get = app
        .request(
            Method::GET,
            "/graphql?query=%7B%20viewer%20%7B%20name%20%7D%20%7D",
        )
        .send()
        .await
        .unwrap();
    let body: Value = get.json().await.unwrap();
    assert_eq!(body["data"]["viewer"]["name"], "token:bootstrap", "{body}");
    let mutation = "mutation { deleteDeployment(project: \"team-a\", name: \"qwen\") { name } }";
    let get_mutation = app
        .request(
            Method::GET,
            &format!(
                "/graphql?query={}",
                form_urlencoded::byte_serialize(mutation.as_bytes()).collect::<String>()
            ),
        )
        .send()
        .await
        .unwrap();
    let body: Value = get_mutation.json().await.unwrap();
    assert_eq!(code(&body), "INVALID_INPUT");
    // Nor one a multi-operation document names with `operationName`.
    let hidden = "query Q { viewer { name } } mutation M { deleteDeployment(project: \"team-a\", name: \"qwen\") { name } }";
    let get_hidden = app
        .request(
            Method::GET,
            &format!(
                "/graphql?operationName=M&query={}",
                form_urlencoded::byte_serialize(hidden.as_bytes()).collect::<String>()
            ),
        )
        .send()
        .await
        .unwrap();
    let body: Value = get_hidden.json().await.unwrap();
    assert_eq!(code(&body), "INVALID_INPUT", "{body}");
    let still_there = app.get("/api/v1/projects/team-a/deployments/qwen").await;
    let still_there: Value = still_there.json().await.unwrap();
    assert!(still_there["deletionRequestedAt"].is_null());
}

#[sqlx::test]
async fn a_websocket_subscription_sends_the_state_then_each_change(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    assert_eq!(
        app.create_deployment("team-a", "qwen").await.status(),
        StatusCode::CREATED
    );
    let mut client = WsClient::connect(&app, ADMIN_TOKEN).await.unwrap();
    client
        .send(json!({"id": "1", "type": "subscribe", "payload": {"query":
            r#"subscription { deploymentChanged(project: "team-a", name: "qwen") {
                 seq kind deletedId deployment { name generation spec } } }"#}}))
        .await;
    let first = client.next().await.unwrap();
    assert_eq!(first["type"], "next", "{first}");
    let change = &first["payload"]["data"]["deploymentChanged"];
    assert_eq!(
        change["kind"],
        Value::Null,
        "the state comes first: {first}"
    );
    assert_eq!(change["deployment"]["generation"], 1);

    let scaled = app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 2}),
        )
        .await;
    assert_eq!(scaled.status(), StatusCode::OK);
    loop {
        let message = client.next().await.unwrap();
        let change = &message["payload"]["data"]["deploymentChanged"];
        if change["kind"] == "SPEC" {
            assert_eq!(change["deployment"]["spec"]["replicas"], 2);
            assert!(change["seq"].as_i64().unwrap() > 0);
            break;
        }
    }

    // Another project's deployment cannot be subscribed to.
    app.create_project("team-b").await;
    let outsider = app.token_for("team-b", "other", "viewer").await;
    let mut other = WsClient::connect(&app, &outsider).await.unwrap();
    other
        .send(json!({"id": "1", "type": "subscribe", "payload": {"query":
            r#"subscription { deploymentChanged(project: "team-a", name: "qwen") { seq } }"#}}))
        .await;
    // Refused as REST refuses it: the project does not exist for this caller. (async-graphql
    // reports a resolver's refusal as a `next` carrying only errors, then `complete`.)
    let refused = other.next().await.unwrap();
    assert_eq!(refused["type"], "next", "{refused}");
    assert!(refused["payload"]["data"].is_null(), "{refused}");
    assert_eq!(
        refused["payload"]["errors"][0]["extensions"]["code"],
        "NOT_FOUND"
    );
    assert_eq!(other.next().await.unwrap()["type"], "complete");

    // A bad credential is refused at connection_init.
    assert!(WsClient::connect(&app, "mpt_not-a-token").await.is_err());
}

#[sqlx::test]
async fn graphiql_is_served_with_its_assets_and_no_cdn(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let page = app
        .request_as(None, Method::GET, "/graphql")
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(!html.contains("https://"), "no CDN: {html}");
    for asset in [
        "graphiql.min.js",
        "graphiql.min.css",
        "react.production.min.js",
        "react-dom.production.min.js",
    ] {
        assert!(html.contains(&format!("/graphql/assets/{asset}")));
        let file = app
            .request_as(None, Method::GET, &format!("/graphql/assets/{asset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(file.status(), StatusCode::OK, "{asset}");
        assert!(file.bytes().await.unwrap().len() > 1000, "{asset}");
    }
    let other = app
        .request_as(None, Method::GET, "/graphql/assets/..%2FCargo.toml")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
}

#[test]
fn the_committed_graphql_schema_matches_the_code() {
    let committed = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/schema.graphql"),
    )
    .unwrap();
    assert_eq!(
        committed,
        modelplane::api::graphql::sdl(),
        "run `cargo run --bin modelplane -- graphql-schema > openapi/schema.graphql`"
    );
}

/// Counts the SQL statements sqlx sends (it logs each one at target `sqlx::query`) per
/// request id: the HTTP span of the request the statement ran under.
mod statements {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id};
    use tracing::{Event, Subscriber};
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;

    static COUNTS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Default::default);

    struct RequestId(String);

    struct Counter;

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Counter {
        fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
            struct Find(Option<String>);
            impl Visit for Find {
                fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                    if field.name() == "request_id" {
                        self.0 = Some(format!("{value:?}"));
                    }
                }
            }
            let mut find = Find(None);
            attrs.record(&mut find);
            if let (Some(request_id), Some(span)) = (find.0, ctx.span(id)) {
                span.extensions_mut().insert(RequestId(request_id));
            }
        }

        fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
            if event.metadata().target() != "sqlx::query" {
                return;
            }
            let Some(scope) = ctx.event_scope(event) else {
                return;
            };
            for span in scope {
                if let Some(RequestId(id)) = span.extensions().get::<RequestId>() {
                    *COUNTS.lock().unwrap().entry(id.clone()).or_default() += 1;
                    return;
                }
            }
        }
    }

    pub fn install() {
        let subscriber = tracing_subscriber::registry().with(
            Counter.with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("sqlx::query", tracing::Level::TRACE)
                    .with_target("modelplane", tracing::Level::TRACE),
            ),
        );
        tracing::subscriber::set_global_default(subscriber)
            .expect("this test runs in its own process (cargo nextest)");
    }

    pub fn of(request_id: &str) -> usize {
        COUNTS.lock().unwrap().get(request_id).copied().unwrap_or(0)
    }
}

/// A page of deployments with their newest events and revision counts costs the same few
/// statements whatever its size: nested lists load in one batch each (DataLoaders).
#[sqlx::test]
async fn a_page_of_deployments_with_nested_lists_costs_a_fixed_number_of_statements(pool: PgPool) {
    statements::install();
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    for i in 0..100 {
        let created = app
            .post_json(
                "/api/v1/projects/team-a/deployments",
                &json!({"name": format!("model-{i:03}"), "spec": valid_spec()}),
            )
            .await;
        assert_eq!(created.status(), StatusCode::CREATED);
    }
    let query = r#"query($first: Int) { deployments(project: "team-a", first: $first) {
        edges { node { name phase latestEvents(count: 5) { kind actor } revisionCount
                       load { requestsPerSecond stale } } } } }"#;
    let run = |first: i64, request_id: &'static str| {
        let app = &app;
        async move {
            let body: Value = app
                .request(Method::POST, "/graphql")
                .header("x-request-id", request_id)
                .json(&json!({"query": query, "variables": {"first": first}}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert!(body["errors"].is_null(), "{body}");
            let edges = body["data"]["deployments"]["edges"]
                .as_array()
                .unwrap()
                .clone();
            assert_eq!(edges.len() as i64, first);
            assert_eq!(edges[0]["node"]["latestEvents"][0]["kind"], "Created");
            assert_eq!(edges[0]["node"]["revisionCount"], 1);
            statements::of(request_id)
        }
    };
    run(1, "warm-up").await;
    let hundred = run(100, "page-of-100").await;
    let ten = run(10, "page-of-10").await;
    assert!(hundred > 0, "statements are counted");
    assert_eq!(hundred, ten, "the count does not grow with the page");
    assert!(hundred <= 8, "a small fixed number: {hundred}");

    // The counter sees the difference a list read per deployment makes (`events` pages one
    // deployment's timeline at a time, so it is not batched).
    let per_item = r#"query($first: Int) { deployments(project: "team-a", first: $first) {
        edges { node { events(first: 1) { edges { node { kind } } } } } } }"#;
    let mut counts = Vec::new();
    for (first, id) in [(10, "unbatched-10"), (100, "unbatched-100")] {
        let body: Value = app
            .request(Method::POST, "/graphql")
            .header("x-request-id", id)
            .json(&json!({"query": per_item, "variables": {"first": first}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(body["errors"].is_null(), "{body}");
        counts.push(statements::of(id));
    }
    assert!(counts[1] >= counts[0] + 90, "{counts:?}");
}

#[sqlx::test]
async fn admins_manage_tokens_and_role_bindings_through_graphql(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let created = graphql(
        &app,
        r#"mutation { createToken(project: "team-a", name: "dash", role: VIEWER) { id name secret } }"#,
        json!({}),
    )
    .await;
    let token = &created["data"]["createToken"];
    let secret = token["secret"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"));
    let viewer = graphql_as(
        &app,
        Some(secret),
        "{ viewer { name roles { project role } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        viewer["data"]["viewer"],
        json!({"name": "token:dash", "roles": [{"project": "team-a", "role": "VIEWER"}]})
    );
    // A viewer cannot make tokens; a bad name names its field.
    let refused = graphql_as(
        &app,
        Some(secret),
        r#"mutation { createToken(project: "team-a", name: "x", role: ADMIN) { id } }"#,
        json!({}),
    )
    .await;
    assert_eq!(code(&refused), "FORBIDDEN");
    let bad = graphql(
        &app,
        r#"mutation { createToken(project: "team-a", name: "no spaces", role: VIEWER) { id } }"#,
        json!({}),
    )
    .await;
    assert_eq!(bad["errors"][0]["extensions"]["errors"][0]["field"], "name");

    let binding = graphql(
        &app,
        r#"mutation { createRoleBinding(project: "team-a", subjectKind: "group", subject: "ml", role: EDITOR) }"#,
        json!({}),
    )
    .await;
    let binding_id = binding["data"]["createRoleBinding"]
        .as_str()
        .unwrap_or_else(|| panic!("{binding}"));
    let bad_kind = graphql(
        &app,
        r#"mutation { createRoleBinding(project: "team-a", subjectKind: "robot", subject: "x", role: EDITOR) }"#,
        json!({}),
    )
    .await;
    assert_eq!(
        bad_kind["errors"][0]["extensions"]["errors"][0]["field"],
        "subjectKind"
    );
    let removed = graphql(
        &app,
        "mutation($id: UUID!) { deleteRoleBinding(project: \"team-a\", id: $id) }",
        json!({"id": binding_id}),
    )
    .await;
    assert_eq!(removed["data"]["deleteRoleBinding"], binding_id);

    let revoked = graphql(
        &app,
        "mutation($id: UUID!) { revokeToken(project: \"team-a\", id: $id) }",
        json!({"id": token["id"]}),
    )
    .await;
    assert_eq!(revoked["data"]["revokeToken"], token["id"]);
    let after = app
        .request_as(Some(secret), Method::POST, "/graphql")
        .json(&json!({"query": "{ viewer { name } }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED);
}

/// GraphiQL in Chromium (Debian's, driven by playwright-core) with every request outside
/// this modelplane aborted: it loads, takes a token in its Headers tab and runs a query.
#[sqlx::test]
async fn graphiql_runs_a_query_in_a_browser_with_no_internet(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/graphiql.js");
    let output = tokio::process::Command::new("node")
        .arg(&script)
        .arg(&app.base)
        .arg(ADMIN_TOKEN)
        .output()
        .await
        .expect("node runs (scripts/browser.sh installs what it needs)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["outside"],
        json!([]),
        "nothing is fetched from elsewhere"
    );
    assert_eq!(report["errors"], json!([]), "no script error");
    // The result pane as shown (CodeMirror's text, not strict JSON).
    let result = report["result"].as_str().unwrap();
    assert!(result.contains(r#""name": "token:bootstrap""#), "{result}");
}

/// A list's cost is its page size times its items': a document asking for 200 deployments
/// with 200 revisions each is refused before anything runs; introspection can be turned off.
#[sqlx::test]
async fn documents_over_the_complexity_limit_are_refused_and_introspection_can_be_off(
    pool: PgPool,
) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    let heavy = graphql(
        &app,
        r#"{ deployments(project: "team-a", first: 200) { edges { node {
             revisions(first: 200) { edges { node { revision spec } } } } } } }"#,
        json!({}),
    )
    .await;
    assert!(heavy["data"].is_null(), "{heavy}");
    assert!(
        heavy["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("too complex"),
        "{heavy}"
    );
    let fine = graphql(
        &app,
        r#"{ deployments(project: "team-a", first: 100) { edges { node { name
             latestEvents(count: 5) { kind } revisionCount } } } }"#,
        json!({}),
    )
    .await;
    assert!(fine["errors"].is_null(), "{fine}");

    let introspection = "{ __schema { queryType { name } } }";
    let open = graphql(&app, introspection, json!({})).await;
    assert_eq!(open["data"]["__schema"]["queryType"]["name"], "Query");
    let closed = modelplane::api::graphql::schema(modelplane::api::graphql::GraphqlLimits {
        introspection: false,
        ..Default::default()
    });
    // async-graphql answers a disabled introspection with `__schema: null`.
    let refused = closed
        .execute(introspection)
        .await
        .data
        .into_json()
        .unwrap();
    assert_eq!(refused, json!({"__schema": null}));
}

/// `deploymentsChanged` watches a project through a filter, and `afterSeq` resumes a
/// subscription without missing what changed while it was away.
#[sqlx::test]
async fn a_project_subscription_filters_and_resumes_after_a_sequence_number(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    app.create_project("team-a").await;
    for name in ["chat-a", "embed-a"] {
        assert_eq!(
            app.create_deployment("team-a", name).await.status(),
            StatusCode::CREATED
        );
    }
    let subscribe = |after: Option<i64>| {
        json!({"id": "1", "type": "subscribe", "payload": {
            "query": r#"subscription($after: Int) { deploymentsChanged(project: "team-a",
                          filter: {namePrefix: "chat-"}, afterSeq: $after) {
                          seq kind deployment { name generation } } }"#,
            "variables": {"after": after}}})
    };
    let mut client = WsClient::connect(&app, ADMIN_TOKEN).await.unwrap();
    client.send(subscribe(None)).await;
    let state = client.next().await.unwrap();
    let change = &state["payload"]["data"]["deploymentsChanged"];
    assert_eq!(
        change["deployment"]["name"], "chat-a",
        "only the filter's: {state}"
    );
    assert_eq!(change["kind"], Value::Null);
    let seen = change["seq"].as_i64().unwrap();
    drop(client);

    // Away: both change; on resume only chat-a's change arrives, and nothing from before.
    for name in ["embed-a", "chat-a"] {
        let scaled = app
            .post_json(
                &format!("/api/v1/projects/team-a/deployments/{name}/scale"),
                &json!({"replicas": 2}),
            )
            .await;
        assert_eq!(scaled.status(), StatusCode::OK);
    }
    let mut client = WsClient::connect(&app, ADMIN_TOKEN).await.unwrap();
    client.send(subscribe(Some(seen))).await;
    let resumed = client.next().await.unwrap();
    let change = &resumed["payload"]["data"]["deploymentsChanged"];
    assert_eq!(change["kind"], "SPEC", "{resumed}");
    assert_eq!(change["deployment"]["name"], "chat-a");
    assert_eq!(change["deployment"]["generation"], 2);
    assert!(change["seq"].as_i64().unwrap() > seen);
}

#[sqlx::test]
async fn adapters_are_added_and_removed_as_rest_does(pool: PgPool) {
    let app = TestApp::spawn(pool).await;
    seed(&app).await;
    let add = r#"mutation($adapter: String!, $source: String!, $secret: String) {
      addAdapter(project: "team-a", name: "alpha", adapter: $adapter, source: $source, secretName: $secret) { spec }
    }"#;
    let added = graphql(
        &app,
        add,
        json!({"adapter": "fin-lora", "source": "s3://loras/fin", "secret": "loras-s3"}),
    )
    .await;
    assert_eq!(
        added["data"]["addAdapter"]["spec"]["adapters"],
        json!([{"name": "fin-lora", "source": "s3://loras/fin", "secretRef": {"name": "loras-s3"}}]),
        "{added}"
    );
    // The request's own fields are named as REST names them.
    let other = graphql(
        &app,
        add,
        json!({"adapter": "x", "source": "s3://other/x", "secret": "other-s3"}),
    )
    .await;
    assert_eq!(code(&other), "INVALID_INPUT");
    assert_eq!(
        other["errors"][0]["extensions"]["errors"][0]["field"], "secretRef.name",
        "{other}"
    );
    let hf = graphql(
        &app,
        add,
        json!({"adapter": "y", "source": "hf://acme/y", "secret": "loras-s3"}),
    )
    .await;
    assert_eq!(
        hf["errors"][0]["extensions"]["errors"][0]["field"], "secretRef",
        "{hf}"
    );
    let removed = graphql(
        &app,
        r#"mutation { removeAdapter(project: "team-a", name: "alpha", adapter: "fin-lora") { spec } }"#,
        json!({}),
    )
    .await;
    assert!(removed["errors"].is_null(), "{removed}");
    assert!(
        removed["data"]["removeAdapter"]["spec"]["adapters"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{removed}"
    );
}
