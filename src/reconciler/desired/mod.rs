//! The desired Kubernetes objects of a deployment record: a pure function, no I/O.
//!
//! Objects are typed (`k8s_openapi` and `gateway_api`), built from the record's
//! [`ServingSpec`], never from the spec's `Option`s. Names are deterministic; every object
//! carries the managed-by, installation and deployment-id labels, so the worker can find
//! everything it made by label.
//!
//! This module holds what every object shares (the labels, [`Target`], [`BuildConfig`],
//! the common metadata) and [`desired_objects`], which assembles them all. One file per
//! object kind builds the rest from those shared items; only the builder here calls into
//! them (besides `deployment` using `model_source`, and `inference_pool` using
//! `endpoint_picker`), so no two of them import each other:
//!
//! - `namespace`: the project's Namespace.
//! - `deployment`: the model server Deployment, its pod template and engine command line.
//! - `model_source`: where the pod gets the model (volumes, mounts, the S3 init container).
//! - `service`: the ClusterIP Service in front of a track's pods.
//! - `route`: the HTTPRoute (and [`GatewayRef`], the Gateway it attaches to).
//! - `budget`: the PodDisruptionBudget of a deployment with several replicas.
//! - `inference_pool`: InferencePool mode: the `InferencePool` type and object, and
//!   [`PoolObjects`], the mode's seven objects.
//! - `endpoint_picker`: the pool's endpoint picker: its Deployment, Service, ServiceAccount,
//!   Role, RoleBinding and scorer ConfigMap.
//! - `pod_monitor`: the PodMonitor that has a Prometheus scrape the pods (serving metrics
//!   read from Prometheus).

mod activator;
mod adapters;
mod budget;
mod deployment;
mod disaggregation;
mod endpoint_picker;
mod inference_pool;
mod key_check;
mod leader_worker_set;
mod model_source;
mod namespace;
mod pod_monitor;
mod route;
mod selectorless;
mod service;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use gateway_api::experimental::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::{Capabilities, Namespace, SecurityContext, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use self::activator::activator_objects;
pub use self::activator::{ACTIVATOR_PATH, ActivatorAddress, ActivatorObjects, activator_name};
pub use self::adapters::{
    ADAPTERS_GATE, ANNOTATION_ADAPTERS, ANNOTATION_POD_ADAPTERS, ANNOTATION_POD_S3_ADAPTERS,
    AdapterRef, FETCH_SCRIPT, PodAdapters, S3_ADAPTER_MOUNT, adapter_refs,
    parse_adapters_annotation, s3_fetch_list, server_restarts,
};
use self::budget::disruption_budget_object;
use self::deployment::deployment_object;
pub use self::deployment::engine_image;
pub use self::disaggregation::{
    PREFILLER_HEADER, ROLE_LABEL, ROUTING_SIDECAR, SidecarAccess, decode_engine_port,
    role_object_name, sidecar_account_name,
};
pub use self::endpoint_picker::{
    ENDPOINT_PICKER, EPP_GRPC_PORT, EPP_HEALTH_PORT, EPP_METRICS_PORT, picker_cluster_binding_name,
    picker_name,
};
pub use self::inference_pool::{
    EndpointPickerRef, InferencePool, InferencePoolSpec, InferencePoolStatus, PoolObjects,
    PoolParentRef, PoolParentStatus, PoolPort, PoolSelector, pool_objects,
};
pub use self::key_check::{KEY_CHECK_PATH, KeyCheckObjects};
use self::key_check::{guard, key_check_objects};
pub use self::leader_worker_set::{
    LeaderWorkerSet, LeaderWorkerSetSpec, LeaderWorkerSetStatus, VIEW_OF_GROUP, WORKER_INDEX_LABEL,
    as_deployment, group_flags,
};
use self::namespace::namespace_object;
use self::pod_monitor::pod_monitor_object;
pub use self::pod_monitor::{PodMetricsEndpoint, PodMonitor, PodMonitorSpec};
use self::route::route_object;
pub use self::route::{GatewayRef, gateway_of, route_path_prefix};
use self::service::service_object;
use crate::domain::{
    Access, Canary, CanaryHeader, Deployment, EngineDefaults, PoolFallback, RoutingMode,
    ServingRole, ServingSpec, canary_object_name, canonical_json,
};

pub const FIELD_MANAGER: &str = "modelplane";
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const LABEL_PART_OF: &str = "app.kubernetes.io/part-of";
pub const LABEL_DEPLOYMENT_ID: &str = "modelplane.io/deployment-id";
pub const LABEL_PROJECT: &str = "modelplane.io/project";
pub const LABEL_INSTALLATION: &str = "modelplane.io/installation";
pub const LABEL_ENGINE: &str = "modelplane.io/engine";
/// On a canary track's objects and pods (and in its selector); the stable track has none,
/// so its selector, fixed for the life of the record, never changes.
pub const LABEL_TRACK: &str = "modelplane.io/track";
pub const TRACK_CANARY: &str = "canary";
/// On a namespace that existed before its project: it survives the project.
pub const LABEL_NAMESPACE_ADOPTED: &str = "modelplane.io/namespace-adopted";
pub const ANNOTATION_CONFIG_HASH: &str = "modelplane.io/config-hash";
pub const ANNOTATION_GENERATION: &str = "modelplane.io/generation";
/// The value of `app.kubernetes.io/name` on every model server pod.
pub const MODEL_SERVER: &str = "model-server";

/// What the builder needs from server configuration.
#[derive(Debug, Clone)]
pub struct BuildConfig {
    pub installation: String,
    pub engines: EngineDefaults,
    /// `namespace/name[/section]` of the default Gateway; `None`: no routes.
    pub default_gateway: Option<String>,
    /// Node label that carries the GPU product, for `resources.gpu.product`.
    pub gpu_product_label: String,
    /// Image of the init container that copies `s3://` models into the pod.
    pub s3_downloader_image: String,
    /// Image of the endpoint picker of deployments in InferencePool mode.
    pub epp_image: String,
    /// Image of the endpoint picker of disaggregated deployments (llm-d's, whose plugins
    /// include the prefill/decode profiles).
    pub pd_epp_image: String,
    /// Image of the routing sidecar on decode pods.
    pub pd_sidecar_image: String,
    /// Serving metrics come from a Prometheus: a PodMonitor per deployment has it scrape
    /// the pods every this many seconds. `None`: no PodMonitor.
    pub pod_monitor_interval_secs: Option<u64>,
    /// The activator, for deployments that scale to zero (`None`: none runs).
    pub activator: Option<ActivatorAddress>,
    /// The key check, for deployments with `access: keys` (`None`: this worker does not
    /// know one; their routes still carry the filter, which then fails closed).
    pub key_check: Option<ActivatorAddress>,
    /// The routes call the key check with Envoy's gRPC ext_authz protocol, not HTTP.
    pub key_check_grpc: bool,
}

/// One record as the worker sees it: the stored record and its spec with defaults resolved.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    pub record: &'a Deployment,
    pub serving: &'a ServingSpec,
    /// The canary track: `record` is then [`canary_record`]'s, named `<name>-canary`.
    pub canary_track: bool,
    /// One role of a disaggregated deployment: `serving` is then that role's, and the
    /// Deployment is named `<name>-<role>` and selects the role's pods only.
    pub role: Option<ServingRole>,
}

