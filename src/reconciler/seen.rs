//! What the worker's watches have seen of each kind it manages, so a reconcile reads the
//! cluster from memory instead of asking the API server again (kube's reflector idea, with
//! an index by record id so a record's pods are found without a scan).
//!
//! A cache may lag the cluster by a watch event. It is used only where lagging is safe:
//! a live object that still holds everything modelplane wants is not drift (a change
//! after it arrives as a watch event and requeues the record), and anything that looks
//! like drift is read again from the API server before it is acted on.
//!
//! Objects are kept as JSON and decoded when read. A typed `k8s-openapi` object is mostly
//! empty `Option`s: a Deployment took about 14 KiB of the worker's memory and is about 3 KB
//! as JSON (heaptrack, 3,000 records, 2026-11-29: the caches held 33 KiB per record). A read
//! decodes one object, which costs about what the clone it replaces did.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::runtime::watcher;
use uuid::Uuid;

use super::cluster::Object;
use super::desired::LABEL_DEPLOYMENT_ID;

type Key = (Option<String>, String);

/// The objects of one kind, as last seen by its watch.
pub struct Seen<K> {
    state: RwLock<State>,
    kind: PhantomData<fn() -> K>,
}

struct State {
    /// False until the first list has completed.
    ready: bool,
    objects: HashMap<Key, Kept>,
    by_record: HashMap<Uuid, HashSet<Key>>,
    /// A relist in progress: the old view keeps serving until it is complete.
    relisting: Option<Vec<(Key, Kept)>>,
}

/// One object as kept: the JSON of [`kept`] (shared, so a walk of every object takes the
/// lock only to count references, and decodes after), and the record it is labelled with.
struct Kept {
    record: Option<Uuid>,
    json: Arc<[u8]>,
}

impl<K: Object> Default for Seen<K> {
    fn default() -> Self {
        Self {
            state: RwLock::new(State {
                ready: false,
                objects: HashMap::new(),
                by_record: HashMap::new(),
                relisting: None,
            }),
            kind: PhantomData,
        }
    }
}

fn key_of<K: Object>(object: &K) -> Key {
    let meta = object.meta();
    (
        meta.namespace.clone(),
        meta.name.clone().unwrap_or_default(),
    )
}

fn record_of<K: Object>(object: &K) -> Option<Uuid> {
    object
        .meta()
        .labels
        .as_ref()?
        .get(LABEL_DEPLOYMENT_ID)?
        .parse()
        .ok()
}

/// The part of `object` the worker reads, to keep. Nothing reads who manages which field,
/// and it is often most of an object's size. Of a pod, the worker reads its metadata and
/// status, its node, its readiness gates and its containers' ports (for the metrics page
/// and the adapter loader); the rest of its spec (environment, volumes, probes, resources:
/// most of a model server's pod) is its Deployment's, which the cache holds whole. GPU
/// accounting reads pods through its own watch (`inventory`).
fn kept<K: Object>(object: &K) -> Kept {
    let mut object = object.clone();
    object.meta_mut().managed_fields = None;
    if let Some(pod) = (&mut object as &mut dyn Any).downcast_mut::<Pod>()
        && let Some(spec) = pod.spec.take()
    {
        pod.spec = Some(PodSpec {
            node_name: spec.node_name,
            readiness_gates: spec.readiness_gates,
            containers: spec
                .containers
                .into_iter()
                .map(|c| Container {
                    name: c.name,
                    ports: c.ports,
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        });
    }
    Kept {
        record: record_of(&object),
        json: serde_json::to_vec(&object)
            .expect("a Kubernetes object serializes")
            .into(),
    }
}

/// The object `kept` holds. It was serialized from a `K`, so it decodes; if it somehow did
/// not, `get` and `of_record` answer as before the first list (the caller reads the cluster)
/// and a walk of every object leaves it out.
fn decode<K: Object>(json: &[u8]) -> Option<K> {
    serde_json::from_slice(json)
        .inspect_err(|err| {
            tracing::error!(kind = %super::cluster::kind_of::<K>(), error = %err, "a cached object does not decode");
        })
        .ok()
}

impl State {
    fn insert(&mut self, key: Key, kept: Kept) {
        self.remove(&key);
        if let Some(id) = kept.record {
            self.by_record.entry(id).or_default().insert(key.clone());
        }
        self.objects.insert(key, kept);
    }

    fn remove(&mut self, key: &Key) {
        if let Some(old) = self.objects.remove(key)
            && let Some(id) = old.record
            && let Some(keys) = self.by_record.get_mut(&id)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_record.remove(&id);
            }
        }
    }
}

