//! The cluster's GPU inventory: the worker watches Nodes (read-only) and, on each node
//! offering GPUs, the pods bound to it (as the kubelet does, by `spec.nodeName`), and
//! keeps `gpu_node` in Postgres current for the API (`GET /capacity`, the fit check); and
//! every node's labels in `cluster_node`, which a spec's nodeSelector is checked against.
//!
//! A GPU resource is the configured default (`--gpu-resource-name`) or any extended
//! resource named `<domain>/gpu` (`nvidia.com/gpu`, `amd.com/gpu`). A pod's request is
//! what the scheduler counts: the sum over its containers (a container's limit when it
//! sets no request), or its largest init container if that is more; finished pods
//! (`Succeeded`, `Failed`) hold nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use kube::runtime::watcher;
use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::desired::{LABEL_INSTALLATION, LABEL_MANAGED_BY};
use crate::domain::GpuNode;
use crate::store;

/// How long changes gather before one write: a rollout moves many pods at once.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// What the inventory needs to know.
#[derive(Debug, Clone)]
pub struct InventoryConfig {
    pub worker_id: String,
    pub installation: String,
    pub default_gpu_resource: String,
    /// The node label naming the GPU product (`nvidia.com/gpu.product`).
    pub product_label: String,
}

#[derive(Debug, Clone, PartialEq)]
struct NodeGpus {
    /// Allocatable per GPU resource name (only those above zero).
    allocatable: BTreeMap<String, i64>,
    product: Option<String>,
    ready: bool,
    schedulable: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct PodGpus {
    requests: BTreeMap<String, i64>,
    ours: bool,
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, NodeGpus>,
    /// Per node: the GPU requests of its pods, by pod uid (pods asking for none are not kept).
    pods: HashMap<String, HashMap<String, PodGpus>>,
    /// The pod watch of each GPU node.
    watching: HashMap<String, CancellationToken>,
    /// Every node's labels (GPU nodes or not).
    labels: BTreeMap<String, BTreeMap<String, String>>,
    /// The node watch has listed every node once.
    synced: bool,
}

pub struct Inventory {
    pool: PgPool,
    client: kube::Client,
    config: InventoryConfig,
    state: Mutex<State>,
    changed: Notify,
}

impl Inventory {
    pub fn new(pool: PgPool, client: kube::Client, config: InventoryConfig) -> Arc<Self> {
        Arc::new(Inventory {
            pool,
            client,
            config,
            state: Mutex::default(),
            changed: Notify::new(),
        })
    }

