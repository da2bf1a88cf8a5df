//! The activator: requests to a deployment at zero replicas wait here while one starts.
//!
//! While a deployment with `autoscaling.minReplicas: 0` has no available replica, the worker
//! points its HTTPRoute at the activator (a selector-less Service whose EndpointSlice names
//! the API processes, as Knative's activator is reached). Each request that arrives:
//!
//! 1. is counted against the deployment's cap of held requests (429 past it);
//! 2. scales the deployment from zero to one at once, unless its count is no longer zero
//!    (a conditional write: of any number of requests in any number of processes, exactly
//!    one scales it, and the timeline says so once);
//! 3. waits, at most the spec's `activationTimeoutSeconds`, for the deployment's Service to
//!    have a ready endpoint: said at once by the worker that watches its EndpointSlices (a
//!    notification on `store::autoscaling::SERVING_CHANNEL`, which the change hub's
//!    connection also listens to; Knative's activator follows a revision's endpoints so),
//!    or, should that be missed, seen as a replica available in the status the worker
//!    writes (the change feed);
//! 4. is forwarded to the deployment's own Service, the answer streamed back.
//!
//! Once a replica is available the worker points the route back at the Service, so steady
//! traffic never passes through here. A client that goes away stops waiting (its request
//! is dropped with it, never forwarded).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::broadcast;
use tokio::time::Instant;
use uuid::Uuid;

use super::live::ChangeHub;
use crate::domain::{AutoscalingStatus, Phase, ScalingChange};
use crate::store;

/// Why a request is not forwarded.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// No deployment with that id scales to zero (or none exists).
    #[error("no deployment that scales to zero answers here")]
    NotFound,
    /// The deployment is Failed or being deleted: it will not start.
    #[error("deployment `{name}` is not serving: {why}")]
    NotServing { name: String, why: String },
    /// As many requests as allowed already wait for this deployment here.
    #[error(
        "deployment `{name}` is starting and {held} requests already wait for it; retry shortly"
    )]
    TooMany { name: String, held: usize },
    /// No replica became available within `activationTimeoutSeconds`.
    #[error("deployment `{name}` did not start a replica within {} s (spec.autoscaling.activationTimeoutSeconds)", .after.as_secs())]
    TimedOut { name: String, after: Duration },
    #[error("database error")]
    Database(#[from] sqlx::Error),
}

/// Where a request that waited goes: the deployment's own Service.
#[derive(Debug)]
pub struct Woken {
    pub name: String,
    pub namespace: String,
    pub port: i64,
    /// Counts the request as held until it is dropped (after its answer).
    pub held: Held,
}

/// One request counted against its deployment's cap; uncounted on drop.
#[derive(Debug)]
pub struct Held {
    activator: Arc<Activator>,
    id: Uuid,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.activator.count(self.id, -1);
    }
}

/// One per process: the held requests of every deployment.
pub struct Activator {
    pool: sqlx::PgPool,
    changes: Arc<ChangeHub>,
    max_held: usize,
    held: Mutex<HashMap<Uuid, usize>>,
}

/// How often a waiting request looks again even without a change (a missed one costs at
/// most this).
const RECHECK: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Activator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activator")
            .field("max_held", &self.max_held)
            .field("held", &self.held())
            .finish()
    }
}

impl Activator {
    pub fn new(pool: sqlx::PgPool, changes: Arc<ChangeHub>, max_held: usize) -> Arc<Self> {
        Arc::new(Self {
            pool,
            changes,
            max_held,
            held: Mutex::default(),
        })
    }

    /// Requests held now, over every deployment.
    pub fn held(&self) -> usize {
        self.held.lock().expect("not poisoned").values().sum()
    }

    fn count(&self, id: Uuid, by: isize) {
        let mut held = self.held.lock().expect("not poisoned");
        let n = held.entry(id).or_default();
        *n = n.saturating_add_signed(by);
        if *n == 0 {
            held.remove(&id);
        }
        metrics::gauge!(crate::metrics::ACTIVATOR_HELD).set(held.values().sum::<usize>() as f64);
    }

    /// Counts the request against the cap, or refuses it.
    fn take(self: &Arc<Self>, id: Uuid, name: &str) -> Result<Held, ActivationError> {
        let mut held = self.held.lock().expect("not poisoned");
        let n = held.entry(id).or_default();
        if *n >= self.max_held {
            return Err(ActivationError::TooMany {
                name: name.to_owned(),
                held: *n,
            });
        }
        *n += 1;
        metrics::gauge!(crate::metrics::ACTIVATOR_HELD).set(held.values().sum::<usize>() as f64);
        Ok(Held {
            activator: self.clone(),
            id,
        })
    }