/// A record's canary as a record of its own: named `<name>-canary`, with the canary's spec.
/// Its selector keeps the record's keys (and id) with its own instance name and the track
/// label, so neither track's Service or Deployment selects the other's pods.
pub fn canary_record(record: &Deployment, canary: &Canary) -> Deployment {
    Deployment {
        name: canary_object_name(&record.name),
        spec: canary.spec.clone(),
        canary: None,
        ..record.clone()
    }
}

/// The canary track to build beside the stable one, and how the route treats it.
#[derive(Debug, Clone)]
pub struct CanaryPlan<'a> {
    pub target: Target<'a>,
    /// Percent of the requests without the header that the route sends to the canary.
    pub routed_weight: i32,
    pub header: &'a CanaryHeader,
}

/// A disaggregated deployment's prefill role (the decode role is `deployment`).
#[derive(Debug, Clone, PartialEq)]
pub struct RoleObjects {
    pub deployment: K8sDeployment,
    pub config_hash: String,
}

/// The canary track's own objects; it shares the stable track's HTTPRoute.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryObjects {
    pub deployment: K8sDeployment,
    pub service: Service,
    pub config_hash: String,
}

/// Every object of one deployment record.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredObjects {
    pub namespace: Namespace,
    /// The model server Deployment; a disaggregated deployment's decode role.
    pub deployment: K8sDeployment,
    /// A disaggregated deployment's prefill role. Boxed as `activator` is.
    pub prefill: Option<Box<RoleObjects>>,
    /// A disaggregated deployment's routing sidecar's ServiceAccount, Role and RoleBinding.
    pub sidecar_access: Option<Box<SidecarAccess>>,
    /// A model that spans nodes: the LeaderWorkerSet applied in place of `deployment`
    /// (which it is built from, and which stays the pass's view of the pod template).
    pub group: Option<Box<LeaderWorkerSet>>,
    pub service: Service,
    /// `None` when no Gateway is configured for the deployment.
    pub http_route: Option<HttpRoute>,
    /// `None` for one replica or none: a budget would only block node drains.
    pub disruption_budget: Option<PodDisruptionBudget>,
    pub gateway: Option<GatewayRef>,
    /// The hash of everything that shapes a pod; the current generation's pods carry it.
    pub config_hash: String,
    /// The canary track, while the record has one and it is not yet being removed.
    pub canary: Option<CanaryObjects>,
    /// InferencePool mode's objects (routing through a Gateway only).
    pub pool: Option<PoolObjects>,
    /// In InferencePool mode with `whenUnavailable: Service`: the route to the Service, for a
    /// cluster that turns out not to serve InferencePools.
    pub fallback_route: Option<HttpRoute>,
    /// In InferencePool mode: the route to the Service, which a live route to the Service
    /// stays until the endpoint picker is ready (a switch of mode loses no request).
    pub service_route: Option<HttpRoute>,
    /// The PodMonitor, when serving metrics come from Prometheus. Applied with the
    /// Deployment as its owner, so the garbage collector removes it with the deployment.
    pub pod_monitor: Option<PodMonitor>,
    /// For `autoscaling.minReplicas: 0` behind a Gateway (without a canary): the activator's
    /// Service and EndpointSlice, and the route used while no replica is available.
    /// Boxed: three more objects inline would grow every future holding these past what a
    /// debug build's stack takes.
    pub activator: Option<Box<ActivatorObjects>>,
    /// For `access: keys` behind a Gateway: the project's key check Service and
    /// EndpointSlice (`key_check.rs`); the routes carry its filter. Boxed as `activator` is.
    pub key_check: Option<Box<KeyCheckObjects>>,
}

