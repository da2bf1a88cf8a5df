//! Multi-node serving of the `sim` engine, after vLLM's multiprocessing executor across
//! nodes (vLLM 0.11.1, `vllm/engine/arg_utils.py` `EngineArgs`, `vllm/config/parallel.py`
//! `ParallelConfig`; "Running vLLM with MultiProcessing" in
//! docs/serving/parallelism_scaling.md): every node runs `vllm serve` with the same
//! `--nnodes N`, its `--node-rank`, and the head's `--master-addr`/`--master-port`; the
//! nodes of rank > 0 run `--headless` (no API server). The head only serves once all N
//! nodes joined its torch.distributed rendezvous at `master-addr:master-port`.
//!
//! Here a worker has joined a leader when it is a running headless sim with the same
//! `--nnodes`, a distinct `--node-rank` in 1..N, the leader's `--master-port`, and a
//! `--master-addr` that resolves to the leader pod: its IP, or its DNS name
//! `<hostname>.<subdomain>.<namespace>[.svc[.cluster.local]]`, which exists (kubernetes
//! DNS specification, github.com/kubernetes/dns docs/specification.md, "2.4.1 A/AAAA
//! records" for pods with `hostname` and `subdomain`) only while a headless Service named
//! `<subdomain>` in the namespace selects the pod and publishes its address: ready, or
//! not ready with `publishNotReadyAddresses` (k8s.io/endpointslice `podToEndpoint`:
//! `ready := service.Spec.PublishNotReadyAddresses || podutil.IsPodReady(pod)`; CoreDNS
//! serves only ready addresses).

use std::collections::BTreeMap;

use serde_json::Value;

use super::sim::sim_config;
use crate::cluster::networking::selected_pods;
use crate::cluster::{deleting, is_true};
use crate::resources::meta_str;
use crate::store::Store;

/// vLLM's default `--master-port` (`ParallelConfig.master_port`).
pub(crate) const DEFAULT_MASTER_PORT: &str = "29501";

/// The multi-node flags of one sim process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MultiNode {
    /// `--nnodes`/`-n` (default 1).
    pub nnodes: u32,
    /// `--node-rank`/`-r` (default 0).
    pub node_rank: u32,
    /// `--master-addr` (default 127.0.0.1), after `$(VAR)` expansion.
    pub master_addr: String,
    /// `--master-port` (default 29501).
    pub master_port: String,
    /// `--headless`: no API server (no HTTP at all).
    pub headless: bool,
    /// `--tensor-parallel-size`/`-tp` × `--pipeline-parallel-size`/`-pp` (default 1 each).
    pub world_size: u32,
}

impl Default for MultiNode {
    fn default() -> Self {
        MultiNode {
            nnodes: 1,
            node_rank: 0,
            master_addr: "127.0.0.1".into(),
            master_port: DEFAULT_MASTER_PORT.into(),
            headless: false,
            world_size: 1,
        }
    }
}

impl MultiNode {
    /// The head of a multi-node engine: more than one node, rank 0, serving HTTP.
    pub fn leads_group(&self) -> bool {
        self.nnodes > 1 && self.node_rank == 0 && !self.headless
    }

    /// Why vLLM refuses these flags at start (it exits 1), if it does: `ParallelConfig`
    /// (vllm/config/parallel.py) requires `node_rank < nnodes` and the world size
    /// (TP × PP) to split evenly over the nodes.
    pub fn startup_error(&self) -> Option<String> {
        if self.nnodes == 0 {
            return Some("nnodes must be at least 1".into());
        }
        if self.node_rank >= self.nnodes {
            return Some(format!(
                "node_rank ({}) must be smaller than nnodes ({})",
                self.node_rank, self.nnodes
            ));
        }
        if self.nnodes > 1 && !self.world_size.is_multiple_of(self.nnodes) {
            return Some(format!(
                "world_size ({}) = tensor_parallel_size x pipeline_parallel_size must be divisible by nnodes ({})",
                self.world_size, self.nnodes
            ));
        }
        None
    }
}

