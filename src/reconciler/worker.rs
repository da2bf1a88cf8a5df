//! The worker loop: claim work from Postgres, reconcile, report status, and watch the
//! cluster so changes there requeue the owning record.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::StreamExt;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::{Deployment as K8sDeployment, ReplicaSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, ObjectReference, Pod, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::cluster::{Cluster, ClusterError, Object, contains, kind_of};
use super::desired::{
    BuildConfig, CanaryPlan, DesiredObjects, LABEL_DEPLOYMENT_ID, LABEL_INSTALLATION,
    LABEL_MANAGED_BY, LABEL_NAME, LABEL_NAMESPACE_ADOPTED, LABEL_PROJECT, LABEL_TRACK,
    MODEL_SERVER, TRACK_CANARY, Target, as_json, canary_record, desired_objects,
};
use super::health::WorkerHealth;
use super::inference_pool::{InferencePool, picker_name};
use super::kube_events::{self, Publisher};
use super::seen::SeenKinds;
use super::status::{
    Budgets, Observed, canary_status, compute, invalid_spec, recheck_after, route_settled,
    with_canary,
};
use crate::domain::{
    Condition, ConditionStatus, Deployment, DeploymentStatus, EventKind, GpuShape, Phase,
    canary_object_name,
};
use crate::store;
use crate::store::deployments::ReconcileTarget;
use crate::store::events::{NewEvent, Note};
use crate::store::usage::Held;
use crate::store::work_queue::{Claim, NOTIFY_CHANNEL};

/// The actor of the worker's timeline entries.
const WORKER_ACTOR: &str = "worker";
/// Claims between two vacuums of the queue table (see `store::work_queue::vacuum_queue`):
/// each claim leaves about three dead row versions behind.
const QUEUE_VACUUM_EVERY: usize = 2_000;
/// The `track` of a deployment's own pods in `gpu_usage` (its canary's is [`TRACK_CANARY`]).
const TRACK_STABLE: &str = "stable";

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub build: BuildConfig,
    pub budgets: Budgets,
    /// Identifies this worker in leases and in the `x-modelplane-worker` header.
    pub worker_id: String,
    pub lease: Duration,
    /// How often every record is requeued anyway (the safety net, not the mechanism).
    pub resync: Duration,
    pub concurrency: usize,
}

/// Where a record stands after a reconcile, and when to look again.
enum Outcome {
    Done,
    Again(Duration),
}

pub struct Worker {
    pool: PgPool,
    cluster: Cluster,
    config: WorkerConfig,
    health: Arc<WorkerHealth>,
    /// What the watches have seen of the kinds read during reconciles.
    seen: SeenKinds,
    /// Records to requeue after cluster changes, written to the queue in batches.
    requeue: tokio::sync::mpsc::UnboundedSender<Uuid>,
    requeued: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Uuid>>>,
    /// Kubernetes Events on the managed objects, telling what the timeline tells.
    events: Publisher,
}

impl Worker {
    pub fn new(pool: PgPool, cluster: Cluster, config: WorkerConfig) -> Arc<Self> {
        let (requeue, requeued) = tokio::sync::mpsc::unbounded_channel();
        let events = Publisher::new(cluster.client.clone(), &config.worker_id);
        Arc::new(Self {
            events,
            requeue,
            requeued: std::sync::Mutex::new(Some(requeued)),
            pool,
            cluster,
            config,
            health: Arc::default(),
            seen: SeenKinds::default()
                .with::<Namespace>()
                .with::<K8sDeployment>()
                .with::<Service>()
                .with::<Pod>()
                .with::<HttpRoute>()
                .with::<InferencePool>()
                .with::<PodDisruptionBudget>(),
        })
    }

    /// The worker's liveness and recent cluster results, for readiness.
    pub fn health(&self) -> Arc<WorkerHealth> {
        self.health.clone()
    }

