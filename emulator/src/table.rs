//! Alternative representations negotiated through `Accept`: server-side printing
//! (`as=Table;g=meta.k8s.io;v=v1`, what `kubectl get` asks for, with the columns the real
//! server prints for these kinds; priority-1 columns appear with `-o wide`) and
//! `as=PartialObjectMetadata[List]` (what kube's metadata API and metadata watchers ask for).

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::resources::{ResourceKind, meta_str};

/// How objects are rendered, from the first `Accept` entry that names a representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repr {
    Object,
    Table,
    Metadata,
}

pub(crate) fn representation(accept: Option<&str>) -> Repr {
    let Some(accept) = accept else {
        return Repr::Object;
    };
    // Media types are listed in order of preference; the first one decides.
    let first = accept.split(',').next().unwrap_or("");
    if first.contains("as=Table") {
        Repr::Table
    } else if first.contains("as=PartialObjectMetadata") {
        Repr::Metadata
    } else {
        Repr::Object
    }
}

/// The `meta.k8s.io/v1` PartialObjectMetadata of an object.
pub(crate) fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
}

/// One column: header, priority, and how a row's cell is computed.
struct Column {
    name: &'static str,
    priority: u8,
    cell: fn(&Value) -> Value,
}

const fn c(name: &'static str, cell: fn(&Value) -> Value) -> Column {
    Column {
        name,
        priority: 0,
        cell,
    }
}

const fn wide(name: &'static str, cell: fn(&Value) -> Value) -> Column {
    Column {
        name,
        priority: 1,
        cell,
    }
}

