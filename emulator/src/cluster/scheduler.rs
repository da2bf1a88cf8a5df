//! The scheduler: binds pending pods to nodes where they fit (resource requests,
//! nodeSelector, required node affinity, taints/tolerations, unschedulable nodes) and
//! leaves the rest Pending with `PodScheduled=False`/`Unschedulable`, the real
//! scheduler's FitError message and a FailedScheduling event.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::{Sim, deleting, manager, milli, uid, write_status};
use crate::ops;
use crate::resources::meta_str;

const SCHEDULER: &str = "default-scheduler";

/// Summed requests of a pod (containers, the max of init containers, overhead), in milli-units.
pub(crate) fn pod_requests(pod: &Value) -> BTreeMap<String, i128> {
    let mut sum: BTreeMap<String, i128> = BTreeMap::new();
    let reqs = |c: &Value| -> BTreeMap<String, i128> {
        let mut m = BTreeMap::new();
        // Requests default from limits (already done by admission, kept as a fallback).
        for src in ["/resources/limits", "/resources/requests"] {
            if let Some(r) = c.pointer(src).and_then(Value::as_object) {
                for (k, v) in r {
                    m.insert(k.clone(), milli(v));
                }
            }
        }
        m
    };
    for c in pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (k, v) in reqs(c) {
            *sum.entry(k).or_default() += v;
        }
    }
    for c in pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (k, v) in reqs(c) {
            let e = sum.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    if let Some(o) = pod.pointer("/spec/overhead").and_then(Value::as_object) {
        for (k, v) in o {
            *sum.entry(k.clone()).or_default() += milli(v);
        }
    }
    sum
}

fn tolerates(pod: &Value, taint: &Value) -> bool {
    let f = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    pod.pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| {
            let effect = f(t, "effect");
            if !effect.is_empty() && effect != f(taint, "effect") {
                return false;
            }
            let key = f(t, "key");
            if f(t, "operator") == "Exists" {
                return key.is_empty() || key == f(taint, "key");
            }
            key == f(taint, "key") && f(t, "value") == f(taint, "value")
        })
}

fn match_expression(labels: &serde_json::Map<String, Value>, e: &Value) -> bool {
    let key = e.get("key").and_then(Value::as_str).unwrap_or("");
    let values: Vec<&str> = e
        .get("values")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let have = labels.get(key).and_then(Value::as_str);
    let num = |s: &str| s.parse::<i64>().ok();
    match e.get("operator").and_then(Value::as_str).unwrap_or("") {
        "In" => have.is_some_and(|h| values.contains(&h)),
        "NotIn" => have.is_none_or(|h| !values.contains(&h)),
        "Exists" => have.is_some(),
        "DoesNotExist" => have.is_none(),
        "Gt" => have
            .and_then(num)
            .zip(values.first().and_then(|v| num(v)))
            .is_some_and(|(h, v)| h > v),
        "Lt" => have
            .and_then(num)
            .zip(values.first().and_then(|v| num(v)))
            .is_some_and(|(h, v)| h < v),
        _ => false,
    }
}

/// nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node affinity.
fn affinity_matches(pod: &Value, node: &Value) -> bool {
    let empty = serde_json::Map::new();
    let labels = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(sel) = pod.pointer("/spec/nodeSelector").and_then(Value::as_object)
        && sel.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    let Some(terms) = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
    else {
        return true;
    };
    let name = meta_str(node, "name").unwrap_or("");
    terms.iter().any(|t| {
        let exprs = t.get("matchExpressions").and_then(Value::as_array);
        let fields = t.get("matchFields").and_then(Value::as_array);
        if exprs.is_none_or(Vec::is_empty) && fields.is_none_or(Vec::is_empty) {
            return false;
        }
        let by_name = serde_json::Map::from_iter([("metadata.name".to_string(), json!(name))]);
        exprs
            .into_iter()
            .flatten()
            .all(|e| match_expression(labels, e))
            && fields
                .into_iter()
                .flatten()
                .all(|e| match_expression(&by_name, e))
    })
}

