//! The LeaderWorkerSet controller (leaderworkerset.x-k8s.io/v1), after kubernetes-sigs/lws
//! v0.10.0: its LWS controller (`pkg/controllers/leaderworkerset_controller.go`), pod
//! controller (`pkg/controllers/pod_controller.go`) and pod webhook
//! (`pkg/webhooks/pod_webhook.go`), with the defaults of its LWS webhook
//! (`pkg/webhooks/leaderworkerset_webhook.go` `Default`). It runs only when the
//! LeaderWorkerSet CRD is installed (from the published manifest); without it there is
//! nothing to do.
//!
//! Simplification: upstream creates a leader StatefulSet (one leader pod per group) and,
//! per leader pod, a worker StatefulSet owned by that pod. Here the pods are created
//! directly, owned by the LeaderWorkerSet (a controller ownerReference), with what those
//! StatefulSets would give them: the names `<lws>-<i>` and `<lws>-<i>-<j>`, `hostname`
//! and `subdomain`, the LWS labels, annotations and environment variables, and the
//! StatefulSet's `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index`
//! labels (not `controller-revision-hash`: there is no StatefulSet revision). No
//! StatefulSet, ControllerRevision or Event objects exist. What the StatefulSets do is
//! done on the pods:
//! - a leader pod that goes away takes its group's workers with it (the worker
//!   StatefulSet is garbage-collected through its owner, the leader pod);
//! - RecreateGroupOnPodRestart deletes every pod of a group whose pod restarted or is
//!   being deleted (`handleRestartPolicy` deletes the leader, foreground) and recreates
//!   the group once all its pods are gone;
//! - a rolling update replaces whole groups, highest index first, at most maxUnavailable
//!   groups not ready at a time (the leader StatefulSet's `maxUnavailable` rolling update
//!   above the partition); maxSurge is treated as 0 (no surge groups).
//!
//! The status (`updateStatus`, `updateConditions`) and the headless Service
//! (`CreateHeadlessServiceIfNotExists`) are as upstream.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value, json};

use super::{Sim, deleting, is_true, manager, uid, write_status};
use crate::ops::{self, DeleteOptions};
use crate::resources::{ResourceKind, meta_str};

const GROUP: &str = "leaderworkerset.x-k8s.io";
// api/leaderworkerset/v1/leaderworkerset_types.go
const NAME: &str = "leaderworkerset.sigs.k8s.io/name";
const GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
const WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
const GROUP_KEY: &str = "leaderworkerset.sigs.k8s.io/group-key";
const REVISION: &str = "leaderworkerset.sigs.k8s.io/template-revision-hash";
const SIZE: &str = "leaderworkerset.sigs.k8s.io/size";
const LEADER_NAME: &str = "leaderworkerset.sigs.k8s.io/leader-name";
const SUBDOMAIN_POLICY: &str = "leaderworkerset.sigs.k8s.io/subdomainPolicy";
/// The pods are the StatefulSet controller's (kube-controller-manager's) writes.
const KCM: &str = "kube-controller-manager";
/// The lws controller manager's own writes (its binary is `manager`: the API server
/// names the field manager after the client's user agent).
const LWS_MANAGER: &str = "manager";

pub(super) fn is_lws(kind: &ResourceKind) -> bool {
    kind.group == GROUP && kind.kind == "LeaderWorkerSet"
}

/// The name of the LeaderWorkerSet that controls `o`, if one does.
pub(super) fn controller_name(o: &Value) -> Option<&str> {
    o.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| {
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && r.get("kind").and_then(Value::as_str) == Some("LeaderWorkerSet")
                && r.get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|a| a.starts_with("leaderworkerset.x-k8s.io/"))
        })?
        .get("name")?
        .as_str()
}

/// The spec as the controller reads it, with the webhook's defaults.
struct Spec {
    replicas: i64,
    size: i64,
    leader_template: Value,
    worker_template: Value,
    /// `RecreateGroupOnPodRestart`, `RecreateGroupAfterStart` or `None`.
    restart: String,
    /// `LeaderCreated` or `LeaderReady`.
    startup: String,
    max_unavailable: i64,
    partition: i64,
    /// `UniquePerReplica`: a headless Service per group.
    unique_per_replica: bool,
    /// The template-revision-hash of the current spec.
    hash: String,
}

