//! The deployment and replicaset controllers, after kube-controller-manager's
//! (pkg/controller/deployment and pkg/controller/replicaset): ReplicaSets per pod template
//! with the pod-template-hash label, rolling updates within maxSurge/maxUnavailable,
//! Recreate, revisions, history cleanup, and the real status counts and conditions.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{
    Sim, condition, controller_uid, deleting, is_true, manager, uid, write_object, write_status,
};
use crate::ops::{self, DeleteOptions};
use crate::resources::{meta_mut, meta_str};

const KCM: &str = "kube-controller-manager";
const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
const HASH: &str = "pod-template-hash";

fn int(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

fn spec_replicas(o: &Value) -> i64 {
    o.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn annotation<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o.pointer("/metadata/annotations")?.get(key)?.as_str()
}

fn revision(o: &Value) -> i64 {
    annotation(o, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// JSON with object keys sorted, so the hash does not depend on field order.
fn canonical(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let sorted: BTreeMap<&String, Value> =
                    m.iter().map(|(k, v)| (k, sort(v))).collect();
                let mut out = Map::new();
                for (k, v) in sorted {
                    out.insert(k.clone(), v);
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(v).to_string()
}

/// The pod-template-hash: FNV-32a of the template, its decimal digits mapped onto the
/// alphabet of `rand.SafeEncodeString`, like the real ComputeHash.
pub(crate) fn template_hash(template: &Value) -> String {
    let mut h: u32 = 0x811c9dc5;
    for b in canonical(template).bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x01000193);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|b| ALPHABET[b as usize % ALPHABET.len()] as char)
        .collect()
}

/// A ReplicaSet's template without its pod-template-hash label (EqualIgnoreHash).
fn without_hash(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(labels) = t
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(HASH);
        if labels.is_empty() {
            t["metadata"].as_object_mut().map(|m| m.remove("labels"));
        }
    }
    t
}

/// Resolves maxSurge/maxUnavailable against the replica count (surge rounds up,
/// unavailable down; both zero means one unavailable), as ResolveFenceposts does.
fn fenceposts(d: &Value, replicas: i64) -> (i64, i64) {
    if d.pointer("/spec/strategy/type").and_then(Value::as_str) == Some("Recreate") {
        return (0, 0);
    }
    let resolve = |v: Option<&Value>, up: bool| -> i64 {
        match v {
            Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
            Some(Value::String(s)) if s.ends_with('%') => {
                let p: i64 = s.trim_end_matches('%').parse().unwrap_or(25);
                if up {
                    (p * replicas + 99) / 100
                } else {
                    p * replicas / 100
                }
            }
            Some(Value::String(s)) => s.parse().unwrap_or(0),
            _ => {
                if up {
                    (25 * replicas + 99) / 100
                } else {
                    25 * replicas / 100
                }
            }
        }
    };
    let ru = d.pointer("/spec/strategy/rollingUpdate");
    let surge = resolve(ru.and_then(|r| r.get("maxSurge")), true);
    let mut unavailable = resolve(ru.and_then(|r| r.get("maxUnavailable")), false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

/// MaxUnavailable as the Available condition uses it.
fn max_unavailable(d: &Value, replicas: i64) -> i64 {
    if replicas == 0 {
        return 0;
    }
    fenceposts(d, replicas).1.min(replicas)
}

fn now() -> String {
    ops::now()
}

fn new_condition(ty: &str, status: &str, reason: &str, message: &str) -> Value {
    let now = now();
    json!({"type": ty, "status": status, "lastUpdateTime": now, "lastTransitionTime": now,
           "reason": reason, "message": message})
}

/// SetDeploymentCondition: no change for the same status and reason; keeps the
/// transition time when only the reason changes; moves the condition to the end.
fn set_condition(conds: &mut Vec<Value>, mut c: Value) {
    let ty = c["type"].clone();
    if let Some(cur) = conds.iter().find(|x| x["type"] == ty) {
        if cur["status"] == c["status"] && cur["reason"] == c["reason"] {
            return;
        }
        if cur["status"] == c["status"] {
            c["lastTransitionTime"] = cur["lastTransitionTime"].clone();
        }
    }
    conds.retain(|x| x["type"] != ty);
    conds.push(c);
}

fn is_active_pod(p: &Value) -> bool {
    !deleting(p)
        && !matches!(
            p.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        )
}

fn pod_ready(p: &Value) -> bool {
    is_true(p, "Ready")
}

/// Ready for at least minReadySeconds.
fn pod_available(p: &Value, min_ready: i64) -> bool {
    if !pod_ready(p) {
        return false;
    }
    if min_ready <= 0 {
        return true;
    }
    let since = condition(p, "Ready")
        .and_then(|c| c.get("lastTransitionTime"))
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    since.is_some_and(|t| {
        (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds() >= min_ready
    })
}

/// The key of an object in the dirty sets.
fn ns_name(o: &Value) -> super::NsName {
    (
        meta_str(o, "namespace").unwrap_or("").to_string(),
        meta_str(o, "name").unwrap_or("").to_string(),
    )
}

/// A Deployment no timer can change (in a timer pass): nothing of it changed since its
/// last sync, which saw its current generation, and time cannot move its status: no
/// minReadySeconds wait, and no progress deadline that could expire soon (complete,
/// already exceeded, none, or more than two seconds away). Whatever else it waits for
/// (its ReplicaSets, its pods) comes as a change that marks it dirty.
fn deployment_settled(sim: &Sim, d: &Value) -> bool {
    if sim.dirty.deployments.contains(&ns_name(d))
        || d.pointer("/spec/paused").and_then(Value::as_bool) == Some(true)
        || int(d, "/status/observedGeneration") != int(d, "/metadata/generation")
    {
        return false;
    }
    let want = spec_replicas(d);
    let complete = [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ]
    .iter()
    .all(|f| int(d, &format!("/status/{f}")) == want)
        && int(d, "/status/unavailableReplicas") == 0
        && is_true(d, "Available");
    if int(d, "/spec/minReadySeconds") > 0 && !complete {
        return false;
    }
    let Some(progressing) = condition(d, "Progressing") else {
        return true;
    };
    let reason = progressing.get("reason").and_then(Value::as_str);
    if complete && reason == Some("NewReplicaSetAvailable") {
        return true;
    }
    let deadline = d
        .pointer("/spec/progressDeadlineSeconds")
        .and_then(Value::as_i64)
        .filter(|s| *s != i32::MAX as i64);
    let Some(deadline) = deadline else {
        return true;
    };
    if matches!(
        reason,
        Some("NewReplicaSetAvailable" | "ProgressDeadlineExceeded")
    ) {
        return true;
    }
    progressing
        .get("lastUpdateTime")
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|t| {
            (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds() < deadline - 2
        })
}

/// A ReplicaSet no timer can change: nothing of it changed since its last sync, which saw
/// its generation, created all its pods without a failure, and no pod waits out
/// minReadySeconds (what else it waits for, its pods, comes as changes).
fn rs_settled(sim: &Sim, rs: &Value) -> bool {
    if sim.dirty.replicasets.contains(&ns_name(rs)) || condition(rs, "ReplicaFailure").is_some() {
        return false;
    }
    int(rs, "/status/observedGeneration") == int(rs, "/metadata/generation")
        && int(rs, "/status/replicas") == spec_replicas(rs)
        && (int(rs, "/spec/minReadySeconds") == 0
            || int(rs, "/status/readyReplicas") == int(rs, "/status/availableReplicas"))
}

/// The deployment controller: one sync per Deployment.
pub(super) fn deployments(sim: &mut Sim) {
    if sim.full_pass {
        let all_rs = sim.list(sim.k.replicaset);
        let pods = sim.list(sim.k.pod);
        let rs_index = by_controller(&all_rs);
        let pod_index = by_controller(&pods);
        for d in sim.list(sim.k.deployment) {
            if !deleting(&d) && !deployment_settled(sim, &d) {
                let owned = rs_index.get(uid(&d)).map(Vec::as_slice).unwrap_or(&[]);
                sync_deployment(sim, &d, owned, &pod_index);
            }
        }
        return;
    }
    // Only the Deployments whose own object, ReplicaSets or pods changed.
    for d in sim.candidates(sim.k.deployment, &sim.dirty.deployments, false) {
        if deleting(&d) {
            continue;
        }
        let all_rs = sim.controlled(sim.k.replicaset, uid(&d));
        let pods: Vec<(String, Vec<Arc<Value>>)> = all_rs
            .iter()
            .map(|rs| (uid(rs).to_string(), sim.controlled(sim.k.pod, uid(rs))))
            .collect();
        let pod_index: HashMap<&str, Vec<&Value>> = pods
            .iter()
            .map(|(u, ps)| (u.as_str(), ps.iter().map(|p| &**p).collect()))
            .collect();
        let owned: Vec<&Value> = all_rs.iter().map(|rs| &**rs).collect();
        sync_deployment(sim, &d, &owned, &pod_index);
    }
}

/// Objects by the uid of their controller ownerReference (so that each sync does not
/// scan every object).
pub(crate) fn by_controller(objs: &[Arc<Value>]) -> HashMap<&str, Vec<&Value>> {
    let mut index: HashMap<&str, Vec<&Value>> = HashMap::new();
    for o in objs {
        if let Some(u) = controller_uid(o) {
            index.entry(u).or_default().push(o);
        }
    }
    index
}

fn scale_rs(sim: &Sim, d: &Value, rs: &Value, to: i64, surge: i64) -> bool {
    let from = spec_replicas(rs);
    let mut new = rs.clone();
    new["spec"]["replicas"] = json!(to);
    let desired = spec_replicas(d);
    let ann = meta_mut(&mut new)
        .entry("annotations")
        .or_insert_with(|| json!({}));
    ann[DESIRED] = json!(desired.to_string());
    ann[MAX_REPLICAS] = json!((desired + surge).to_string());
    if new == *rs {
        return false;
    }
    if !write_object(&sim.store, sim.k.replicaset, new, KCM) {
        return false;
    }
    if from != to {
        let dir = if to > from { "up" } else { "down" };
        let msg = format!(
            "Scaled {dir} replica set {} from {from} to {to}",
            meta_str(rs, "name").unwrap_or("")
        );
        sim.event(
            d,
            sim.k.deployment,
            "Normal",
            "ScalingReplicaSet",
            &msg,
            "deployment-controller",
        );
    }
    true
}

/// One sync of one Deployment (syncDeployment): roll out, then report status.
fn sync_deployment(sim: &Sim, d: &Value, all_rs: &[&Value], pods: &HashMap<&str, Vec<&Value>>) {
    let mut sync = DeploymentSync::new(sim, d, all_rs);
    // A paused Deployment is neither scaled nor rolled out, but its status still follows
    // its ReplicaSets.
    if !sync.paused {
        if sync.renumber_new_rs() || sync.update_new_rs_min_ready() {
            return;
        }
        sync.rollout(pods);
    }
    let counts = sync.counts();
    sync.set_available(counts.available);
    sync.set_paused_progress();
    sync.set_progress(&counts);
    sync.set_replica_failure();
    sync.write_status(&counts);
}

/// One sync of one Deployment: its ReplicaSets and what the sync has done to them so far.
/// The rollout phase changes `sizes` and may create the new ReplicaSet; the status phase
/// reads both, so they share this state rather than passing it along.
struct DeploymentSync<'a> {
    sim: &'a Sim,
    d: &'a Value,
    /// The Deployment's ReplicaSets, oldest first.
    owned: Vec<Value>,
    /// Where the new ReplicaSet sits in `owned`, if it existed before this sync.
    new_idx: Option<usize>,
    /// Indices of the old ReplicaSets in `owned`.
    olds: Vec<usize>,
    /// Spec replicas as this sync leaves them (index into `owned`; the new RS may be created).
    sizes: Vec<i64>,
    /// The new ReplicaSet, found or created by this sync.
    new_rs: Option<Value>,
    template: Value,
    replicas: i64,
    surge: i64,
    max_old_rev: i64,
    paused: bool,
    has_deadline: bool,
    /// The Deployment's conditions as this sync leaves them.
    conds: Vec<Value>,
}

/// Replica counts over all of a Deployment's ReplicaSets (calculateStatus).
struct Counts {
    replicas: i64,
    updated: i64,
    ready: i64,
    terminating: i64,
    available: i64,
    unavailable: i64,
}

/// The Deployment's live ReplicaSets, oldest first, as the controller sorts by creation.
fn owned_replica_sets(d: &Value, all_rs: &[&Value]) -> Vec<Value> {
    let ns = meta_str(d, "namespace").unwrap_or("");
    let duid = uid(d);
    let mut owned: Vec<Value> = all_rs
        .iter()
        .filter(|rs| {
            meta_str(rs, "namespace") == Some(ns)
                && controller_uid(rs) == Some(duid)
                && !deleting(rs)
        })
        .map(|rs| (**rs).clone())
        .collect();
    owned.sort_by(|a, b| {
        (meta_str(a, "creationTimestamp"), meta_str(a, "name"))
            .cmp(&(meta_str(b, "creationTimestamp"), meta_str(b, "name")))
    });
    owned
}

impl<'a> DeploymentSync<'a> {
    fn new(sim: &'a Sim, d: &'a Value, all_rs: &[&Value]) -> Self {
        let name = meta_str(d, "name").unwrap_or("");
        let owned = owned_replica_sets(d, all_rs);
        let template = d.pointer("/spec/template").cloned().unwrap_or(json!({}));
        // The new ReplicaSet has the template's hash in its name (robust to defaulting
        // differences) or, like the real EqualIgnoreHash, the same template.
        // The hash only changes with the template, so with the generation.
        let generation = int(d, "/metadata/generation");
        let hash = {
            let mut cache = sim.template_hashes.borrow_mut();
            match cache.get(uid(d)) {
                Some((g, h)) if *g == generation => h.clone(),
                _ => {
                    let h = template_hash(&template);
                    cache.insert(uid(d).to_string(), (generation, h.clone()));
                    h
                }
            }
        };
        let new_name = format!("{name}-{hash}");
        let new_idx = owned.iter().position(|rs| {
            meta_str(rs, "name") == Some(new_name.as_str())
                || without_hash(&rs["spec"]["template"]) == template
        });
        let replicas = spec_replicas(d);
        let (surge, _) = fenceposts(d, replicas);
        let paused = d.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
        let conds: Vec<Value> = d
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let has_deadline = d
            .pointer("/spec/progressDeadlineSeconds")
            .and_then(Value::as_i64)
            .is_some_and(|s| s != i32::MAX as i64);
        let max_old_rev = owned
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != new_idx)
            .map(|(_, rs)| revision(rs))
            .max()
            .unwrap_or(0);
        DeploymentSync {
            sim,
            d,
            sizes: owned.iter().map(spec_replicas).collect(),
            new_rs: new_idx.map(|i| owned[i].clone()),
            olds: (0..owned.len()).filter(|i| Some(*i) != new_idx).collect(),
            owned,
            new_idx,
            template,
            replicas,
            surge,
            max_old_rev,
            paused,
            has_deadline,
            conds,
        }
    }

    /// An existing new ReplicaSet takes the next revision (e.g. after a rollback). The
    /// sync ends there; the write wakes the next pass, which carries on from it.
    fn renumber_new_rs(&self) -> bool {
        let Some(rs) = &self.new_rs else {
            return false;
        };
        if revision(rs) > self.max_old_rev || self.olds.is_empty() {
            return false;
        }
        let mut upd = rs.clone();
        meta_mut(&mut upd)
            .entry("annotations")
            .or_insert_with(|| json!({}))[REVISION] = json!((self.max_old_rev + 1).to_string());
        write_object(&self.sim.store, self.sim.k.replicaset, upd, KCM);
        true
    }

    /// The existing new ReplicaSet takes the Deployment's minReadySeconds when it changed
    /// (pkg/controller/deployment/sync.go, `getNewReplicaSet`: `minReadySecondsNeedsUpdate`
    /// updates the ReplicaSet), so its pods count as available only that long after they
    /// are ready. The sync ends there; the write wakes the next pass.
    fn update_new_rs_min_ready(&self) -> bool {
        let Some(rs) = &self.new_rs else {
            return false;
        };
        let wanted = int(self.d, "/spec/minReadySeconds");
        if int(rs, "/spec/minReadySeconds") == wanted {
            return false;
        }
        let mut upd = rs.clone();
        upd["spec"]["minReadySeconds"] = json!(wanted);
        write_object(&self.sim.store, self.sim.k.replicaset, upd, KCM);
        true
    }

    /// Scales the ReplicaSets one step towards the template, then drops excess history.
    fn rollout(&mut self, pods: &HashMap<&str, Vec<&Value>>) {
        if let Some(rs) = &self.new_rs
            && self.has_deadline
            && condition(self.d, "Progressing").is_none()
        {
            let msg = format!(
                "Found new replica set {:?}",
                meta_str(rs, "name").unwrap_or("")
            );
            set_condition(
                &mut self.conds,
                new_condition("Progressing", "True", "FoundNewReplicaSet", &msg),
            );
        }
        let old_pods_running = self.olds.iter().any(|&i| {
            pods.get(uid(&self.owned[i])).is_some_and(|ps| {
                ps.iter().any(|p| {
                    !matches!(
                        p.pointer("/status/phase").and_then(Value::as_str),
                        Some("Succeeded" | "Failed")
                    )
                })
            })
        });
        let recreate = self
            .d
            .pointer("/spec/strategy/type")
            .and_then(Value::as_str)
            == Some("Recreate");
        if recreate {
            self.recreate(old_pods_running);
        } else {
            self.rolling_update();
        }
        cleanup_history(self.sim, self.d, &self.owned, &self.olds, &self.sizes);
    }

    /// Recreate: every old ReplicaSet goes to zero, and only once their pods are gone
    /// does the new one get its replicas.
    fn recreate(&mut self, old_pods_running: bool) {
        let mut scaled = false;
        for &i in &self.olds {
            if self.sizes[i] > 0 {
                scaled |= scale_rs(self.sim, self.d, &self.owned[i], 0, self.surge);
                self.sizes[i] = 0;
            }
        }
        if scaled || old_pods_running {
            return;
        }
        match &self.new_rs {
            None => {
                self.new_rs = create_rs(
                    self.sim,
                    self.d,
                    &self.template,
                    self.replicas,
                    self.max_old_rev + 1,
                    self.surge,
                    &mut self.conds,
                );
            }
            Some(rs) if spec_replicas(rs) != self.replicas => {
                scale_rs(self.sim, self.d, rs, self.replicas, self.surge);
            }
            Some(_) => {}
        }
    }

    /// RollingUpdate: the new ReplicaSet grows within maxSurge, the old ones shrink
    /// within maxUnavailable.
    fn rolling_update(&mut self) {
        let replicas = self.replicas;
        let surge = self.surge;
        let current: i64 = self.sizes.iter().sum();
        let max_total = replicas + surge;
        let Some(ni) = self.new_idx else {
            let want = if current >= max_total {
                0
            } else {
                (max_total - current).min(replicas)
            };
            self.new_rs = create_rs(
                self.sim,
                self.d,
                &self.template,
                want,
                self.max_old_rev + 1,
                surge,
                &mut self.conds,
            );
            return;
        };
        let new = &self.owned[ni];
        let have = self.sizes[ni];
        if have > replicas {
            scale_rs(self.sim, self.d, new, replicas, surge);
            self.sizes[ni] = replicas;
        } else if have < replicas && current < max_total {
            let to = have + (max_total - current).min(replicas - have);
            scale_rs(self.sim, self.d, new, to, surge);
            self.sizes[ni] = to;
        } else if annotation(new, DESIRED) != Some(&replicas.to_string()) {
            scale_rs(self.sim, self.d, new, have, surge);
        }
        scale_down_olds(
            self.sim,
            self.d,
            &self.owned,
            &self.olds,
            ni,
            &mut self.sizes,
            replicas,
            surge,
        );
    }

    fn counts(&self) -> Counts {
        let all: Vec<&Value> = self
            .owned
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != self.new_idx)
            .map(|(_, rs)| rs)
            .chain(self.new_rs.iter())
            .collect();
        let sum = |p: &str| all.iter().map(|rs| int(rs, p)).sum::<i64>();
        let total_spec: i64 = self.sizes.iter().sum::<i64>()
            + if self.new_idx.is_none() {
                self.new_rs.as_ref().map(spec_replicas).unwrap_or(0)
            } else {
                0
            };
        let available = sum("/status/availableReplicas");
        Counts {
            replicas: sum("/status/replicas"),
            updated: self
                .new_rs
                .as_ref()
                .map(|rs| int(rs, "/status/replicas"))
                .unwrap_or(0),
            ready: sum("/status/readyReplicas"),
            terminating: sum("/status/terminatingReplicas"),
            available,
            unavailable: (total_spec - available).max(0),
        }
    }

    fn set_available(&mut self, available: i64) {
        let c = if available >= self.replicas - max_unavailable(self.d, self.replicas) {
            new_condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
            )
        } else {
            new_condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            )
        };
        set_condition(&mut self.conds, c);
    }

    /// checkPausedConditions: pausing and resuming show on Progressing (never over a timeout).
    fn set_paused_progress(&mut self) {
        let reason = self
            .conds
            .iter()
            .find(|c| c["type"] == "Progressing")
            .map(|c| c["reason"].clone());
        if !self.has_deadline
            || reason
                .as_ref()
                .is_some_and(|r| r == "ProgressDeadlineExceeded")
        {
            return;
        }
        let was_paused = reason.as_ref().is_some_and(|r| r == "DeploymentPaused");
        if self.paused && !was_paused {
            set_condition(
                &mut self.conds,
                new_condition(
                    "Progressing",
                    "Unknown",
                    "DeploymentPaused",
                    "Deployment is paused",
                ),
            );
        } else if !self.paused && was_paused {
            set_condition(
                &mut self.conds,
                new_condition(
                    "Progressing",
                    "Unknown",
                    "DeploymentResumed",
                    "Deployment is resumed",
                ),
            );
        }
    }

    /// syncRolloutStatus: Progressing says whether the rollout completed, still moves, or
    /// has made no progress within progressDeadlineSeconds.
    fn set_progress(&mut self, counts: &Counts) {
        let name = meta_str(self.d, "name").unwrap_or("");
        let rs_name = self
            .new_rs
            .as_ref()
            .and_then(|rs| meta_str(rs, "name"))
            .map(String::from);
        let about = |what: &str| match &rs_name {
            Some(n) => format!("ReplicaSet {n:?} {what}"),
            None => format!("Deployment {name:?} {what}"),
        };
        let cur = self
            .conds
            .iter()
            .find(|c| c["type"] == "Progressing")
            .cloned();
        let complete_before = counts.replicas == counts.updated
            && cur
                .as_ref()
                .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
        if !self.has_deadline || complete_before || self.paused {
            return;
        }
        let replicas = self.replicas;
        let old = self.d.get("status").cloned().unwrap_or(json!({}));
        let o = |p: &str| int(&old, p);
        let complete = counts.updated == replicas
            && counts.replicas == replicas
            && counts.available == replicas;
        let progressing = counts.updated > o("/updatedReplicas")
            || counts.ready > o("/readyReplicas")
            || (o("/replicas") - o("/updatedReplicas")) > (counts.replicas - counts.updated)
            || counts.available > o("/availableReplicas");
        let deadline = int(self.d, "/spec/progressDeadlineSeconds");
        let timed_out = cur.as_ref().is_some_and(|c| {
            if c["reason"] == "ProgressDeadlineExceeded" {
                return true;
            }
            if c["reason"] == "NewReplicaSetAvailable" {
                return false;
            }
            c["lastUpdateTime"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| {
                    (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds() >= deadline
                })
        });
        if complete {
            set_condition(
                &mut self.conds,
                new_condition(
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    &about("has successfully progressed."),
                ),
            );
        } else if progressing {
            let mut c = new_condition(
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                &about("is progressing."),
            );
            if let Some(cur) = cur.as_ref().filter(|c| c["status"] == "True") {
                c["lastTransitionTime"] = cur["lastTransitionTime"].clone();
            }
            self.conds.retain(|x| x["type"] != "Progressing");
            self.conds.push(c);
        } else if timed_out {
            set_condition(
                &mut self.conds,
                new_condition(
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    &about("has timed out progressing."),
                ),
            );
        }
    }

    /// ReplicaFailure moves up from the ReplicaSets (the new one first).
    fn set_replica_failure(&mut self) {
        let failure = self
            .new_rs
            .iter()
            .chain(self.olds.iter().map(|&i| &self.owned[i]))
            .find_map(|rs| condition(rs, "ReplicaFailure").cloned());
        match failure {
            Some(mut f) => {
                f["lastUpdateTime"] = f["lastTransitionTime"].clone();
                set_condition(&mut self.conds, f);
            }
            None => self.conds.retain(|c| c["type"] != "ReplicaFailure"),
        }
    }

    fn write_status(self, counts: &Counts) {
        let (sim, d) = (self.sim, self.d);
        let ns = meta_str(d, "namespace").unwrap_or("");
        let name = meta_str(d, "name").unwrap_or("");
        let generation = int(d, "/metadata/generation");
        let mut status = json!({"observedGeneration": generation, "conditions": self.conds});
        for (k, v) in [
            ("replicas", counts.replicas),
            ("updatedReplicas", counts.updated),
            ("readyReplicas", counts.ready),
            ("availableReplicas", counts.available),
            ("unavailableReplicas", counts.unavailable),
        ] {
            if v != 0 {
                status[k] = json!(v);
            }
        }
        // deployment sync.go calculateStatus: the ReplicaSets' terminatingReplicas summed
        // (GetTerminatingReplicaCountForReplicaSets), 0 included.
        status["terminatingReplicas"] = json!(counts.terminating);
        if let Some(c) = d.pointer("/status/collisionCount") {
            status["collisionCount"] = c.clone();
        }
        // The revision annotation goes through the status update on the real server
        // (getNewReplicaSet's UpdateStatus; the status strategy keeps annotations), so it
        // does not bump the generation: one `/status` write carries both.
        let kind = sim.k.deployment;
        let mut target = d.clone();
        if let Some(rs) = &self.new_rs {
            let rev = annotation(rs, REVISION).unwrap_or("").to_string();
            if !rev.is_empty() && annotation(d, REVISION) != Some(rev.as_str()) {
                meta_mut(&mut target)
                    .entry("annotations")
                    .or_insert_with(|| json!({}))[REVISION] = json!(rev);
            }
        }
        if target != *d {
            let mut status = status;
            super::strip_nulls(&mut status);
            target["status"] = status;
            let _ = ops::update(&sim.store, kind, ns, name, "status", target, &manager(KCM));
        } else {
            write_status(&sim.store, kind, d, status, KCM);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn scale_down_olds(
    sim: &Sim,
    d: &Value,
    owned: &[Value],
    olds: &[usize],
    ni: usize,
    sizes: &mut [i64],
    replicas: i64,
    surge: i64,
) {
    let old_count: i64 = olds.iter().map(|&i| sizes[i]).sum();
    if old_count == 0 {
        return;
    }
    let all_count: i64 = sizes.iter().sum();
    let min_available = replicas - max_unavailable(d, replicas);
    let new_unavailable = sizes[ni] - int(&owned[ni], "/status/availableReplicas");
    let mut budget = all_count - min_available - new_unavailable;
    if budget <= 0 {
        return;
    }
    // First the unhealthy old replicas (cleanupUnhealthyReplicas)...
    for &i in olds {
        if budget <= 0 {
            break;
        }
        let unhealthy = sizes[i] - int(&owned[i], "/status/availableReplicas");
        if unhealthy <= 0 {
            continue;
        }
        let down = unhealthy.min(budget).min(sizes[i]);
        let to = sizes[i] - down;
        scale_rs(sim, d, &owned[i], to, surge);
        sizes[i] = to;
        budget -= down;
    }
    // ...then available ones, keeping minAvailable (scaleDownOldReplicaSetsForRollingUpdate).
    let available: i64 = owned
        .iter()
        .map(|rs| int(rs, "/status/availableReplicas"))
        .sum();
    let mut total = (available - min_available).min(budget);
    for &i in olds {
        if total <= 0 {
            break;
        }
        if sizes[i] == 0 {
            continue;
        }
        let down = sizes[i].min(total);
        let to = sizes[i] - down;
        scale_rs(sim, d, &owned[i], to, surge);
        sizes[i] = to;
        total -= down;
    }
}

fn create_rs(
    sim: &Sim,
    d: &Value,
    template: &Value,
    replicas: i64,
    rev: i64,
    surge: i64,
    conds: &mut Vec<Value>,
) -> Option<Value> {
    let ns = meta_str(d, "namespace").unwrap_or("");
    let hash = template_hash(template);
    let name = format!("{}-{hash}", meta_str(d, "name").unwrap_or(""));
    let mut tmpl = template.clone();
    meta_mut(&mut tmpl)
        .entry("labels")
        .or_insert_with(|| json!({}))[HASH] = json!(hash);
    let mut selector = d.pointer("/spec/selector").cloned().unwrap_or(json!({}));
    if let Some(s) = selector.as_object_mut() {
        s.entry("matchLabels").or_insert_with(|| json!({}))[HASH] = json!(hash);
    }
    let mut annotations: Map<String, Value> = d
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    let desired = spec_replicas(d);
    annotations.insert(REVISION.into(), json!(rev.to_string()));
    annotations.insert(DESIRED.into(), json!(desired.to_string()));
    annotations.insert(MAX_REPLICAS.into(), json!((desired + surge).to_string()));
    let mut spec = json!({"replicas": replicas, "selector": selector, "template": tmpl});
    if let Some(m) = d.pointer("/spec/minReadySeconds") {
        spec["minReadySeconds"] = m.clone();
    }
    let rs = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {
            "name": name, "namespace": ns,
            "labels": tmpl["metadata"]["labels"],
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment",
                "name": meta_str(d, "name"), "uid": uid(d),
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    });
    match ops::create(&sim.store, sim.k.replicaset, ns, rs, &manager(KCM)) {
        Ok(r) => {
            sim.event(
                d,
                sim.k.deployment,
                "Normal",
                "ScalingReplicaSet",
                &format!("Scaled up replica set {name} from 0 to {replicas}"),
                "deployment-controller",
            );
            let msg = format!("Created new replica set {name:?}");
            set_condition(
                conds,
                new_condition("Progressing", "True", "NewReplicaSetCreated", &msg),
            );
            Some(r.object)
        }
        Err(_) => None,
    }
}

/// Deletes old, scaled-down ReplicaSets beyond revisionHistoryLimit (oldest first).
fn cleanup_history(sim: &Sim, d: &Value, owned: &[Value], olds: &[usize], sizes: &[i64]) {
    let limit = d
        .pointer("/spec/revisionHistoryLimit")
        .and_then(Value::as_i64)
        .unwrap_or(10);
    let idle: Vec<usize> = olds
        .iter()
        .copied()
        .filter(|&i| sizes[i] == 0 && int(&owned[i], "/status/replicas") == 0)
        .collect();
    let excess = idle.len() as i64 - limit;
    for &i in idle.iter().take(excess.max(0) as usize) {
        let rs = &owned[i];
        let _ = ops::delete(
            &sim.store,
            sim.k.replicaset,
            meta_str(rs, "namespace").unwrap_or(""),
            meta_str(rs, "name").unwrap_or(""),
            &DeleteOptions::default(),
        );
    }
}

/// The replicaset controller: creates and deletes pods to match spec.replicas and
/// reports the counts.
pub(super) fn replicasets(sim: &mut Sim) {
    if sim.full_pass {
        let pods = sim.list(sim.k.pod);
        let index = by_controller(&pods);
        for rs in sim.list(sim.k.replicaset) {
            if !deleting(&rs) && !rs_settled(sim, &rs) {
                let owned = index.get(uid(&rs)).map(Vec::as_slice).unwrap_or(&[]);
                sync_rs(sim, &rs, owned);
            }
        }
        return;
    }
    // Only the ReplicaSets whose own object or pods changed.
    for rs in sim.candidates(sim.k.replicaset, &sim.dirty.replicasets, false) {
        if !deleting(&rs) {
            let pods = sim.controlled(sim.k.pod, uid(&rs));
            let owned: Vec<&Value> = pods.iter().map(|p| &**p).collect();
            sync_rs(sim, &rs, &owned);
        }
    }
}

fn sync_rs(sim: &Sim, rs: &Value, pods: &[&Value]) {
    let ns = meta_str(rs, "namespace").unwrap_or("");
    let owned: Vec<&Value> = pods
        .iter()
        .copied()
        .filter(|p| meta_str(p, "namespace") == Some(ns))
        .collect();
    let mut active: Vec<&Value> = owned.iter().copied().filter(|p| is_active_pod(p)).collect();
    let want = spec_replicas(rs);
    let have = active.len() as i64;
    let mut failure: Option<String> = None;
    let mut created = 0;
    if have < want {
        for _ in have..want {
            match create_pod(sim, rs) {
                Ok(pod) => {
                    created += 1;
                    let msg = format!("Created pod: {}", meta_str(&pod, "name").unwrap_or(""));
                    sim.event(
                        rs,
                        sim.k.replicaset,
                        "Normal",
                        "SuccessfulCreate",
                        &msg,
                        "replicaset-controller",
                    );
                }
                Err(e) => {
                    let msg = e.message.clone();
                    // The controller reports the failure once per sync, not per pod.
                    if condition(rs, "ReplicaFailure").and_then(|c| c["message"].as_str())
                        != Some(msg.as_str())
                    {
                        sim.event(
                            rs,
                            sim.k.replicaset,
                            "Warning",
                            "FailedCreate",
                            &format!("Error creating: {msg}"),
                            "replicaset-controller",
                        );
                    }
                    failure = Some(msg);
                    break;
                }
            }
        }
    } else if have > want {
        // getPodsToDelete: unscheduled, pending, not ready, shortest ready, most restarts, newest first.
        active.sort_by_key(|p| {
            let assigned = p
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            let phase = match p.pointer("/status/phase").and_then(Value::as_str) {
                Some("Pending") => 0,
                Some("Unknown") => 1,
                _ => 2,
            };
            let restarts: i64 = p
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map(|cs| cs.iter().map(|c| int(c, "/restartCount")).sum())
                .unwrap_or(0);
            let created = meta_str(p, "creationTimestamp").unwrap_or("").to_string();
            (
                assigned,
                phase,
                pod_ready(p),
                -restarts,
                std::cmp::Reverse(created),
            )
        });
        for p in active.iter().take((have - want) as usize) {
            let name = meta_str(p, "name").unwrap_or("");
            if ops::delete(&sim.store, sim.k.pod, ns, name, &DeleteOptions::default()).is_ok() {
                sim.event(
                    rs,
                    sim.k.replicaset,
                    "Normal",
                    "SuccessfulDelete",
                    &format!("Deleted pod: {name}"),
                    "replicaset-controller",
                );
            }
        }
    }
    if created > 0 {
        // The new pods show up in the next pass's counts.
        return;
    }
    let min_ready = int(rs, "/spec/minReadySeconds");
    let tmpl_labels = rs
        .pointer("/spec/template/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    let labelled = active
        .iter()
        .filter(|p| {
            tmpl_labels.as_object().is_none_or(|m| {
                m.iter()
                    .all(|(k, v)| p.pointer("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
            })
        })
        .count() as i64;
    let ready = active.iter().filter(|p| pod_ready(p)).count() as i64;
    let available = active
        .iter()
        .filter(|p| pod_available(p, min_ready))
        .count() as i64;
    // replica_set_utils.go calculateStatus: terminatingReplicas counts the owned pods being
    // deleted that have not finished (controller.FilterTerminatingPods), set even when 0
    // (the DeploymentReplicaSetTerminatingReplicas feature, on in 1.36).
    let terminating = owned
        .iter()
        .filter(|p| {
            deleting(p)
                && !matches!(
                    p.pointer("/status/phase").and_then(Value::as_str),
                    Some("Succeeded" | "Failed")
                )
        })
        .count();
    let mut status = json!({"replicas": active.len(), "terminatingReplicas": terminating});
    for (k, v) in [
        ("fullyLabeledReplicas", labelled),
        ("readyReplicas", ready),
        ("availableReplicas", available),
    ] {
        if v != 0 {
            status[k] = json!(v);
        }
    }
    status["observedGeneration"] = json!(int(rs, "/metadata/generation"));
    let mut conds: Vec<Value> = rs
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match failure {
        // calculateStatus (pkg/controller/replicaset/replica_set_utils.go) adds the condition
        // only when there is none: a later failure, with another message (a quota refusal
        // names the generated pod), leaves the first one as it was.
        Some(msg) => {
            let keep = conds.iter().any(|c| c["type"] == "ReplicaFailure");
            if !keep {
                conds.push(
                    json!({"type": "ReplicaFailure", "status": "True", "lastTransitionTime": now(),
                                  "reason": "FailedCreate", "message": msg}),
                );
            }
        }
        None if have >= want => conds.retain(|c| c["type"] != "ReplicaFailure"),
        None => {}
    }
    if !conds.is_empty() {
        status["conditions"] = json!(conds);
    }
    write_status(&sim.store, sim.k.replicaset, rs, status, KCM);
}

fn create_pod(sim: &Sim, rs: &Value) -> Result<Value, crate::ApiError> {
    let ns = meta_str(rs, "namespace").unwrap_or("");
    let rs_name = meta_str(rs, "name").unwrap_or("");
    let tmpl = rs.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let mut meta = json!({
        "generateName": format!("{rs_name}-"),
        "namespace": ns,
        "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name, "uid": uid(rs),
            "controller": true, "blockOwnerDeletion": true,
        }],
    });
    for f in ["labels", "annotations"] {
        if let Some(v) = tmpl.pointer(&format!("/metadata/{f}")) {
            meta[f] = v.clone();
        }
    }
    let spec = tmpl.get("spec").cloned().unwrap_or(json!({}));
    // The API server's Priority admission sets the priority; a missing class is refused
    // here first so the message names the generateName, as the real admission's does.
    if let Some(pc) = spec.get("priorityClassName").and_then(Value::as_str)
        && !pc.is_empty()
        && sim.store.get(sim.k.priorityclass, "", pc).is_none()
    {
        return Err(crate::ApiError::new(
            403,
            "Forbidden",
            format!("pods \"{rs_name}-\" is forbidden: no PriorityClass with name {pc} was found"),
        ));
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec});
    ops::create(&sim.store, sim.k.pod, ns, pod, &manager(KCM)).map(|r| r.object)
}

/// A stand-in for the PersistentVolume controller with a default StorageClass: a pending
/// claim binds at once to a volume named `pvc-<uid>` of the requested size.
pub(super) fn claims(sim: &Sim) {
    for pvc in sim.list(sim.k.pvc) {
        let phase = pvc.pointer("/status/phase").and_then(Value::as_str);
        if deleting(&pvc) || phase.is_some_and(|p| p != "Pending") {
            continue;
        }
        if pvc
            .pointer("/spec/volumeName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            let mut new = (*pvc).clone();
            new["spec"]["volumeName"] = json!(format!("pvc-{}", uid(&pvc)));
            let ann = meta_mut(&mut new)
                .entry("annotations")
                .or_insert_with(|| json!({}));
            ann["pv.kubernetes.io/bind-completed"] = json!("yes");
            ann["pv.kubernetes.io/bound-by-controller"] = json!("yes");
            write_object(&sim.store, sim.k.pvc, new, KCM);
            continue;
        }
        let mut status = json!({"phase": "Bound"});
        if let Some(m) = pvc.pointer("/spec/accessModes") {
            status["accessModes"] = m.clone();
        }
        if let Some(q) = pvc.pointer("/spec/resources/requests/storage") {
            status["capacity"] = json!({"storage": q});
        }
        write_status(&sim.store, sim.k.pvc, &pvc, status, KCM);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenceposts_round_like_the_real_controller() {
        let d =
            |s: Value| json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": s}}});
        assert_eq!(fenceposts(&d(json!({})), 4), (1, 1));
        assert_eq!(fenceposts(&d(json!({})), 1), (1, 0));
        assert_eq!(
            fenceposts(&d(json!({"maxSurge": 0, "maxUnavailable": 0})), 3),
            (0, 1)
        );
        assert_eq!(
            fenceposts(&d(json!({"maxSurge": "50%", "maxUnavailable": "50%"})), 3),
            (2, 1)
        );
        assert_eq!(
            fenceposts(&json!({"spec": {"strategy": {"type": "Recreate"}}}), 3),
            (0, 0)
        );
    }

    #[test]
    fn template_hash_is_stable_and_safe() {
        let t =
            json!({"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}});
        let h = template_hash(&t);
        assert_eq!(h, template_hash(&t));
        assert!(
            h.bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
        assert_ne!(h, template_hash(&json!({})));
    }
}
