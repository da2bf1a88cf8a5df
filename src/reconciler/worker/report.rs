//! Reporting: the status written back to the record (only when it changed), the GPUs its
//! ready pods hold, the timeline, and the Kubernetes Events that tell the same story.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::Utc;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::api::{Api, ListParams};

use super::permissions::{AUTHORIZED, forbidden_condition};
use super::{WORKER_ACTOR, Worker, deployment_ref};
use crate::domain::{
    ConditionStatus, Deployment, DeploymentStatus, EventKind, GpuShape, Phase, ServingRole,
    ServingSpec,
};
use crate::reconciler::cluster::ClusterError;
use crate::reconciler::desired::{LABEL_NAME, LABEL_TRACK, MODEL_SERVER, ROLE_LABEL, TRACK_CANARY};
use crate::reconciler::kube_events;
use crate::reconciler::status::Observed;
use crate::store;
use crate::store::deployments::ReconcileTarget;
use crate::store::events::{NewEvent, Note};
use crate::store::usage::Held;

/// The `track` of a deployment's own pods in `gpu_usage` (its canary's is [`TRACK_CANARY`]).
const TRACK_STABLE: &str = "stable";

/// The objects a record's status events are about (`None`: not there, nothing published).
pub(super) struct Subjects {
    pub(super) deployment: Option<ObjectReference>,
    pub(super) route: Option<ObjectReference>,
}

impl Subjects {
    /// The record's Deployment and HTTPRoute, as observed.
    pub(super) fn of(observed: &Observed) -> Self {
        Self {
            deployment: deployment_ref(observed.deployment.as_ref()),
            route: observed.route.as_ref().and_then(|route| {
                kube_events::reference("gateway.networking.k8s.io/v1", "HTTPRoute", &route.metadata)
            }),
        }
    }
}

impl Worker {
    /// Stores a status that changed, with a timeline entry when the phase did, and the
    /// same as a Kubernetes Event on the record's Deployment (a `Warning` naming the cause
    /// when the phase turns Failed or Degraded, on the HTTPRoute as well when the route is
    /// the cause).
    pub(super) async fn write_status(
        &self,
        record: &Deployment,
        mut status: DeploymentStatus,
        subjects: &Subjects,
    ) -> Result<(), ClusterError> {
        // The cluster answered, so it is reachable: drop a stale outage condition.
        status.conditions.retain(|c| c.type_ != "ClusterReachable");
        // Events the API server refuses in the record's namespace: said in its conditions.
        let namespace = subjects
            .deployment
            .as_ref()
            .and_then(|d| d.namespace.clone());
        let denied = |worker: &Self| {
            namespace
                .as_deref()
                .and_then(|ns| worker.events.denied(ns))
                .map(|status| status.message)
        };
        let denied_before = denied(self);
        if let Some(ns) = &namespace
            && let Some(refusal) = self.events.denied(ns)
        {
            status.conditions.retain(|c| c.type_ != AUTHORIZED);
            status
                .conditions
                .push(forbidden_condition(&refusal, &record.status, Utc::now()));
        }
        if status == record.status {
            return Ok(());
        }
        let phase_changed = status.phase != record.status.phase;
        let message = format!(
            "{} → {}: {}",
            record.status.phase, status.phase, status.message
        );
        // The timeline entry commits with the status it tells of.
        let note = phase_changed.then_some(Note {
            kind: EventKind::PhaseChanged,
            message: &message,
            actor: WORKER_ACTOR,
        });
        if !store::deployments::update_status(
            &self.pool,
            record.id,
            record.generation,
            &status,
            note,
        )
        .await?
        {
            // The spec changed meanwhile; its own reconcile reports the new generation.
            return Ok(());
        }
        let default = &self.config.build.engines.gpu_resource_name;
        let holds = |status: &DeploymentStatus| {
            !gpus_held(record, status, default, &HashMap::new()).is_empty()
        };
        if holds(&status) || holds(&record.status) {
            let products = self.node_products(record).await?;
            let held = gpus_held(record, &status, default, &products);
            if held != gpus_held(record, &record.status, default, &products) {
                store::usage::record_held(&self.pool, record.id, &record.name, &held).await?;
            }
        }
        if phase_changed {
            tracing::info!(deployment_id = %record.id, from = %record.status.phase, to = %status.phase, message = %status.message, "phase changed");
            self.publish_phase(record.status.phase, &status, &message, subjects)
                .await;
            // Publishing was refused (or allowed again) just now: the next pass says so.
            if denied(self) != denied_before {
                let _ = self.requeue.send(record.id);
            }
        }
        Ok(())
    }

