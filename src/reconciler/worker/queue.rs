//! The queue loop: claim records from Postgres under a lease, run each in its own task,
//! finish or retry it; the resync that requeues everything now and then; the queue's
//! vacuum; and giving leases back at shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use gateway_api::experimental::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::{Deployment as K8sDeployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use sqlx::postgres::{PgListener, PgNotification};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::watches::Owner;
use super::{Outcome, Worker, backoff};
use crate::reconciler::cluster::ClusterError;
use crate::reconciler::desired::{InferencePool, LeaderWorkerSet};
use crate::reconciler::inventory::{Inventory, InventoryConfig};
use crate::store;
use crate::store::work_queue::{Claim, NOTIFY_CHANNEL};

/// Claims between two vacuums of the queue table (see `store::work_queue::vacuum_queue`):
/// each claim leaves about three dead row versions behind.
const QUEUE_VACUUM_EVERY: usize = 2_000;

impl Worker {
    /// Runs until `shutdown` is cancelled.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), sqlx::Error> {
        tracing::info!(worker = %self.config.worker_id, cluster = %self.cluster.description, installation = %self.config.build.installation, "reconciler started");
        let Some(mut listener) = self.listen(&shutdown).await else {
            return Ok(());
        };
        self.spawn_watches_and_timers(&shutdown);

