//! A simulated cluster on top of the API server — nodes, the deployment and
//! replicaset controllers, a scheduler, kubelets, Service/Gateway/HTTPRoute status, a
//! small Gateway data plane and fault injection.
//!
//! Every simulated component reads the store and writes through [`crate::ops`] with its
//! real field manager, so clients and watches see each step a real cluster would make.
//! The components run as one level-triggered loop. A pass after changes syncs only what
//! the changes touch (a pod's ReplicaSet and Deployment, the Services selecting it, ...:
//! see [`Dirty`]); a full pass over all objects runs on the timer tick (start delays,
//! back-offs, deadlines) and at least every `IDLE_TICK` under a steady stream of changes.

mod controllers;
pub(crate) mod dataplane;
pub(crate) mod expansion;
mod external;
mod external_auth;
pub(crate) mod faults;
mod kubelet;
mod leader_worker_set;
mod networking;
mod node_lifecycle;
pub(crate) mod pod_proxy;
mod quotas;
mod scheduler;
pub(crate) mod service_proxy;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::EmulatorBuilder;
use crate::ops::{self, WriteOptions};
use crate::resources::{ResourceKind, meta_str};
use crate::store::Store;

pub use faults::Faults;

/// One simulated node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub name: String,
    /// Allocatable CPU (a quantity, e.g. `"32"`).
    pub cpu: String,
    /// Allocatable memory (a quantity, e.g. `"256Gi"`).
    pub memory: String,
    /// Maximum pods (the kubelet default is 110).
    pub pods: u32,
    /// Extended resources, e.g. `nvidia.com/gpu: "8"`.
    pub extended: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    /// Taints as Kubernetes JSON (`{"key", "value", "effect"}`).
    pub taints: Vec<Value>,
}

impl NodeConfig {
    /// A node with 32 CPUs, 256Gi of memory and room for 110 pods.
    pub fn new(name: impl Into<String>) -> Self {
        NodeConfig {
            name: name.into(),
            cpu: "32".into(),
            memory: "256Gi".into(),
            pods: 110,
            extended: BTreeMap::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }

    /// Adds `n` `nvidia.com/gpu` and, when given, the `nvidia.com/gpu.product` label
    /// (as NVIDIA's GPU feature discovery sets it).
    pub fn gpus(mut self, n: u32, product: Option<&str>) -> Self {
        if n > 0 {
            self.extended.insert("nvidia.com/gpu".into(), n.to_string());
            self.labels
                .insert("nvidia.com/gpu.count".into(), n.to_string());
        }
        if let Some(p) = product {
            self.labels
                .insert("nvidia.com/gpu.product".into(), p.into());
        }
        self
    }

    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Adds a taint, e.g. `taint("nvidia.com/gpu", "present", "NoSchedule")`.
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints
            .push(json!({"key": key, "value": value, "effect": effect}));
        self
    }
}

/// Settings of the simulated cluster (see the `EmulatorBuilder` methods that set them).
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Explicit nodes; when empty, `node_count` nodes are generated.
    pub nodes: Vec<NodeConfig>,
    pub node_count: usize,
    pub gpus_per_node: u32,
    pub gpu_product: Option<String>,
    /// From binding to a started container (image pull and container creation).
    pub start_delay: Duration,
    /// The first crash-loop back-off (the kubelet's is 10 s, doubling up to 5 min).
    pub restart_backoff: Duration,
    /// Image patterns (`*` wildcards) whose pulls fail.
    pub fail_images: Vec<String>,
    /// Image patterns whose containers exit with an error after starting.
    pub crash_images: Vec<String>,
    /// A Gateway (namespace, name) to create at start, with its GatewayClass.
    pub gateway: Option<(String, String)>,
    /// Address of the Gateway data plane (default `127.0.0.1:0`).
    pub gateway_listen: SocketAddr,
    /// How often timers are checked.
    pub tick: Duration,
    /// How long a node's kubelet may stay silent before the node lifecycle controller marks
    /// the node Unknown (kube-controller-manager's `--node-monitor-grace-period`, 50 s).
    pub node_monitor_grace_period: Duration,
    /// How long pods stay on a not-ready or unreachable node before the taint eviction
    /// controller deletes them: the DefaultTolerationSeconds admission plugin's
    /// `--default-unreachable-toleration-seconds` (and `not-ready`), 300 s.
    pub default_toleration: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            nodes: Vec::new(),
            node_count: 3,
            gpus_per_node: 0,
            gpu_product: None,
            start_delay: Duration::from_secs(2),
            restart_backoff: Duration::from_secs(10),
            fail_images: Vec::new(),
            crash_images: Vec::new(),
            gateway: None,
            gateway_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tick: Duration::from_millis(25),
            node_monitor_grace_period: Duration::from_secs(50),
            default_toleration: Duration::from_secs(300),
        }
    }
}

