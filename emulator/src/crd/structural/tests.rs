//! Tests of structural schemas: defaulting, pruning, validation and its messages, against
//! published CRDs and small schemas.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use serde_json::{Value, json};

use super::formats::{format_ok, matches};
use super::messages::{go_float, go_json, go_quote};
use super::*;

/// The `openAPIV3Schema` of version v1 of a published CRD (parsed once per file).
fn v1(file: &'static str) -> Arc<Value> {
    static CACHE: LazyLock<Mutex<HashMap<&str, Arc<Value>>>> = LazyLock::new(Default::default);
    let mut cache = CACHE.lock().unwrap();
    cache
        .entry(file)
        .or_insert_with(|| {
            let crd = crate::crd::published_crd(file);
            let versions = crd["spec"]["versions"].as_array().expect("versions");
            let v = versions
                .iter()
                .find(|v| v["name"] == "v1")
                .expect("a v1 version");
            Arc::new(v["schema"]["openAPIV3Schema"].clone())
        })
        .clone()
}

const HTTPROUTES: &str = "gateway.networking.k8s.io_httproutes.yaml";
const GATEWAYS: &str = "gateway.networking.k8s.io_gateways.yaml";
const POOLS: &str = "inference.networking.k8s.io_inferencepools.yaml";
const LWS: &str = "leaderworkerset.x-k8s.io_leaderworkersets.yaml";

fn object(kind: &str, spec: Value) -> Value {
    json!({"apiVersion": "x.k8s.io/v1", "kind": kind, "metadata": {"name": "o"}, "spec": spec})
}

/// `field|reason|message`, one string per cause.
fn render(causes: &[Cause]) -> Vec<String> {
    causes
        .iter()
        .map(|c| format!("{}|{}|{}", c.field, c.reason, c.message))
        .collect()
}

fn check(file: &'static str, kind: &str, spec: Value) -> Vec<String> {
    render(&validate(&v1(file), &object(kind, spec), None))
}

fn route(spec: Value) -> Vec<String> {
    check(HTTPROUTES, "HTTPRoute", spec)
}

fn gateway(listeners: Value, extra: Value) -> Vec<String> {
    let mut spec = json!({"gatewayClassName": "gc", "listeners": listeners});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    check(GATEWAYS, "Gateway", spec)
}

fn pool(extra: Value) -> Vec<String> {
    let mut spec =
        json!({"selector": {"matchLabels": {"app": "m"}}, "targetPorts": [{"number": 8000}]});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    check(POOLS, "InferencePool", spec)
}

fn lws(extra: Value) -> Vec<String> {
    let mut spec = json!({"leaderWorkerTemplate": {"workerTemplate": {}}});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    check(LWS, "LeaderWorkerSet", spec)
}

fn listener(name: &str, port: i64) -> Value {
    json!({"name": name, "port": port, "protocol": "HTTP"})
}

// defaulting/algorithm.go Default: HTTPRoute's rule, match, parentRef and backendRef defaults.
#[test]
fn defaults_httproute() {
    let schema = v1(HTTPROUTES);
    let mut obj = object(
        "HTTPRoute",
        json!({"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "svc", "port": 8080}]}]}),
    );
    apply_defaults(&schema, &mut obj);
    let spec = &obj["spec"];
    assert_eq!(spec["parentRefs"][0]["group"], "gateway.networking.k8s.io");
    assert_eq!(spec["parentRefs"][0]["kind"], "Gateway");
    let rule = &spec["rules"][0];
    assert_eq!(
        rule["matches"],
        json!([{"path": {"type": "PathPrefix", "value": "/"}}])
    );
    let backend = &rule["backendRefs"][0];
    assert_eq!(
        (&backend["weight"], &backend["group"], &backend["kind"]),
        (&json!(1), &json!(""), &json!("Service"))
    );

    let mut bare = object("HTTPRoute", json!({}));
    apply_defaults(&schema, &mut bare);
    assert_eq!(
        bare["spec"]["rules"],
        json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}]}])
    );
    assert_eq!(bare["metadata"], json!({"name": "o"}));
    assert!(validate(&schema, &bare, None).is_empty());
}