    /// Runs until `shutdown` is cancelled.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), sqlx::Error> {
        tracing::info!(worker = %self.config.worker_id, cluster = %self.cluster.description, installation = %self.config.build.installation, "reconciler started");
        let mut attempts = 0;
        let mut listener = loop {
            let connected = async {
                let mut listener = PgListener::connect_with(&self.pool).await?;
                listener.listen(NOTIFY_CHANNEL).await?;
                Ok::<_, sqlx::Error>(listener)
            };
            match connected.await {
                Ok(listener) => break listener,
                Err(err) => {
                    attempts += 1;
                    let wait = backoff(attempts).min(Duration::from_secs(30));
                    tracing::error!(error = %err, retry_in = ?wait, "cannot listen for work; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => return Ok(()),
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        };
        // A project's namespace serves all its records; every other object, one record.
        tokio::spawn(
            self.clone()
                .watch::<Namespace>(Owner::Project, shutdown.clone()),
        );
        tokio::spawn(
            self.clone()
                .watch::<K8sDeployment>(Owner::Record, shutdown.clone()),
        );
        tokio::spawn(
            self.clone()
                .watch::<ReplicaSet>(Owner::Record, shutdown.clone()),
        );
        tokio::spawn(
            self.clone()
                .watch::<Service>(Owner::Record, shutdown.clone()),
        );
        tokio::spawn(self.clone().watch::<Pod>(Owner::Record, shutdown.clone()));
        tokio::spawn(
            self.clone()
                .watch::<HttpRoute>(Owner::Record, shutdown.clone()),
        );
        tokio::spawn(
            self.clone()
                .watch::<InferencePool>(Owner::Record, shutdown.clone()),
        );
        tokio::spawn(
            self.clone()
                .watch::<PodDisruptionBudget>(Owner::Record, shutdown.clone()),
        );
        tokio::spawn(self.clone().watch_gateways(shutdown.clone()));
        tokio::spawn(self.clone().watch_pod_events(shutdown.clone()));
        tokio::spawn(self.clone().resync_loop(shutdown.clone()));
        tokio::spawn(self.clone().requeue_loop(shutdown.clone()));
        tokio::spawn(self.clone().probe_cluster(shutdown.clone()));
        let inventory = super::inventory::Inventory::new(
            self.pool.clone(),
            self.cluster.client.clone(),
            super::inventory::InventoryConfig {
                worker_id: self.config.worker_id.clone(),
                installation: self.config.build.installation.clone(),
                default_gpu_resource: self.config.build.engines.gpu_resource_name.clone(),
                product_label: self.config.build.gpu_product_label.clone(),
            },
        );
        tokio::spawn(inventory.run(shutdown.clone()));

        // Each claimed record runs in its own task holding one of `concurrency` slots, and
        // new work is claimed as soon as a slot frees: a slow or failing record never holds
        // up the others, and a panic fails only its own attempt.
        let slots = Arc::new(tokio::sync::Semaphore::new(self.config.concurrency));
        let mut database_failures = 0;
        let mut claimed_since_vacuum = 0;
        let vacuuming = Arc::new(std::sync::atomic::AtomicBool::new(false));
        loop {
            self.health.beat();
            crate::metrics::record_pool(&self.pool, "worker");
            if shutdown.is_cancelled() {
                break;
            }
            let first = tokio::select! {
                () = shutdown.cancelled() => break,
                permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            };
            let free = slots.available_permits() + 1;
            let claims = match store::work_queue::claim_work(
                &self.pool,
                &self.config.worker_id,
                self.config.lease,
                free as i64,
            )
            .await
            {
                Ok(claims) => {
                    database_failures = 0;
                    claims
                }
                Err(err) => {
                    // A database blip must not end the worker: wait, then try again.
                    drop(first);
                    database_failures += 1;
                    let wait = backoff(database_failures).min(Duration::from_secs(30));
                    tracing::error!(error = %err, retry_in = ?wait, "cannot claim work");
                    metrics::counter!(crate::metrics::RECONCILE_ERRORS, "kind" => "database")
                        .increment(1);
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(wait) => continue,
                    }
                }
            };
            if !claims.is_empty() {
                claimed_since_vacuum += claims.len();
                if claimed_since_vacuum >= QUEUE_VACUUM_EVERY
                    && !vacuuming.swap(true, std::sync::atomic::Ordering::AcqRel)
                {
                    claimed_since_vacuum = 0;
                    let (pool, vacuuming) = (self.pool.clone(), vacuuming.clone());
                    tokio::spawn(async move {
                        if let Err(err) = store::work_queue::vacuum_queue(&pool).await {
                            tracing::warn!(error = %err, "cannot vacuum the work queue");
                        }
                        vacuuming.store(false, std::sync::atomic::Ordering::Release);
                    });
                }
                let mut permit = Some(first);
                for claim in claims {
                    let permit = match permit.take() {
                        Some(p) => p,
                        None => slots
                            .clone()
                            .acquire_owned()
                            .await
                            .expect("the semaphore is never closed"),
                    };
                    let worker = self.clone();
                    tokio::spawn(async move {
                        worker.process(claim).await;
                        drop(permit);
                    });
                }
                continue;
            }
            drop(first);
            let sleep = match store::work_queue::queue_state(&self.pool).await {
                Ok(queue) => {
                    metrics::gauge!(crate::metrics::QUEUE_DEPTH).set(queue.depth as f64);
                    metrics::gauge!(crate::metrics::QUEUE_OLDEST_AGE).set(queue.oldest_age);
                    queue.next_due.map_or(Duration::from_secs(30), |due| {
                        (due - Utc::now())
                            .to_std()
                            .unwrap_or(Duration::ZERO)
                            .min(Duration::from_secs(30))
                    })
                }
                Err(err) => {
                    tracing::warn!(error = %err, "cannot read the work queue");
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                notification = listener.try_recv() => {
                    if let Err(err) = notification {
                        tracing::warn!(error = %err, "notification listener failed; reconnecting");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    // One claim answers every notification that has arrived: a burst of
                    // enqueues (one per create, thousands during a large rollout, queued
                    // while every slot was busy) must not cost a claim and a queue read
                    // each, long after the work itself is done.
                    let until = tokio::time::Instant::now() + Duration::from_millis(20);
                    while tokio::time::Instant::now() < until {
                        while listener.next_buffered().is_some() {}
                        match tokio::time::timeout(Duration::from_millis(1), listener.try_recv()).await {
                            Ok(Ok(Some(_))) => {}
                            _ => break,
                        }
                    }
                }
                () = tokio::time::sleep(sleep.max(Duration::from_millis(50))) => {}
            }
        }
        self.drain(&slots).await;
        Ok(())
    }

    /// At shutdown: lets the reconciles in flight finish (within the lease they hold), then
    /// gives back whatever this worker still holds, so another worker need not wait for
    /// leases to expire.
    async fn drain(&self, slots: &tokio::sync::Semaphore) {
        let all = u32::try_from(self.config.concurrency).unwrap_or(u32::MAX);
        let finished = tokio::time::timeout(self.config.lease, slots.acquire_many(all)).await;
        if finished.is_err() {
            tracing::warn!(
                "reconciles still running at shutdown; their records are released for another worker"
            );
        }
        match store::work_queue::release_leases(&self.pool, &self.config.worker_id).await {
            Ok(0) => {
                tracing::info!(worker = %self.config.worker_id, "reconciler stopped; no lease held")
            }
            Ok(released) => {
                tracing::info!(worker = %self.config.worker_id, released, "reconciler stopped; leases released")
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot release leases at shutdown; they expire on their own")
            }
        }
    }

    /// One claimed record, in a `reconcile` span that continues the trace of the request
    /// that queued it (when traces are exported).
    async fn process(self: Arc<Self>, claim: Claim) {
        let span = tracing::info_span!("reconcile", deployment_id = %claim.deployment_id, attempt = claim.attempts);
        if let Some(parent) = &claim.trace_parent {
            crate::telemetry::continue_trace(&span, parent);
        }
        tracing::Instrument::instrument(self.process_claim(claim), span).await
    }

    async fn process_claim(self: Arc<Self>, claim: Claim) {
        let started = Instant::now();
        // A reconcile must end well inside its lease, or another worker could take the record.
        let budget = self.config.lease.mul_f64(0.8);
        let attempt = std::panic::AssertUnwindSafe(self.reconcile(claim.deployment_id));
        let result =
            match tokio::time::timeout(budget, futures::FutureExt::catch_unwind(attempt)).await {
                Ok(Ok(result)) => result,
                Ok(Err(panic)) => {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_else(|| "a panic".into());
                    tracing::error!(%message, "reconcile panicked");
                    Err(ClusterError::Panicked(message))
                }
                Err(_) => Err(ClusterError::TimedOut(budget)),
            };
        let elapsed = started.elapsed().as_secs_f64();
        match &result {
            Ok(_) => self.health.cluster_succeeded(),
            Err(ClusterError::Api(kube::Error::Api(status))) if status.code < 500 => {}
            Err(err @ (ClusterError::Api(_) | ClusterError::TimedOut(_))) => {
                self.health.cluster_failed(&err.to_string());
            }
            Err(_) => {}
        }
        let (again, error, outcome) = match result {
            Ok(Outcome::Done) => (None, None, "ok"),
            Ok(Outcome::Again(after)) => (Some(after), None, "ok"),
            Err(err) => {
                let wait = backoff(claim.attempts);
                tracing::warn!(error = %err, retry_in = ?wait, "reconcile failed");
                self.note_unreachable(claim.deployment_id, &err).await;
                let kind = err.metric_kind();
                metrics::counter!(crate::metrics::RECONCILE_ERRORS, "kind" => kind).increment(1);
                (Some(wait), Some(err.to_string()), "error")
            }
        };
        metrics::counter!(crate::metrics::RECONCILES, "outcome" => outcome).increment(1);
        metrics::histogram!(crate::metrics::RECONCILE_DURATION, "outcome" => outcome)
            .record(elapsed);
        if let Err(err) = store::work_queue::finish_work(
            &self.pool,
            &self.config.worker_id,
            &claim,
            again,
            error.as_deref(),
        )
        .await
        {
            tracing::error!(error = %err, "cannot finish a work item; its lease will expire");
        }
    }

    /// One pass over one record: apply what is missing or changed, then report status.
    async fn reconcile(&self, id: Uuid) -> Result<Outcome, ClusterError> {
        let Some(target) = store::deployments::find_reconcile_target(&self.pool, id).await? else {
            // The record is gone (or the id was a deleted project's): anything still labelled
            // with it is an orphan, and so is the namespace of a project that is gone.
            self.delete_objects(id, None).await?;
            self.collect_project_namespaces().await?;
            return Ok(Outcome::Done);
        };
        let record = target.row.clone().into_record(&target.project);
        if record.deletion_requested_at.is_some() {
            return self.finish_deletion(&target).await;
        }
        let serving = match record.spec.serving(&record.name) {
            Ok(serving) => serving,
            Err(errors) => {
                // Nothing is applied from a spec that is not valid; its next change requeues it.
                tracing::error!(%errors, "the stored spec is not valid");
                let status = invalid_spec(&record, &errors, Utc::now());
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
                self.write_status(&record, status, &subjects).await?;
                return Ok(Outcome::Done);
            }
        };
        let subject = Target {
            record: &record,
            serving: &serving,
            canary_track: false,
        };
        let namespace = target.namespace.as_str();
        // The canary track, when the record has one whose spec resolves.
        let canary_name = canary_object_name(&record.name);
        let canary_rec = record.canary.as_ref().map(|c| canary_record(&record, c));
        let canary_serving = record.canary.as_ref().and_then(|c| {
            c.spec
                .serving(&record.name)
                .inspect_err(
                    |errors| tracing::error!(%errors, "the stored canary spec is not valid"),
                )
                .ok()
        });
        let canary_target =
            canary_rec
                .as_ref()
                .zip(canary_serving.as_ref())
                .map(|(record, serving)| Target {
                    record,
                    serving,
                    canary_track: true,
                });
        let mut plan = None;
        if let (Some(canary), Some(t)) = (&record.canary, &canary_target) {
            // A canary takes its share only once a replica is available (a Gateway does not
            // move the share of a backend without endpoints elsewhere: it fails it); while a
            // promotion rolls the stable track, the canary carries everything.
            let routed_weight = if canary.promoting {
                100
            } else if self.canary_available(namespace, &canary_name).await? {
                canary.weight
            } else {
                0
            };
            plan = Some(CanaryPlan {
                target: t.clone(),
                routed_weight,
                header: &canary.header,
            });
        }
        let build = |plan: Option<&CanaryPlan>| {
            desired_objects(
                &subject,
                namespace,
                target.namespace_adopted,
                &self.config.build,
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
        let digest = desired.digest();
        let mut observed = Observed {
            config_hash: desired.config_hash.clone(),
            gateway: desired.gateway.clone(),
            ..Observed::default()
        };
        let mut canary_observed = Observed {
            config_hash: desired
                .canary
                .as_ref()
                .map(|c| c.config_hash.clone())
                .unwrap_or_default(),
            ..Observed::default()
        };

        let unchanged = target.applied_digest.as_deref() == Some(digest.as_str());
        // A new digest is applied whatever the cluster holds: reading it first would buy nothing.
        let (drifted, live) = if unchanged {
            self.live_objects(&desired).await?
        } else {
            (Vec::new(), LiveObjects::default())
        };
        let wrote = !unchanged || !drifted.is_empty();
        let mut applied_now = None;
        if wrote {
            if unchanged {
                self.timeline(
                    &target,
                    EventKind::DriftRepaired,
                    &format!(
                        "repaired what was done outside modelplane: {}",
                        drifted.join(", ")
                    ),
                )
                .await;
            }
            match self
                .apply_all(&desired, &mut observed, &mut canary_observed)
                .await
            {
                Ok(applied)
                    if observed.route_rejected.is_some()
                        || observed.budget_rejected.is_some()
                        || observed.pool_unavailable =>
                {
                    applied_now = Some(applied);
                    // Not applied as a whole: try again on the next pass.
                    store::deployments::set_applied_digest(&self.pool, id, None, None).await?;
                }
                Ok(applied) => {
                    applied_now = Some(applied);
                    let message = match (&desired.canary, &plan) {
                        (Some(_), Some(plan)) => format!(
                            "generation {} and its canary applied to namespace {} ({}% of requests without the header routed to the canary)",
                            record.generation, target.namespace, plan.routed_weight
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
                    store::deployments::set_applied_digest(&self.pool, id, Some(&digest), note)
                        .await?;
                    if !unchanged
                        && let Some(regarding) = deployment_ref(applied_deployment(&applied_now))
                    {
                        self.events
                            .normal(&regarding, "Applied", "Apply", &message)
                            .await;
                    }
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
                }
                Err(err) => return Err(err),
            }
        }
        if wrote
            && unchanged
            && let Some(regarding) = deployment_ref(applied_deployment(&applied_now))
        {
            self.events
                .normal(
                    &regarding,
                    "DriftRepaired",
                    "RepairDrift",
                    &format!(
                        "repaired what was done outside modelplane: {}",
                        drifted.join(", ")
                    ),
                )
                .await;
        }
        // What was just read is still current unless this pass wrote to the cluster; then
        // what the writes returned is.
        let known = if wrote {
            applied_now.as_ref()
        } else {
            Some(&live)
        };
        let canary_pods = self
            .observe(&record, namespace, &desired, known, &mut observed)
            .await?;
        if desired.canary.is_none()
            && let Some(outcome) = self.remove_canary(&target, &record, &observed).await?
        {
            return Ok(outcome);
        }
        if desired.pool.is_none() {
            self.remove_pool(&target, &record, &observed).await?;
        }
        let now = Utc::now();
        let mut status = compute(&subject, namespace, &observed, self.config.budgets, now);
        let mut recheck = recheck_after(&observed, self.config.budgets, now);
        if let (Some(canary), Some(t)) = (&record.canary, &canary_target) {
            canary_observed.pods = canary_pods;
            canary_observed.deployment = self
                .current(
                    known
                        .map(|k| k.canary_deployment.clone())
                        .unwrap_or_default(),
                    namespace,
                    &canary_name,
                )
                .await?;
            canary_observed.service_exists = self
                .current::<Service>(
                    known.map(|k| k.canary_service.clone()).unwrap_or_default(),
                    namespace,
                    &canary_name,
                )
                .await?
                .is_some();
            // The deployment's route carries the canary's weight; no Gateway is the
            // canary's own, so its status does not wait for one.
            canary_observed.route = observed.route.clone();
            let track = canary_status(
                t,
                canary,
                namespace,
                &canary_observed,
                &status,
                self.config.budgets,
                now,
            );
            status = with_canary(status, track);
            recheck = recheck
                .into_iter()
                .chain(recheck_after(&canary_observed, self.config.budgets, now))
                .min();
        }
        let pending = status.phase == Phase::Pending;
        let subjects = Subjects {
            deployment: deployment_ref(observed.deployment.as_ref()),
            route: observed.route.as_ref().and_then(|route| {
                kube_events::reference("gateway.networking.k8s.io/v1", "HTTPRoute", &route.metadata)
            }),
        };
        self.write_status(&record, status, &subjects).await?;
        // Watches bring every cluster change; only a running budget needs a timer.
        Ok(match recheck {
            Some(after) => Outcome::Again(after),
            None if pending => Outcome::Again(Duration::from_secs(5)),
            None => Outcome::Done,
        })
    }

    /// Removes InferencePool mode's objects when the record no longer routes through a pool
    /// (switched to Service mode, or the Gateway went), once the Gateway has accepted the
    /// route that no longer names the pool.
    async fn remove_pool(
        &self,
        target: &ReconcileTarget,
        record: &Deployment,
        observed: &Observed,
    ) -> Result<(), ClusterError> {
        let namespace = target.namespace.as_str();
        let picker = picker_name(&record.name);
        // Not known yet (the watch has not listed, or the kind is not served): ask only for a
        // record that was in InferencePool mode.
        let was_pool_mode = record
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == "InferencePool");
        let pool = match self
            .seen
            .of::<InferencePool>()
            .and_then(|seen| seen.get(Some(namespace), &record.name))
        {
            Some(pool) => pool.is_some(),
            None if !was_pool_mode => false,
            None => match self
                .cluster
                .get::<InferencePool>(Some(namespace), &record.name)
                .await
            {
                Ok(pool) => pool.is_some(),
                Err(err) if err.api_status().is_some_and(|s| s.code == 404) => false,
                Err(err) => return Err(err),
            },
        };
        let picker_exists = self
            .seen
            .of::<K8sDeployment>()
            .and_then(|seen| seen.get(Some(namespace), &picker))
            .is_some_and(|d| d.is_some());
        if !pool && !picker_exists {
            return Ok(());
        }
        if !route_settled(observed) {
            return Ok(());
        }
        let ns = Some(namespace);
        let results = [
            self.cluster.delete::<InferencePool>(ns, &record.name).await,
            self.cluster.delete::<K8sDeployment>(ns, &picker).await,
            self.cluster.delete::<Service>(ns, &picker).await,
            self.cluster.delete::<RoleBinding>(ns, &picker).await,
            self.cluster.delete::<Role>(ns, &picker).await,
            self.cluster.delete::<ServiceAccount>(ns, &picker).await,
            self.cluster.delete::<ConfigMap>(ns, &picker).await,
        ];
        for result in results {
            match result {
                Ok(()) => {}
                Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {}
                Err(err) => return Err(err),
            }
        }
        let message = "InferencePool mode's objects (the pool and its endpoint picker) removed: the route no longer uses them";
        self.timeline(target, EventKind::InferencePoolRemoved, message)
            .await;
        if let Some(regarding) = deployment_ref(observed.deployment.as_ref()) {
            self.events
                .normal(
                    &regarding,
                    "InferencePoolRemoved",
                    "RemoveInferencePool",
                    message,
                )
                .await;
        }
        Ok(())
    }

    /// Whether the canary's Deployment has a replica available to take its share.
    async fn canary_available(&self, namespace: &str, name: &str) -> Result<bool, ClusterError> {
        let seen = self
            .seen
            .of::<K8sDeployment>()
            .and_then(|seen| seen.get(Some(namespace), name));
        let live = match seen {
            Some(live) => live,
            None => {
                self.cluster
                    .get::<K8sDeployment>(Some(namespace), name)
                    .await?
            }
        };
        Ok(live
            .and_then(|d| d.status)
            .and_then(|s| s.available_replicas)
            .is_some_and(|n| n >= 1))
    }

    /// Whether the stable Deployment has rolled to `desired`'s pod template on every replica,
    /// all of them available: a promotion can then send traffic back to it.
    async fn stable_settled(&self, desired: &DesiredObjects) -> Result<bool, ClusterError> {
        let meta = &desired.deployment.metadata;
        let name = meta.name.as_deref().unwrap_or_default();
        let seen = self
            .seen
            .of::<K8sDeployment>()
            .and_then(|seen| seen.get(meta.namespace.as_deref(), name));
        let live = match seen {
            Some(live) => live,
            None => {
                self.cluster
                    .get::<K8sDeployment>(meta.namespace.as_deref(), name)
                    .await?
            }
        };
        let Some(live) = live else {
            return Ok(false);
        };
        let hash = live
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(super::desired::ANNOTATION_CONFIG_HASH));
        let want = desired
            .deployment
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or(1);
        let status = live.status.clone().unwrap_or_default();
        Ok(hash == Some(&desired.config_hash)
            && status.observed_generation.unwrap_or(0) >= live.metadata.generation.unwrap_or(0)
            && status.updated_replicas.unwrap_or(0) >= want
            && status.available_replicas.unwrap_or(0) >= want
            && status.replicas.unwrap_or(0) <= want)
    }

    /// Removes a canary's objects the record no longer wants (aborted, or promoted and the
    /// stable track settled), once the Gateway has accepted the route that no longer sends
    /// them anything; a finished promotion then forgets the canary. `Some`: the pass ends.
    async fn remove_canary(
        &self,
        target: &ReconcileTarget,
        record: &Deployment,
        observed: &Observed,
    ) -> Result<Option<Outcome>, ClusterError> {
        let namespace = target.namespace.as_str();
        let name = canary_object_name(&record.name);
        let known = |seen: Option<Option<bool>>| match seen {
            Some(exists) => exists,
            // Not known yet (the watch has not listed): ask when there may be one.
            None => Some(record.canary.is_some() || record.status.canary.is_some()),
        };
        let deployment = known(
            self.seen
                .of::<K8sDeployment>()
                .map(|seen| seen.get(Some(namespace), &name).map(|d| d.is_some())),
        );
        let service = known(
            self.seen
                .of::<Service>()
                .map(|seen| seen.get(Some(namespace), &name).map(|d| d.is_some())),
        );
        let promoting = record.canary.as_ref().is_some_and(|c| c.promoting);
        let present = deployment.unwrap_or(false) || service.unwrap_or(false);
        if !present && !promoting {
            return Ok(None);
        }
        if present {
            if !route_settled(observed) {
                // The route's status watch brings the Gateway's answer.
                return Ok(None);
            }
            for result in [
                self.cluster
                    .delete::<K8sDeployment>(Some(namespace), &name)
                    .await,
                self.cluster.delete::<Service>(Some(namespace), &name).await,
            ] {
                match result {
                    Ok(_) => {}
                    Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {}
                    Err(err) => return Err(err),
                }
            }
        }
        if promoting {
            let message = "promotion finished: every stable replica runs the canary's spec and takes all traffic; the canary's objects are removed";
            let note = Note {
                kind: EventKind::CanaryRemoved,
                message,
                actor: WORKER_ACTOR,
            };
            store::deployments::finish_canary(&self.pool, record.id, record.generation, note)
                .await?;
            if let Some(regarding) = deployment_ref(observed.deployment.as_ref()) {
                self.events
                    .normal(&regarding, "CanaryRemoved", "RemoveCanary", message)
                    .await;
            }
            // The record moved to a new generation: report on it.
            return Ok(Some(Outcome::Again(Duration::ZERO)));
        }
        let message = "the canary's objects are removed; all traffic is on the stable track";
        self.timeline(target, EventKind::CanaryRemoved, message)
            .await;
        if let Some(regarding) = deployment_ref(observed.deployment.as_ref()) {
            self.events
                .normal(&regarding, "CanaryRemoved", "RemoveCanary", message)
                .await;
        }
        Ok(None)
    }

    /// Reads the desired objects back: which exist and still hold what modelplane manages
    /// (the kinds that drifted), and what was read, so observation can reuse it.
    async fn live_objects(
        &self,
        desired: &DesiredObjects,
    ) -> Result<(Vec<String>, LiveObjects), ClusterError> {
        let mut drifted = Vec::new();
        self.read_back(&desired.namespace, &mut drifted).await?;
        let read = LiveObjects {
            deployment: self.read_back(&desired.deployment, &mut drifted).await?,
            service: self.read_back(&desired.service, &mut drifted).await?,
            route: match &desired.http_route {
                Some(route) => self.read_back(route, &mut drifted).await?,
                None => None,
            },
            canary_deployment: match &desired.canary {
                Some(canary) => self.read_back(&canary.deployment, &mut drifted).await?,
                None => None,
            },
            canary_service: match &desired.canary {
                Some(canary) => self.read_back(&canary.service, &mut drifted).await?,
                None => None,
            },
        };
        if let Some(budget) = &desired.disruption_budget {
            self.read_back(budget, &mut drifted).await?;
        }
        Ok((drifted, read))
    }

    /// Reads `desired` back from the cluster and notes whether it drifted. `None`: the
    /// cluster does not serve the kind (no Gateway API) — reported, not fatal, and not drift
    /// (nothing could repair it); observation finds out why. When the kind appears, its
    /// watch relists and every record is looked at again.
    async fn read_back<K: Object>(
        &self,
        desired: &K,
        drifted: &mut Vec<String>,
    ) -> Result<Option<Option<K>>, ClusterError> {
        let meta = desired.meta();
        let name = meta.name.as_deref().unwrap_or_default();
        // As the watch saw it, when that still holds what is wanted: anything that looks
        // like drift is read again, since the watch may not have caught up yet.
        if let Some(Some(seen)) = self
            .seen
            .of::<K>()
            .and_then(|seen| seen.get(meta.namespace.as_deref(), name))
            && contains(&as_json(&seen), &as_json(desired))
        {
            return Ok(Some(Some(seen)));
        }
        let live = match self.cluster.get::<K>(meta.namespace.as_deref(), name).await {
            Ok(live) => live,
            Err(err) if err.api_status().is_some_and(|s| s.code == 404) => return Ok(None),
            Err(err) => return Err(err),
        };
        let kind = kind_of::<K>();
        match &live {
            None => drifted.push(format!("{kind} {name} was deleted")),
            Some(l) if !contains(&as_json(l), &as_json(desired)) => {
                drifted.push(format!("{kind} {name} was changed"))
            }
            Some(_) => {}
        }
        Ok(Some(live))
    }

    /// `desired` as the watch last saw it, else as the API server has it (`None` when the
    /// cluster does not serve the kind).
    async fn read_seen<K: Object>(&self, desired: &K) -> Result<Option<K>, ClusterError> {
        let meta = desired.meta();
        let name = meta.name.as_deref().unwrap_or_default();
        if let Some(seen) = self
            .seen
            .of::<K>()
            .and_then(|seen| seen.get(meta.namespace.as_deref(), name))
        {
            return Ok(seen);
        }
        match self.cluster.get::<K>(meta.namespace.as_deref(), name).await {
            Ok(live) => Ok(live),
            Err(err) if err.api_status().is_some_and(|s| s.code == 404) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// An object of the record: as read this pass (`known`), else from the cluster.
    async fn current<K: Object>(
        &self,
        known: Option<Option<K>>,
        namespace: &str,
        name: &str,
    ) -> Result<Option<K>, ClusterError> {
        match known {
            Some(live) => Ok(live),
            None => self.cluster.get::<K>(Some(namespace), name).await,
        }
    }

    /// Applies every desired object; returns them as the API server stored them, so the
    /// status of this pass need not read them again.
    async fn apply_all(
        &self,
        desired: &DesiredObjects,
        observed: &mut Observed,
        canary_observed: &mut Observed,
    ) -> Result<LiveObjects, ClusterError> {
        // The project's namespace serves all its records: unless the watch shows it lacks
        // something, a record's change need not write it again.
        let namespace_holds = self
            .seen
            .of::<Namespace>()
            .and_then(|seen| seen.get(None, desired.namespace.metadata.name.as_deref()?))
            .flatten()
            .is_some_and(|live| contains(&as_json(&live), &as_json(&desired.namespace)));
        if !namespace_holds {
            self.apply_required(&desired.namespace, observed).await?;
        }
        let deployment = self.apply_required(&desired.deployment, observed).await?;
        let service = self.apply_required(&desired.service, observed).await?;
        if let Some(budget) = &desired.disruption_budget {
            // The model serves without it: a refusal is said, but decides no phase.
            observed.budget_rejected = self.apply_unless_refused(budget).await?.err();
        }
        if desired.disruption_budget.is_none() {
            // One replica (or none) has no budget: remove one left from a larger scale.
            let meta = &desired.deployment.metadata;
            let name = meta.name.as_deref().unwrap_or_default();
            let seen = self
                .seen
                .of::<PodDisruptionBudget>()
                .and_then(|seen| seen.get(meta.namespace.as_deref(), name));
            // Known absent: nothing to delete (the common case, and no request for it).
            if !matches!(seen, Some(None)) {
                match self
                    .cluster
                    .delete::<PodDisruptionBudget>(meta.namespace.as_deref(), name)
                    .await
                {
                    Ok(_) => {}
                    Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {}
                    Err(err) => return Err(err),
                }
            }
        }
        // The canary's refusal fails its track, not the deployment; it goes before the route,
        // which names its Service.
        let (mut canary_deployment, mut canary_service) = (None, None);
        if let Some(canary) = &desired.canary {
            match self.apply_unless_refused(&canary.deployment).await? {
                Ok(applied) => canary_deployment = Some(Some(applied)),
                Err(message) => {
                    canary_observed.rejected = Some(("Deployment".into(), message));
                }
            }
            match self.apply_unless_refused(&canary.service).await? {
                Ok(applied) => canary_service = Some(Some(applied)),
                Err(message) => canary_observed.rejected = Some(("Service".into(), message)),
            }
        }
        // InferencePool mode: the pool first, so a cluster without its CRD gets nothing of
        // the mode (no picker, no route to a pool that cannot exist).
        let mut route_wanted = desired.http_route.as_ref();
        if let Some(pool) = &desired.pool {
            match self.cluster.apply(&pool.pool).await {
                Ok(applied) => {
                    observed.pool = Some(applied);
                    self.apply_required(&pool.config_map, observed).await?;
                    self.apply_required(&pool.service_account, observed).await?;
                    self.apply_required(&pool.role, observed).await?;
                    self.apply_required(&pool.role_binding, observed).await?;
                    observed.picker = Some(self.apply_required(&pool.picker, observed).await?);
                    self.apply_required(&pool.picker_service, observed).await?;
                }
                Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {
                    observed.pool_unavailable = true;
                    route_wanted = desired.fallback_route.as_ref();
                    if route_wanted.is_none() {
                        observed.route_problem = Some(
                            "the cluster does not serve InferencePools (inference.networking.k8s.io/v1 CRD missing) \
                             and spec.routing.inferencePool.whenUnavailable is Fail: no route was made"
                                .into(),
                        );
                        // A route of the old mode would keep routing some other way.
                        if let Some(old) = &desired.http_route {
                            let meta = &old.metadata;
                            match self
                                .cluster
                                .delete::<HttpRoute>(
                                    meta.namespace.as_deref(),
                                    meta.name.as_deref().unwrap_or_default(),
                                )
                                .await
                            {
                                Ok(()) => {}
                                Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {}
                                Err(err) => return Err(err),
                            }
                        }
                    }
                }
                Err(err) => return Err(err),
            }
        }
        let mut route = None;
        if let Some(desired_route) = route_wanted {
            match self.apply_unless_refused(desired_route).await {
                Ok(Ok(applied)) => route = Some(Some(applied)),
                // The rest is applied and may serve in the cluster; status says what failed.
                Ok(Err(refused)) => observed.route_rejected = Some(refused),
                Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {
                    observed.route_problem = Some("the cluster does not serve the Gateway API (HTTPRoute CRD missing); no route was made".into());
                }
                Err(err) => return Err(err),
            }
        }
        Ok(LiveObjects {
            deployment: Some(Some(deployment)),
            service: Some(Some(service)),
            route,
            canary_deployment,
            canary_service,
        })
    }

    /// Applies an object the deployment cannot serve without; a refusal (400/422) is noted
    /// in `observed` for the status, and fails the pass.
    async fn apply_required<K: Object>(
        &self,
        object: &K,
        observed: &mut Observed,
    ) -> Result<K, ClusterError> {
        let result = self.cluster.apply(object).await;
        if let Err(err) = &result
            && let Some(status) = err.api_status().filter(|s| s.code == 422 || s.code == 400)
        {
            observed.rejected = Some((kind_of::<K>(), status.message.clone()));
        }
        result
    }

    /// Applies `object`; when the API server refuses it (400/422), says so in the log and
    /// the error metric and returns its message (`Err`) instead of failing the pass.
    async fn apply_unless_refused<K: Object>(
        &self,
        object: &K,
    ) -> Result<Result<K, String>, ClusterError> {
        match self.cluster.apply(object).await {
            Ok(applied) => Ok(Ok(applied)),
            Err(err)
                if err
                    .api_status()
                    .is_some_and(|s| s.code == 422 || s.code == 400) =>
            {
                let message = err
                    .api_status()
                    .map(|s| s.message.clone())
                    .unwrap_or_default();
                let kind = kind_of::<K>();
                tracing::warn!(%kind, %message, "the API server rejected an object");
                metrics::counter!(crate::metrics::RECONCILE_ERRORS, "kind" => "api_refused")
                    .increment(1);
                Ok(Err(message))
            }
            Err(err) => Err(err),
        }
    }

    /// Reads back what the cluster reports about the record's objects; returns the canary
    /// track's pods (the stable track's go into `observed`).
    async fn observe(
        &self,
        record: &Deployment,
        namespace: &str,
        desired: &DesiredObjects,
        known: Option<&LiveObjects>,
        observed: &mut Observed,
    ) -> Result<Vec<Pod>, ClusterError> {
        let name = record.name.as_str();
        let (deployment, service, route) = match known {
            Some(k) => (k.deployment.clone(), k.service.clone(), k.route.clone()),
            None => (None, None, None),
        };
        observed.deployment = self.current(deployment, namespace, name).await?;
        observed.service_exists = self
            .current::<Service>(service, namespace, name)
            .await?
            .is_some();
        let pods = match self
            .seen
            .of::<Pod>()
            .and_then(|seen| seen.of_record(record.id))
        {
            Some(pods) => pods,
            None => {
                let selector = format!("{LABEL_DEPLOYMENT_ID}={}", record.id);
                self.cluster.list::<Pod>(Some(namespace), &selector).await?
            }
        };
        // The record's pods: its model servers, stable and canary, and (in InferencePool
        // mode) its endpoint picker's, which are neither.
        let label = |pod: &Pod, key: &str| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .cloned()
                .unwrap_or_default()
        };
        let (canary_pods, stable_pods): (Vec<Pod>, Vec<Pod>) = pods
            .into_iter()
            .filter(|pod| label(pod, LABEL_NAME) == MODEL_SERVER)
            .partition(|pod| label(pod, LABEL_TRACK) == TRACK_CANARY);
        observed.pods = stable_pods;
        if let Some(pool) = &desired.pool
            && !observed.pool_unavailable
        {
            observed.pool_mode = true;
            if observed.pool.is_none() {
                observed.pool = self.read_seen(&pool.pool).await?;
            }
            if observed.picker.is_none() {
                observed.picker = self.read_seen(&pool.picker).await?;
            }
        }
        if desired.http_route.is_some() && observed.route_problem.is_none() {
            // Not read this pass (perhaps not served): ask, and hear why.
            match self.current::<HttpRoute>(route, namespace, name).await {
                Ok(route) => observed.route = route,
                Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {
                    observed.route_problem = Some("the cluster does not serve the Gateway API (HTTPRoute CRD missing); no route was made".into());
                }
                Err(err) => return Err(err),
            }
            if let Some(gw) = &desired.gateway {
                observed.gateway_object = self
                    .cluster
                    .get::<Gateway>(Some(&gw.namespace), &gw.name)
                    .await?;
            }
        }
        Ok(canary_pods)
    }

    /// Stores a status that changed, with a timeline entry when the phase did, and the
    /// same as a Kubernetes Event on the record's Deployment (a `Warning` naming the cause
    /// when the phase turns Failed or Degraded, on the HTTPRoute as well when the route is
    /// the cause).
    async fn write_status(
        &self,
        record: &Deployment,
        mut status: DeploymentStatus,
        subjects: &Subjects,
    ) -> Result<(), ClusterError> {
        // The cluster answered, so it is reachable: drop a stale outage condition.
        status.conditions.retain(|c| c.type_ != "ClusterReachable");
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
        let held = self.gpus_held(record, &status);
        if held != self.gpus_held(record, &record.status) {
            store::usage::record_held(&self.pool, record.id, &record.name, &held).await?;
        }
        if phase_changed {
            tracing::info!(deployment_id = %record.id, from = %record.status.phase, to = %status.phase, message = %status.message, "phase changed");
            self.publish_phase(record.status.phase, &status, &message, subjects)
                .await;
        }
        Ok(())
    }

    /// The GPUs the record's ready pods hold, per track, by the status given (for the
    /// GPU-hours of `gpu_usage`).
    fn gpus_held(&self, record: &Deployment, status: &DeploymentStatus) -> Vec<Held> {
        let default = &self.config.build.engines.gpu_resource_name;
        let canary = record.canary.as_ref().zip(status.canary.as_ref());
        [
            Some((TRACK_STABLE, &record.spec, status.replicas.ready)),
            canary.map(|(c, s)| (TRACK_CANARY, &c.spec, s.replicas.ready)),
        ]
        .into_iter()
        .flatten()
        .filter_map(|(track, spec, ready)| {
            let serving = spec.serving(&record.name).ok()?;
            let shape = GpuShape::of(&serving, default)?;
            Some(Held {
                track,
                resource_name: shape.resource_name,
                product: shape.product,
                gpus: ready * shape.per_replica,
            })
        })
        .filter(|h| h.gpus > 0)
        .collect()
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

    /// Keeps the last status and adds `ClusterReachable=False` when the cluster cannot be reached.
    async fn note_unreachable(&self, id: Uuid, err: &ClusterError) {
        // A server error (5xx, e.g. etcd down behind the API server) is an outage too.
        if err.api_status().is_some_and(|s| s.code < 500)
            || matches!(
                err,
                ClusterError::Database(_) | ClusterError::Panicked(_) | ClusterError::Decode { .. }
            )
        {
            return;
        }
        let Ok(Some(target)) = store::deployments::find_reconcile_target(&self.pool, id).await
        else {
            return;
        };
        let mut status = target.row.status.0.clone();
        if status
            .conditions
            .iter()
            .any(|c| c.type_ == "ClusterReachable" && c.status == ConditionStatus::False)
        {
            return;
        }
        status.conditions.push(Condition {
            type_: "ClusterReachable".into(),
            status: ConditionStatus::False,
            reason: "Unreachable".into(),
            message: format!("cannot reach the cluster: {err}"),
            last_transition_time: Utc::now(),
        });
        if store::deployments::update_status(&self.pool, id, target.row.generation, &status, None)
            .await
            .unwrap_or(false)
        {
            self.timeline(
                &target,
                EventKind::ClusterUnreachable,
                &format!("cannot reach the cluster: {err}"),
            )
            .await;
        }
    }

    /// Deletes every object with the record's id label; removes the record once none is left.
    async fn finish_deletion(&self, target: &ReconcileTarget) -> Result<Outcome, ClusterError> {
        let id = target.row.id;
        let remaining = self.delete_objects(id, Some(&target.namespace)).await?;
        if remaining > 0 {
            let mut status = target.row.status.0.clone();
            status.message = format!("deleting: {remaining} Kubernetes object(s) still to go");
            if status != target.row.status.0 {
                store::deployments::update_status(
                    &self.pool,
                    id,
                    target.row.generation,
                    &status,
                    None,
                )
                .await?;
            }
            return Ok(Outcome::Again(Duration::from_secs(1)));
        }
        self.timeline(
            target,
            EventKind::Deleted,
            "every Kubernetes object removed; record deleted",
        )
        .await;
        // Its pods are gone: whatever GPU time was still open ends now.
        store::usage::record_held(&self.pool, id, &target.row.name, &[]).await?;
        store::deployments::delete_deployment_record(&self.pool, id).await?;
        tracing::info!(deployment_id = %id, "deployment deleted");
        Ok(Outcome::Done)
    }

    /// Deletes the objects labelled with `id`; returns how many objects (pods and replica
    /// sets included) still carry the label.
    async fn delete_objects(
        &self,
        id: Uuid,
        namespace: Option<&str>,
    ) -> Result<usize, ClusterError> {
        let selector = format!(
            "{LABEL_DEPLOYMENT_ID}={id},{LABEL_INSTALLATION}={}",
            self.config.build.installation
        );
        // Pods and replica sets go with their Deployment; they are only counted.
        Ok(self
            .delete_labelled::<HttpRoute>(namespace, &selector, true)
            .await?
            + self
                .delete_labelled::<InferencePool>(namespace, &selector, true)
                .await?
            // The endpoint picker's configuration and RBAC (InferencePool mode).
            + self
                .delete_labelled::<RoleBinding>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<Role>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<ServiceAccount>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<ConfigMap>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<PodDisruptionBudget>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<Service>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<K8sDeployment>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<ReplicaSet>(namespace, &selector, false)
                .await?
            + self
                .delete_labelled::<Pod>(namespace, &selector, false)
                .await?)
    }

    /// How many objects of kind `K` match `selector`, deleting them when `delete` (none
    /// when the cluster does not serve the kind).
    async fn delete_labelled<K: Object>(
        &self,
        namespace: Option<&str>,
        selector: &str,
        delete: bool,
    ) -> Result<usize, ClusterError> {
        let objects = match self.cluster.list::<K>(namespace, selector).await {
            Ok(objects) => objects,
            Err(err) if err.api_status().is_some_and(|s| s.code == 404) => return Ok(0),
            Err(err) => return Err(err),
        };
        if delete {
            for object in &objects {
                let meta = object.meta();
                let name = meta.name.as_deref().unwrap_or_default();
                self.cluster
                    .delete::<K>(meta.namespace.as_deref(), name)
                    .await?;
            }
        }
        Ok(objects.len())
    }

    async fn timeline(&self, target: &ReconcileTarget, kind: EventKind, message: &str) {
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

    /// Asks the API server for its version every few seconds. When it stops answering,
    /// every record says so (`ClusterReachable=False`, the rest of its last status kept),
    /// whether or not it has work pending; when it answers again, every record is looked at
    /// again, which writes a status without the condition.
    async fn probe_cluster(self: Arc<Self>, shutdown: CancellationToken) {
        const EVERY: Duration = Duration::from_secs(2);
        // Two misses in a row: one lost request is not an outage.
        const MISSES: u32 = 2;
        let mut tick = tokio::time::interval(EVERY);
        let mut misses = 0;
        let mut marked = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            match tokio::time::timeout(EVERY, self.cluster.client.apiserver_version()).await {
                Ok(Ok(_)) => {
                    misses = 0;
                    if marked {
                        marked = false;
                        tracing::info!(cluster = %self.cluster.description, "the cluster answers again");
                        if let Err(err) = store::work_queue::enqueue_all(&self.pool).await {
                            tracing::warn!(error = %err, "cannot requeue after the cluster came back");
                            marked = true;
                        }
                    }
                }
                outcome => {
                    misses += 1;
                    let why = match outcome {
                        Ok(Err(err)) => err.to_string(),
                        _ => format!("no answer within {} s", EVERY.as_secs()),
                    };
                    if misses >= MISSES && !marked {
                        let condition = Condition {
                            type_: "ClusterReachable".into(),
                            status: ConditionStatus::False,
                            reason: "Unreachable".into(),
                            message: format!("cannot reach the cluster: {why}"),
                            last_transition_time: Utc::now(),
                        };
                        match store::deployments::mark_cluster_unreachable(&self.pool, &condition)
                            .await
                        {
                            Ok(n) => {
                                marked = true;
                                tracing::warn!(cluster = %self.cluster.description, records = n, %why, "the cluster does not answer");
                            }
                            Err(err) => tracing::warn!(error = %err, "cannot mark records"),
                        }
                    }
                }
            }
        }
    }

    /// Requeues every record now and then, and removes orphaned objects.
    async fn resync_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.config.resync);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(err) = store::work_queue::enqueue_all(&self.pool).await {
                tracing::warn!(error = %err, "resync could not queue records");
            }
            // Bounded like a reconcile: a hung cluster must not hold the resync forever.
            match tokio::time::timeout(self.config.lease, self.collect_orphans()).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!(error = %err, "orphan collection failed"),
                Err(_) => {
                    tracing::warn!(budget = ?self.config.lease, "orphan collection timed out")
                }
            }
        }
    }

    /// Deletes the namespaces this installation created for projects that no longer exist;
    /// adopted namespaces survive their project.
    async fn collect_project_namespaces(&self) -> Result<(), ClusterError> {
        let selector = format!(
            "{LABEL_MANAGED_BY}=modelplane,{LABEL_INSTALLATION}={}",
            self.config.build.installation
        );
        for namespace in self.cluster.list::<Namespace>(None, &selector).await? {
            let meta = namespace.metadata;
            let labels = meta.labels.unwrap_or_default();
            let Some(project) = labels.get(LABEL_PROJECT).map(String::as_str) else {
                continue;
            };
            if meta.deletion_timestamp.is_some()
                || store::projects::project_exists(&self.pool, project).await?
            {
                continue;
            }
            let name = meta.name.as_deref().unwrap_or_default();
            if labels.get(LABEL_NAMESPACE_ADOPTED).map(String::as_str) == Some("true") {
                // Adopted: it stays, without modelplane's labels. Applying nothing as our
                // field manager removes the fields only we own.
                tracing::info!(
                    namespace = name,
                    project,
                    "releasing the adopted namespace of a deleted project"
                );
                let released = Namespace {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        ..ObjectMeta::default()
                    },
                    ..Namespace::default()
                };
                self.cluster.apply(&released).await?;
                continue;
            }
            tracing::info!(
                namespace = name,
                project,
                "deleting the namespace of a deleted project"
            );
            self.cluster.delete::<Namespace>(None, name).await?;
        }
        Ok(())
    }

    /// Deletes managed objects of this installation whose record no longer exists.
    async fn collect_orphans(&self) -> Result<(), ClusterError> {
        let selector = format!(
            "{LABEL_MANAGED_BY}=modelplane,{LABEL_INSTALLATION}={}",
            self.config.build.installation
        );
        let mut ids = Vec::new();
        ids.extend(self.labelled_ids::<K8sDeployment>(&selector).await?);
        ids.extend(self.labelled_ids::<Service>(&selector).await?);
        ids.extend(self.labelled_ids::<HttpRoute>(&selector).await?);
        ids.extend(self.labelled_ids::<PodDisruptionBudget>(&selector).await?);
        ids.sort();
        ids.dedup();
        self.collect_project_namespaces().await?;
        for id in store::deployments::missing_deployment_ids(&self.pool, &ids).await? {
            tracing::info!(deployment_id = %id, "removing orphaned objects");
            self.delete_objects(id, None).await?;
        }
        Ok(())
    }

    /// The record ids on the objects of kind `K` matching `selector` (none when the
    /// cluster does not serve the kind).
    async fn labelled_ids<K: Object>(&self, selector: &str) -> Result<Vec<Uuid>, ClusterError> {
        let objects = match self.cluster.list::<K>(None, selector).await {
            Ok(objects) => objects,
            Err(err) if err.api_status().is_some_and(|s| s.code == 404) => return Ok(vec![]),
            Err(err) => return Err(err),
        };
        Ok(objects
            .iter()
            .filter_map(|o| record_id(o.meta().labels.as_ref()))
            .collect())
    }

    /// Watches one kind of managed object and requeues the records that own each change.
    async fn watch<K: Object>(self: Arc<Self>, owner: Owner, shutdown: CancellationToken) {
        let name = kind_of::<K>();
        let api = kube::Api::<K>::all(self.cluster.client.clone());
        let selector = format!(
            "{LABEL_MANAGED_BY}=modelplane,{LABEL_INSTALLATION}={}",
            self.config.build.installation
        );
        let stream = watcher::watcher(api, watcher::Config::default().labels(&selector));
        let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(stream));
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = stream.next() => event,
            };
            let Some(event) = event else { return };
            if let (Ok(event), Some(seen)) = (&event, self.seen.of::<K>()) {
                seen.observe(event);
            }
            let object = match event {
                Ok(
                    watcher::Event::Apply(o)
                    | watcher::Event::Delete(o)
                    | watcher::Event::InitApply(o),
                ) => o,
                // A (re)list: after a restarted or restored API server, objects may be gone
                // without a delete event. Look at every record again.
                Ok(watcher::Event::InitDone) => {
                    if let Err(err) = store::work_queue::enqueue_all(&self.pool).await {
                        tracing::warn!(kind = %name, error = %err, "cannot requeue after a relist");
                    }
                    continue;
                }
                Ok(_) => continue,
                Err(err) => {
                    tracing::debug!(kind = %name, error = %err, "watch interrupted; retrying");
                    metrics::counter!(crate::metrics::WATCH_RESTARTS, "kind" => name.clone())
                        .increment(1);
                    continue;
                }
            };
            let labels = object.meta().labels.as_ref();
            let requeued = match owner {
                Owner::Project => {
                    let Some(project) = labels.and_then(|l| l.get(LABEL_PROJECT)) else {
                        continue;
                    };
                    store::work_queue::enqueue_project(&self.pool, project)
                        .await
                        .map(|_| ())
                }
                Owner::Record => {
                    if let Some(id) = record_id(labels) {
                        // Batched by `requeue_loop`: a burst of events is a few statements.
                        let _ = self.requeue.send(id);
                    }
                    Ok(())
                }
            };
            if let Err(err) = requeued {
                tracing::warn!(error = %err, "cannot requeue after a cluster change");
            }
        }
    }
}