impl Spec {
    fn read(lws: &Value) -> Spec {
        let s = |p: &str| lws.pointer(p).and_then(Value::as_str).unwrap_or("");
        let replicas = lws
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(0);
        let size = lws
            .pointer("/spec/leaderWorkerTemplate/size")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(1);
        let worker_template = lws
            .pointer("/spec/leaderWorkerTemplate/workerTemplate")
            .cloned()
            .unwrap_or(json!({}));
        // leaderTemplate absent: the leader runs the worker template
        // (`constructLeaderStatefulSetApplyConfiguration`).
        let leader_template = lws
            .pointer("/spec/leaderWorkerTemplate/leaderTemplate")
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or_else(|| worker_template.clone());
        // LWS webhook `Default`: "" → RecreateGroupOnPodRestart, the deprecated Default →
        // None.
        let restart = match s("/spec/leaderWorkerTemplate/restartPolicy") {
            "" => "RecreateGroupOnPodRestart",
            "Default" => "None",
            other => other,
        }
        .to_string();
        let startup = match s("/spec/startupPolicy") {
            "" => "LeaderCreated",
            other => other,
        }
        .to_string();
        // A nil rollingUpdateConfiguration defaults to {maxUnavailable: 1, maxSurge: 0,
        // partition: 0}; percentages of maxUnavailable round down
        // (`rollingUpdateParameters`), and the StatefulSet takes at least 1.
        let ru = lws.pointer("/spec/rolloutStrategy/rollingUpdateConfiguration");
        let max_unavailable = match ru.and_then(|r| r.get("maxUnavailable")) {
            Some(Value::Number(n)) => n.as_i64().unwrap_or(1),
            Some(Value::String(p)) if p.ends_with('%') => {
                p.trim_end_matches('%').parse::<i64>().unwrap_or(0) * replicas / 100
            }
            Some(Value::String(p)) => p.parse().unwrap_or(1),
            _ => 1,
        }
        .max(1);
        let partition = ru
            .and_then(|r| r.get("partition"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .max(0);
        let policy = match s("/spec/networkConfig/subdomainPolicy") {
            "" => "Shared",
            other => other,
        };
        // The revision hash covers only the template and the network config
        // (`pkg/utils/revision/revision_utils.go` `getPatch`, `hashRevision`: FNV-32a,
        // SafeEncodeString): a change of replicas alone is no update.
        let hash = super::controllers::template_hash(&json!({
            "leaderWorkerTemplate": lws.pointer("/spec/leaderWorkerTemplate"),
            "networkConfig": {"subdomainPolicy": policy},
        }));
        Spec {
            replicas,
            size,
            leader_template,
            worker_template,
            restart,
            startup,
            max_unavailable,
            partition,
            unique_per_replica: policy == "UniquePerReplica",
            hash,
        }
    }
}

/// The controller: syncs the changed LeaderWorkerSets, or all of them on a full pass.
pub(super) fn run(sim: &mut Sim) {
    let Some(kind) = sim
        .store
        .kinds()
        .by_resource(GROUP, "v1", "leaderworkersets")
    else {
        return; // The CRD is not installed.
    };
    let all = sim.full_pass || sim.resync;
    for lws in sim.candidates(kind, &sim.dirty.lws, all) {
        if !deleting(&lws) {
            sync(sim, kind, &lws);
        }
    }
}

fn label<'a>(p: &'a Value, key: &str) -> Option<&'a str> {
    p.pointer("/metadata/labels")?.get(key)?.as_str()
}

fn name_of(p: &Value) -> &str {
    meta_str(p, "name").unwrap_or("")
}