// defaulting/prunenulls.go PruneNonNullableNullsWithoutDefaults, then Default on nulls.
#[test]
fn defaults_replace_or_drop_nulls() {
    let schema = v1(LWS);
    let mut obj = object(
        "LeaderWorkerSet",
        json!({"replicas": null, "startupPolicy": null, "networkConfig": null, "rolloutStrategy": {},
               "leaderWorkerTemplate": {"workerTemplate": {}, "size": null}}),
    );
    apply_defaults(&schema, &mut obj);
    let spec = &obj["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["startupPolicy"], "LeaderCreated");
    assert!(spec.get("networkConfig").is_none());
    assert_eq!(spec["leaderWorkerTemplate"]["size"], 1);
    assert_eq!(
        spec["leaderWorkerTemplate"]["restartPolicy"],
        "RecreateGroupOnPodRestart"
    );
    assert_eq!(spec["rolloutStrategy"]["type"], "RollingUpdate");
}

// defaulting/algorithm.go Default: items and additionalProperties values; nullable nulls stay.
#[test]
fn defaults_items_and_map_values() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "list": {"type": "array", "items": {"type": "object", "default": {"a": 1}, "properties": {"a": {"type": "integer"}, "b": {"type": "string", "default": "x"}}}},
        "map": {"type": "object", "additionalProperties": {"type": "string", "default": "d"}},
        "keep": {"type": "string", "nullable": true, "default": "k"}}}}});
    let mut obj = json!({"spec": {"list": [null, {"a": 2}], "map": {"m": null}, "keep": null}});
    apply_defaults(&schema, &mut obj);
    assert_eq!(
        obj["spec"],
        json!({"list": [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}], "map": {"m": "d"}, "keep": null})
    );
}

// pruning/algorithm.go PruneWithOptions: unknown fields go, their paths sorted; the
// root's apiVersion, kind and metadata stay.
#[test]
fn prune_reports_sorted_paths() {
    let schema = v1(HTTPROUTES);
    let mut obj = object(
        "HTTPRoute",
        json!({"zeta": 1, "rules": [{"bogus": true, "matches": [{"path": {"value": "/", "extra": 1}}]}]}),
    );
    obj["extra"] = json!("x");
    obj["metadata"]["unknownMeta"] = json!(1);
    let dropped = prune(&schema, &mut obj);
    assert_eq!(
        dropped,
        [
            "extra",
            "spec.rules[0].bogus",
            "spec.rules[0].matches[0].path.extra",
            "spec.zeta"
        ]
    );
    assert_eq!(
        obj["spec"],
        json!({"rules": [{"matches": [{"path": {"value": "/"}}]}]})
    );
    assert_eq!(obj["metadata"]["unknownMeta"], 1);
    assert_eq!(obj["kind"], "HTTPRoute");
}

// pruning/algorithm.go skipPrune: x-kubernetes-preserve-unknown-fields keeps unknown
// fields while known ones are still pruned; no schema below a field drops everything.
#[test]
fn prune_preserve_unknown_fields() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}}}});
    let mut obj =
        json!({"spec": {"anything": {"deep": [1, {"x": 2}]}, "known": {"a": "x", "b": "y"}}});
    assert_eq!(prune(&schema, &mut obj), ["spec.known.b"]);
    assert_eq!(
        obj["spec"],
        json!({"anything": {"deep": [1, {"x": 2}]}, "known": {"a": "x"}})
    );
}

// objectmeta/coerce.go CoerceWithOptions: an embedded resource keeps apiVersion, kind and
// an ObjectMeta-shaped metadata; its other unknown fields are pruned.
#[test]
fn prune_embedded_resource() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
            "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}}}}}});
    let mut obj = json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "bogus": 1, "labels": {"a": "b"}, "annotations": {}},
        "spec": {"x": "1", "y": 2}, "other": 3}}});
    let dropped = prune(&schema, &mut obj);
    assert_eq!(
        dropped,
        [
            "spec.template.other",
            "spec.template.spec.y",
            "spec.template.metadata.bogus"
        ]
    );
    assert_eq!(
        obj["spec"]["template"],
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": "1"}})
    );
}

