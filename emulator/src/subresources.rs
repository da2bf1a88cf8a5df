//! Subresources other than `status`: `scale` on Deployments, ReplicaSets and custom
//! resources whose CRD declares it, and `binding` on Pods.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::ops;
use crate::patch::PatchType;
use crate::resources::ResourceKind;
use crate::status::{ApiError, ApiResult};
use crate::store::Store;
use crate::wire::{json_response, parse_body, write_options};

/// `.spec.replicas` as a JSON pointer (`/spec/replicas`): the scale paths of a CRD are
/// dotted paths from the object root.
fn pointer(json_path: &str) -> String {
    json_path.replace('.', "/")
}

/// Where a kind keeps its replicas: (spec replicas, status replicas, status selector).
/// Deployments and ReplicaSets: spec.replicas, status.replicas and the selector's labels;
/// custom resources: their CRD's `subresources.scale` paths (the selector there is
/// already a string, at `labelSelectorPath`).
fn replica_paths(kind: &ResourceKind) -> (String, String, Option<String>) {
    match kind.crd.and_then(|v| v.scale.as_ref()) {
        Some(s) => (
            pointer(&s.spec_replicas_path),
            pointer(&s.status_replicas_path),
            s.label_selector_path.as_deref().map(pointer),
        ),
        None => ("/spec/replicas".into(), "/status/replicas".into(), None),
    }
}

/// The autoscaling/v1 Scale view of a Deployment, ReplicaSet or scalable custom resource.
fn to_scale(kind: &ResourceKind, obj: &Value) -> Value {
    let meta = obj.get("metadata").cloned().unwrap_or_default();
    let (spec_path, status_path, selector_path) = replica_paths(kind);
    let selector = match (kind.crd, selector_path) {
        (Some(_), Some(p)) => obj
            .pointer(&p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        (Some(_), None) => String::new(),
        (None, _) => obj
            .pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default(),
    };
    let pick = |k: &str| meta.get(k).cloned().unwrap_or(Value::Null);
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": pick("name"), "namespace": pick("namespace"), "uid": pick("uid"),
            "resourceVersion": pick("resourceVersion"), "creationTimestamp": pick("creationTimestamp"),
        },
        "spec": {"replicas": obj.pointer(&spec_path).cloned().unwrap_or(json!(0))},
        "status": {
            "replicas": obj.pointer(&status_path).cloned().unwrap_or(json!(0)),
            "selector": selector,
        },
    })
}

/// `deployments/{name}/scale` and `replicasets/{name}/scale`: reads and writes spec.replicas.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scale(
    store: &Store,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    method: Method,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> ApiResult<Response> {
    if method == Method::GET {
        let current = ops::get(store, kind, ns, name)?;
        return Ok(json_response(
            StatusCode::OK,
            &to_scale(kind, &current),
            &[],
        ));
    }
    let opts = match method {
        Method::PUT => write_options(query, headers, "UpdateOptions")?,
        Method::PATCH => write_options(query, headers, "PatchOptions")?,
        _ => return Err(ApiError::method_not_allowed()),
    };
    // scaleUpdatedObjectInfo (pkg/registry/apps/deployment/storage/storage.go): a missing
    // object is NotFound on `deployments/scale`; an invalid Scale is Invalid on
    // `Scale.autoscaling`.
    let current = ops::get(store, kind, ns, name).map_err(|e| {
        if e.code == 404 {
            ApiError::not_found_resource(kind.group, &format!("{}/scale", kind.plural), name)
        } else {
            e
        }
    })?;
    let mut scale_obj = to_scale(kind, &current);
    if method == Method::PUT {
        scale_obj = parse_body(body)?;
    } else {
        let ct = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let pt = PatchType::from_content_type(ct)
            .filter(|p| *p != PatchType::Apply)
            .ok_or_else(ApiError::route_unsupported_media_type)?;
        // Scale is a built-in type: strategic merge behaves like a merge patch here.
        crate::patch::apply_patch(
            kind,
            if pt == PatchType::Strategic {
                PatchType::Merge
            } else {
                pt
            },
            &mut scale_obj,
            body,
        )?;
    }
    let replicas = scale_obj
        .pointer("/spec/replicas")
        .cloned()
        .unwrap_or(json!(0));
    // ValidateScale (pkg/apis/autoscaling/validation/validation.go).
    if let Some(r) = replicas.as_i64().filter(|r| *r < 0) {
        return Err(ApiError::invalid_kind(
            "autoscaling",
            "Scale",
            name,
            vec![crate::status::Cause::invalid(
                "spec.replicas",
                &json!(r),
                "must be greater than or equal to 0",
            )],
        ));
    }
    // A merge patch that sets the replicas where the kind keeps them.
    let (spec_path, _, _) = replica_paths(kind);
    let mut patch = replicas;
    for field in spec_path.trim_start_matches('/').rsplit('/') {
        patch = json!({ field: patch });
    }
    if let Some(rv) = scale_obj
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
    {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    let r = ops::patch(
        store,
        kind,
        ns,
        name,
        "",
        PatchType::Merge,
        patch.to_string().as_bytes(),
        &opts,
    )?;
    Ok(json_response(
        StatusCode::OK,
        &to_scale(kind, &r.object),
        &r.warnings,
    ))
}

/// `POST pods/{name}/binding`: sets spec.nodeName once.
pub(crate) fn bind_pod(
    store: &Store,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    body: &Bytes,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let b = parse_body(body)?;
    let node = b
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if node.is_empty() {
        return Err(ApiError::invalid(
            kind,
            name,
            vec![crate::status::Cause::required("target.name")],
        ));
    }
    let opts = write_options(query, headers, "CreateOptions")?;
    ops::bind(store, kind, ns, name, &node, &opts)?;
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        &[],
    ))
}
