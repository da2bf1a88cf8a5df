//! The autoscaler: after each collection round, one decision per deployment with
//! `spec.autoscaling` (`domain::autoscaling::decide`), clamped by the project's quota and
//! the GPUs free now. It runs in the collecting worker, so exactly one worker decides (the
//! collector's advisory lock). A decision is a row (`store::autoscaling`); one that changes
//! the count is also a timeline entry, a reconcile of the record (which applies the count
//! to its Deployment) and a Kubernetes Event on that Deployment, each saying why.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::{
    AutoscalingSpec, AutoscalingStatus, Demand, Fit, GpuShape, Load, Observation, Phase,
    ScalingChange, ScalingMemory, TrackDemand, check_quota, decide, fit,
};
use crate::reconciler::kube_events::{self, Publisher};
use crate::reconciler::seen::SeenKinds;
use crate::store;
use crate::store::autoscaling::{Autoscaled, Decided};
use crate::store::load::Scope;

pub struct Autoscaler {
    pool: PgPool,
    gpu_resource_name: String,
    events: Publisher,
    seen: Option<Arc<SeenKinds>>,
    /// Each deployment's recommendations and idle time (see `ScalingMemory`).
    memory: HashMap<Uuid, ScalingMemory>,
}

impl Autoscaler {
    pub fn new(
        pool: PgPool,
        client: kube::Client,
        gpu_resource_name: String,
        worker_id: &str,
    ) -> Self {
        Self {
            pool,
            gpu_resource_name,
            events: Publisher::new(client, worker_id),
            seen: None,
            memory: HashMap::new(),
        }
    }

    /// Finds the Deployments to name in Events in the worker's watch caches.
    pub fn with_seen(mut self, seen: Arc<SeenKinds>) -> Self {
        self.seen = Some(seen);
        self
    }

