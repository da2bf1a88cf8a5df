//! Custom resources served from CustomResourceDefinitions, through the real `kube` client:
//! the published manifests (installed from `scripts/crds.sh`'s folder) prune, default and
//! validate what is written, and a CRD of the test's own shows the definition's life:
//! rules checked when it is written, a tightened schema ratcheting old values, messages
//! from `messageExpression`, `reason` and `fieldPath`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, Config};
use modelplane_emulator::{Crds, Emulator, RunningEmulator};
use serde_json::{Value, json};

async fn start() -> (RunningEmulator, Client) {
    let crds = modelplane_emulator::published_crds_dir().unwrap_or_else(|e| panic!("{e}"));
    let emu = Emulator::builder()
        .crds(Crds::Manifests(crds))
        .start()
        .await
        .expect("emulator starts");
    let client = Client::try_from(Config::new(emu.url().parse().unwrap())).unwrap();
    (emu, client)
}

fn api(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    if kind == "GatewayClass" {
        Api::all_with(client.clone(), &ar)
    } else {
        Api::namespaced_with(client.clone(), "default", &ar)
    }
}

fn routes(client: &Client) -> Api<DynamicObject> {
    api(
        client,
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
        "httproutes",
    )
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

fn status(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn causes(s: &kube::core::Status) -> Vec<(String, String)> {
    s.details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| (c.field.clone(), c.message.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Structural defaulting (apiextensions-apiserver pkg/apiserver/schema/defaulting) from the
/// Gateway API manifest: a rule without matches gets the PathPrefix "/" match, a backendRef
/// its group, kind and weight, a parentRef its group and kind.
#[tokio::test]
async fn httproute_defaults_come_from_the_published_schema() {
    let (_emu, client) = start().await;
    let route = object(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "r"},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "svc", "port": 80}]}]},
    }));
    let created = routes(&client)
        .create(&PostParams::default(), &route)
        .await
        .unwrap();
    let spec = &created.data["spec"];
    assert_eq!(
        spec["rules"][0]["matches"],
        json!([{"path": {"type": "PathPrefix", "value": "/"}}])
    );
    assert_eq!(
        spec["rules"][0]["backendRefs"][0],
        json!({"group": "", "kind": "Service", "name": "svc", "port": 80, "weight": 1})
    );
    assert_eq!(
        spec["parentRefs"][0],
        json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"})
    );
}

/// Pruning (pkg/apiserver/schema/pruning): unknown fields anywhere in a custom resource
/// are dropped, and with `fieldValidation=Strict` refused, each named by its path.
#[tokio::test]
async fn unknown_fields_are_pruned_and_strict_validation_names_them() {
    let (_emu, client) = start().await;
    let body = json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "r"},
        "spec": {"parentRefs": [{"name": "gw", "colour": "red"}], "extra": true,
                 "rules": [{"backendRefs": [{"name": "svc", "port": 80}]}]},
    });
    let err = status(
        routes(&client)
            .patch(
                "r",
                &PatchParams::apply("t").validation_strict(),
                &Patch::Apply(&body),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 400);
    assert!(
        err.message.contains("unknown field \"spec.extra\"")
            && err
                .message
                .contains("unknown field \"spec.parentRefs[0].colour\""),
        "{}",
        err.message
    );
    let kept = routes(&client)
        .patch("r", &PatchParams::apply("t"), &Patch::Apply(&body))
        .await
        .unwrap();
    assert!(kept.data["spec"].get("extra").is_none());
    assert!(kept.data["spec"]["parentRefs"][0].get("colour").is_none());
}

/// The schema's own checks with kube-openapi's wording (enum, maxItems), as
/// kubeOpenAPIResultToFieldErrors (pkg/apiserver/validation/validation.go) reports them.
#[tokio::test]
async fn schema_violations_name_their_fields() {
    let (_emu, client) = start().await;
    let refs: Vec<Value> = (0..17)
        .map(|i| json!({"name": format!("svc-{i}"), "port": 80}))
        .collect();
    let route = object(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "r"},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": [{
            "matches": [{"path": {"type": "Prefix", "value": "/"}}],
            "backendRefs": refs,
        }]},
    }));
    let err = status(
        routes(&client)
            .create(&PostParams::default(), &route)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    let found = causes(&err);
    assert!(
        found.contains(&(
            "spec.rules[0].matches[0].path.type".into(),
            "Unsupported value: \"Prefix\": supported values: \"Exact\", \"PathPrefix\", \"RegularExpression\"".into()
        )),
        "{found:?}"
    );
    assert!(
        found.contains(&(
            "spec.rules[0].backendRefs".into(),
            "Too many: 17: must have at most 16 items".into()
        )),
        "{found:?}"
    );
}

