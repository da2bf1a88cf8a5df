//! The desired Kubernetes objects of a deployment record: a pure function, no I/O.
//!
//! Objects are typed (`k8s_openapi` and `gateway_api`), built from the record's
//! [`ServingSpec`], never from the spec's `Option`s. Names are deterministic; every object
//! carries the managed-by, installation and deployment-id labels, so the worker can find
//! everything it made by label.

use std::collections::BTreeMap;

use gateway_api::httproutes::{
    HttpRoute, HttpRouteParentRefs, HttpRouteRules, HttpRouteRulesBackendRefs,
    HttpRouteRulesFilters, HttpRouteRulesFiltersType, HttpRouteRulesFiltersUrlRewrite,
    HttpRouteRulesFiltersUrlRewritePath, HttpRouteRulesFiltersUrlRewritePathType,
    HttpRouteRulesMatches, HttpRouteRulesMatchesHeaders, HttpRouteRulesMatchesHeadersType,
    HttpRouteRulesMatchesPath, HttpRouteRulesMatchesPathType, HttpRouteSpec,
};
use k8s_openapi::api::apps::v1::{
    Deployment as K8sDeployment, DeploymentSpec as K8sDeploymentSpec, DeploymentStrategy,
    RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvFromSource, EnvVar,
    EnvVarSource, HTTPGetAction, ImageVolumeSource, Lifecycle, LifecycleHandler, Namespace,
    NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, SecretEnvSource, SecretKeySelector, SecurityContext,
    Service, ServicePort, ServiceSpec, SleepAction, Toleration, TopologySpreadConstraint, Volume,
    VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::inference_pool::{PoolObjects, pool_objects};
use crate::domain::{
    CacheStorage, Canary, CanaryHeader, Deployment, EngineDefaults, EngineKind, ModelSource,
    PodCount, PoolFallback, RUN_AS_USER, RoutingMode, SecretKeyRef, ServingSpec,
    canary_object_name, canonical_json,
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

const MODEL_MOUNT: &str = "/models";
const CACHE_MOUNT: &str = "/cache";

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
}

/// Where the route attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayRef {
    pub namespace: String,
    pub name: String,
    pub section: Option<String>,
}

/// One record as the worker sees it: the stored record and its spec with defaults resolved.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    pub record: &'a Deployment,
    pub serving: &'a ServingSpec,
    /// The canary track: `record` is then [`canary_record`]'s, named `<name>-canary`.
    pub canary_track: bool,
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
    pub deployment: K8sDeployment,
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
}

impl DesiredObjects {
    /// A digest of everything that will be applied; equal digests mean nothing to write.
    pub fn digest(&self) -> String {
        let mut all = vec![
            as_json(&self.namespace),
            as_json(&self.deployment),
            as_json(&self.service),
            as_json(&self.http_route),
        ];
        if let Some(budget) = &self.disruption_budget {
            all.push(as_json(budget));
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

/// The image an engine runs: the spec's, else the server default for the kind.
pub fn engine_image(serving: &ServingSpec, engines: &EngineDefaults) -> String {
    let engine = &serving.spec.engine;
    engine.image.clone().unwrap_or_else(|| {
        match engine.kind {
            EngineKind::Vllm => &engines.vllm_image,
            EngineKind::Sglang => &engines.sglang_image,
            EngineKind::Tgi => &engines.tgi_image,
            EngineKind::Sim => &engines.sim_image,
        }
        .clone()
    })
}

/// The gateway a deployment routes through, if any.
pub fn gateway_of(serving: &ServingSpec, config: &BuildConfig) -> Option<GatewayRef> {
    let text = serving
        .spec
        .routing
        .gateway
        .as_deref()
        .or(config.default_gateway.as_deref())?;
    let (namespace, name, section) = crate::domain::parse_gateway_ref(text).ok()?;
    Some(GatewayRef {
        namespace,
        name,
        section,
    })
}

/// The path prefix of the route: the spec's, else `/{project}/{name}` unless a hostname is set.
pub fn route_path_prefix(t: &Target) -> String {
    crate::domain::effective_path_prefix(&t.serving.spec, &t.record.project, &t.record.name)
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
    let mut namespace_object = namespace_object(t, namespace, config);
    if adopted {
        namespace_object
            .metadata
            .labels
            .get_or_insert_default()
            .insert(LABEL_NAMESPACE_ADOPTED.into(), "true".into());
    }
    let (deployment, config_hash) = deployment_object(t, namespace, &labels, config);
    let canary_objects = canary.map(|plan| {
        let labels = object_labels(&plan.target, config);
        let (deployment, config_hash) = deployment_object(&plan.target, namespace, &labels, config);
        CanaryObjects {
            deployment,
            service: service_object(&plan.target, namespace, &labels),
            config_hash,
        }
    });
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
    DesiredObjects {
        namespace: namespace_object,
        deployment,
        service: service_object(t, namespace, &labels),
        http_route: gateway
            .as_ref()
            .map(|gw| route_object(t, namespace, &labels, gw, canary, pool_mode)),
        fallback_route: gateway
            .as_ref()
            .filter(|_| pool_mode && fallback == PoolFallback::Service)
            .map(|gw| route_object(t, namespace, &labels, gw, None, false)),
        pool: pool_mode.then(|| pool_objects(t, namespace, &labels, &config.epp_image)),
        canary: canary_objects,
        disruption_budget: (t.serving.replicas > 1)
            .then(|| disruption_budget_object(t, namespace, &labels)),
        gateway,
        config_hash,
    }
}

/// At most one replica down at a time for voluntary disruptions (node drains, upgrades),
/// so a drain never takes every replica of a model at once.
fn disruption_budget_object(
    t: &Target,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: metadata(t, namespace, labels),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(selector(t)),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

fn namespace_object(t: &Target, namespace: &str, config: &BuildConfig) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([
                (LABEL_MANAGED_BY.to_owned(), "modelplane".to_owned()),
                (LABEL_PROJECT.to_owned(), t.record.project.clone()),
                (LABEL_INSTALLATION.to_owned(), config.installation.clone()),
            ])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

fn metadata(t: &Target, namespace: &str, labels: &BTreeMap<String, String>) -> ObjectMeta {
    let mut annotations = t.serving.spec.annotations.clone();
    annotations.insert(
        ANNOTATION_GENERATION.into(),
        t.record.generation.to_string(),
    );
    ObjectMeta {
        name: Some(t.record.name.clone()),
        namespace: Some(namespace.to_owned()),
        labels: Some(labels.clone()),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    }
}

/// The Deployment, and the hash of its pod template that its pods carry.
fn deployment_object(
    t: &Target,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    config: &BuildConfig,
) -> (K8sDeployment, String) {
    let pod_spec = pod_spec(t, config);
    // The hash of everything that shapes a pod, plus the restart marker: a change rolls the pods.
    let hash_input = Value::Array(vec![as_json(&pod_spec), as_json(&t.record.restarted_at)]);
    let config_hash =
        hex::encode(Sha256::digest(canonical_json(&hash_input).as_bytes()))[..16].to_owned();
    let mut pod_annotations = t.serving.spec.annotations.clone();
    pod_annotations.insert(ANNOTATION_CONFIG_HASH.into(), config_hash.clone());
    let startup = startup_timeout_seconds(t.serving, &config.engines);
    let deployment = K8sDeployment {
        metadata: metadata(t, namespace, labels),
        spec: Some(K8sDeploymentSpec {
            replicas: Some(t.serving.replicas),
            selector: selector(t),
            strategy: Some(rollout_strategy(t.serving)),
            // Model loading counts against the deadline, so it must outlast the startup budget.
            progress_deadline_seconds: Some(to_i32(startup + 120)),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels(t, config)),
                    annotations: Some(pod_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec),
            },
            ..K8sDeploymentSpec::default()
        }),
        ..K8sDeployment::default()
    };
    (deployment, config_hash)
}

/// A rolling update by the resolved counts (see [`ServingSpec::max_surge`]).
fn rollout_strategy(serving: &ServingSpec) -> DeploymentStrategy {
    DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(int_or_percent(serving.max_surge)),
            max_unavailable: Some(int_or_percent(serving.max_unavailable)),
        }),
    }
}