    /// Watches and reports until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        tokio::spawn(self.clone().write_loop(shutdown.clone()));
        let api = kube::Api::<Node>::all(self.client.clone());
        let stream = watcher::watcher(api, watcher::Config::default());
        let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(stream));
        let mut listed: HashSet<String> = HashSet::new();
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => break,
                event = stream.next() => event,
            };
            let Some(event) = event else { break };
            match event {
                Ok(watcher::Event::Init) => listed.clear(),
                Ok(watcher::Event::InitApply(node)) => {
                    if let Some(name) = node.metadata.name.clone() {
                        listed.insert(name);
                    }
                    self.node_seen(&node, &shutdown);
                }
                Ok(watcher::Event::InitDone) => {
                    let gone: Vec<String> = {
                        let mut state = self.state.lock().expect("inventory lock");
                        state.labels.retain(|n, _| listed.contains(n));
                        state
                            .nodes
                            .keys()
                            .filter(|n| !listed.contains(*n))
                            .cloned()
                            .collect()
                    };
                    for name in gone {
                        self.node_gone(&name);
                    }
                    self.state.lock().expect("inventory lock").synced = true;
                    self.changed.notify_one();
                }
                Ok(watcher::Event::Apply(node)) => self.node_seen(&node, &shutdown),
                Ok(watcher::Event::Delete(node)) => {
                    if let Some(name) = &node.metadata.name {
                        self.state
                            .lock()
                            .expect("inventory lock")
                            .labels
                            .remove(name);
                        self.node_gone(name);
                    }
                }
                Err(err) => {
                    tracing::debug!(error = %err, "node watch interrupted; retrying");
                    metrics::counter!(crate::metrics::WATCH_RESTARTS, "kind" => "Node")
                        .increment(1);
                }
            }
        }
        let mut state = self.state.lock().expect("inventory lock");
        for (_, token) in state.watching.drain() {
            token.cancel();
        }
    }

    fn node_seen(self: &Arc<Self>, node: &Node, shutdown: &CancellationToken) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        let gpus = node_gpus(node, &self.config);
        let mut state = self.state.lock().expect("inventory lock");
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if state.labels.get(&name) != Some(&labels) {
            state.labels.insert(name.clone(), labels);
            self.changed.notify_one();
        }
        match gpus {
            Some(gpus) => {
                if state.nodes.get(&name) != Some(&gpus) {
                    state.nodes.insert(name.clone(), gpus);
                    self.changed.notify_one();
                }
                if !state.watching.contains_key(&name) {
                    let token = shutdown.child_token();
                    state.watching.insert(name.clone(), token.clone());
                    tokio::spawn(self.clone().watch_pods(name, token));
                }
            }
            // No GPUs (any more): nothing to report or watch.
            None => {
                drop(state);
                self.node_gone(&name);
            }
        }
    }

    fn node_gone(&self, name: &str) {
        let mut state = self.state.lock().expect("inventory lock");
        if let Some(token) = state.watching.remove(name) {
            token.cancel();
        }
        let had = state.nodes.remove(name).is_some();
        state.pods.remove(name);
        if had {
            self.changed.notify_one();
        }
    }

    /// The pods bound to one GPU node.
    async fn watch_pods(self: Arc<Self>, node: String, stop: CancellationToken) {
        let api = kube::Api::<Pod>::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let stream = watcher::watcher(api, config);
        let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(stream));
        let mut listed: HashMap<String, PodGpus> = HashMap::new();
        loop {
            let event = tokio::select! {
                () = stop.cancelled() => return,
                event = stream.next() => event,
            };
            let Some(event) = event else { return };
            let mut state = self.state.lock().expect("inventory lock");
            if !state.watching.contains_key(&node) {
                return;
            }
            let pods = state.pods.entry(node.clone()).or_default();
            let before = pods.clone();
            match event {
                Ok(watcher::Event::Init) => listed.clear(),
                Ok(watcher::Event::InitApply(pod)) => {
                    if let Some((uid, gpus)) = pod_gpus(&pod, &self.config) {
                        listed.insert(uid, gpus);
                    }
                }
                Ok(watcher::Event::InitDone) => *pods = std::mem::take(&mut listed),
                Ok(watcher::Event::Apply(pod)) => {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    match pod_gpus(&pod, &self.config) {
                        Some((uid, gpus)) => {
                            pods.insert(uid, gpus);
                        }
                        None => {
                            pods.remove(&uid);
                        }
                    }
                }
                Ok(watcher::Event::Delete(pod)) => {
                    pods.remove(&pod.metadata.uid.unwrap_or_default());
                }
                Err(err) => {
                    tracing::debug!(node = %node, error = %err, "pod watch of a GPU node interrupted; retrying");
                    metrics::counter!(crate::metrics::WATCH_RESTARTS, "kind" => "Pod (GPU node)")
                        .increment(1);
                }
            }
            if *pods != before {
                self.changed.notify_one();
            }
        }
    }

    /// Writes the inventory when it changed (and once the nodes are listed, so an empty
    /// cluster is reported as such), at most once per [`DEBOUNCE`].
    async fn write_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let mut written: Option<Vec<GpuNode>> = None;
        let mut labels_written: Option<BTreeMap<String, BTreeMap<String, String>>> = None;
        let mut failures = 0u32;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.changed.notified() => {}
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(DEBOUNCE) => {}
            }
            let (rows, labels) = {
                let state = self.state.lock().expect("inventory lock");
                if !state.synced {
                    continue;
                }
                (rows(&state), state.labels.clone())
            };
            if labels_written.as_ref() != Some(&labels) {
                let nodes: Vec<(String, serde_json::Value)> = labels
                    .iter()
                    .map(|(name, l)| (name.clone(), serde_json::json!(l)))
                    .collect();
                match store::capacity::replace_node_labels(&self.pool, &nodes).await {
                    Ok(()) => labels_written = Some(labels),
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot write the node labels; retrying");
                        self.changed.notify_one();
                    }
                }
            }
            if written.as_ref() == Some(&rows) {
                continue;
            }
            match store::capacity::replace_gpu_nodes(&self.pool, &self.config.worker_id, &rows)
                .await
            {
                Ok(()) => {
                    failures = 0;
                    tracing::debug!(nodes = rows.len(), "GPU inventory written");
                    record_gauges(&rows);
                    written = Some(rows);
                }
                Err(err) => {
                    failures += 1;
                    tracing::warn!(error = %err, "cannot write the GPU inventory; retrying");
                    // Try again after a pause even if nothing else changes.
                    let wait = Duration::from_millis(500) * failures.min(20);
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(wait) => self.changed.notify_one(),
                    }
                }
            }
        }
    }
}

