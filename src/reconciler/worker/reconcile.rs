//! One pass over one record, as a pipeline: load the record, build its desired objects,
//! apply them, observe the cluster, clean up what it no longer wants, compute its status,
//! report it. Each step is a method here; the work behind each lives in the sibling file
//! named for it.

use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use uuid::Uuid;

use super::apply::LiveObjects;
use super::canary::CanaryTrack;
use super::report::Subjects;
use super::{Outcome, WORKER_ACTOR, Worker, deployment_ref};
use crate::domain::{Deployment, DeploymentStatus, EventKind, Phase, ServingRole, ServingSpec};
use crate::reconciler::cluster::ClusterError;
use crate::reconciler::desired::{
    BuildConfig, CanaryPlan, DesiredObjects, Target, desired_objects,
};
use crate::reconciler::status::{
    Budgets, Observed, canary_status, compute, invalid_spec, recheck_after, roles_status,
    with_canary,
};
use crate::store;
use crate::store::deployments::ReconcileTarget;
use crate::store::events::Note;

/// What every step of one pass reads: the record as loaded, and its tracks.
struct Pass<'a> {
    target: &'a ReconcileTarget,
    /// The stable track: the record and its valid spec.
    subject: Target<'a>,
    /// The canary track, when the record has one whose spec resolves.
    canary: Option<Target<'a>>,
}

impl<'a> Pass<'a> {
    fn record(&self) -> &'a Deployment {
        self.subject.record
    }

    fn namespace(&self) -> &'a str {
        self.target.namespace.as_str()
    }
}

/// What one pass learns of the cluster, step by step. The steps fill it in place rather
/// than return it: some 20 KB moved through every step's future would make the reconcile
/// future outgrow the stack of a debug build's test thread.
struct Observation {
    /// The stable track's (with the route, the Gateway and the pool).
    stable: Observed,
    canary: Observed,
    /// A disaggregated deployment's prefill role (`stable` is then its decode role).
    /// Boxed, as the futures of the steps must stay small (above).
    prefill: Box<Observed>,
    /// The objects as this pass read them, or (when it wrote) as the writes returned them;
    /// `None`: nothing to reuse, observation reads the cluster.
    known: Option<LiveObjects>,
}

impl Observation {
    /// Nothing observed yet but what `desired` says the pods and the route should carry.
    fn new(desired: &DesiredObjects) -> Self {
        Self {
            stable: Observed {
                config_hash: desired.config_hash.clone(),
                gateway: desired.gateway.clone(),
                ..Observed::default()
            },
            canary: Observed {
                config_hash: desired
                    .canary
                    .as_ref()
                    .map(|c| c.config_hash.clone())
                    .unwrap_or_default(),
                ..Observed::default()
            },
            prefill: Box::new(Observed {
                config_hash: desired
                    .prefill
                    .as_ref()
                    .map(|p| p.config_hash.clone())
                    .unwrap_or_default(),
                ..Observed::default()
            }),
            known: None,
        }
    }
}

