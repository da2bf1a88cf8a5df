//! Tests of the CEL rules: compiling, evaluating and ratcheting.

use super::*;
use serde_json::json;

const SCHEMA_PATH: &str = "spec.versions[0].schema.openAPIV3Schema";

/// The compiled rules of a published CRD's version.
fn published(file: &str, version: &str) -> Rules {
    let crd = crate::crd::published_crd(file);
    let versions = crd["spec"]["versions"].as_array().expect("versions");
    let (i, v) = versions
        .iter()
        .enumerate()
        .find(|(_, v)| v["name"] == version)
        .unwrap_or_else(|| panic!("{file} has no version {version}"));
    let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
    Rules::compile(&v["schema"]["openAPIV3Schema"], &path)
        .unwrap_or_else(|e| panic!("{file} {version}: {e:#?}"))
}

fn count_rules(v: &Validator) -> usize {
    v.rules
        .iter()
        .filter(|r| matches!(r.program, Ok(Some(_))))
        .count()
        + v.props.values().map(count_rules).sum::<usize>()
        + v.items.as_deref().map_or(0, count_rules)
        + v.additional.as_deref().map_or(0, count_rules)
        + v.all_of.iter().map(count_rules).sum::<usize>()
}

fn messages(causes: &[Cause]) -> Vec<(String, String, String)> {
    causes
        .iter()
        .map(|c| (c.reason.clone(), c.field.clone(), c.message.clone()))
        .collect()
}

// apiextensions-apiserver pkg/apis/apiextensions/validation/validation.go: every rule of
// every published manifest compiles, as the real server accepted these CRDs.
#[test]
fn every_published_rule_compiles() {
    let dir = std::env::var_os("MODELPLANE_CRDS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../target/crds").into());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/crds.sh", dir.display()))
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    files.sort();
    let (mut with_rules, mut compiled) = (0, 0);
    for file in &files {
        let crd = crate::crd::published_crd(file);
        for (i, v) in crd["spec"]["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .enumerate()
        {
            let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
            let rules = Rules::compile(&v["schema"]["openAPIV3Schema"], &path)
                .unwrap_or_else(|e| panic!("{file} {}: {e:#?}", v["name"]));
            with_rules += usize::from(!rules.is_empty());
            compiled += rules.root.as_ref().map_or(0, count_rules);
        }
    }
    assert!(files.len() >= 5, "{files:?}");
    assert!(with_rules >= 5, "{with_rules} versions with rules");
    // The manifests of target/crds hold 248 rules (with repeats across versions).
    assert!(compiled >= 200, "{compiled} rules compiled");
}

fn httproute(rules: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "chat", "namespace": "default"},
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}],
            "rules": rules,
        },
    })
}