/// Why a pod does not fit a node (empty when it fits); the first failing filter plugin
/// decides, as in the scheduling framework. `true` when preemption could help.
fn filter(
    pod: &Value,
    node: &Value,
    used: &BTreeMap<String, i128>,
    pods_on_node: usize,
    requests: &BTreeMap<String, i128>,
    allocatable: &BTreeMap<String, i128>,
) -> (Vec<String>, bool) {
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true)
        && !tolerates(
            pod,
            &json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}),
        )
    {
        return (vec!["node(s) were unschedulable".into()], false);
    }
    for t in node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
        if (effect == "NoSchedule" || effect == "NoExecute") && !tolerates(pod, t) {
            let key = t.get("key").and_then(Value::as_str).unwrap_or("");
            let value = t.get("value").and_then(Value::as_str).unwrap_or("");
            return (
                vec![format!("node(s) had untolerated taint {{{key}: {value}}}")],
                false,
            );
        }
    }
    if !affinity_matches(pod, node) {
        return (
            vec!["node(s) didn't match Pod's node affinity/selector".into()],
            false,
        );
    }
    let mut reasons = Vec::new();
    let max_pods = allocatable.get("pods").copied().unwrap_or(110_000) / 1000;
    if pods_on_node as i128 + 1 > max_pods {
        reasons.push("Too many pods".to_string());
    }
    for (res, &want) in requests {
        if want == 0 {
            continue;
        }
        let have = allocatable.get(res).copied().unwrap_or(0);
        if used.get(res).copied().unwrap_or(0) + want > have {
            reasons.push(format!("Insufficient {res}"));
        }
    }
    (reasons, true)
}

pub(super) fn schedule(sim: &mut Sim) {
    let pods = sim.list(sim.k.pod);
    let unbound = |p: &Value| {
        p.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    };
    let terminal_pod = |p: &Value| {
        matches!(
            p.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        )
    };
    // Nothing to schedule: only forget the pods that are gone.
    if !pods
        .iter()
        .any(|p| unbound(p) && !deleting(p) && !terminal_pod(p))
    {
        if !sim.unschedulable.is_empty() {
            let live: std::collections::HashSet<&str> = pods.iter().map(|p| uid(p)).collect();
            sim.unschedulable.retain(|u, _| live.contains(u.as_str()));
        }
        return;
    }
    let nodes = sim.list(sim.k.node);
    // Node allocatable, parsed once per pass.
    let allocatable: Vec<BTreeMap<String, i128>> = nodes
        .iter()
        .map(|n| {
            n.pointer("/status/allocatable")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), milli(v)))
                .collect()
        })
        .collect();
    let mut used: HashMap<String, BTreeMap<String, i128>> = HashMap::new();
    let mut counts: HashMap<String, usize> = HashMap::new();
    let bound = |p: &Value| {
        p.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let terminal = |p: &Value| {
        matches!(
            p.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        )
    };
    // Pod requests never change (no in-place resize): computed once per pod.
    let live: std::collections::HashSet<&str> = pods.iter().map(|p| uid(p)).collect();
    sim.requests.retain(|u, _| live.contains(u.as_str()));
    for p in pods.iter().filter(|p| !bound(p).is_empty() && !terminal(p)) {
        let n = bound(p);
        *counts.entry(n.clone()).or_default() += 1;
        let u = used.entry(n).or_default();
        let reqs = sim
            .requests
            .entry(uid(p).to_string())
            .or_insert_with(|| std::sync::Arc::new(pod_requests(p)));
        for (k, v) in reqs.iter() {
            *u.entry(k.clone()).or_default() += v;
        }
    }
    // Higher priority first, then oldest (the scheduling queue's order); only the pods
    // still to schedule (a stable sort of them keeps the order a sort of all would give).
    let mut pods: Vec<&std::sync::Arc<Value>> = pods
        .iter()
        .filter(|p| bound(p).is_empty() && !deleting(p) && !terminal(p))
        .collect();
    fn queue_key(p: &Value) -> (i64, &str) {
        (
            -p.pointer("/spec/priority")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            meta_str(p, "creationTimestamp").unwrap_or(""),
        )
    }
    pods.sort_by(|a, b| queue_key(a).cmp(&queue_key(b)));
    sim.unschedulable.retain(|u, _| live.contains(u.as_str()));
    for pod in pods {
        if !bound(pod).is_empty() || deleting(pod) || terminal(pod) {
            continue;
        }
        let scheduler = pod
            .pointer("/spec/schedulerName")
            .and_then(Value::as_str)
            .unwrap_or(SCHEDULER);
        if scheduler != SCHEDULER
            || pod
                .pointer("/spec/schedulingGates")
                .and_then(Value::as_array)
                .is_some_and(|g| !g.is_empty())
        {
            continue;
        }
        let ns = meta_str(pod, "namespace").unwrap_or("");
        let name = meta_str(pod, "name").unwrap_or("");
        let total = nodes.len();
        let requests = sim
            .requests
            .entry(uid(pod).to_string())
            .or_insert_with(|| std::sync::Arc::new(pod_requests(pod)))
            .clone();
        // PreFilter (VolumeBinding): claims must exist.
        let missing_claim = pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| {
                v.pointer("/persistentVolumeClaim/claimName")
                    .and_then(Value::as_str)
            })
            .find(|c| sim.store.get(sim.k.pvc, ns, c).is_none());
        let message = if let Some(claim) = missing_claim {
            format!(
                "0/{total} nodes are available: persistentvolumeclaim \"{claim}\" not found. preemption: 0/{total} nodes are available: {total} No preemption victims found for incoming pod.."
            )
        } else {
            let mut best: Option<(i128, String)> = None;
            let mut hist: BTreeMap<String, usize> = BTreeMap::new();
            let (mut victims, mut hopeless) = (0, 0);
            for (node_i, node) in nodes.iter().enumerate() {
                let nname = meta_str(node, "name").unwrap_or("").to_string();
                let empty = BTreeMap::new();
                let u = used.get(&nname).unwrap_or(&empty);
                let (reasons, preemptible) = filter(
                    pod,
                    node,
                    u,
                    counts.get(&nname).copied().unwrap_or(0),
                    requests.as_ref(),
                    &allocatable[node_i],
                );
                if reasons.is_empty() {
                    // LeastAllocated: prefer the emptiest node.
                    let score: i128 = u.values().sum();
                    if best.as_ref().is_none_or(|(s, _)| score < *s) {
                        best = Some((score, nname));
                    }
                } else {
                    for r in reasons {
                        *hist.entry(r).or_default() += 1;
                    }
                    if preemptible {
                        victims += 1;
                    } else {
                        hopeless += 1;
                    }
                }
            }
            if let Some((_, node)) = best {
                if ops::bind(
                    &sim.store,
                    sim.k.pod,
                    ns,
                    name,
                    &node,
                    &manager("kube-scheduler"),
                )
                .is_ok()
                {
                    let msg = format!("Successfully assigned {ns}/{name} to {node}");
                    sim.event(pod, sim.k.pod, "Normal", "Scheduled", &msg, SCHEDULER);
                    *counts.entry(node.clone()).or_default() += 1;
                    let u = used.entry(node).or_default();
                    for (k, v) in requests.iter() {
                        *u.entry(k.clone()).or_default() += v;
                    }
                }
                sim.unschedulable.remove(uid(pod));
                continue;
            }
            let mut parts: Vec<String> = hist.iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.sort();
            let mut pre = Vec::new();
            if hopeless > 0 {
                pre.push(format!(
                    "{hopeless} Preemption is not helpful for scheduling"
                ));
            }
            if victims > 0 {
                pre.push(format!(
                    "{victims} No preemption victims found for incoming pod"
                ));
            }
            pre.sort();
            if total == 0 {
                "no nodes available to schedule pods".to_string()
            } else {
                // The real FitError appends "." to the post-filter message, which already
                // ends with one: hence "..".
                format!(
                    "0/{total} nodes are available: {}. preemption: 0/{total} nodes are available: {}..",
                    parts.join(", "),
                    pre.join(", ")
                )
            }
        };
        mark_unschedulable(sim, pod, &message);
    }
}