fn int_or_percent(count: PodCount) -> IntOrString {
    match count {
        PodCount::Count(n) => IntOrString::Int(n),
        PodCount::Percent(p) => IntOrString::String(format!("{p}%")),
    }
}

/// Seconds, as the API's 32-bit fields want them (spec values are bounded far below).
fn to_i32(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn startup_timeout_seconds(serving: &ServingSpec, engines: &EngineDefaults) -> i64 {
    serving
        .spec
        .probes
        .startup_timeout_seconds
        .unwrap_or(engines.startup_timeout_seconds)
}

/// The reference the engine loads the model from, and how it gets there.
struct ModelLocation {
    /// What the engine is told (`org/name`, `/models/path`, `s3://…`).
    reference: String,
    volumes: Vec<Volume>,
    mounts: Vec<VolumeMount>,
    init_containers: Vec<Container>,
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn volume(name: &str, with: impl FnOnce(&mut Volume)) -> Volume {
    let mut volume = Volume {
        name: name.into(),
        ..Volume::default()
    };
    with(&mut volume);
    volume
}

/// The model downloader's requests and limits. A namespace with a ResourceQuota on cpu or
/// memory admits only pods whose every container, init containers included, states them
/// (kubernetes pkg/quota/v1/evaluator/core/pods.go: "must specify" for each constrained
/// resource), and a real cluster refused `resources: {}` here. `aws s3 sync` is I/O bound.
fn downloader_resources() -> ResourceRequirements {
    let quantities = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity(memory.to_owned())),
        ])
    };
    ResourceRequirements {
        requests: Some(quantities("500m", "512Mi")),
        limits: Some(quantities("2", "2Gi")),
        ..ResourceRequirements::default()
    }
}

fn empty_dir(medium: Option<&str>, size: Option<&crate::domain::Quantity>) -> EmptyDirVolumeSource {
    EmptyDirVolumeSource {
        medium: medium.map(str::to_owned),
        size_limit: size.map(|s| Quantity(s.as_str().to_owned())),
    }
}