impl ClusterConfig {
    fn node_list(&self) -> Vec<NodeConfig> {
        if !self.nodes.is_empty() {
            return self.nodes.clone();
        }
        (1..=self.node_count)
            .map(|i| {
                NodeConfig::new(format!("node-{i}"))
                    .gpus(self.gpus_per_node, self.gpu_product.as_deref())
            })
            .collect()
    }
}

/// The GatewayClass the emulator's Gateway controller owns.
pub const GATEWAY_CLASS: &str = "modelplane-emulator";
/// Its `spec.controllerName`.
pub const GATEWAY_CONTROLLER: &str = "modelplane.io/emulator-gateway";

// Cluster simulation knobs. Any of them turns the simulation on; without them the
// emulator is the bare API server.
impl EmulatorBuilder {
    fn sim(&mut self) -> &mut ClusterConfig {
        self.cluster.get_or_insert_with(ClusterConfig::default)
    }

    /// Runs the simulated cluster with these settings.
    pub fn cluster(mut self, config: ClusterConfig) -> Self {
        self.cluster = Some(config);
        self
    }

    /// Simulates `n` identical nodes (default 3) named `node-1`...
    pub fn nodes(mut self, n: usize) -> Self {
        self.sim().node_count = n;
        self
    }

    /// Adds one explicitly configured node (replacing the generated ones).
    pub fn node(mut self, node: NodeConfig) -> Self {
        self.sim().nodes.push(node);
        self
    }

    /// `nvidia.com/gpu` allocatable on each generated node.
    pub fn gpus_per_node(mut self, n: u32) -> Self {
        self.sim().gpus_per_node = n;
        self
    }

    /// The `nvidia.com/gpu.product` label of each generated node.
    pub fn gpu_product(mut self, product: impl Into<String>) -> Self {
        self.sim().gpu_product = Some(product.into());
        self
    }

    /// Time from scheduling to a running container (default 2 s).
    pub fn start_delay(mut self, d: Duration) -> Self {
        self.sim().start_delay = d;
        self
    }

    /// First crash-loop back-off (default 10 s, doubling up to 30x).
    pub fn restart_backoff(mut self, d: Duration) -> Self {
        self.sim().restart_backoff = d;
        self
    }

    /// Images matching this pattern (`*` matches anything) fail to pull.
    pub fn fail_images(mut self, pattern: impl Into<String>) -> Self {
        self.sim().fail_images.push(pattern.into());
        self
    }

    /// Containers of images matching this pattern crash after starting.
    pub fn crash_images(mut self, pattern: impl Into<String>) -> Self {
        self.sim().crash_images.push(pattern.into());
        self
    }

    /// Pre-creates a Gateway `namespace/name` (and the GatewayClass) served by the data plane.
    pub fn gateway(mut self, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        self.sim().gateway = Some((namespace.into(), name.into()));
        self
    }

    /// Address of the Gateway data plane (default `127.0.0.1:0`).
    pub fn gateway_listen(mut self, addr: SocketAddr) -> Self {
        self.sim().gateway_listen = addr;
        self
    }

    /// How long a silent node stays Ready before it is marked Unknown and tainted
    /// unreachable (default 50 s, kube-controller-manager's `--node-monitor-grace-period`).
    pub fn node_monitor_grace_period(mut self, d: Duration) -> Self {
        self.sim().node_monitor_grace_period = d;
        self
    }

    /// How long pods tolerate a not-ready or unreachable node before they are evicted
    /// (default 300 s, the DefaultTolerationSeconds admission plugin's).
    pub fn default_toleration(mut self, d: Duration) -> Self {
        self.sim().default_toleration = d;
        self
    }
}

impl crate::RunningEmulator {
    /// The Gateway data plane's address, when the cluster simulation runs.
    pub fn gateway_addr(&self) -> Option<SocketAddr> {
        self.cluster.as_ref().map(|c| c.gateway_addr)
    }

    /// `http://127.0.0.1:PORT` of the Gateway data plane, when the cluster simulation runs.
    pub fn gateway_url(&self) -> Option<String> {
        self.gateway_addr().map(|a| format!("http://{a}"))
    }

    /// Fault injection for the API server (refuse, latency, errors, cut watches).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The kubelet of node `name` stops reporting (a network partition, or a dead kubelet):
    /// it renews no Lease and writes no node or pod status; its pods keep what they last
    /// showed until the node lifecycle controller marks the node Unknown after the grace
    /// period (and their Ready condition False), and the taint eviction controller deletes
    /// them after their toleration. No effect without the simulated cluster.
    pub fn stop_node_heartbeats(&self, name: &str) {
        if let Some(c) = &self.cluster {
            c.heartbeats.stop(name);
        }
    }

