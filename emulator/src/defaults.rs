//! Defaulting, as the real server's `SetDefaults_*` functions and CRD schema defaults do it.
//!
//! Defaults run on every write (create, update, patch, apply), so an object that is
//! re-applied unchanged compares equal to the stored one and nothing is written.

use serde_json::{Map, Value, json};

use crate::resources::ResourceKind;

/// Sets `obj[key] = value` when the key is absent (or null).
fn default_field(obj: &mut Map<String, Value>, key: &str, value: Value) {
    if obj.get(key).is_none_or(Value::is_null) {
        obj.insert(key.to_string(), value);
    }
}

/// Nested lookup on a JSON map.
trait PointerGet {
    fn pointer_get(&self, path: &[&str]) -> Option<&Value>;
}

impl PointerGet for Map<String, Value> {
    fn pointer_get(&self, path: &[&str]) -> Option<&Value> {
        let (first, rest) = path.split_first()?;
        rest.iter().try_fold(self.get(*first)?, |v, k| v.get(*k))
    }
}

fn obj_at<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    v.get_mut(key).and_then(Value::as_object_mut)
}

fn each_item(v: Option<&mut Value>, mut f: impl FnMut(&mut Map<String, Value>)) {
    if let Some(Value::Array(items)) = v {
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            f(item);
        }
    }
}

/// Map-typed fields (Go `map[...]` with `omitempty`) of the built-in kinds: stored without
/// them when empty. Empty structs such as `resources: {}` or `emptyDir: {}` are kept.
const OMITEMPTY_MAPS: &[&str] = &[
    "labels",
    "annotations",
    "data",
    "binaryData",
    "stringData",
    "nodeSelector",
    "matchLabels",
    "limits",
    "requests",
    "capacity",
    "allocatable",
    "overhead",
];

/// What decoding into the Go types and re-encoding does to built-in objects: empty
/// lists and empty map-typed fields disappear (`omitempty`).
fn drop_empty(v: &mut Value, in_service_spec: bool) {
    match v {
        Value::Object(m) => {
            m.retain(|k, x| match x {
                // The lists without omitempty that matter here: pod `containers`, and
                // rbac/v1 `rules` and `verbs` (k8s.io/api rbac/v1 types.go).
                Value::Array(a) => {
                    !a.is_empty() || matches!(k.as_str(), "containers" | "rules" | "verbs")
                }
                Value::Object(o) if o.is_empty() => {
                    !(OMITEMPTY_MAPS.contains(&k.as_str()) || (in_service_spec && k == "selector"))
                }
                _ => true,
            });
            for (k, x) in m.iter_mut() {
                drop_empty(x, k == "spec" && in_service_spec);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| drop_empty(x, false)),
        _ => {}
    }
}

/// JSON nulls decode to Go zero values and are not stored (nor kept by CRD pruning).
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// Applies the kind's defaults to `obj` in place.
pub fn apply_defaults(kind: &ResourceKind, obj: &mut Value) {
    if let Some(v) = kind.crd.filter(|v| v.has_schema()) {
        // A custom resource with a schema: its `default`s (nulls are the schema's business).
        crate::crd::structural::apply_defaults(&v.schema, obj);
        return;
    }
    drop_nulls(obj);
    if !kind.custom {
        go_round_trip(kind, obj);
    }
    match (kind.group, kind.kind) {
        ("", "Pod") => pod(obj),
        ("apps", "Deployment") => deployment(obj),
        ("apps", "ReplicaSet") => {
            if let Some(spec) = obj_at(obj, "spec") {
                default_field(spec, "replicas", json!(1));
                pod_template(spec);
            }
        }
        ("", "Service") => {
            if let Some(spec) = obj_at(obj, "spec") {
                service_spec(spec);
            }
        }
        ("", "Namespace") => namespace(obj),
        ("", "Secret") => {
            if let Some(o) = obj.as_object_mut() {
                default_field(o, "type", json!("Opaque"));
            }
        }
        ("", "PersistentVolumeClaim") => persistent_volume_claim(obj),
        ("discovery.k8s.io", "EndpointSlice") => {
            // SetDefaults_EndpointPort: the name pointer defaults to "", protocol to TCP.
            if let Some(o) = obj.as_object_mut() {
                each_item(o.get_mut("ports"), |p| {
                    default_field(p, "name", json!(""));
                    default_field(p, "protocol", json!("TCP"));
                });
            }
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            if let Some(o) = obj.as_object_mut() {
                default_field(o, "preemptionPolicy", json!("PreemptLowerPriority"));
            }
        }
        ("rbac.authorization.k8s.io", kind) => rbac(kind, obj),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            // SetDefaults_CustomResourceDefinitionSpec (apiextensions/v1/defaults.go).
            if let Some(spec) = obj_at(obj, "spec") {
                default_field(spec, "conversion", json!({"strategy": "None"}));
            }
        }
        // Custom resources without a CRD (the built-in fallback definitions) are stored
        // as sent: their defaults come from the installed CRD's schema.
        _ => {}
    }
}