fn model_location(serving: &ServingSpec, config: &BuildConfig) -> ModelLocation {
    let read_only_mount = mount("model", MODEL_MOUNT, true);
    match &serving.model {
        ModelSource::HuggingFace { repo } => ModelLocation {
            reference: repo.clone(),
            volumes: vec![],
            mounts: vec![],
            init_containers: vec![],
        },
        ModelSource::Pvc { claim, path } => ModelLocation {
            reference: join_path(MODEL_MOUNT, path),
            volumes: vec![volume("model", |v| {
                v.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.clone(),
                    read_only: Some(true),
                })
            })],
            mounts: vec![read_only_mount],
            init_containers: vec![],
        },
        // An OCI artifact mounted as an image volume: no copy, read-only, cached by the node.
        ModelSource::Oci { reference } => ModelLocation {
            reference: MODEL_MOUNT.to_owned(),
            volumes: vec![volume("model", |v| {
                v.image = Some(ImageVolumeSource {
                    reference: Some(reference.clone()),
                    pull_policy: Some("IfNotPresent".into()),
                })
            })],
            mounts: vec![read_only_mount],
            init_containers: vec![],
        },
        // Copied by an init container into a pod-local volume before the engine starts.
        ModelSource::S3 { bucket, key } => {
            let source = format!("s3://{bucket}/{key}");
            let init = Container {
                name: "fetch-model".into(),
                image: Some(config.s3_downloader_image.clone()),
                command: Some(vec![
                    "aws".into(),
                    "s3".into(),
                    "sync".into(),
                    source,
                    MODEL_MOUNT.into(),
                ]),
                volume_mounts: Some(vec![mount("model", MODEL_MOUNT, false)]),
                resources: Some(downloader_resources()),
                // The Secret's keys (AWS_ACCESS_KEY_ID, …) become the downloader's environment.
                env_from: serving.spec.model.secret_ref.as_ref().map(|secret| {
                    vec![EnvFromSource {
                        secret_ref: Some(SecretEnvSource {
                            name: secret.name.clone(),
                            optional: None,
                        }),
                        ..EnvFromSource::default()
                    }]
                }),
                ..Container::default()
            };
            ModelLocation {
                reference: MODEL_MOUNT.to_owned(),
                volumes: vec![volume("model", |v| {
                    v.empty_dir = Some(empty_dir(None, None))
                })],
                mounts: vec![read_only_mount],
                init_containers: vec![init],
            }
        }
    }
}

fn join_path(base: &str, rest: &str) -> String {
    if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}/{rest}")
    }
}

/// The engine's command line.
fn engine_command(serving: &ServingSpec, model: &str) -> (Vec<String>, Vec<String>) {
    let spec = &serving.spec;
    let served = serving.served_name.clone();
    let port = serving.port.to_string();
    let tp = spec.engine.tensor_parallel_size;
    let max_len = spec.engine.max_model_len;
    let revision = spec.model.revision.clone();
    let mut args: Vec<String> = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        if let Some(v) = value {
            args.push(flag.to_owned());
            args.push(v);
        }
    };
    let command = match spec.engine.kind {
        EngineKind::Vllm => {
            push("--served-model-name", Some(served));
            push("--port", Some(port));
            push("--tensor-parallel-size", tp.map(|t| t.to_string()));
            push("--max-model-len", max_len.map(|m| m.to_string()));
            push("--revision", revision);
            vec!["vllm".to_owned(), "serve".to_owned(), model.to_owned()]
        }
        EngineKind::Sglang => {
            push("--model-path", Some(model.to_owned()));
            push("--served-model-name", Some(served));
            push("--host", Some("0.0.0.0".to_owned()));
            push("--port", Some(port));
            push("--tp-size", tp.map(|t| t.to_string()));
            push("--context-length", max_len.map(|m| m.to_string()));
            push("--revision", revision);
            vec!["python3".into(), "-m".into(), "sglang.launch_server".into()]
        }
        EngineKind::Tgi => {
            push("--model-id", Some(model.to_owned()));
            push("--served-model-name", Some(served));
            push("--port", Some(port));
            push("--num-shard", tp.map(|t| t.to_string()));
            push("--max-total-tokens", max_len.map(|m| m.to_string()));
            push("--revision", revision);
            vec!["text-generation-launcher".into()]
        }
        EngineKind::Sim => {
            push("--model", Some(served));
            push("--port", Some(port));
            vec!["/app/llm-d-inference-sim".into()]
        }
    };
    args.extend(spec.engine.args.iter().cloned());
    (command, args)
}

fn secret_env(name: &str, secret: &SecretKeyRef) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.name.clone(),
                key: secret.key.clone(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// The server's environment, and the volumes and mounts the cache and `/dev/shm` need.
fn environment(serving: &ServingSpec, model: &mut ModelLocation) -> Vec<EnvVar> {
    let spec = &serving.spec;
    let mut env = Vec::new();
    if let (ModelSource::HuggingFace { .. }, Some(secret)) =
        (&serving.model, &spec.model.secret_ref)
    {
        // The hub token comes from the Secret at run time; modelplane never sees it.
        env.push(secret_env("HF_TOKEN", secret));
    }
    if let Some(cache) = &serving.cache {
        model.volumes.push(volume("cache", |v| match cache {
            CacheStorage::Claim(claim) => {
                v.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.clone(),
                    read_only: None,
                })
            }
            CacheStorage::EmptyDir(size) => v.empty_dir = Some(empty_dir(None, size.as_ref())),
        }));
        model.mounts.push(mount("cache", CACHE_MOUNT, false));
        env.push(EnvVar {
            name: "HF_HOME".into(),
            value: Some(CACHE_MOUNT.into()),
            ..EnvVar::default()
        });
    }
    if let Some(size) = &serving.shared_memory {
        // Engines exchange tensors through /dev/shm; the container default (64 MiB) is too small.
        model.volumes.push(volume("shm", |v| {
            v.empty_dir = Some(empty_dir(Some("Memory"), Some(size)))
        }));
        model.mounts.push(mount("shm", "/dev/shm", false));
    }
    for var in &spec.engine.env {
        env.push(match (&var.value, &var.secret_ref) {
            (_, Some(secret)) => secret_env(&var.name, secret),
            // The API server does not store an empty value (`omitempty`): neither do we.
            (Some(value), None) if !value.is_empty() => EnvVar {
                name: var.name.clone(),
                value: Some(value.clone()),
                ..EnvVar::default()
            },
            (_, None) => EnvVar {
                name: var.name.clone(),
                ..EnvVar::default()
            },
        });
    }
    env
}