impl Worker {
    /// Writes the records the watches asked to requeue: everything waiting at once in one
    /// statement, so a burst of cluster events costs a few round trips, not one each.
    async fn requeue_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let Some(mut requeued) = self.requeued.lock().expect("not poisoned").take() else {
            return;
        };
        let mut ids = Vec::new();
        let mut failures = 0;
        loop {
            if ids.is_empty() {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    got = requeued.recv_many(&mut ids, 1000) => if got == 0 { return },
                }
            }
            while let Ok(id) = requeued.try_recv() {
                ids.push(id);
                if ids.len() >= 5000 {
                    break;
                }
            }
            match store::work_queue::enqueue_reconciles(&self.pool, &ids).await {
                Ok(()) => {
                    failures = 0;
                    ids.clear();
                }
                Err(err) => {
                    // Kept, and tried again: a cluster change must not be lost to a blip.
                    ids.sort_unstable();
                    ids.dedup();
                    failures += 1;
                    let wait = backoff(failures).min(Duration::from_secs(5));
                    tracing::warn!(error = %err, retry_in = ?wait, "cannot requeue after cluster changes");
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// Watches Gateways: an address or listener change alters the external URLs of the
    /// records routed through it, so they are requeued (rare, so all of them).
    async fn watch_gateways(self: Arc<Self>, shutdown: CancellationToken) {
        let api = kube::Api::<Gateway>::all(self.cluster.client.clone());
        let stream = watcher::watcher(api, watcher::Config::default());
        let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(stream));
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = stream.next() => event,
            };
            match event {
                None => return,
                Some(Ok(watcher::Event::InitApply(gateway))) => {
                    self.record_gateway_hostnames(&gateway, false).await;
                }
                Some(Ok(
                    ref event @ (watcher::Event::Apply(ref gateway)
                    | watcher::Event::Delete(ref gateway)),
                )) => {
                    let deleted = matches!(event, watcher::Event::Delete(_));
                    self.record_gateway_hostnames(gateway, deleted).await;
                    if let Err(err) = store::work_queue::enqueue_all(&self.pool).await {
                        tracing::warn!(error = %err, "cannot requeue after a Gateway change");
                    }
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    if let Err(err) = store::work_queue::enqueue_all(&self.pool).await {
                        tracing::warn!(error = %err, "cannot requeue after a Gateway change");
                    }
                }
                Some(Err(err)) => {
                    tracing::debug!(kind = "Gateway", error = %err, "watch interrupted; retrying");
                    metrics::counter!(crate::metrics::WATCH_RESTARTS, "kind" => "Gateway")
                        .increment(1);
                }
                Some(_) => {}
            }
        }
    }
}