    /// The kubelet of node `name` reports again: it posts Ready and renews its Lease, the
    /// controller lifts the taints, and its pods (those not deleted meanwhile) are ready
    /// again.
    pub fn resume_node_heartbeats(&self, name: &str) {
        if let Some(c) = &self.cluster {
            c.heartbeats.resume(name);
        }
    }

    pub(crate) fn stop_cluster(&mut self) {
        if let Some(c) = &self.cluster {
            for t in &c.tasks {
                t.abort();
            }
        }
    }
}

/// `*`-wildcard matching of image references.
pub(crate) fn glob(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || s.len() < first.len() + last.len() || !s.ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Kinds the simulation uses, resolved once.
#[derive(Clone, Copy)]
pub(crate) struct K {
    pub namespace: &'static ResourceKind,
    pub node: &'static ResourceKind,
    pub pod: &'static ResourceKind,
    pub service: &'static ResourceKind,
    pub event: &'static ResourceKind,
    pub secret: &'static ResourceKind,
    pub configmap: &'static ResourceKind,
    pub pvc: &'static ResourceKind,
    pub deployment: &'static ResourceKind,
    pub replicaset: &'static ResourceKind,
    pub priorityclass: &'static ResourceKind,
    pub lease: Option<&'static ResourceKind>,
    pub endpointslice: Option<&'static ResourceKind>,
    pub gatewayclass: Option<&'static ResourceKind>,
    pub gateway: Option<&'static ResourceKind>,
    pub httproute: Option<&'static ResourceKind>,
    pub inferencepool: Option<&'static ResourceKind>,
}

impl K {
    fn new(store: &Store) -> K {
        let k = |g: &str, r: &str| store.kinds().by_resource(g, "v1", r);
        let must = |g: &str, r: &str| k(g, r).expect("core kinds are always served");
        K {
            namespace: must("", "namespaces"),
            node: must("", "nodes"),
            pod: must("", "pods"),
            service: must("", "services"),
            event: must("", "events"),
            secret: must("", "secrets"),
            configmap: must("", "configmaps"),
            pvc: must("", "persistentvolumeclaims"),
            deployment: must("apps", "deployments"),
            replicaset: must("apps", "replicasets"),
            priorityclass: must("scheduling.k8s.io", "priorityclasses"),
            lease: k("coordination.k8s.io", "leases"),
            endpointslice: k("discovery.k8s.io", "endpointslices"),
            gatewayclass: k("gateway.networking.k8s.io", "gatewayclasses"),
            gateway: k("gateway.networking.k8s.io", "gateways"),
            httproute: k("gateway.networking.k8s.io", "httproutes"),
            inferencepool: k("inference.networking.k8s.io", "inferencepools"),
        }
    }
}

/// How long the loop lets changes accumulate before a pass.
const DEBOUNCE: Duration = Duration::from_millis(5);

/// How often an idle cluster re-checks its timers (progress deadlines have second precision).
const IDLE_TICK: Duration = Duration::from_millis(500);

/// Full passes come at most once per this many times their own duration.
const FULL_PASS_SHARE: u32 = 20;

/// (namespace, name) of an object.
pub(crate) type NsName = (String, String);

/// What changed since the last pass, as far as the components care: the objects each
/// has to sync again. `all` asks for a full pass (a change the loop cannot narrow down,
/// e.g. to a Node, a Secret or a PriorityClass, or a lagging change feed).
#[derive(Default)]
pub(crate) struct Dirty {
    pub all: bool,
    pub deployments: BTreeSet<NsName>,
    pub replicasets: BTreeSet<NsName>,
    pub pods: BTreeSet<NsName>,
    pub services: BTreeSet<NsName>,
    /// LeaderWorkerSets whose own object, pods or headless Service changed.
    pub lws: BTreeSet<NsName>,
    /// Uids of removed pods (the kubelet forgets them).
    pub removed_pods: HashSet<String>,
}

/// Objects by (namespace, label key, label value), kept from the change feed.
#[derive(Default)]
pub(crate) struct LabelIndex(HashMap<(String, String, String), BTreeSet<String>>);

impl LabelIndex {
    fn labels(obj: &Value, ptr: &str) -> Vec<(String, String)> {
        obj.pointer(ptr)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect()
    }

    fn update(&mut self, ptr: &str, old: Option<&Value>, new: Option<&Value>) {
        let any = new.or(old).expect("an old or a new object");
        let ns = meta_str(any, "namespace").unwrap_or("").to_string();
        let name = meta_str(any, "name").unwrap_or("").to_string();
        for (k, v) in old.map(|o| Self::labels(o, ptr)).unwrap_or_default() {
            let key = (ns.clone(), k, v);
            if let Some(set) = self.0.get_mut(&key) {
                set.remove(&name);
                if set.is_empty() {
                    self.0.remove(&key);
                }
            }
        }
        for (k, v) in new.map(|o| Self::labels(o, ptr)).unwrap_or_default() {
            self.0
                .entry((ns.clone(), k, v))
                .or_default()
                .insert(name.clone());
        }
    }

    /// Names carrying label `k=v` in `ns`.
    pub fn get(&self, ns: &str, k: &str, v: &str) -> Option<&BTreeSet<String>> {
        self.0.get(&(ns.to_string(), k.to_string(), v.to_string()))
    }
}

/// Services by one pair of their selector, the anchor: the pair fewest Services' selectors
/// held when the Service was indexed, then the longest value. A Service selects only pods
/// that carry its anchor, so a pod's change looks at the Services anchored on its labels
/// and checks their whole selector, instead of every Service sharing some label with it
/// (modelplane's Services all select `app.kubernetes.io/name=model-server`, so that was
/// every Service of the namespace on each pod change).
/// A label (key, value).
type Pair = (String, String);

#[derive(Default)]
pub(crate) struct ServiceIndex {
    anchored: HashMap<(String, String, String), BTreeSet<String>>,
    /// Each indexed Service's selector and anchor.
    selectors: HashMap<NsName, (Vec<Pair>, Pair)>,
    /// How many indexed Services' selectors hold each (namespace, key, value).
    pairs: HashMap<(String, String, String), usize>,
}

impl ServiceIndex {
    fn remove(&mut self, key: &NsName) {
        let Some((selector, (ak, av))) = self.selectors.remove(key) else {
            return;
        };
        let (ns, name) = key;
        let anchor = (ns.clone(), ak, av);
        if let Some(set) = self.anchored.get_mut(&anchor) {
            set.remove(name);
            if set.is_empty() {
                self.anchored.remove(&anchor);
            }
        }
        for (k, v) in selector {
            let pair = (ns.clone(), k, v);
            if let Some(n) = self.pairs.get_mut(&pair) {
                *n -= 1;
                if *n == 0 {
                    self.pairs.remove(&pair);
                }
            }
        }
    }

    /// Indexes `new` (a Service), replacing what was indexed under its name.
    fn update(&mut self, key: NsName, new: Option<&Value>) {
        self.remove(&key);
        let Some(svc) = new else { return };
        let selector = LabelIndex::labels(svc, "/spec/selector");
        let ns = &key.0;
        let Some(anchor) = selector
            .iter()
            .min_by_key(|(k, v)| {
                let held = self.pairs.get(&(ns.clone(), k.clone(), v.clone()));
                (
                    held.copied().unwrap_or(0),
                    std::cmp::Reverse(v.len()),
                    (*k).clone(),
                )
            })
            .cloned()
        else {
            return; // No selector: its endpoints are not managed.
        };
        for (k, v) in &selector {
            *self
                .pairs
                .entry((ns.clone(), k.clone(), v.clone()))
                .or_default() += 1;
        }
        self.anchored
            .entry((ns.clone(), anchor.0.clone(), anchor.1.clone()))
            .or_default()
            .insert(key.1.clone());
        self.selectors.insert(key, (selector, anchor));
    }

    /// Names of the Services in `ns` whose selector matches `labels`.
    fn selecting<'a>(
        &'a self,
        ns: &'a str,
        labels: &'a [(String, String)],
    ) -> impl Iterator<Item = &'a String> + 'a {
        labels
            .iter()
            .filter_map(move |(k, v)| self.anchored.get(&(ns.to_string(), k.clone(), v.clone())))
            .flatten()
            .filter(move |name| {
                self.selectors
                    .get(&(ns.to_string(), (*name).clone()))
                    .is_some_and(|(selector, _)| selector.iter().all(|pair| labels.contains(pair)))
            })
    }
}

