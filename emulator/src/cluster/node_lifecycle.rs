//! Node heartbeats, the node lifecycle controller and the taint eviction controller.
//!
//! - **Heartbeats** (the kubelet's node lease, `k8s.io/component-helpers/apimachinery/lease`
//!   as `pkg/kubelet/kubelet.go` sets it up): every running kubelet keeps the Lease
//!   `kube-node-lease/<node>` (holderIdentity the node, `leaseDurationSeconds: 40`, owned by
//!   its Node) and renews `spec.renewTime` every quarter of the lease duration
//!   (`nodeLeaseRenewIntervalFraction = 0.25`: 10 s), or a fifth of a shorter
//!   [`ClusterConfig::node_monitor_grace_period`](super::ClusterConfig) set by a test. A
//!   kubelet whose node is back after a silence posts its node status again (Ready, with
//!   fresh heartbeat and transition times). A test stops a kubelet with
//!   `RunningEmulator::stop_node_heartbeats`: it renews nothing and writes no node or pod
//!   status any more; its containers are left as they were (a partition, or a dead kubelet).
//! - **Node lifecycle controller** (kubernetes `pkg/controller/nodelifecycle/
//!   node_lifecycle_controller.go`): `tryUpdateNodeHealth` takes a new lease `renewTime`
//!   or Ready `lastHeartbeatTime` as the node's probe time; once the probe time is older
//!   than `--node-monitor-grace-period` (50 s since v1.32, kubernetes PR #126287:
//!   `pkg/controller/nodelifecycle/config/v1alpha1/defaults.go`), the conditions Ready,
//!   MemoryPressure, DiskPressure and PIDPressure become `Unknown` with reason
//!   `NodeStatusUnknown` and message `Kubelet stopped posting node status.` (their
//!   `lastHeartbeatTime` kept), and the node gets a `NodeNotReady` event (`Node <n> status
//!   is now: NodeNotReady`, `RecordNodeStatusChange`). `doNoScheduleTaintingPass` keeps the
//!   `NoSchedule` taints of `nodeConditionToTaintKeyStatusMap` (Ready Unknown:
//!   `node.kubernetes.io/unreachable`, Ready False: `node.kubernetes.io/not-ready`, ...),
//!   `processTaintBaseEviction`/`doNoExecuteTaintingPass` the mutually exclusive
//!   `NoExecute` taints `UnreachableTaintTemplate`/`NotReadyTaintTemplate`, each with
//!   `timeAdded` (`SwapNodeControllerTaint`), and `markNodeAsReachable` removes the
//!   `NoExecute` ones once the node is Ready again. `MarkPodsNotReady`
//!   (`pkg/controller/util/node/controller_utils.go`) sets the Ready condition of every
//!   pod on a not-ready node to False (only the status; reason and message kept, a new
//!   `lastTransitionTime`) with a `NodeNotReady` event `Node is not ready` on the pod;
//!   `ContainersReady` and the container statuses still say what the kubelet last
//!   reported. `handleDisruption`/`ComputeZoneState`: when every node is not ready
//!   (full disruption) no node keeps a `NoExecute` taint; when more than two and at least
//!   55 % of a zone's nodes are not ready in a zone of at most 50 nodes (partial
//!   disruption, `ReducedQPSFunc` gives 0), no new `NoExecute` taint is added there.
//! - **Taint eviction controller** (`pkg/controller/tainteviction/taint_eviction.go`):
//!   a pod on a node with `NoExecute` taints is deleted at once unless it tolerates all of
//!   them, else after the smallest `tolerationSeconds` of the tolerations used (never when
//!   none sets it), counted from when the controller first scheduled it
//!   (`processPodOnNode`); deletion adds the pod condition `DisruptionTarget`
//!   (`DeletionByTaintManager`, `Taint manager: deleting due to NoExecute taint`) and a
//!   `TaintManagerEviction` event `Marking for deletion Pod <ns>/<name>`
//!   (`addConditionAndDeletePod`); a cancelled eviction gets `Cancelling deletion of Pod
//!   <ns>/<name>`. Every pod carries the DefaultTolerationSeconds admission plugin's
//!   tolerations (`not-ready` and `unreachable`, `NoExecute`, 300 s: see `admission.rs`), so
//!   its pods leave a lost node 300 s after the taint, or after
//!   [`ClusterConfig::default_toleration`](super::ClusterConfig) in tests. The deletion is
//!   graceful: with its kubelet gone the pod stays Terminating, as on a real cluster, and
//!   its ReplicaSet replaces it elsewhere.
//!
//! Differences: the controllers run on every pass of the cluster loop (the real node
//! monitor runs every `--node-monitor-period`, 5 s, and adds `NoExecute` taints through a
//! rate-limited queue, 0.1 node/s per zone), so a node goes Unknown right after the grace
//! period and is tainted at once; the kubelet posts node status only on registration and
//! after a silence (the real one also every `nodeStatusReportFrequency`, 5 min), so
//! `lastHeartbeatTime` is not refreshed while a node is healthy (its Lease is); the
//! `node.kubernetes.io/unschedulable` taint of cordoned nodes is not managed; the
//! admission plugin always stores `tolerationSeconds: 300`, and a shorter
//! `default_toleration` is applied by the eviction controller to exactly those
//! tolerations.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{ClusterConfig, NsName, Sim, condition, deleting, is_true, manager, since};
use super::{write_object, write_status};
use crate::ops::{self, DeleteOptions};
use crate::resources::meta_str;

