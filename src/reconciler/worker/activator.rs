//! The activator's addresses, followed in a cluster: the API pods that run it sit behind a
//! Service of the Helm chart (`MODELPLANE_ACTIVATOR_SERVICE`), whose EndpointSlices the
//! EndpointSlice controller keeps. Every few seconds the worker reads them; when the ready
//! addresses change (API pods rolled, scaled), every record is reconciled, so the activator
//! EndpointSlices of those that scale to zero, and the key check's of projects with keys,
//! name the pods that run now. Knative's
//! activator Service is followed the same way by the revisions' public endpoints.
//!
//! And the other way: while a deployment wakes from zero, the first ready endpoint of its
//! own Service (which its EndpointSlices, made by the EndpointSlice controller with the
//! Service's labels, show to the worker's watch) is announced to the activators at once, so
//! the requests they hold go on without waiting for the pass that writes the status.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio_util::sync::CancellationToken;

use super::{Worker, record_id};
use crate::reconciler::desired::{ActivatorAddress, DesiredObjects};
use crate::store;

/// A Service whose ready endpoints run the activator, and the activator's port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivatorService {
    pub namespace: String,
    pub name: String,
    pub port: u16,
}

/// The label the EndpointSlice controller puts on a Service's slices.
const SERVICE_NAME: &str = "kubernetes.io/service-name";

/// How often the activator Service's endpoints are read.
const EVERY: Duration = Duration::from_secs(5);

/// The ready addresses the slices name, sorted, without repeats.
fn ready_addresses(slices: &[EndpointSlice]) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| e.addresses.iter())
        .filter_map(|a| a.parse().ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

impl Worker {
    /// Notes whether the record `desired` describes is starting from zero (its route on the
    /// activator, a replica wanted, none available): while it is, its Service's first ready
    /// endpoint is announced.
    pub(super) fn note_waking(&self, desired: &DesiredObjects, starting: bool) {
        let Some(id) = record_id(desired.deployment.metadata.labels.as_ref()) else {
            return;
        };
        let mut waking = self.waking.lock().expect("not poisoned");
        match (starting, desired.service.metadata.name.clone()) {
            (true, Some(service)) => {
                waking.insert(id, service);
            }
            _ => {
                waking.remove(&id);
            }
        }
    }

    /// On a change of an EndpointSlice: when it is of the Service of a record being woken and
    /// has a ready endpoint, tells the activators (once).
    pub(super) fn announce_if_serving(self: &Arc<Self>, slice: &EndpointSlice) {
        let labels = slice.metadata.labels.as_ref();
        let Some(id) = record_id(labels) else { return };
        let service = labels.and_then(|l| l.get(SERVICE_NAME));
        {
            let mut waking = self.waking.lock().expect("not poisoned");
            if service.is_none()
                || waking.get(&id) != service
                || ready_addresses(std::slice::from_ref(slice)).is_empty()
            {
                return;
            }
            waking.remove(&id);
        }
        let worker = self.clone();
        tokio::spawn(async move {
            match store::autoscaling::announce_serving(&worker.pool, id).await {
                Ok(()) => {
                    tracing::debug!(deployment_id = %id, "announced a woken deployment's first ready endpoint")
                }
                // The activators see it in the status the next pass writes.
                Err(err) => tracing::warn!(error = %err, "cannot announce a ready endpoint"),
            }
        });
    }

    /// The activator's addresses as of now (`None`: no activator).
    pub(super) fn activator_address(&self) -> Option<ActivatorAddress> {
        self.activator
            .read()
            .expect("not poisoned")
            .clone()
            .or_else(|| self.config.build.activator.clone())
    }

    /// Follows the activator Service's endpoints until `shutdown`.
    pub(super) async fn follow_activator(
        self: Arc<Self>,
        service: ActivatorService,
        shutdown: CancellationToken,
    ) {
        let labels = format!("{SERVICE_NAME}={}", service.name);
        loop {
            match self
                .cluster
                .list::<EndpointSlice>(Some(&service.namespace), &labels)
                .await
            {
                Ok(slices) => {
                    let now = Some(ActivatorAddress {
                        addresses: ready_addresses(&slices),
                        port: service.port,
                    });
                    let changed = {
                        let mut current = self.activator.write().expect("not poisoned");
                        let changed = *current != now;
                        *current = now.clone();
                        changed
                    };
                    if changed {
                        tracing::info!(addresses = ?now.map(|a| a.addresses), "the activator's addresses changed");
                        // Every record: those at zero name the activator, those with
                        // keys the key check, both at these addresses.
                        if let Err(err) = store::work_queue::enqueue_all(&self.pool).await {
                            tracing::warn!(error = %err, "cannot requeue after the activator's addresses changed");
                        }
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, service = %service.name, "cannot read the activator Service's endpoints")
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(EVERY) => {}
            }
        }
    }
}
