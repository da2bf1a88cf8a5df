//! The desired Kubernetes objects of a deployment record: a pure function, no I/O.
//!
//! Objects are written as JSON (it reads like the YAML users know) and checked against
//! the typed Kubernetes structs in the tests. Names are deterministic; every object
//! carries the managed-by, installation and deployment-id labels, so the worker can
//! find everything it made by label.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::domain::{
    CacheVolume, Deployment, DeploymentSpec, EngineDefaults, EngineKind, ModelSource, RUN_AS_USER,
    SecurityProfile, canonical_json,
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
/// On a namespace that existed before its project: it survives the project.
pub const LABEL_NAMESPACE_ADOPTED: &str = "modelplane.io/namespace-adopted";
pub const ANNOTATION_CONFIG_HASH: &str = "modelplane.io/config-hash";
pub const ANNOTATION_GENERATION: &str = "modelplane.io/generation";
/// The value of `app.kubernetes.io/name` on every model server pod.
pub const MODEL_SERVER: &str = "model-server";

const MODEL_MOUNT: &str = "/models";
const CACHE_MOUNT: &str = "/cache";
const DEFAULT_SHM: &str = "2Gi";

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
}

/// Where the route attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayRef {
    pub namespace: String,
    pub name: String,
    pub section: Option<String>,
}

/// Every object of one deployment record.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredObjects {
    pub namespace: Value,
    pub deployment: Value,
    pub service: Value,
    /// `None` when no Gateway is configured for the deployment.
    pub http_route: Option<Value>,
    /// `None` for one replica or none: a budget would only block node drains.
    pub disruption_budget: Option<Value>,
    pub gateway: Option<GatewayRef>,
}

impl DesiredObjects {
    /// A digest of everything that will be applied; equal digests mean nothing to write.
    pub fn digest(&self) -> String {
        let mut all = json!([
            self.namespace,
            self.deployment,
            self.service,
            self.http_route
        ]);
        if let Some(budget) = &self.disruption_budget {
            all.as_array_mut().expect("an array").push(budget.clone());
        }
        hex::encode(Sha256::digest(canonical_json(&all).as_bytes()))
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

/// Labels on every object: the selector, ownership, and the user's labels.
fn object_labels(record: &Deployment, config: &BuildConfig) -> BTreeMap<String, String> {
    let mut labels = record.spec.labels.clone();
    labels.extend(system_labels(record, config));
    labels
}

/// Labels on the pods: modelplane's and the spec's `podLabels`, but not its `labels`, so a
/// cosmetic relabelling never reloads a model.
fn pod_labels(record: &Deployment, config: &BuildConfig) -> BTreeMap<String, String> {
    let mut labels = record.spec.pod_labels.clone();
    labels.extend(system_labels(record, config));
    labels
}

/// The selector, ownership and engine labels modelplane sets on everything it makes.
fn system_labels(record: &Deployment, config: &BuildConfig) -> BTreeMap<String, String> {
    let mut labels = selector_labels(record);
    labels.insert(LABEL_MANAGED_BY.into(), "modelplane".into());
    labels.insert(LABEL_PART_OF.into(), "modelplane".into());
    labels.insert(LABEL_PROJECT.into(), record.project.clone());
    labels.insert(LABEL_INSTALLATION.into(), config.installation.clone());
    labels.insert(LABEL_ENGINE.into(), record.spec.engine.kind.as_str().into());
    labels
}

/// The image an engine runs: the spec's, else the server default for the kind.
pub fn engine_image(spec: &DeploymentSpec, engines: &EngineDefaults) -> String {
    spec.engine.image.clone().unwrap_or_else(|| {
        match spec.engine.kind {
            EngineKind::Vllm => &engines.vllm_image,
            EngineKind::Sglang => &engines.sglang_image,
            EngineKind::Tgi => &engines.tgi_image,
            EngineKind::Sim => &engines.sim_image,
        }
        .clone()
    })
}

/// The engine's HTTP port (always set on a parsed spec).
pub fn engine_port(spec: &DeploymentSpec) -> i64 {
    spec.engine.port.unwrap_or(8000)
}

/// The gateway a deployment routes through, if any.
pub fn gateway_of(spec: &DeploymentSpec, config: &BuildConfig) -> Option<GatewayRef> {
    let text = spec
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
pub fn route_path_prefix(record: &Deployment) -> String {
    crate::domain::effective_path_prefix(&record.spec, &record.project, &record.name)
}

/// Builds every object of `record`, to live in `namespace` (`adopted`: the namespace
/// existed before its project and must survive it).
pub fn desired_objects(
    record: &Deployment,
    namespace: &str,
    adopted: bool,
    config: &BuildConfig,
) -> DesiredObjects {
    let labels = object_labels(record, config);
    let gateway = gateway_of(&record.spec, config);
    let mut namespace_object = namespace_object(record, namespace, config);
    if adopted {
        namespace_object["metadata"]["labels"][LABEL_NAMESPACE_ADOPTED] = json!("true");
    }
    DesiredObjects {
        namespace: namespace_object,
        deployment: deployment_object(record, namespace, &labels, config),
        service: service_object(record, namespace, &labels),
        http_route: gateway
            .as_ref()
            .map(|gw| route_object(record, namespace, &labels, gw)),
        disruption_budget: (record.spec.replica_count() > 1)
            .then(|| disruption_budget_object(record, namespace, &labels)),
        gateway,
    }
}

/// At most one replica down at a time for voluntary disruptions (node drains, upgrades),
/// so a drain never takes every replica of a model at once.
fn disruption_budget_object(
    record: &Deployment,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(record, namespace, labels),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(record)},
        }
    })
}