const KCM: &str = "kube-controller-manager";
const NODE_CONTROLLER: &str = "node-controller";
const TAINT_EVICTION: &str = "taint-eviction-controller";
const KUBELET: &str = "kubelet";
pub(crate) const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub(crate) const NOT_READY: &str = "node.kubernetes.io/not-ready";
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The kubelet's `nodeLeaseDurationSeconds` default.
const LEASE_DURATION: Duration = Duration::from_secs(40);
/// What the DefaultTolerationSeconds admission plugin writes (`--default-not-ready-
/// toleration-seconds`, `--default-unreachable-toleration-seconds`).
const DEFAULT_TOLERATION_SECONDS: u64 = 300;
/// `--large-cluster-size-threshold` and `--unhealthy-zone-threshold` defaults.
const LARGE_CLUSTER_THRESHOLD: usize = 50;
const UNHEALTHY_ZONE_THRESHOLD: f64 = 0.55;
/// The conditions the node lifecycle controller sets to Unknown (NetworkUnavailable is
/// left alone: it is managed on the control plane's side).
const UNKNOWN_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// The kubelets that stopped reporting, shared between the cluster loop and the
/// `RunningEmulator` (tests switch them).
#[derive(Clone, Default)]
pub(crate) struct Heartbeats(Arc<Mutex<HashSet<String>>>);

impl Heartbeats {
    pub fn stop(&self, node: &str) {
        self.0.lock().unwrap().insert(node.to_owned());
    }

    pub fn resume(&self, node: &str) {
        self.0.lock().unwrap().remove(node);
    }

    fn stopped(&self) -> HashSet<String> {
        self.0.lock().unwrap().clone()
    }
}

/// State of the three components across passes.
#[derive(Default)]
pub(crate) struct Lifecycle {
    pub heartbeats: Heartbeats,
    /// The kubelets stopped as of this pass (read once per pass).
    pub stopped: HashSet<String>,
    /// Kubelet: when each node's kubelet last renewed its Lease.
    renewed: HashMap<String, Instant>,
    /// Node lifecycle controller: per node, the heartbeats it last saw (lease renewTime,
    /// Ready lastHeartbeatTime) and when they last changed (its `probeTimestamp`).
    health: HashMap<String, Health>,
    /// Taint eviction controller: scheduled pod deletions.
    evictions: HashMap<NsName, Scheduled>,
}

struct Health {
    seen: (Option<String>, Option<String>),
    probe: Instant,
}

struct Scheduled {
    created: Instant,
    fire: Instant,
}

/// The kubelet's lease renewal interval: a quarter of the lease duration, or a fifth of
/// a shorter grace period (the real ratio of 10 s to 50 s), so a test's short grace period
/// never sees a healthy node go silent.
fn renew_interval(config: &ClusterConfig) -> Duration {
    (LEASE_DURATION / 4).min(config.node_monitor_grace_period / 5)
}

/// One pass of the kubelets' heartbeats, the node lifecycle controller and the taint
/// eviction controller.
pub(super) fn run(sim: &mut Sim) {
    sim.lifecycle.stopped = sim.lifecycle.heartbeats.stopped();
    heartbeats(sim);
    monitor_node_health(sim);
    taint_eviction(sim);
}

