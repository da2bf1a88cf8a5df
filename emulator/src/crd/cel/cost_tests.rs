//! Tests of the CEL cost model: the estimates, the CRD-time limits and the runtime budget.

use super::check::{check_expression, node_ty};
use super::cost::SchemaSizes;
use super::estimate::estimate;
use super::*;
use serde_json::json;

const SCHEMA_PATH: &str = "spec.versions[0].schema.openAPIV3Schema";
const HINT: &str = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";

fn spec_schema(props: Value, rules: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": props, "x-kubernetes-validations": rules},
        },
    })
}

fn messages(causes: &[Cause]) -> Vec<(String, String, String)> {
    causes
        .iter()
        .map(|c| (c.reason.clone(), c.field.clone(), c.message.clone()))
        .collect()
}

fn rule_at(i: usize) -> String {
    format!("{SCHEMA_PATH}.properties[spec].x-kubernetes-validations[{i}].rule")
}

fn forbidden(field: String, detail: &str) -> (String, String, String) {
    (
        "FieldValueForbidden".into(),
        field,
        format!("Forbidden: {detail}"),
    )
}

/// The estimated cost (`MaxCost`) of a rule on an object of `props`.
fn estimated(props: Value, rule: &str) -> u64 {
    let mut nodes = Vec::new();
    let schema = json!({"type": "object", "properties": props});
    let root = build_node(&mut nodes, &schema, false);
    let ty = node_ty(&nodes, root).expect("typed");
    let c = check_expression(&nodes, rule, &ty, &ty).unwrap_or_else(|e| panic!("{rule}: {e}"));
    let mut sizes = SchemaSizes {
        nodes: &nodes,
        root,
    };
    estimate(c.program.expression(), &c.types, &mut sizes)
}

// apiextensions-apiserver pkg/apiserver/schema/cel/celcoststability_test.go
// (TestCelEstimatedCostStability): the estimates of cel-go with the schema's sizes.
#[test]
fn estimates_match_upstream_cost_stability() {
    let int = json!({"type": "integer"});
    let string = json!({"type": "string"});
    let ints = json!({"type": "array", "items": int});
    let set = json!({"type": "array", "items": string, "x-kubernetes-list-type": "set"});
    let map = json!({"type": "object", "additionalProperties": string});
    let cases = [
        (
            json!({"val1": ints, "val2": ints}),
            "1 in self.val1",
            1572865,
        ),
        (
            json!({"val1": ints, "val2": ints}),
            "self.val2[0] in self.val1",
            1572868,
        ),
        (
            json!({"val1": ints, "val2": ints}),
            "self.val1 + [4, 5] == [1, 2, 3, 4, 5]",
            24,
        ),
        (
            json!({"val1": ints, "val2": ints}),
            "has(self.val1) && has(self.val2)",
            2,
        ),
        (
            json!({"val1": ints}),
            "self.val1.all(k, size(self.val1) > 0)",
            11010044,
        ),
        (
            json!({"val1": ints}),
            "self.val1.exists_one(k, self.val1 == [2])",
            23592949,
        ),
        (
            json!({"val1": ints}),
            "size(self.val1.filter(k, size(self.val1) > 1)) == 1",
            26738686,
        ),
        (
            json!({"val1": set, "val2": set}),
            "self.val1 == self.val2",
            104862,
        ),
        (json!({"val1": set}), "'a' in self.val1", 1048577),
        (
            json!({"val1": set}),
            "self.val1.all(k, size(self.val1) > 0)",
            7340028,
        ),
        (
            json!({"val1": map, "val2": map}),
            "self.val1 == self.val2",
            39326,
        ),
        (json!({"val1": map}), "'k1' in self.val1", 3),
        (
            json!({"val1": map}),
            "self.val1.all(k, size(self.val1) > 0)",
            2752508,
        ),
        (
            json!({"val1": int, "val6": string}),
            "string(self.val1) == self.val6",
            314578,
        ),
        (
            json!({"val6": string, "val7": {"type": "string", "format": "byte"}}),
            "bytes(self.val6) == self.val7",
            629150,
        ),
        (
            json!({"val1": {"type": "string", "format": "duration"}}),
            "self.val1.getHours() == 1",
            4,
        ),
        (
            json!({"enumStr": {"type": "string", "enum": ["Pending", "Available", "Bound", "Released", "Failed"]}}),
            "self.enumStr in ['Pending', 'Available']",
            14,
        ),
        (
            json!({"enumStr": {"type": "string", "enum": ["Pending", "Failed"]}}),
            "self.enumStr == 'Pending'",
            3,
        ),
    ];
    for (props, rule, want) in cases {
        assert_eq!(estimated(props, rule), want, "{rule}");
    }
}

// apiextensions-apiserver pkg/apis/apiextensions/validation/validation.go
// (getExpressionCost, getCostErrorMessage, TotalCost): a rule over an unbounded list of
// unbounded strings is refused at CRD time, its cost also failing the CRD-wide limit.
#[test]
fn unbounded_list_of_strings_is_refused() {
    let schema = spec_schema(
        json!({"names": {"type": "array", "items": {"type": "string"}}}),
        json!([{"rule": "self.names.all(n, n.contains('x'))"}]),
    );
    let errors = Rules::compile(&schema, SCHEMA_PATH).err().expect("refused");
    assert_eq!(
        messages(&errors),
        [
            forbidden(
                rule_at(0),
                &format!("estimated rule cost exceeds budget by factor of more than 100x {HINT}")
            ),
            forbidden(
                rule_at(0),
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
            ),
            forbidden(
                SCHEMA_PATH.to_string(),
                &format!(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {HINT}"
                )
            ),
        ]
    );
    // The same rule, with the list and its strings bounded, is accepted.
    let bounded = spec_schema(
        json!({"names": {"type": "array", "maxItems": 100, "items": {"type": "string", "maxLength": 64}}}),
        json!([{"rule": "self.names.all(n, n.contains('x'))"}]),
    );
    assert!(Rules::compile(&bounded, SCHEMA_PATH).is_ok());
}