/// A transition rule (`self == oldSelf` on GatewayClass spec.controllerName, evaluated
/// with the stored object as oldSelf: pkg/apiserver/schema/cel/validation.go) lets the
/// object be written unchanged and refuses a change.
#[tokio::test]
async fn an_immutable_field_refuses_a_change() {
    let (_emu, client) = start().await;
    let classes = api(
        &client,
        "gateway.networking.k8s.io",
        "v1",
        "GatewayClass",
        "gatewayclasses",
    );
    let class = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "envoy"}, "spec": {"controllerName": "example.com/envoy"}});
    let pp = PatchParams::apply("t");
    classes
        .patch("envoy", &pp, &Patch::Apply(&class))
        .await
        .unwrap();
    let mut described = class.clone();
    described["spec"]["description"] = json!("the shared gateway");
    classes
        .patch("envoy", &pp, &Patch::Apply(&described))
        .await
        .unwrap();
    let mut moved = described.clone();
    moved["spec"]["controllerName"] = json!("example.com/other");
    let err = status(
        classes
            .patch("envoy", &pp, &Patch::Apply(&moved))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert_eq!(
        causes(&err),
        [(
            "spec.controllerName".to_string(),
            "Invalid value: \"example.com/other\": Value is immutable".to_string()
        )]
    );
}

/// Server-side apply merges a list the schema marks `x-kubernetes-list-type: map`
/// (Gateway listeners, keyed by name) item by item: two managers keep their own listener.
#[tokio::test]
async fn apply_merges_lists_by_the_schemas_map_keys() {
    let (_emu, client) = start().await;
    let gateways = api(
        &client,
        "gateway.networking.k8s.io",
        "v1",
        "Gateway",
        "gateways",
    );
    let listener = |name: &str, port: i64| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw"},
            "spec": {"gatewayClassName": "envoy",
                     "listeners": [{"name": name, "port": port, "protocol": "HTTP"}]}})
    };
    gateways
        .patch(
            "gw",
            &PatchParams::apply("team-a"),
            &Patch::Apply(&listener("a", 80)),
        )
        .await
        .unwrap();
    let both = gateways
        .patch(
            "gw",
            &PatchParams::apply("team-b"),
            &Patch::Apply(&listener("b", 8080)),
        )
        .await
        .unwrap();
    let names: Vec<&str> = both.data["spec"]["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
}

fn crds(client: &Client) -> Api<CustomResourceDefinition> {
    Api::all(client.clone())
}

/// A CRD of the test's own: widgets with a size and a replica count.
fn widget_crd(size_max_length: Option<i64>, rules: Value) -> CustomResourceDefinition {
    let mut size = json!({"type": "string"});
    if let Some(n) = size_max_length {
        size["maxLength"] = json!(n);
    }
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-validations": rules, "properties": {
                        "size": size,
                        "colour": {"type": "string"},
                        "replicas": {"type": "integer"},
                        "maxReplicas": {"type": "integer"},
                    }},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    }))
    .unwrap()
}