// validate/validator.go basicCommonValidator + kubeOpenAPIResultToFieldErrors (EnumFailCode → NotSupported).
#[test]
fn enum_is_not_supported() {
    assert!(pool(json!({})).is_empty());
    assert_eq!(
        pool(json!({"appProtocol": "grpc"})),
        [
            r#"spec.appProtocol|FieldValueNotSupported|Unsupported value: "grpc": supported values: "http", "kubernetes.io/h2c""#
        ]
    );
}

// validate/values.go Pattern and MinLength (stringValidator), reported as field.Invalid.
#[test]
fn pattern_and_min_length() {
    assert_eq!(
        route(json!({"hostnames": ["Bad_Host"]})),
        [
            r#"spec.hostnames[0]|FieldValueInvalid|Invalid value: "Bad_Host": spec.hostnames[0] in body should match '^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'"#
        ]
    );
    assert_eq!(
        route(json!({"parentRefs": [{"name": ""}]})),
        [
            r#"spec.parentRefs[0].name|FieldValueInvalid|Invalid value: "": spec.parentRefs[0].name in body should be at least 1 chars long"#
        ]
    );
}

// validate/values.go MaxItems / MaxLength → field.TooMany / field.TooLong (counted in characters).
#[test]
fn max_items_and_max_length() {
    let hosts: Vec<String> = (0..17).map(|i| format!("h{i}.example.com")).collect();
    assert_eq!(
        route(json!({"hostnames": hosts})),
        ["spec.hostnames|FieldValueTooMany|Too many: 17: must have at most 16 items"]
    );
    let listeners = json!([listener("http", 80)]);
    let long = "a".repeat(254);
    let spec = json!({"gatewayClassName": long, "listeners": listeners});
    assert_eq!(
        check(GATEWAYS, "Gateway", spec),
        ["spec.gatewayClassName|FieldValueTooLong|Too long: may not be more than 253 bytes"]
    );
    let wide = "é".repeat(253);
    assert!(
        check(
            GATEWAYS,
            "Gateway",
            json!({"gatewayClassName": wide, "listeners": listeners})
        )
        .is_empty()
    );
}