/// kubectl-style duration: 45s, 3m20s, 15m, 5h10m, 3d.
fn human_duration(since: Option<&str>) -> String {
    let Some(t) = since.and_then(|c| chrono::DateTime::parse_from_rfc3339(c).ok()) else {
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

fn s(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

fn at(o: &Value, pointer: &str) -> String {
    s(o.pointer(pointer))
}

fn int(o: &Value, pointer: &str) -> i64 {
    o.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn or_none(v: String) -> Value {
    json!(if v.is_empty() {
        "<none>".to_string()
    } else {
        v
    })
}

fn name(o: &Value) -> Value {
    json!(meta_str(o, "name").unwrap_or(""))
}

fn age(o: &Value) -> Value {
    json!(human_duration(meta_str(o, "creationTimestamp")))
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

fn label_selector(sel: Option<&Value>) -> String {
    let Some(m) = sel
        .and_then(|s| s.get("matchLabels").or(Some(s)))
        .and_then(Value::as_object)
    else {
        return String::new();
    };
    m.iter()
        .map(|(k, v)| format!("{k}={}", s(Some(v))))
        .collect::<Vec<_>>()
        .join(",")
}

fn containers(o: &Value, field: &str) -> Value {
    let list = o
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| s(c.get(field)))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!(list)
}

fn data_count(o: &Value) -> Value {
    let n = ["data", "binaryData"]
        .iter()
        .filter_map(|f| o.get(*f).and_then(Value::as_object))
        .map(|m| m.len())
        .sum::<usize>();
    json!(n)
}

/// The STATUS column as kubectl's pod printer derives it: the phase (or status.reason),
/// overridden by the last container's waiting or terminated reason, then Terminating.
fn pod_phase(o: &Value) -> Value {
    let phase = at(o, "/status/phase");
    let mut reason = o
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .map(String::from)
        .unwrap_or_else(|| phase.clone());
    let statuses = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut running = false;
    for c in statuses.iter().rev() {
        let st = &c["state"];
        if let Some(r) = st
            .pointer("/waiting/reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        } else if let Some(t) = st.get("terminated") {
            reason = match t["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(r) => r.to_string(),
                None if t["signal"].as_i64().unwrap_or(0) != 0 => format!("Signal:{}", t["signal"]),
                None => format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
            };
        } else if c["ready"] == json!(true) && st.get("running").is_some() {
            running = true;
        }
    }
    if reason == "Completed" && running {
        let ready = o
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
        reason = if ready { "Running" } else { "NotReady" }.into();
    }
    if o.pointer("/metadata/deletionTimestamp").is_some()
        && !matches!(phase.as_str(), "Succeeded" | "Failed")
    {
        reason = "Terminating".into();
    }
    json!(reason)
}

fn pod_ready(o: &Value) -> Value {
    let total = o
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map_or(0, |cs| {
            cs.iter().filter(|c| c["ready"] == json!(true)).count()
        });
    json!(format!("{ready}/{total}"))
}

/// RESTARTS, with the age of the last restart as kubectl prints it (`2 (5s ago)`).
fn pod_restarts(o: &Value) -> Value {
    let cs = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let n: i64 = cs.iter().filter_map(|c| c["restartCount"].as_i64()).sum();
    let last = cs
        .iter()
        .filter_map(|c| {
            c.pointer("/lastState/terminated/finishedAt")
                .and_then(Value::as_str)
        })
        .max();
    match last {
        Some(t) if n > 0 => json!(format!("{n} ({} ago)", human_duration(Some(t)))),
        _ => json!(n.to_string()),
    }
}

fn service_ports(o: &Value) -> Value {
    let ports: Vec<String> = o
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| match p.get("nodePort") {
                    Some(np) => format!(
                        "{}:{}/{}",
                        s(p.get("port")),
                        s(Some(np)),
                        s(p.get("protocol"))
                    ),
                    None => format!("{}/{}", s(p.get("port")), s(p.get("protocol"))),
                })
                .collect()
        })
        .unwrap_or_default();
    or_none(ports.join(","))
}

fn event_object(o: &Value) -> Value {
    json!(format!(
        "{}/{}",
        at(o, "/involvedObject/kind").to_lowercase(),
        at(o, "/involvedObject/name")
    ))
}

fn event_last_seen(o: &Value) -> Value {
    let t = [
        "/series/lastObservedTime",
        "/lastTimestamp",
        "/eventTime",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .map(|p| at(o, p))
    .find(|t| !t.is_empty());
    json!(human_duration(t.as_deref()))
}

/// Node roles from `node-role.kubernetes.io/<role>` labels.
fn node_roles(o: &Value) -> Value {
    let roles: Vec<&str> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|l| {
            l.keys()
                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                .collect()
        })
        .unwrap_or_default();
    or_none(roles.join(","))
}

/// The columns the real server prints for a kind (the CRDs' additionalPrinterColumns for
/// the Gateway API kinds); kinds without a table convertor get Name and Age.
fn columns(kind: &ResourceKind) -> Vec<Column> {
    match (kind.group, kind.kind) {
        ("", "Pod") => pod_columns(),
        ("apps", "Deployment") => deployment_columns(),
        ("apps", "ReplicaSet") => replica_set_columns(),
        ("", "Service") => service_columns(),
        ("", "Namespace") => namespace_columns(),
        ("", "Node") => node_columns(),
        ("", "Event") => event_columns(),
        ("", "ConfigMap") => config_map_columns(),
        ("", "Secret") => secret_columns(),
        ("", "PersistentVolumeClaim") => persistent_volume_claim_columns(),
        ("discovery.k8s.io", "EndpointSlice") => endpoint_slice_columns(),
        ("coordination.k8s.io", "Lease") => lease_columns(),
        ("scheduling.k8s.io", "PriorityClass") => priority_class_columns(),
        // Roles have no printer: the default table convertor (apiserver
        // `registry/rest/table.go`) prints Name and "Created At".
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => vec![
            c("Name", name),
            c("Created At", |o| {
                json!(at(o, "/metadata/creationTimestamp"))
            }),
        ],
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            role_binding_columns()
        }
        // Custom resources without a CRD (the built-in fallback definitions); installed
        // CRDs print their additionalPrinterColumns (crd_table).
        _ => vec![c("Name", name), c("Age", age)],
    }
}

fn pod_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("Ready", pod_ready),
        c("Status", pod_phase),
        c("Restarts", pod_restarts),
        c("Age", age),
        wide("IP", |o| or_none(at(o, "/status/podIP"))),
        wide("Node", |o| or_none(at(o, "/spec/nodeName"))),
    ]
}

fn deployment_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("Ready", |o| {
            json!(format!(
                "{}/{}",
                int(o, "/status/readyReplicas"),
                int(o, "/spec/replicas")
            ))
        }),
        c("Up-to-date", |o| json!(int(o, "/status/updatedReplicas"))),
        c("Available", |o| json!(int(o, "/status/availableReplicas"))),
        c("Age", age),
        wide("Containers", |o| containers(o, "name")),
        wide("Images", |o| containers(o, "image")),
        wide("Selector", |o| {
            json!(label_selector(o.pointer("/spec/selector")))
        }),
    ]
}

fn replica_set_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("Desired", |o| json!(int(o, "/spec/replicas"))),
        c("Current", |o| json!(int(o, "/status/replicas"))),
        c("Ready", |o| json!(int(o, "/status/readyReplicas"))),
        c("Age", age),
        wide("Containers", |o| containers(o, "name")),
        wide("Images", |o| containers(o, "image")),
        wide("Selector", |o| {
            json!(label_selector(o.pointer("/spec/selector")))
        }),
    ]
}