/// The GPU gauges (`metrics::GPUS`), per resource name and product.
fn record_gauges(rows: &[GpuNode]) {
    let report = crate::domain::CapacityReport::of(None, rows);
    for gpu in report.gpus {
        let product = gpu.product.unwrap_or_default();
        for (state, value) in [
            ("allocatable", gpu.allocatable),
            ("requested", gpu.requested),
            ("free", gpu.free),
        ] {
            metrics::gauge!(crate::metrics::GPUS, "resource" => gpu.resource_name.clone(), "product" => product.clone(), "state" => state)
                .set(value as f64);
        }
    }
}

/// One row per node and GPU resource, in a stable order.
fn rows(state: &State) -> Vec<GpuNode> {
    let mut rows = Vec::new();
    for (name, node) in &state.nodes {
        let pods = state.pods.get(name);
        for (resource, allocatable) in &node.allocatable {
            let (mut requested, mut ours) = (0, 0);
            for pod in pods.into_iter().flat_map(|p| p.values()) {
                let n = pod.requests.get(resource).copied().unwrap_or(0);
                requested += n;
                if pod.ours {
                    ours += n;
                }
            }
            rows.push(GpuNode {
                name: name.clone(),
                resource_name: resource.clone(),
                product: node.product.clone(),
                allocatable: *allocatable,
                requested,
                requested_by_modelplane: ours,
                ready: node.ready,
                schedulable: node.schedulable,
            });
        }
    }
    rows.sort_by(|a, b| (&a.name, &a.resource_name).cmp(&(&b.name, &b.resource_name)));
    rows
}

fn is_gpu(resource: &str, config: &InventoryConfig) -> bool {
    resource == config.default_gpu_resource
        || resource
            .split_once('/')
            .is_some_and(|(domain, name)| !domain.is_empty() && name == "gpu")
}

/// A whole-number quantity (`"8"`); GPUs are counted in whole devices.
fn count(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> i64 {
    q.0.trim().parse().unwrap_or(0)
}

fn node_gpus(node: &Node, config: &InventoryConfig) -> Option<NodeGpus> {
    let allocatable: BTreeMap<String, i64> = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .into_iter()
        .flatten()
        .filter(|(name, _)| is_gpu(name, config))
        .map(|(name, q)| (name.clone(), count(q)))
        .filter(|(_, n)| *n > 0)
        .collect();
    if allocatable.is_empty() {
        return None;
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let schedulable = !node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    Some(NodeGpus {
        allocatable,
        product: node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&config.product_label))
            .cloned(),
        ready,
        schedulable,
    })
}

