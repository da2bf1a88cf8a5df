//! Server-side apply of a record's desired objects (refusals noted for the status, not
//! always fatal), and reading them back to find what drifted.

use gateway_api::experimental::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::Worker;
use crate::reconciler::cluster::{ClusterError, Object, contains, kind_of};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::reconciler::desired::{
    DesiredObjects, PodMonitor, PoolObjects, activator_name, as_deployment, as_json,
};

/// Why a model that spans nodes got nothing applied.
pub(super) const GROUP_UNSERVED: &str = "the cluster does not serve LeaderWorkerSets (leaderworkerset.x-k8s.io/v1 CRD missing), which run a replica that spans nodes: install LeaderWorkerSet (v0.10) and its controller; nothing of the deployment was applied";
use crate::reconciler::status::{Observed, has_available_replica};

/// The objects observation needs, as read during one reconcile. The outer `None`: not read
/// this pass (the cluster does not serve the kind, or none is wanted); the inner: it does
/// not exist.
#[derive(Default)]
pub(super) struct LiveObjects {
    pub(super) deployment: Option<Option<K8sDeployment>>,
    pub(super) service: Option<Option<Service>>,
    pub(super) route: Option<Option<HttpRoute>>,
    pub(super) canary_deployment: Option<Option<K8sDeployment>>,
    pub(super) canary_service: Option<Option<Service>>,
    /// A disaggregated deployment's prefill role (`deployment` is its decode role); boxed,
    /// as this is held across the pass's steps.
    pub(super) prefill_deployment: Option<Option<Box<K8sDeployment>>>,
}

impl Worker {
    /// Applies every desired object; returns them as the API server stored them, so the
    /// status of this pass need not read them again.
    pub(super) async fn apply_all(
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
        if let Some(access) = &desired.sidecar_access {
            // Before the decode pods that name its ServiceAccount.
            Box::pin(self.apply_required(&access.service_account, observed)).await?;
            Box::pin(self.apply_required(&access.role, observed)).await?;
            Box::pin(self.apply_required(&access.role_binding, observed)).await?;
        }
        let deployment = match &desired.group {
            // First of the record's objects: a cluster without LeaderWorkerSets gets none.
            Some(group) => match Box::pin(self.apply_required(&**group, observed)).await {
                Ok(applied) => as_deployment(&applied),
                Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {
                    observed.unserved = Some(GROUP_UNSERVED.into());
                    return Ok(LiveObjects::default());
                }
                Err(err) => return Err(err),
            },
            None => self.apply_required(&desired.deployment, observed).await?,
        };
        let prefill_deployment = match &desired.prefill {
            Some(prefill) => Some(Some(Box::new(
                Box::pin(self.apply_required(&prefill.deployment, observed)).await?,
            ))),
            None => None,
        };
        let service = self.apply_required(&desired.service, observed).await?;
        if let Some(monitor) = &desired.pod_monitor {
            self.apply_pod_monitor(monitor, &deployment, desired.group.is_some())
                .await?;
        }
        self.apply_disruption_budget(desired, observed).await?;
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
        let mut route_wanted = match &desired.pool {
            Some(pool) => Box::pin(self.apply_pool(desired, pool, observed)).await?,
            None => desired.http_route.as_ref(),
        };
        // A deployment that scales to zero is reached through the activator while no
        // replica is available (at zero, or starting): requests wait instead of failing.
        // Boxed: each applied kind's future is inlined into this one's, and a debug
        // build's poll of the whole reconcile must fit a thread's stack.
        Box::pin(self.apply_key_check(desired)).await?;
        if Box::pin(self.apply_activator(desired, &deployment)).await?
            && let Some(activator) = &desired.activator
            && route_wanted.is_some()
        {
            route_wanted = Some(&activator.route);
            observed.activating = true;
        }
        let mut route = None;
        if let Some(desired_route) = route_wanted {
            match self.apply_unless_refused(desired_route).await {
                Ok(Ok(applied)) => route = Some(Some(applied)),
                // The rest is applied and may serve in the cluster; status says what failed.
                Ok(Err(refused)) => {
                    observed.route_rejected = Some(explain_refusal(desired_route, refused));
                }
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
            prefill_deployment,
        })
    }