fn service_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("Type", |o| json!(at(o, "/spec/type"))),
        c("Cluster-IP", |o| or_none(at(o, "/spec/clusterIP"))),
        c("External-IP", |o| {
            or_none(first(o.pointer("/status/loadBalancer/ingress"), "ip"))
        }),
        c("Port(s)", service_ports),
        c("Age", age),
        wide("Selector", |o| {
            or_none(label_selector(o.pointer("/spec/selector")))
        }),
    ]
}

fn namespace_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("Status", |o| json!(at(o, "/status/phase"))),
        c("Age", age),
    ]
}

fn node_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("Status", |o| {
            json!(match condition_status(o, "Ready").as_str() {
                "True" => "Ready",
                _ => "NotReady",
            })
        }),
        c("Roles", node_roles),
        c("Age", age),
        c("Version", |o| {
            json!(at(o, "/status/nodeInfo/kubeletVersion"))
        }),
    ]
}

fn event_columns() -> Vec<Column> {
    vec![
        c("Last Seen", event_last_seen),
        c("Type", |o| json!(at(o, "/type"))),
        c("Reason", |o| json!(at(o, "/reason"))),
        c("Object", event_object),
        wide("Subobject", |o| json!(at(o, "/involvedObject/fieldPath"))),
        wide("Source", |o| json!(at(o, "/source/component"))),
        c("Message", |o| json!(at(o, "/message"))),
        wide("First Seen", |o| {
            json!(human_duration(Some(&at(o, "/firstTimestamp"))))
        }),
        wide("Count", |o| json!(int(o, "/count"))),
        wide("Name", name),
    ]
}

fn config_map_columns() -> Vec<Column> {
    vec![c("Name", name), c("Data", data_count), c("Age", age)]
}

fn secret_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("Type", |o| json!(at(o, "/type"))),
        c("Data", data_count),
        c("Age", age),
    ]
}

fn persistent_volume_claim_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("Status", |o| json!(at(o, "/status/phase"))),
        c("Volume", |o| json!(at(o, "/spec/volumeName"))),
        c("Capacity", |o| json!(at(o, "/status/capacity/storage"))),
        c("Access Modes", |_| json!("")),
        c("StorageClass", |o| or_none(at(o, "/spec/storageClassName"))),
        c("VolumeAttributesClass", |o| {
            or_none(at(o, "/spec/volumeAttributesClassName"))
        }),
        c("Age", age),
    ]
}

fn endpoint_slice_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("AddressType", |o| json!(at(o, "/addressType"))),
        c("Ports", |o| {
            let ports: Vec<String> = o
                .get("ports")
                .and_then(Value::as_array)
                .map(|ps| ps.iter().map(|p| s(p.get("port"))).collect())
                .unwrap_or_default();
            json!(if ports.is_empty() {
                "<unset>".to_string()
            } else {
                ports.join(",")
            })
        }),
        c("Endpoints", |o| {
            let addrs: Vec<String> = o
                .get("endpoints")
                .and_then(Value::as_array)
                .map(|es| {
                    es.iter()
                        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
                        .map(|a| s(Some(&a)))
                        .collect()
                })
                .unwrap_or_default();
            json!(if addrs.is_empty() {
                "<unset>".to_string()
            } else {
                addrs.join(",")
            })
        }),
        c("Age", age),
    ]
}

fn lease_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("Holder", |o| json!(at(o, "/spec/holderIdentity"))),
        c("Age", age),
    ]
}

fn priority_class_columns() -> Vec<Column> {
    vec![
        c("Name", name),
        c("Value", |o| json!(int(o, "/value"))),
        c("Global-Default", |o| {
            json!(o.get("globalDefault") == Some(&json!(true)))
        }),
        c("Age", age),
        c("PreemptionPolicy", |o| json!(at(o, "/preemptionPolicy"))),
    ]
}

/// pkg/printers/internalversion/printers.go `printRoleBinding` /
/// `printClusterRoleBinding`: `Kind/name` of the roleRef, and with -o wide the subjects as
/// `rbac.SubjectsStrings` lists them, in order (ServiceAccounts as `namespace/name`).
fn role_binding_columns() -> Vec<Column> {
    fn subjects(o: &Value, kind: &str) -> Value {
        let names: Vec<String> = o
            .get("subjects")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|s| s.get("kind").and_then(Value::as_str) == Some(kind))
            .map(|s| {
                let name = s.get("name").and_then(Value::as_str).unwrap_or("");
                if kind == "ServiceAccount" {
                    let ns = s.get("namespace").and_then(Value::as_str).unwrap_or("");
                    format!("{ns}/{name}")
                } else {
                    name.to_string()
                }
            })
            .collect();
        json!(names.join(", "))
    }
    vec![
        c("Name", name),
        c("Role", |o| {
            json!(format!(
                "{}/{}",
                at(o, "/roleRef/kind"),
                at(o, "/roleRef/name")
            ))
        }),
        c("Age", age),
        wide("Users", |o| subjects(o, "User")),
        wide("Groups", |o| subjects(o, "Group")),
        wide("ServiceAccounts", |o| subjects(o, "ServiceAccount")),
    ]
}

