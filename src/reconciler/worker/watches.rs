//! The watches that requeue records when the cluster changes: one per kind of managed
//! object (which also keep [`SeenKinds`](crate::reconciler::seen::SeenKinds) current),
//! Gateways (whose hostnames are recorded too), and Events about pods; and the batcher
//! that writes their requeues to the queue.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use gateway_api::gateways::Gateway;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use super::{Worker, backoff, record_id};
use crate::reconciler::cluster::{Object, kind_of};
use crate::reconciler::desired::{LABEL_INSTALLATION, LABEL_MANAGED_BY, LABEL_PROJECT};
use crate::store;

/// What records read of a Gateway: its listeners' names, protocols, ports and hostnames and
/// its addresses (the external URLs, `status::endpoints`, and the reserved hostnames), and
/// its `Accepted` condition (why a route is not served yet, `status::routing`). A change to
/// anything else of it (the listeners' `attachedRoutes` and conditions) changes no record.
#[derive(Debug, PartialEq)]
struct GatewayView {
    listeners: Vec<(String, String, i32, Option<String>)>,
    addresses: Vec<(Option<String>, String)>,
    accepted: Option<(String, String, String)>,
}

impl GatewayView {
    fn of(gateway: &Gateway) -> Self {
        let status = gateway.status.as_ref();
        Self {
            listeners: gateway
                .spec
                .listeners
                .iter()
                .map(|l| {
                    (
                        l.name.clone(),
                        l.protocol.clone(),
                        l.port,
                        l.hostname.clone(),
                    )
                })
                .collect(),
            addresses: status
                .and_then(|s| s.addresses.as_ref())
                .into_iter()
                .flatten()
                .map(|a| (a.r#type.clone(), a.value.clone()))
                .collect(),
            accepted: status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "Accepted")
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())),
        }
    }
}

/// Whose work a change to a watched object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owner {
    /// A namespace serves every record of its project.
    Project,
    /// Every other object belongs to the record named by its id label.
    Record,
}

impl Worker {
    /// Watches one kind of managed object and requeues the records that own each change.
    pub(super) async fn watch<K: Object>(
        self: Arc<Self>,
        owner: Owner,
        shutdown: CancellationToken,
    ) {
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
            // A woken deployment's first ready endpoint is news for the activators too.
            if let Some(slice) = (&object as &dyn std::any::Any).downcast_ref::<EndpointSlice>() {
                self.announce_if_serving(slice);
            }
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

    /// Writes the records the watches asked to requeue: everything waiting at once in one
    /// statement, so a burst of cluster events costs a few round trips, not one each.
    pub(super) async fn requeue_loop(self: Arc<Self>, shutdown: CancellationToken) {
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
    ///
    /// Only a change to what records read of a Gateway ([`GatewayView`]) counts. Its status
    /// also counts the routes attached to each listener (`attachedRoutes`), which changes
    /// with every route made or removed: requeueing every record on each of those would
    /// cost every record a pass per route, quadratic in the number of records.
    pub(super) async fn watch_gateways(self: Arc<Self>, shutdown: CancellationToken) {
        let api = kube::Api::<Gateway>::all(self.cluster.client.clone());
        let stream = watcher::watcher(api, watcher::Config::default());
        let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(stream));
        let mut views: HashMap<(Option<String>, Option<String>), GatewayView> = HashMap::new();
        let key = |g: &Gateway| (g.metadata.namespace.clone(), g.metadata.name.clone());
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = stream.next() => event,
            };
            match event {
                None => return,
                Some(Ok(watcher::Event::InitApply(gateway))) => {
                    views.insert(key(&gateway), GatewayView::of(&gateway));
                    self.record_gateway_hostnames(&gateway, false).await;
                }
                Some(Ok(
                    ref event @ (watcher::Event::Apply(ref gateway)
                    | watcher::Event::Delete(ref gateway)),
                )) => {
                    let deleted = matches!(event, watcher::Event::Delete(_));
                    if deleted {
                        views.remove(&key(gateway));
                    } else {
                        let view = GatewayView::of(gateway);
                        if views.get(&key(gateway)) == Some(&view) {
                            continue;
                        }
                        views.insert(key(gateway), view);
                    }
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
    pub(super) async fn watch_pod_events(self: Arc<Self>, shutdown: CancellationToken) {
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn gateway(attached: i64, address: &str, accepted: &str) -> Gateway {
        let condition = |type_: &str, status: &str| {
            json!({"type": type_, "status": status, "reason": type_, "message": "",
                   "lastTransitionTime": "2026-11-28T00:00:00Z", "observedGeneration": 1})
        };
        let value: Value = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "inference", "namespace": "gateway-system"},
            "spec": {"gatewayClassName": "example",
                     "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]},
            "status": {
                "addresses": [{"type": "IPAddress", "value": address}],
                "conditions": [condition("Accepted", accepted), condition("Programmed", "True")],
                "listeners": [{"name": "http", "attachedRoutes": attached,
                               "supportedKinds": [{"kind": "HTTPRoute"}],
                               "conditions": [condition("Programmed", "True")]}]
            }
        });
        serde_json::from_value(value).unwrap()
    }

    /// Gateway API: `ListenerStatus.attachedRoutes` counts the routes attached to a
    /// listener (gateway.networking.k8s.io/v1 Gateway CRD), so it changes with every route.
    #[test]
    fn a_route_attached_to_a_gateway_changes_no_records_view_of_it() {
        let before = GatewayView::of(&gateway(1, "10.0.0.1", "True"));
        assert_eq!(GatewayView::of(&gateway(2, "10.0.0.1", "True")), before);
        assert_ne!(GatewayView::of(&gateway(2, "10.0.0.2", "True")), before);
        assert_ne!(GatewayView::of(&gateway(1, "10.0.0.1", "False")), before);
    }
}