/// `MicroTime`, as Lease `renewTime` is stored.
fn micro_now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

fn ready_status(node: &Value) -> &str {
    condition(node, "Ready")
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        .unwrap_or("Unknown")
}

/// The running kubelets renew their Leases and, back from a silence, post node status.
fn heartbeats(sim: &mut Sim) {
    let renew = renew_interval(&sim.config);
    let names: Vec<String> = sim.nodes.iter().map(|n| n.name.clone()).collect();
    for name in names {
        if sim.lifecycle.stopped.contains(&name) {
            continue;
        }
        let Some(node) = sim.store.get(sim.k.node, "", &name) else {
            continue;
        };
        if !is_true(&node, "Ready") {
            post_ready(sim, &node);
        }
        let due = sim
            .lifecycle
            .renewed
            .get(&name)
            .is_none_or(|t| since(*t) >= renew);
        if due && renew_lease(sim, &node) {
            sim.lifecycle.renewed.insert(name, Instant::now());
        }
    }
}

/// The kubelet's node conditions when it reports a healthy node (`pkg/kubelet/nodestatus/
/// setters.go`), dated `now`.
pub(crate) fn kubelet_conditions(now: &str) -> Value {
    let cond = |t: &str, s: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": msg,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!([
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        cond(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        cond(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ])
}

/// The kubelet, reporting again, posts its conditions (a transition for each that was not
/// what it reports).
fn post_ready(sim: &Sim, node: &Value) {
    let mut status = node.get("status").cloned().unwrap_or(json!({}));
    status["conditions"] = kubelet_conditions(&ops::now());
    write_status(&sim.store, sim.k.node, node, status, KUBELET);
}

/// Creates or renews the node's Lease; whether it was written.
fn renew_lease(sim: &Sim, node: &Value) -> bool {
    let Some(kind) = sim.k.lease else {
        return false;
    };
    let name = meta_str(node, "name").unwrap_or("");
    let opts = manager(KUBELET);
    match sim.store.get(kind, LEASE_NAMESPACE, name) {
        Some(mut new) => {
            new["spec"]["renewTime"] = json!(micro_now());
            new["spec"]["holderIdentity"] = json!(name);
            write_object(&sim.store, kind, new, KUBELET)
        }
        None => {
            let lease = json!({
                "metadata": {
                    "name": name, "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                         "uid": meta_str(node, "uid")}],
                },
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": LEASE_DURATION.as_secs(),
                    "renewTime": micro_now(),
                },
            });
            ops::create(&sim.store, kind, LEASE_NAMESPACE, lease, &opts).is_ok()
        }
    }
}

