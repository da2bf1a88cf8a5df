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