/// The workers that joined `leader` (a sim pod leading a group), by rank: pod names,
/// sorted by rank. Complete when it holds `nnodes - 1` of them.
pub(crate) fn joined_workers(store: &Store, leader: &Value, lead: &MultiNode) -> Vec<String> {
    let kinds = store.kinds();
    let (Some(pod_kind), Some(svc_kind)) = (
        kinds.by_resource("", "v1", "pods"),
        kinds.by_resource("", "v1", "services"),
    ) else {
        return Vec::new();
    };
    let ns = meta_str(leader, "namespace").unwrap_or("");
    let mut names: Vec<String> = Vec::new();
    let host = leader.pointer("/spec/hostname").and_then(Value::as_str);
    let sub = leader.pointer("/spec/subdomain").and_then(Value::as_str);
    if let (Some(host), Some(sub)) = (host, sub)
        && !host.is_empty()
        && !sub.is_empty()
        && store.get(svc_kind, ns, sub).is_some_and(|svc| {
            svc.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None")
                && !selected_pods([leader], &svc).is_empty()
                && (svc.pointer("/spec/publishNotReadyAddresses") == Some(&Value::Bool(true))
                    || is_true(leader, "Ready"))
        })
    {
        let base = format!("{host}.{sub}.{ns}");
        names = vec![
            base.clone(),
            format!("{base}.svc"),
            format!("{base}.svc.cluster.local"),
        ];
    }
    if let Some(ip) = leader.pointer("/status/podIP").and_then(Value::as_str) {
        names.push(ip.to_string());
    }
    if names.is_empty() {
        return Vec::new();
    }
    let mut by_rank: BTreeMap<u32, String> = BTreeMap::new();
    for p in store.list(pod_kind, Some(ns)) {
        let running = p.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
            && p.pointer("/status/containerStatuses/0/state/running")
                .is_some()
            && !deleting(&p);
        if !running || meta_str(&p, "uid") == meta_str(leader, "uid") {
            continue;
        }
        let Some(cfg) = sim_config(&p) else { continue };
        let w = &cfg.multinode;
        if w.headless
            && w.nnodes == lead.nnodes
            && (1..w.nnodes).contains(&w.node_rank)
            && w.master_port == lead.master_port
            && names.iter().any(|n| n.eq_ignore_ascii_case(&w.master_addr))
        {
            let name = meta_str(&p, "name").unwrap_or("").to_string();
            by_rank.entry(w.node_rank).or_insert(name);
        }
    }
    by_rank.into_values().collect()
}

/// Whether every worker of a leading sim joined it (the head's API server is up).
pub(crate) fn group_complete(store: &Store, leader: &Value, lead: &MultiNode) -> bool {
    joined_workers(store, leader, lead).len() as u32 + 1 >= lead.nnodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// vLLM's flags (arg_utils.py: `--nnodes`/`-n`, `--node-rank`/`-r`, `--master-addr`,
    /// `--headless`, `-tp`/`-pp`, `_` for `-`), read after `$(VAR)` expansion.
    #[test]
    fn multi_node_flags_are_read_after_expansion() {
        let pod = json!({"metadata": {"labels": {"modelplane.io/engine": "sim"}},
            "spec": {"containers": [{"image": "x",
                "env": [{"name": "LWS_WORKER_INDEX", "value": "1"},
                        {"name": "LWS_LEADER_ADDRESS", "value": "v-0.v.default"}],
                "args": ["--model", "m", "--nnodes=2", "--node_rank", "$(LWS_WORKER_INDEX)",
                         "--master-addr", "$(LWS_LEADER_ADDRESS)", "-tp", "4", "--pipeline-parallel-size=2",
                         "--headless"]}]}});
        let m = sim_config(&pod).unwrap().multinode;
        assert_eq!(
            m,
            MultiNode {
                nnodes: 2,
                node_rank: 1,
                master_addr: "v-0.v.default".into(),
                master_port: DEFAULT_MASTER_PORT.into(),
                headless: true,
                world_size: 8,
            }
        );
        assert!(!m.leads_group());
        assert_eq!(m.startup_error(), None);
    }

    /// ParallelConfig's checks: node_rank < nnodes, world size divisible by nnodes.
    #[test]
    fn refused_flags_are_a_startup_error() {
        let m = |nnodes, node_rank, world_size| MultiNode {
            nnodes,
            node_rank,
            world_size,
            ..MultiNode::default()
        };
        assert!(m(2, 2, 2).startup_error().is_some());
        assert!(m(2, 0, 3).startup_error().is_some());
        assert!(m(2, 0, 4).startup_error().is_none());
        assert!(m(2, 0, 4).leads_group());
        assert!(m(1, 0, 3).startup_error().is_none());
    }
}
