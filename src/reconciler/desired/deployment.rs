//! The model server Deployment: its rollout, pod template, engine command line,
//! environment, resources, probes and scheduling.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment as K8sDeployment, DeploymentSpec as K8sDeploymentSpec, DeploymentStrategy,
    RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, Lifecycle,
    LifecycleHandler, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, SecretKeySelector, SleepAction, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::model_source::{ModelLocation, empty_dir, model_location, mount, volume};
use super::{
    ANNOTATION_CONFIG_HASH, BuildConfig, Target, as_json, metadata, pod_labels,
    restricted_container, selector,
};
use crate::domain::{
    CacheStorage, EngineDefaults, EngineKind, ModelSource, PodCount, RUN_AS_USER, SchedulingSpec,
    SecretKeyRef, ServingSpec, canonical_json,
};

const CACHE_MOUNT: &str = "/cache";

/// The Deployment, and the hash of its pod template that its pods carry.
pub(super) fn deployment_object(
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

/// The image an engine runs: the spec's, else the server default for the kind.
pub fn engine_image(serving: &ServingSpec, engines: &EngineDefaults) -> String {
    let engine = &serving.spec.engine;
    engine.image.clone().unwrap_or_else(|| {
        match engine.kind {
            EngineKind::Vllm if serving.nodes > 1 => &engines.vllm_multinode_image,
            EngineKind::Vllm => &engines.vllm_image,
            EngineKind::Sglang => &engines.sglang_image,
            EngineKind::Tgi => &engines.tgi_image,
            EngineKind::Sim => &engines.sim_image,
        }
        .clone()
    })
}

/// The engine's command line.
fn engine_command(serving: &ServingSpec, model: &str) -> (Vec<String>, Vec<String>) {
    let spec = &serving.spec;
    let served = serving.served_name.clone();
    let port = serving.port.to_string();
    let tp = spec.engine.tensor_parallel_size;
    let pp = spec.engine.pipeline_parallel_size;
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
            push("--pipeline-parallel-size", pp.map(|p| p.to_string()));
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
            // The emulator's sim honours a group's parallel layout (`leader_worker_set.rs`).
            if serving.nodes > 1 {
                push("--tensor-parallel-size", tp.map(|t| t.to_string()));
                push("--pipeline-parallel-size", pp.map(|p| p.to_string()));
            }
            vec!["/app/llm-d-inference-sim".into()]
        }
    };
    args.extend(super::adapters::lora_flags(serving));
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
    env.extend(super::adapters::lora_env(serving));
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

/// Seconds the server keeps serving after it is told to stop, while endpoints and the
/// Gateway stop routing to it.
fn drain_seconds(serving: &ServingSpec, config: &BuildConfig) -> i64 {
    serving
        .spec
        .shutdown
        .drain_seconds
        .unwrap_or(config.engines.pods.drain_seconds)
}

/// The model server container. Takes `model`'s mounts; the volumes and init containers
/// they need stay there for the pod.
fn server_container(
    serving: &ServingSpec,
    config: &BuildConfig,
    model: &mut ModelLocation,
) -> Container {
    let (command, args) = engine_command(serving, &model.reference);
    let env = environment(serving, model);
    let mounts = std::mem::take(&mut model.mounts);
    let startup = startup_timeout_seconds(serving, &config.engines);
    let drain = drain_seconds(serving, config);
    let health = &serving.health_path;
    Container {
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
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        resources: Some(resources(serving, config)),
        // Keep serving while endpoints and the Gateway stop routing here (no shell needed).
        lifecycle: (drain > 0).then(|| Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction { seconds: drain }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        security_context: serving.restricted.then(restricted_container),
        ..Container::default()
    }
}

fn pod_spec(t: &Target, config: &BuildConfig) -> PodSpec {
    let serving = t.serving;
    let spec = &serving.spec;
    let mut model = model_location(serving, config);
    super::adapters::mount_claims(serving, &mut model);
    super::adapters::fetch_s3(serving, config, &mut model);
    let container = server_container(serving, config, &mut model);
    let grace = spec
        .shutdown
        .grace_period_seconds
        .unwrap_or(config.engines.pods.termination_grace_seconds)
        .max(drain_seconds(serving, config) + 1);
    let restricted = serving.restricted;
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
        security_context: restricted.then(restricted_pod),
        readiness_gates: super::adapters::readiness_gates(serving),
        init_containers: (!init_containers.is_empty()).then_some(init_containers),
        volumes: (!model.volumes.is_empty()).then_some(model.volumes),
        node_selector: (!sched.node_selector.is_empty()).then(|| sched.node_selector.clone()),
        tolerations: (!sched.tolerations.is_empty()).then(|| tolerations(sched)),
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

/// What PodSecurity `restricted` asks of the pod: a non-root user, RuntimeDefault seccomp.
fn restricted_pod() -> PodSecurityContext {
    PodSecurityContext {
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
    }
}

fn tolerations(sched: &SchedulingSpec) -> Vec<Toleration> {
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