async fn established(client: &Client) {
    for _ in 0..200 {
        let crd = crds(client).get("widgets.example.com").await.unwrap();
        let ok = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if ok {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("widgets.example.com was not established");
}

fn widgets(client: &Client) -> Api<DynamicObject> {
    api(client, "example.com", "v1", "Widget", "widgets")
}

fn widget(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

/// A rule that does not compile makes the definition invalid, at the rule's path
/// (apiextensions-apiserver pkg/apis/apiextensions/validation/validation.go, with the
/// compiler's message), and nothing is served.
#[tokio::test]
async fn a_crd_whose_rule_does_not_compile_is_refused() {
    let (_emu, client) = start().await;
    let bad = widget_crd(None, json!([{"rule": "self.replicas <="}]));
    let err = status(
        crds(&client)
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    let found = causes(&err);
    assert_eq!(
        found[0].0,
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule",
        "{found:?}"
    );
    assert!(found[0].1.contains("compilation failed"), "{found:?}");
}

/// `messageExpression`, `reason` and `fieldPath` of a rule shape the error
/// (pkg/apiserver/schema/cel/validation.go): a Forbidden error at spec.replicas with the
/// computed message. The expression reads a string with a maxLength: its estimated cost
/// must be bounded for the definition to be accepted (validation.go's messageExpression
/// cost check; `string()` of a number has no size bound in cel-go and is refused).
#[tokio::test]
async fn a_rules_message_expression_reason_and_field_path_shape_the_error() {
    let (_emu, client) = start().await;
    let rules = json!([{
        "rule": "!has(self.maxReplicas) || self.replicas <= self.maxReplicas",
        "messageExpression": "'a ' + self.size + ' widget has too many replicas'",
        "reason": "FieldValueForbidden",
        "fieldPath": ".replicas",
    }]);
    crds(&client)
        .create(&PostParams::default(), &widget_crd(Some(20), rules))
        .await
        .unwrap();
    established(&client).await;
    let body = object(widget(
        json!({"size": "small", "replicas": 5, "maxReplicas": 3}),
    ));
    let err = status(
        widgets(&client)
            .create(&PostParams::default(), &body)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert_eq!(
        causes(&err),
        [(
            "spec.replicas".to_string(),
            "Forbidden: a small widget has too many replicas".to_string()
        )]
    );
    let fine = object(widget(
        json!({"size": "small", "replicas": 2, "maxReplicas": 3}),
    ));
    widgets(&client)
        .create(&PostParams::default(), &fine)
        .await
        .unwrap();
}

/// A messageExpression whose estimated cost has no bound (`string()` of an integer has no
/// size in cel-go's estimator, and the concatenation is charged for its worst case) makes
/// the definition invalid (apiextensions validation.go, messageExpression cost).
#[tokio::test]
async fn an_unbounded_message_expression_is_refused_with_the_crd() {
    let (_emu, client) = start().await;
    let rules = json!([{
        "rule": "self.replicas <= 10",
        "messageExpression": "'replicas must be at most 10, not ' + string(self.replicas)",
    }]);
    let err = status(
        crds(&client)
            .create(&PostParams::default(), &widget_crd(None, rules))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    let found = causes(&err);
    assert_eq!(
        found[0].0,
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].messageExpression",
        "{found:?}"
    );
    assert!(
        found[0]
            .1
            .contains("estimated messageExpression cost exceeds budget"),
        "{found:?}"
    );
}

/// A schema tightened after objects were stored ratchets (CRDValidationRatcheting, on by
/// default since v1.30): an update that leaves the now-invalid value as it was is
/// accepted; one that changes it must satisfy the new schema.
#[tokio::test]
async fn a_tightened_schema_ratchets_unchanged_values() {
    let (_emu, client) = start().await;
    crds(&client)
        .create(&PostParams::default(), &widget_crd(None, json!([])))
        .await
        .unwrap();
    established(&client).await;
    let pp = PatchParams::apply("t");
    widgets(&client)
        .patch(
            "w",
            &pp,
            &Patch::Apply(&widget(json!({"size": "extra-large"}))),
        )
        .await
        .unwrap();
    let mut tightened = widget_crd(Some(5), json!([]));
    let current = crds(&client).get("widgets.example.com").await.unwrap();
    tightened.metadata.resource_version = current.metadata.resource_version;
    crds(&client)
        .replace("widgets.example.com", &PostParams::default(), &tightened)
        .await
        .unwrap();
    // The new schema serves once the establishing controller has seen it: a new object
    // with a long size is refused from then on.
    let probe = object(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "probe"}, "spec": {"size": "enormous"}}));
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut refused = false;
    for _ in 0..200 {
        if widgets(&client).create(&dry_run, &probe).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(refused, "the tightened schema never took effect");
    // Another field changes; the long size is as it was.
    widgets(&client)
        .patch(
            "w",
            &pp,
            &Patch::Apply(&widget(json!({"size": "extra-large", "colour": "blue"}))),
        )
        .await
        .unwrap();
    let err = status(
        widgets(&client)
            .patch(
                "w",
                &pp,
                &Patch::Apply(&widget(json!({"size": "enormous", "colour": "blue"}))),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        causes(&err),
        [(
            "spec.size".to_string(),
            "Too long: may not be more than 5 bytes".to_string()
        )]
    );
}

/// Deleting a CRD whose instance has a finalizer: the CRD stays, `Terminating` (the
/// finalizer controller, pkg/controller/finalizer/crd_finalizer.go, waits for the
/// instances), creates are refused with 405 (customresource_handler.go serveResource),
/// and once the instance's finalizer is cleared the instance and then the CRD are gone.
#[tokio::test]
async fn a_crd_waits_for_its_instances_finalizers_and_refuses_creates_meanwhile() {
    let (_emu, client) = start().await;
    crds(&client)
        .create(&PostParams::default(), &widget_crd(None, json!([])))
        .await
        .unwrap();
    established(&client).await;
    let mut held = widget(json!({"size": "small"}));
    held["metadata"]["finalizers"] = json!(["example.com/keep"]);
    widgets(&client)
        .create(&PostParams::default(), &object(held))
        .await
        .unwrap();
    crds(&client)
        .delete("widgets.example.com", &Default::default())
        .await
        .unwrap();
    let mut terminating = false;
    for _ in 0..200 {
        let crd = crds(&client).get("widgets.example.com").await.unwrap();
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        if conditions.iter().any(|c| {
            c.type_ == "Terminating" && c.reason.as_deref() == Some("InstanceDeletionInProgress")
        }) {
            terminating = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(terminating, "the CRD says it waits for its instances");
    let another = object(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "another"}, "spec": {}}));
    let err = status(
        widgets(&client)
            .create(&PostParams::default(), &another)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.reason.as_str(), err.message.as_str()),
        (
            405,
            "MethodNotAllowed",
            "create not allowed while custom resource definition is terminating"
        )
    );
    let release = json!({"metadata": {"finalizers": null}});
    widgets(&client)
        .patch("w", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    for _ in 0..200 {
        if crds(&client)
            .get_opt("widgets.example.com")
            .await
            .unwrap()
            .is_none()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the CRD was not removed after its last instance went");
}