        // Each claimed record runs in its own task holding one of `concurrency` slots, and
        // new work is claimed as soon as a slot frees: a slow or failing record never holds
        // up the others, and a panic fails only its own attempt.
        let slots = Arc::new(Semaphore::new(self.config.concurrency));
        let mut database_failures = 0;
        let mut claimed_since_vacuum = 0;
        let vacuuming = Arc::new(AtomicBool::new(false));
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
                    && !vacuuming.swap(true, Ordering::AcqRel)
                {
                    claimed_since_vacuum = 0;
                    self.vacuum_queue(vacuuming.clone());
                }
                self.dispatch(claims, first, &slots).await;
                continue;
            }
            drop(first);
            let sleep = self.until_next_due().await;
            tokio::select! {
                () = shutdown.cancelled() => break,
                notification = listener.try_recv() => {
                    absorb_notifications(&mut listener, notification).await;
                }
                () = tokio::time::sleep(sleep.max(Duration::from_millis(50))) => {}
            }
        }
        self.drain(&slots).await;
        Ok(())
    }

    /// Listens for the queue's notifications, retrying until it can; `None` when `shutdown`
    /// comes first.
    async fn listen(&self, shutdown: &CancellationToken) -> Option<PgListener> {
        let mut attempts = 0;
        loop {
            let connected = async {
                let mut listener = PgListener::connect_with(&self.pool).await?;
                listener.listen(NOTIFY_CHANNEL).await?;
                Ok::<_, sqlx::Error>(listener)
            };
            match connected.await {
                Ok(listener) => return Some(listener),
                Err(err) => {
                    attempts += 1;
                    let wait = backoff(attempts).min(Duration::from_secs(30));
                    tracing::error!(error = %err, retry_in = ?wait, "cannot listen for work; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => return None,
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// Starts what runs beside the queue loop until `shutdown`: the watches that requeue
    /// records, the resync, the requeue batcher, the cluster probe and the GPU inventory.
    fn spawn_watches_and_timers(self: &Arc<Self>, shutdown: &CancellationToken) {
        if let Some(service) = self.config.activator_service.clone() {
            tokio::spawn(self.clone().follow_activator(service, shutdown.clone()));
        }
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
        // The Service's endpoints: Ready waits for them to list a ready pod.
        tokio::spawn(
            self.clone()
                .watch::<EndpointSlice>(Owner::Record, shutdown.clone()),
        );
        tokio::spawn(
            self.clone()
                .watch::<HttpRoute>(Owner::Record, shutdown.clone()),
        );
        tokio::spawn(
            self.clone()
                .watch::<InferencePool>(Owner::Record, shutdown.clone()),
        );
        // Models that span nodes: a group's readiness is the set's status.
        tokio::spawn(
            self.clone()
                .watch::<LeaderWorkerSet>(Owner::Record, shutdown.clone()),
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
        tokio::spawn(self.clone().probe_key_check(shutdown.clone()));
        let inventory = Inventory::new(
            self.pool.clone(),
            self.cluster.client.clone(),
            InventoryConfig {
                worker_id: self.config.worker_id.clone(),
                installation: self.config.build.installation.clone(),
                default_gpu_resource: self.config.build.engines.gpu_resource_name.clone(),
                product_label: self.config.build.gpu_product_label.clone(),
            },
        );
        tokio::spawn(inventory.run(shutdown.clone()));
    }

    /// Vacuums the queue table in the background; `vacuuming` is cleared when done.
    fn vacuum_queue(&self, vacuuming: Arc<AtomicBool>) {
        let pool = self.pool.clone();
        tokio::spawn(async move {
            if let Err(err) = store::work_queue::vacuum_queue(&pool).await {
                tracing::warn!(error = %err, "cannot vacuum the work queue");
            }
            vacuuming.store(false, Ordering::Release);
        });
    }

    /// Starts one task per claim, each holding a slot: `first` for the first claim, the
    /// others as slots free.
    async fn dispatch(
        self: &Arc<Self>,
        claims: Vec<Claim>,
        first: OwnedSemaphorePermit,
        slots: &Arc<Semaphore>,
    ) {
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
                Box::pin(worker.process(claim)).await;
                drop(permit);
            });
        }
    }

    /// With nothing claimable: reports the queue's depth and age, and says how long to wait
    /// for the next record due (at most 30 s; 1 s when the queue cannot be read).
    async fn until_next_due(&self) -> Duration {
        match store::work_queue::queue_state(&self.pool).await {
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
        }
    }

    /// At shutdown: lets the reconciles in flight finish (within the lease they hold), then
    /// gives back whatever this worker still holds, so another worker need not wait for
    /// leases to expire.
    async fn drain(&self, slots: &Semaphore) {
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
        tracing::Instrument::instrument(Box::pin(self.process_claim(claim)), span).await
    }

    /// [`Worker::reconcile`]'s future on the heap, made in a frame of its own.
    #[inline(never)]
    fn boxed_reconcile(
        &self,
        id: uuid::Uuid,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Outcome, ClusterError>> + Send + '_>,
    > {
        Box::pin(self.reconcile(id))
    }

    async fn process_claim(self: Arc<Self>, claim: Claim) {
        let started = Instant::now();
        // A reconcile must end well inside its lease, or another worker could take the record.
        let budget = self.config.lease.mul_f64(0.8);
        // Boxed where it is made: the wrappers below then move a pointer, not the whole
        // pass's future (which a debug build's thread stack would hold several copies of).
        let attempt = std::panic::AssertUnwindSafe(self.boxed_reconcile(claim.deployment_id));
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
                self.note_forbidden(claim.deployment_id, &err).await;
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
}

/// After a notification (or the listener's failure, then after a pause to reconnect): one
/// claim answers every notification that has arrived. A burst of enqueues (one per create,
/// thousands during a large rollout, queued while every slot was busy) must not cost a
/// claim and a queue read each, long after the work itself is done.
async fn absorb_notifications(
    listener: &mut PgListener,
    notification: Result<Option<PgNotification>, sqlx::Error>,
) {
    if let Err(err) = notification {
        tracing::warn!(error = %err, "notification listener failed; reconnecting");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let until = tokio::time::Instant::now() + Duration::from_millis(20);
    while tokio::time::Instant::now() < until {
        while listener.next_buffered().is_some() {}
        match tokio::time::timeout(Duration::from_millis(1), listener.try_recv()).await {
            Ok(Ok(Some(_))) => {}
            _ => break,
        }
    }
}
