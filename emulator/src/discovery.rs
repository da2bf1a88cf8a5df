//! Discovery documents: `/version`, `/api`, `/apis`, group and resource lists, and a minimal
//! OpenAPI v3 (enough for kubectl to find GVKs and the `fieldValidation` parameter).

use serde_json::{Value, json};

use crate::resources::{Kinds, ResourceKind};

/// The Kubernetes version the emulator claims to be.
pub const GIT_VERSION: &str = "v1.35.2";
pub const MAJOR: &str = "1";
pub const MINOR: &str = "35";

pub fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "emulationMajor": MAJOR,
        "emulationMinor": MINOR,
        "minCompatibilityMajor": MAJOR,
        "minCompatibilityMinor": "34",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// An APIGroup: every served version, the preferred (highest priority) one first.
fn group_doc(kinds: &Kinds, group: &str) -> Value {
    let versions: Vec<Value> = kinds
        .versions(group)
        .into_iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
        "versions": versions,
    })
}

pub fn api_group_list(kinds: &Kinds) -> Value {
    let groups: Vec<Value> = kinds
        .groups()
        .into_iter()
        .map(|g| group_doc(kinds, g))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(kinds: &Kinds, group: &str) -> Option<Value> {
    if !kinds.groups().contains(&group) {
        return None;
    }
    let mut doc = group_doc(kinds, group);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// The verbs discovery lists for a resource. Built-in resources list the verbs their
/// REST storage implements, sorted (apiserver `endpoints/installer.go`); namespaces have no
/// DeleteCollection (pkg/registry/core/namespace/storage). Custom resources list the fixed
/// set of apiextensions-apiserver's `customresource_discovery_controller.go`, in its order.
fn verbs(k: &ResourceKind) -> &'static [&'static str] {
    if k.custom {
        return &[
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "create",
            "update",
            "watch",
        ];
    }
    match (k.group, k.plural) {
        ("", "namespaces") => &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ],
        _ => &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ],
    }
}

/// `discovery.StorageVersionHash` (apiserver `endpoints/discovery/storageversionhash.go`):
/// base64 of the first 8 bytes of the SHA-256 of `group/version/kind`.
fn storage_version_hash(k: &ResourceKind) -> String {
    use base64::Engine;
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{}/{}/{}", k.group, k.version, k.kind));
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

pub fn resource_list(kinds: &Kinds, group: &str, version: &str) -> Option<Value> {
    if !kinds.has_group_version(group, version) {
        return None;
    }
    let mut resources = Vec::new();
    for k in kinds.in_group_version(group, version) {
        // events.k8s.io/v1 is served from core/v1 storage, whose version the hash names.
        let storage = if k.group == "events.k8s.io" {
            kinds.by_kind("v1", "Event").unwrap_or(k)
        } else {
            k
        };
        let mut entry = json!({
            "name": k.plural,
            "singularName": k.singular,
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": verbs(k),
            "storageVersionHash": storage_version_hash(storage),
        });
        // `shortNames` and `categories` are omitempty in metav1.APIResource.
        if !k.short_names.is_empty() {
            entry["shortNames"] = json!(k.short_names);
        }
        if !k.categories.is_empty() {
            entry["categories"] = json!(k.categories);
        }
        resources.push(entry);
        if k.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", k.plural),
                "singularName": "",
                "namespaced": k.namespaced,
                "kind": k.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        for sub in k.extra_subresources() {
            let (kind, verbs) = match *sub {
                "binding" => ("Binding", json!(["create"])),
                "scale" => ("Scale", json!(["get", "patch", "update"])),
                // A connecter's verbs follow its HTTP methods (GET get, POST create, PUT
                // update, PATCH patch, DELETE delete), the same for both proxies
                // (pkg/registry/core/service/proxy.go, pod/rest/subresources.go); the
                // kind is their connect options' (`ServiceProxyOptions`, `PodProxyOptions`).
                "proxy" => (
                    if k.kind == "Pod" {
                        "PodProxyOptions"
                    } else {
                        "ServiceProxyOptions"
                    },
                    json!(["create", "delete", "get", "patch", "update"]),
                ),
                _ => (k.kind, json!(["update"])),
            };
            let mut entry = json!({
                "name": format!("{}/{sub}", k.plural),
                "singularName": "",
                "namespaced": k.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            if *sub == "scale" {
                entry["group"] = json!("autoscaling");
                entry["version"] = json!("v1");
            }
            resources.push(entry);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of group-version documents.
pub fn openapi_v3_index(kinds: &Kinds) -> Value {
    let mut paths = serde_json::Map::new();
    let mut seen = Vec::new();
    for k in kinds.all() {
        let p = gv_path(k.group, k.version);
        if !seen.contains(&p) {
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=0")}),
            );
            seen.push(p);
        }
    }
    json!({"paths": paths})
}

fn schema_name(k: &ResourceKind) -> String {
    let g = if k.group.is_empty() {
        "core".to_string()
    } else {
        k.group.to_string()
    };
    format!("io.k8s.emulated.{g}.{}.{}", k.version, k.kind)
}

fn params(names: &[&str]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| json!({"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": true}}))
            .collect(),
    )
}

/// `/openapi/v3/{api|apis/group}/{version}`: paths with their query parameters, and one
/// permissive schema per kind carrying `x-kubernetes-group-version-kind`.
pub fn openapi_v3_doc(kinds: &Kinds, path: &str) -> Option<Value> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version) = match parts.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return None,
    };
    if !kinds.has_group_version(group, version) {
        return None;
    }
    let mut schemas = serde_json::Map::new();
    let mut paths = serde_json::Map::new();
    let write_params = params(&["dryRun", "fieldManager", "fieldValidation", "pretty"]);
    let patch_params = params(&[
        "dryRun",
        "fieldManager",
        "fieldValidation",
        "force",
        "pretty",
    ]);
    for k in kinds.in_group_version(group, version) {
        let name = schema_name(k);
        if let Some(v) = k.crd.filter(|v| v.has_schema()) {
            // An installed CRD publishes its version's schema (apiextensions-apiserver
            // `pkg/controller/openapi/builder`), tagged with its group-version-kind.
            let mut schema = v.schema.clone();
            schema["x-kubernetes-group-version-kind"] =
                json!([{"group": k.group, "version": k.version, "kind": k.kind}]);
            schemas.insert(name.clone(), schema);
        } else {
            schemas.insert(
                name.clone(),
                json!({
                "type": "object",
                "description": format!("{} (emulated; fields are not described)", k.kind),
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                },
                "x-kubernetes-group-version-kind": [{"group": k.group, "version": k.version, "kind": k.kind}],
            }),
            );
        }
        let base = format!("/{}", gv_path(group, version));
        let coll = if k.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", k.plural)
        } else {
            format!("{base}/{}", k.plural)
        };
        let gvk = json!({"group": k.group, "version": k.version, "kind": k.kind});
        let op = |action: &str, p: &Value| json!({"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk, "parameters": p, "responses": {}});
        paths.insert(
            coll.clone(),
            json!({"get": op("list", &json!([])), "post": op("post", &write_params)}),
        );
        paths.insert(
            format!("{coll}/{{name}}"),
            json!({"get": op("get", &json!([])), "put": op("put", &write_params), "patch": op("patch", &patch_params), "delete": op("delete", &json!([]))}),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (modelplane emulator)", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
