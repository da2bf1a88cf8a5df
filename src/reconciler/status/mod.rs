//! What to tell the user: phase, conditions, counts, a one-line cause and the URLs,
//! computed from what the cluster reports. A pure function, so every case is unit-tested.
//!
//! [`compute`] reads as the list of what it decides; one file per concern decides it,
//! each using only the shared items here and the files listed before it:
//!
//! - `rollout`: the Deployment's counts, and the Available condition.
//! - `problems`: what holds a rollout (a pod's image, crash loop, missing config or
//!   scheduling; pods the cluster refuses to create; the deadline), and when a judgement
//!   that depends on time falls due ([`recheck_after`]).
//! - `phase`: the phase and its one-line message, and the Progressing condition, which
//!   agrees with it.
//! - `routing`: whether the Gateway accepted the route (and the InferencePool): the Routed
//!   and InferencePool conditions.
//! - `endpoints`: the in-cluster, external and OpenAI base URLs.
//! - `applied`: what the API server took: the Applied condition (and the status before
//!   anything is applied, or when an object is refused), the DisruptionBudget condition.
//! - `canary`: the canary track's status, and how it weighs on the deployment's.
//! - `roles`: a disaggregated deployment's status from its prefill and decode roles'.

mod adapters;
mod applied;
mod canary;
mod endpoints;
mod phase;
mod problems;
mod roles;
mod rollout;
mod routing;
#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use gateway_api::experimental::httproutes::HttpRoute;
use gateway_api::gateways::Gateway;
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::Pod;

pub use self::adapters::ADAPTERS_LOADED;
pub use self::applied::invalid_spec;
use self::applied::{applied, disruption_budget, not_applied};
pub use self::canary::{canary_status, with_canary};
use self::endpoints::endpoints;
use self::phase::{phase, progressing};
pub use self::problems::recheck_after;
use self::problems::rollout_problem;
pub use self::roles::roles_status;
use self::rollout::{Rollout, available};
pub use self::routing::{has_available_replica, route_settled};
use self::routing::{inference_pool, route_state, routed};
use super::desired::{GatewayRef, InferencePool, Target};
use crate::domain::{
    Condition, ConditionStatus, Deployment, DeploymentStatus, Endpoints, Phase, ReplicaCounts,
};

/// Everything observed about one record's objects.
#[derive(Debug, Default)]
pub struct Observed {
    pub deployment: Option<K8sDeployment>,
    /// Pods selected by the record's stable selector.
    pub pods: Vec<Pod>,
    pub service_exists: bool,
    /// Ready endpoints in the Service's EndpointSlices; `None`: not known (the watch has
    /// not listed them), which holds nothing back.
    pub serving_endpoints: Option<usize>,
    /// The config hash the current generation's pods carry.
    pub config_hash: String,
    /// The live HTTPRoute, when one is wanted and exists.
    pub route: Option<HttpRoute>,
    /// Why no route could be made (e.g. the Gateway API is not installed).
    pub route_problem: Option<String>,
    pub gateway: Option<GatewayRef>,
    pub gateway_object: Option<Gateway>,
    /// The API server refused an object: (kind, message).
    pub rejected: Option<(String, String)>,
    /// The cluster does not serve a kind the record cannot run without (a model that
    /// spans nodes without LeaderWorkerSets): why nothing was applied.
    pub unserved: Option<String>,
    /// The API server refused the HTTPRoute (the rest was applied): its message.
    pub route_rejected: Option<String>,
    /// The API server refused the PodDisruptionBudget: its message.
    pub budget_rejected: Option<String>,
    /// InferencePool mode: the route's backend is the pool.
    pub pool_mode: bool,
    /// InferencePool mode on a cluster without the InferencePool CRD.
    pub pool_unavailable: bool,
    /// The live InferencePool and endpoint picker Deployment, in InferencePool mode.
    pub pool: Option<InferencePool>,
    pub picker: Option<K8sDeployment>,
    /// The endpoint picker's pods (whose problems the InferencePool condition names).
    pub picker_pods: Vec<Pod>,
    /// Switching a live deployment to InferencePool mode: the route still goes to the
    /// Service, until the endpoint picker has an available replica.
    pub pool_switch_pending: bool,
    /// The route goes to the activator (the record scales to zero and no replica is
    /// available): requests wait there for one.
    pub activating: bool,
    /// The record takes model keys: whether the key check its routes call answers
    /// (`Err`: why not). `None`: no keys, or not probed yet.
    pub key_check: Option<Result<String, String>>,
    /// Objects the record no longer wants wait for the Gateway before they are removed.
    pub cleanup_wait: Option<CleanupWait>,
    /// Nodes the record's pods are on that stopped serving them.
    pub lost_nodes: Vec<LostNode>,
}