// validate/validator.go numberValidator (MinimumNativeType, MaximumNativeType,
// IsValueValidAgainstRange) and validate/type.go typeValidator.
#[test]
fn numbers_and_types() {
    assert_eq!(
        lws(json!({"replicas": -1})),
        [
            "spec.replicas|FieldValueInvalid|Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        ]
    );
    assert_eq!(
        lws(json!({"replicas": 2_000_000})),
        [
            "spec.replicas|FieldValueInvalid|Invalid value: 2000000: spec.replicas in body should be less than or equal to 1000000"
        ]
    );
    assert_eq!(
        lws(json!({"replicas": 3_000_000_000_i64})),
        [
            r#"<nil>|FieldValueInvalid|Invalid value: "": Checked value must be of type integer with format int32 in spec.replicas"#,
            "spec.replicas|FieldValueInvalid|Invalid value: 3000000000: spec.replicas in body should be less than or equal to 1000000",
        ]
    );
    assert_eq!(
        lws(json!({"replicas": "3"})),
        [
            r#"spec.replicas|FieldValueTypeInvalid|Invalid value: "string": spec.replicas in body must be of type integer: "string""#
        ]
    );
    assert_eq!(
        lws(json!({"replicas": 1.5})),
        [
            r#"spec.replicas|FieldValueTypeInvalid|Invalid value: "float64": spec.replicas in body must be of type int32: "float64""#,
            r#"<nil>|FieldValueInvalid|Invalid value: "": Checked value must be of type integer with format int32 in spec.replicas"#,
        ]
    );
    assert!(lws(json!({"replicas": 2.0})).is_empty());
}

// validate/object_validator.go Required → field.Required.
#[test]
fn required_fields() {
    assert_eq!(
        pool(json!({"selector": null})).len(),
        1,
        "a null selector is a type error"
    );
    let schema = v1(POOLS);
    let mut obj = object("InferencePool", json!({"targetPorts": [{"number": 1}]}));
    assert_eq!(
        render(&validate(&schema, &obj, None)),
        ["spec.selector|FieldValueRequired|Required value"]
    );
    obj.as_object_mut().unwrap().remove("spec");
    assert_eq!(
        render(&validate(&schema, &obj, None)),
        ["spec|FieldValueRequired|Required value"]
    );
}

// validate/object_validator.go: additionalProperties values are validated at
// `<path>.<key>`; minProperties is a field.Invalid with the count.
#[test]
fn additional_properties_and_counts() {
    assert_eq!(
        pool(json!({"selector": {"matchLabels": {"app": "bad value"}}})),
        [
            r#"spec.selector.matchLabels.app|FieldValueInvalid|Invalid value: "bad value": spec.selector.matchLabels.app in body should match '^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'"#
        ]
    );
    assert_eq!(
        pool(json!({"selector": {"matchLabels": {}}})),
        [
            "spec.selector.matchLabels|FieldValueInvalid|Invalid value: 0: spec.selector.matchLabels in body should have at least 1 properties"
        ]
    );
}

// listtype/validation.go validateListMap and validateListSet: Duplicate value.
#[test]
fn list_type_duplicates() {
    assert_eq!(
        gateway(
            json!([listener("http", 80), listener("http", 81)]),
            json!({})
        ),
        [r#"spec.listeners[1]|FieldValueDuplicate|Duplicate value: {"name":"http"}"#]
    );
    let schema = json!({"type": "object", "properties": {
        "s": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "m": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a", "b"],
              "items": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}},
        "labels": {"type": "object", "additionalProperties": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "integer"}}}}});
    let obj = json!({"s": ["x", "y", "x", "x"], "m": [{"a": "k", "b": 1}, {"a": "k", "b": 2}, {"b": 1, "a": "k"}],
                     "labels": {"k": [1, 1]}});
    assert_eq!(
        render(&validate(&schema, &obj, None)),
        [
            "labels[k][1]|FieldValueDuplicate|Duplicate value: 1",
            r#"m[2]|FieldValueDuplicate|Duplicate value: {"a":"k","b":1}"#,
            r#"s[2]|FieldValueDuplicate|Duplicate value: "x""#,
        ]
    );
}

// ConvertJSONSchemaProps (x-kubernetes-int-or-string → type [integer,string]) with the
// anyOf of the manifests (schema_props.go).
#[test]
fn int_or_string() {
    let surge = |v: Value| {
        lws(
            json!({"rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": v}}}),
        )
    };
    assert!(surge(json!("50%")).is_empty());
    assert!(surge(json!(2)).is_empty());
    let p = "spec.rolloutStrategy.rollingUpdateConfiguration.maxSurge";
    assert_eq!(
        surge(json!(true)),
        [
            format!(
                r#"{p}|FieldValueTypeInvalid|Invalid value: "boolean": {p} in body must be of type integer,string: "boolean""#
            ),
            format!(
                r#"<nil>|FieldValueInvalid|Invalid value: "": "{p}" must validate at least one schema (anyOf)"#
            ),
            format!(
                r#"{p}|FieldValueTypeInvalid|Invalid value: "boolean": {p} in body must be of type integer: "boolean""#
            ),
        ]
    );
}

