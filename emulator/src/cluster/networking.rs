//! Networking objects: EndpointSlices for Services with selectors (the EndpointSlice
//! controller), and a Gateway controller for the emulator's GatewayClass: GatewayClass
//! and Gateway status (addresses, listeners, attached routes), HTTPRoute
//! `status.parents` with Accepted and ResolvedRefs per parentRef, and InferencePool
//! `status.parents` for the Gateways whose routes send traffic to the pool.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::{
    GATEWAY_CLASS, GATEWAY_CONTROLLER, Sim, deleting, is_true, manager, write_object, write_status,
};
use crate::ops;
use crate::resources::meta_str;
use crate::selectors::LabelSelector;
use crate::store::Store;

const GW_GROUP: &str = "gateway.networking.k8s.io";
const INFERENCE_GROUP: &str = "inference.networking.k8s.io";
const SLICE_MANAGER: &str = "endpointslice-controller.k8s.io";

/// Pre-creates the GatewayClass and the configured Gateway (listener `http` on the data
/// plane's port, routes allowed from all namespaces).
pub(super) fn create_gateway(sim: &Sim) {
    let (Some(gc), Some(gw)) = (sim.k.gatewayclass, sim.k.gateway) else {
        if sim.config.gateway.is_some() {
            tracing::warn!("the Gateway API group is not served: no Gateway is pre-created");
        }
        return;
    };
    let opts = manager("modelplane-emulator");
    let class = json!({"metadata": {"name": GATEWAY_CLASS}, "spec": {"controllerName": GATEWAY_CONTROLLER}});
    let _ = ops::create(&sim.store, gc, "", class, &opts);
    let Some((ns, name)) = &sim.config.gateway else {
        return;
    };
    if sim.store.get(sim.k.namespace, "", ns).is_none() {
        let _ = ops::create(
            &sim.store,
            sim.k.namespace,
            "",
            json!({"metadata": {"name": ns}}),
            &opts,
        );
    }
    let gateway = json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "gatewayClassName": GATEWAY_CLASS,
            "listeners": [{
                "name": "http", "protocol": "HTTP", "port": sim.gateway_addr.port(),
                "allowedRoutes": {"namespaces": {"from": "All"}},
            }],
        },
    });
    let _ = ops::create(&sim.store, gw, ns, gateway, &opts);
}

pub(super) fn reconcile(sim: &mut Sim) {
    endpoint_slices(sim);
    gateways(sim);
}

/// Resolves a Service targetPort against a pod's container ports.
pub(super) fn target_port(pod: &Value, port: &Value) -> Option<i64> {
    let target = port.get("targetPort").or_else(|| port.get("port"))?;
    if let Some(n) = target.as_i64() {
        return Some(n);
    }
    let name = target.as_str()?;
    if let Ok(n) = name.parse() {
        return Some(n);
    }
    // `FindPort` (kubernetes pkg/api/v1/pod/util.go): the containers' ports, then those of
    // sidecars (init containers with `restartPolicy: Always`).
    let containers = pod.pointer("/spec/containers")?.as_array()?.iter();
    let sidecars = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always");
    containers
        .chain(sidecars)
        .flat_map(|c| {
            c.get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))?
        .get("containerPort")?
        .as_i64()
}

/// Pods selected by a Service (label selector over one namespace).
pub(crate) fn selected_pods<'a>(
    pods: impl IntoIterator<Item = &'a Value>,
    svc: &Value,
) -> Vec<&'a Value> {
    let ns = meta_str(svc, "namespace");
    let Some(sel) = svc
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .filter(|s| !s.is_empty())
    else {
        return Vec::new();
    };
    let selector = LabelSelector::from_object(&json!({"matchLabels": sel}));
    pods.into_iter()
        .filter(|p| meta_str(p, "namespace") == ns && selector.matches(p))
        .collect()
}

