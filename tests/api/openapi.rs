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

/// Security finding 10: what the server enforces is stated in the document, so clients and
/// fuzzers see it: `If-Match`'s format, a non-empty `cursor`, the bounds of `replicas`.
#[test]
fn the_document_states_the_constraints_the_server_enforces() {
    let document: serde_json::Value =
        serde_json::from_str(&modelplane::api::openapi_document()).unwrap();
    let parameters: Vec<&serde_json::Value> = document["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .flat_map(|operation| operation["parameters"].as_array().into_iter().flatten())
        .collect();
    let if_match: Vec<_> = parameters
        .iter()
        .filter(|p| p["name"] == "If-Match")
        .collect();
    assert!(!if_match.is_empty());
    for p in if_match {
        let pattern = p["schema"]["pattern"]
            .as_str()
            .expect("If-Match has a pattern");
        let re = regex::Regex::new(pattern).unwrap();
        assert!(re.is_match("\"abc\"") && re.is_match("W/\"abc\", \"def\"") && re.is_match("*"));
        assert!(!re.is_match("abc"));
    }
    let cursors: Vec<_> = parameters
        .iter()
        .filter(|p| p["name"] == "cursor")
        .collect();
    assert!(!cursors.is_empty());
    for p in cursors {
        assert_eq!(p["schema"]["minLength"], 1, "{p}");
    }
    let replicas = &document["components"]["schemas"]["ScaleDeployment"]["properties"]["replicas"];
    assert_eq!(replicas["minimum"], 0, "{replicas}");
    assert!(replicas["maximum"].is_number(), "{replicas}");
}