// schema_props.go oneOf/anyOf/not with the branch of most checks passed, and strfmt
// ipv4/ipv6 (FormatOf → field.TypeInvalid).
#[test]
fn gateway_address_one_of() {
    let listeners = json!([listener("http", 80)]);
    let addr = |a: Value| gateway(listeners.clone(), json!({"addresses": [a]}));
    assert!(addr(json!({"type": "IPAddress", "value": "10.0.0.1"})).is_empty());
    assert!(addr(json!({"type": "IPAddress", "value": "fd00::1"})).is_empty());
    assert!(addr(json!({"type": "Hostname", "value": "example.com"})).is_empty());
    assert_eq!(
        addr(json!({"type": "IPAddress", "value": "nope"})),
        [
            r#"<nil>|FieldValueInvalid|Invalid value: "": "spec.addresses[0]" must validate one and only one schema (oneOf). Found none valid"#,
            r#"<nil>|FieldValueInvalid|Invalid value: "": "spec.addresses[0].value" must validate at least one schema (anyOf)"#,
            r#"spec.addresses[0].value|FieldValueTypeInvalid|Invalid value: "nope": spec.addresses[0].value in body must be of type ipv4: "nope""#,
        ]
    );
}

// validate/type.go: null only where nullable; strfmt date-time.
#[test]
fn nullable_and_formats() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "a": {"type": "string", "nullable": true}, "b": {"type": "string"},
        "t": {"type": "string", "format": "date-time"}, "u": {"type": "string", "format": "no-such-format"}}}}});
    let obj = json!({"spec": {"a": null, "b": null, "t": "yesterday", "u": "anything"}});
    assert_eq!(
        render(&validate(&schema, &obj, None)),
        [
            r#"spec.b|FieldValueTypeInvalid|Invalid value: "null": spec.b in body must be of type string: "null""#,
            r#"spec.t|FieldValueTypeInvalid|Invalid value: "yesterday": spec.t in body must be of type date-time: "yesterday""#,
        ]
    );
    let ok = json!({"spec": {"t": "2024-02-29T10:00:00Z"}});
    assert!(validate(&schema, &ok, None).is_empty());
}

// objectmeta/validation.go validateEmbeddedResource.
#[test]
fn embedded_resource_type_meta() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}}}});
    let obj = json!({"spec": {"template": {"apiVersion": "a/b/c", "metadata": {"name": "x/y"}}}});
    assert_eq!(
        render(&validate(&schema, &obj, None)),
        [
            "spec.template.kind|FieldValueRequired|Required value",
            r#"spec.template.apiVersion|FieldValueInvalid|Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c"#,
            r#"spec.template.metadata.name|FieldValueInvalid|Invalid value: "x/y": may not contain '/'"#,
        ]
    );
    let ok = json!({"spec": {"template": {"apiVersion": "v1", "kind": "ConfigMap", "data": {}}}});
    assert!(validate(&schema, &ok, None).is_empty());
}

// validation/ratcheting.go: an unchanged invalid value passes an update, a changed one
// does not; atomic lists are compared whole.
#[test]
fn ratcheting_unchanged_values() {
    let schema = v1(HTTPROUTES);
    let old = object("HTTPRoute", json!({"hostnames": ["Bad_Host"]}));
    let mut relabeled = old.clone();
    relabeled["metadata"]["labels"] = json!({"a": "b"});
    assert!(validate(&schema, &relabeled, Some(&old)).is_empty());
    assert_eq!(validate(&schema, &relabeled, None).len(), 1);

    let changed = object("HTTPRoute", json!({"hostnames": ["Bad_Host2"]}));
    assert_eq!(validate(&schema, &changed, Some(&old)).len(), 1);
    let grown = object(
        "HTTPRoute",
        json!({"hostnames": ["Bad_Host", "ok.example.com"]}),
    );
    assert_eq!(
        render(&validate(&schema, &grown, Some(&old)))[0]
            .split('|')
            .next(),
        Some("spec.hostnames[0]")
    );
}

// pkg/cel/common/equality.go: map-list items correlate by key, so a reordered list
// keeps its unchanged invalid items; strategy.go skips list-type checks the old object failed.
#[test]
fn ratcheting_map_lists() {
    let schema = v1(GATEWAYS);
    let bad = json!({"name": "a", "port": 80, "protocol": "HTTP", "hostname": "Bad_Host"});
    let spec = |listeners: Value| {
        object(
            "Gateway",
            json!({"gatewayClassName": "gc", "listeners": listeners}),
        )
    };
    let old = spec(json!([bad, listener("b", 81)]));
    let new = spec(json!([listener("b", 82), bad]));
    assert!(validate(&schema, &new, Some(&old)).is_empty());
    assert_eq!(validate(&schema, &new, None).len(), 1);

    let dup_old = spec(json!([listener("a", 80), listener("a", 81)]));
    let dup_new = spec(json!([listener("a", 80), listener("a", 82)]));
    assert!(validate(&schema, &dup_new, Some(&dup_old)).is_empty());
    assert_eq!(validate(&schema, &dup_new, Some(&old)).len(), 1);
}