fn backend(name: &str, weight: i64) -> Value {
    json!({"group": "", "kind": "Service", "name": name, "port": 8000, "weight": weight})
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (validateExpressions):
// a failed rule on an object node is field.Invalid at the node with the value omitted.
#[test]
fn httproute_relative_path_prefix_is_rejected() {
    let rules = published("gateway.networking.k8s.io_httproutes.yaml", "v1");
    let route = httproute(json!([{
        "matches": [{"path": {"type": "PathPrefix", "value": "foo"}}],
        "backendRefs": [backend("llm", 1)],
    }]));
    assert_eq!(
        messages(&rules.validate(&route, None)),
        [(
            "FieldValueInvalid".to_string(),
            "spec.rules[0].matches[0].path".to_string(),
            "Invalid value: value must be an absolute path and start with '/' when type one of ['Exact', 'PathPrefix']"
                .to_string(),
        )]
    );
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go: a valid route passes
// every rule of the manifest (weights, header matches, timeouts with duration()).
#[test]
fn httproute_canary_passes() {
    let rules = published("gateway.networking.k8s.io_httproutes.yaml", "v1");
    let route = httproute(json!([
        {
            "matches": [{
                "path": {"type": "PathPrefix", "value": "/v1/chat"},
                "headers": [{"type": "Exact", "name": "x-canary", "value": "true"}],
            }],
            "backendRefs": [backend("llm-canary", 1)],
        },
        {
            "matches": [{"path": {"type": "PathPrefix", "value": "/v1/chat"}}],
            "backendRefs": [backend("llm-stable", 90), backend("llm-canary", 10)],
            "timeouts": {"request": "30s", "backendRequest": "10s"},
        },
    ]));
    assert_eq!(messages(&rules.validate(&route, None)), []);
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go with cel-go's
// duration(): Go duration strings compare as durations.
#[test]
fn httproute_backend_timeout_longer_than_request_fails() {
    let rules = published("gateway.networking.k8s.io_httproutes.yaml", "v1");
    let route = httproute(json!([{
        "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
        "backendRefs": [backend("llm", 1)],
        "timeouts": {"request": "1m", "backendRequest": "1h30m"},
    }]));
    assert_eq!(
        messages(&rules.validate(&route, None)),
        [(
            "FieldValueInvalid".to_string(),
            "spec.rules[0].timeouts".to_string(),
            "Invalid value: backendRequest timeout cannot be longer than request timeout"
                .to_string(),
        )]
    );
}

// k8s.io/apiserver pkg/cel/escaping.go: `namespace` is a CEL reserved word, seen as
// `__namespace__` (HTTPRoute's parentRefs uniqueness rules).
#[test]
fn parent_refs_see_namespace_escaped() {
    let rules = published("gateway.networking.k8s.io_httproutes.yaml", "v1");
    let refs = |a: &str, b: &str| {
        let mut route = httproute(json!([{
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": [backend("llm", 1)],
        }]));
        route["spec"]["parentRefs"] = json!([
            {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw", "namespace": a},
            {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw", "namespace": b},
        ]);
        messages(&rules.validate(&route, None))
    };
    assert_eq!(refs("infra", "edge"), []);
    assert_eq!(
        refs("infra", "infra"),
        [(
            "FieldValueInvalid".to_string(),
            "spec.parentRefs".to_string(),
            "Invalid value: sectionName must be unique when parentRefs includes 2 or more references to the same parent"
                .to_string(),
        )]
    );
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (validateArray):
// rules on a list see the whole list; exists_one finds the duplicate.
#[test]
fn gateway_listener_names_must_be_unique() {
    let rules = published("gateway.networking.k8s.io_gateways.yaml", "v1");
    let gateway = |second: &str| {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "default"},
            "spec": {
                "gatewayClassName": "envoy",
                "listeners": [
                    {"name": "http", "port": 80, "protocol": "HTTP"},
                    {"name": second, "port": 8080, "protocol": "HTTP"},
                ],
            },
        })
    };
    assert_eq!(messages(&rules.validate(&gateway("admin"), None)), []);
    assert_eq!(
        messages(&rules.validate(&gateway("http"), None)),
        [(
            "FieldValueInvalid".to_string(),
            "spec.listeners".to_string(),
            "Invalid value: Listener name must be unique within the Gateway".to_string(),
        )]
    );
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go: a transition rule
// (GatewayClass spec.controllerName: `self == oldSelf`) is skipped on create, passes
// unchanged, fails changed; a failed rule on a string shows the value.
#[test]
fn gatewayclass_controller_name_is_immutable() {
    let rules = published("gateway.networking.k8s.io_gatewayclasses.yaml", "v1");
    let class = |controller: &str| {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": "envoy"},
            "spec": {"controllerName": controller},
        })
    };
    let old = class("example.com/gateway");
    assert_eq!(messages(&rules.validate(&old, None)), []);
    assert_eq!(messages(&rules.validate(&old, Some(&old))), []);
    assert_eq!(
        messages(&rules.validate(&class("example.com/other"), Some(&old))),
        [(
            "FieldValueInvalid".to_string(),
            "spec.controllerName".to_string(),
            "Invalid value: \"example.com/other\": Value is immutable".to_string(),
        )]
    );
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go: InferencePool's
// rules, exists_one over integers and has() on an optional field.
#[test]
fn inferencepool_target_ports_must_be_unique() {
    let rules = published("inference.networking.k8s.io_inferencepools.yaml", "v1");
    let pool = |ports: Value| {
        json!({
            "apiVersion": "inference.networking.k8s.io/v1",
            "kind": "InferencePool",
            "metadata": {"name": "pool", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "vllm"}},
                "targetPorts": ports,
                "endpointPickerRef": {"group": "", "kind": "Service", "name": "epp", "port": {"number": 9002}},
            },
        })
    };
    assert_eq!(
        messages(&rules.validate(&pool(json!([{"number": 8000}, {"number": 8001}])), None)),
        []
    );
    assert_eq!(
        messages(&rules.validate(&pool(json!([{"number": 8000}, {"number": 8000}])), None)),
        [(
            "FieldValueInvalid".to_string(),
            "spec.targetPorts".to_string(),
            "Invalid value: port number must be unique".to_string(),
        )]
    );
}

/// A CRD root schema whose `spec` has `props` and `rules`.
fn spec_schema(props: Value, rules: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": props, "x-kubernetes-validations": rules},
        },
    })
}