fn phase(p: &Value) -> &str {
    p.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `PodRunningAndReady` (pkg/utils/pod/pod_utils.go): phase Running and Ready.
fn running_and_ready(p: &Value) -> bool {
    phase(p) == "Running" && is_true(p, "Ready")
}

/// `ContainerRestarted` (pod_utils.go): Running or Pending, with an init container or a
/// container whose restartCount is above 0.
fn container_restarted(p: &Value) -> bool {
    if !matches!(phase(p), "Running" | "Pending") {
        return false;
    }
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|f| {
            p.pointer(&format!("/status/{f}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .any(|c| c.get("restartCount").and_then(Value::as_i64).unwrap_or(0) > 0)
}

/// One group's pods.
#[derive(Default)]
struct Group<'a> {
    leader: Option<&'a Value>,
    workers: BTreeMap<i64, &'a Value>,
    /// Any pod of the group, leader or worker (a worker of another index too).
    all: Vec<&'a Value>,
}

impl Group<'_> {
    fn live_leader(&self) -> Option<&Value> {
        self.leader.filter(|l| !deleting(l))
    }

    /// The worker StatefulSet would exist: it is created once the leader is there (and,
    /// for LeaderReady, ready), and lives as long as that leader.
    fn workers_exist(&self, spec: &Spec) -> bool {
        !self.workers.is_empty()
            || self
                .live_leader()
                .is_some_and(|l| spec.startup != "LeaderReady" || is_true(l, "Ready"))
    }

    /// `StatefulsetReady` of the worker StatefulSet: all size-1 workers available.
    fn workers_ready(&self, spec: &Spec) -> bool {
        (1..spec.size).all(|j| {
            self.workers
                .get(&j)
                .is_some_and(|w| !deleting(w) && running_and_ready(w))
        })
    }

    /// Leader Running and Ready, and the worker StatefulSet ready (`updateConditions`).
    fn ready(&self, spec: &Spec) -> bool {
        self.leader.is_some_and(running_and_ready) && (spec.size == 1 || self.workers_ready(spec))
    }

    /// The leader and the worker StatefulSet on the current revision.
    fn updated(&self, spec: &Spec) -> bool {
        self.leader
            .is_some_and(|l| label(l, REVISION) == Some(spec.hash.as_str()))
            && self
                .workers
                .values()
                .all(|w| label(w, REVISION) == Some(spec.hash.as_str()))
    }
}

/// One LeaderWorkerSet's sync: its headless Service(s), then each group's restart, scale,
/// startup and rolling update, then its status. One function (~165 lines) on purpose: the
/// steps follow upstream's `Reconcile` (leaderworkerset_controller.go) and
/// `handleRestartPolicy` (pod_controller.go) in their order, each reading what the one
/// before decided about the same groups.
fn sync(sim: &Sim, kind: &'static ResourceKind, lws: &Value) {
    let ns = meta_str(lws, "namespace").unwrap_or("").to_string();
    let name = meta_str(lws, "name").unwrap_or("").to_string();
    let spec = Spec::read(lws);
    if !spec.unique_per_replica {
        // `reconcileHeadlessServices`: one Service `<lws>` for all pods.
        ensure_service(sim, lws, &ns, &name, json!({NAME: name}), owner_ref(lws));
    }
    let pods = sim.controlled(sim.k.pod, uid(lws));
    let mut groups: BTreeMap<i64, Group> = BTreeMap::new();
    for p in &pods {
        if meta_str(p, "namespace") != Some(ns.as_str()) {
            continue;
        }
        let (Some(g), Some(j)) = (
            label(p, GROUP_INDEX).and_then(|v| v.parse::<i64>().ok()),
            label(p, WORKER_INDEX).and_then(|v| v.parse::<i64>().ok()),
        ) else {
            continue;
        };
        let group = groups.entry(g).or_default();
        group.all.push(p);
        if j == 0 {
            group.leader = Some(p);
        } else {
            group.workers.insert(j, p);
        }
    }
    let delete = |p: &Value| {
        if !deleting(p) {
            let _ = ops::delete(
                &sim.store,
                sim.k.pod,
                &ns,
                name_of(p),
                &DeleteOptions::default(),
            );
        }
    };
    // Groups with deletions in this pass: nothing is created for them until they are gone.
    let mut recreating: HashSet<i64> = HashSet::new();
    for (&g, group) in &groups {
        if g >= spec.replicas {
            // Scale down: the leader StatefulSet removes the highest ordinals; their
            // worker StatefulSets go with their leaders.
            group.all.iter().for_each(|p| delete(p));
            recreating.insert(g);
            continue;
        }
        let Some(leader) = group.live_leader() else {
            // A leader that is gone or going takes its workers along (the worker
            // StatefulSet is owned by the leader pod).
            if group
                .all
                .iter()
                .any(|p| !deleting(p) && label(p, WORKER_INDEX) != Some("0"))
            {
                group.all.iter().for_each(|p| delete(p));
                recreating.insert(g);
            }
            continue;
        };
        // `handleRestartPolicy` (pod_controller.go) with `ContainerRestarted`/`PodDeleted`
        // (pod_utils.go): a restarted or deleted pod of the group (a worker of another
        // revision than its leader does not count) recreates the whole group.
        let recreate = match spec.restart.as_str() {
            "RecreateGroupOnPodRestart" => true,
            // RecreateGroupAfterStart: not while the group is incomplete or pending.
            "RecreateGroupAfterStart" => {
                group.all.len() as i64 >= spec.size
                    && group.all.iter().all(|p| phase(p) != "Pending")
            }
            _ => false,
        };
        let leader_hash = label(leader, REVISION);
        if recreate
            && group
                .all
                .iter()
                .filter(|p| {
                    label(p, WORKER_INDEX) == Some("0") || label(p, REVISION) == leader_hash
                })
                .any(|p| deleting(p) || container_restarted(p))
        {
            group.all.iter().for_each(|p| delete(p));
            recreating.insert(g);
        }
    }
    // Rolling update: whole groups from the highest index down to the partition, as long
    // as fewer than maxUnavailable groups are not ready (the leader StatefulSet's
    // maxUnavailable rolling update; `rollingUpdatePartition`).
    let unavailable = (0..spec.replicas)
        .filter(|g| recreating.contains(g) || !groups.get(g).is_some_and(|gr| gr.ready(&spec)))
        .count() as i64;
    let mut budget = spec.max_unavailable - unavailable;
    for g in (spec.partition..spec.replicas).rev() {
        if budget <= 0 {
            break;
        }
        let Some(group) = groups.get(&g) else {
            continue;
        };
        if recreating.contains(&g) {
            continue;
        }
        let outdated = group
            .live_leader()
            .is_some_and(|l| label(l, REVISION) != Some(spec.hash.as_str()));
        if outdated {
            group.all.iter().for_each(|p| delete(p));
            recreating.insert(g);
            if group.ready(&spec) {
                budget -= 1;
            }
        }
    }
    // Create what is missing.
    let recreate_groups = spec.restart != "None";
    for g in 0..spec.replicas {
        if recreating.contains(&g) {
            continue;
        }
        let empty = Group::default();
        let group = groups.get(&g).unwrap_or(&empty);
        if recreate_groups && group.all.iter().any(|p| deleting(p)) {
            continue; // The group is being deleted: it comes back once all of it is gone.
        }
        let leader_name = format!("{name}-{g}");
        let Some(leader) = group.leader else {
            if group.all.iter().all(|p| name_of(p) != leader_name) {
                create(sim, lws, &spec, &ns, &name, g, 0);
            }
            continue;
        };
        if deleting(leader) {
            continue;
        }
        if spec.unique_per_replica {
            // UniquePerReplica: a Service per group, owned by the leader pod
            // (`PodReconciler.Reconcile`), so it goes with the group.
            let owner = json!({"apiVersion": "v1", "kind": "Pod", "name": leader_name,
                               "uid": uid(leader), "controller": true, "blockOwnerDeletion": true});
            ensure_service(
                sim,
                lws,
                &ns,
                &leader_name,
                json!({NAME: name, GROUP_INDEX: g.to_string()}),
                owner,
            );
        }
        // The worker StatefulSet is created with the leader (LeaderCreated) or once the
        // leader is Ready (LeaderReady: `IsPodReady`), from the leader's revision; only
        // the current revision's template is known here.
        let startup_ok = spec.startup != "LeaderReady" || is_true(leader, "Ready");
        if spec.size > 1 && startup_ok && label(leader, REVISION) == Some(spec.hash.as_str()) {
            for j in 1..spec.size {
                let worker = format!("{leader_name}-{j}");
                if group.all.iter().all(|p| name_of(p) != worker) {
                    create(sim, lws, &spec, &ns, &name, g, j);
                }
            }
        }
    }
    write_lws_status(sim, kind, lws, &spec, &groups);
}

fn owner_ref(lws: &Value) -> Value {
    json!({
        "apiVersion": lws.get("apiVersion").and_then(Value::as_str).unwrap_or("leaderworkerset.x-k8s.io/v1"),
        "kind": "LeaderWorkerSet", "name": meta_str(lws, "name"), "uid": uid(lws),
        "controller": true, "blockOwnerDeletion": true,
    })
}

/// `CreateHeadlessServiceIfNotExists` (pkg/utils/controller/controller_utils.go): a
/// headless Service publishing not-ready addresses, with no ports; nothing is done when
/// a Service of that name exists, whatever it is.
fn ensure_service(sim: &Sim, lws: &Value, ns: &str, name: &str, selector: Value, owner: Value) {
    if sim.store.get(sim.k.service, ns, name).is_some() {
        return;
    }
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": name, "namespace": ns,
            "labels": {NAME: meta_str(lws, "name")},
            "ownerReferences": [owner],
        },
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": selector},
    });
    let _ = ops::create(&sim.store, sim.k.service, ns, svc, &manager(LWS_MANAGER));
}