/// One match of a printer column's JSONPath (the simple paths CRDs use: `.a.b`, `[n]`,
/// `[*]` and `[?(@.field=="value")]`); the first result, as the CRD table convertor takes.
fn json_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current: Vec<&Value> = vec![v];
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            current = current.into_iter().filter_map(|c| c.get(field)).collect();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let sel = &r[..end];
            rest = &r[end + 1..];
            current = current
                .into_iter()
                .filter_map(Value::as_array)
                .flat_map(|items| select(items, sel))
                .collect();
        } else {
            return None;
        }
    }
    current.into_iter().next()
}

fn select<'a>(items: &'a [Value], sel: &str) -> Vec<&'a Value> {
    if sel == "*" {
        return items.iter().collect();
    }
    if let Ok(i) = sel.parse::<usize>() {
        return items.get(i).into_iter().collect();
    }
    // ?(@.field=="value")
    let filter = sel
        .strip_prefix("?(@.")
        .and_then(|f| f.strip_suffix(')'))
        .and_then(|f| f.split_once("=="));
    match filter {
        Some((field, want)) => {
            let want = want.trim().trim_matches(['"', '\'']);
            items
                .iter()
                .filter(|i| i.get(field.trim()).and_then(Value::as_str) == Some(want))
                .collect()
        }
        None => Vec::new(),
    }
}

/// A cell as apiextensions-apiserver's table convertor
/// (`pkg/registry/customresource/tableconvertor/tableconvertor.go`) prints it: strings as
/// printed by JSONPath (lists and maps as JSON), typed columns as JSON values, dates as
/// ages; nothing found is null.
fn crd_cell(column: &crate::crd::Column, obj: &Value) -> Value {
    let Some(v) = json_path(obj, &column.json_path) else {
        return Value::Null;
    };
    match (column.type_.as_str(), v) {
        ("string", Value::String(s)) => json!(s),
        ("string", other) => json!(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => json!(n.as_f64()),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(t)) => json!(human_duration(Some(t))),
        _ => Value::Null,
    }
}

/// A custom resource's table: Name, then its version's printer columns (or Age when it
/// declares none).
fn crd_table(version: &crate::crd::Version) -> (Vec<Value>, Vec<crate::crd::Column>) {
    let mut columns = version.columns.clone();
    if columns.is_empty() {
        columns.push(crate::crd::Column {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        });
    }
    let mut definitions = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}),
    ];
    definitions.extend(columns.iter().map(|c| {
        json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})
    }));
    (definitions, columns)
}

/// Renders objects as a `meta.k8s.io/v1` Table (`includeObject` = None, Metadata or Object).
pub(crate) fn to_table(
    kind: &ResourceKind,
    objs: &[Value],
    rv: &str,
    query: &HashMap<String, String>,
) -> Value {
    if let Some(version) = kind.crd {
        let (definitions, columns) = crd_table(version);
        let cells = |o: &Value| -> Vec<Value> {
            std::iter::once(json!(at(o, "/metadata/name")))
                .chain(columns.iter().map(|c| crd_cell(c, o)))
                .collect()
        };
        return table(definitions, objs, rv, query, cells);
    }
    let cols = columns(kind);
    let definitions: Vec<Value> = cols
        .iter()
        .map(|col| {
            let format = if col.name == "Name" { "name" } else { "" };
            // The default table convertor types its "Created At" column as a date.
            let ty = if col.name == "Created At" { "date" } else { "string" };
            json!({"name": col.name, "type": ty, "format": format, "description": "", "priority": col.priority})
        })
        .collect();
    table(definitions, objs, rv, query, |o| {
        cols.iter().map(|col| (col.cell)(o)).collect()
    })
}

fn table(
    definitions: Vec<Value>,
    objs: &[Value],
    rv: &str,
    query: &HashMap<String, String>,
    cells: impl Fn(&Value) -> Vec<Value>,
) -> Value {
    let include = query
        .get("includeObject")
        .map(String::as_str)
        .unwrap_or("Metadata");
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(o)});
            match include {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => row["object"] = partial(o),
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
        "columnDefinitions": definitions, "rows": rows})
}