/// Shared state of the simulation loop.
pub(crate) struct Sim {
    pub store: Store,
    pub k: K,
    pub config: ClusterConfig,
    pub nodes: Vec<NodeConfig>,
    /// The data plane's bound address (Gateway listeners point at its port).
    pub gateway_addr: SocketAddr,
    /// Per-pod kubelet progress, by uid.
    pub pods: HashMap<String, kubelet::PodRuntime>,
    /// Last FailedScheduling message per pod uid (events are sent when it changes).
    pub unschedulable: HashMap<String, String>,
    /// Set by a pass when some timer is running (start delays, probes, back-offs), so the
    /// next pass comes after `tick` instead of the idle interval.
    pub busy: bool,
    /// What the next pass has to sync (when it is not a full pass).
    pub dirty: Dirty,
    /// Whether this pass syncs every Deployment and ReplicaSet (their timers: progress
    /// deadlines, minReadySeconds).
    pub full_pass: bool,
    /// Whether this pass syncs every object of every component (`dirty.all` was set).
    pub resync: bool,
    /// When the last full pass ran, and how long it took.
    last_full: Instant,
    full_pass_cost: Duration,
    /// Pods with kubelet timers running (synced on every pass).
    pub busy_pods: BTreeSet<NsName>,
    /// Pod IPs handed out by the kubelets (of `pods`).
    pub pod_ips: HashSet<String>,
    /// Pods by label, and Services by selector pair, for the endpoints controller.
    pub pod_labels: LabelIndex,
    pub service_selectors: ServiceIndex,
    /// EndpointSlices by label (a Service's slices by `kubernetes.io/service-name`).
    pub slice_labels: LabelIndex,
    /// Summed requests of each pod by uid (pod requests do not change).
    pub requests: HashMap<String, std::sync::Arc<BTreeMap<String, i128>>>,
    /// pod-template-hash of each Deployment by uid, with the generation it was computed at.
    pub template_hashes: std::cell::RefCell<HashMap<String, (i64, String)>>,
    /// Node heartbeats, the node lifecycle and taint eviction controllers' state.
    pub lifecycle: node_lifecycle::Lifecycle,
}