/// Requests and limits. A GPU engine needs CPU and memory too: without a request it would
/// be `Burstable` on nothing but its GPUs. The spec's values are requests and limits; the
/// defaults only requests.
fn resources(serving: &ServingSpec, config: &BuildConfig) -> ResourceRequirements {
    let pods = &config.engines.pods;
    let (default_cpu, default_memory) = match serving.spec.engine.kind {
        EngineKind::Sim => ("100m", "128Mi"),
        _ => (pods.cpu_request.as_str(), pods.memory_request.as_str()),
    };
    let mut limits = BTreeMap::new();
    let mut requests = BTreeMap::new();
    for (name, value, default) in [
        ("cpu", &serving.cpu, default_cpu),
        ("memory", &serving.memory, default_memory),
    ] {
        match value {
            Some(value) => {
                requests.insert(name.to_owned(), Quantity(value.as_str().to_owned()));
                limits.insert(name.to_owned(), Quantity(value.as_str().to_owned()));
            }
            None => {
                requests.insert(name.to_owned(), Quantity(default.to_owned()));
            }
        }
    }
    if serving.gpus > 0 {
        let name = serving
            .spec
            .resources
            .gpu
            .as_ref()
            .and_then(|g| g.resource_name.clone())
            .unwrap_or_else(|| config.engines.gpu_resource_name.clone());
        limits.insert(name.clone(), Quantity(serving.gpus.to_string()));
        requests.insert(name, Quantity(serving.gpus.to_string()));
    }
    ResourceRequirements {
        requests: Some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..ResourceRequirements::default()
    }
}

fn probe(health: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(health.to_owned()),
            port: IntOrString::String("http".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        // A loaded engine answers its health check slowly; the default 1 s would take busy
        // pods out of rotation, or restart them.
        timeout_seconds: Some(5),
        ..Probe::default()
    }
}

/// What PodSecurity `restricted` asks of every container (Pod Security Standards).
pub(super) fn restricted_container() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

fn pod_spec(t: &Target, config: &BuildConfig) -> PodSpec {
    let serving = t.serving;
    let spec = &serving.spec;
    let mut model = model_location(serving, config);
    let (command, args) = engine_command(serving, &model.reference);
    let env = environment(serving, &mut model);
    let startup = startup_timeout_seconds(serving, &config.engines);
    let pods = &config.engines.pods;
    let drain = spec.shutdown.drain_seconds.unwrap_or(pods.drain_seconds);
    let grace = spec
        .shutdown
        .grace_period_seconds
        .unwrap_or(pods.termination_grace_seconds)
        .max(drain + 1);
    let health = &serving.health_path;
    let restricted = serving.restricted;
    let container = Container {
        name: "server".into(),
        image: Some(engine_image(serving, &config.engines)),
        command: Some(command),
        args: Some(args),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: serving.port,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        startup_probe: Some(probe(health, 10, to_i32((startup + 9) / 10))),
        readiness_probe: Some(probe(health, 5, 3)),
        liveness_probe: Some(probe(health, 10, 6)),
        env: (!env.is_empty()).then_some(env),
        volume_mounts: (!model.mounts.is_empty()).then_some(model.mounts),
        resources: Some(resources(serving, config)),
        // Keep serving while endpoints and the Gateway stop routing here (no shell needed).
        lifecycle: (drain > 0).then(|| Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction { seconds: drain }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        security_context: restricted.then(restricted_container),
        ..Container::default()
    };
    let mut init_containers = model.init_containers;
    if restricted {
        for init in &mut init_containers {
            init.security_context = Some(restricted_container());
        }
    }
    let sched = &spec.scheduling;
    PodSpec {
        containers: vec![container],
        // Model servers never call the Kubernetes API.
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        termination_grace_period_seconds: Some(grace),
        // Replicas on different nodes where possible: one node's loss is not all of them.
        // Set whatever the replica count (it costs nothing for one), so scaling never
        // changes the pod template and rolls the pods.
        topology_spread_constraints: Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "kubernetes.io/hostname".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(selector(t)),
            ..TopologySpreadConstraint::default()
        }]),
        security_context: restricted.then(|| PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS_USER),
            run_as_group: Some(RUN_AS_USER),
            // Volumes (cache, PVCs) become writable by the server's group.
            fs_group: Some(RUN_AS_USER),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        init_containers: (!init_containers.is_empty()).then_some(init_containers),
        volumes: (!model.volumes.is_empty()).then_some(model.volumes),
        node_selector: (!sched.node_selector.is_empty()).then(|| sched.node_selector.clone()),
        tolerations: (!sched.tolerations.is_empty()).then(|| {
            sched
                .tolerations
                .iter()
                .map(|t| Toleration {
                    key: t.key.clone(),
                    operator: t.operator.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                    toleration_seconds: t.toleration_seconds,
                })
                .collect()
        }),
        scheduler_name: sched.scheduler_name.clone(),
        priority_class_name: sched.priority_class_name.clone(),
        affinity: spec
            .resources
            .gpu
            .as_ref()
            .and_then(|g| g.product.clone())
            .map(|product| gpu_product_affinity(&config.gpu_product_label, product)),
        ..PodSpec::default()
    }
}

/// Only nodes whose GPU product label names `product`.
fn gpu_product_affinity(label: &str, product: String) -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: label.to_owned(),
                        operator: "In".into(),
                        values: Some(vec![product]),
                    }]),
                    ..NodeSelectorTerm::default()
                }],
            }),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    }
}