impl DesiredObjects {
    /// A digest of everything that will be applied; equal digests mean nothing to write.
    pub fn digest(&self) -> String {
        let mut all = vec![
            as_json(&self.namespace),
            match &self.group {
                Some(group) => as_json(group),
                None => as_json(&self.deployment),
            },
            as_json(&self.service),
            as_json(&self.http_route),
        ];
        if let Some(budget) = &self.disruption_budget {
            all.push(as_json(budget));
        }
        if let Some(prefill) = &self.prefill {
            all.push(as_json(&prefill.deployment));
        }
        if let Some(access) = &self.sidecar_access {
            all.extend([
                as_json(&access.service_account),
                as_json(&access.role),
                as_json(&access.role_binding),
            ]);
        }
        if let Some(monitor) = &self.pod_monitor {
            all.push(as_json(monitor));
        }
        if let Some(activator) = &self.activator {
            all.extend([
                as_json(&activator.service),
                as_json(&activator.slice),
                as_json(&activator.route),
            ]);
        }
        if let Some(key_check) = &self.key_check {
            all.extend([as_json(&key_check.service), as_json(&key_check.slice)]);
        }
        if let Some(canary) = &self.canary {
            all.push(as_json(&canary.deployment));
            all.push(as_json(&canary.service));
        }
        if let Some(pool) = &self.pool {
            all.extend([
                as_json(&pool.pool),
                as_json(&pool.config_map),
                as_json(&pool.service_account),
                as_json(&pool.role),
                as_json(&pool.role_binding),
                as_json(&pool.metrics_auth_role),
                as_json(&pool.metrics_auth_binding),
                as_json(&pool.picker),
                as_json(&pool.picker_service),
            ]);
        }
        hex::encode(Sha256::digest(
            canonical_json(&Value::Array(all)).as_bytes(),
        ))
    }
}

/// An object as JSON, for digests and for comparing with what the cluster holds.
pub fn as_json(object: &impl Serialize) -> Value {
    serde_json::to_value(object).expect("Kubernetes objects serialise")
}