/// The pod `j` (0: the leader) of group `g`, as the StatefulSets and the pod webhook
/// make it. One function (~110 lines): a list of the fields each of them sets, in order.
fn pod(lws: &Value, spec: &Spec, ns: &str, name: &str, g: i64, j: i64) -> Value {
    let leader_name = format!("{name}-{g}");
    let pod_name = if j == 0 {
        leader_name.clone()
    } else {
        format!("{leader_name}-{j}")
    };
    let tmpl = if j == 0 {
        &spec.leader_template
    } else {
        &spec.worker_template
    };
    let obj = |v: Option<&Value>| -> Map<String, Value> {
        v.and_then(Value::as_object).cloned().unwrap_or_default()
    };
    // Template labels, then the controller's (which win on a conflict): the StatefulSet
    // template's name / worker-index / template-revision-hash, the webhook's group-index
    // and group-key (`genGroupUniqueKey`: sha1 of "<namespace>/<leader pod name>"), and
    // the StatefulSet controller's own pod labels.
    let mut labels = obj(tmpl.pointer("/metadata/labels"));
    for (k, v) in [
        (NAME, name.to_string()),
        (GROUP_INDEX, g.to_string()),
        (WORKER_INDEX, j.to_string()),
        (
            GROUP_KEY,
            sha1_hex(format!("{ns}/{leader_name}").as_bytes()),
        ),
        (REVISION, spec.hash.clone()),
        ("statefulset.kubernetes.io/pod-name", pod_name.clone()),
        (
            "apps.kubernetes.io/pod-index",
            if j == 0 { g } else { j }.to_string(),
        ),
    ] {
        labels.insert(k.into(), json!(v));
    }
    let mut annotations = obj(tmpl.pointer("/metadata/annotations"));
    annotations.insert(SIZE.into(), json!(spec.size.to_string()));
    if j > 0 {
        annotations.insert(LEADER_NAME.into(), json!(leader_name));
    }
    if spec.unique_per_replica && j == 0 {
        annotations.insert(SUBDOMAIN_POLICY.into(), json!("UniquePerReplica"));
    }
    if let Some(v) =
        lws.pointer("/metadata/annotations/leaderworkerset.sigs.k8s.io~1exclusive-topology")
    {
        annotations.insert(
            "leaderworkerset.sigs.k8s.io/exclusive-topology".into(),
            v.clone(),
        );
    }
    let mut pod_spec = tmpl.get("spec").cloned().unwrap_or(json!({}));
    // The StatefulSet sets hostname = pod name and subdomain = its serviceName: `<lws>`
    // (Shared) or `<lws>-<i>` (UniquePerReplica, where the webhook sets the leader's to
    // its own name, the same).
    let subdomain = if spec.unique_per_replica {
        leader_name.clone()
    } else {
        name.to_string()
    };
    pod_spec["hostname"] = json!(pod_name);
    pod_spec["subdomain"] = json!(subdomain);
    // `AddLWSVariables` (pkg/utils/pod/pod_utils.go): first, in this order, in every
    // container and init container, replacing a user variable of the same name.
    let vars = [
        (
            "LWS_LEADER_ADDRESS",
            format!("{leader_name}.{subdomain}.{ns}"),
        ),
        ("LWS_GROUP_SIZE", spec.size.to_string()),
        ("LWS_WORKER_INDEX", j.to_string()),
    ];
    for list in ["containers", "initContainers"] {
        for c in pod_spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let user: Vec<Value> = c
                .get("env")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|e| {
                    let n = e.get("name").and_then(Value::as_str).unwrap_or("");
                    !vars.iter().any(|(v, _)| *v == n)
                })
                .cloned()
                .collect();
            let mut env: Vec<Value> = vars
                .iter()
                .map(|(n, v)| json!({"name": n, "value": v}))
                .collect();
            env.extend(user);
            c["env"] = json!(env);
        }
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": pod_name, "namespace": ns,
            "labels": labels, "annotations": annotations,
            "ownerReferences": [owner_ref(lws)],
        },
        "spec": pod_spec,
    })
}