/// The zone a node counts in (`GetZoneKey`, k8s.io/component-helpers/node/topology).
fn zone_of(node: &Value) -> String {
    let label = |k: &str| {
        node.pointer(&format!("/metadata/labels/{}", k.replace('/', "~1")))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    format!(
        "{}:\x00:{}",
        label("topology.kubernetes.io/region"),
        label("topology.kubernetes.io/zone")
    )
}

/// `monitorNodeHealth`: node conditions, taints and the Ready condition of their pods.
fn monitor_node_health(sim: &mut Sim) {
    let grace = sim.config.node_monitor_grace_period;
    let mut nodes = Vec::new();
    for node in sim.list(sim.k.node) {
        let name = meta_str(&node, "name").unwrap_or("").to_owned();
        let lease = sim
            .k
            .lease
            .and_then(|k| sim.store.get(k, LEASE_NAMESPACE, &name))
            .and_then(|l| {
                l.pointer("/spec/renewTime")
                    .and_then(Value::as_str)
                    .map(String::from)
            });
        let heartbeat = condition(&node, "Ready")
            .and_then(|c| c.get("lastHeartbeatTime"))
            .and_then(Value::as_str)
            .map(String::from);
        let seen = (heartbeat, lease);
        let health = sim
            .lifecycle
            .health
            .entry(name.clone())
            .or_insert_with(|| Health {
                seen: seen.clone(),
                probe: Instant::now(),
            });
        if health.seen != seen {
            health.seen = seen;
            health.probe = Instant::now();
        }
        let silent = since(health.probe) > grace;
        if !silent && sim.lifecycle.stopped.contains(&name) {
            // A stopped kubelet's node goes Unknown once the grace period is over.
            sim.busy = true;
        }
        let node = if silent {
            mark_unknown(sim, node, &name)
        } else {
            node
        };
        nodes.push((name, node));
    }
    sim.lifecycle
        .health
        .retain(|n, _| nodes.iter().any(|(name, _)| name == n));

    // handleDisruption: per zone (not ready, all).
    let mut zones: HashMap<String, (usize, usize)> = HashMap::new();
    for (_, node) in &nodes {
        let z = zones.entry(zone_of(node)).or_default();
        z.1 += 1;
        if ready_status(node) != "True" {
            z.0 += 1;
        }
    }
    let full_disruption = zones.values().all(|(down, all)| down == all);
    let no_new_taints = |node: &Value| {
        let (down, all) = zones[&zone_of(node)];
        full_disruption
            || (down > 2
                && down as f64 / all as f64 >= UNHEALTHY_ZONE_THRESHOLD
                && all <= LARGE_CLUSTER_THRESHOLD)
    };
    let mut pods_by_node: Option<HashMap<String, Vec<Arc<Value>>>> = None;
    for (name, node) in &nodes {
        let ready = ready_status(node).to_owned();
        taint(sim, node, &ready, full_disruption, no_new_taints(node));
        if ready != "True" {
            let pods = pods_by_node.get_or_insert_with(|| {
                let mut by: HashMap<String, Vec<Arc<Value>>> = HashMap::new();
                for p in sim.list(sim.k.pod) {
                    if let Some(n) = p.pointer("/spec/nodeName").and_then(Value::as_str) {
                        by.entry(n.to_owned()).or_default().push(p.clone());
                    }
                }
                by
            });
            for pod in pods.get(name).into_iter().flatten() {
                mark_pod_not_ready(sim, pod);
            }
        }
    }
}

/// `tryUpdateNodeHealth` past the grace period: the kubelet's conditions become Unknown.
/// Returns the node as it is now.
fn mark_unknown(sim: &Sim, node: Arc<Value>, name: &str) -> Arc<Value> {
    let was_ready = is_true(&node, "Ready");
    let now = ops::now();
    let mut status = node.get("status").cloned().unwrap_or(json!({}));
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for ty in UNKNOWN_CONDITIONS {
        match conditions.iter_mut().find(|c| c["type"] == ty) {
            Some(c) if c["status"] != "Unknown" => {
                c["status"] = json!("Unknown");
                c["reason"] = json!("NodeStatusUnknown");
                c["message"] = json!("Kubelet stopped posting node status.");
                c["lastTransitionTime"] = json!(now);
            }
            Some(_) => {}
            None => conditions.push(json!({
                "type": ty, "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                "message": "Kubelet never posted node status.",
                "lastHeartbeatTime": meta_str(&node, "creationTimestamp"),
                "lastTransitionTime": now,
            })),
        }
    }
    status["conditions"] = json!(conditions);
    if write_status(&sim.store, sim.k.node, &node, status, KCM) && was_ready {
        sim.event(
            &node,
            sim.k.node,
            "Normal",
            "NodeNotReady",
            &format!("Node {name} status is now: NodeNotReady"),
            NODE_CONTROLLER,
        );
    }
    sim.store
        .get(sim.k.node, "", name)
        .map(Arc::new)
        .unwrap_or(node)
}

/// The taints the controller manages on one node, as (key, effect).
fn condition_taints(node: &Value) -> Vec<(&'static str, &'static str)> {
    let status = |ty: &str| {
        condition(node, ty)
            .and_then(|c| c.get("status"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    // nodeConditionToTaintKeyStatusMap
    let mut taints = Vec::new();
    match status("Ready").as_str() {
        "False" => taints.push((NOT_READY, "NoSchedule")),
        "Unknown" => taints.push((UNREACHABLE, "NoSchedule")),
        _ => {}
    }
    for (ty, key) in [
        ("MemoryPressure", "node.kubernetes.io/memory-pressure"),
        ("DiskPressure", "node.kubernetes.io/disk-pressure"),
        (
            "NetworkUnavailable",
            "node.kubernetes.io/network-unavailable",
        ),
        ("PIDPressure", "node.kubernetes.io/pid-pressure"),
    ] {
        if status(ty) == "True" {
            taints.push((key, "NoSchedule"));
        }
    }
    taints
}

const MANAGED_KEYS: [&str; 6] = [
    NOT_READY,
    UNREACHABLE,
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/network-unavailable",
    "node.kubernetes.io/pid-pressure",
];

/// `doNoScheduleTaintingPass` and the `NoExecute` taints of `processTaintBaseEviction`.
fn taint(sim: &Sim, node: &Value, ready: &str, full_disruption: bool, no_new: bool) {
    let key_effect = |t: &Value| {
        (
            t.get("key")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            t.get("effect")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        )
    };
    let current: Vec<Value> = node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut wanted: Vec<(&str, &str)> = condition_taints(node);
    let has = |key: &str, effect: &str| {
        current
            .iter()
            .any(|t| key_effect(t) == (key.to_owned(), effect.to_owned()))
    };
    let no_execute = match ready {
        "False" => Some(NOT_READY),
        "Unknown" => Some(UNREACHABLE),
        _ => None,
    };
    if let Some(key) = no_execute.filter(|_| !full_disruption)
        && (!no_new || has(key, "NoExecute"))
    {
        wanted.push((key, "NoExecute"));
    }
    let managed = |t: &Value| {
        let (key, effect) = key_effect(t);
        MANAGED_KEYS.contains(&key.as_str()) && (effect == "NoSchedule" || effect == "NoExecute")
    };
    let mut taints: Vec<Value> = current
        .iter()
        .filter(|t| {
            !managed(t) || {
                let (key, effect) = key_effect(t);
                wanted.contains(&(key.as_str(), effect.as_str()))
            }
        })
        .cloned()
        .collect();
    let now = ops::now();
    for (key, effect) in &wanted {
        if !has(key, effect) {
            taints.push(json!({"key": key, "effect": effect, "timeAdded": now}));
        }
    }
    if taints == current {
        return;
    }
    let mut new = node.clone();
    if taints.is_empty() {
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("taints");
        }
    } else {
        new["spec"]["taints"] = json!(taints);
    }
    write_object(&sim.store, sim.k.node, new, KCM);
}

/// `MarkPodsNotReady` for one pod.
fn mark_pod_not_ready(sim: &Sim, pod: &Value) {
    if !is_true(pod, "Ready") {
        return;
    }
    let mut status = pod.get("status").cloned().unwrap_or(json!({}));
    if let Some(conds) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds.iter_mut().filter(|c| c["type"] == "Ready") {
            c["status"] = json!("False");
            c["lastTransitionTime"] = json!(ops::now());
        }
    }
    if write_status(&sim.store, sim.k.pod, pod, status, KCM) {
        sim.event(
            pod,
            sim.k.pod,
            "Warning",
            "NodeNotReady",
            "Node is not ready",
            NODE_CONTROLLER,
        );
    }
}

/// `ToleratesTaint` (k8s.io/api/core/v1/toleration.go).
fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let f = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let effect = f(toleration, "effect");
    if !effect.is_empty() && effect != f(taint, "effect") {
        return false;
    }
    let key = f(toleration, "key");
    if !key.is_empty() && key != f(taint, "key") {
        return false;
    }
    match f(toleration, "operator").as_str() {
        "" | "Equal" => f(toleration, "value") == f(taint, "value"),
        "Exists" => true,
        _ => false,
    }
}

/// How long a pod may stay on a node with these `NoExecute` taints (`getMinTolerationTime`
/// over `GetMatchingTolerations`): `None` when it does not tolerate them all (delete at
/// once), `Some(None)` forever.
fn toleration_time(pod: &Value, taints: &[Value], default: Duration) -> Option<Option<Duration>> {
    let tolerations: Vec<&Value> = pod
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let mut used = Vec::new();
    for taint in taints {
        used.push(*tolerations.iter().find(|t| tolerates(t, taint))?);
    }
    let mut min: Option<Duration> = None;
    for t in used {
        let Some(secs) = t.get("tolerationSeconds").and_then(Value::as_i64) else {
            continue;
        };
        let is_default = secs == DEFAULT_TOLERATION_SECONDS as i64
            && t.get("operator").and_then(Value::as_str) == Some("Exists")
            && t.get("effect").and_then(Value::as_str) == Some("NoExecute")
            && matches!(
                t.get("key").and_then(Value::as_str),
                Some(NOT_READY | UNREACHABLE)
            );
        let d = if is_default {
            default
        } else {
            Duration::from_secs(secs.max(0) as u64)
        };
        min = Some(min.map_or(d, |m| m.min(d)));
    }
    Some(min)
}

/// The taint eviction controller.
fn taint_eviction(sim: &mut Sim) {
    let mut tainted: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for node in sim.list(sim.k.node) {
        let taints: Vec<Value> = node
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|t| t.get("effect").and_then(Value::as_str) == Some("NoExecute"))
            .cloned()
            .collect();
        if !taints.is_empty() {
            tainted.insert(meta_str(&node, "name").unwrap_or("").to_owned(), taints);
        }
    }
    if tainted.is_empty() && sim.lifecycle.evictions.is_empty() {
        return;
    }
    let default = sim.config.default_toleration;
    let mut live = HashSet::new();
    for pod in sim.list(sim.k.pod) {
        let key = (
            meta_str(&pod, "namespace").unwrap_or("").to_owned(),
            meta_str(&pod, "name").unwrap_or("").to_owned(),
        );
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(taints) = tainted.get(node).filter(|_| !deleting(&pod)) else {
            if sim.lifecycle.evictions.remove(&key).is_some() && !tainted.contains_key(node) {
                cancelled(sim, &pod, &key);
            }
            continue;
        };
        live.insert(key.clone());
        let now = Instant::now();
        let fire = match toleration_time(&pod, taints, default) {
            None => now,
            Some(None) => {
                if sim.lifecycle.evictions.remove(&key).is_some() {
                    cancelled(sim, &pod, &key);
                }
                continue;
            }
            Some(Some(d)) => {
                let s = sim
                    .lifecycle
                    .evictions
                    .entry(key.clone())
                    .or_insert(Scheduled {
                        created: now,
                        fire: now + d,
                    });
                s.fire = s.created + d;
                s.fire
            }
        };
        if fire <= now {
            evict(sim, &pod, &key);
            sim.lifecycle.evictions.remove(&key);
        } else {
            sim.busy = true;
        }
    }
    sim.lifecycle.evictions.retain(|k, _| live.contains(k));
}