/// Builds every object of `t`, to live in `namespace` (`adopted`: the namespace existed
/// before its project and must survive it).
pub fn desired_objects(
    t: &Target,
    namespace: &str,
    adopted: bool,
    config: &BuildConfig,
    canary: Option<&CanaryPlan>,
) -> DesiredObjects {
    let labels = object_labels(t, config);
    let gateway = gateway_of(t.serving, config);
    let (deployment, config_hash, prefill) = match t.serving.roles {
        None => {
            let (deployment, hash) = deployment_object(t, namespace, &labels, config);
            (deployment, hash, None)
        }
        Some(_) => {
            let (decode, hash) = role_deployment(t, ServingRole::Decode, namespace, config);
            let (deployment, config_hash) =
                role_deployment(t, ServingRole::Prefill, namespace, config);
            (
                decode,
                hash,
                Some(Box::new(RoleObjects {
                    deployment,
                    config_hash,
                })),
            )
        }
    };
    // InferencePool mode routes through a Gateway, and never with a canary (which the API
    // refuses; a stored one keeps the Service mode's weights).
    let routing = &t.serving.spec.routing;
    let pool_mode =
        routing.mode == Some(RoutingMode::InferencePool) && gateway.is_some() && canary.is_none();
    let fallback = routing
        .inference_pool
        .as_ref()
        .and_then(|p| p.when_unavailable)
        .unwrap_or_default();
    let group = (t.serving.nodes > 1 && t.serving.roles.is_none())
        .then(|| Box::new(leader_worker_set::leader_worker_set(&deployment, t.serving)));
    let mut desired = DesiredObjects {
        namespace: namespace_object(t, namespace, adopted, config),
        deployment,
        sidecar_access: prefill
            .is_some()
            .then(|| Box::new(disaggregation::sidecar_access(t, namespace, &labels))),
        prefill,
        group,
        service: service_object(t, namespace, &labels),
        http_route: gateway
            .as_ref()
            .map(|gw| route_object(t, namespace, &labels, gw, canary, pool_mode)),
        fallback_route: gateway
            .as_ref()
            .filter(|_| pool_mode && fallback == PoolFallback::Service)
            .map(|gw| route_object(t, namespace, &labels, gw, None, false)),
        service_route: gateway
            .as_ref()
            .filter(|_| pool_mode)
            .map(|gw| route_object(t, namespace, &labels, gw, None, false)),
        pool: pool_mode.then(|| {
            let image = match t.serving.roles {
                Some(_) => &config.pd_epp_image,
                None => &config.epp_image,
            };
            pool_objects(t, namespace, &labels, image)
        }),
        canary: canary.map(|plan| canary_objects(&plan.target, namespace, config)),
        // A group's pods are not interchangeable (evicting a worker recreates its group):
        // no budget until one is designed for groups.
        disruption_budget: (t.serving.replicas > 1 && t.serving.nodes <= 1)
            .then(|| disruption_budget_object(t, namespace, &labels)),
        pod_monitor: config
            .pod_monitor_interval_secs
            .map(|secs| pod_monitor_object(t, namespace, &labels, secs)),
        activator: gateway
            .as_ref()
            .zip(config.activator.as_ref())
            .filter(|_| canary.is_none() && scales_to_zero(t))
            .map(|(gw, address)| Box::new(activator_objects(t, namespace, &labels, gw, address))),
        key_check: None,
        gateway,
        config_hash,
    };
    if t.serving.roles.is_some()
        && let Some(selector) = desired
            .service
            .spec
            .as_mut()
            .and_then(|s| s.selector.as_mut())
    {
        // In-cluster callers (and the route while the picker starts) reach decode pods,
        // whose sidecar serves a request whole when no prefill pod is named.
        selector.insert(ROLE_LABEL.into(), ServingRole::Decode.as_str().into());
    }
    if desired.group.is_some() {
        // Only a group's leader serves the API (and metrics): workers run headless.
        let leader = || (WORKER_INDEX_LABEL.to_owned(), "0".to_owned());
        if let Some(selector) = desired
            .service
            .spec
            .as_mut()
            .and_then(|s| s.selector.as_mut())
        {
            selector.extend([leader()]);
        }
        if let Some(pool) = desired.pool.as_mut() {
            pool.pool.spec.selector.match_labels.extend([leader()]);
        }
        if let Some(monitor) = desired.pod_monitor.as_mut() {
            monitor
                .spec
                .selector
                .match_labels
                .get_or_insert_with(BTreeMap::new)
                .extend([leader()]);
        }
    }
    if t.serving.spec.access == Some(Access::Keys) && desired.gateway.is_some() {
        let port = config.key_check.as_ref().map_or(80, |k| k.port);
        for route in [
            desired.http_route.as_mut(),
            desired.fallback_route.as_mut(),
            desired.service_route.as_mut(),
            desired.activator.as_mut().map(|a| &mut a.route),
        ]
        .into_iter()
        .flatten()
        {
            guard(route, t.record.id, port, config.key_check_grpc);
        }
        desired.key_check = config
            .key_check
            .as_ref()
            .map(|address| Box::new(key_check_objects(namespace, &labels, address)));
    }
    desired
}