fn namespace_object(record: &Deployment, namespace: &str, config: &BuildConfig) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "labels": {
                LABEL_MANAGED_BY: "modelplane",
                LABEL_PROJECT: record.project,
                LABEL_INSTALLATION: config.installation,
            }
        }
    })
}

fn metadata(record: &Deployment, namespace: &str, labels: &BTreeMap<String, String>) -> Value {
    let mut annotations = record.spec.annotations.clone();
    annotations.insert(ANNOTATION_GENERATION.into(), record.generation.to_string());
    json!({
        "name": record.name,
        "namespace": namespace,
        "labels": labels,
        "annotations": annotations,
    })
}

fn deployment_object(
    record: &Deployment,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    config: &BuildConfig,
) -> Value {
    let spec = &record.spec;
    let pod_spec = pod_spec(record, config);
    // The hash of everything that shapes a pod, plus the restart marker: a change rolls the pods.
    let hash_input = json!([pod_spec, record.restarted_at]);
    let config_hash = &hex::encode(Sha256::digest(canonical_json(&hash_input).as_bytes()))[..16];
    let mut pod_annotations = spec.annotations.clone();
    pod_annotations.insert(ANNOTATION_CONFIG_HASH.into(), config_hash.to_owned());
    let startup = startup_timeout_seconds(spec, &config.engines);
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(record, namespace, labels),
        "spec": {
            "replicas": spec.replica_count(),
            "selector": {"matchLabels": selector_labels(record)},
            "strategy": rollout_strategy(spec),
            // Model loading counts against the deadline, so it must outlast the startup budget.
            "progressDeadlineSeconds": startup + 120,
            "template": {
                "metadata": {"labels": pod_labels(record, config), "annotations": pod_annotations},
                "spec": pod_spec,
            }
        }
    })
}

/// A rolling update; GPU pods go one at a time without surge (see `RolloutSpec`).
fn rollout_strategy(spec: &DeploymentSpec) -> Value {
    let gpu_pods = gpu_count(spec) > 0;
    let (surge, unavailable) = if gpu_pods {
        (json!(0), json!(1))
    } else {
        (json!("25%"), json!("25%"))
    };
    let is_zero = |v: &Value| *v == json!(0) || *v == json!("0%");
    let unavailable = spec.rollout.max_unavailable.clone().unwrap_or(unavailable);
    let surge = match &spec.rollout.max_surge {
        Some(surge) => surge.clone(),
        // Asked never to go below `replicas`: the rollout then needs one pod of surge.
        None if is_zero(&unavailable) && is_zero(&surge) => json!(1),
        None => surge,
    };
    json!({
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}
    })
}

fn startup_timeout_seconds(spec: &DeploymentSpec, engines: &EngineDefaults) -> i64 {
    spec.probes
        .startup_timeout_seconds
        .unwrap_or(engines.startup_timeout_seconds)
}

fn health_path(spec: &DeploymentSpec) -> String {
    spec.probes
        .health_path
        .clone()
        .unwrap_or_else(|| "/health".to_owned())
}

/// GPUs per pod: the spec's count, else the tensor-parallel size, else none.
pub fn gpu_count(spec: &DeploymentSpec) -> i64 {
    let gpu = spec.resources.gpu.as_ref();
    gpu.and_then(|g| g.count)
        .or(spec.engine.tensor_parallel_size)
        .unwrap_or(if gpu.is_some() { 1 } else { 0 })
}