/// What `start` hands back to the emulator.
pub(crate) struct Running {
    pub gateway_addr: SocketAddr,
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Which kubelets are stopped (`stop_node_heartbeats`).
    heartbeats: node_lifecycle::Heartbeats,
}

/// Creates the nodes (and Gateway), binds the data plane and starts the loop. `plane` is
/// the data plane's state, shared with the API server's service proxy.
pub(crate) async fn start(
    store: Store,
    config: ClusterConfig,
    plane: dataplane::Plane,
) -> std::io::Result<Running> {
    let k = K::new(&store);
    let listener = tokio::net::TcpListener::bind(config.gateway_listen).await?;
    let gateway_addr = listener.local_addr()?;
    let nodes = config.node_list();
    let mut sim = Sim {
        store: store.clone(),
        k,
        config,
        nodes,
        gateway_addr,
        pods: HashMap::new(),
        unschedulable: HashMap::new(),
        busy: false,
        dirty: Dirty {
            all: true,
            ..Default::default()
        },
        full_pass: true,
        resync: true,
        last_full: Instant::now(),
        full_pass_cost: Duration::ZERO,
        busy_pods: BTreeSet::new(),
        pod_ips: HashSet::new(),
        pod_labels: LabelIndex::default(),
        service_selectors: ServiceIndex::default(),
        slice_labels: LabelIndex::default(),
        requests: HashMap::new(),
        template_hashes: Default::default(),
        lifecycle: Default::default(),
    };
    let heartbeats = sim.lifecycle.heartbeats.clone();
    sim.create_nodes();
    networking::create_gateway(&sim);
    let dp = tokio::spawn(dataplane::serve(listener, plane));
    let main = tokio::spawn(async move { sim.run().await });
    tracing::info!(%gateway_addr, "simulated cluster running");
    Ok(Running {
        gateway_addr,
        tasks: vec![dp, main],
        heartbeats,
    })
}

impl Sim {
    async fn run(&mut self) {
        let mut rx = self.store.lock().feed();
        let mut changed = true;
        loop {
            // The kubelet's timers are looked at on every pass (its busy pods); the
            // controllers' (progress deadlines, minReadySeconds) on full passes, which run
            // every IDLE_TICK, changes or not. A full pass costs time in proportion to the cluster's size; spacing them by
            // FULL_PASS_SHARE times their cost keeps them to a small share of the loop's time
            // (and of an idle cluster's CPU) however many objects there are.
            let interval = IDLE_TICK.max(self.full_pass_cost * FULL_PASS_SHARE);
            self.full_pass = self.dirty.all || since(self.last_full) >= interval;
            let started = Instant::now();
            if self.full_pass {
                self.last_full = started;
            }
            self.pass(changed || self.busy);
            if self.full_pass {
                self.full_pass_cost = started.elapsed();
            }
            changed = tokio::select! {
                r = rx.recv() => {
                    let Some(c) = r else {
                        return;
                    };
                    let mut changes = vec![c];
                    // Coalesce bursts of changes (API writes come in flurries) into one pass.
                    tokio::time::sleep(DEBOUNCE).await;
                    while let Ok(c) = rx.try_recv() {
                        changes.push(c);
                    }
                    self.note_changes(&changes);
                    true
                }
                _ = tokio::time::sleep(if self.busy { self.config.tick } else { IDLE_TICK }) => false,
            };
        }
    }

