//! Server-side printing: `Accept: application/json;as=Table;g=meta.k8s.io;v=v1`, which is
//! what `kubectl get` asks for, with the columns kubectl shows for the common kinds.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::resources::{ResourceKind, meta_str};

/// kubectl-style age: 45s, 3m20s, 15m, 5h10m, 3d.
fn human_age(created: Option<&str>) -> String {
    let Some(t) = created.and_then(|c| chrono::DateTime::parse_from_rfc3339(c).ok()) else {
        return "<unknown>".into();
    };
    let s = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// `[*].field` printer columns show the first result only (CRD table convertor).
fn first(list: Option<&Value>, field: &str) -> String {
    s(list
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(|x| x.get(field)))
}

/// `.status.conditions[?(@.type=="T")].status`
fn condition_status(o: &Value, ty: &str) -> String {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        })
        .map(|c| s(c.get("status")))
        .unwrap_or_default()
}

fn col(name: &str, ty: &str, format: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": "", "priority": 0})
}

fn s(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// Computes a row's cells after the name column.
type CellFn = Box<dyn Fn(&Value) -> Vec<Value>>;

/// Server-side printing (`Accept: ...;as=Table;g=meta.k8s.io`), with the columns kubectl shows.
pub(crate) fn to_table(
    kind: &ResourceKind,
    objs: &[Value],
    rv: &str,
    query: &HashMap<String, String>,
) -> Value {
    let (mut cols, cells): (Vec<Value>, CellFn) = match kind.kind {
        "Pod" => (
            vec![
                col("Name", "string", "name"),
                col("Ready", "string", ""),
                col("Status", "string", ""),
                col("Restarts", "string", ""),
            ],
            Box::new(|o: &Value| {
                let total = o
                    .pointer("/spec/containers")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                let statuses = o
                    .pointer("/status/containerStatuses")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let ready = statuses
                    .iter()
                    .filter(|c| c["ready"] == json!(true))
                    .count();
                let restarts: i64 = statuses
                    .iter()
                    .filter_map(|c| c["restartCount"].as_i64())
                    .sum();
                let phase = if o.pointer("/metadata/deletionTimestamp").is_some() {
                    "Terminating".into()
                } else {
                    s(o.pointer("/status/phase"))
                };
                vec![
                    json!(format!("{ready}/{total}")),
                    json!(phase),
                    json!(restarts.to_string()),
                ]
            }),
        ),
        "Deployment" => (
            vec![
                col("Name", "string", "name"),
                col("Ready", "string", ""),
                col("Up-to-date", "string", ""),
                col("Available", "string", ""),
            ],
            Box::new(|o: &Value| {
                let want = o
                    .pointer("/spec/replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let n = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
                vec![
                    json!(format!("{}/{want}", n("/status/readyReplicas"))),
                    json!(n("/status/updatedReplicas")),
                    json!(n("/status/availableReplicas")),
                ]
            }),
        ),
        "Service" => (
            vec![
                col("Name", "string", "name"),
                col("Type", "string", ""),
                col("Cluster-IP", "string", ""),
                col("External-IP", "string", ""),
                col("Port(s)", "string", ""),
            ],
            Box::new(|o: &Value| {
                let ports: Vec<String> = o
                    .pointer("/spec/ports")
                    .and_then(Value::as_array)
                    .map(|ps| {
                        ps.iter()
                            .map(|p| format!("{}/{}", s(p.get("port")), s(p.get("protocol"))))
                            .collect()
                    })
                    .unwrap_or_default();
                let ports = if ports.is_empty() {
                    "<none>".to_string()
                } else {
                    ports.join(",")
                };
                vec![
                    json!(s(o.pointer("/spec/type"))),
                    json!(s(o.pointer("/spec/clusterIP"))),
                    json!("<none>"),
                    json!(ports),
                ]
            }),
        ),
        "Namespace" => (
            vec![col("Name", "string", "name"), col("Status", "string", "")],
            Box::new(|o: &Value| vec![json!(s(o.pointer("/status/phase")))]),
        ),
        // Custom resources: the CRDs' additionalPrinterColumns.
        "HTTPRoute" => (
            vec![
                col("Name", "string", "name"),
                col("Hostnames", "string", ""),
            ],
            // A whole-list JSONPath prints as JSON, like the CRD table convertor does.
            Box::new(|o: &Value| {
                vec![json!(
                    o.pointer("/spec/hostnames")
                        .map(Value::to_string)
                        .unwrap_or_default()
                )]
            }),
        ),
        "Gateway" => (
            vec![
                col("Name", "string", "name"),
                col("Class", "string", ""),
                col("Address", "string", ""),
                col("Programmed", "string", ""),
            ],
            Box::new(|o: &Value| {
                vec![
                    json!(s(o.pointer("/spec/gatewayClassName"))),
                    json!(first(o.pointer("/status/addresses"), "value")),
                    json!(condition_status(o, "Programmed")),
                ]
            }),
        ),
        "GatewayClass" => (
            vec![
                col("Name", "string", "name"),
                col("Controller", "string", ""),
                col("Accepted", "string", ""),
            ],
            Box::new(|o: &Value| {
                vec![
                    json!(s(o.pointer("/spec/controllerName"))),
                    json!(condition_status(o, "Accepted")),
                ]
            }),
        ),
        _ => (
            vec![col("Name", "string", "name")],
            Box::new(|_: &Value| Vec::new()),
        ),
    };
    cols.push(col("Age", "string", ""));
    // GatewayClass prints its description after Age, only with -o wide (priority 1).
    let description = kind.kind == "GatewayClass";
    if description {
        let mut d = col("Description", "string", "");
        d["priority"] = json!(1);
        cols.push(d);
    }
    let include = query
        .get("includeObject")
        .map(String::as_str)
        .unwrap_or("Metadata");
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let mut c = vec![json!(meta_str(o, "name").unwrap_or(""))];
            c.extend(cells(o));
            c.push(json!(human_age(meta_str(o, "creationTimestamp"))));
            if description {
                c.push(json!(s(o.pointer("/spec/description"))));
            }
            let mut row = json!({"cells": c});
            match include {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => {
                    row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o.get("metadata").cloned().unwrap_or(json!({}))})
                }
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv}, "columnDefinitions": cols, "rows": rows})
}