    /// The GPU products of the nodes the record's pods run on, per track: its ready pods'
    /// first, then those of its other pods bound to a node (the pods seen may run ahead of
    /// the status's ready count). A node's product is its GPU-product label as the GPU
    /// inventory recorded it (`gpu_node`), or as the node says when the inventory has not
    /// caught up; `None` for a node without one.
    async fn node_products(
        &self,
        record: &Deployment,
    ) -> Result<HashMap<&'static str, Vec<Option<String>>>, ClusterError> {
        let Some(pods) = self
            .seen
            .of::<Pod>()
            .and_then(|seen| seen.of_record(record.id))
        else {
            return Ok(HashMap::new());
        };
        let (_, nodes) = store::capacity::gpu_inventory(&self.pool, None).await?;
        let mut product_of: HashMap<String, Option<String>> =
            nodes.into_iter().map(|n| (n.name, n.product)).collect();
        // A node the inventory has not written yet (it follows the nodes a moment later):
        // its label, read as the inventory reads nodes (list and watch only).
        let unknown: HashSet<&str> = pods
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.as_deref())
            .filter(|n| !product_of.contains_key(*n))
            .collect();
        let label = &self.config.build.gpu_product_label;
        for node in unknown {
            let params = ListParams::default().fields(&format!("metadata.name={node}"));
            match Api::<Node>::all(self.cluster.client.clone())
                .list(&params)
                .await
            {
                Ok(list) => {
                    let product = list
                        .items
                        .first()
                        .and_then(|n| n.metadata.labels.as_ref()?.get(label).cloned());
                    product_of.insert(node.to_owned(), product);
                }
                Err(err) => {
                    tracing::debug!(%node, error = %err, "cannot read a node's GPU product");
                }
            }
        }
        let mut placed: HashMap<&'static str, Vec<(bool, Option<String>)>> = HashMap::new();
        for pod in &pods {
            let labels = pod.metadata.labels.as_ref();
            let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
            let (Some(node), None) = (node, &pod.metadata.deletion_timestamp) else {
                continue;
            };
            if label(LABEL_NAME) != Some(MODEL_SERVER) {
                continue;
            }
            let track = if label(LABEL_TRACK) == Some(TRACK_CANARY) {
                TRACK_CANARY
            } else if let Some(role) = label(ROLE_LABEL).and_then(ServingRole::parse) {
                // A disaggregated deployment's roles are its tracks.
                role.as_str()
            } else {
                TRACK_STABLE
            };
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let product = product_of.get(node).cloned().flatten();
            placed.entry(track).or_default().push((!ready, product));
        }
        Ok(placed
            .into_iter()
            .map(|(track, mut pods)| {
                pods.sort();
                (track, pods.into_iter().map(|(_, p)| p).collect())
            })
            .collect())
    }

    /// The Kubernetes Events of a phase change (see [`Worker::write_status`]): a `Warning`
    /// when it turns Failed or Degraded, and a `Normal` one when it recovers from either.
    /// An ordinary rollout (Pending → Deploying → Ready) is told by the Deployment
    /// controller's own events and `Applied`: one event per change, not three.
    async fn publish_phase(
        &self,
        from: Phase,
        status: &DeploymentStatus,
        message: &str,
        subjects: &Subjects,
    ) {
        if !matches!(status.phase, Phase::Failed | Phase::Degraded) {
            if !matches!(from, Phase::Failed | Phase::Degraded) {
                return;
            }
            if let Some(regarding) = &subjects.deployment {
                self.events
                    .normal(regarding, "PhaseChanged", "ReportStatus", message)
                    .await;
            }
            return;
        }
        let (reason, condition) = warning_reason(status);
        if let Some(regarding) = &subjects.deployment {
            self.events
                .warning(regarding, &reason, "ReportStatus", message)
                .await;
        }
        if condition == Some("Routed")
            && let Some(route) = &subjects.route
        {
            self.events
                .warning(route, &reason, "ReportStatus", message)
                .await;
        }
    }

    /// Adds an entry to the record's timeline (a failure to is logged, not fatal).
    pub(super) async fn timeline(&self, target: &ReconcileTarget, kind: EventKind, message: &str) {
        let event = NewEvent {
            deployment_id: target.row.id,
            project_id: target.row.project_id,
            deployment_name: &target.row.name,
            kind,
            message,
            actor: WORKER_ACTOR,
        };
        if let Err(err) = store::events::insert_event(&self.pool, event).await {
            tracing::warn!(error = %err, "cannot record a timeline event");
        }
    }
}