impl Worker {
    /// One pass over one record: apply what is missing or changed, then report status.
    pub(super) async fn reconcile(&self, id: Uuid) -> Result<Outcome, ClusterError> {
        let Some(target) = store::deployments::find_reconcile_target(&self.pool, id).await? else {
            // The record is gone (or the id was a deleted project's): anything still labelled
            // with it is an orphan, and so is the namespace of a project that is gone.
            return self.collect_gone_record(id).await;
        };
        let record = target.row.clone().into_record(&target.project);
        if record.deletion_requested_at.is_some() {
            return self.finish_deletion(&target).await;
        }
        let Some(mut serving) = self.valid_serving(&target, &record).await? else {
            return Ok(Outcome::Done);
        };
        if let Some(autoscaling) = &record.spec.autoscaling {
            // The autoscaler's count, not the spec's starting point.
            let stored = store::autoscaling::replicas(&self.pool, id).await?;
            serving.replicas = autoscaling.live_replicas(stored, record.spec.replicas) as i32;
        }
        let canary = CanaryTrack::of(&record);
        let pass = Pass {
            target: &target,
            subject: Target {
                record: &record,
                serving: &serving,
                canary_track: false,
                role: None,
            },
            canary: canary.target(),
        };
        let (desired, routed_weight) = self.desired(&pass).await?;
        let mut observation = Observation::new(&desired);
        self.apply(&pass, &desired, routed_weight, &mut observation)
            .await?;
        observation.canary.pods = self
            .observe(
                &record,
                pass.namespace(),
                &desired,
                observation.known.as_ref(),
                &mut observation.stable,
            )
            .await?;
        Box::pin(self.observe_prefill(
            &desired,
            pass.namespace(),
            observation.known.as_ref(),
            &mut observation.stable,
            &mut observation.prefill,
        ))
        .await?;
        if let Some(outcome) = self
            .clean_up(&pass, &desired, &mut observation.stable)
            .await?
        {
            return Ok(outcome);
        }
        let (status, recheck) = Box::pin(self.compute_status(&pass, &mut observation)).await?;
        // A bounded wait for the Gateway ends on a timer, not on a cluster change.
        let recheck = recheck
            .into_iter()
            .chain(
                observation
                    .stable
                    .cleanup_wait
                    .as_ref()
                    .and_then(|w| w.recheck),
            )
            .min();
        let pending = status.phase == Phase::Pending;
        let subjects = Subjects::of(&observation.stable);
        self.write_status(&record, status, &subjects).await?;
        // Watches bring every cluster change; only a running budget needs a timer.
        Ok(match recheck {
            Some(after) => Outcome::Again(after),
            None if pending => Outcome::Again(Duration::from_secs(5)),
            None => Outcome::Done,
        })
    }

    /// The record's spec as the worker serves it; `None` when the stored spec is not valid,
    /// after saying so in the status. Nothing is applied from a spec that is not valid; its
    /// next change requeues it.
    async fn valid_serving(
        &self,
        target: &ReconcileTarget,
        record: &Deployment,
    ) -> Result<Option<ServingSpec>, ClusterError> {
        let errors = match record.spec.serving(&record.name) {
            Ok(serving) => return Ok(Some(serving)),
            Err(errors) => errors,
        };
        tracing::error!(%errors, "the stored spec is not valid");
        let status = invalid_spec(record, &errors, Utc::now());
        // What runs is left running; its events tell why nothing new is applied.
        let running = self
            .seen
            .of::<K8sDeployment>()
            .and_then(|seen| seen.get(Some(&target.namespace), &record.name))
            .flatten();
        let subjects = Subjects {
            deployment: deployment_ref(running.as_ref()),
            route: None,
        };
        self.write_status(record, status, &subjects).await?;
        Ok(None)
    }

    /// The objects the record wants, and the percent of requests without the header that
    /// the route gives its canary (`None`: no canary track is built).
    async fn desired(
        &self,
        pass: &Pass<'_>,
    ) -> Result<(DesiredObjects, Option<i32>), ClusterError> {
        let record = pass.record();
        let namespace = pass.namespace();
        let mut plan = None;
        if let (Some(canary), Some(t)) = (&record.canary, &pass.canary) {
            plan = Some(CanaryPlan {
                target: t.clone(),
                routed_weight: self.canary_weight(namespace, record, canary).await?,
                header: &canary.header,
            });
        }
        // The activator's addresses move with the API pods (`activator.rs`).
        let followed;
        let config = match self.activator_address() {
            address if address != self.config.build.activator => {
                // The key check runs in the same processes, at the same addresses.
                let key_check = self.config.build.key_check.as_ref().map(|k| {
                    crate::reconciler::desired::ActivatorAddress {
                        addresses: address
                            .as_ref()
                            .map_or_else(|| k.addresses.clone(), |a| a.addresses.clone()),
                        port: k.port,
                    }
                });
                followed = BuildConfig {
                    activator: address,
                    key_check,
                    ..self.config.build.clone()
                };
                &followed
            }
            _ => &self.config.build,
        };
        let build = |plan: Option<&CanaryPlan>| {
            desired_objects(
                &pass.subject,
                namespace,
                pass.target.namespace_adopted,
                config,
                plan,
            )
        };
        let mut desired = build(plan.as_ref());
        if record.canary.as_ref().is_some_and(|c| c.promoting)
            && self.stable_settled(&desired).await?
        {
            // The stable track runs the promoted spec on every replica: it takes all traffic
            // back, and the canary is removed once the Gateway has the new route.
            desired = build(None);
        }
        Ok((desired, plan.map(|plan| plan.routed_weight)))
    }

