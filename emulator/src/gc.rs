//! The few kube-controller-manager loops every cluster has and that clients rely on:
//! the garbage collector (ownerReference cascades: background, foreground, orphan), the
//! namespace controller (emptying terminating namespaces), the service account controller
//! (a `default` ServiceAccount per namespace) and pod GC (force-deleting terminating pods
//! bound to nodes that do not exist).
//!
//! Runs as a background task woken after every write that changed something; each pass
//! works under the store lock and looks only at what the store queued for it (`State::
//! reindex`): written objects, the owners of written or removed objects, the dependents of
//! removed ones, the namespaces of namespaced changes, and pods after a node removal. An
//! object not queued has had none of the things its collection depends on change since it
//! was last looked at, so a full scan would find nothing to do for it either.

use std::sync::Arc;

use serde_json::Value;

use crate::ops::{Propagation, delete_locked, finalizers, set_finalizers};
use crate::resources::{ResourceKind, meta_str};
use crate::store::{State, Store};

/// Runs until the store is dropped by everyone else (the task is aborted on shutdown).
pub async fn run(store: Store) {
    loop {
        store.changed().await;
        settle(&store);
    }
}

/// Runs the collector and the CustomResourceDefinition controllers until neither has
/// anything left to do (cascades span several passes).
pub fn settle(store: &Store) {
    loop {
        let collected = pass(store);
        let crds = crate::crd::reconcile(store);
        if !collected && !crds {
            break;
        }
    }
}

fn owner_uids(obj: &Value) -> Vec<(String, bool)> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    let uid = r.get("uid")?.as_str()?.to_string();
                    let block = r
                        .get("blockOwnerDeletion")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    Some((uid, block))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the owner an ownerReference names is gone, as the garbage collector decides it:
/// looked up by apiVersion, kind and name (in the dependent's namespace for namespaced
/// owners) and absent when missing or when its uid differs. Unknown kinds are never absent.
fn owner_absent(store: &Store, st: &State, ns: &str, r: &Value) -> bool {
    let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    let Some(kind) = store.kinds().by_kind(field("apiVersion"), field("kind")) else {
        return false;
    };
    let owner_ns = if kind.namespaced { ns } else { "" };
    match st.get(kind, owner_ns, field("name")) {
        Some(owner) => meta_str(&owner, "uid") != Some(field("uid")),
        None => true,
    }
}

fn deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}