fn service_object(t: &Target, namespace: &str, labels: &BTreeMap<String, String>) -> Service {
    Service {
        metadata: metadata(t, namespace, labels),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(track_selector_labels(t)),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: t.serving.port,
                target_port: Some(IntOrString::String("http".into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The route: every request under the prefix to the Service; with a canary, the ones
/// carrying its header to the canary, and the rest split by weight between the tracks.
fn route_object(
    t: &Target,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    gateway: &GatewayRef,
    canary: Option<&CanaryPlan>,
    pool: bool,
) -> HttpRoute {
    let parent = HttpRouteParentRefs {
        group: Some("gateway.networking.k8s.io".into()),
        kind: Some("Gateway".into()),
        namespace: Some(gateway.namespace.clone()),
        name: gateway.name.clone(),
        section_name: gateway.section.clone(),
        ..HttpRouteParentRefs::default()
    };
    let prefix = route_path_prefix(t);
    // The engine serves /v1/...; strip the route's prefix on the way in.
    let rewrite = (prefix != "/").then(|| {
        vec![HttpRouteRulesFilters {
            r#type: HttpRouteRulesFiltersType::UrlRewrite,
            url_rewrite: Some(HttpRouteRulesFiltersUrlRewrite {
                path: Some(HttpRouteRulesFiltersUrlRewritePath {
                    r#type: HttpRouteRulesFiltersUrlRewritePathType::ReplacePrefixMatch,
                    replace_prefix_match: Some("/".into()),
                    ..HttpRouteRulesFiltersUrlRewritePath::default()
                }),
                ..HttpRouteRulesFiltersUrlRewrite::default()
            }),
            ..HttpRouteRulesFilters::default()
        }]
    });
    let path = HttpRouteRulesMatchesPath {
        r#type: Some(HttpRouteRulesMatchesPathType::PathPrefix),
        value: Some(prefix),
    };
    let backend = |target: &Target, weight: i32| HttpRouteRulesBackendRefs {
        group: Some(String::new()),
        kind: Some("Service".into()),
        name: target.record.name.clone(),
        port: Some(target.serving.port),
        weight: Some(weight),
        ..HttpRouteRulesBackendRefs::default()
    };
    let mut rules = Vec::new();
    let backends = match canary {
        // The pool's endpoint picker chooses the pod; a pool has no port of its own.
        None if pool => vec![HttpRouteRulesBackendRefs {
            group: Some("inference.networking.k8s.io".into()),
            kind: Some("InferencePool".into()),
            name: t.record.name.clone(),
            weight: Some(1),
            ..HttpRouteRulesBackendRefs::default()
        }],
        None => vec![backend(t, 1)],
        Some(plan) => {
            // The Gateway API prefers, among equal paths, the match with more headers
            // (HTTPRouteRule's precedence), so the header rule wins for requests carrying it.
            rules.push(HttpRouteRules {
                matches: Some(vec![HttpRouteRulesMatches {
                    path: Some(path.clone()),
                    headers: Some(vec![HttpRouteRulesMatchesHeaders {
                        name: plan.header.name.clone(),
                        r#type: Some(HttpRouteRulesMatchesHeadersType::Exact),
                        value: plan.header.value.clone(),
                    }]),
                    ..HttpRouteRulesMatches::default()
                }]),
                backend_refs: Some(vec![backend(&plan.target, 1)]),
                filters: rewrite.clone(),
                ..HttpRouteRules::default()
            });
            let weight = plan.routed_weight.clamp(0, 100);
            vec![backend(t, 100 - weight), backend(&plan.target, weight)]
        }
    };
    rules.push(HttpRouteRules {
        matches: Some(vec![HttpRouteRulesMatches {
            path: Some(path),
            ..HttpRouteRulesMatches::default()
        }]),
        backend_refs: Some(backends),
        filters: rewrite,
        ..HttpRouteRules::default()
    });
    let mut route = HttpRoute::new(
        &t.record.name,
        HttpRouteSpec {
            parent_refs: Some(vec![parent]),
            rules: Some(rules),
            hostnames: t.serving.spec.routing.hostname.clone().map(|h| vec![h]),
        },
    );
    route.metadata = metadata(t, namespace, labels);
    route
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::domain::{DeploymentSpec, DeploymentStatus, SpecLimits};

    fn config() -> BuildConfig {
        BuildConfig {
            installation: "test".into(),
            engines: EngineDefaults {
                vllm_image: "vllm/vllm-openai:v0.11.0".into(),
                sglang_image: "lmsysorg/sglang:v0.5.4".into(),
                tgi_image: "ghcr.io/huggingface/text-generation-inference:3.3.6".into(),
                sim_image: "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1".into(),
                gpu_resource_name: "nvidia.com/gpu".into(),
                startup_timeout_seconds: 1800,
                pods: crate::domain::PodDefaults::default(),
            },
            default_gateway: Some("gateway-system/inference/http".into()),
            gpu_product_label: "nvidia.com/gpu.product".into(),
            s3_downloader_image: "amazon/aws-cli:2.22.0".into(),
            epp_image: "registry.k8s.io/gateway-api-inference-extension/epp:v1.4.0".into(),
        }
    }

    /// A record and its resolved spec, as the worker holds them.
    #[derive(Clone)]
    struct Rec {
        record: Deployment,
        serving: ServingSpec,
    }

    impl Rec {
        fn target(&self) -> Target<'_> {
            Target {
                record: &self.record,
                serving: &self.serving,
                canary_track: false,
            }
        }

        fn objects(&self, config: &BuildConfig) -> DesiredObjects {
            desired_objects(&self.target(), "team-a", false, config, None)
        }
    }

    fn record(name: &str, spec: serde_json::Value) -> Rec {
        let spec: DeploymentSpec = serde_json::from_value(spec).unwrap();
        let serving = spec.parse(name, &SpecLimits::default()).unwrap();
        let record = Deployment {
            id: Uuid::parse_str("01a200c1-83bb-709a-83d2-8acee715d77e").unwrap(),
            project: "team-a".into(),
            name: name.into(),
            generation: 3,
            status: DeploymentStatus::pending(i64::from(serving.replicas)),
            spec: serving.spec.clone(),
            restarted_at: None,
            deletion_requested_at: None,
            canary: None,
            created_at: Utc.with_ymd_and_hms(2026, 11, 22, 0, 0, 0).unwrap(),
            updated_at: Utc.with_ymd_and_hms(2026, 11, 22, 0, 0, 0).unwrap(),
            warnings: Vec::new(),
        };
        Rec { record, serving }
    }

    /// The objects as the API server receives them (JSON), and typed.
    struct Built {
        typed: DesiredObjects,
        namespace: Value,
        deployment: Value,
        service: Value,
        http_route: Option<Value>,
        disruption_budget: Option<Value>,
    }

    impl Built {
        fn digest(&self) -> String {
            self.typed.digest()
        }
    }

    fn built(typed: DesiredObjects) -> Built {
        Built {
            namespace: as_json(&typed.namespace),
            deployment: as_json(&typed.deployment),
            service: as_json(&typed.service),
            http_route: typed.http_route.as_ref().map(as_json),
            disruption_budget: typed.disruption_budget.as_ref().map(as_json),
            typed,
        }
    }

    fn config_without_gateway() -> BuildConfig {
        BuildConfig {
            default_gateway: None,
            ..config()
        }
    }

    fn build(name: &str, spec: serde_json::Value) -> Built {
        built(record(name, spec).objects(&config()))
    }

    #[test]
    fn vllm_on_gpus_with_everything() {
        let objects = build(
            "qwen",
            json!({
                "model": {"source": "hf://Qwen/Qwen2.5-7B-Instruct", "revision": "main", "secretRef": {"name": "hf", "key": "token"}},
                "engine": {"kind": "vllm", "args": ["--enable-prefix-caching"], "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}, {"name": "API_KEY", "secretRef": {"name": "keys", "key": "api"}}],
                           "maxModelLen": 8192, "tensorParallelSize": 2},
                "replicas": 2,
                "resources": {"cpu": "8", "memory": "64Gi", "gpu": {"product": "NVIDIA-A100-SXM4-80GB"}, "sharedMemory": "8Gi"},
                "scheduling": {"nodeSelector": {"pool": "a100"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                               "priorityClassName": "inference"},
                "storage": {"cache": {"sizeLimit": "100Gi"}},
                "labels": {"team": "nlp"},
                "annotations": {"example.com/owner": "nlp"}
            }),
        );
        insta::assert_yaml_snapshot!("vllm_deployment", objects.deployment);
        insta::assert_yaml_snapshot!("vllm_service", objects.service);
        insta::assert_yaml_snapshot!("vllm_route", objects.http_route);
        insta::assert_yaml_snapshot!("namespace", objects.namespace);
    }

    #[test]
    fn a_canary_is_its_own_track_on_the_shared_route() {
        let stable = record(
            "qwen",
            json!({"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"kind": "sim"}, "replicas": 2}),
        );
        let canary = crate::domain::Canary {
            spec: serde_json::from_value(json!({"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"},
                "engine": {"kind": "sim", "image": "ghcr.io/llm-d/llm-d-inference-sim:v0.6.0"}, "replicas": 1})).unwrap(),
            weight: 20,
            header: crate::domain::CanaryHeader::default(),
            from_revision: None,
            promoting: false,
            started_by: "token:ci".into(),
            started_at: Utc.with_ymd_and_hms(2026, 11, 25, 0, 0, 0).unwrap(),
        };
        let canary_rec = canary_record(&stable.record, &canary);
        let canary_serving = canary.spec.serving("qwen").unwrap();
        let plan = CanaryPlan {
            target: Target {
                record: &canary_rec,
                serving: &canary_serving,
                canary_track: true,
            },
            routed_weight: 20,
            header: &canary.header,
        };
        let objects = desired_objects(&stable.target(), "team-a", false, &config(), Some(&plan));
        let track = objects.canary.as_ref().unwrap();
        let deployment = as_json(&track.deployment);
        let service = as_json(&track.service);
        // Its own selector: the stable selector's keys with its own instance, plus the track,
        // so neither track's Service or Deployment selects the other's pods.
        let stable_selector = as_json(&objects.deployment)["spec"]["selector"].clone();
        assert_eq!(
            deployment["spec"]["selector"]["matchLabels"],
            json!({"app.kubernetes.io/instance": "qwen-canary", "app.kubernetes.io/name": "model-server",
                   "modelplane.io/deployment-id": "01a200c1-83bb-709a-83d2-8acee715d77e", "modelplane.io/track": "canary"})
        );
        assert_eq!(
            stable_selector["matchLabels"]["app.kubernetes.io/instance"],
            "qwen"
        );
        assert_eq!(
            service["spec"]["selector"],
            deployment["spec"]["selector"]["matchLabels"]
        );
        // It serves the deployment's model name.
        let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
        assert!(args.contains("\"qwen\""), "{args}");
        insta::assert_yaml_snapshot!("canary_route", objects.http_route);
        insta::assert_yaml_snapshot!("canary_service", service);
        // No canary: the one rule again, and a different digest.
        let without = stable.objects(&config());
        assert_ne!(without.digest(), objects.digest());
        assert_eq!(
            as_json(&without.http_route)["spec"]["rules"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn inference_pool_mode_makes_the_pool_its_picker_and_a_route_to_the_pool() {
        let objects = build(
            "qwen",
            json!({"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"kind": "sim"},
                   "routing": {"mode": "InferencePool", "inferencePool": {"scorers": {"prefixCache": 0}}}}),
        );
        let pool = objects.typed.pool.as_ref().unwrap();
        insta::assert_yaml_snapshot!("pool_route", objects.http_route);
        insta::assert_yaml_snapshot!("pool", pool.pool);
        insta::assert_yaml_snapshot!("pool_picker", pool.picker);
        insta::assert_yaml_snapshot!("pool_picker_rbac", (&pool.role, &pool.role_binding));
        insta::assert_yaml_snapshot!("pool_picker_config", pool.config_map);
        // The picker's pods are not model servers: neither the pool nor the Service selects them.
        let picker_labels = as_json(&pool.picker)["spec"]["template"]["metadata"]["labels"].clone();
        assert_eq!(picker_labels["app.kubernetes.io/name"], "endpoint-picker");
        assert_eq!(
            as_json(&pool.pool)["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
            "model-server"
        );
        // A scorer weighted 0 is left out of the profile.
        let config = as_json(&pool.config_map)["data"]["epp.yaml"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(!config.contains("prefix-cache-scorer"), "{config}");
        assert!(objects.typed.fallback_route.is_none());
        // The same spec without a Gateway makes nothing of the mode.
        let no_gateway = config_without_gateway();
        let rec = record(
            "qwen",
            json!({"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"kind": "sim"}, "routing": {"mode": "InferencePool"}}),
        );
        assert!(rec.objects(&no_gateway).pool.is_none());
    }

    #[test]
    fn sglang_from_a_pvc() {
        let objects = build(
            "llama",
            json!({"model": {"source": "pvc://models/llama-3-8b"}, "engine": {"kind": "sglang"}, "resources": {"gpu": {"count": 1, "resourceName": "amd.com/gpu"}}}),
        );
        insta::assert_yaml_snapshot!(
            "sglang_pvc_pod",
            objects.deployment["spec"]["template"]["spec"]
        );
    }

    #[test]
    fn tgi_from_s3_with_a_pvc_cache() {
        let objects = build(
            "mistral",
            json!({"model": {"source": "s3://models/mistral-7b", "secretRef": {"name": "s3-creds", "key": "unused"}}, "engine": {"kind": "tgi", "tensorParallelSize": 2}, "storage": {"cache": {"claimName": "hf-cache"}}}),
        );
        insta::assert_yaml_snapshot!("tgi_s3_pod", objects.deployment["spec"]["template"]["spec"]);
    }

    /// The Pod Security Standards' `restricted` profile (kubernetes.io/docs/concepts/security/
    /// pod-security-standards): no privilege escalation, all capabilities dropped, non-root,
    /// a RuntimeDefault seccomp profile, and only the allowed volume types.
    #[test]
    fn pods_pass_the_restricted_pod_security_standard_unless_relaxed() {
        let allowed_volumes = [
            "configMap",
            "csi",
            "downwardAPI",
            "emptyDir",
            "ephemeral",
            "persistentVolumeClaim",
            "projected",
            "secret",
        ];
        for spec in [
            json!({"model": {"source": "hf://a/b"}}),
            json!({"model": {"source": "s3://models/x", "secretRef": {"name": "s", "key": "k"}}, "storage": {"cache": {"claimName": "c"}}}),
            json!({"model": {"source": "pvc://models/x"}, "security": {"profile": "restricted"}}),
        ] {
            let objects = build("qwen", spec.clone());
            let pod = &objects.deployment["spec"]["template"]["spec"];
            let security = &pod["securityContext"];
            assert_eq!(security["runAsNonRoot"], true, "{spec}");
            assert_ne!(security["runAsUser"], 0);
            assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
            for list in ["containers", "initContainers"] {
                for container in pod[list].as_array().into_iter().flatten() {
                    assert_eq!(
                        container["securityContext"]["allowPrivilegeEscalation"],
                        false
                    );
                    assert_eq!(
                        container["securityContext"]["capabilities"]["drop"],
                        json!(["ALL"])
                    );
                }
            }
            for volume in pod["volumes"].as_array().into_iter().flatten() {
                let kind = volume
                    .as_object()
                    .unwrap()
                    .keys()
                    .find(|k| *k != "name")
                    .unwrap();
                assert!(allowed_volumes.contains(&kind.as_str()), "{kind} in {spec}");
            }
        }
        let relaxed = build(
            "qwen",
            json!({"model": {"source": "hf://a/b"}, "security": {"profile": "image-default"}}),
        );
        let pod = &relaxed.deployment["spec"]["template"]["spec"];
        assert!(pod["securityContext"].is_null());
        assert!(pod["containers"][0]["securityContext"].is_null());
    }

    #[test]
    fn gpu_pods_roll_one_at_a_time_without_surge_unless_the_spec_says_otherwise() {
        let strategy = |spec: serde_json::Value| {
            build("qwen", spec).deployment["spec"]["strategy"]["rollingUpdate"].clone()
        };
        assert_eq!(
            strategy(json!({"model": {"source": "hf://a/b"}, "resources": {"gpu": {"count": 1}}})),
            json!({"maxSurge": 0, "maxUnavailable": 1})
        );
        assert_eq!(
            strategy(json!({"model": {"source": "hf://a/b"}, "engine": {"kind": "sim"}})),
            json!({"maxSurge": "25%", "maxUnavailable": "25%"})
        );
        // Never below `replicas`: then the rollout needs a pod of surge.
        assert_eq!(
            strategy(
                json!({"model": {"source": "hf://a/b"}, "resources": {"gpu": {"count": 1}}, "rollout": {"maxUnavailable": 0}})
            ),
            json!({"maxSurge": 1, "maxUnavailable": 0})
        );
        assert_eq!(
            strategy(
                json!({"model": {"source": "hf://a/b"}, "rollout": {"maxSurge": "50%", "maxUnavailable": 2}})
            ),
            json!({"maxSurge": "50%", "maxUnavailable": 2})
        );
    }

    #[test]
    fn several_replicas_get_a_disruption_budget_and_one_does_not() {
        let one = build("qwen", json!({"model": {"source": "hf://a/b"}}));
        assert!(one.disruption_budget.is_none());
        let three = build(
            "qwen",
            json!({"model": {"source": "hf://a/b"}, "replicas": 3}),
        );
        let budget = three.disruption_budget.clone().expect("a budget");
        assert_eq!(budget["spec"]["maxUnavailable"], 1);
        assert_eq!(
            budget["spec"]["selector"]["matchLabels"],
            three.deployment["spec"]["selector"]["matchLabels"]
        );
        assert_ne!(one.digest(), three.digest());
    }

    #[test]
    fn pods_drain_before_they_stop_and_spread_over_nodes() {
        let one = build("qwen", json!({"model": {"source": "hf://a/b"}}));
        let pod = &one.deployment["spec"]["template"]["spec"];
        assert_eq!(pod["terminationGracePeriodSeconds"], 120);
        assert_eq!(
            pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"],
            10
        );
        assert_eq!(pod["containers"][0]["resources"]["requests"]["cpu"], "2");
        assert!(pod["containers"][0]["resources"]["limits"]["cpu"].is_null());
        let several = build(
            "qwen",
            json!({"model": {"source": "hf://a/b"}, "replicas": 3, "shutdown": {"drainSeconds": 0, "gracePeriodSeconds": 600}}),
        );
        let pod = &several.deployment["spec"]["template"]["spec"];
        assert_eq!(pod["terminationGracePeriodSeconds"], 600);
        assert!(pod["containers"][0]["lifecycle"].is_null());
        assert_eq!(
            pod["topologySpreadConstraints"][0]["topologyKey"],
            "kubernetes.io/hostname"
        );
    }

    #[test]
    fn sim_from_oci_on_a_hostname() {
        let objects = build(
            "demo",
            json!({"model": {"source": "oci://registry.example.com/models/tiny:1", "servedName": "tiny"}, "engine": {"kind": "sim"}, "routing": {"hostname": "demo.models.example.com", "gateway": "gw/edge"}}),
        );
        insta::assert_yaml_snapshot!(
            "sim_oci_pod",
            objects.deployment["spec"]["template"]["spec"]
        );
        insta::assert_yaml_snapshot!("sim_route", objects.http_route);
    }

    #[test]
    fn the_selector_is_stable_and_never_holds_user_labels() {
        let a = build(
            "qwen",
            json!({"model": {"source": "hf://a/b"}, "labels": {"team": "x"}}),
        );
        let b = build(
            "qwen",
            json!({"model": {"source": "hf://c/d"}, "engine": {"kind": "sglang"}, "labels": {"team": "y"}}),
        );
        let selector = &a.deployment["spec"]["selector"]["matchLabels"];
        assert_eq!(selector, &b.deployment["spec"]["selector"]["matchLabels"]);
        assert_eq!(selector, &a.service["spec"]["selector"]);
        assert_eq!(selector.as_object().unwrap().len(), 3);
        assert_eq!(selector["app.kubernetes.io/name"], "model-server");
        // The user's labels stay off the pods; its podLabels go on them.
        assert!(a.deployment["spec"]["template"]["metadata"]["labels"]["team"].is_null());
        assert_eq!(a.deployment["metadata"]["labels"]["team"], "x");
        let with_pod_labels = build(
            "qwen",
            json!({"model": {"source": "hf://a/b"}, "podLabels": {"mesh": "on"}}),
        );
        assert_eq!(
            with_pod_labels.deployment["spec"]["template"]["metadata"]["labels"]["mesh"],
            "on"
        );
        assert!(with_pod_labels.deployment["metadata"]["labels"]["mesh"].is_null());
    }

    #[test]
    fn a_restart_or_a_pod_change_changes_the_config_hash_but_a_label_does_not() {
        let hash = |r: &Rec| {
            let objects = built(r.objects(&config()));
            assert_eq!(
                objects.deployment["spec"]["template"]["metadata"]["annotations"]
                    [ANNOTATION_CONFIG_HASH],
                objects.typed.config_hash.as_str()
            );
            objects.typed.config_hash
        };
        let base = record("qwen", json!({"model": {"source": "hf://a/b"}}));
        let mut restarted = base.clone();
        restarted.record.restarted_at = Some(Utc.with_ymd_and_hms(2026, 11, 22, 1, 0, 0).unwrap());
        let changed = record(
            "qwen",
            json!({"model": {"source": "hf://a/b"}, "engine": {"maxModelLen": 4096}}),
        );
        let relabelled = record(
            "qwen",
            json!({"model": {"source": "hf://a/b"}, "labels": {"x": "y"}}),
        );
        assert_ne!(hash(&base), hash(&restarted));
        assert_ne!(hash(&base), hash(&changed));
        assert_eq!(hash(&base), hash(&relabelled));
        // Nor does a relabelling touch the pod template, so the Deployment rolls nothing.
        let template = |r: &Rec| built(r.objects(&config())).deployment["spec"]["template"].clone();
        assert_eq!(template(&base), template(&relabelled));
    }

    #[test]
    fn no_gateway_means_no_route_and_gpus_follow_tensor_parallelism() {
        let mut cfg = config();
        cfg.default_gateway = None;
        let r = record(
            "qwen",
            json!({"model": {"source": "hf://a/b"}, "engine": {"tensorParallelSize": 4}}),
        );
        let objects = built(r.objects(&cfg));
        assert!(objects.http_route.is_none());
        let limits =
            &objects.deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"];
        assert_eq!(limits["nvidia.com/gpu"], "4");
        assert_eq!(route_path_prefix(&r.target()), "/team-a/qwen");
    }
}
