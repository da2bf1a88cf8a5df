/// The committed document must be exactly what the code generates.
#[test]
fn the_committed_openapi_document_matches_the_code() {
    let generated = modelplane::api::openapi_document();
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json"))
            .expect("openapi/openapi.json exists");
    assert!(
        committed == generated,
        "openapi/openapi.json is stale: run `cargo run --bin modelplane -- openapi > openapi/openapi.json`"
    );
}

#[test]
fn every_route_is_documented() {
    let document: serde_json::Value =
        serde_json::from_str(&modelplane::api::openapi_document()).unwrap();
    let paths = document["paths"].as_object().unwrap();
    for path in [
        "/api/v1/projects",
        "/api/v1/projects/{project}",
        "/api/v1/projects/{project}/deployments",
        "/api/v1/projects/{project}/deployments/{name}",
        "/api/v1/projects/{project}/deployments/{name}/scale",
        "/api/v1/projects/{project}/deployments/{name}/restart",
        "/api/v1/projects/{project}/deployments/{name}/rollback",
        "/api/v1/projects/{project}/deployments/{name}/revisions",
        "/api/v1/projects/{project}/deployments/{name}/events",
        "/api/v1/projects/{project}/events",
        "/healthz",
        "/readyz",
    ] {
        assert!(paths.contains_key(path), "{path} is not documented");
    }
}
