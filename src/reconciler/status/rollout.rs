//! The rollout as the Deployment reports it, and the Available condition.

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;

use super::{Check, Observed};
use crate::domain::ReplicaCounts;
use crate::reconciler::desired::ANNOTATION_CONFIG_HASH;

/// What the Deployment's status says about the rollout.
pub(super) struct Rollout {
    pub(super) desired: i64,
    pub(super) counts: ReplicaCounts,
    /// Every pod the Deployment counts, of any generation.
    pub(super) total: i64,
    /// The Deployment controller has seen the Deployment's current spec.
    pub(super) current: bool,
    /// The Deployment controller gave up on the rollout (`ProgressDeadlineExceeded`).
    pub(super) deadline_exceeded: bool,
    /// Every replica updated and available, and none of an old generation left.
    pub(super) rolled_out: bool,
}

impl Rollout {
    pub(super) fn of(dep: &K8sDeployment, desired: i64) -> Self {
        let dep_status = dep.status.clone().unwrap_or_default();
        let current =
            dep_status.observed_generation.unwrap_or(0) >= dep.metadata.generation.unwrap_or(0);
        let counts = ReplicaCounts {
            desired,
            updated: i64::from(dep_status.updated_replicas.unwrap_or(0)),
            ready: i64::from(dep_status.ready_replicas.unwrap_or(0)),
            available: i64::from(dep_status.available_replicas.unwrap_or(0)),
        };
        let total = i64::from(dep_status.replicas.unwrap_or(0));
        let deadline_exceeded = current
            && dep_status.conditions.iter().flatten().any(|c| {
                c.type_ == "Progressing"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
            });
        let rolled_out =
            current && counts.updated >= desired && counts.available >= desired && total <= desired;
        Rollout {
            desired,
            counts,
            total,
            current,
            deadline_exceeded,
            rolled_out,
        }
    }

    /// Fewer serve than asked and nothing is on its way (or something is wrong). Pods
    /// still starting without a problem are a rollout, e.g. every scale-up; so are pods the
    /// Deployment counts that the pod watch has not delivered yet (a scale-up's new pods
    /// reach the Deployment's status before they reach us), and pods the watch shows
    /// ready that the Deployment does not count as available yet (the other order: the
    /// kubelet's Ready reaches us before the ReplicaSet controller's `availableReplicas`,
    /// then the Deployment controller's, catch up; or `minReadySeconds` has not passed).
    ///
    /// The Deployment's own Progressing condition cannot tell a scale-up from a lost pod:
    /// once a rollout completed, a scale keeps `NewReplicaSetAvailable` (kubernetes
    /// `pkg/controller/deployment/progress.go`, `syncRolloutStatus`: no progress is
    /// estimated while `replicas == updatedReplicas` after a complete rollout), so the pods
    /// tell it.
    pub(super) fn short_of_replicas(&self, observed: &Observed, problem: bool) -> bool {
        let (desired, counts) = (self.desired, &self.counts);
        self.current
            && counts.updated >= desired
            && counts.available < desired
            && !self.deadline_exceeded
            && self.total <= desired
            && (problem
                || (starting_pods(observed) == 0
                    && pods_known(observed) >= self.total
                    && ready_pods(observed) <= counts.available))
    }
}

/// Available: at least the desired replicas serve (trivially so at zero).
pub(super) fn available(rollout: &Rollout) -> Check {
    let (desired, available) = (rollout.desired, rollout.counts.available);
    Check::new(
        "Available",
        available >= desired && desired > 0 || desired == 0,
        if available >= desired {
            "MinimumReplicasAvailable"
        } else {
            "MinimumReplicasUnavailable"
        },
        format!("{available}/{desired} replicas available"),
    )
}

/// Pods of the deployment the worker has seen that are not going away.
fn pods_known(observed: &Observed) -> i64 {
    observed
        .pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .count() as i64
}

/// Pods of the deployment the worker has seen ready and not going away.
fn ready_pods(observed: &Observed) -> i64 {
    observed
        .pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none() && is_ready(pod))
        .count() as i64
}

fn is_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Pods of the current generation on their way up: not ready yet, not being removed.
fn starting_pods(observed: &Observed) -> usize {
    observed
        .pods
        .iter()
        .filter(|pod| {
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_CONFIG_HASH))
                == Some(&observed.config_hash)
                && pod.metadata.deletion_timestamp.is_none()
                && !is_ready(pod)
        })
        .count()
}

/// The record's pods on one lost node.
pub(super) struct NodeLoss<'a> {
    pub(super) node: &'a super::LostNode,
    /// Pods of the record bound to it, and how many of them are not ready.
    pub(super) pods: usize,
    pub(super) not_ready: usize,
    /// Pods deleted there (the taint eviction controller's, after their toleration); they
    /// stay Terminating until the node reports again, and are replaced elsewhere.
    pub(super) evicted: usize,
}

/// The lost nodes holding replicas of the record that are not ready, in the order
/// observed. A lost node whose pods still count as ready (the node lifecycle controller
/// has not marked them yet) holds nothing back yet.
pub(super) fn node_losses(observed: &Observed) -> Vec<NodeLoss<'_>> {
    observed
        .lost_nodes
        .iter()
        .map(|node| {
            let there: Vec<&k8s_openapi::api::core::v1::Pod> = observed
                .pods
                .iter()
                .filter(|pod| {
                    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        == Some(node.name.as_str())
                })
                .collect();
            NodeLoss {
                node,
                pods: there.len(),
                not_ready: there.iter().filter(|pod| !is_ready(pod)).count(),
                evicted: there
                    .iter()
                    .filter(|pod| pod.metadata.deletion_timestamp.is_some())
                    .count(),
            }
        })
        .filter(|loss| loss.not_ready > 0)
        .collect()
}