impl Worker {
    /// Stores the hostnames `gateway` answers for, which no route on it may claim (see
    /// `service::deployments::reserved_hostnames`): its listeners' exact hostnames and its
    /// status's `Hostname` addresses. A wildcard listener hostname is left out (it would
    /// reserve every name under it); IP addresses are refused as hostnames anyway.
    async fn record_gateway_hostnames(&self, gateway: &Gateway, deleted: bool) {
        let (Some(namespace), Some(name)) = (&gateway.metadata.namespace, &gateway.metadata.name)
        else {
            return;
        };
        let key = format!("{namespace}/{name}");
        let result = if deleted {
            store::gateways::delete_gateway_hostnames(&self.pool, &key).await
        } else {
            let mut hostnames: Vec<String> = gateway
                .spec
                .listeners
                .iter()
                .filter_map(|l| l.hostname.clone())
                .chain(
                    gateway
                        .status
                        .iter()
                        .flat_map(|s| s.addresses.iter().flatten())
                        .filter(|a| a.r#type.as_deref() == Some("Hostname"))
                        .map(|a| a.value.clone()),
                )
                .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
                .filter(|h| !h.is_empty() && !h.starts_with("*."))
                .collect();
            hostnames.sort();
            hostnames.dedup();
            store::gateways::replace_gateway_hostnames(&self.pool, &key, &hostnames).await
        };
        if let Err(err) = result {
            tracing::warn!(gateway = %key, error = %err, "cannot record the Gateway's hostnames");
        }
    }

    /// Watches Events about pods (they carry no labels): each is mapped to its record through
    /// the pod's labels, so a BackOff or FailedScheduling reaches the status at once.
    async fn watch_pod_events(self: Arc<Self>, shutdown: CancellationToken) {
        let api = kube::Api::<Event>::all(self.cluster.client.clone());
        let config = watcher::Config::default().fields("involvedObject.kind=Pod");
        let stream = watcher::watcher(api, config);
        let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(stream));
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = stream.next() => event,
            };
            let object = match event {
                None => return,
                Some(Ok(watcher::Event::Apply(o))) => o,
                Some(_) => continue,
            };
            let involved = &object.involved_object;
            let (Some(namespace), Some(name)) = (&involved.namespace, &involved.name) else {
                continue;
            };
            let seen = self
                .seen
                .of::<Pod>()
                .and_then(|seen| seen.get(Some(namespace), name))
                .flatten();
            // Not in the pod cache (not ours, or not seen yet): read it only in a namespace
            // of ours, so other workloads' events across the cluster cost no request.
            let our_namespace = || {
                self.seen
                    .of::<Namespace>()
                    .and_then(|seen| seen.get(None, namespace))
                    .is_none_or(|ns| ns.is_some())
            };
            let pod = match seen {
                Some(pod) => pod,
                None if !our_namespace() => continue,
                None => match self.cluster.get::<Pod>(Some(namespace), name).await {
                    Ok(Some(pod)) => pod,
                    _ => continue,
                },
            };
            let labels = pod.metadata.labels.as_ref();
            if labels.and_then(|l| l.get(LABEL_INSTALLATION))
                != Some(&self.config.build.installation)
            {
                continue;
            }
            if let Some(id) = record_id(labels) {
                let _ = self.requeue.send(id);
            }
        }
    }
}

