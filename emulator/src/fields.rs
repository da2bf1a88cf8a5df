//! Unknown-field detection for `fieldValidation`, like the real server's strict decoder.
//!
//! Built-in kinds are decoded into the typed `k8s-openapi` structs while recording every
//! ignored field (so nested typos such as `spec.template.spec.containers[0].imagee` are
//! found); the Gateway API and InferencePool kinds only get their top level and metadata
//! checked. Unknown fields are removed from the body, as decoding into Go structs does.

use k8s_openapi::api::{
    apps::v1 as apps, coordination::v1 as coordination, core::v1 as core,
    discovery::v1 as discovery, rbac::v1 as rbac, scheduling::v1 as scheduling,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::resources::ResourceKind;

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

fn segments(path: &serde_ignored::Path, out: &mut Vec<Seg>) {
    use serde_ignored::Path;
    match path {
        Path::Root => {}
        Path::Seq { parent, index } => {
            segments(parent, out);
            out.push(Seg::Index(*index));
        }
        Path::Map { parent, key } => {
            segments(parent, out);
            out.push(Seg::Key(key.clone()));
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => segments(parent, out),
    }
}

/// Paths of the fields `T` does not know (decoding errors just end the search early;
/// validation reports missing or malformed fields).
fn ignored<T: DeserializeOwned>(v: &Value) -> Vec<Vec<Seg>> {
    let mut out = Vec::new();
    let _ = serde_ignored::deserialize::<_, _, T>(v.clone(), |p| {
        let mut segs = Vec::new();
        segments(&p, &mut segs);
        out.push(segs);
    });
    out
}

fn render(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn remove(v: &mut Value, path: &[Seg]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parents {
        let next = match seg {
            Seg::Key(k) => cur.get_mut(k.as_str()),
            Seg::Index(i) => cur.get_mut(*i),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let (Seg::Key(k), Some(m)) = (last, cur.as_object_mut()) {
        m.remove(k);
    }
}

/// The metadata of a custom resource (ObjectMeta); the rest is pruned by its schema
/// (`crd::structural::prune`) or, with no schema (the built-in fallback definitions),
/// kept as sent.
fn custom_resource(v: &Value) -> Vec<Vec<Seg>> {
    let mut out = Vec::new();
    if let Some(meta) = v.get("metadata") {
        for mut p in ignored::<ObjectMeta>(meta) {
            p.insert(0, Seg::Key("metadata".into()));
            out.push(p);
        }
    }
    out
}

/// Quantities may be JSON numbers (the Go type accepts both); the typed decode wants strings.
fn quantities_as_strings(v: &mut Value, in_resource_list: bool) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if in_resource_list && x.is_number() {
                    *x = Value::String(x.to_string());
                } else {
                    let list = matches!(
                        k.as_str(),
                        "limits" | "requests" | "overhead" | "capacity" | "allocatable"
                    );
                    quantities_as_strings(x, list);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| quantities_as_strings(x, false)),
        _ => {}
    }
}

/// The first resource-list quantity that does not parse, with its path.
fn bad_quantity(v: &Value, path: &str, in_resource_list: bool) -> Option<String> {
    match v {
        Value::Object(m) => m.iter().find_map(|(k, x)| {
            let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            match x {
                Value::String(q) if in_resource_list && crate::quantity::nano_value(q).is_none() => {
                    Some(format!("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' (at {p})"))
                }
                _ => {
                    let list = matches!(k.as_str(), "limits" | "requests" | "overhead" | "capacity" | "allocatable");
                    bad_quantity(x, &p, list)
                }
            }
        }),
        Value::Array(a) => a.iter().enumerate().find_map(|(i, x)| bad_quantity(x, &format!("{path}[{i}]"), false)),
        _ => None,
    }
}

fn type_error<T: DeserializeOwned>(v: &Value) -> Option<String> {
    if let Some(e) = bad_quantity(v, "", false) {
        return Some(e);
    }
    let mut copy = v.clone();
    quantities_as_strings(&mut copy, false);
    match serde_path_to_error::deserialize::<_, T>(copy) {
        Ok(_) => None,
        // Missing required fields are validation errors (422), reported later.
        Err(e) if e.inner().to_string().starts_with("missing field") => None,
        Err(e) => Some(format!("{} (at {})", e.inner(), e.path())),
    }
}

/// A body the Go types could not decode (a wrong JSON type somewhere): the server answers
/// 400 "cannot be handled as a <Kind>". Only checked for built-in kinds.
pub fn decode_error(kind: &ResourceKind, body: &Value) -> Option<String> {
    let err = match (kind.group, kind.kind) {
        ("", "Namespace") => type_error::<core::Namespace>(body),
        ("", "Node") => type_error::<core::Node>(body),
        ("", "Pod") => type_error::<core::Pod>(body),
        ("", "Service") => type_error::<core::Service>(body),
        ("", "Event") => type_error::<core::Event>(body),
        ("", "Secret") => type_error::<core::Secret>(body),
        ("", "ConfigMap") => type_error::<core::ConfigMap>(body),
        ("", "ServiceAccount") => type_error::<core::ServiceAccount>(body),
        ("", "PersistentVolumeClaim") => type_error::<core::PersistentVolumeClaim>(body),
        ("apps", "Deployment") => type_error::<apps::Deployment>(body),
        ("apps", "ReplicaSet") => type_error::<apps::ReplicaSet>(body),
        ("scheduling.k8s.io", "PriorityClass") => type_error::<scheduling::PriorityClass>(body),
        ("coordination.k8s.io", "Lease") => type_error::<coordination::Lease>(body),
        ("rbac.authorization.k8s.io", "Role") => type_error::<rbac::Role>(body),
        ("rbac.authorization.k8s.io", "RoleBinding") => type_error::<rbac::RoleBinding>(body),
        ("rbac.authorization.k8s.io", "ClusterRole") => type_error::<rbac::ClusterRole>(body),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            type_error::<rbac::ClusterRoleBinding>(body)
        }
        ("discovery.k8s.io", "EndpointSlice") => type_error::<discovery::EndpointSlice>(body),
        // Schemas hold `limits`/`requests` properties that are not quantities: decoded
        // as they are.
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            match serde_path_to_error::deserialize::<_, apiextensions::CustomResourceDefinition>(
                body.clone(),
            ) {
                Err(e) if !e.inner().to_string().starts_with("missing field") => {
                    Some(format!("{} (at {})", e.inner(), e.path()))
                }
                _ => None,
            }
        }
        // Custom resources: at least the metadata must be well-formed.
        _ => body.get("metadata").and_then(type_error::<ObjectMeta>),
    }?;
    Some(format!(
        "{} in version {:?} cannot be handled as a {}: {err}",
        kind.kind, kind.version, kind.kind
    ))
}

/// Removes unknown fields from `body` and returns their paths (`spec.foo`, `items[0].bar`).
pub fn prune_unknown(kind: &ResourceKind, body: &mut Value) -> Vec<String> {
    let paths = match (kind.group, kind.kind) {
        ("", "Namespace") => ignored::<core::Namespace>(body),
        ("", "Node") => ignored::<core::Node>(body),
        ("", "Pod") => ignored::<core::Pod>(body),
        ("", "Service") => ignored::<core::Service>(body),
        ("", "Event") => ignored::<core::Event>(body),
        ("", "Secret") => ignored::<core::Secret>(body),
        ("", "ConfigMap") => ignored::<core::ConfigMap>(body),
        ("", "ServiceAccount") => ignored::<core::ServiceAccount>(body),
        ("", "PersistentVolumeClaim") => ignored::<core::PersistentVolumeClaim>(body),
        ("apps", "Deployment") => ignored::<apps::Deployment>(body),
        ("apps", "ReplicaSet") => ignored::<apps::ReplicaSet>(body),
        ("scheduling.k8s.io", "PriorityClass") => ignored::<scheduling::PriorityClass>(body),
        ("coordination.k8s.io", "Lease") => ignored::<coordination::Lease>(body),
        ("rbac.authorization.k8s.io", "Role") => ignored::<rbac::Role>(body),
        ("rbac.authorization.k8s.io", "RoleBinding") => ignored::<rbac::RoleBinding>(body),
        ("rbac.authorization.k8s.io", "ClusterRole") => ignored::<rbac::ClusterRole>(body),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            ignored::<rbac::ClusterRoleBinding>(body)
        }
        ("discovery.k8s.io", "EndpointSlice") => ignored::<discovery::EndpointSlice>(body),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            ignored::<apiextensions::CustomResourceDefinition>(body)
        }
        _ => custom_resource(body),
    };
    for p in &paths {
        remove(body, p);
    }
    let mut out: Vec<String> = paths.iter().map(|p| render(p)).collect();
    if let Some(v) = kind.crd.filter(|v| v.has_schema()) {
        out.extend(crate::crd::structural::prune(&v.schema, body));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::KINDS;
    use serde_json::json;

    #[test]
    fn finds_nested_unknown_fields() {
        let kind = KINDS.iter().find(|k| k.kind == "Deployment").unwrap();
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "bogus": 1},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagee": "typo"}]}}}});
        let found = prune_unknown(kind, &mut d);
        assert_eq!(
            found,
            ["metadata.bogus", "spec.template.spec.containers[0].imagee"]
        );
        assert!(
            d["spec"]["template"]["spec"]["containers"][0]
                .get("imagee")
                .is_none()
        );
    }
}