    /// Applies the desired objects when their digest is new, or when the cluster drifted
    /// from them (told on the timeline and as an Event); keeps what was read or written in
    /// `observation`, for the next steps.
    async fn apply(
        &self,
        pass: &Pass<'_>,
        desired: &DesiredObjects,
        routed_weight: Option<i32>,
        observation: &mut Observation,
    ) -> Result<(), ClusterError> {
        let digest = desired.digest();
        let unchanged = pass.target.applied_digest.as_deref() == Some(digest.as_str());
        // A new digest is applied whatever the cluster holds: reading it first would buy nothing.
        let (drifted, live) = if unchanged {
            self.live_objects(desired).await?
        } else {
            (Vec::new(), LiveObjects::default())
        };
        if unchanged && drifted.is_empty() {
            // Nothing written: what was just read is still current.
            observation.known = Some(live);
            return Ok(());
        }
        let applied = self
            .apply_desired(
                pass,
                desired,
                &digest,
                unchanged,
                routed_weight,
                observation,
            )
            .await?;
        // A repair is told only once the objects are back: a pass that failed on the way
        // (the API server refused an object, or answered `namespace not found` just after
        // it came back empty) repaired nothing, and the next pass finds the drift again.
        if unchanged && applied.is_some() {
            let repaired = format!(
                "repaired what was done outside modelplane: {}",
                drifted.join(", ")
            );
            self.timeline(pass.target, EventKind::DriftRepaired, &repaired)
                .await;
            if let Some(regarding) = deployment_ref(applied_deployment(&applied)) {
                self.events
                    .normal(&regarding, "DriftRepaired", "RepairDrift", &repaired)
                    .await;
            }
        }
        // This pass wrote to the cluster: what the writes returned is current.
        observation.known = applied;
        Ok(())
    }