fn endpoint_slices(sim: &Sim) {
    let Some(kind) = sim.k.endpointslice else {
        return;
    };
    // A full resync reads every pod and slice; otherwise only the dirty Services are
    // synced, their pods found through the label index kept from the change feed.
    let all = sim.resync;
    let pods = if all { sim.list(sim.k.pod) } else { Vec::new() };
    let mut pods_by_ns: HashMap<&str, Vec<&Value>> = HashMap::new();
    for p in &pods {
        pods_by_ns
            .entry(meta_str(p, "namespace").unwrap_or(""))
            .or_default()
            .push(p);
    }
    // Pods by (namespace, label key, label value), for the Services' selectors.
    let mut labels_index: HashMap<(&str, &str, &str), Vec<&Value>> = HashMap::new();
    for p in &pods {
        let ns = meta_str(p, "namespace").unwrap_or("");
        for (k, v) in p
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if let Some(v) = v.as_str() {
                labels_index.entry((ns, k, v)).or_default().push(p);
            }
        }
    }
    let slices = if all { sim.list(kind) } else { Vec::new() };
    let slice_of: HashMap<(&str, &str), &Value> = slices
        .iter()
        .filter_map(|s| {
            let svc = s
                .pointer("/metadata/labels/kubernetes.io~1service-name")?
                .as_str()?;
            Some(((meta_str(s, "namespace").unwrap_or(""), svc), &**s))
        })
        .collect();
    for svc in sim.candidates(sim.k.service, &sim.dirty.services, all) {
        if deleting(&svc) || svc.pointer("/spec/selector").is_none() {
            continue;
        }
        let ns = meta_str(&svc, "namespace").unwrap_or("");
        let name = meta_str(&svc, "name").unwrap_or("");
        let sel = svc
            .pointer("/spec/selector")
            .and_then(Value::as_object)
            .filter(|s| !s.is_empty());
        let fetched: Vec<std::sync::Arc<Value>>;
        let candidates: Vec<&Value> = if all {
            let in_ns = pods_by_ns.get(ns).map(Vec::as_slice).unwrap_or(&[]);
            // Only the pods carrying the selector's rarest label pair can match.
            sel.and_then(|sel| {
                sel.iter()
                    .map(|(k, v)| {
                        labels_index
                            .get(&(ns, k.as_str(), v.as_str().unwrap_or("")))
                            .map(Vec::as_slice)
                            .unwrap_or(&[])
                    })
                    .min_by_key(|c| c.len())
            })
            .unwrap_or(in_ns)
            .to_vec()
        } else {
            // The pods of the selector's rarest pair (the others are filtered below):
            // collecting every pair's pods first would read all pods of a shared label.
            let names = sel.and_then(|sel| {
                sel.iter()
                    .map(|(k, v)| sim.pod_labels.get(ns, k, v.as_str().unwrap_or("")))
                    .min_by_key(|s| s.map_or(0, |s| s.len()))
                    .map(|s| s.into_iter().flatten().collect::<Vec<_>>())
            });
            let st = sim.store.lock();
            fetched = names
                .unwrap_or_default()
                .into_iter()
                .filter_map(|n| st.get(sim.k.pod, ns, n))
                .collect();
            fetched.iter().map(|p| &**p).collect()
        };
        let existing_slice: Option<std::sync::Arc<Value>> = if all {
            None
        } else {
            // The Service's slice: among its dependents, else any slice labelled for it.
            let st = sim.store.lock();
            let labelled = |s: &Value| {
                s.pointer("/metadata/labels/kubernetes.io~1service-name")
                    .and_then(Value::as_str)
                    == Some(name)
            };
            st.dependents(meta_str(&svc, "uid").unwrap_or(""))
                .into_iter()
                .filter(|(k, s)| std::ptr::eq(*k, kind) && labelled(s))
                .map(|(_, s)| s)
                .next_back()
                .or_else(|| {
                    // Else the last by name labelled for it, found through the label index
                    // (listing the namespace's slices made each first sync cost them all).
                    sim.slice_labels
                        .get(ns, "kubernetes.io/service-name", name)
                        .into_iter()
                        .flatten()
                        .filter_map(|n| st.get(kind, ns, n))
                        .rfind(|s| labelled(s))
                })
        };
        let mut selected: Vec<&Value> = selected_pods(candidates.iter().copied(), &svc)
            .into_iter()
            .filter(|p| p.pointer("/status/podIP").is_some())
            .collect();
        selected.sort_by(|a, b| meta_str(a, "name").cmp(&meta_str(b, "name")));
        let endpoints: Vec<Value> = selected
            .iter()
            .map(|p| {
                // k8s.io/endpointslice utils.go `podToEndpoint`: a Service with
                // `publishNotReadyAddresses` publishes its pods ready and serving whatever
                // their Ready condition (a headless Service's DNS records use this), and a
                // pod whose `subdomain` is the Service's name gets its `hostname`.
                let publish = svc.pointer("/spec/publishNotReadyAddresses") == Some(&json!(true));
                let serving = publish || is_true(p, "Ready");
                let ready = publish || (serving && !deleting(p));
                let mut ep = json!({
                    "addresses": [p["status"]["podIP"]],
                    "conditions": {"ready": ready, "serving": serving, "terminating": deleting(p)},
                    "nodeName": p["spec"]["nodeName"],
                    "targetRef": {"kind": "Pod", "name": meta_str(p, "name"), "namespace": ns, "uid": meta_str(p, "uid")},
                });
                if let Some(h) = p.pointer("/spec/hostname").and_then(Value::as_str)
                    && !h.is_empty()
                    && p.pointer("/spec/subdomain").and_then(Value::as_str) == Some(name)
                {
                    ep["hostname"] = json!(h);
                }
                ep
            })
            .collect();
        let ports: Vec<Value> = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|sp| {
                let port = selected.first().and_then(|p| target_port(p, sp));
                let mut p = json!({"name": sp.get("name").and_then(Value::as_str).unwrap_or(""),
                                   "protocol": sp.get("protocol").cloned().unwrap_or(json!("TCP"))});
                if let Some(n) = port {
                    p["port"] = json!(n);
                }
                if let Some(a) = sp.get("appProtocol") {
                    p["appProtocol"] = a.clone();
                }
                p
            })
            .collect();
        let existing = if all {
            slice_of.get(&(ns, name)).copied()
        } else {
            existing_slice.as_deref()
        };
        let labels = slice_labels(&svc, name);
        match existing {
            None => {
                let mut slice = json!({
                    "metadata": {
                        "generateName": format!("{name}-"), "namespace": ns,
                        "labels": labels,
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name,
                                             "uid": meta_str(&svc, "uid"), "controller": true, "blockOwnerDeletion": true}],
                    },
                    "addressType": "IPv4",
                    "ports": ports,
                });
                if !endpoints.is_empty() {
                    slice["endpoints"] = json!(endpoints);
                }
                let _ = ops::create(
                    &sim.store,
                    kind,
                    ns,
                    slice,
                    &manager("kube-controller-manager"),
                );
            }
            Some(s) => {
                let mut new = s.clone();
                if endpoints.is_empty() {
                    new.as_object_mut().map(|o| o.remove("endpoints"));
                } else {
                    new["endpoints"] = json!(endpoints);
                }
                new["ports"] = json!(ports);
                new["metadata"]["labels"] = labels;
                if new != *s {
                    write_object(&sim.store, kind, new, "kube-controller-manager");
                }
            }
        }
    }
}