/// Built-in kinds are decoded into Go types and re-encoded, which drops what `omitempty`
/// drops; custom resources are stored as sent.
fn go_round_trip(kind: &ResourceKind, obj: &mut Value) {
    // Only the top-level `spec` of a Service has a map-typed `selector`.
    if let Some(m) = obj.as_object_mut() {
        for (k, x) in m.iter_mut() {
            drop_empty(x, k == "spec" && kind.kind == "Service");
        }
        m.retain(|k, x| {
            !(matches!(x, Value::Array(a) if a.is_empty() && k != "rules")
                || (x.as_object().is_some_and(|o| o.is_empty())
                    && OMITEMPTY_MAPS.contains(&k.as_str())))
        });
    }
}

/// pkg/apis/rbac/v1/defaults.go: a binding's `roleRef.apiGroup` defaults to
/// `rbac.authorization.k8s.io`, a User or Group subject's `apiGroup` too (a ServiceAccount's
/// stays ""). Then what encoding the k8s.io/api rbac/v1 types does: `rules`, the RoleRef
/// fields and a subject's `kind`/`name` have no omitempty (a missing `rules` is `null`),
/// a subject's `apiGroup` and `namespace` do.
fn rbac(kind: &str, obj: &mut Value) {
    const GROUP: &str = "rbac.authorization.k8s.io";
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    if matches!(kind, "Role" | "ClusterRole") {
        default_field(o, "rules", Value::Null);
        return;
    }
    let role_ref = o.entry("roleRef").or_insert_with(|| json!({}));
    if !role_ref.is_object() {
        *role_ref = json!({});
    }
    if let Some(r) = role_ref.as_object_mut() {
        if r.get("apiGroup")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            r.insert("apiGroup".into(), json!(GROUP));
        }
        default_field(r, "kind", json!(""));
        default_field(r, "name", json!(""));
    }
    each_item(o.get_mut("subjects"), |s| {
        if s.get("apiGroup")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            match s.get("kind").and_then(Value::as_str) {
                Some("User" | "Group") => {
                    s.insert("apiGroup".into(), json!(GROUP));
                }
                _ => {
                    s.remove("apiGroup");
                }
            }
        }
        if s.get("namespace").and_then(Value::as_str) == Some("") {
            s.remove("namespace");
        }
        default_field(s, "kind", json!(""));
        default_field(s, "name", json!(""));
    });
}

fn pod(obj: &mut Value) {
    let Some(spec) = obj_at(obj, "spec") else {
        return;
    };
    pod_spec(spec);
    // SetDefaults_Pod (pods only, not templates).
    default_field(spec, "enableServiceLinks", json!(true));
    each_item(spec.get_mut("containers"), requests_from_limits);
    each_item(spec.get_mut("initContainers"), requests_from_limits);
    // InPlacePodVerticalScaling: cpu/memory requests get a NotRequired resize policy.
    each_item(spec.get_mut("containers"), resize_policy);
    if spec.get("hostNetwork") == Some(&json!(true)) {
        for list in ["containers", "initContainers"] {
            each_item(spec.get_mut(list), |c| {
                each_item(c.get_mut("ports"), |p| {
                    if p.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0
                        && let Some(cp) = p.get("containerPort").cloned()
                    {
                        p.insert("hostPort".into(), cp);
                    }
                })
            });
        }
    }
}