    /// Turns changes into what the next pass has to sync.
    fn note_changes(&mut self, changes: &[std::sync::Arc<crate::store::Change>]) {
        let k = self.k;
        let st = self.store.lock();
        let key = |c: &crate::store::Change| (c.namespace.clone(), c.name.clone());
        // The (namespace, name) and controller uid of the object with this uid.
        let owner = |u: &str| {
            st.by_uid(u).map(|(_, o)| {
                let ns = meta_str(&o, "namespace").unwrap_or("").to_string();
                let name = meta_str(&o, "name").unwrap_or("").to_string();
                ((ns, name), controller_uid(&o).map(String::from))
            })
        };
        for c in changes {
            let objs = [Some(&*c.object), c.old.as_deref()];
            // The LeaderWorkerSet controlling a changed pod or Service (its controller
            // watches both: `SetupWithManager` in the lws controllers).
            for o in objs.iter().flatten() {
                if let Some(owner) = leader_worker_set::controller_name(o) {
                    self.dirty
                        .lws
                        .insert((c.namespace.clone(), owner.to_string()));
                }
            }
            let controllers: BTreeSet<&str> = objs
                .iter()
                .flatten()
                .filter_map(|o| controller_uid(o))
                .collect();
            if std::ptr::eq(c.kind, k.pod) {
                self.dirty.pods.insert(key(c));
                if c.event == crate::store::EventType::Deleted {
                    self.dirty.removed_pods.insert(uid(&c.object).to_string());
                }
                for u in controllers {
                    if let Some((rs, d)) = owner(u) {
                        self.dirty.replicasets.insert(rs);
                        if let Some((d, _)) = d.and_then(|d| owner(&d)) {
                            self.dirty.deployments.insert(d);
                        }
                    }
                }
                let new = (c.event != crate::store::EventType::Deleted).then_some(&*c.object);
                self.pod_labels
                    .update("/metadata/labels", c.old.as_deref(), new);
                // The Services selecting the pod, before or after.
                for o in objs.iter().flatten() {
                    let labels = LabelIndex::labels(o, "/metadata/labels");
                    for s in self.service_selectors.selecting(&c.namespace, &labels) {
                        self.dirty.services.insert((c.namespace.clone(), s.clone()));
                    }
                }
            } else if std::ptr::eq(c.kind, k.replicaset) {
                self.dirty.replicasets.insert(key(c));
                for u in controllers {
                    if let Some((d, _)) = owner(u) {
                        self.dirty.deployments.insert(d);
                    }
                }
            } else if std::ptr::eq(c.kind, k.deployment) {
                self.dirty.deployments.insert(key(c));
            } else if leader_worker_set::is_lws(c.kind) {
                self.dirty.lws.insert(key(c));
            } else if std::ptr::eq(c.kind, k.service) {
                self.dirty.services.insert(key(c));
                let new = (c.event != crate::store::EventType::Deleted).then_some(&*c.object);
                self.service_selectors.update(key(c), new);
            } else if k.endpointslice.is_some_and(|e| std::ptr::eq(c.kind, e)) {
                for o in objs.iter().flatten() {
                    if let Some(svc) = o
                        .pointer("/metadata/labels/kubernetes.io~1service-name")
                        .and_then(Value::as_str)
                    {
                        self.dirty
                            .services
                            .insert((c.namespace.clone(), svc.to_string()));
                    }
                }
                let new = (c.event != crate::store::EventType::Deleted).then_some(&*c.object);
                self.slice_labels
                    .update("/metadata/labels", c.old.as_deref(), new);
            } else if !matches!(
                c.kind.kind,
                // Kinds no simulated component reads.
                "Event" | "Lease" | "PodDisruptionBudget" | "ServiceAccount"
            ) {
                self.dirty.all = true;
            }
        }
    }

    /// One pass of every component; each is level-triggered and idempotent.
    fn pass(&mut self, full: bool) {
        self.busy = false;
        self.resync = self.dirty.all;
        if self.resync {
            self.template_hashes.borrow_mut().clear();
            // Indexes kept from the change feed start over from the store.
            self.pod_labels = LabelIndex::default();
            for p in self.list(self.k.pod) {
                self.pod_labels.update("/metadata/labels", None, Some(&p));
            }
            self.slice_labels = LabelIndex::default();
            if let Some(kind) = self.k.endpointslice {
                for s in self.list(kind) {
                    self.slice_labels.update("/metadata/labels", None, Some(&s));
                }
            }
            self.service_selectors = ServiceIndex::default();
            for s in self.list(self.k.service) {
                let key = (
                    meta_str(&s, "namespace").unwrap_or("").to_string(),
                    meta_str(&s, "name").unwrap_or("").to_string(),
                );
                self.service_selectors.update(key, Some(&s));
            }
        }
        node_lifecycle::run(self);
        controllers::deployments(self);
        controllers::replicasets(self);
        leader_worker_set::run(self);
        // The resource quota controller keeps `status.used` current as pods come and go.
        quotas::sync(self);
        if full {
            controllers::claims(self);
            scheduler::schedule(self);
            kubelet::run(self);
            networking::reconcile(self);
        }
        // Only the components that ran have consumed their part.
        let removed = std::mem::take(&mut self.dirty.removed_pods);
        if full {
            self.dirty = Dirty::default();
        } else {
            self.dirty.deployments.clear();
            self.dirty.replicasets.clear();
            self.dirty.lws.clear();
            self.dirty.removed_pods = removed;
        }
    }

