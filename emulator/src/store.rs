//! The in-memory object store: objects as JSON, one global monotonic resourceVersion,
//! a bounded change history for watch resumption, and a broadcast of every change.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::resources::{Kinds, ResourceKind, meta_mut, meta_str};

/// The type of one change, as in a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change. `object` carries the resourceVersion of the change.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub kind: &'static ResourceKind,
    pub namespace: String,
    pub name: String,
    pub event: EventType,
    pub object: Arc<Value>,
    /// The object before the change (for MODIFIED and DELETED).
    pub old: Option<Arc<Value>>,
}

/// Store key: (group, plural, namespace, name). Ordered like etcd keys.
pub type Key = (&'static str, &'static str, String, String);

struct Entry {
    kind: &'static ResourceKind,
    obj: Arc<Value>,
}

/// The mutable state behind the store lock. Every write goes through here so that
/// resourceVersion order, history order and broadcast order are the same.
pub struct State {
    rv: u64,
    objects: BTreeMap<Key, Entry>,
    uids: HashMap<String, Key>,
    history: VecDeque<Arc<Change>>,
    /// Highest resourceVersion dropped from `history`; watches older than this are expired.
    compacted_rv: u64,
    history_limit: usize,
    tx: broadcast::Sender<Arc<Change>>,
    /// Unbounded in-process change feeds (the simulated cluster: it must never miss a
    /// change, however long one of its passes takes).
    feeds: Vec<tokio::sync::mpsc::UnboundedSender<Arc<Change>>>,
    /// Per-kind broadcasts for watches, so a watcher only lags behind its own kind.
    /// Keyed by storage (group, resource): every version of a custom kind shares one.
    kind_tx: HashMap<(&'static str, &'static str), broadcast::Sender<Arc<Change>>>,
    /// Dependents by the uid their ownerReferences name (also uids of absent owners).
    dependents: HashMap<String, BTreeSet<Key>>,
    /// Objects the garbage collector has to look at again (see `gc.rs`).
    gc_queue: BTreeSet<Key>,
    /// Service clusterIPs in use (with how many Services claim each).
    cluster_ips: HashMap<String, usize>,
    /// Service nodePorts in use.
    node_ports: HashMap<i64, usize>,
    /// Every Service-range offset below this one is allocated (see `cluster_ip_offset`),
    /// so the lowest free clusterIP is searched from here.
    ip_floor: std::cell::Cell<u32>,
}

/// The offset of a clusterIP in 10.96.0.0/12 (what the allocator counts in).
fn cluster_ip_offset(ip: &str) -> Option<u32> {
    let mut parts = ip.split('.').map(|p| p.parse::<u32>().ok());
    let (a, b, c, d) = (
        parts.next()??,
        parts.next()??,
        parts.next()??,
        parts.next()??,
    );
    if a != 10 || !(96..112).contains(&b) || c > 255 || d > 255 || parts.next().is_some() {
        return None;
    }
    Some(((b - 96) << 16) | (c << 8) | d)
}

/// The uids an object's ownerReferences name.
fn owner_refs(obj: &Value) -> impl Iterator<Item = &str> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
}

fn is_service(kind: &ResourceKind) -> bool {
    kind.group.is_empty() && kind.kind == "Service"
}

fn cluster_ip(obj: &Value) -> Option<&str> {
    obj.pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
}

fn node_ports(obj: &Value) -> impl Iterator<Item = i64> {
    obj.pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
}

fn key_of(kind: &'static ResourceKind, ns: &str, name: &str) -> Key {
    (kind.group, kind.plural, ns.to_string(), name.to_string())
}

impl State {
    /// The latest resourceVersion (what a list reports).
    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    /// The oldest resourceVersion a watch can still resume from.
    pub fn compacted_rv(&self) -> u64 {
        self.compacted_rv
    }

    pub fn get(&self, kind: &'static ResourceKind, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(&key_of(kind, ns, name))
            .map(|e| e.obj.clone())
    }

    /// All objects of a kind (optionally in one namespace) in key order.
    pub fn list(&self, kind: &'static ResourceKind, ns: Option<&str>) -> Vec<Arc<Value>> {
        let start = (
            kind.group,
            kind.plural,
            ns.unwrap_or("").to_string(),
            String::new(),
        );
        self.objects
            .range(start..)
            .take_while(|(k, _)| {
                k.0 == kind.group && k.1 == kind.plural && ns.is_none_or(|n| k.2 == n)
            })
            .map(|(_, e)| e.obj.clone())
            .collect()
    }