/// The reason of a Failed or Degraded phase's `Warning`: that of the first condition that
/// does not hold and names its cause (`Rejected`, `ImagePullBackOff`, `InvalidSpec`,
/// `NotAccepted`, …), with the condition's type; else the phase.
fn warning_reason(status: &DeploymentStatus) -> (String, Option<&'static str>) {
    for type_ in ["Applied", "Progressing", "Routed", "InferencePool"] {
        if let Some(c) = status.conditions.iter().find(|c| {
            c.type_ == type_
                && c.status == ConditionStatus::False
                && !c.reason.is_empty()
                && c.reason != "Failed"
        }) {
            return (c.reason.clone(), Some(type_));
        }
    }
    (status.phase.to_string(), None)
}

/// The GPUs the record's ready pods hold, per track and GPU product, by the status given
/// (for the GPU-hours of `gpu_usage`): the status's ready replicas of each track, each
/// with the product of the node it runs on (`products`, see [`Worker::node_products`]),
/// or the spec's product when that node is not known.
fn gpus_held(
    record: &Deployment,
    status: &DeploymentStatus,
    default: &str,
    products: &HashMap<&'static str, Vec<Option<String>>>,
) -> Vec<Held> {
    let mut tracks: Vec<(&'static str, ServingSpec, i64)> = Vec::new();
    if let Ok(serving) = record.spec.serving(&record.name) {
        match &serving.roles {
            None => tracks.push((TRACK_STABLE, serving, status.replicas.ready)),
            // Each role's ready pods hold the role's GPUs.
            Some(_) => {
                for role in ServingRole::ALL {
                    let ready = status
                        .roles
                        .iter()
                        .find(|r| r.role == role.as_str())
                        .map_or(0, |r| r.replicas.ready);
                    tracks.push((role.as_str(), serving.for_role(role), ready));
                }
            }
        }
    }
    if let Some((canary, track)) = record.canary.as_ref().zip(status.canary.as_ref())
        && let Ok(serving) = canary.spec.serving(&record.name)
    {
        tracks.push((TRACK_CANARY, serving, track.replicas.ready));
    }
    tracks
        .into_iter()
        .filter_map(|(track, serving, ready)| {
            let shape = GpuShape::of(&serving, default)?;
            let known = products.get(track).map(Vec::as_slice).unwrap_or_default();
            let mut by_product: BTreeMap<Option<String>, i64> = BTreeMap::new();
            for i in 0..usize::try_from(ready).unwrap_or(0) {
                let product = known
                    .get(i)
                    .cloned()
                    .flatten()
                    .or_else(|| shape.product.clone());
                *by_product.entry(product).or_default() += 1;
            }
            Some(by_product.into_iter().map(move |(product, replicas)| Held {
                track,
                resource_name: shape.resource_name.clone(),
                product,
                // A ready group holds the GPUs of every pod in it.
                gpus: replicas * shape.per_replica(),
            }))
        })
        .flatten()
        .filter(|h| h.gpus > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::json;

    use super::*;
    use crate::domain::{DeploymentSpec, ReplicaCounts, RoleStatus, SpecLimits};

    #[test]
    fn a_disaggregated_deployments_roles_hold_their_own_gpus() {
        let spec: DeploymentSpec = serde_json::from_value(json!({
            "model": {"source": "hf://Qwen/Qwen2.5-7B-Instruct"},
            "resources": {"gpu": {"count": 1}},
            "routing": {"mode": "InferencePool"},
            "disaggregation": {
                "prefill": {"replicas": 1, "resources": {"gpu": {"count": 2}}},
                "decode": {"replicas": 2},
            },
        }))
        .unwrap();
        let spec = spec.parse("big", &SpecLimits::default()).unwrap().spec;
        let mut status = DeploymentStatus::pending(3);
        let counts = |ready| ReplicaCounts {
            desired: ready,
            updated: ready,
            ready,
            available: ready,
        };
        status.replicas = counts(3);
        status.roles = vec![
            RoleStatus {
                role: "prefill".into(),
                replicas: counts(1),
                message: String::new(),
            },
            RoleStatus {
                role: "decode".into(),
                replicas: counts(2),
                message: String::new(),
            },
        ];
        let record = Deployment {
            id: uuid::Uuid::nil(),
            project: "team-a".into(),
            name: "big".into(),
            generation: 1,
            status: status.clone(),
            spec,
            restarted_at: None,
            deletion_requested_at: None,
            canary: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
            warnings: Vec::new(),
        };
        let held = gpus_held(&record, &status, "nvidia.com/gpu", &HashMap::new());
        let by_track: Vec<(&str, i64)> = held.iter().map(|h| (h.track, h.gpus)).collect();
        assert_eq!(by_track, [("prefill", 2), ("decode", 2)]);
    }
}