fn compile_errors(schema: &Value) -> Vec<(String, String, String)> {
    match Rules::compile(schema, SCHEMA_PATH) {
        Ok(_) => Vec::new(),
        Err(e) => messages(&e),
    }
}

// apiextensions-apiserver pkg/apiserver/schema/cel/compilation.go (compileRule) and
// pkg/apis/apiextensions/validation/validation.go: a syntax error is field.Invalid on
// the rule, the bad value being the whole ValidationRule as Go's json.Marshal prints it.
#[test]
fn a_rule_that_does_not_parse_is_a_crd_error() {
    let schema = spec_schema(
        json!({"replicas": {"type": "integer"}}),
        json!([{"rule": "self.replicas >"}]),
    );
    let errors = compile_errors(&schema);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let (reason, field, message) = &errors[0];
    assert_eq!(reason, "FieldValueInvalid");
    assert_eq!(
        field,
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    );
    let expected = concat!(
        r#"Invalid value: {"Rule":"self.replicas \u003e","Message":"","MessageExpression":"","Reason":null,"FieldPath":"","OptionalOldSelf":null}: "#,
        "compilation failed: ERROR: <input>:1:16: Syntax error: mismatched input '<EOF>' expecting ",
    );
    assert!(message.starts_with(expected), "{message}");
    assert!(
        message.ends_with("\n | self.replicas >\n | ...............^"),
        "{message}"
    );
}

// cel-go checker (as run by compilation.go): an undefined field of an object, an
// undeclared identifier, and a rule that is not a bool don't compile.
#[test]
fn checker_errors_are_crd_errors() {
    let props = json!({
        "replicas": {"type": "integer"},
        "name": {"type": "string"},
        "ports": {"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer"}}}},
    });
    let message = |rule: &str| {
        let errors = compile_errors(&spec_schema(props.clone(), json!([{"rule": rule}])));
        assert_eq!(errors.len(), 1, "{rule}: {errors:#?}");
        let m = &errors[0].2;
        m[m.find("}: ").expect("rendered rule") + 3..].to_string()
    };
    assert_eq!(
        message("self.replicsa > 1"),
        "compilation failed: ERROR: <input>:1:5: undefined field 'replicsa'\n | self.replicsa > 1\n | ....^"
    );
    assert_eq!(
        message("self.replicas > limit"),
        "compilation failed: ERROR: <input>:1:17: undeclared reference to 'limit' (in container '')\n | self.replicas > limit\n | ................^"
    );
    assert_eq!(
        message("self.name"),
        "cel expression must evaluate to a bool"
    );
    assert_eq!(
        message("self.name.matches('[a-z')"),
        "compilation failed: ERROR: <input>:1:19: invalid matches argument\n | self.name.matches('[a-z')\n | ..................^"
    );
    assert!(
        message("duration('5 minutes') > duration('1s')").contains("invalid duration argument")
    );
    assert!(message("self.name in ['a', 1]").contains("expected type 'string' but found 'int'"));
    // Comprehension variables are typed by the list they range over.
    assert_eq!(
        message("self.ports.all(p, p.prot > 0)"),
        "compilation failed: ERROR: <input>:1:20: undefined field 'prot'\n | self.ports.all(p, p.prot > 0)\n | ...................^"
    );
}