fn create(sim: &Sim, lws: &Value, spec: &Spec, ns: &str, name: &str, g: i64, j: i64) {
    let p = pod(lws, spec, ns, name, g, j);
    let _ = ops::create(&sim.store, sim.k.pod, ns, p, &manager(KCM));
}

/// `updateStatus` and `updateConditions` (leaderworkerset_controller.go). One function
/// (~110 lines), as upstream's pair: the counts decide the conditions.
fn write_lws_status(
    sim: &Sim,
    kind: &'static ResourceKind,
    lws: &Value,
    spec: &Spec,
    groups: &BTreeMap<i64, Group>,
) {
    let generation = lws
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    // replicas: the leader StatefulSet's `status.replicas`, its created leader pods.
    let replicas = groups.values().filter(|g| g.leader.is_some()).count() as i64;
    let (mut ready_count, mut updated_count, mut ready_non_burst) = (0, 0, 0);
    let (mut part_updated, mut part_current, mut part_updated_ready) = (0, 0, 0);
    for (&index, group) in groups {
        if group.leader.is_none() {
            continue;
        }
        // No worker StatefulSet (yet): the group is skipped.
        if spec.size > 1 && !group.workers_exist(spec) {
            continue;
        }
        let in_partition = index < spec.replicas && index >= spec.partition;
        if in_partition {
            part_current += 1;
        }
        let ready = group.ready(spec);
        let updated = group.updated(spec);
        if ready {
            ready_count += 1;
        }
        if updated {
            updated_count += 1;
            if in_partition {
                part_updated += 1;
            }
        }
        if index < spec.replicas {
            if ready {
                ready_non_burst += 1;
            }
            if in_partition && ready && updated {
                part_updated_ready += 1;
            }
        }
    }
    let make = |ty: &str| {
        let (reason, message) = match ty {
            "Available" => ("AllGroupsReady", "All replicas are ready"),
            "UpdateInProgress" => ("GroupsUpdating", "Rolling Upgrade is in progress"),
            _ => ("GroupsProgressing", "Replicas are progressing"),
        };
        json!({"type": ty, "status": "True", "lastTransitionTime": ops::now(),
               "observedGeneration": generation, "reason": reason, "message": message})
    };
    let wanted: Vec<Value> = if part_updated < part_current {
        vec![make("UpdateInProgress"), make("Progressing")]
    } else if ready_non_burst == spec.replicas && part_updated_ready == part_current {
        vec![make("Available")]
    } else {
        vec![make("Progressing")]
    };
    let mut conds: Vec<Value> = lws
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    set_conditions(&mut conds, wanted, generation);

    let mut status: Map<String, Value> = lws
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    // omitempty int32/int64/string fields: a zero is not written.
    let mut put = |k: &str, v: Value| {
        let zero = v == json!(0) || v == json!("");
        if zero {
            status.remove(k);
        } else {
            status.insert(k.into(), v);
        }
    };
    put("replicas", json!(replicas));
    put("readyReplicas", json!(ready_count));
    put("updatedReplicas", json!(updated_count));
    put("observedGeneration", json!(generation));
    let selector = format!(
        "{NAME}={},{WORKER_INDEX}=0",
        meta_str(lws, "name").unwrap_or("")
    );
    if lws
        .pointer("/status/hpaPodSelector")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        put("hpaPodSelector", json!(selector));
    }
    put("conditions", json!(conds));
    if conds.is_empty() {
        status.remove("conditions");
    }
    write_status(&sim.store, kind, lws, Value::Object(status), LWS_MANAGER);
}

