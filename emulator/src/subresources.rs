//! Subresources other than `status`: `scale` on Deployments and ReplicaSets, and
//! `binding` on Pods.

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

/// The autoscaling/v1 Scale view of a Deployment or ReplicaSet.
fn to_scale(obj: &Value) -> Value {
    let meta = obj.get("metadata").cloned().unwrap_or_default();
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let pick = |k: &str| meta.get(k).cloned().unwrap_or(Value::Null);
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": pick("name"), "namespace": pick("namespace"), "uid": pick("uid"),
            "resourceVersion": pick("resourceVersion"), "creationTimestamp": pick("creationTimestamp"),
        },
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {
            "replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
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
    let current = ops::get(store, kind, ns, name)?;
    let mut scale_obj = to_scale(&current);
    match method {
        Method::GET => return Ok(json_response(StatusCode::OK, &scale_obj, &[])),
        Method::PUT => scale_obj = parse_body(body)?,
        Method::PATCH => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let pt = PatchType::from_content_type(ct)
                .filter(|p| *p != PatchType::Apply)
                .ok_or_else(|| ApiError::unsupported_media_type(ct))?;
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
        _ => return Err(ApiError::method_not_allowed()),
    }
    let replicas = scale_obj
        .pointer("/spec/replicas")
        .cloned()
        .unwrap_or(json!(0));
    let mut patch = json!({"spec": {"replicas": replicas}});
    if let Some(rv) = scale_obj
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
    {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    let opts = write_options(query, headers)?;
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
        &to_scale(&r.object),
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
    let opts = write_options(query, headers)?;
    ops::bind(store, kind, ns, name, &node, &opts)?;
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        &[],
    ))
}