// validation.go (getExpressionCost, CELSchemaContext.MaxCardinality): a rule under lists
// costs its estimate times the product of their maxItems, or, under an unbounded list,
// times the request size over the value's minimum size; and the factor is printed with
// Go's %f below 1.5x.
#[test]
fn cardinality_multiplies_the_rule_cost() {
    // `self.contains('x')` on a string of at most 4*4 characters costs ceil(1.6)*1 + 1 = 3.
    let item = json!({"type": "string", "maxLength": 4, "x-kubernetes-validations": [{"rule": "self.contains('x')"}]});
    let bounded = spec_schema(
        json!({"l": {"type": "array", "maxItems": 4_000_000, "items": item}}),
        json!([]),
    );
    let at = format!(
        "{SCHEMA_PATH}.properties[spec].properties[l].items.x-kubernetes-validations[0].rule"
    );
    assert_eq!(
        messages(
            &Rules::compile(&bounded, SCHEMA_PATH)
                .err()
                .expect("refused")
        ),
        [forbidden(
            at,
            &format!("estimated rule cost exceeds budget by factor of 1.200000x {HINT}")
        )]
    );
    // Unbounded: 3 * (3145728 / (2 + 1)) = 3145728, within the limit.
    let unbounded = spec_schema(json!({"l": {"type": "array", "items": item}}), json!([]));
    assert!(Rules::compile(&unbounded, SCHEMA_PATH).is_ok());
}

// validation.go (TotalCost): rules each within the per-expression limit that together
// exceed StaticEstimatedCRDCostLimit are refused, the four most expensive named.
#[test]
fn rules_together_exceeding_the_crd_limit_are_refused() {
    // Each costs 1000 * (8004 + 3i) + 3 (a 1000-item list of 80000-byte strings).
    let rules: Vec<Value> = (0..13)
        .map(|i| json!({"rule": format!("self.names.all(n, n.contains('x'){})", " && n.size() > 0".repeat(i))}))
        .collect();
    let schema = spec_schema(
        json!({"names": {"type": "array", "maxItems": 1000, "items": {"type": "string", "maxLength": 20000}}}),
        Value::Array(rules),
    );
    let errors = Rules::compile(&schema, SCHEMA_PATH).err().expect("refused");
    let total: u64 = (0..13).map(|i| 1000 * (8004 + 3 * i) + 3).sum();
    let factor = total as f64 / 100_000_000.0;
    let contributed =
        "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema";
    assert_eq!(
        messages(&errors),
        [
            forbidden(rule_at(12), contributed),
            forbidden(rule_at(11), contributed),
            forbidden(rule_at(10), contributed),
            forbidden(rule_at(9), contributed),
            forbidden(
                SCHEMA_PATH.to_string(),
                &format!(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of {factor:.6}x {HINT}"
                )
            ),
        ]
    );
}

/// Rules on `spec` over a list of at most 200000 integers, each costing 45 per item.
fn heavy_rules(count: usize) -> Rules {
    let pred = vec!["x > 0"; 21].join(" && ");
    let rules: Vec<Value> = (0..count)
        .map(|_| json!({"rule": format!("self.a.all(x, {pred})")}))
        .collect();
    let schema = spec_schema(
        json!({"a": {"type": "array", "maxItems": 200_000, "items": {"type": "integer"}}}),
        Value::Array(rules),
    );
    Rules::compile(&schema, SCHEMA_PATH).unwrap_or_else(|e| panic!("{e:#?}"))
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (validateExpressions):
// a rule accepted at CRD time (200000 items allowed) whose evaluation on a large object
// exceeds PerCallLimit stops validation with cel-go's cancellation error.
#[test]
fn evaluation_exceeding_the_per_call_limit_fails() {
    let rules = heavy_rules(2);
    let small = json!({"spec": {"a": vec![1; 100]}});
    assert_eq!(messages(&rules.validate(&small, None)), []);
    // 23000 items cost 45 * 23000 + 3 > 1000000; the second rule is not run.
    let large = json!({"spec": {"a": vec![1; 23_000]}});
    let pred = vec!["x > 0"; 21].join(" && ");
    assert_eq!(
        messages(&rules.validate(&large, None)),
        [(
            "FieldValueInvalid".into(),
            "spec".into(),
            format!(
                "Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.a.all(x, {pred})"
            )
        )]
    );
}

// validation.go (validateExpressions): evaluations within PerCallLimit that together
// exceed RuntimeCELCostBudget stop validation where the budget runs out.
#[test]
fn evaluations_exceeding_the_runtime_budget_fail() {
    // 21000 items cost 945003 per rule: ten fit in 10000000, the eleventh does not.
    let rules = heavy_rules(11);
    let obj = json!({"spec": {"a": vec![1; 21_000]}});
    assert_eq!(
        messages(&rules.validate(&obj, None)),
        [(
            "FieldValueInvalid".into(),
            "spec".into(),
            "Invalid value: \"object\": validation failed due to running out of cost budget, no further validation rules will be run".into()
        )]
    );
    assert_eq!(messages(&heavy_rules(10).validate(&obj, None)), []);
}