/// One role's Deployment (the decode role's with the routing sidecar) and config hash.
fn role_deployment(
    t: &Target,
    role: ServingRole,
    namespace: &str,
    config: &BuildConfig,
) -> (K8sDeployment, String) {
    let serving = disaggregation::role_serving(t.serving, role);
    let target = Target {
        serving: &serving,
        role: Some(role),
        ..t.clone()
    };
    let labels = object_labels(&target, config);
    let (mut deployment, hash) = deployment_object(&target, namespace, &labels, config);
    disaggregation::add_kv_side_channel(&mut deployment, t.serving);
    if role == ServingRole::Decode {
        disaggregation::add_routing_sidecar(
            &mut deployment,
            t.serving,
            namespace,
            &t.record.name,
            config,
        );
    }
    (deployment, hash)
}

/// Whether the record may scale to zero (and so be reached through the activator).
fn scales_to_zero(t: &Target) -> bool {
    t.serving
        .spec
        .autoscaling
        .as_ref()
        .is_some_and(|a| a.min_replicas == 0)
}

/// The canary track's Deployment and Service, labelled as its own target.
fn canary_objects(target: &Target, namespace: &str, config: &BuildConfig) -> CanaryObjects {
    let labels = object_labels(target, config);
    let (deployment, config_hash) = deployment_object(target, namespace, &labels, config);
    CanaryObjects {
        deployment,
        service: service_object(target, namespace, &labels),
        config_hash,
    }
}

/// The labels that select a deployment's pods; they never change for the life of the record.
pub fn selector_labels(record: &Deployment) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_owned(), MODEL_SERVER.to_owned()),
        (LABEL_INSTANCE.to_owned(), record.name.clone()),
        (LABEL_DEPLOYMENT_ID.to_owned(), record.id.to_string()),
    ])
}

/// The labels that select a track's pods: the record's, plus the track on a canary.
pub fn track_selector_labels(t: &Target) -> BTreeMap<String, String> {
    let mut labels = selector_labels(t.record);
    if t.canary_track {
        labels.insert(LABEL_TRACK.into(), TRACK_CANARY.into());
    }
    if let Some(role) = t.role {
        labels.insert(ROLE_LABEL.into(), role.as_str().into());
    }
    labels
}

fn selector(t: &Target) -> LabelSelector {
    LabelSelector {
        match_labels: Some(track_selector_labels(t)),
        ..LabelSelector::default()
    }
}

/// Labels on every object: the selector, ownership, and the user's labels.
fn object_labels(t: &Target, config: &BuildConfig) -> BTreeMap<String, String> {
    let mut labels = t.serving.spec.labels.clone();
    labels.extend(system_labels(t, config));
    labels
}

/// Labels on the pods: modelplane's and the spec's `podLabels`, but not its `labels`, so a
/// cosmetic relabelling never reloads a model.
fn pod_labels(t: &Target, config: &BuildConfig) -> BTreeMap<String, String> {
    let mut labels = t.serving.spec.pod_labels.clone();
    labels.extend(system_labels(t, config));
    labels
}

/// The selector, ownership and engine labels modelplane sets on everything it makes.
fn system_labels(t: &Target, config: &BuildConfig) -> BTreeMap<String, String> {
    let mut labels = track_selector_labels(t);
    labels.insert(LABEL_MANAGED_BY.into(), "modelplane".into());
    labels.insert(LABEL_PART_OF.into(), "modelplane".into());
    labels.insert(LABEL_PROJECT.into(), t.record.project.clone());
    labels.insert(LABEL_INSTALLATION.into(), config.installation.clone());
    labels.insert(
        LABEL_ENGINE.into(),
        t.serving.spec.engine.kind.as_str().into(),
    );
    labels
}

/// The metadata of a track's own objects (named after the record): its labels, and the
/// spec's annotations with the generation.
fn metadata(t: &Target, namespace: &str, labels: &BTreeMap<String, String>) -> ObjectMeta {
    let mut annotations = t.serving.spec.annotations.clone();
    annotations.insert(
        ANNOTATION_GENERATION.into(),
        t.record.generation.to_string(),
    );
    if let Some(adapters) = adapters::adapters_annotation(t.serving) {
        annotations.insert(ANNOTATION_ADAPTERS.into(), adapters);
    }
    let name = match t.role {
        Some(role) => role_object_name(&t.record.name, role),
        None => t.record.name.clone(),
    };
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_owned()),
        labels: Some(labels.clone()),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    }
}

/// The metadata of an InferencePool mode object: named `name`, with the generation as its
/// only annotation (not the spec's annotations).
fn generation_metadata(
    t: &Target,
    name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(labels.clone()),
        annotations: Some(BTreeMap::from([(
            ANNOTATION_GENERATION.to_owned(),
            t.record.generation.to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

/// What PodSecurity `restricted` asks of every container (Pod Security Standards).
fn restricted_container() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}