    /// Holds a request for deployment `id` until a replica is available (scaling it up
    /// from zero if no one has), and says where to forward it.
    #[tracing::instrument(skip(self), fields(deployment = tracing::field::Empty))]
    pub async fn wake(self: &Arc<Self>, id: Uuid) -> Result<Woken, ActivationError> {
        let arrived = Instant::now();
        let Some(d) = store::autoscaling::activation(&self.pool, id).await? else {
            return Err(ActivationError::NotFound);
        };
        tracing::Span::current().record("deployment", d.name.as_str());
        let spec = &d.spec.0;
        let Some(autoscaling) = spec.autoscaling.as_ref().filter(|a| a.min_replicas == 0) else {
            return Err(ActivationError::NotFound);
        };
        let phase: Phase = d.phase.parse().unwrap_or(Phase::Pending);
        if d.deleting || phase == Phase::Failed {
            return Err(ActivationError::NotServing {
                name: d.name.clone(),
                why: if d.deleting {
                    "it is being deleted".into()
                } else {
                    "it has failed (see its status)".into()
                },
            });
        }
        let port = spec
            .serving(&d.name)
            .map(|s| i64::from(s.port))
            .map_err(|_| ActivationError::NotServing {
                name: d.name.clone(),
                why: "its spec is invalid".into(),
            })?;
        let held = self.take(id, &d.name)?;
        // Subscribed before anything is read: no status write can fall in between.
        let mut changes = self.changes.subscribe();
        let mut serving = self.changes.serving();
        if d.available == 0
            && autoscaling.live_replicas(d.stored.map(i64::from), spec.replicas) == 0
        {
            self.scale_from_zero(&d).await?;
        }
        let timeout = autoscaling
            .activation_timeout()
            .to_std()
            .unwrap_or(Duration::ZERO);
        let deadline = arrived + timeout;
        let mut available = d.available;
        while available == 0 {
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                return Err(ActivationError::TimedOut {
                    name: d.name.clone(),
                    after: timeout,
                });
            }
            let woken = tokio::time::timeout(wait.min(RECHECK), async {
                tokio::select! {
                    () = changed(&mut changes, id) => false,
                    () = announced(&mut serving, id) => true,
                }
            })
            .await;
            if woken == Ok(true) {
                break;
            }
            available = store::autoscaling::available(&self.pool, id).await?;
        }
        metrics::histogram!(crate::metrics::ACTIVATOR_WAIT).record(arrived.elapsed().as_secs_f64());
        Ok(Woken {
            name: d.name,
            namespace: d.namespace,
            port,
            held,
        })
    }
}

impl Activator {
    /// Scales `d` from zero to one replica, unless another request (in any process) did.
    async fn scale_from_zero(
        &self,
        d: &store::autoscaling::Activation,
    ) -> Result<(), ActivationError> {
        let now = Utc::now();
        let reason = "0 → 1: a request arrived while scaled to zero".to_owned();
        let state = AutoscalingStatus {
            replicas: 1,
            wanted: 1,
            limited_by: None,
            reason: reason.clone(),
            decided_at: now,
            last_scaled: Some(ScalingChange {
                at: now,
                from: 0,
                to: 1,
                reason,
            }),
        };
        if store::autoscaling::activate(&self.pool, d, &state).await? {
            tracing::info!(deployment = %d.name, project_id = %d.project_id, "activated: 0 → 1");
            metrics::counter!(crate::metrics::AUTOSCALER_DECISIONS, "direction" => "up")
                .increment(1);
        }
        Ok(())
    }
}

/// Returns once the change feed carries a change of deployment `id` (or may have dropped
/// one: a lagging receiver looks again at once).
async fn changed(changes: &mut tokio::sync::broadcast::Receiver<crate::domain::Change>, id: Uuid) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match changes.recv().await {
            Ok(change) if change.deployment_id == id => return,
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => return,
            Err(RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

/// Returns once a worker says deployment `id`'s Service has a ready endpoint.
async fn announced(serving: &mut broadcast::Receiver<Uuid>, id: Uuid) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match serving.recv().await {
            Ok(ready) if ready == id => return,
            // A missed word is covered by the status (the change feed, the recheck).
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}