fn mark_unschedulable(sim: &mut Sim, pod: &Value, message: &str) {
    let mut status = pod.get("status").cloned().unwrap_or(json!({}));
    let conds = status
        .as_object_mut()
        .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
    if let Some(Value::Array(list)) = conds {
        let same = list.iter().any(|c| {
            c["type"] == "PodScheduled" && c["status"] == "False" && c["message"] == message
        });
        if !same {
            list.retain(|c| c["type"] != "PodScheduled");
            let generation = pod
                .pointer("/metadata/generation")
                .cloned()
                .unwrap_or(json!(1));
            list.push(json!({"type": "PodScheduled", "status": "False", "lastProbeTime": null, "observedGeneration": generation,
                             "lastTransitionTime": ops::now(), "reason": "Unschedulable", "message": message}));
        }
    }
    write_status(&sim.store, sim.k.pod, pod, status, "kube-scheduler");
    if sim.unschedulable.get(uid(pod)).map(String::as_str) != Some(message) {
        sim.unschedulable
            .insert(uid(pod).to_string(), message.to_string());
        sim.event(
            pod,
            sim.k.pod,
            "Warning",
            "FailedScheduling",
            message,
            SCHEDULER,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_tolerations_and_affinity() {
        let taint = json!({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"});
        let pod = json!({"spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}});
        assert!(tolerates(&pod, &taint));
        assert!(!tolerates(&json!({"spec": {}}), &taint));
        let node = json!({"metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "H100"}}});
        let aff = |v: &str| {
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [v]}]}]}}}}})
        };
        assert!(affinity_matches(&aff("H100"), &node));
        assert!(!affinity_matches(&aff("A100"), &node));
    }
}