    /// The objects of `kind` a pass syncs: all of them when `all`, else the dirty ones
    /// (that still exist), in key order.
    pub fn candidates(
        &self,
        kind: &'static ResourceKind,
        dirty: &BTreeSet<NsName>,
        all: bool,
    ) -> Vec<std::sync::Arc<Value>> {
        if all {
            return self.list(kind);
        }
        let st = self.store.lock();
        dirty
            .iter()
            .filter_map(|(ns, name)| st.get(kind, ns, name))
            .collect()
    }

    /// The objects whose controller ownerReference names `owner_uid`, of one kind.
    pub fn controlled(
        &self,
        kind: &'static ResourceKind,
        owner_uid: &str,
    ) -> Vec<std::sync::Arc<Value>> {
        self.store
            .lock()
            .dependents(owner_uid)
            .into_iter()
            .filter(|(k, o)| std::ptr::eq(*k, kind) && controller_uid(o) == Some(owner_uid))
            .map(|(_, o)| o)
            .collect()
    }

    fn create_nodes(&self) {
        for (i, n) in self.nodes.iter().enumerate() {
            let mut labels: BTreeMap<String, String> = BTreeMap::from([
                ("kubernetes.io/hostname".into(), n.name.clone()),
                ("kubernetes.io/os".into(), "linux".into()),
                ("kubernetes.io/arch".into(), "amd64".into()),
                ("beta.kubernetes.io/os".into(), "linux".into()),
                ("beta.kubernetes.io/arch".into(), "amd64".into()),
            ]);
            labels.extend(n.labels.clone());
            let mut spec = json!({"podCIDR": pod_cidr(i), "podCIDRs": [pod_cidr(i)]});
            if !n.taints.is_empty() {
                spec["taints"] = json!(n.taints);
            }
            let obj = json!({"metadata": {"name": n.name, "labels": labels}, "spec": spec});
            let opts = manager("kubelet");
            let _ = ops::create(&self.store, self.k.node, "", obj, &opts);
            let mut alloc = json!({
                "cpu": n.cpu, "memory": n.memory, "pods": n.pods.to_string(),
                "ephemeral-storage": "100Gi", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
            });
            for (r, q) in &n.extended {
                alloc[r] = json!(q);
            }
            let status = json!({
                "capacity": alloc, "allocatable": alloc,
                "conditions": node_lifecycle::kubelet_conditions(&ops::now()),
                "addresses": [
                    {"type": "InternalIP", "address": node_ip(i)},
                    {"type": "Hostname", "address": n.name},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "architecture": "amd64", "operatingSystem": "linux",
                    "kubeletVersion": crate::KUBERNETES_VERSION,
                    "kubeProxyVersion": "", "containerRuntimeVersion": "containerd://2.1.0",
                    "osImage": "modelplane emulator", "kernelVersion": "6.8.0",
                    "machineID": "", "systemUUID": "", "bootID": "",
                },
            });
            if let Some(node) = self.store.get(self.k.node, "", &n.name) {
                let _ = write_status(&self.store, self.k.node, &node, status, "kubelet");
            }
        }
    }

    /// Lists one kind (all namespaces) without copying the objects.
    pub fn list(&self, kind: &'static ResourceKind) -> Vec<std::sync::Arc<Value>> {
        self.store.lock().list(kind, None)
    }