/// The objects observation needs, as read during one reconcile. The outer `None`: not read
/// this pass (the cluster does not serve the kind, or none is wanted); the inner: it does
/// not exist.
#[derive(Default)]
struct LiveObjects {
    deployment: Option<Option<K8sDeployment>>,
    service: Option<Option<Service>>,
    route: Option<Option<HttpRoute>>,
    canary_deployment: Option<Option<K8sDeployment>>,
    canary_service: Option<Option<Service>>,
}

/// The objects a record's status events are about (`None`: not there, nothing published).
struct Subjects {
    deployment: Option<ObjectReference>,
    route: Option<ObjectReference>,
}

/// The stable Deployment as this pass's writes returned it.
fn applied_deployment(applied: &Option<LiveObjects>) -> Option<&K8sDeployment> {
    applied.as_ref()?.deployment.as_ref()?.as_ref()
}

fn deployment_ref(deployment: Option<&K8sDeployment>) -> Option<ObjectReference> {
    kube_events::reference("apps/v1", "Deployment", &deployment?.metadata)
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

/// Whose work a change to a watched object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// A namespace serves every record of its project.
    Project,
    /// Every other object belongs to the record named by its id label.
    Record,
}

/// The record id an object is labelled with.
fn record_id(labels: Option<&std::collections::BTreeMap<String, String>>) -> Option<Uuid> {
    labels?.get(LABEL_DEPLOYMENT_ID)?.parse().ok()
}

/// Exponential backoff with jitter: 1 s, 2 s, 4 s … up to 5 minutes.
fn backoff(attempts: i32) -> Duration {
    let base = 2f64.powi(attempts.clamp(1, 9) - 1).min(300.0);
    let jitter = rand::random::<f64>() * 0.5 + 0.75;
    Duration::from_secs_f64(base * jitter)
}
