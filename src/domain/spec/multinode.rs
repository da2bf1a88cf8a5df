//! The rules of a model that spans nodes (`spec.nodesPerReplica` above 1): each replica
//! is a LeaderWorkerSet group whose engines split `tensorParallelSize ×
//! pipelineParallelSize` GPUs evenly over the group's pods.

use super::{DeploymentSpec, EngineKind, FieldErrors, MAX_TENSOR_PARALLEL};

/// The most nodes one replica may span.
pub const MAX_NODES_PER_REPLICA: i64 = 32;

/// Engine flags modelplane sets on the pods of a group (which node, how many, where the
/// leader is, how the work is split); a spec setting them would break the group.
pub const MULTINODE_FLAGS: [&str; 7] = [
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--headless",
    "--distributed-executor-backend",
    "--pipeline-parallel-size",
];

/// The name of the LeaderWorkerSet of a deployment whose replicas span nodes: not the
/// deployment's own, since LWS names the headless Service that gives its pods their DNS
/// names after the set (`CreateHeadlessServiceIfNotExists`, which leaves an existing
/// Service of that name as it is), and `<name>` is the deployment's ClusterIP Service.
pub fn group_object_name(deployment: &str) -> String {
    format!("{deployment}{}", super::super::canary::GROUP_SUFFIX)
}

impl DeploymentSpec {
    /// Nodes per replica (1 when unset).
    pub fn nodes(&self) -> i64 {
        self.nodes_per_replica.unwrap_or(1)
    }

    /// The GPUs one replica's engines use in all: tensor × pipeline parallel size, when the
    /// tensor-parallel size is set.
    pub fn parallel_gpus(&self) -> Option<i64> {
        let tp = self.engine.tensor_parallel_size?;
        Some(tp * self.engine.pipeline_parallel_size.unwrap_or(1))
    }

    /// `spec.nodesPerReplica` and `spec.engine.pipelineParallelSize`.
    pub(crate) fn validate_multinode(&self, errors: &mut FieldErrors) {
        if let Some(pp) = self.engine.pipeline_parallel_size
            && !(1..=MAX_TENSOR_PARALLEL).contains(&pp)
        {
            errors.push(
                "spec.engine.pipelineParallelSize",
                format!("must be between 1 and {MAX_TENSOR_PARALLEL}"),
            );
        }
        let Some(nodes) = self.nodes_per_replica else {
            return;
        };
        if !(1..=MAX_NODES_PER_REPLICA).contains(&nodes) {
            errors.push(
                "spec.nodesPerReplica",
                format!("must be between 1 and {MAX_NODES_PER_REPLICA}"),
            );
            return;
        }
        if nodes == 1 {
            return;
        }
        if !matches!(self.engine.kind, EngineKind::Vllm | EngineKind::Sim) {
            errors.push(
                "spec.nodesPerReplica",
                format!(
                    "a replica spans nodes only with engine kind vllm or sim (whose multi-node flags modelplane sets), not {}",
                    self.engine.kind.as_str()
                ),
            );
        }
        let not_yet = |errors: &mut FieldErrors, field: &str, what: &str| {
            errors.push(
                field,
                format!("not yet with spec.nodesPerReplica above 1: {what}"),
            );
        };
        if self.disaggregation.is_some() {
            not_yet(
                errors,
                "spec.disaggregation",
                "each role would be groups of its own",
            );
        }
        if !self.adapters.is_empty() {
            not_yet(
                errors,
                "spec.adapters",
                "adapters are loaded into one pod's engine",
            );
        }
        if self.autoscaling.is_some() {
            not_yet(
                errors,
                "spec.autoscaling",
                "scale the groups with POST …/scale",
            );
        }
        match self.parallel_gpus() {
            None => errors.push(
                "spec.engine.tensorParallelSize",
                "is required with spec.nodesPerReplica above 1: the engines split tensor × pipeline parallel size GPUs over the group's nodes",
            ),
            Some(world) if world % nodes != 0 => errors.push(
                "spec.nodesPerReplica",
                format!(
                    "must divide tensorParallelSize × pipelineParallelSize ({world}): every node of a group runs the same number of GPUs"
                ),
            ),
            Some(world) => {
                let count = self.resources.gpu.as_ref().and_then(|g| g.count);
                if let Some(count) = count
                    && count * nodes != world
                {
                    errors.push(
                        "spec.resources.gpu.count",
                        format!(
                            "is per pod: with {nodes} nodes per replica and tensorParallelSize × pipelineParallelSize = {world} it must be {} (or unset)",
                            world / nodes
                        ),
                    );
                }
            }
        }
        for (i, arg) in self.engine.args.iter().enumerate() {
            let flag = arg.split('=').next().unwrap_or(arg);
            if MULTINODE_FLAGS.contains(&flag) {
                errors.push(
                    format!("spec.engine.args[{i}]"),
                    format!(
                        "`{flag}` is modelplane's to set on a group's pods (spec.nodesPerReplica, spec.engine.pipelineParallelSize)"
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::domain::spec::{DeploymentSpec, SpecLimits};

    fn fields(spec: serde_json::Value) -> Vec<String> {
        let spec: DeploymentSpec = serde_json::from_value(spec).expect("deserialises");
        match spec.parse("big", &SpecLimits::default()) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.into_vec().into_iter().map(|e| e.field).collect(),
        }
    }

    fn spec(extra: serde_json::Value) -> serde_json::Value {
        let mut base = json!({
            "model": {"source": "hf://meta-llama/Llama-3.1-405B-Instruct"},
            "engine": {"kind": "vllm", "tensorParallelSize": 8, "pipelineParallelSize": 2},
            "resources": {"gpu": {}},
            "nodesPerReplica": 2
        });
        merge(&mut base, extra);
        base
    }

    /// JSON merge patch (RFC 7386), enough for a test's overrides.
    fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
        match (base, patch) {
            (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        b.remove(&k);
                    } else {
                        merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                    }
                }
            }
            (b, p) => *b = p,
        }
    }

    #[test]
    fn a_two_node_replica_splits_the_parallel_gpus_over_its_pods() {
        assert_eq!(fields(spec(json!({}))), Vec::<String>::new());
        let spec: DeploymentSpec = serde_json::from_value(spec(json!({}))).unwrap();
        let serving = spec.parse("big", &SpecLimits::default()).unwrap();
        assert_eq!((serving.nodes, serving.gpus), (2, 8));
    }

    #[test]
    fn every_contradiction_names_its_field() {
        assert_eq!(
            fields(spec(json!({"engine": {"tensorParallelSize": null}}))),
            ["spec.engine.tensorParallelSize"]
        );
        assert_eq!(
            fields(spec(json!({"nodesPerReplica": 3}))),
            ["spec.nodesPerReplica"]
        );
        assert_eq!(
            fields(spec(json!({"resources": {"gpu": {"count": 16}}}))),
            ["spec.resources.gpu.count"]
        );
        assert_eq!(
            fields(spec(
                json!({"engine": {"args": ["--max-num-seqs=8", "--node-rank=1"]}})
            )),
            ["spec.engine.args[1]"]
        );
        assert_eq!(
            fields(spec(json!({"engine": {"kind": "tgi"}}))),
            ["spec.nodesPerReplica"]
        );
        assert_eq!(
            fields(spec(json!({"nodesPerReplica": 0}))),
            ["spec.nodesPerReplica"]
        );
        assert_eq!(
            fields(spec(
                json!({"adapters": [{"name": "a", "source": "hf://org/a"}]})
            )),
            ["spec.adapters"]
        );
    }
}