fn deployment(obj: &mut Value) {
    let Some(spec) = obj_at(obj, "spec") else {
        return;
    };
    default_field(spec, "replicas", json!(1));
    let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
    if let Some(s) = strategy.as_object_mut() {
        default_field(s, "type", json!("RollingUpdate"));
        if s.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
            let ru = s.entry("rollingUpdate").or_insert_with(|| json!({}));
            if let Some(ru) = ru.as_object_mut() {
                default_field(ru, "maxUnavailable", json!("25%"));
                default_field(ru, "maxSurge", json!("25%"));
            }
        }
    }
    default_field(spec, "revisionHistoryLimit", json!(10));
    default_field(spec, "progressDeadlineSeconds", json!(600));
    pod_template(spec);
}

fn namespace(obj: &mut Value) {
    if let Some(name) = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(String::from)
    {
        // The namespace name label is always set (and reset) by the server.
        let meta = crate::resources::meta_mut(obj);
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
        }
    }
}

fn persistent_volume_claim(obj: &mut Value) {
    if let Some(spec) = obj_at(obj, "spec") {
        default_field(spec, "volumeMode", json!("Filesystem"));
        if let Some(r) = spec.get_mut("resources") {
            crate::quantity::canonicalize_map(r.get_mut("requests"));
            crate::quantity::canonicalize_map(r.get_mut("limits"));
        }
    }
}

fn pod_template(spec: &mut Map<String, Value>) {
    if let Some(tspec) = spec.get_mut("template").and_then(|t| obj_at(t, "spec")) {
        pod_spec(tspec);
    }
}

/// SetDefaults_PodSpec and the per-container/volume/probe defaults it implies.
pub fn pod_spec(spec: &mut Map<String, Value>) {
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    crate::quantity::canonicalize_map(spec.get_mut("overhead"));
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        each_item(spec.get_mut(list), container);
    }
    each_item(spec.get_mut("volumes"), volume);
}

/// SetDefaults_Volume and the volume source defaults.
fn volume(v: &mut Map<String, Value>) {
    // A volume with no source is an emptyDir.
    if v.keys().all(|k| k == "name") {
        v.insert("emptyDir".into(), json!({}));
    }
    for src in ["configMap", "secret", "projected", "downwardAPI"] {
        if let Some(s) = v.get_mut(src).and_then(Value::as_object_mut) {
            default_field(s, "defaultMode", json!(420));
        }
    }
    // `sizeLimit *resource.Quantity` is stored in canonical form: `0.5Gi` reads back `512Mi`.
    if let Some(limit) = v.get_mut("emptyDir").and_then(|e| e.get_mut("sizeLimit"))
        && let Some(canonical) = limit.as_str().and_then(crate::quantity::canonical)
    {
        *limit = Value::String(canonical);
    }
    if let Some(hp) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
        default_field(hp, "type", json!(""));
    }
    let field_refs = |items: Option<&mut Value>| {
        each_item(items, |i| {
            if let Some(fr) = i.get_mut("fieldRef").and_then(Value::as_object_mut) {
                default_field(fr, "apiVersion", json!("v1"));
            }
        })
    };
    if let Some(d) = v.get_mut("downwardAPI") {
        field_refs(d.get_mut("items"));
    }
    if let Some(p) = v.get_mut("projected") {
        each_item(p.get_mut("sources"), |src| {
            if let Some(d) = src.get_mut("downwardAPI") {
                field_refs(d.get_mut("items"));
            }
            if let Some(t) = src
                .get_mut("serviceAccountToken")
                .and_then(Value::as_object_mut)
            {
                default_field(t, "expirationSeconds", json!(3600));
            }
        });
    }
    if let Some(spec) = v
        .get_mut("ephemeral")
        .and_then(|e| e.get_mut("volumeClaimTemplate"))
        .and_then(|t| obj_at(t, "spec"))
    {
        default_field(spec, "volumeMode", json!("Filesystem"));
        if let Some(r) = spec.get_mut("resources") {
            crate::quantity::canonicalize_map(r.get_mut("requests"));
            crate::quantity::canonicalize_map(r.get_mut("limits"));
        }
    }
}

/// SetDefaults_HTTPGetAction.
fn http_get(h: &mut Map<String, Value>) {
    default_field(h, "path", json!("/"));
    default_field(h, "scheme", json!("HTTP"));
}