/// `setConditions`/`setCondition`/`exclusiveConditionTypes`: each new condition (True)
/// replaces one of its type whose status or observedGeneration differs, or is appended;
/// a True Available and Progressing, or Available and UpdateInProgress, exclude each
/// other: the old one turns False, keeping its reason and message. Every condition's
/// observedGeneration follows the generation.
fn set_conditions(conds: &mut Vec<Value>, wanted: Vec<Value>, generation: i64) {
    let exclusive = |a: &str, b: &str| {
        matches!(
            (a, b),
            ("Available", "Progressing")
                | ("Progressing", "Available")
                | ("Available", "UpdateInProgress")
                | ("UpdateInProgress", "Available")
        )
    };
    for new in wanted {
        let ty = new["type"].as_str().unwrap_or("").to_string();
        let mut found = false;
        for cur in conds.iter_mut() {
            let cur_ty = cur["type"].as_str().unwrap_or("").to_string();
            if cur_ty == ty {
                if cur["status"] != new["status"]
                    || cur["observedGeneration"] != new["observedGeneration"]
                {
                    *cur = new.clone();
                }
                found = true;
            } else if exclusive(&cur_ty, &ty) && cur["status"] == "True" {
                cur["status"] = json!("False");
                cur["lastTransitionTime"] = json!(ops::now());
                cur["observedGeneration"] = new["observedGeneration"].clone();
            }
        }
        if !found {
            conds.push(new);
        }
    }
    for c in conds.iter_mut() {
        if c["observedGeneration"] != json!(generation) {
            c["observedGeneration"] = json!(generation);
        }
    }
}