    /// Every object of every kind (used by garbage collection).
    pub fn all(&self) -> Vec<(&'static ResourceKind, Arc<Value>)> {
        self.objects
            .values()
            .map(|e| (e.kind, e.obj.clone()))
            .collect()
    }

    /// Finds an object by uid.
    pub fn by_uid(&self, uid: &str) -> Option<(&'static ResourceKind, Arc<Value>)> {
        let key = self.uids.get(uid)?;
        self.objects.get(key).map(|e| (e.kind, e.obj.clone()))
    }

    /// The objects whose ownerReferences name `owner_uid`, in key order.
    pub fn dependents(&self, owner_uid: &str) -> Vec<(&'static ResourceKind, Arc<Value>)> {
        self.dependents
            .get(owner_uid)
            .into_iter()
            .flatten()
            .filter_map(|k| self.objects.get(k).map(|e| (e.kind, e.obj.clone())))
            .collect()
    }

    /// The lowest free clusterIP of 10.96.0.0/12 (skipping .0 addresses), or None when
    /// the range is full.
    pub fn free_cluster_ip(&self) -> Option<String> {
        for n in self.ip_floor.get().max(1)..(1 << 20) {
            if n & 0xff == 0 {
                continue;
            }
            let ip = format!("10.{}.{}.{}", 96 + (n >> 16), (n >> 8) & 0xff, n & 0xff);
            if !self.cluster_ips.contains_key(&ip) {
                self.ip_floor.set(n);
                return Some(ip);
            }
        }
        None
    }

    /// Whether some Service has this nodePort.
    pub fn node_port_used(&self, port: i64) -> bool {
        self.node_ports.contains_key(&port)
    }

    /// Takes the keys queued for the garbage collector.
    pub(crate) fn take_gc_queue(&mut self) -> BTreeSet<Key> {
        std::mem::take(&mut self.gc_queue)
    }

    /// Queues keys for the garbage collector again.
    pub(crate) fn requeue_gc(&mut self, keys: impl IntoIterator<Item = Key>) {
        self.gc_queue.extend(keys);
    }

    /// The kind and object stored under a key.
    pub(crate) fn by_key(&self, key: &Key) -> Option<(&'static ResourceKind, Arc<Value>)> {
        self.objects.get(key).map(|e| (e.kind, e.obj.clone()))
    }