    /// Applies `desired` and records its digest as applied (a new one with an `Applied`
    /// timeline entry and Event), or forgets the digest when the objects were not applied
    /// as a whole, so the next pass tries again. Returns the objects as the writes returned
    /// them (`None`: the API server refused one of them).
    async fn apply_desired(
        &self,
        pass: &Pass<'_>,
        desired: &DesiredObjects,
        digest: &str,
        unchanged: bool,
        routed_weight: Option<i32>,
        observation: &mut Observation,
    ) -> Result<Option<LiveObjects>, ClusterError> {
        let (target, record) = (pass.target, pass.record());
        let id = record.id;
        match self
            .apply_all(desired, &mut observation.stable, &mut observation.canary)
            .await
        {
            Ok(applied)
                if observation.stable.route_rejected.is_some()
                    || observation.stable.budget_rejected.is_some()
                    || observation.stable.pool_unavailable
                    || observation.stable.unserved.is_some()
                    || observation.stable.pool_switch_pending
                    // The route goes to the activator until a replica is available: the
                    // pass that sees one must apply again (the digest cannot tell).
                    || observation.stable.activating =>
            {
                // Not applied as a whole: try again on the next pass.
                store::deployments::set_applied_digest(&self.pool, id, None, None).await?;
                Ok(Some(applied))
            }
            Ok(applied) => {
                let message = match (&desired.canary, routed_weight) {
                    (Some(_), Some(routed_weight)) => format!(
                        "generation {} and its canary applied to namespace {} ({}% of requests without the header routed to the canary)",
                        record.generation, target.namespace, routed_weight
                    ),
                    _ => format!(
                        "generation {} applied to namespace {}",
                        record.generation, target.namespace
                    ),
                };
                let note = (!unchanged).then_some(Note {
                    kind: EventKind::Applied,
                    message: &message,
                    actor: WORKER_ACTOR,
                });
                store::deployments::set_applied_digest(&self.pool, id, Some(digest), note).await?;
                let applied = Some(applied);
                if !unchanged && let Some(regarding) = deployment_ref(applied_deployment(&applied))
                {
                    self.events
                        .normal(&regarding, "Applied", "Apply", &message)
                        .await;
                }
                Ok(applied)
            }
            Err(err)
                if err
                    .api_status()
                    .is_some_and(|s| s.code == 422 || s.code == 400) =>
            {
                tracing::warn!(error = %err, "the API server rejected an object");
                metrics::counter!(crate::metrics::RECONCILE_ERRORS, "kind" => "api_refused")
                    .increment(1);
                store::deployments::set_applied_digest(&self.pool, id, None, None).await?;
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// Removes what the record no longer wants: a canary's objects, InferencePool mode's.
    /// `Some`: the pass ends there (a finished promotion moved the record on).
    async fn clean_up(
        &self,
        pass: &Pass<'_>,
        desired: &DesiredObjects,
        observed: &mut Observed,
    ) -> Result<Option<Outcome>, ClusterError> {
        if desired.canary.is_none()
            && let Some(outcome) = self
                .remove_canary(pass.target, pass.record(), observed)
                .await?
        {
            return Ok(Some(outcome));
        }
        if desired.pool.is_none() {
            self.remove_pool(pass.target, pass.record(), observed)
                .await?;
        }
        Ok(None)
    }

    /// The record's status from what was observed, its canary track's included, and when
    /// to look again without a cluster change (`None`: only when something changes).
    async fn compute_status(
        &self,
        pass: &Pass<'_>,
        observation: &mut Observation,
    ) -> Result<(DeploymentStatus, Option<Duration>), ClusterError> {
        let (record, namespace, budgets) = (pass.record(), pass.namespace(), self.config.budgets);
        let now = Utc::now();
        if pass.subject.serving.spec.access == Some(crate::domain::Access::Keys)
            && observation.stable.gateway.is_some()
        {
            observation.stable.key_check = self.key_check_state();
        }
        let (mut status, mut recheck) = match &pass.subject.serving.roles {
            None => (
                compute(&pass.subject, namespace, &observation.stable, budgets, now),
                recheck_after(&observation.stable, budgets, now),
            ),
            Some(_) => {
                let status = with_roles(&pass.subject, namespace, observation, budgets, now);
                let recheck = [&observation.stable, &observation.prefill]
                    .into_iter()
                    .filter_map(|o| recheck_after(o, budgets, now))
                    .min();
                (status, recheck)
            }
        };
        if let (Some(canary), Some(t)) = (&record.canary, &pass.canary) {
            self.observe_canary(
                record,
                namespace,
                observation.known.as_ref(),
                &mut observation.canary,
            )
            .await?;
            // The deployment's route carries the canary's weight; no Gateway is the
            // canary's own, so its status does not wait for one.
            observation.canary.route = observation.stable.route.clone();
            let track = canary_status(
                t,
                canary,
                namespace,
                &observation.canary,
                &status,
                budgets,
                now,
            );
            status = with_canary(status, track);
            recheck = recheck
                .into_iter()
                .chain(recheck_after(&observation.canary, budgets, now))
                .min();
        }
        Ok((status, recheck))
    }
}

/// A disaggregated deployment's status: the decode role's worked out like a deployment's
/// (its Deployment and pods, with the route and the pool), and each role's from its own
/// Deployment and pods alone (what holds the role itself), then joined ([`roles_status`]).
fn with_roles(
    t: &Target,
    namespace: &str,
    observation: &mut Observation,
    budgets: Budgets,
    now: chrono::DateTime<Utc>,
) -> DeploymentStatus {
    let role_status = |role: ServingRole, observed: &Observed| {
        let serving = t.serving.for_role(role);
        let target = Target {
            serving: &serving,
            role: Some(role),
            ..t.clone()
        };
        compute(&target, namespace, observed, budgets, now)
    };
    let deployment = role_status(ServingRole::Decode, &observation.stable);
    let decode = role_status(ServingRole::Decode, &pods_only(&observation.stable));
    observation.prefill.service_exists = true;
    let prefill = role_status(ServingRole::Prefill, &observation.prefill);
    roles_status(deployment, decode, prefill, t.serving.replicas)
}

/// What the cluster reports about a role's own Deployment and pods, without the route,
/// Gateway and pool they are reached through (which are the deployment's).
fn pods_only(observed: &Observed) -> Observed {
    Observed {
        deployment: observed.deployment.clone(),
        pods: observed.pods.clone(),
        service_exists: true,
        config_hash: observed.config_hash.clone(),
        rejected: observed.rejected.clone(),
        lost_nodes: observed.lost_nodes.clone(),
        ..Observed::default()
    }
}

/// The stable Deployment as this pass's writes returned it.
fn applied_deployment(applied: &Option<LiveObjects>) -> Option<&K8sDeployment> {
    applied.as_ref()?.deployment.as_ref()?.as_ref()
}