// cel-go (as compilation.go configures it): expressions the checker must accept.
#[test]
fn valid_expressions_compile_and_run() {
    let schema = spec_schema(
        json!({
            "ports": {"type": "array", "maxItems": 10, "items": {"type": "integer"}},
            "weights": {"type": "object", "maxProperties": 10, "additionalProperties": {"type": "integer"}},
            "name": {"type": "string", "maxLength": 64},
            "port": {"x-kubernetes-int-or-string": true},
            "since": {"type": "string", "format": "date-time"},
        }),
        json!([
            {"rule": "self.ports.sortBy(p, -p) == [3, 2, 1] && lists.range(3) == [0, 1, 2]"},
            {"rule": "self.?missing.orValue('x') == 'x' && optional.of(1).value() == 1 && self.ports[?5].hasValue() == false"},
            {"rule": "'%s-%d'.format(['a', 1]) == 'a-1' && strings.quote('a') == '\"a\"'"},
            {"rule": "self.ports.map(x, x * 2).all(y, y > 0) && self.ports.filter(p, p > 1).size() == 2"},
            {"rule": "self.weights.all(k, self.weights[k] > 0) && self.weights.exists(k, k == 'a') && 'a' in self.weights"},
            {"rule": "type(self.port) == string && size(self.name) > 0 && self.name.charAt(0) == 'c' && self.name.substring(1) == 'hat'"},
            {"rule": "self.since > timestamp('2020-01-01T00:00:00Z') && self.since - duration('1h') < self.since"},
            {"rule": "self.ports.exists_one(p, p == 2) && !(4 in self.ports) && self.name.lowerAscii().upperAscii() == 'CHAT'"},
            {"rule": "dyn(self.port) == 'http' && int('12') == 12 && string(12) == '12' && double(1) == 1.0"},
        ]),
    );
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap_or_else(|e| panic!("{e:#?}"));
    let spec = json!({"spec": {
        "ports": [1, 2, 3], "weights": {"a": 1}, "name": "chat", "port": "http",
        "since": "2024-01-01T00:00:00Z",
    }});
    assert_eq!(messages(&rules.validate(&spec, None)), []);
}