    /// Applies the activator's Service and EndpointSlice when the record scales to zero
    /// (the slice owned by the Service, so the garbage collector removes it with it), or
    /// removes a Service left from when it did. True when requests should go to the
    /// activator: it is wanted and `deployment` has no available replica, or is going to zero.
    async fn apply_activator(
        &self,
        desired: &DesiredObjects,
        deployment: &K8sDeployment,
    ) -> Result<bool, ClusterError> {
        let Some(activator) = &desired.activator else {
            let meta = &desired.deployment.metadata;
            let name = activator_name(meta.name.as_deref().unwrap_or_default());
            let seen = self
                .seen
                .of::<Service>()
                .and_then(|seen| seen.get(meta.namespace.as_deref(), &name));
            if !matches!(seen, Some(None)) {
                match self
                    .cluster
                    .delete::<Service>(meta.namespace.as_deref(), &name)
                    .await
                {
                    Ok(_) => {}
                    Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {}
                    Err(err) => return Err(err),
                }
            }
            return Ok(false);
        };
        self.apply_selectorless(&activator.service, &activator.slice)
            .await?;
        let to_zero = desired.deployment.spec.as_ref().and_then(|s| s.replicas) == Some(0);
        let starting = !to_zero && !has_available_replica(Some(deployment));
        self.note_waking(desired, starting);
        Ok(to_zero || starting)
    }

    /// Applies the project's key check Service and its EndpointSlice (owned by it) when the
    /// record asks for keys; they are shared by the project's deployments and stay with the
    /// namespace.
    async fn apply_key_check(&self, desired: &DesiredObjects) -> Result<(), ClusterError> {
        let Some(key_check) = &desired.key_check else {
            return Ok(());
        };
        self.apply_selectorless(&key_check.service, &key_check.slice)
            .await
    }