/// A node some of the record's pods are on that the node lifecycle controller no longer
/// counts on: its Ready condition is not True (`Unknown` when the kubelet stopped posting
/// status), or it carries the controller's `node.kubernetes.io/unreachable` or `not-ready`
/// taint. Its pods are marked not ready though their containers may still run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostNode {
    pub name: String,
    /// The node's Ready condition status: `Unknown`, `False`, or `True` while the taint stays.
    pub ready: String,
    /// Since when: the Ready condition's last transition (or when the taint was added).
    pub since: Option<DateTime<Utc>>,
}

/// The condition that is False while clean-up waits for the Gateway (absent otherwise).
pub const CLEANED_UP: &str = "CleanedUp";
/// The condition of a record with model keys: does the key check its routes call answer.
pub const KEYS_CHECKED: &str = "KeysChecked";

/// What clean-up waits for, and when to look again without a cluster change.
#[derive(Debug, Clone)]
pub struct CleanupWait {
    pub message: String,
    pub recheck: Option<std::time::Duration>,
}

/// How long (or how often) a problem that may still clear is tolerated before the
/// deployment counts as Failed.
#[derive(Debug, Clone, Copy)]
pub struct Budgets {
    pub unschedulable_seconds: i64,
    /// Restarts after which a crash loop counts as Failed.
    pub crash_restarts: i32,
}

pub fn compute(
    t: &Target,
    namespace: &str,
    observed: &Observed,
    budgets: Budgets,
    now: DateTime<Utc>,
) -> DeploymentStatus {
    let record = t.record;
    let Some(dep) = observed
        .deployment
        .as_ref()
        .filter(|_| observed.rejected.is_none() && observed.unserved.is_none())
    else {
        return not_applied(t, namespace, observed, now);
    };
    let rollout = Rollout::of(dep, i64::from(t.serving.replicas));
    let problem = rollout_problem(observed, dep, &rollout, budgets, now);
    let route = route_state(observed);
    // Progressing is decided once the phase is known, so the two always agree.
    let (mut phase, mut message) = phase(record, observed, &rollout, problem.as_ref(), &route);
    // The Gateway refuses every request it cannot have checked: Ready would be a lie.
    if let Some(Err(why)) = &observed.key_check
        && phase == Phase::Ready
    {
        phase = Phase::Degraded;
        message = why.clone();
    }
    let (adapters, adapters_loaded) = self::adapters::adapters(t.serving, &observed.pods);
    // An adapter the engines refuse is a model the deployment does not serve.
    if let Some(check) = &adapters_loaded
        && check.reason == "AdapterLoadFailed"
        && phase == Phase::Ready
    {
        phase = Phase::Degraded;
        message = check.message.clone();
    }
    let conditions = [
        Some(applied(record)),
        Some(available(&rollout)),
        Some(routed(observed, &route)),
        inference_pool(observed, budgets, now),
        disruption_budget(observed),
        observed
            .cleanup_wait
            .as_ref()
            .map(|wait| Check::new(CLEANED_UP, false, "WaitingForGateway", wait.message.clone())),
        adapters_loaded,
        observed.key_check.as_ref().map(|state| match state {
            Ok(message) => Check::new(KEYS_CHECKED, true, "KeyCheckAnswers", message.clone()),
            Err(why) => Check::new(KEYS_CHECKED, false, "KeyCheckUnreachable", why.clone()),
        }),
        Some(progressing(
            observed,
            &rollout,
            problem.as_ref(),
            phase,
            &message,
        )),
    ]
    .into_iter()
    .flatten()
    .map(|check| check.at(&record.status, now))
    .collect();
    let endpoints = endpoints(t, namespace, observed);
    let mut status = status(
        phase,
        record,
        message,
        rollout.counts,
        conditions,
        endpoints,
    );
    status.adapters = adapters;
    status
}

/// One condition's verdict, before it is dated ([`Check::at`]).
struct Check {
    type_: &'static str,
    ok: bool,
    reason: String,
    message: String,
}

impl Check {
    fn new(type_: &'static str, ok: bool, reason: impl Into<String>, message: String) -> Self {
        Check {
            type_,
            ok,
            reason: reason.into(),
            message,
        }
    }

    /// The condition, dated by [`condition`].
    fn at(self, previous: &DeploymentStatus, now: DateTime<Utc>) -> Condition {
        condition(
            previous,
            self.type_,
            self.ok,
            &self.reason,
            self.message,
            now,
        )
    }
}

fn status(
    phase: Phase,
    record: &Deployment,
    message: String,
    replicas: ReplicaCounts,
    conditions: Vec<Condition>,
    endpoints: Endpoints,
) -> DeploymentStatus {
    DeploymentStatus {
        phase,
        observed_generation: record.generation,
        message,
        replicas,
        conditions,
        endpoints,
        canary: None,
        adapters: Vec::new(),
        roles: Vec::new(),
        // Read beside the status by the API, never written by the reconciler.
        load: None,
        autoscaling: None,
    }
}

/// A condition that keeps its last transition time while its status does not change.
fn condition(
    previous: &DeploymentStatus,
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    now: DateTime<Utc>,
) -> Condition {
    let status = ConditionStatus::holds(ok);
    let since = previous
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or(now, |c| c.last_transition_time);
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message,
        last_transition_time: since,
    }
}