    /// Keeps the secondary indexes and the collector's queue in step with one write
    /// (`old` before, `new` after; `None` for a create or a removal).
    fn reindex(
        &mut self,
        kind: &'static ResourceKind,
        key: &Key,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        let old_owners: HashSet<&str> = old.map(|o| owner_refs(o).collect()).unwrap_or_default();
        let new_owners: HashSet<&str> = new.map(|o| owner_refs(o).collect()).unwrap_or_default();
        for u in old_owners.difference(&new_owners) {
            if let Some(set) = self.dependents.get_mut(*u) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(*u);
                }
            }
        }
        for u in new_owners.difference(&old_owners) {
            self.dependents
                .entry((*u).to_string())
                .or_default()
                .insert(key.clone());
        }
        if is_service(kind) {
            if let Some(ip) = old.and_then(cluster_ip)
                && let Some(n) = self.cluster_ips.get_mut(ip)
            {
                *n -= 1;
                if *n == 0 {
                    self.cluster_ips.remove(ip);
                    if let Some(off) = cluster_ip_offset(ip)
                        && off < self.ip_floor.get()
                    {
                        self.ip_floor.set(off);
                    }
                }
            }
            if let Some(ip) = new.and_then(cluster_ip) {
                *self.cluster_ips.entry(ip.to_string()).or_default() += 1;
            }
            for p in old.into_iter().flat_map(node_ports) {
                if let Some(n) = self.node_ports.get_mut(&p) {
                    *n -= 1;
                    if *n == 0 {
                        self.node_ports.remove(&p);
                    }
                }
            }
            for p in new.into_iter().flat_map(node_ports) {
                *self.node_ports.entry(p).or_default() += 1;
            }
        }
        // What the collector must look at again: the object itself, its owners (old and
        // new: a foreground deletion waits for its dependents), its namespace (the
        // namespace controller waits for the contents; the service account controller
        // keeps the default ServiceAccount), and after a removal its dependents.
        let mut queue: Vec<Key> = Vec::new();
        if new.is_some() {
            queue.push(key.clone());
        }
        for u in old_owners.union(&new_owners) {
            if let Some(k) = self.uids.get(*u) {
                queue.push(k.clone());
            }
        }
        if kind.namespaced {
            queue.push(("", "namespaces", String::new(), key.2.clone()));
        }
        if new.is_none() {
            if let Some(uid) = old.and_then(|o| meta_str(o, "uid"))
                && let Some(deps) = self.dependents.get(uid)
            {
                queue.extend(deps.iter().cloned());
            }
            // Pods bound to a removed node are for pod GC to finish.
            if kind.group.is_empty() && kind.kind == "Node" {
                let pods: Vec<Key> = self
                    .objects
                    .range(("", "pods", String::new(), String::new())..)
                    .take_while(|(k, _)| k.0.is_empty() && k.1 == "pods")
                    .map(|(k, _)| k.clone())
                    .collect();
                queue.extend(pods);
            }
        }
        if kind.group.is_empty() && kind.kind == "Namespace" {
            queue.push(key.clone());
        }
        self.gc_queue.extend(queue);
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, change: Change) {
        let change = Arc::new(change);
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted_rv = old.rv;
            }
        }
        self.feeds.retain(|f| f.send(change.clone()).is_ok());
        let kind_key = change.kind.storage_key();
        if let Some(tx) = self.kind_tx.get(&kind_key) {
            if tx.receiver_count() == 0 {
                self.kind_tx.remove(&kind_key);
            } else {
                let _ = tx.send(change.clone());
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(change);
    }

    /// Inserts a new object (the caller has checked it does not exist); sets its resourceVersion.
    pub fn insert(&mut self, kind: &'static ResourceKind, mut obj: Value) -> Arc<Value> {
        let rv = self.next_rv();
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        let uid = meta_str(&obj, "uid").unwrap_or("").to_string();
        let obj = Arc::new(obj);
        let key = key_of(kind, &ns, &name);
        self.uids.insert(uid, key.clone());
        self.reindex(kind, &key, None, Some(&*obj));
        self.objects.insert(
            key,
            Entry {
                kind,
                obj: obj.clone(),
            },
        );
        self.record(Change {
            rv,
            kind,
            namespace: ns,
            name,
            event: EventType::Added,
            object: obj.clone(),
            old: None,
        });
        obj
    }

    /// Replaces an existing object; sets its resourceVersion.
    pub fn replace(&mut self, kind: &'static ResourceKind, mut obj: Value) -> Arc<Value> {
        let rv = self.next_rv();
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        let obj = Arc::new(obj);
        let key = key_of(kind, &ns, &name);
        let old = self
            .objects
            .insert(
                key.clone(),
                Entry {
                    kind,
                    obj: obj.clone(),
                },
            )
            .map(|e| e.obj);
        self.reindex(kind, &key, old.as_deref(), Some(&*obj));
        self.record(Change {
            rv,
            kind,
            namespace: ns,
            name,
            event: EventType::Modified,
            object: obj.clone(),
            old,
        });
        obj
    }

    /// Removes an object. The DELETED event carries the object at the deletion's resourceVersion.
    /// Tags every stored object of `kind`'s resource with `kind` (its storage version).
    pub(crate) fn rekind(&mut self, kind: &'static ResourceKind) {
        let start = (kind.group, kind.plural, String::new(), String::new());
        for (k, e) in self.objects.range_mut(start..) {
            if (k.0, k.1) != (kind.group, kind.plural) {
                break;
            }
            e.kind = kind;
        }
    }

    pub fn remove(
        &mut self,
        kind: &'static ResourceKind,
        ns: &str,
        name: &str,
    ) -> Option<Arc<Value>> {
        let key = key_of(kind, ns, name);
        let entry = self.objects.remove(&key)?;
        if let Some(uid) = meta_str(&entry.obj, "uid") {
            self.uids.remove(uid);
        }
        self.reindex(kind, &key, Some(&entry.obj), None);
        let rv = self.next_rv();
        let mut obj = (*entry.obj).clone();
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let obj = Arc::new(obj);
        self.record(Change {
            rv,
            kind,
            namespace: ns.to_string(),
            name: name.to_string(),
            event: EventType::Deleted,
            object: obj.clone(),
            old: Some(entry.obj),
        });
        Some(obj)
    }

    /// Changes after `rv`, or `Err(compacted_rv)` when `rv` is older than the history window.
    pub fn changes_since(&self, rv: u64) -> Result<Vec<Arc<Change>>, u64> {
        if rv < self.compacted_rv {
            return Err(self.compacted_rv);
        }
        Ok(self.history.iter().filter(|c| c.rv > rv).cloned().collect())
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }

    /// Subscribes to the future changes of one kind (what a watch needs): its ring only
    /// fills with that kind's changes, so traffic on other kinds never makes it lag.
    pub fn subscribe_kind(
        &mut self,
        kind: &'static ResourceKind,
    ) -> broadcast::Receiver<Arc<Change>> {
        let cap = self.history_limit.max(1024);
        self.kind_tx
            .entry(kind.storage_key())
            .or_insert_with(|| broadcast::channel(cap).0)
            .subscribe()
    }

    /// An unbounded feed of every future change.
    pub(crate) fn feed(&mut self) -> tokio::sync::mpsc::UnboundedReceiver<Arc<Change>> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.feeds.push(tx);
        rx
    }
}