/// A slice's labels: its Service's, but for the reserved ones the controller sets itself
/// (`setEndpointSliceLabels`, kubernetes pkg/controller/endpointslice and
/// k8s.io/endpointslice `utils.go`: `kubernetes.io/service-name`,
/// `endpointslice.kubernetes.io/managed-by`, `service.kubernetes.io/headless`), so whoever
/// labels a Service finds its slices by the same labels.
fn slice_labels(svc: &Value, name: &str) -> Value {
    const RESERVED: [&str; 3] = [
        "kubernetes.io/service-name",
        "endpointslice.kubernetes.io/managed-by",
        "service.kubernetes.io/headless",
    ];
    let mut labels: serde_json::Map<String, Value> = svc
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| !RESERVED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert("kubernetes.io/service-name".into(), json!(name));
    // `setEndpointSliceLabels`: a headless Service's slices carry
    // `service.kubernetes.io/headless: ""`.
    if svc.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None") {
        labels.insert("service.kubernetes.io/headless".into(), json!(""));
    }
    labels.insert(
        "endpointslice.kubernetes.io/managed-by".into(),
        json!(SLICE_MANAGER),
    );
    Value::Object(labels)
}

/// A condition that keeps its lastTransitionTime while its status stays the same.
fn condition(
    old: Option<&Value>,
    ty: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: i64,
) -> Value {
    let status = if ok { "True" } else { "False" };
    let prev = old
        .and_then(|o| o.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty));
    let time = prev
        .filter(|c| c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(String::from)
        .unwrap_or_else(ops::now);
    json!({"type": ty, "status": status, "reason": reason, "message": message,
           "observedGeneration": generation, "lastTransitionTime": time})
}

