//! The worker: claims records from the Postgres queue, reconciles each into Kubernetes
//! objects, reports status, and watches the cluster so changes there requeue the owning
//! record.
//!
//! The files, in the order of a record's life:
//! - `queue.rs`: the loop that claims records under a lease, runs each in its own task
//!   (bounded, a panic fails only its attempt), finishes or retries it; the resync safety
//!   net; the queue's vacuum; giving leases back at shutdown.
//! - `reconcile.rs`: one pass over one record, a pipeline of named steps: load → desired →
//!   apply → observe → clean up → status → report.
//! - `apply.rs`: server-side apply of the desired objects, and reading them back to find
//!   what drifted.
//! - `observe.rs`: what the cluster reports about the record's objects, both tracks.
//! - `canary.rs`: the canary track: its routed weight, promotion (the stable track settled
//!   on the canary's spec), and removal of its objects.
//! - `pool.rs`: removal of InferencePool mode's objects once the route no longer names them.
//! - `report.rs`: the status write, the timeline, Kubernetes Events, GPU usage.
//! - `deletion.rs`: deleting a record's objects, orphans, and deleted projects' namespaces.
//! - `watches.rs`: the watches that requeue records when the cluster changes (managed
//!   objects, Gateways and their hostnames, pod Events).
//! - `reachability.rs`: the cluster probe and the `ClusterReachable=False` condition.
//! - `permissions.rs`: writes the API server forbids (403), as the `Authorized=False`
//!   condition.

mod activator;
mod apply;
mod canary;
mod deletion;
mod gateway_wait;
mod key_check;
mod observe;
mod permissions;
mod pool;
mod queue;
mod reachability;
mod reconcile;
mod report;
mod watches;

use std::sync::Arc;
use std::time::Duration;

use gateway_api::experimental::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use sqlx::PgPool;
use uuid::Uuid;

pub use self::activator::ActivatorService;
use super::cluster::Cluster;
use super::desired::{ActivatorAddress, BuildConfig, InferencePool, LABEL_DEPLOYMENT_ID};
use super::health::WorkerHealth;
use super::kube_events::{self, Publisher};
use super::seen::SeenKinds;
use super::status::Budgets;

/// The actor of the worker's timeline entries.
const WORKER_ACTOR: &str = "worker";

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
    /// How long clean-up waits for a Gateway that has never reported on a route (see
    /// `gateway_wait.rs`).
    pub gateway_silence: Duration,
    /// In a cluster: the Service whose endpoints run the activator, followed instead of the
    /// fixed addresses of `build.activator`.
    pub activator_service: Option<ActivatorService>,
}

/// Where a record stands after a reconcile, and when to look again.
enum Outcome {
    Done,
    Again(Duration),
}

/// The reconciler's worker (see the module documentation for its parts).
pub struct Worker {
    pool: PgPool,
    cluster: Cluster,
    config: WorkerConfig,
    health: Arc<WorkerHealth>,
    /// What the watches have seen of the kinds read during reconciles (and of the pods the
    /// serving-metrics collector reads).
    seen: Arc<SeenKinds>,
    /// Records to requeue after cluster changes, written to the queue in batches.
    requeue: tokio::sync::mpsc::UnboundedSender<Uuid>,
    requeued: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Uuid>>>,
    /// Kubernetes Events on the managed objects, telling what the timeline tells.
    events: Publisher,
    /// The activator's addresses as last read from its Service (`activator.rs`).
    activator: std::sync::RwLock<Option<ActivatorAddress>>,
    /// Records being woken from zero, and the Service whose first ready endpoint the
    /// activators are told of (`activator.rs`).
    waking: std::sync::Mutex<std::collections::HashMap<Uuid, String>>,
    /// Whether the key check answers, as last probed (`key_check.rs`).
    key_check: std::sync::RwLock<Option<Result<String, String>>>,
}

impl Worker {
    pub fn new(pool: PgPool, cluster: Cluster, config: WorkerConfig) -> Arc<Self> {
        let (requeue, requeued) = tokio::sync::mpsc::unbounded_channel();
        let events = Publisher::new(cluster.client.clone(), &config.worker_id);
        Arc::new(Self {
            events,
            requeue,
            requeued: std::sync::Mutex::new(Some(requeued)),
            activator: std::sync::RwLock::default(),
            waking: std::sync::Mutex::default(),
            key_check: std::sync::RwLock::default(),
            pool,
            cluster,
            config,
            health: Arc::default(),
            seen: Arc::new(
                SeenKinds::default()
                    .with::<Namespace>()
                    .with::<K8sDeployment>()
                    .with::<Service>()
                    .with::<EndpointSlice>()
                    .with::<Pod>()
                    .with::<HttpRoute>()
                    .with::<InferencePool>()
                    .with::<PodDisruptionBudget>(),
            ),
        })
    }

    /// What the worker's watches have seen (its managed pods among them), kept current
    /// while it runs.
    pub fn seen(&self) -> Arc<SeenKinds> {
        self.seen.clone()
    }

    /// The worker's liveness and recent cluster results, for readiness.
    pub fn health(&self) -> Arc<WorkerHealth> {
        self.health.clone()
    }
}

fn deployment_ref(deployment: Option<&K8sDeployment>) -> Option<ObjectReference> {
    let meta = &deployment?.metadata;
    // A model that spans nodes: the view of its LeaderWorkerSet (`as_deployment`).
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crate::reconciler::desired::VIEW_OF_GROUP))
    {
        return kube_events::reference("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", meta);
    }
    kube_events::reference("apps/v1", "Deployment", meta)
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