struct Inner {
    state: Mutex<State>,
    /// Replaced whole when a CustomResourceDefinition starts or stops serving kinds.
    kinds: std::sync::RwLock<Arc<Kinds>>,
    /// The kinds each established CRD serves, by uid, with the generation they were
    /// built from (so the CRD controller rebuilds them only when the CRD changes).
    pub(crate) crds: Mutex<HashMap<String, (i64, Vec<&'static ResourceKind>)>>,
    /// Wakes the garbage collector after writes.
    changed: Notify,
}

/// A cheaply clonable handle on the store, shared by the HTTP layer, the garbage
/// collector and in-process users (tests, simulated controllers).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl Store {
    pub fn new(kinds: Kinds, history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(history_limit.max(1024));
        // resourceVersions continue from the wall clock (microseconds), so a restarted
        // emulator never reissues one an earlier run gave out: like etcd's revision, they
        // only grow. A watch from an earlier run's version is older than this run's history
        // and answered `410 Expired`, as after an etcd restore, and the client relists.
        let base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let state = State {
            rv: base,
            objects: BTreeMap::new(),
            uids: HashMap::new(),
            history: VecDeque::new(),
            compacted_rv: base,
            history_limit: history_limit.max(1),
            tx,
            feeds: Vec::new(),
            kind_tx: HashMap::new(),
            dependents: HashMap::new(),
            gc_queue: BTreeSet::new(),
            cluster_ips: HashMap::new(),
            node_ports: HashMap::new(),
            ip_floor: std::cell::Cell::new(1),
        };
        Store {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                kinds: std::sync::RwLock::new(Arc::new(kinds)),
                crds: Mutex::new(HashMap::new()),
                changed: Notify::new(),
            }),
        }
    }

    /// The kinds served now (a snapshot: a CRD may change them at any time).
    pub fn kinds(&self) -> Arc<Kinds> {
        self.inner
            .kinds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Serves `kinds` from now on (the CRD controller); stored objects of a kind whose
    /// storage version changed are re-tagged with it.
    pub(crate) fn set_kinds(&self, st: &mut State, kinds: Kinds) {
        for k in kinds.all() {
            if k.crd.is_some_and(|v| v.storage) {
                st.rekind(k);
            }
        }
        *self.inner.kinds.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(kinds);
    }

    /// The CRD controller's record of what each CRD serves.
    pub(crate) fn crd_kinds(
        &self,
    ) -> MutexGuard<'_, HashMap<String, (i64, Vec<&'static ResourceKind>)>> {
        self.inner.crds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Locks the state. Never hold the guard across an `.await`.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock must not wedge the whole emulator.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` under the lock, then wakes background workers (garbage collection).
    pub fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let (out, wrote) = {
            let mut st = self.lock();
            let before = st.rv;
            let out = f(&mut st);
            (out, st.rv != before || !st.gc_queue.is_empty())
        };
        // A write that changed nothing (a no-op update, a failed precondition) does not
        // wake the collector.
        if wrote {
            self.inner.changed.notify_one();
        }
        out
    }

    /// Resolves when some write happened since the last call (used by the collector).
    pub async fn changed(&self) {
        self.inner.changed.notified().await
    }

    /// Subscribes to every future change (all kinds).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.lock().subscribe()
    }

    /// Reads one object.
    pub fn get(&self, kind: &'static ResourceKind, ns: &str, name: &str) -> Option<Value> {
        self.lock().get(kind, ns, name).map(|o| (*o).clone())
    }

    /// Lists one kind, optionally within one namespace.
    pub fn list(&self, kind: &'static ResourceKind, ns: Option<&str>) -> Vec<Value> {
        self.lock()
            .list(kind, ns)
            .into_iter()
            .map(|o| (*o).clone())
            .collect()
    }
}
