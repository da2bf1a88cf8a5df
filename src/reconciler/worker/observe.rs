//! Observation: what the cluster reports about a record's objects (its Deployment,
//! Service, pods, route, Gateway, pool and picker; its canary track's), reusing what this
//! pass already read or wrote.

use gateway_api::experimental::httproutes::HttpRoute;
use gateway_api::gateways::Gateway;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

use super::Worker;
use super::apply::LiveObjects;
use crate::domain::{Deployment, ServingRole, canary_object_name};
use crate::reconciler::cluster::{ClusterError, Object};
use crate::reconciler::desired::{
    DesiredObjects, ENDPOINT_PICKER, LABEL_DEPLOYMENT_ID, LABEL_NAME, LABEL_TRACK, LeaderWorkerSet,
    MODEL_SERVER, ROLE_LABEL, TRACK_CANARY, as_deployment,
};
use crate::reconciler::status::{LostNode, Observed};

/// The label an EndpointSlice names its Service with (discovery/v1 `LabelServiceName`).
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

impl Worker {
    /// Reads back what the cluster reports about the record's objects; returns the canary
    /// track's pods (the stable track's go into `observed`).
    pub(super) async fn observe(
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
        // The decode role's, for a disaggregated deployment.
        let deployment_name = desired.deployment.metadata.name.as_deref().unwrap_or(name);
        observed.deployment = match &desired.group {
            _ if observed.unserved.is_some() => None,
            Some(group) => match deployment {
                Some(view) => view,
                None => {
                    let name = group.metadata.name.as_deref().unwrap_or(name);
                    match self
                        .cluster
                        .get::<LeaderWorkerSet>(Some(namespace), name)
                        .await
                    {
                        Ok(set) => set.map(|s| as_deployment(&s)),
                        Err(err) if err.api_status().is_some_and(|s| s.code == 404) => None,
                        Err(err) => return Err(err),
                    }
                }
            },
            None => self.current(deployment, namespace, deployment_name).await?,
        };
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
        observed.serving_endpoints = self.serving_endpoints(record);
        let (servers, picker_pods): (Vec<Pod>, Vec<Pod>) = pods
            .into_iter()
            .partition(|pod| label(pod, LABEL_NAME) == MODEL_SERVER);
        observed.picker_pods = picker_pods
            .into_iter()
            .filter(|pod| label(pod, LABEL_NAME) == ENDPOINT_PICKER)
            .collect();
        let (canary_pods, stable_pods): (Vec<Pod>, Vec<Pod>) = servers
            .into_iter()
            .partition(|pod| label(pod, LABEL_TRACK) == TRACK_CANARY);
        observed.lost_nodes = self.lost_nodes(&stable_pods).await;
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

    /// How many ready endpoints the record's Service's EndpointSlices list (they carry the
    /// Service's labels, so the record's id): `None` until the slice watch has listed.
    fn serving_endpoints(&self, record: &Deployment) -> Option<usize> {
        let slices = self.seen.of::<EndpointSlice>()?.of_record(record.id)?;
        Some(
            slices
                .iter()
                .filter(|s| {
                    s.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(SERVICE_NAME_LABEL))
                        == Some(&record.name)
                })
                .flat_map(|s| s.endpoints.iter().flatten())
                // `ready` unset reads as ready (discovery/v1 EndpointConditions).
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
                .count(),
        )
    }