/// The pod's uid and GPU requests; `None` when it holds none (finished, or asks for none).
fn pod_gpus(pod: &Pod, config: &InventoryConfig) -> Option<(String, PodGpus)> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let mut requests: BTreeMap<String, i64> = BTreeMap::new();
    for container in &spec.containers {
        for (name, n) in container_gpus(container, config) {
            *requests.entry(name).or_default() += n;
        }
    }
    for init in spec.init_containers.iter().flatten() {
        for (name, n) in container_gpus(init, config) {
            let total = requests.entry(name).or_default();
            *total = (*total).max(n);
        }
    }
    requests.retain(|_, n| *n > 0);
    if requests.is_empty() {
        return None;
    }
    let labels = pod.metadata.labels.as_ref();
    let ours = labels
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .map(String::as_str)
        == Some("modelplane")
        && labels.and_then(|l| l.get(LABEL_INSTALLATION)) == Some(&config.installation);
    Some((
        pod.metadata.uid.clone().unwrap_or_default(),
        PodGpus { requests, ours },
    ))
}

fn container_gpus(container: &Container, config: &InventoryConfig) -> Vec<(String, i64)> {
    let Some(resources) = &container.resources else {
        return Vec::new();
    };
    // Extended resources: the request, or the limit when no request is set (the API
    // server defaults one to the other).
    let mut names: Vec<&String> = resources
        .requests
        .iter()
        .flatten()
        .chain(resources.limits.iter().flatten())
        .map(|(name, _)| name)
        .filter(|name| is_gpu(name, config))
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let q = resources
                .requests
                .as_ref()
                .and_then(|r| r.get(name))
                .or_else(|| resources.limits.as_ref().and_then(|l| l.get(name)));
            (name.clone(), q.map(count).unwrap_or(0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> InventoryConfig {
        InventoryConfig {
            worker_id: "w".into(),
            installation: "default".into(),
            default_gpu_resource: "nvidia.com/gpu".into(),
            product_label: "nvidia.com/gpu.product".into(),
        }
    }

    #[test]
    fn a_pod_holds_its_containers_sum_or_its_largest_init_container() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "u1", "labels": {"app.kubernetes.io/managed-by": "modelplane", "modelplane.io/installation": "default"}},
            "spec": {
                "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "3"}}}],
                "containers": [
                    {"name": "a", "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"}}},
                    {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1", "amd.com/gpu": "2"}}},
                    {"name": "c", "resources": {"requests": {"example.com/fpga": "1"}}}
                ]
            }
        }))
        .unwrap();
        let (uid, gpus) = pod_gpus(&pod, &config()).unwrap();
        assert_eq!(uid, "u1");
        assert_eq!(
            gpus.requests,
            BTreeMap::from([("amd.com/gpu".into(), 2), ("nvidia.com/gpu".into(), 3)])
        );
        assert!(gpus.ours);
    }

    #[test]
    fn finished_pods_and_pods_without_gpus_hold_nothing() {
        let done: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "u"},
            "spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Succeeded"}
        }))
        .unwrap();
        assert!(pod_gpus(&done, &config()).is_none());
        let cpu: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "u"},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}
        }))
        .unwrap();
        assert!(pod_gpus(&cpu, &config()).is_none());
    }

    #[test]
    fn a_cordoned_not_ready_node_is_reported_with_its_product() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "A100"}},
            "spec": {"unschedulable": true},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "32"},
                "conditions": [{"type": "Ready", "status": "Unknown"}]
            }
        }))
        .unwrap();
        let gpus = node_gpus(&node, &config()).unwrap();
        assert_eq!(
            gpus.allocatable,
            BTreeMap::from([("nvidia.com/gpu".into(), 8)])
        );
        assert_eq!(gpus.product.as_deref(), Some("A100"));
        assert!(!gpus.ready && !gpus.schedulable);
        let cpu_only: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"},
            "status": {"allocatable": {"cpu": "32"}}
        }))
        .unwrap();
        assert!(node_gpus(&cpu_only, &config()).is_none());
    }
}