// pkg/apis/apiextensions/validation/validation.go: the rule's own fields are checked
// first, and CEL is not compiled where they fail.
#[test]
fn rule_fields_are_checked() {
    let props = json!({"name": {"type": "string"}});
    let errors = compile_errors(&spec_schema(
        props.clone(),
        json!([
            {"rule": " "},
            {"rule": "true", "message": "  "},
            {"rule": "true", "reason": "FieldValueUnknown"},
            {"rule": "true", "fieldPath": ".nope"},
            {"rule": "true\n&& true"},
            {"rule": "self.nope", "messageExpression": " "},
        ]),
    ));
    let at = |i: usize, f: &str| {
        format!("{SCHEMA_PATH}.properties[spec].x-kubernetes-validations[{i}].{f}")
    };
    assert_eq!(
        errors,
        [
            ("FieldValueRequired".into(), at(0, "rule"), "Required value: rule is not specified".into()),
            ("FieldValueInvalid".into(), at(1, "message"), "Invalid value: \"  \": must be non-empty if specified".into()),
            (
                "FieldValueNotSupported".into(),
                at(2, "reason"),
                "Unsupported value: \"FieldValueUnknown\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\"".into()
            ),
            ("FieldValueInvalid".into(), at(3, "fieldPath"), "Invalid value: \".nope\": must be a valid path".into()),
            ("FieldValueRequired".into(), at(4, "message"), "Required value: message must be specified if rule contains line breaks".into()),
            ("FieldValueRequired".into(), at(5, "messageExpression"), "Required value: messageExpression must be non-empty if specified".into()),
        ]
    );
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (evalMessageExpression):
// the message is the messageExpression's string, else `message` when it fails or is
// empty, else "failed rule: <rule>".
#[test]
fn message_expression_and_fallbacks() {
    let schema = spec_schema(
        json!({"replicas": {"type": "integer"}, "name": {"type": "string", "maxLength": 16}}),
        json!([
            {"rule": "self.replicas <= 5", "messageExpression": "'replicas of ' + self.name + 'x exceed 5'"},
            {"rule": "self.replicas <= 6", "message": "too many", "messageExpression": "self.name"},
            {"rule": "  self.replicas <= 4  "},
        ]),
    );
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
    let got = messages(&rules.validate(&json!({"spec": {"replicas": 7, "name": ""}}), None));
    let invalid = |m: &str| {
        (
            "FieldValueInvalid".to_string(),
            "spec".to_string(),
            format!("Invalid value: {m}"),
        )
    };
    assert_eq!(
        got,
        [
            invalid("replicas of x exceed 5"),
            invalid("too many"),
            invalid("failed rule: self.replicas <= 4"),
        ]
    );
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (fieldErrorForReason,
// ValidFieldPath): `reason` picks the error type, `fieldPath` the field.
#[test]
fn reason_and_field_path() {
    let schema = spec_schema(
        json!({
            "name": {"type": "string"},
            "legacy": {"type": "string"},
            "labels": {"type": "object", "maxProperties": 10, "additionalProperties": {"type": "string"}},
            "ports": {"type": "array", "maxItems": 10, "items": {"type": "integer"}},
        }),
        json!([
            {"rule": "has(self.name)", "reason": "FieldValueRequired", "fieldPath": ".name", "message": "name is required"},
            {"rule": "!has(self.legacy)", "reason": "FieldValueForbidden", "fieldPath": "['legacy']", "message": "legacy is gone"},
            {"rule": "self.labels.all(k, k != 'app.kubernetes.io/name')", "fieldPath": ".labels['app.kubernetes.io/name']", "message": "reserved"},
            {"rule": "self.ports.all(p, self.ports.exists_one(q, q == p))", "reason": "FieldValueDuplicate", "fieldPath": ".ports"},
        ]),
    );
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
    let spec = json!({"spec": {
        "legacy": "x",
        "labels": {"app.kubernetes.io/name": "chat"},
        "ports": [80, 80],
    }});
    assert_eq!(
        messages(&rules.validate(&spec, None)),
        [
            (
                "FieldValueRequired".into(),
                "spec.name".into(),
                "Required value: name is required".into()
            ),
            (
                "FieldValueForbidden".into(),
                "spec.legacy".into(),
                "Forbidden: legacy is gone".into()
            ),
            (
                "FieldValueInvalid".into(),
                "spec.labels[app.kubernetes.io/name]".into(),
                "Invalid value: reserved".into()
            ),
            (
                "FieldValueDuplicate".into(),
                "spec.ports".into(),
                "Duplicate value".into()
            ),
        ]
    );
    // A list index is no valid fieldPath.
    let bad = spec_schema(
        json!({"ports": {"type": "array", "items": {"type": "integer"}}}),
        json!([{"rule": "true", "fieldPath": ".ports[0]"}]),
    );
    assert_eq!(
        compile_errors(&bad)[0].2,
        "Invalid value: \".ports[0]\": must be a valid path"
    );
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go: evaluation errors are
// field.Invalid with the schema type as the value; the root's field is "<nil>".
#[test]
fn evaluation_errors_and_root_rules() {
    let mut schema = spec_schema(
        json!({"name": {"type": "string"}, "replicas": {"type": "integer"}}),
        json!([
            {"rule": "self.name.startsWith('a')", "message": "name must start with a"},
            {"rule": "self.replicas / 0 > 1"},
        ]),
    );
    schema["x-kubernetes-validations"] = json!([{"rule": "self.metadata.name.startsWith('x-')"}]);
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
    let obj = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "y"}, "spec": {"replicas": 1}});
    assert_eq!(
        messages(&rules.validate(&obj, None)),
        [
            ("FieldValueInvalid".into(), "<nil>".into(), "Invalid value: failed rule: self.metadata.name.startsWith('x-')".into()),
            ("FieldValueInvalid".into(), "spec".into(), "Invalid value: \"object\": no such key: name evaluating rule: name must start with a".into()),
            ("FieldValueInvalid".into(), "spec".into(), "Invalid value: \"object\": division by zero evaluating rule: self.replicas / 0 > 1".into()),
        ]
    );
}

fn ports_list(list_rules: Value, item_rules: Value) -> Value {
    spec_schema(
        json!({"ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "x-kubernetes-validations": list_rules,
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                "x-kubernetes-validations": item_rules,
            },
        }}),
        json!([]),
    )
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (validateArray) and
// k8s.io/apiserver pkg/cel/common/maplist.go, valuesunstructured.go: items of a map
// list correlate with the old item of the same keys, and map lists compare equal
// whatever their order.
#[test]
fn map_lists_correlate_by_key() {
    let schema = ports_list(
        json!([{"rule": "self == oldSelf", "message": "ports are immutable"}]),
        json!([{"rule": "self.port == oldSelf.port", "message": "port is immutable"}]),
    );
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
    let old =
        json!({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "grpc", "port": 90}]}});
    let reordered =
        json!({"spec": {"ports": [{"name": "grpc", "port": 90}, {"name": "http", "port": 80}]}});
    assert_eq!(messages(&rules.validate(&reordered, Some(&old))), []);
    let changed =
        json!({"spec": {"ports": [{"name": "grpc", "port": 91}, {"name": "http", "port": 80}]}});
    assert_eq!(
        messages(&rules.validate(&changed, Some(&old))),
        [
            (
                "FieldValueInvalid".into(),
                "spec.ports".into(),
                "Invalid value: ports are immutable".into()
            ),
            (
                "FieldValueInvalid".into(),
                "spec.ports[0]".into(),
                "Invalid value: port is immutable".into()
            ),
        ]
    );
    // A new item has no old one: its transition rule is skipped.
    let added =
        json!({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 9}]}});
    assert_eq!(
        messages(&rules.validate(&added, Some(&old))),
        [(
            "FieldValueInvalid".into(),
            "spec.ports".into(),
            "Invalid value: ports are immutable".into()
        )]
    );
}

