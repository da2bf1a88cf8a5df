//! The in-memory object store: objects as JSON, one global monotonic resourceVersion,
//! a bounded change history for watch resumption, and a broadcast of every change.

use std::collections::{BTreeMap, HashMap, VecDeque};
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
type Key = (&'static str, &'static str, String, String);

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
                key,
                Entry {
                    kind,
                    obj: obj.clone(),
                },
            )
            .map(|e| e.obj);
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
}

struct Inner {
    state: Mutex<State>,
    kinds: Kinds,
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
        };
        Store {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                kinds,
                changed: Notify::new(),
            }),
        }
    }

    pub fn kinds(&self) -> &Kinds {
        &self.inner.kinds
    }

    /// Locks the state. Never hold the guard across an `.await`.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock must not wedge the whole emulator.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` under the lock, then wakes background workers (garbage collection).
    pub fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let out = f(&mut self.lock());
        self.inner.changed.notify_one();
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