/// The reference the engine loads the model from, and how it gets there.
struct ModelLocation {
    /// What the engine is told (`org/name`, `/models/path`, `s3://…`).
    reference: String,
    volumes: Vec<Value>,
    mounts: Vec<Value>,
    init_containers: Vec<Value>,
}

fn model_location(spec: &DeploymentSpec, config: &BuildConfig) -> ModelLocation {
    let read_only_mount = json!({"name": "model", "mountPath": MODEL_MOUNT, "readOnly": true});
    match spec.model_source() {
        ModelSource::HuggingFace { repo } => ModelLocation {
            reference: repo,
            volumes: vec![],
            mounts: vec![],
            init_containers: vec![],
        },
        ModelSource::Pvc { claim, path } => ModelLocation {
            reference: join_path(MODEL_MOUNT, &path),
            volumes: vec![
                json!({"name": "model", "persistentVolumeClaim": {"claimName": claim, "readOnly": true}}),
            ],
            mounts: vec![read_only_mount],
            init_containers: vec![],
        },
        // An OCI artifact mounted as an image volume: no copy, read-only, cached by the node.
        ModelSource::Oci { reference } => ModelLocation {
            reference: MODEL_MOUNT.to_owned(),
            volumes: vec![
                json!({"name": "model", "image": {"reference": reference, "pullPolicy": "IfNotPresent"}}),
            ],
            mounts: vec![read_only_mount],
            init_containers: vec![],
        },
        // Copied by an init container into a pod-local volume before the engine starts.
        ModelSource::S3 { bucket, key } => {
            let source = format!("s3://{bucket}/{key}");
            let mut init = json!({
                "name": "fetch-model",
                "image": config.s3_downloader_image,
                "command": ["aws", "s3", "sync", source, MODEL_MOUNT],
                "volumeMounts": [{"name": "model", "mountPath": MODEL_MOUNT}],
            });
            if let Some(secret) = &spec.model.secret_ref {
                // The Secret's keys (AWS_ACCESS_KEY_ID, …) become the downloader's environment.
                init["envFrom"] = json!([{"secretRef": {"name": secret.name}}]);
            }
            ModelLocation {
                reference: MODEL_MOUNT.to_owned(),
                volumes: vec![json!({"name": "model", "emptyDir": {}})],
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
fn engine_command(spec: &DeploymentSpec, model: &str) -> (Vec<String>, Vec<String>) {
    let served = spec.model.served_name.clone().unwrap_or_default();
    let port = engine_port(spec).to_string();
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

fn pod_spec(record: &Deployment, config: &BuildConfig) -> Value {
    let spec = &record.spec;
    let model = model_location(spec, config);
    let (command, args) = engine_command(spec, &model.reference);
    let port = engine_port(spec);
    let health = health_path(spec);
    let startup = startup_timeout_seconds(spec, &config.engines);

    let mut env: Vec<Value> = Vec::new();
    if let (ModelSource::HuggingFace { .. }, Some(secret)) =
        (spec.model_source(), &spec.model.secret_ref)
    {
        // The hub token comes from the Secret at run time; modelplane never sees it.
        env.push(json!({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}}));
    }
    let mut volumes = model.volumes;
    let mut mounts = model.mounts;
    let restricted = spec.security.profile == SecurityProfile::Restricted;
    // Under `restricted` the server is not root and cannot write to the image's home: give
    // the download cache a writable place even when the spec asks for none.
    let cache = spec
        .storage
        .cache
        .clone()
        .or_else(|| restricted.then(CacheVolume::default));
    if let Some(cache) = &cache {
        let volume = match &cache.claim_name {
            Some(claim) => json!({"name": "cache", "persistentVolumeClaim": {"claimName": claim}}),
            None => match &cache.size_limit {
                Some(size) => json!({"name": "cache", "emptyDir": {"sizeLimit": size}}),
                None => json!({"name": "cache", "emptyDir": {}}),
            },
        };
        volumes.push(volume);
        mounts.push(json!({"name": "cache", "mountPath": CACHE_MOUNT}));
        env.push(json!({"name": "HF_HOME", "value": CACHE_MOUNT}));
    }
    let shm = spec
        .resources
        .shared_memory
        .clone()
        .or_else(|| (spec.engine.kind != EngineKind::Sim).then(|| DEFAULT_SHM.to_owned()));
    if let Some(size) = shm {
        // Engines exchange tensors through /dev/shm; the container default (64 MiB) is too small.
        volumes.push(json!({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}));
        mounts.push(json!({"name": "shm", "mountPath": "/dev/shm"}));
    }
    for var in &spec.engine.env {
        env.push(match (&var.value, &var.secret_ref) {
            (_, Some(secret)) => json!({"name": var.name, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}}),
            // The API server does not store an empty value (`omitempty`): neither do we.
            (Some(value), None) if !value.is_empty() => json!({"name": var.name, "value": value}),
            (_, None) => json!({"name": var.name}),
        });
    }

    let mut limits = Map::new();
    let mut requests = Map::new();
    let pods = &config.engines.pods;
    // A GPU engine needs CPU and memory too: without a request it would be `Burstable` on
    // nothing but its GPUs. The spec's values are requests and limits; the defaults only
    // requests.
    let (default_cpu, default_memory) = match spec.engine.kind {
        EngineKind::Sim => ("100m", "128Mi"),
        _ => (pods.cpu_request.as_str(), pods.memory_request.as_str()),
    };
    match &spec.resources.cpu {
        Some(cpu) => {
            requests.insert("cpu".into(), json!(cpu));
            limits.insert("cpu".into(), json!(cpu));
        }
        None => {
            requests.insert("cpu".into(), json!(default_cpu));
        }
    }
    match &spec.resources.memory {
        Some(memory) => {
            requests.insert("memory".into(), json!(memory));
            limits.insert("memory".into(), json!(memory));
        }
        None => {
            requests.insert("memory".into(), json!(default_memory));
        }
    }
    let gpus = gpu_count(spec);
    if gpus > 0 {
        let name = spec
            .resources
            .gpu
            .as_ref()
            .and_then(|g| g.resource_name.clone())
            .unwrap_or_else(|| config.engines.gpu_resource_name.clone());
        limits.insert(name.clone(), json!(gpus.to_string()));
        requests.insert(name, json!(gpus.to_string()));
    }

    let probe = |period: i64, failures: i64| {
        json!({
            "httpGet": {"path": health, "port": "http"},
            "periodSeconds": period,
            "failureThreshold": failures,
            // A loaded engine answers its health check slowly; the default 1 s would
            // take busy pods out of rotation, or restart them.
            "timeoutSeconds": 5,
        })
    };
    let drain = spec.shutdown.drain_seconds.unwrap_or(pods.drain_seconds);
    let grace = spec
        .shutdown
        .grace_period_seconds
        .unwrap_or(pods.termination_grace_seconds)
        .max(drain + 1);
    let mut container = json!({
        "name": "server",
        "image": engine_image(spec, &config.engines),
        "command": command,
        "args": args,
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "startupProbe": probe(10, (startup + 9) / 10),
        "readinessProbe": probe(5, 3),
        "livenessProbe": probe(10, 6),
    });
    if !env.is_empty() {
        container["env"] = json!(env);
    }
    if !mounts.is_empty() {
        container["volumeMounts"] = json!(mounts);
    }
    let mut resources = json!({"requests": requests});
    if !limits.is_empty() {
        resources["limits"] = json!(limits);
    }
    container["resources"] = resources;
    if drain > 0 {
        // Keep serving while endpoints and the Gateway stop routing here (no shell needed).
        container["lifecycle"] = json!({"preStop": {"sleep": {"seconds": drain}}});
    }
    // What PodSecurity `restricted` asks of every container (Pod Security Standards).
    let container_security = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
    });
    let mut init_containers = model.init_containers;
    if restricted {
        container["securityContext"] = container_security.clone();
        for init in &mut init_containers {
            init["securityContext"] = container_security.clone();
        }
    }

    let mut pod = json!({
        "containers": [container],
        // Model servers never call the Kubernetes API.
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "terminationGracePeriodSeconds": grace,
    });
    // Replicas on different nodes where possible: one node's loss is not all of them. Set
    // whatever the replica count (it costs nothing for one), so scaling never changes the
    // pod template and rolls the pods.
    pod["topologySpreadConstraints"] = json!([{
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": selector_labels(record)},
    }]);
    if restricted {
        pod["securityContext"] = json!({
            "runAsNonRoot": true,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            // Volumes (cache, PVCs) become writable by the server's group.
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        });
    }
    if !init_containers.is_empty() {
        pod["initContainers"] = json!(init_containers);
    }
    if !volumes.is_empty() {
        pod["volumes"] = json!(volumes);
    }
    let sched = &spec.scheduling;
    if !sched.node_selector.is_empty() {
        pod["nodeSelector"] = json!(sched.node_selector);
    }
    if !sched.tolerations.is_empty() {
        let tolerations: Vec<Value> = sched
            .tolerations
            .iter()
            .map(|t| {
                let mut v = json!({});
                for (key, value) in [
                    ("key", t.key.as_ref().map(|s| json!(s))),
                    ("operator", t.operator.as_ref().map(|s| json!(s))),
                    ("value", t.value.as_ref().map(|s| json!(s))),
                    ("effect", t.effect.as_ref().map(|s| json!(s))),
                    ("tolerationSeconds", t.toleration_seconds.map(|s| json!(s))),
                ] {
                    if let Some(value) = value {
                        v[key] = value;
                    }
                }
                v
            })
            .collect();
        pod["tolerations"] = json!(tolerations);
    }
    if let Some(name) = &sched.scheduler_name {
        pod["schedulerName"] = json!(name);
    }
    if let Some(name) = &sched.priority_class_name {
        pod["priorityClassName"] = json!(name);
    }
    if let Some(product) = spec.resources.gpu.as_ref().and_then(|g| g.product.clone()) {
        pod["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": config.gpu_product_label, "operator": "In", "values": [product]}
            ]}]
        }}});
    }
    pod
}