/// SHA-1 as lowercase hex, for `utils.Sha1Hash` (pkg/utils/utils.go).
fn sha1_hex(data: &[u8]) -> String {
    use sha1::Digest;
    sha1::Sha1::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The LWS webhook's defaults (`leaderworkerset_webhook.go` `Default`) when the spec
    /// leaves them out.
    #[test]
    fn webhook_defaults_apply_when_reading_the_spec() {
        let lws = json!({"metadata": {"name": "v"}, "spec": {"leaderWorkerTemplate": {
            "workerTemplate": {"spec": {"containers": [{"name": "c"}]}}}}});
        let s = Spec::read(&lws);
        assert_eq!(
            (s.replicas, s.size, s.max_unavailable, s.partition),
            (1, 1, 1, 0)
        );
        assert_eq!(s.restart, "RecreateGroupOnPodRestart");
        assert_eq!(s.startup, "LeaderCreated");
        assert!(!s.unique_per_replica);
        // No leaderTemplate: the leader runs the worker template.
        assert_eq!(s.leader_template, s.worker_template);
        let mut other = lws.clone();
        other["spec"]["replicas"] = json!(3);
        assert_eq!(
            Spec::read(&other).hash,
            s.hash,
            "replicas is no revision change"
        );
        other["spec"]["leaderWorkerTemplate"]["restartPolicy"] = json!("Default");
        let changed = Spec::read(&other);
        assert_eq!(changed.restart, "None");
        assert_ne!(changed.hash, s.hash);
    }

    /// Pod names, labels, annotations, hostname/subdomain and the injected environment
    /// (`AddLWSVariables`; the pod webhook's group-index and group-key).
    #[test]
    fn group_pods_carry_the_lws_labels_and_env() {
        let lws = json!({"apiVersion": "leaderworkerset.x-k8s.io/v1",
            "metadata": {"name": "vllm", "namespace": "ns", "uid": "u1"},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3,
                "leaderTemplate": {"metadata": {"labels": {"role": "leader"}},
                    "spec": {"containers": [{"name": "c", "env": [{"name": "X", "value": "1"},
                        {"name": "LWS_WORKER_INDEX", "value": "user"}]}]}},
                "workerTemplate": {"spec": {"initContainers": [{"name": "i"}],
                    "containers": [{"name": "c"}]}}}}});
        let spec = Spec::read(&lws);
        let leader = pod(&lws, &spec, "ns", "vllm", 1, 0);
        assert_eq!(leader["metadata"]["name"], "vllm-1");
        let l = &leader["metadata"]["labels"];
        assert_eq!(l["role"], "leader");
        assert_eq!(l[NAME], "vllm");
        assert_eq!(l[GROUP_INDEX], "1");
        assert_eq!(l[WORKER_INDEX], "0");
        assert_eq!(l[GROUP_KEY], json!(sha1_hex(b"ns/vllm-1")));
        assert_eq!(l[REVISION], json!(spec.hash));
        assert_eq!(leader["metadata"]["annotations"][SIZE], "3");
        assert_eq!(leader["spec"]["hostname"], "vllm-1");
        assert_eq!(leader["spec"]["subdomain"], "vllm");
        assert_eq!(
            leader["spec"]["containers"][0]["env"],
            json!([
                {"name": "LWS_LEADER_ADDRESS", "value": "vllm-1.vllm.ns"},
                {"name": "LWS_GROUP_SIZE", "value": "3"},
                {"name": "LWS_WORKER_INDEX", "value": "0"},
                {"name": "X", "value": "1"},
            ])
        );
        let worker = pod(&lws, &spec, "ns", "vllm", 1, 2);
        assert_eq!(worker["metadata"]["name"], "vllm-1-2");
        assert_eq!(worker["metadata"]["labels"][WORKER_INDEX], "2");
        assert_eq!(worker["metadata"]["labels"][GROUP_KEY], l[GROUP_KEY]);
        assert!(worker["metadata"]["labels"].get("role").is_none());
        assert_eq!(worker["metadata"]["annotations"][LEADER_NAME], "vllm-1");
        assert_eq!(worker["spec"]["hostname"], "vllm-1-2");
        for list in ["containers", "initContainers"] {
            assert_eq!(
                worker["spec"][list][0]["env"][2],
                json!({"name": "LWS_WORKER_INDEX", "value": "2"})
            );
        }
        assert_eq!(
            worker["metadata"]["ownerReferences"][0]["kind"],
            "LeaderWorkerSet"
        );
        assert_eq!(worker["metadata"]["ownerReferences"][0]["controller"], true);
    }

    /// `setCondition`: the displaced condition turns False keeping its reason/message.
    #[test]
    fn exclusive_conditions_flip_to_false() {
        let mut conds = Vec::new();
        let c = |ty: &str, reason: &str| {
            json!({"type": ty, "status": "True", "reason": reason,
            "message": "m", "observedGeneration": 1, "lastTransitionTime": "t"})
        };
        set_conditions(&mut conds, vec![c("Progressing", "GroupsProgressing")], 1);
        set_conditions(&mut conds, vec![c("Available", "AllGroupsReady")], 1);
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[0]["type"], "Progressing");
        assert_eq!(conds[0]["status"], "False");
        assert_eq!(conds[0]["reason"], "GroupsProgressing");
        assert_eq!(conds[1]["status"], "True");
        // An update: UpdateInProgress and Progressing; Available turns False.
        set_conditions(
            &mut conds,
            vec![
                c("UpdateInProgress", "GroupsUpdating"),
                c("Progressing", "GroupsProgressing"),
            ],
            2,
        );
        let by = |t: &str| conds.iter().find(|c| c["type"] == t).unwrap().clone();
        assert_eq!(by("Available")["status"], "False");
        assert_eq!(by("Available")["reason"], "AllGroupsReady");
        assert_eq!(by("UpdateInProgress")["status"], "True");
        assert_eq!(by("Progressing")["status"], "True");
        assert!(conds.iter().all(|c| c["observedGeneration"] == 2));
    }
}