// pkg/apis/apiextensions/validation/validation.go: oldSelf can't be used where old
// values don't correlate (items of atomic lists and sets).
#[test]
fn old_self_under_an_atomic_list_is_a_crd_error() {
    let schema = spec_schema(
        json!({"names": {"type": "array", "maxItems": 10, "items": {
            "type": "string",
            "maxLength": 16,
            "x-kubernetes-validations": [{"rule": "self == oldSelf"}],
        }}}),
        json!([]),
    );
    assert_eq!(
        compile_errors(&schema),
        [(
            "FieldValueInvalid".into(),
            format!(
                "{SCHEMA_PATH}.properties[spec].properties[names].items.x-kubernetes-validations[0].rule"
            ),
            format!(
                "Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within {SCHEMA_PATH}.properties[spec].properties[names]"
            ),
        )]
    );
    let optional_without_old_self = spec_schema(
        json!({"name": {"type": "string"}}),
        json!([{"rule": "true", "optionalOldSelf": true}]),
    );
    assert_eq!(
        compile_errors(&optional_without_old_self)[0].2,
        "Invalid value: true: may not be set if oldSelf is not used in rule"
    );
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go: with
// optionalOldSelf, a transition rule runs on create too, oldSelf being an optional.
#[test]
fn optional_old_self() {
    let schema = spec_schema(
        json!({"replicas": {"type": "integer"}}),
        json!([{
            "rule": "oldSelf.hasValue() ? self.replicas >= oldSelf.value().replicas : self.replicas == 1",
            "optionalOldSelf": true,
            "message": "start at 1, then only grow",
        }]),
    );
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
    let spec = |n: i64| json!({"spec": {"replicas": n}});
    assert_eq!(messages(&rules.validate(&spec(1), None)), []);
    assert_eq!(rules.validate(&spec(2), None).len(), 1);
    assert_eq!(messages(&rules.validate(&spec(3), Some(&spec(2)))), []);
    assert_eq!(rules.validate(&spec(1), Some(&spec(2))).len(), 1);
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (ratchetingOptions)
// and k8s.io/apiserver pkg/cel/common/equality.go: on update, a failing rule on an
// unchanged value is a warning (CRDValidationRatcheting), not an error.
#[test]
fn unchanged_values_ratchet() {
    let schema = spec_schema(
        json!({
            "replicas": {"type": "integer", "x-kubernetes-validations": [{"rule": "self <= 5", "message": "at most 5"}]},
            "name": {"type": "string"},
        }),
        json!([]),
    );
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
    let old = json!({"spec": {"replicas": 7, "name": "a"}});
    let renamed = json!({"spec": {"replicas": 7, "name": "b"}});
    let (errors, warnings) = rules.validate_with_warnings(&renamed, Some(&old));
    assert_eq!(messages(&errors), []);
    assert_eq!(warnings, ["spec.replicas: Invalid value: 7: at most 5"]);
    assert_eq!(
        messages(&rules.validate(&json!({"spec": {"replicas": 8, "name": "a"}}), Some(&old))),
        [(
            "FieldValueInvalid".into(),
            "spec.replicas".into(),
            "Invalid value: 8: at most 5".into()
        )]
    );
    assert_eq!(
        rules.validate(&old, None).len(),
        1,
        "no ratcheting on create"
    );
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation_test.go ("typemeta fields
// are not ratcheted", "fieldPath ... on the changed parent"): apiVersion and kind never
// ratchet, and a rule ratchets by the node it is on, not by its fieldPath.
#[test]
fn ratcheting_exceptions() {
    let schema = json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string", "x-kubernetes-validations": [{"rule": "self == 'v1'"}]},
            "kind": {"type": "string", "x-kubernetes-validations": [{"rule": "self == 'Pod'"}]},
            "spec": {
                "type": "object",
                "properties": {"foo": {"type": "string"}, "bar": {"type": "string"}},
                "x-kubernetes-validations": [{"rule": "self.foo == 'baz'", "message": "gotta be baz", "fieldPath": ".foo"}],
            },
        },
    });
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
    let old = json!({"apiVersion": "v2", "kind": "Baz", "spec": {"foo": "bar"}});
    let new = json!({"apiVersion": "v2", "kind": "Baz", "spec": {"foo": "bar", "bar": "x"}});
    assert_eq!(
        messages(&rules.validate(&new, Some(&old))),
        [
            (
                "FieldValueInvalid".into(),
                "apiVersion".into(),
                "Invalid value: \"v2\": failed rule: self == 'v1'".into()
            ),
            (
                "FieldValueInvalid".into(),
                "kind".into(),
                "Invalid value: \"Baz\": failed rule: self == 'Pod'".into()
            ),
            (
                "FieldValueInvalid".into(),
                "spec.foo".into(),
                "Invalid value: gotta be baz".into()
            ),
        ]
    );
}

// k8s.io/apiserver pkg/cel/common/schemas.go and valuesunstructured.go: formats and
// x-kubernetes-int-or-string type values; escaped property names.
#[test]
fn schema_types_values() {
    let schema = spec_schema(
        json!({
            "timeout": {"type": "string", "format": "duration"},
            "since": {"type": "string", "format": "date-time"},
            "ratio": {"type": "number"},
            "port": {"x-kubernetes-int-or-string": true},
            "x-api-key": {"type": "string"},
            "opaque": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }),
        json!([
            {"rule": "self.timeout <= duration('1h')", "message": "timeout"},
            {"rule": "self.since < timestamp('2030-01-01T00:00:00Z')", "message": "since"},
            {"rule": "self.ratio > 0.5", "message": "ratio"},
            {"rule": "type(self.port) == int ? self.port < 65536 : self.port.matches('^[a-z]+$')", "message": "port"},
            {"rule": "self.x__dash__api__dash__key.size() > 3", "message": "key"},
            {"rule": "size(self.opaque) == 0", "message": "opaque"},
        ]),
    );
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
    let spec = |timeout: &str, port: Value| {
        json!({"spec": {
            "timeout": timeout, "since": "2024-05-01T10:00:00Z", "ratio": 1,
            "port": port, "x-api-key": "secret", "opaque": {"anything": [1]},
        }})
    };
    assert_eq!(
        messages(&rules.validate(&spec("1d", json!(8080)), None)).len(),
        1
    );
    assert_eq!(
        messages(&rules.validate(&spec("30m", json!("http")), None)),
        []
    );
    assert_eq!(
        messages(&rules.validate(&spec("90m", json!("HTTP")), None)),
        [
            (
                "FieldValueInvalid".into(),
                "spec".into(),
                "Invalid value: timeout".into()
            ),
            (
                "FieldValueInvalid".into(),
                "spec".into(),
                "Invalid value: port".into()
            ),
        ]
    );
    // Unknown fields of a preserved object are not visible to the checker either.
    let undefined = spec_schema(
        json!({"opaque": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}),
        json!([{"rule": "has(self.opaque.anything)"}]),
    );
    assert!(
        compile_errors(&undefined)[0]
            .2
            .contains("undefined field 'anything'")
    );
}

// k8s.io/apiserver pkg/cel/library/lists.go and cel-go ext.Sets / ext.Strings.
#[test]
fn kubernetes_list_and_set_functions() {
    let schema = spec_schema(
        json!({
            "ports": {"type": "array", "maxItems": 10, "items": {"type": "integer"}},
            "names": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 16}},
        }),
        json!([
            {"rule": "self.ports.isSorted() && self.ports.sum() == 6 && self.ports.min() == 1 && self.ports.max() == 3"},
            {"rule": "self.ports.indexOf(2) == 1 && self.ports.lastIndexOf(9) == -1"},
            {"rule": "sets.contains(self.names, ['a']) && sets.intersects(self.names, ['b', 'z']) && !sets.equivalent(self.names, ['a'])"},
            {"rule": "self.names.join(',') == 'a,b' && 'a/b'.split('/')[1] == 'b'"},
            {"rule": "self.names.map(n, n.upperAscii()).size() == 2"},
            {"rule": "self.names.filter(n, n != 'a').size() == 1 && self.names.exists_one(n, n == 'b')"},
            {"rule": "[3, 1].min() == 1"},
            {"rule": "quantity('1Gi').isGreaterThan(quantity('1000M')) && quantity('1.5').add(1) == quantity('2500m')"},
            {"rule": "isQuantity('10Mi') && !isQuantity('ten') && quantity('2k').asInteger() == 2000 && sign(quantity('-1m')) == -1"},
        ]),
    );
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
    let ok = json!({"spec": {"ports": [1, 2, 3], "names": ["a", "b"]}});
    assert_eq!(messages(&rules.validate(&ok, None)), []);
    let unsorted = json!({"spec": {"ports": [3, 2, 1], "names": ["a", "b"]}});
    assert_eq!(rules.validate(&unsorted, None).len(), 1);
}

// apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (AllOfValidators):
// rules under allOf apply to the same value.
#[test]
fn all_of_rules_apply() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "allOf": [{"x-kubernetes-validations": [{"rule": "self.a > 0", "message": "positive"}]}],
        }},
    });
    let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
    assert_eq!(
        messages(&rules.validate(&json!({"spec": {"a": 0}}), None)),
        [(
            "FieldValueInvalid".into(),
            "spec".into(),
            "Invalid value: positive".into()
        )]
    );
}

// Rules live in a static kind table shared by tokio tasks.
#[test]
fn rules_are_send_and_sync() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<Rules>();
    let rules = Rules::compile(&json!({"type": "object"}), SCHEMA_PATH).unwrap();
    assert!(rules.is_empty());
    assert!(rules.validate(&json!({"a": 1}), None).is_empty());
}