fn generation(o: &Value) -> i64 {
    o.pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            host.ends_with(&format!(".{suffix}")) || host.strip_prefix("*.") == Some(suffix)
        }
        None => {
            pattern == host
                || host
                    .strip_prefix("*.")
                    .is_some_and(|s| pattern.ends_with(&format!(".{s}")))
        }
    }
}

/// The outcome of attaching one parentRef of a route.
pub(super) struct Attachment {
    pub accepted: (bool, &'static str, String),
    /// Names of the listeners the route attached to.
    pub listeners: Vec<String>,
    /// Their hostnames, in the same order (None: the listener has none and takes any host).
    pub hostnames: Vec<Option<String>>,
}

/// Attaches one parentRef of a route to the Gateway it names: the listeners the parentRef
/// selects (sectionName, port), that allow the route (namespace, kind, protocol) and whose
/// hostname intersects the route's. The data plane uses it too, for the listener hostnames
/// a request must match.
pub(super) fn attach(store: &Store, route: &Value, parent: &Value, gw: &Value) -> Attachment {
    let route_ns = meta_str(route, "namespace").unwrap_or("");
    let gw_ns = meta_str(gw, "namespace").unwrap_or("");
    let section = parent.get("sectionName").and_then(Value::as_str);
    let port = parent.get("port").and_then(Value::as_i64);
    let listeners: Vec<&Value> = gw
        .pointer("/spec/listeners")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|l| section.is_none_or(|s| l["name"] == s) && port.is_none_or(|p| l["port"] == p))
        .collect();
    if listeners.is_empty() {
        return Attachment {
            accepted: (
                false,
                "NoMatchingParent",
                "No listeners match this parent ref".into(),
            ),
            listeners: Vec::new(),
            hostnames: Vec::new(),
        };
    }
    let ns_labels = store
        .kinds()
        .by_resource("", "v1", "namespaces")
        .and_then(|k| store.get(k, "", route_ns))
        .and_then(|n| n.pointer("/metadata/labels").cloned());
    let allowed: Vec<&Value> = listeners
        .iter()
        .copied()
        .filter(|l| {
            let from = l
                .pointer("/allowedRoutes/namespaces/from")
                .and_then(Value::as_str)
                .unwrap_or("Same");
            let ns_ok = match from {
                "All" => true,
                "Selector" => l
                    .pointer("/allowedRoutes/namespaces/selector")
                    .is_some_and(|s| {
                        LabelSelector::from_object(s).matches_labels(ns_labels.as_ref())
                    }),
                _ => route_ns == gw_ns,
            };
            let kinds_ok = l
                .pointer("/allowedRoutes/kinds")
                .and_then(Value::as_array)
                .filter(|k| !k.is_empty())
                .is_none_or(|ks| ks.iter().any(|k| k["kind"] == "HTTPRoute"));
            let proto_ok = matches!(l["protocol"].as_str(), Some("HTTP" | "HTTPS"));
            ns_ok && kinds_ok && proto_ok
        })
        .collect();
    if allowed.is_empty() {
        return Attachment {
            accepted: (
                false,
                "NotAllowedByListeners",
                "No listeners included by this parent ref allowed this attachment.".into(),
            ),
            listeners: Vec::new(),
            hostnames: Vec::new(),
        };
    }
    let hostnames: Vec<&str> = route
        .pointer("/spec/hostnames")
        .and_then(Value::as_array)
        .map(|h| h.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let matching: Vec<&Value> = allowed
        .iter()
        .copied()
        .filter(|l| match l.get("hostname").and_then(Value::as_str) {
            None => true,
            Some(lh) => {
                hostnames.is_empty()
                    || hostnames
                        .iter()
                        .any(|h| host_matches(lh, h) || host_matches(h, lh))
            }
        })
        .collect();
    if matching.is_empty() {
        return Attachment {
            accepted: (
                false,
                "NoMatchingListenerHostname",
                "No hostnames match parent listener hostnames".into(),
            ),
            listeners: Vec::new(),
            hostnames: Vec::new(),
        };
    }
    Attachment {
        accepted: (true, "Accepted", "Route is accepted".into()),
        listeners: matching
            .iter()
            .map(|l| l["name"].as_str().unwrap_or("").to_string())
            .collect(),
        hostnames: matching
            .iter()
            .map(|l| l.get("hostname").and_then(Value::as_str).map(String::from))
            .collect(),
    }
}

/// ResolvedRefs for a route's backendRefs.
fn resolved_refs(sim: &Sim, route: &Value) -> (bool, &'static str, String) {
    let route_ns = meta_str(route, "namespace").unwrap_or("");
    for rule in route
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for b in rule
            .get("backendRefs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let group = b.get("group").and_then(Value::as_str).unwrap_or("");
            let kind = b.get("kind").and_then(Value::as_str).unwrap_or("Service");
            let name = b.get("name").and_then(Value::as_str).unwrap_or("");
            let ns = b
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or(route_ns);
            let pool = group == INFERENCE_GROUP && kind == "InferencePool";
            let target = match (pool, sim.k.inferencepool) {
                (false, _) if group.is_empty() && kind == "Service" => sim.k.service,
                (true, Some(k)) => k,
                _ => {
                    return (
                        false,
                        "InvalidKind",
                        format!("Unsupported backend kind {group}/{kind}"),
                    );
                }
            };
            if ns != route_ns {
                return (
                    false,
                    "RefNotPermitted",
                    format!(
                        "Backend ref to {kind} {ns}/{name} not permitted by any ReferenceGrant"
                    ),
                );
            }
            // A missing InferencePool is BackendNotFound too (the inference extension's
            // conformance test conformance/tests/httproute_invalid_inferencepool_ref.go).
            if sim.store.get(target, ns, name).is_none() {
                return (
                    false,
                    "BackendNotFound",
                    format!("{kind} {ns}/{name} not found"),
                );
            }
        }
    }
    (
        true,
        "ResolvedRefs",
        "Resolved all the Object references for the Route".into(),
    )
}