/// One collection pass over the queued objects; returns whether anything was written
/// (then the queued objects are looked at again by the next pass, as cascades span
/// several passes).
pub fn pass(store: &Store) -> bool {
    let mut st = store.lock();
    let batch = st.take_gc_queue();
    if batch.is_empty() {
        return false;
    }
    let objs: Vec<(&'static ResourceKind, Arc<Value>)> =
        batch.iter().filter_map(|k| st.by_key(k)).collect();
    let wrote = pass_over(&mut st, store, &objs);
    if wrote {
        st.requeue_gc(batch);
    }
    wrote
}

type Objects = [(&'static ResourceKind, Arc<Value>)];

fn pass_over(st: &mut State, store: &Store, all: &Objects) -> bool {
    let mut changed = false;

    for (kind, obj) in all {
        let Some(refs) = obj
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
        else {
            continue;
        };
        if refs.is_empty() {
            continue;
        }
        let ns = meta_str(obj, "namespace").unwrap_or("");
        if !deleting(obj) && refs.iter().all(|r| owner_absent(store, st, ns, r)) {
            // Every owner is gone: the dependent goes too (its own dependents cascade later).
            delete_locked(st, kind, obj, Some(Propagation::Background), None, false);
            changed = true;
        }
    }
    if changed {
        return true;
    }

    if service_accounts(st, store, all) || pod_gc(st, all) {
        return true;
    }

    for (kind, obj) in all {
        if !deleting(obj) {
            continue;
        }
        let uid = meta_str(obj, "uid").unwrap_or("").to_string();
        let fins = finalizers(obj);
        if fins.iter().any(|f| f == "orphan") {
            orphan_dependents(st, &uid);
            let rest: Vec<String> = fins.iter().filter(|f| *f != "orphan").cloned().collect();
            set_finalizers(st, kind, obj, rest);
            return true;
        }
        if fins.iter().any(|f| f == "foregroundDeletion") {
            let dependents = st.dependents(&uid);
            let mut wrote = false;
            for (dk, d) in &dependents {
                if !deleting(d) {
                    delete_locked(st, dk, d, Some(Propagation::Foreground), None, false);
                    wrote = true;
                }
            }
            // The owner waits only for dependents that block its deletion.
            let blocking = dependents
                .iter()
                .any(|(_, d)| owner_uids(d).iter().any(|(u, b)| *u == uid && *b));
            if !blocking {
                let rest: Vec<String> = fins
                    .iter()
                    .filter(|f| *f != "foregroundDeletion")
                    .cloned()
                    .collect();
                set_finalizers(st, kind, obj, rest);
                wrote = true;
            }
            if wrote {
                return true;
            }
        }
        if kind.kind == "Namespace" && finalize_namespace(st, store, obj) {
            return true;
        }
    }
    false
}

fn orphan_dependents(st: &mut State, uid: &str) {
    for (kind, d) in st.dependents(uid) {
        let Some(refs) = d
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
        else {
            continue;
        };
        if !refs
            .iter()
            .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
        {
            continue;
        }
        let kept: Vec<Value> = refs
            .iter()
            .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid))
            .cloned()
            .collect();
        let mut new = (*d).clone();
        let meta = crate::resources::meta_mut(&mut new);
        if kept.is_empty() {
            meta.remove("ownerReferences");
        } else {
            meta.insert("ownerReferences".into(), Value::Array(kept));
        }
        st.replace(kind, new);
    }
}

/// Everything in one namespace, in store key order.
fn namespace_contents(
    st: &State,
    store: &Store,
    ns: &str,
) -> Vec<(&'static ResourceKind, Arc<Value>)> {
    let mut kinds: Vec<&'static ResourceKind> = store
        .kinds()
        .all()
        .iter()
        .copied()
        .filter(|k| k.namespaced)
        .collect();
    kinds.sort_by_key(|k| (k.group, k.plural));
    kinds
        .into_iter()
        .flat_map(|k| st.list(k, Some(ns)).into_iter().map(move |o| (k, o)))
        .collect()
}

/// The namespace controller: delete everything in a terminating namespace, then finalize it.
fn finalize_namespace(st: &mut State, store: &Store, ns_obj: &Value) -> bool {
    let ns = meta_str(ns_obj, "name").unwrap_or("").to_string();
    let contents = namespace_contents(st, store, &ns);
    let mut wrote = false;
    for (k, o) in &contents {
        if !deleting(o) {
            delete_locked(st, k, o, Some(Propagation::Background), None, false);
            wrote = true;
        }
    }
    let contents = if wrote {
        namespace_contents(st, store, &ns)
    } else {
        contents
    };
    wrote |= namespace_conditions(st, store, ns_obj, &contents);
    if contents.is_empty() {
        let ns_obj = &st
            .get(
                store
                    .kinds()
                    .by_resource("", "v1", "namespaces")
                    .expect("namespaces are served"),
                "",
                &ns,
            )
            .map(|o| (*o).clone())
            .unwrap_or_else(|| ns_obj.clone());
        let spec_fins = ns_obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if spec_fins {
            let mut new = ns_obj.clone();
            new["spec"]["finalizers"] = Value::Array(Vec::new());
            let kind = store
                .kinds()
                .by_resource("", "v1", "namespaces")
                .expect("namespaces are served");
            new.get_mut("spec")
                .and_then(Value::as_object_mut)
                .map(|s| s.remove("finalizers"));
            st.replace(kind, new);
            if crate::ops::is_finalized(
                kind,
                &st.get(kind, "", &ns)
                    .map(|o| (*o).clone())
                    .unwrap_or_default(),
            ) {
                st.remove(kind, "", &ns);
            }
            return true;
        }
    }
    wrote
}

/// The deletion conditions the namespace controller keeps on a terminating namespace
/// (pkg/controller/namespace/deletion/status_condition_utils.go): the five types, each
/// True with the remaining resources or finalizers, or False with its "ok" reason.
fn namespace_conditions(
    st: &mut State,
    store: &Store,
    ns_obj: &Value,
    remaining: &[(&'static ResourceKind, Arc<Value>)],
) -> bool {
    use std::collections::BTreeMap;
    let mut by_resource: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_finalizer: BTreeMap<String, usize> = BTreeMap::new();
    for (k, o) in remaining {
        *by_resource
            .entry(format!("{}.{}", k.plural, k.group))
            .or_default() += 1;
        for f in crate::ops::finalizers(o) {
            *by_finalizer.entry(f).or_default() += 1;
        }
    }
    let join = |m: &BTreeMap<String, usize>, f: &dyn Fn(&String, &usize) -> String| {
        let mut parts: Vec<String> = m.iter().map(|(k, n)| f(k, n)).collect();
        parts.sort();
        parts.join(", ")
    };
    let mut wanted: Vec<(&str, &str, String, String)> = vec![
        (
            "NamespaceDeletionDiscoveryFailure",
            "False",
            "ResourcesDiscovered".into(),
            "All resources successfully discovered".into(),
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            "False",
            "ParsedGroupVersions".into(),
            "All legacy kube types successfully parsed".into(),
        ),
        (
            "NamespaceDeletionContentFailure",
            "False",
            "ContentDeleted".into(),
            "All content successfully deleted, may be waiting on finalization".into(),
        ),
    ];
    if by_resource.is_empty() {
        wanted.push((
            "NamespaceContentRemaining",
            "False",
            "ContentRemoved".into(),
            "All content successfully removed".into(),
        ));
    } else {
        wanted.push((
            "NamespaceContentRemaining",
            "True",
            "SomeResourcesRemain".into(),
            format!(
                "Some resources are remaining: {}",
                join(&by_resource, &|r, n| format!(
                    "{r} has {n} resource instances"
                ))
            ),
        ));
    }
    if by_finalizer.is_empty() {
        wanted.push((
            "NamespaceFinalizersRemaining",
            "False",
            "ContentHasNoFinalizers".into(),
            "All content-preserving finalizers finished".into(),
        ));
    } else {
        wanted.push((
            "NamespaceFinalizersRemaining",
            "True",
            "SomeFinalizersRemain".into(),
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                join(&by_finalizer, &|f, n| format!(
                    "{f} in {n} resource instances"
                ))
            ),
        ));
    }
    let mut conditions: Vec<Value> = ns_obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut changed = false;
    let now = crate::ops::now();
    for (ty, status, reason, message) in wanted {
        match conditions.iter_mut().find(|c| c["type"] == ty) {
            None => {
                conditions.push(serde_json::json!({"type": ty, "status": status,
                    "lastTransitionTime": now, "reason": reason, "message": message}));
                changed = true;
            }
            Some(c)
                if c["status"] != status
                    || c["reason"] != reason.as_str()
                    || c["message"] != message.as_str() =>
            {
                if c["status"] != status {
                    c["lastTransitionTime"] = serde_json::json!(now);
                }
                c["status"] = serde_json::json!(status);
                c["reason"] = serde_json::json!(reason);
                c["message"] = serde_json::json!(message);
                changed = true;
            }
            Some(_) => {}
        }
    }
    if changed {
        let kind = store
            .kinds()
            .by_resource("", "v1", "namespaces")
            .expect("namespaces are served");
        let mut new = ns_obj.clone();
        new["status"]["conditions"] = Value::Array(conditions);
        st.replace(kind, new);
    }
    changed
}

/// The service account controller: every active namespace gets a `default` ServiceAccount.
fn service_accounts(st: &mut State, store: &Store, all: &Objects) -> bool {
    let kinds = store.kinds();
    let Some(sa) = kinds.by_resource("", "v1", "serviceaccounts") else {
        return false;
    };
    let mut wrote = false;
    for (k, ns) in all
        .iter()
        .filter(|(k, o)| k.kind == "Namespace" && !deleting(o))
    {
        let _ = k;
        let name = meta_str(ns, "name").unwrap_or("");
        if st.get(sa, name, "default").is_none() {
            let obj = serde_json::json!({"metadata": {"name": "default"}});
            wrote |= crate::ops::system_create(st, store, sa, name, obj, "kube-controller-manager")
                .is_ok();
        }
        // The root CA publisher recreates a deleted kube-root-ca.crt.
        if let Some(cm) = kinds.by_resource("", "v1", "configmaps")
            && st.get(cm, name, "kube-root-ca.crt").is_none()
        {
            let obj = crate::admission::root_ca_config_map();
            wrote |= crate::ops::system_create(st, store, cm, name, obj, "kube-controller-manager")
                .is_ok();
        }
    }
    wrote
}

/// Pod GC: terminating pods bound to a node that does not exist are force-deleted
/// (there is no kubelet to finish them).
fn pod_gc(st: &mut State, all: &Objects) -> bool {
    let node_kind = crate::resources::KINDS
        .iter()
        .find(|k| k.kind == "Node" && k.group.is_empty());
    let mut wrote = false;
    for (kind, pod) in all
        .iter()
        .filter(|(k, o)| k.kind == "Pod" && k.group.is_empty() && deleting(o))
    {
        let grace = pod
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if grace > 0 && node_kind.is_none_or(|k| st.get(k, "", node).is_none()) {
            delete_locked(st, kind, pod, None, Some(0), false);
            wrote = true;
        }
    }
    wrote
}