    /// Applies a Service without a selector, then its EndpointSlice owned by it (so the
    /// garbage collector removes the slice with the Service).
    async fn apply_selectorless(
        &self,
        service: &Service,
        slice: &EndpointSlice,
    ) -> Result<(), ClusterError> {
        let service = self.cluster.apply(service).await?;
        let mut slice = slice.clone();
        slice.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: service.metadata.name.clone().unwrap_or_default(),
            uid: service.metadata.uid.clone().unwrap_or_default(),
            ..OwnerReference::default()
        }]);
        self.cluster.apply(&slice).await?;
        Ok(())
    }

    /// Applies the record's PodDisruptionBudget, or removes one it no longer wants.
    async fn apply_disruption_budget(
        &self,
        desired: &DesiredObjects,
        observed: &mut Observed,
    ) -> Result<(), ClusterError> {
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
        Ok(())
    }

    /// Applies the PodMonitor, owned by the model-server Deployment (or LeaderWorkerSet) so that the garbage
    /// collector deletes it with it (no list or delete of PodMonitors needed). A cluster
    /// without the Prometheus Operator's CRD (404) gets none: the figures then come from
    /// whatever else scrapes the pods. Neither that nor a refusal decides the phase.
    async fn apply_pod_monitor(
        &self,
        monitor: &PodMonitor,
        owner: &K8sDeployment,
        group: bool,
    ) -> Result<(), ClusterError> {
        let mut monitor = monitor.clone();
        // A group's view carries the LeaderWorkerSet's name and uid.
        let (api_version, kind) = if group {
            ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
        } else {
            ("apps/v1", "Deployment")
        };
        monitor.metadata.owner_references = Some(vec![OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: owner.metadata.name.clone().unwrap_or_default(),
            uid: owner.metadata.uid.clone().unwrap_or_default(),
            ..OwnerReference::default()
        }]);
        match self.apply_unless_refused(&monitor).await {
            Ok(_) => Ok(()),
            Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {
                tracing::debug!("the cluster does not serve PodMonitors; none was made");
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    /// InferencePool mode: the pool first, so a cluster without its CRD gets nothing of the
    /// mode (no picker, no route to a pool that cannot exist); then its endpoint picker.
    /// Returns the route to apply: the fallback one, or none, when pools are not served.
    async fn apply_pool<'d>(
        &self,
        desired: &'d DesiredObjects,
        pool: &PoolObjects,
        observed: &mut Observed,
    ) -> Result<Option<&'d HttpRoute>, ClusterError> {
        let mut route_wanted = desired.http_route.as_ref();
        match self.cluster.apply(&pool.pool).await {
            Ok(applied) => {
                observed.pool = Some(applied);
                self.apply_required(&pool.config_map, observed).await?;
                self.apply_required(&pool.service_account, observed).await?;
                self.apply_required(&pool.role, observed).await?;
                self.apply_required(&pool.role_binding, observed).await?;
                self.apply_required(&pool.metrics_auth_role, observed)
                    .await?;
                self.apply_required(&pool.metrics_auth_binding, observed)
                    .await?;
                observed.picker = Some(self.apply_required(&pool.picker, observed).await?);
                self.apply_required(&pool.picker_service, observed).await?;
                // A live route to the Service moves to the pool only once the picker can
                // pick: the Gateway fails every request it sends to a pool whose picker
                // has no ready endpoint (a switch under load lost a quarter of them).
                if !has_available_replica(observed.picker.as_ref())
                    && self.live_route_goes_to_service(desired).await?
                {
                    observed.pool_switch_pending = true;
                    route_wanted = desired.service_route.as_ref();
                }
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
        Ok(route_wanted)
    }

    /// Whether the deployment's live HTTPRoute sends its requests to a Service (as the watch
    /// last saw it, or read now when it has not listed).
    async fn live_route_goes_to_service(
        &self,
        desired: &DesiredObjects,
    ) -> Result<bool, ClusterError> {
        let Some(wanted) = &desired.http_route else {
            return Ok(false);
        };
        let (namespace, name) = (
            wanted.metadata.namespace.as_deref(),
            wanted.metadata.name.as_deref().unwrap_or_default(),
        );
        let live = match self
            .seen
            .of::<HttpRoute>()
            .and_then(|seen| seen.get(namespace, name))
        {
            Some(known) => known,
            None => self.cluster.get::<HttpRoute>(namespace, name).await?,
        };
        Ok(live.is_some_and(|route| {
            route.spec.rules.iter().flatten().any(|rule| {
                rule.backend_refs
                    .iter()
                    .flatten()
                    .any(|b| b.kind.as_deref().unwrap_or("Service") == "Service")
            })
        }))
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

    /// Reads the desired objects back: which exist and still hold what modelplane manages
    /// (the kinds that drifted), and what was read, so observation can reuse it.
    pub(super) async fn live_objects(
        &self,
        desired: &DesiredObjects,
    ) -> Result<(Vec<String>, LiveObjects), ClusterError> {
        let mut drifted = Vec::new();
        self.read_back(&desired.namespace, &mut drifted).await?;
        let deployment = match &desired.group {
            Some(group) => Box::pin(self.read_back(&**group, &mut drifted))
                .await?
                .map(|live| live.map(|set| as_deployment(&set))),
            None => self.read_back(&desired.deployment, &mut drifted).await?,
        };
        let read = LiveObjects {
            deployment,
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
            prefill_deployment: match &desired.prefill {
                Some(prefill) => Box::pin(self.read_back(&prefill.deployment, &mut drifted))
                    .await?
                    .map(|d| d.map(Box::new)),
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
}

/// The API server's refusal of a route, with what to do when it is the key check's filter
/// it does not know: the Gateway API's standard channel has no `ExternalAuth`.
fn explain_refusal(route: &HttpRoute, message: String) -> String {
    let guarded = route.spec.rules.iter().flatten().any(|rule| {
        rule.filters
            .iter()
            .flatten()
            .any(|f| f.external_auth.is_some())
    });
    if guarded && message.contains("ExternalAuth") {
        format!(
            "{message}. Model keys (spec.access: keys) need the HTTPRoute of the Gateway API's experimental channel, whose filters include ExternalAuth: install its CRDs (v1.6.1 experimental) and a Gateway that supports HTTPRouteExternalAuthHTTP, or set spec.access: public"
        )
    } else {
        message
    }
}