    /// A disaggregated deployment's prefill role: its Deployment, and its pods, which
    /// [`Worker::observe`] put with the decode role's in `observed`.
    pub(super) async fn observe_prefill(
        &self,
        desired: &DesiredObjects,
        namespace: &str,
        known: Option<&LiveObjects>,
        observed: &mut Observed,
        prefill: &mut Observed,
    ) -> Result<(), ClusterError> {
        let Some(wanted) = &desired.prefill else {
            return Ok(());
        };
        let name = wanted
            .deployment
            .metadata
            .name
            .as_deref()
            .unwrap_or_default();
        let known = known
            .and_then(|k| k.prefill_deployment.clone())
            .map(|d| d.map(|d| *d));
        prefill.deployment = self.current(known, namespace, name).await?;
        let role = |pod: &Pod| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ROLE_LABEL))
                .cloned()
        };
        let (prefill_pods, decode_pods): (Vec<Pod>, Vec<Pod>) = std::mem::take(&mut observed.pods)
            .into_iter()
            .partition(|pod| role(pod).as_deref() == Some(ServingRole::Prefill.as_str()));
        observed.lost_nodes = self.lost_nodes(&decode_pods).await;
        observed.pods = decode_pods;
        prefill.lost_nodes = self.lost_nodes(&prefill_pods).await;
        prefill.pods = prefill_pods;
        Ok(())
    }

    /// The canary track's Deployment and Service, into `canary_observed` (its pods come
    /// from [`Worker::observe`]; it shares the stable track's route).
    pub(super) async fn observe_canary(
        &self,
        record: &Deployment,
        namespace: &str,
        known: Option<&LiveObjects>,
        canary_observed: &mut Observed,
    ) -> Result<(), ClusterError> {
        let canary_name = canary_object_name(&record.name);
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
        canary_observed.lost_nodes = self.lost_nodes(&canary_observed.pods).await;
        Ok(())
    }

    /// The nodes of `pods` that stopped serving them. Only nodes holding a pod the node
    /// lifecycle controller marked not ready are read (listed by name: the worker may list
    /// and watch nodes, not get them), so a healthy record costs no request. A node that
    /// cannot be read is left out: this only says why pods are not ready, it must not fail
    /// the pass.
    async fn lost_nodes(&self, pods: &[Pod]) -> Vec<LostNode> {
        let mut names: Vec<&str> = pods
            .iter()
            .filter(|pod| marked_not_ready_by_node(pod))
            .filter_map(|pod| pod.spec.as_ref()?.node_name.as_deref())
            .collect();
        names.sort_unstable();
        names.dedup();
        let mut lost = Vec::new();
        for name in names {
            let params = ListParams::default().fields(&format!("metadata.name={name}"));
            match Api::<Node>::all(self.cluster.client.clone())
                .list(&params)
                .await
            {
                Ok(list) => lost.extend(list.items.first().and_then(lost_node)),
                Err(err) => {
                    tracing::debug!(node = name, error = %err, "cannot read the node of a not-ready pod");
                }
            }
        }
        lost
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
}

/// Whether the node lifecycle controller marked `pod` not ready: its Ready condition is
/// False while ContainersReady is True. The kubelet sets both together; `MarkPodsNotReady`
/// (kubernetes `pkg/controller/util/node/controller_utils.go`) sets only Ready, for every
/// pod of a node whose Ready condition is not True.
fn marked_not_ready_by_node(pod: &Pod) -> bool {
    let status_of = |ty: &str| {
        pod.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .find(|c| c.type_ == ty)
            .map(|c| c.status.as_str())
    };
    status_of("Ready") == Some("False") && status_of("ContainersReady") == Some("True")
}

/// `node` as a lost node: its Ready condition is not True (`Unknown` once the kubelet
/// stopped posting status for the grace period, `NodeStatusUnknown`), or it carries the
/// node lifecycle controller's `node.kubernetes.io/unreachable` or `not-ready` taint.
fn lost_node(node: &Node) -> Option<LostNode> {
    let ready = node
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "Ready");
    let ready_status = ready.map_or("Unknown", |c| c.status.as_str());
    let taint = node
        .spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .find(|t| {
            t.key == "node.kubernetes.io/unreachable" || t.key == "node.kubernetes.io/not-ready"
        });
    let since = if ready_status != "True" {
        ready.and_then(|c| c.last_transition_time.as_ref())
    } else {
        taint?.time_added.as_ref()
    };
    Some(LostNode {
        name: node.metadata.name.clone()?,
        ready: ready_status.to_owned(),
        since: since.and_then(|t| chrono::DateTime::from_timestamp(t.0.as_second(), 0)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ready: &str, taints: serde_json::Value) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpu-node-1"},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                "lastTransitionTime": "2026-11-22T11:00:00Z"}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_node_is_lost_when_not_ready_or_tainted_by_the_node_controller() {
        let lost = lost_node(&node("Unknown", serde_json::json!([]))).unwrap();
        assert_eq!(lost.ready, "Unknown");
        assert_eq!(
            lost.since.unwrap().to_rfc3339(),
            "2026-11-22T11:00:00+00:00"
        );
        assert!(lost_node(&node("True", serde_json::json!([]))).is_none());
        let tainted = node(
            "True",
            serde_json::json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                                "timeAdded": "2026-11-22T11:01:00Z"}]),
        );
        assert_eq!(
            lost_node(&tainted).unwrap().since.unwrap().to_rfc3339(),
            "2026-11-22T11:01:00+00:00"
        );
    }

    #[test]
    fn only_the_node_controller_marks_ready_false_with_ready_containers() {
        let pod = |ready: &str, containers: &str| -> Pod {
            serde_json::from_value(serde_json::json!({"status": {"conditions": [
                {"type": "Ready", "status": ready},
                {"type": "ContainersReady", "status": containers},
            ]}}))
            .unwrap()
        };
        assert!(marked_not_ready_by_node(&pod("False", "True")));
        assert!(!marked_not_ready_by_node(&pod("False", "False")));
        assert!(!marked_not_ready_by_node(&pod("True", "True")));
    }
}