impl<K: Object> Seen<K> {
    /// Takes one event of the kind's watch.
    pub fn observe(&self, event: &watcher::Event<K>) {
        // An arriving object is serialized before the lock is taken: reconciles read meanwhile.
        match event {
            watcher::Event::Apply(object) => {
                let (key, kept) = (key_of(object), kept(object));
                self.write().insert(key, kept);
            }
            watcher::Event::InitApply(object) => {
                let arrived = (key_of(object), kept(object));
                self.write()
                    .relisting
                    .get_or_insert_with(Vec::new)
                    .push(arrived);
            }
            watcher::Event::Delete(object) => self.write().remove(&key_of(object)),
            watcher::Event::Init => self.write().relisting = Some(Vec::new()),
            watcher::Event::InitDone => {
                let mut state = self.write();
                let listed = state.relisting.take().unwrap_or_default();
                state.objects.clear();
                state.by_record.clear();
                for (key, kept) in listed {
                    state.insert(key, kept);
                }
                state.ready = true;
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().expect("seen lock")
    }

    /// The object as last seen: `None` until the first list is complete, `Some(None)` when
    /// it does not exist.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Option<K>> {
        let state = self.state.read().expect("seen lock");
        if !state.ready {
            return None;
        }
        let key = (namespace.map(str::to_owned), name.to_owned());
        match state.objects.get(&key) {
            None => Some(None),
            Some(kept) => decode(&kept.json).map(Some),
        }
    }

    /// Every object as last seen, or `None` until the first list is complete.
    pub fn all(&self) -> Option<Vec<Arc<K>>> {
        self.all_where(|_| true)
    }

    /// The objects whose JSON contains `text` (for instance an annotation's key), as last
    /// seen, or `None` until the first list is complete: only those are decoded. The caller
    /// checks what it looks for on each; an object may mention the text elsewhere.
    pub fn all_mentioning(&self, text: &str) -> Option<Vec<Arc<K>>> {
        let finder = memchr::memmem::Finder::new(text);
        self.all_where(|json| finder.find(json).is_some())
    }

    fn all_where(&self, keep: impl Fn(&[u8]) -> bool) -> Option<Vec<Arc<K>>> {
        let found: Vec<Arc<[u8]>> = {
            let state = self.state.read().expect("seen lock");
            if !state.ready {
                return None;
            }
            state
                .objects
                .values()
                .filter(|kept| keep(&kept.json))
                .map(|kept| kept.json.clone())
                .collect()
        };
        Some(
            found
                .iter()
                .filter_map(|json| decode(json))
                .map(Arc::new)
                .collect(),
        )
    }

    /// The objects labelled with record `id`, or `None` until the first list is complete.
    pub fn of_record(&self, id: Uuid) -> Option<Vec<K>> {
        let state = self.state.read().expect("seen lock");
        if !state.ready {
            return None;
        }
        state
            .by_record
            .get(&id)
            .into_iter()
            .flatten()
            .filter_map(|key| state.objects.get(key))
            .map(|kept| decode(&kept.json))
            .collect()
    }
}

/// One [`Seen`] per watched kind, found by type.
#[derive(Default)]
pub struct SeenKinds {
    kinds: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl SeenKinds {
    /// Adds a cache for `K`; its watch feeds it.
    pub fn with<K: Object>(mut self) -> Self {
        self.kinds
            .insert(TypeId::of::<K>(), Arc::new(Seen::<K>::default()));
        self
    }

    /// The cache of `K`, if the worker keeps one.
    pub fn of<K: Object>(&self) -> Option<&Seen<K>> {
        self.kinds
            .get(&TypeId::of::<K>())?
            .downcast_ref::<Seen<K>>()
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;

    fn pod(name: &str, record: Uuid) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("team-a".into()),
                labels: Some([(LABEL_DEPLOYMENT_ID.to_owned(), record.to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn a_cache_answers_only_after_its_first_list_and_follows_events() {
        let seen = Seen::<Pod>::default();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        assert!(seen.get(Some("team-a"), "p1").is_none(), "not listed yet");
        seen.observe(&watcher::Event::Init);
        seen.observe(&watcher::Event::InitApply(pod("p1", a)));
        assert!(seen.of_record(a).is_none(), "the list is not complete");
        seen.observe(&watcher::Event::InitDone);
        assert_eq!(seen.of_record(a).unwrap().len(), 1);
        seen.observe(&watcher::Event::Apply(pod("p2", a)));
        seen.observe(&watcher::Event::Apply(pod("p3", b)));
        assert_eq!(seen.of_record(a).unwrap().len(), 2);
        seen.observe(&watcher::Event::Delete(pod("p1", a)));
        assert_eq!(seen.of_record(a).unwrap().len(), 1);
        assert_eq!(seen.get(Some("team-a"), "p1"), Some(None));
        // A relist replaces the view once complete; until then the old one serves.
        seen.observe(&watcher::Event::Init);
        seen.observe(&watcher::Event::InitApply(pod("p3", b)));
        assert_eq!(seen.of_record(a).unwrap().len(), 1);
        seen.observe(&watcher::Event::InitDone);
        assert!(seen.of_record(a).unwrap().is_empty());
        assert_eq!(seen.of_record(b).unwrap().len(), 1);
    }

    #[test]
    fn only_objects_that_mention_a_text_are_read_for_it() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let mut annotated = pod("p1", a);
        annotated.metadata.annotations =
            Some([("modelplane.io/adapters".to_owned(), "[]".to_owned())].into());
        let seen = Seen::<Pod>::default();
        assert!(
            seen.all_mentioning("modelplane.io/adapters").is_none(),
            "not listed yet"
        );
        seen.observe(&watcher::Event::Init);
        seen.observe(&watcher::Event::InitApply(annotated.clone()));
        seen.observe(&watcher::Event::InitApply(pod("p2", b)));
        seen.observe(&watcher::Event::InitDone);
        let found = seen.all_mentioning("modelplane.io/adapters").unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].metadata, annotated.metadata);
        assert_eq!(seen.all().unwrap().len(), 2);
        assert!(seen.all_mentioning("nothing-says-this").unwrap().is_empty());
    }

    #[test]
    fn a_cached_pod_keeps_what_the_worker_reads_of_it() {
        let id = Uuid::now_v7();
        let mut full: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "p1", "namespace": "team-a",
                "annotations": {"modelplane.io/adapters": "a"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]
            },
            "spec": {
                "nodeName": "gpu-1",
                "readinessGates": [{"conditionType": "modelplane.io/adapters-loaded"}],
                "containers": [{
                    "name": "server", "image": "vllm/vllm-openai:v0.11.0",
                    "args": ["--model", "m"], "env": [{"name": "A", "value": "b"}],
                    "ports": [{"name": "http", "containerPort": 8000}]
                }],
                "volumes": [{"name": "cache", "emptyDir": {}}]
            },
            "status": {"phase": "Running", "podIP": "10.0.0.7"}
        }))
        .unwrap();
        full.metadata.labels = Some([(LABEL_DEPLOYMENT_ID.to_owned(), id.to_string())].into());
        let seen = Seen::<Pod>::default();
        seen.observe(&watcher::Event::Init);
        seen.observe(&watcher::Event::InitApply(full.clone()));
        seen.observe(&watcher::Event::InitDone);
        assert_eq!(seen.of_record(id).unwrap().len(), 1);
        let cached = seen.get(Some("team-a"), "p1").unwrap().unwrap();

        // What is read stays: metadata (but who manages which field), status, the node,
        // the readiness gates, and each container's name and ports.
        full.metadata.managed_fields = None;
        assert_eq!(cached.metadata, full.metadata);
        assert_eq!(cached.status, full.status);
        assert_eq!(crate::reconciler::load::metrics_port(&cached), Some(8000));
        let spec = cached.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("gpu-1"));
        assert_eq!(
            spec.readiness_gates,
            full.spec.as_ref().unwrap().readiness_gates
        );
        // The rest of the spec is the Deployment's, which the cache holds whole.
        assert_eq!(spec.containers[0].name, "server");
        assert!(spec.containers[0].image.is_none() && spec.containers[0].env.is_none());
        assert!(spec.volumes.is_none());
    }
}