fn container(c: &mut Map<String, Value>) {
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    default_field(c, "imagePullPolicy", json!(image_pull_policy(&image)));
    default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
    default_field(c, "terminationMessagePolicy", json!("File"));
    // ResourceRequirements is a non-pointer struct: the server always serialises it.
    default_field(c, "resources", json!({}));
    if let Some(r) = c.get_mut("resources") {
        crate::quantity::canonicalize_map(r.get_mut("limits"));
        crate::quantity::canonicalize_map(r.get_mut("requests"));
    }
    each_item(c.get_mut("ports"), |p| {
        default_field(p, "protocol", json!("TCP"))
    });
    each_item(c.get_mut("env"), |e| {
        // `Value string json:"value,omitempty"`: an empty value is not stored.
        if e.get("value").is_some_and(|v| v == "") {
            e.remove("value");
        }
        if let Some(fr) = e.get_mut("valueFrom").and_then(|v| obj_at(v, "fieldRef")) {
            default_field(fr, "apiVersion", json!("v1"));
        }
    });
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            default_field(p, "timeoutSeconds", json!(1));
            default_field(p, "periodSeconds", json!(10));
            default_field(p, "successThreshold", json!(1));
            default_field(p, "failureThreshold", json!(3));
            if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
                http_get(h);
            }
            if let Some(g) = p.get_mut("grpc").and_then(Value::as_object_mut) {
                default_field(g, "service", json!(""));
            }
        }
    }
    if let Some(l) = c.get_mut("lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = l
                .get_mut(hook)
                .and_then(|x| x.get_mut("httpGet"))
                .and_then(Value::as_object_mut)
            {
                http_get(h);
            }
        }
    }
}

/// `Always` for `:latest` or untagged images, `IfNotPresent` otherwise (digests count as tags).
fn image_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// SetDefaults_Pod: a `NotRequired` resize policy for the cpu and memory a container requests.
fn resize_policy(c: &mut Map<String, Value>) {
    let requested: Vec<String> = ["cpu", "memory"]
        .iter()
        .filter(|r| c.pointer_get(&["resources", "requests", r]).is_some())
        .map(|r| r.to_string())
        .collect();
    if requested.is_empty() {
        return;
    }
    let policies = c.entry("resizePolicy").or_insert_with(|| json!([]));
    if let Some(list) = policies.as_array_mut() {
        for r in requested {
            if !list
                .iter()
                .any(|p| p.get("resourceName").and_then(Value::as_str) == Some(r.as_str()))
            {
                list.push(json!({"resourceName": r, "restartPolicy": "NotRequired"}));
            }
        }
    }
}

/// SetDefaults_Pod: requests default to limits.
fn requests_from_limits(c: &mut Map<String, Value>) {
    let Some(limits) = c
        .get("resources")
        .and_then(|r| r.get("limits"))
        .and_then(Value::as_object)
        .cloned()
    else {
        return;
    };
    if let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) {
        let req = res.entry("requests").or_insert_with(|| json!({}));
        if let Some(req) = req.as_object_mut() {
            for (k, v) in limits {
                req.entry(k).or_insert(v);
            }
        }
    }
}

fn service_spec(spec: &mut Map<String, Value>) {
    default_field(spec, "type", json!("ClusterIP"));
    default_field(spec, "sessionAffinity", json!("None"));
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    each_item(spec.get_mut("ports"), |p| {
        default_field(p, "protocol", json!("TCP"));
        if let Some(port) = p.get("port").cloned() {
            default_field(p, "targetPort", port);
        }
    });
    if ["ClusterIP", "NodePort", "LoadBalancer"].contains(&ty.as_str()) {
        default_field(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    // service.ExternallyAccessible: node ports, load balancers, or external IPs.
    let external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if ty == "NodePort" || ty == "LoadBalancer" || (ty == "ClusterIP" && external_ips) {
        default_field(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if spec.get("sessionAffinity").and_then(Value::as_str) == Some("None") {
        spec.remove("sessionAffinityConfig");
    }
    if ty == "LoadBalancer" {
        default_field(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if spec.get("sessionAffinity").and_then(Value::as_str) == Some("ClientIP") {
        default_field(
            spec,
            "sessionAffinityConfig",
            json!({"clientIP": {"timeoutSeconds": 10800}}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_tag() {
        assert_eq!(image_pull_policy("nginx"), "Always");
        assert_eq!(image_pull_policy("nginx:latest"), "Always");
        assert_eq!(image_pull_policy("nginx:1.27"), "IfNotPresent");
        assert_eq!(image_pull_policy("localhost:5000/nginx"), "Always");
        assert_eq!(image_pull_policy("nginx@sha256:abc"), "IfNotPresent");
    }
}