    /// One decision per autoscaled deployment from this round's readings (`loads`: the last
    /// reading per deployment and scope). Returns how many counts changed.
    pub async fn round(
        &mut self,
        loads: &HashMap<(Uuid, Scope), Load>,
        now: DateTime<Utc>,
    ) -> Result<usize, sqlx::Error> {
        store::autoscaling::forget_unscaled(&self.pool).await?;
        let deployments = store::autoscaling::autoscaled(&self.pool).await?;
        self.memory
            .retain(|id, _| deployments.iter().any(|d| d.id == *id));
        let mut scaled = 0;
        for d in &deployments {
            match self.decide_one(d, loads, now).await {
                Ok(true) => scaled += 1,
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(deployment = %d.name, error = %err, "cannot record the autoscaler's decision")
                }
            }
        }
        Ok(scaled)
    }

    /// Decides for one deployment and records it; true when the count changed.
    async fn decide_one(
        &mut self,
        d: &Autoscaled,
        loads: &HashMap<(Uuid, Scope), Load>,
        now: DateTime<Utc>,
    ) -> Result<bool, sqlx::Error> {
        let Some(spec) = d.spec.autoscaling.as_ref() else {
            return Ok(false);
        };
        // A canary's route is the weighted one, never the activator's: while one runs the
        // stable track keeps a replica.
        let kept;
        let spec = if d.has_canary && spec.min_replicas == 0 {
            kept = AutoscalingSpec {
                min_replicas: 1,
                ..spec.clone()
            };
            &kept
        } else {
            spec
        };
        let current = d
            .state
            .as_ref()
            .map_or_else(|| spec.starting_replicas(d.spec.replicas), |s| s.replicas);
        // While a canary runs, only its stable track is scaled, by its own load.
        let load = loads
            .get(&(d.id, Scope::Track(crate::domain::Track::Stable)))
            .or_else(|| loads.get(&(d.id, Scope::All)));
        let mut seen = Observation {
            now,
            current,
            load,
            quota_allows: None,
            fits: None,
            not_serving: d.deleting || d.phase == Phase::Failed,
        };
        // Limits are read only for a scale-up: most intervals change nothing.
        let memory = self.memory.entry(d.id).or_default();
        let mut trial = memory.clone();
        let mut decision = decide(spec, &seen, &mut trial);
        if decision.replicas > current {
            let ready = load.map_or(0, |l| l.pods);
            let (quota, fits) = self.limits(d, current, decision.replicas, ready).await?;
            seen.quota_allows = quota;
            seen.fits = fits;
            let memory = self.memory.entry(d.id).or_default();
            decision = decide(spec, &seen, memory);
        } else {
            *self.memory.entry(d.id).or_default() = trial;
        }

        let previous = d.state.as_ref();
        let scaled = decision.replicas != current;
        let last_scaled = if scaled {
            Some(ScalingChange {
                at: now,
                from: current,
                to: decision.replicas,
                reason: decision.reason.clone(),
            })
        } else {
            previous.and_then(|p| p.last_scaled.clone())
        };
        let state = AutoscalingStatus {
            replicas: decision.replicas,
            wanted: decision.wanted,
            limited_by: decision.limited_by,
            reason: decision.reason.clone(),
            decided_at: now,
            last_scaled,
        };
        let announce = previous.is_none_or(|p| {
            (p.replicas, p.wanted, p.limited_by) != (state.replicas, state.wanted, state.limited_by)
        });
        let mut conn = self.pool.acquire().await?;
        let written = store::autoscaling::record(
            &mut conn,
            Decided {
                deployment: d,
                state: &state,
                from: current,
                scaled,
                announce,
            },
        )
        .await?;
        if !written {
            // The activator woke it from zero meanwhile: the next round decides afresh.
            self.memory.remove(&d.id);
            return Ok(false);
        }
        if scaled {
            tracing::info!(deployment = %d.name, project_id = %d.project_id, from = current, to = decision.replicas, reason = %decision.reason, "autoscaled");
            metrics::counter!(crate::metrics::AUTOSCALER_DECISIONS, "direction" => if decision.replicas > current { "up" } else { "down" }).increment(1);
            self.publish(d, &decision.reason).await;
        } else if decision.limited_by.is_some() && announce {
            tracing::info!(deployment = %d.name, reason = %decision.reason, "autoscaler held");
        }
        Ok(scaled)
    }

    /// The most replicas the project's quota allows this deployment, and the most that can
    /// be placed on the GPUs free now (`ready` replicas already hold theirs), for a
    /// scale-up from `current` towards `wanted`.
    async fn limits(
        &self,
        d: &Autoscaled,
        current: i64,
        wanted: i64,
        ready: i64,
    ) -> Result<(Option<i64>, Option<i64>), sqlx::Error> {
        let Ok(serving) = d.spec.serving(&d.name) else {
            return Ok((Some(current), Some(current)));
        };
        let track = |replicas: i64| TrackDemand {
            replicas,
            ..TrackDemand::of(&serving, &self.gpu_resource_name)
        };
        let quota = match store::quota::find_quota(&self.pool, d.project_id).await? {
            None => None,
            Some(quota) => {
                let before: Demand = crate::service::capacity::demand_of_project(
                    &mut *self.pool.acquire().await?,
                    &self.gpu_resource_name,
                    d.project_id,
                )
                .await?;
                let allowed = (current + 1..=wanted)
                    .rev()
                    .find(|r| {
                        let mut after = before.clone();
                        after.remove(&track(current));
                        after.add(&track(*r));
                        check_quota(&quota, &before, &after).is_ok()
                    })
                    .unwrap_or(current);
                Some(allowed)
            }
        };
        let fits = match GpuShape::of(&serving, &self.gpu_resource_name) {
            None => None,
            Some(shape) => {
                let (observed_at, nodes) =
                    store::capacity::gpu_inventory(&self.pool, Some(&shape.resource_name)).await?;
                match (observed_at, fit(&nodes, &shape, wanted, ready)) {
                    // No worker has reported the cluster: nothing to clamp by.
                    (None, _) | (_, Fit::Fits) => None,
                    (_, Fit::Partly { fits, .. }) => Some(fits),
                    (_, Fit::Never { .. }) => Some(current),
                }
            }
        };
        Ok((quota, fits))
    }

    /// A Kubernetes Event on the deployment's Deployment, as the HPA's `SuccessfulRescale`
    /// (pkg/controller/podautoscaler/horizontal.go), with the decision's sentence.
    async fn publish(&self, d: &Autoscaled, reason: &str) {
        let deployment = self
            .seen
            .as_ref()
            .and_then(|seen| seen.of::<K8sDeployment>())
            .and_then(|seen| seen.get(Some(&d.namespace), &d.name))
            .flatten();
        if let Some(regarding) = deployment
            .as_ref()
            .and_then(|k| kube_events::reference("apps/v1", "Deployment", &k.metadata))
        {
            self.events
                .normal(&regarding, "SuccessfulRescale", "Scale", reason)
                .await;
        }
    }
}