/// InferencePools (namespace, name) by the Gateways (namespace, name) whose routes send
/// them traffic, with whether one of those routes is accepted by the Gateway.
type PoolParents = BTreeMap<(String, String), BTreeMap<(String, String), bool>>;

/// The InferencePools a route's backendRefs name (in its own namespace: other namespaces
/// would need a ReferenceGrant, and the route's ResolvedRefs says RefNotPermitted).
fn pool_refs(route: &Value) -> Vec<(String, String)> {
    let route_ns = meta_str(route, "namespace").unwrap_or("");
    route
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|r| {
            r.get("backendRefs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .filter(|b| b["group"] == INFERENCE_GROUP && b["kind"] == "InferencePool")
        .filter(|b| b.get("namespace").is_none_or(|n| n == route_ns))
        .filter_map(|b| Some((route_ns.to_string(), b["name"].as_str()?.to_string())))
        .collect()
}

/// ResolvedRefs of an InferencePool: its endpointPickerRef must name an existing Service
/// (InferencePoolReasonInvalidExtensionRef in gateway-api-inference-extension
/// api/v1/inferencepool_types.go: "an unsupported kind or API group, or a reference to a
/// resource that cannot be found"). Without one, the emulator's own picker is used.
fn epp_resolved(sim: &Sim, pool: &Value) -> (bool, &'static str, String) {
    let Some(epp) = pool.pointer("/spec/endpointPickerRef") else {
        return (
            true,
            "ResolvedRefs",
            "No endpointPickerRef: the emulator's simulated endpoint picker sends each request to the ready pod with the fewest requests in flight".into(),
        );
    };
    let group = epp.get("group").and_then(Value::as_str).unwrap_or("");
    let kind = epp.get("kind").and_then(Value::as_str).unwrap_or("Service");
    let name = epp.get("name").and_then(Value::as_str).unwrap_or("");
    let ns = meta_str(pool, "namespace").unwrap_or("");
    if !group.is_empty() || kind != "Service" {
        return (
            false,
            "InvalidExtensionRef",
            format!("Unsupported endpointPickerRef kind {group}/{kind}"),
        );
    }
    if sim.store.get(sim.k.service, ns, name).is_none() {
        return (
            false,
            "InvalidExtensionRef",
            format!("The endpoint picker Service {ns}/{name} was not found"),
        );
    }
    (
        true,
        "ResolvedRefs",
        "Resolved the endpointPickerRef".into(),
    )
}

/// `status.parents` of the InferencePools: one entry per Gateway of ours that an
/// HTTPRoute sends the pool traffic through, and none once no route does (the
/// InferencePoolStatus.Parents contract in api/v1/inferencepool_types.go). Accepted is
/// True with reason "Accepted" (InferencePoolReasonAccepted, which the inference
/// extension's conformance helper InferencePoolMustBeAcceptedByParent expects), or False
/// with "HTTPRouteNotAccepted" when no such route is accepted by the Gateway.
fn inference_pools(sim: &Sim, refs: &PoolParents) {
    let Some(pk) = sim.k.inferencepool else {
        return;
    };
    for pool in sim.list(pk) {
        let ns = meta_str(&pool, "namespace").unwrap_or("").to_string();
        let name = meta_str(&pool, "name").unwrap_or("").to_string();
        let old_parents: Vec<Value> = pool
            .pointer("/status/parents")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let gateways = refs.get(&(ns, name));
        if gateways.is_none()
            && old_parents
                .iter()
                .all(|p| p["controllerName"] != GATEWAY_CONTROLLER)
        {
            continue;
        }
        let g = generation(&pool);
        let resolved = epp_resolved(sim, &pool);
        let mut parents: Vec<Value> = old_parents
            .iter()
            .filter(|p| p["controllerName"] != GATEWAY_CONTROLLER)
            .cloned()
            .collect();
        for ((gw_ns, gw_name), accepted) in gateways.into_iter().flatten() {
            let parent_ref =
                json!({"group": GW_GROUP, "kind": "Gateway", "namespace": gw_ns, "name": gw_name});
            let old = old_parents.iter().find(|p| {
                p["controllerName"] == GATEWAY_CONTROLLER && p["parentRef"] == parent_ref
            });
            let (reason, msg) = if *accepted {
                (
                    "Accepted",
                    format!("Accepted as a backend by Gateway {gw_ns}/{gw_name}"),
                )
            } else {
                (
                    "HTTPRouteNotAccepted",
                    format!(
                        "No HTTPRoute that references this InferencePool is accepted by Gateway {gw_ns}/{gw_name}"
                    ),
                )
            };
            parents.push(json!({
                "parentRef": parent_ref,
                "controllerName": GATEWAY_CONTROLLER,
                "conditions": [
                    condition(old, "Accepted", *accepted, reason, &msg, g),
                    condition(old, "ResolvedRefs", resolved.0, resolved.1, &resolved.2, g),
                ],
            }));
        }
        if parents != old_parents {
            let mut status = pool.get("status").cloned().unwrap_or(json!({}));
            if parents.is_empty() {
                status.as_object_mut().map(|o| o.remove("parents"));
            } else {
                status["parents"] = json!(parents);
            }
            write_status(&sim.store, pk, &pool, status, GATEWAY_CONTROLLER);
        }
    }
}

/// What the emulator's GatewayClass reports in `status.supportedFeatures`: the Gateway API
/// feature names (conformance's `pkg/features`; the HTTPRoute CRD's field descriptions name
/// the ExternalAuth ones) of what the data plane (`dataplane/`, `external_auth.rs`)
/// carries out, "sorted in ascending alphabetical order by the Name key" (GatewayClassStatus
/// .SupportedFeatures).
const SUPPORTED_FEATURES: [&str; 7] = [
    "Gateway",
    "HTTPRoute",
    "HTTPRouteExternalAuthGRPC",
    "HTTPRouteExternalAuthHTTP",
    "HTTPRouteMethodMatching",
    "HTTPRoutePathRewrite",
    "HTTPRouteQueryParamMatching",
];

/// The status a Gateway reports: the data plane address, listener status, attached routes.
fn gateways(sim: &Sim) {
    let (Some(gck), Some(gwk), Some(rk)) = (sim.k.gatewayclass, sim.k.gateway, sim.k.httproute)
    else {
        return;
    };
    let ours: Vec<String> = sim
        .store
        .list(gck, None)
        .into_iter()
        .filter(|c| {
            c.pointer("/spec/controllerName").and_then(Value::as_str) == Some(GATEWAY_CONTROLLER)
        })
        .map(|c| {
            let g = generation(&c);
            let old = c.get("status");
            let mut status = c.get("status").cloned().unwrap_or(json!({}));
            status["conditions"] = json!([condition(
                old,
                "Accepted",
                true,
                "Accepted",
                "Handled by the modelplane emulator's Gateway controller",
                g
            )]);
            status["supportedFeatures"] = json!(
                SUPPORTED_FEATURES
                    .iter()
                    .map(|name| json!({ "name": name }))
                    .collect::<Vec<_>>()
            );
            write_status(&sim.store, gck, &c, status, GATEWAY_CONTROLLER);
            meta_str(&c, "name").unwrap_or("").to_string()
        })
        .collect();
    let gws: Vec<Value> = sim
        .store
        .list(gwk, None)
        .into_iter()
        .filter(|g| {
            g.pointer("/spec/gatewayClassName")
                .and_then(Value::as_str)
                .is_some_and(|c| ours.iter().any(|o| o == c))
        })
        .collect();
    let mut attached: BTreeMap<(String, String, String), i64> = BTreeMap::new();
    // The Gateways each InferencePool gets traffic from, and whether a route that sends it
    // there is accepted by that Gateway.
    let mut pool_parents: PoolParents = BTreeMap::new();
    for route in sim.list(rk) {
        let route_ns = meta_str(&route, "namespace").unwrap_or("").to_string();
        let g = generation(&route);
        let resolved = resolved_refs(sim, &route);
        let old_parents: Vec<Value> = route
            .pointer("/status/parents")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // Keep other controllers' entries; ours are recomputed.
        let mut parents: Vec<Value> = old_parents
            .iter()
            .filter(|p| p["controllerName"] != GATEWAY_CONTROLLER)
            .cloned()
            .collect();
        for parent in route
            .pointer("/spec/parentRefs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let group = parent
                .get("group")
                .and_then(Value::as_str)
                .unwrap_or(GW_GROUP);
            let kind = parent
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("Gateway");
            let ns = parent
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or(&route_ns)
                .to_string();
            let name = parent.get("name").and_then(Value::as_str).unwrap_or("");
            if group != GW_GROUP || kind != "Gateway" {
                continue;
            }
            let Some(gw) = gws.iter().find(|g| {
                meta_str(g, "namespace") == Some(ns.as_str()) && meta_str(g, "name") == Some(name)
            }) else {
                continue;
            };
            let a = attach(&sim.store, &route, parent, gw);
            for pool in pool_refs(&route) {
                *pool_parents
                    .entry(pool)
                    .or_default()
                    .entry((ns.clone(), name.to_string()))
                    .or_default() |= a.accepted.0;
            }
            for l in &a.listeners {
                *attached
                    .entry((ns.clone(), name.to_string(), l.clone()))
                    .or_default() += 1;
            }
            let old = old_parents
                .iter()
                .find(|p| p["controllerName"] == GATEWAY_CONTROLLER && p["parentRef"] == *parent);
            let (ok, reason, msg) = &a.accepted;
            parents.push(json!({
                "parentRef": parent,
                "controllerName": GATEWAY_CONTROLLER,
                "conditions": [
                    condition(old, "Accepted", *ok, reason, msg, g),
                    condition(old, "ResolvedRefs", resolved.0, resolved.1, &resolved.2, g),
                ],
            }));
        }
        if parents != old_parents {
            let mut status = route.get("status").cloned().unwrap_or(json!({}));
            status["parents"] = json!(parents);
            write_status(&sim.store, rk, &route, status, GATEWAY_CONTROLLER);
        }
    }
    inference_pools(sim, &pool_parents);
    let host = if sim.gateway_addr.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        sim.gateway_addr.ip().to_string()
    };
    for gw in &gws {
        let g = generation(gw);
        let old = gw.get("status");
        let ns = meta_str(gw, "namespace").unwrap_or("").to_string();
        let name = meta_str(gw, "name").unwrap_or("").to_string();
        let old_listeners: Vec<Value> = old
            .and_then(|o| o.get("listeners"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let listeners: Vec<Value> = gw
            .pointer("/spec/listeners")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|l| {
                let lname = l["name"].as_str().unwrap_or("").to_string();
                let prev = old_listeners.iter().find(|o| o["name"] == lname.as_str());
                let http = matches!(l["protocol"].as_str(), Some("HTTP" | "HTTPS"));
                let (reason, msg) = if http {
                    ("Accepted", "Listener is accepted")
                } else {
                    ("UnsupportedProtocol", "The emulator's Gateway serves HTTP listeners only")
                };
                json!({
                    "name": lname,
                    "supportedKinds": if http { json!([{"group": GW_GROUP, "kind": "HTTPRoute"}]) } else { json!([]) },
                    "attachedRoutes": attached.get(&(ns.clone(), name.clone(), lname.clone())).copied().unwrap_or(0),
                    "conditions": [
                        condition(prev, "Accepted", http, reason, msg, g),
                        condition(prev, "Programmed", http, if http { "Programmed" } else { "Invalid" }, if http { "Listener is programmed" } else { msg }, g),
                        condition(prev, "ResolvedRefs", true, "ResolvedRefs", "Resolved all the Object references", g),
                        condition(prev, "Conflicted", false, "NoConflicts", "No conflicts", g),
                    ],
                })
            })
            .collect();
        let status = json!({
            "addresses": [{"type": "IPAddress", "value": host}],
            "conditions": [
                condition(old, "Accepted", true, "Accepted", "Gateway is accepted", g),
                condition(old, "Programmed", true, "Programmed", &format!("Gateway is programmed; its data plane listens on {}", sim.gateway_addr), g),
            ],
            "listeners": listeners,
        });
        write_status(&sim.store, gwk, gw, status, GATEWAY_CONTROLLER);
    }
}