fn service_object(
    record: &Deployment,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(record, namespace, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(record),
            "ports": [{"name": "http", "port": engine_port(&record.spec), "targetPort": "http", "protocol": "TCP"}],
        }
    })
}

fn route_object(
    record: &Deployment,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    gateway: &GatewayRef,
) -> Value {
    let mut parent = json!({
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "namespace": gateway.namespace,
        "name": gateway.name,
    });
    if let Some(section) = &gateway.section {
        parent["sectionName"] = json!(section);
    }
    let prefix = route_path_prefix(record);
    let mut rule = json!({
        "matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
        "backendRefs": [{"group": "", "kind": "Service", "name": record.name, "port": engine_port(&record.spec), "weight": 1}],
    });
    if prefix != "/" {
        // The engine serves /v1/...; strip the route's prefix on the way in.
        rule["filters"] = json!([{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}]);
    }
    let mut spec = json!({"parentRefs": [parent], "rules": [rule]});
    if let Some(host) = &record.spec.routing.hostname {
        spec["hostnames"] = json!([host]);
    }
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(record, namespace, labels),
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
    use k8s_openapi::api::core::v1::{Namespace, Service};
    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::domain::{DeploymentStatus, SpecLimits};

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
        }
    }

    fn record(name: &str, spec: serde_json::Value) -> Deployment {
        let spec: DeploymentSpec = serde_json::from_value(spec).unwrap();
        let spec = spec.parse(name, &SpecLimits::default()).unwrap();
        Deployment {
            id: Uuid::parse_str("01a200c1-83bb-709a-83d2-8acee715d77e").unwrap(),
            project: "team-a".into(),
            name: name.into(),
            generation: 3,
            status: DeploymentStatus::pending(spec.replica_count()),
            spec,
            restarted_at: None,
            deletion_requested_at: None,
            created_at: Utc.with_ymd_and_hms(2026, 11, 22, 0, 0, 0).unwrap(),
            updated_at: Utc.with_ymd_and_hms(2026, 11, 22, 0, 0, 0).unwrap(),
        }
    }

    fn build(name: &str, spec: serde_json::Value) -> DesiredObjects {
        let objects = desired_objects(&record(name, spec), "team-a", false, &config());
        // Every object is a valid instance of its Kubernetes type.
        serde_json::from_value::<Namespace>(objects.namespace.clone()).unwrap();
        serde_json::from_value::<K8sDeployment>(objects.deployment.clone()).unwrap();
        serde_json::from_value::<Service>(objects.service.clone()).unwrap();
        if let Some(budget) = &objects.disruption_budget {
            serde_json::from_value::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(
                budget.clone(),
            )
            .unwrap();
        }
        objects
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
        let hash = |r: &Deployment| {
            desired_objects(r, "team-a", false, &config()).deployment["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CONFIG_HASH].clone()
        };
        let base = record("qwen", json!({"model": {"source": "hf://a/b"}}));
        let mut restarted = base.clone();
        restarted.restarted_at = Some(Utc.with_ymd_and_hms(2026, 11, 22, 1, 0, 0).unwrap());
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
        let template = |r: &Deployment| {
            desired_objects(r, "team-a", false, &config()).deployment["spec"]["template"].clone()
        };
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
        let objects = desired_objects(&r, "team-a", false, &cfg);
        assert!(objects.http_route.is_none());
        let limits =
            &objects.deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"];
        assert_eq!(limits["nvidia.com/gpu"], "4");
        assert_eq!(route_path_prefix(&r), "/team-a/qwen");
    }
}