fn cancelled(sim: &Sim, pod: &Value, (ns, name): &NsName) {
    sim.event(
        pod,
        sim.k.pod,
        "Normal",
        "TaintManagerEviction",
        &format!("Cancelling deletion of Pod {ns}/{name}"),
        TAINT_EVICTION,
    );
}

/// `addConditionAndDeletePod`.
fn evict(sim: &Sim, pod: &Value, (ns, name): &NsName) {
    sim.event(
        pod,
        sim.k.pod,
        "Normal",
        "TaintManagerEviction",
        &format!("Marking for deletion Pod {ns}/{name}"),
        TAINT_EVICTION,
    );
    let mut status = pod.get("status").cloned().unwrap_or(json!({}));
    let target = json!({
        "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint",
        "lastProbeTime": null, "lastTransitionTime": ops::now(),
    });
    match status.get_mut("conditions").and_then(Value::as_array_mut) {
        Some(conds) if !conds.iter().any(|c| c["type"] == "DisruptionTarget") => conds.push(target),
        Some(_) => {}
        None => status["conditions"] = json!([target]),
    }
    write_status(&sim.store, sim.k.pod, pod, status, KCM);
    let _ = ops::delete(&sim.store, sim.k.pod, ns, name, &DeleteOptions::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerations_match_like_tolerates_taint() {
        let taint = json!({"key": UNREACHABLE, "effect": "NoExecute"});
        let default = json!({"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300});
        assert!(tolerates(&default, &taint));
        assert!(tolerates(&json!({"operator": "Exists"}), &taint));
        assert!(!tolerates(
            &json!({"key": NOT_READY, "operator": "Exists"}),
            &taint
        ));
        assert!(!tolerates(
            &json!({"key": UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"}),
            &taint
        ));
        let pod = json!({"spec": {"tolerations": [default]}});
        let short = Duration::from_secs(2);
        assert_eq!(
            toleration_time(&pod, std::slice::from_ref(&taint), short),
            Some(Some(short))
        );
        let forever = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        assert_eq!(
            toleration_time(&forever, std::slice::from_ref(&taint), short),
            Some(None)
        );
        let none = json!({"spec": {}});
        assert_eq!(toleration_time(&none, &[taint], short), None);
    }
}