    /// Index of a simulated node by name, while its kubelet runs (`None` for a node whose
    /// heartbeats are stopped: its kubelet neither starts, updates nor removes pods).
    pub fn node_index(&self, name: &str) -> Option<usize> {
        if self.lifecycle.stopped.contains(name) {
            return None;
        }
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Records a core/v1 Event about `obj`.
    pub fn event(
        &self,
        obj: &Value,
        kind: &ResourceKind,
        ty: &str,
        reason: &str,
        msg: &str,
        component: &str,
    ) {
        let ns = meta_str(obj, "namespace").unwrap_or("default");
        let name = meta_str(obj, "name").unwrap_or("");
        let now = ops::now();
        let id = uuid::Uuid::new_v4().simple().to_string();
        let host = obj.pointer("/spec/nodeName").and_then(Value::as_str);
        let mut source = json!({"component": component});
        if component == "kubelet"
            && let Some(h) = host
        {
            source["host"] = json!(h);
        }
        let ev = json!({
            "metadata": {"name": format!("{name}.{}", &id[..16]), "namespace": ns},
            "involvedObject": {
                "apiVersion": kind.api_version(), "kind": kind.kind, "name": name, "namespace": ns,
                "uid": meta_str(obj, "uid"), "resourceVersion": meta_str(obj, "resourceVersion"),
            },
            "reason": reason, "message": msg, "type": ty, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now, "eventTime": null,
            "source": source, "reportingComponent": component,
            "reportingInstance": host.filter(|_| component == "kubelet").unwrap_or(""),
        });
        let _ = ops::create(&self.store, self.k.event, ns, ev, &manager(component));
    }
}

pub(crate) fn manager(name: &str) -> WriteOptions {
    WriteOptions {
        field_manager: Some(name.into()),
        default_manager: name.into(),
        internal: true,
        ..Default::default()
    }
}

/// Writes `status` through the status subresource (optimistically: a conflict is retried
/// by the next pass). Returns whether something was written.
pub(crate) fn write_status(
    store: &Store,
    kind: &'static ResourceKind,
    obj: &Value,
    status: Value,
    component: &str,
) -> bool {
    // Compare as stored: the API server drops nulls (Go's omitempty pointers).
    let mut status = status;
    strip_nulls(&mut status);
    if obj.get("status") == Some(&status) {
        return false;
    }
    let mut new = obj.clone();
    new["status"] = status;
    let ns = meta_str(obj, "namespace").unwrap_or("");
    let name = meta_str(obj, "name").unwrap_or("");
    ops::update(store, kind, ns, name, "status", new, &manager(component)).is_ok()
}

/// Writes the whole object through the main endpoint (with its resourceVersion).
pub(crate) fn write_object(
    store: &Store,
    kind: &'static ResourceKind,
    new: Value,
    component: &str,
) -> bool {
    let ns = meta_str(&new, "namespace").unwrap_or("").to_string();
    let name = meta_str(&new, "name").unwrap_or("").to_string();
    ops::update(store, kind, &ns, &name, "", new, &manager(component)).is_ok()
}

/// Removes null members of objects, recursively.
pub(crate) fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

fn pod_cidr(i: usize) -> String {
    format!("10.244.{i}.0/24")
}

fn node_ip(i: usize) -> String {
    format!("172.18.0.{}", i + 2)
}

pub(crate) fn deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}

pub(crate) fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or("")
}

/// The uid of the controller ownerReference, if any.
pub(crate) fn controller_uid(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

/// A condition of `status.conditions` by type.
pub(crate) fn condition<'a>(obj: &'a Value, ty: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
}

pub(crate) fn is_true(obj: &Value, ty: &str) -> bool {
    condition(obj, ty)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True")
}

/// Parses a quantity into milli-units (enough for scheduling arithmetic).
pub(crate) fn milli(q: &Value) -> i128 {
    let s = match q {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return 0,
    };
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().unwrap_or(0.0);
    let mult: f64 = match suffix {
        "" => 1.0,
        "m" => 0.001,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().unwrap_or(0)),
        _ => 1.0,
    };
    (n * mult * 1000.0).ceil() as i128
}

/// Go's `time.Duration` string (`200ms`, `10s`, `5m0s`), as the kubelet prints back-offs.
pub(crate) fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        let s = format!("{secs:.3}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        return format!("{s}s");
    }
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total / 60) % 60, total % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else {
        format!("{m}m{s}s")
    }
}

/// Elapsed since `t`.
pub(crate) fn since(t: Instant) -> Duration {
    Instant::now().saturating_duration_since(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_like_a_shell_pattern() {
        assert!(glob("*:broken", "ghcr.io/x/y:broken"));
        assert!(glob("ghcr.io/*/crash*", "ghcr.io/a/crash:1"));
        assert!(!glob("ghcr.io/*/crash*", "docker.io/a/crash:1"));
        assert!(glob("exact", "exact"));
        assert!(!glob("a*a", "a"));
    }

    #[test]
    fn quantities_and_durations() {
        assert_eq!(milli(&json!("500m")), 500);
        assert_eq!(milli(&json!("2")), 2000);
        assert_eq!(milli(&json!("1Gi")), 1024 * 1024 * 1024 * 1000);
        assert_eq!(go_duration(Duration::from_millis(200)), "200ms");
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
    }
}