// strfmt default.go, date.go, time.go, duration.go, kubernetes-extensions.go.
#[test]
fn string_formats() {
    let yes = [
        ("ipv4", "10.0.0.1"),
        ("ipv4", "010.0.0.1"),
        ("ipv6", "fd00::1"),
        ("cidr", "10.0.0.0/8"),
        ("hostname", "a.example.com"),
        ("uri", "https://x.io/a?b"),
        ("uri", "/path"),
        ("email", "a.b@c.io"),
        ("byte", "aGVsbG8="),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000"),
        ("date", "2024-02-29"),
        ("datetime", "2024-01-01T23:59:59.5+02:00"),
        ("duration", "1h30m"),
        ("duration", "5 days"),
        ("mac", "01:23:45:67:89:ab"),
        ("k8sshortname", "my-name"),
        ("isbn10", "0321751043"),
        ("creditcard", "4111 1111 1111 1111"),
        ("ssn", "123-45-6789"),
        ("hexcolor", "#fff"),
    ];
    for (f, s) in yes {
        assert!(format_ok(f, s), "{f} {s}");
    }
    let no = [
        ("ipv4", "1.2.3"),
        ("ipv4", "fd00::1"),
        ("ipv6", "10.0.0.1"),
        ("cidr", "10.0.0.0/33"),
        ("hostname", "-bad"),
        ("uri", "relative/path"),
        ("uri", "http://x/%zz"),
        ("email", "nope"),
        ("byte", "abc"),
        ("uuid", "123"),
        ("date", "2023-02-29"),
        ("datetime", "2024-01-01T24:00:00Z"),
        ("duration", "soon"),
        ("mac", "01:23:45"),
        ("k8sshortname", "Upper"),
        ("isbn10", "0321751044"),
    ];
    for (f, s) in no {
        assert!(!format_ok(f, s), "{f} {s}");
    }
}

// Go's RE2 classes are ASCII; its `%v`, `%q` and encoding/json renderings.
#[test]
fn go_regex_and_printing() {
    assert!(matches(r"^\d+$", "42") && !matches(r"^\d+$", "\u{661}\u{662}"));
    assert!(matches("^[a&&b]$", "&") && matches(r"^[\w.]+$", "a.b_c"));
    assert_eq!(go_float(1e6), "1e+06");
    assert_eq!(go_float(123456.0), "123456");
    assert_eq!(go_float(0.00001), "1e-05");
    assert_eq!(go_float(-1.5), "-1.5");
    assert_eq!(go_quote("a\"b\n\u{7f}é\u{200b}"), r#""a\"b\n\x7fé\u200b""#);
    assert_eq!(
        go_json(&json!({"b": [1.5, 1e21, "<"], "a": null})),
        r#"{"a":null,"b":[1.5,1e+21,"\u003c"]}"#
    );
}

// ValidateCustomResource runs the schema over the whole object, so a root schema's
// metadata.name constraints apply; pruning leaves the root metadata to ObjectMeta.
#[test]
fn root_metadata_name() {
    let schema = json!({"type": "object", "properties": {"metadata": {"type": "object",
        "properties": {"name": {"type": "string", "maxLength": 5}}}}});
    let mut obj =
        json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "too-long", "uid": "u"}});
    assert!(prune(&schema, &mut obj).is_empty());
    assert_eq!(obj["metadata"]["uid"], "u");
    assert_eq!(
        render(&validate(&schema, &obj, None)),
        ["metadata.name|FieldValueTooLong|Too long: may not be more than 5 bytes"]
    );
}
