//! Observation: what the cluster reports about a record's objects (its Deployment,
//! Service, pods, route, Gateway, pool and picker; its canary track's), reusing what this
//! pass already read or wrote.

use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::{Pod, Service};

use super::Worker;
use super::apply::LiveObjects;
use crate::domain::{Deployment, canary_object_name};
use crate::reconciler::cluster::{ClusterError, Object};
use crate::reconciler::desired::{
    DesiredObjects, LABEL_DEPLOYMENT_ID, LABEL_NAME, LABEL_TRACK, MODEL_SERVER, TRACK_CANARY,
};
use crate::reconciler::status::Observed;

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
        Ok(())
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
