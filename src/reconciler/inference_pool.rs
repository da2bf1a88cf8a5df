//! InferencePool mode: the Gateway API Inference Extension's `InferencePool`
//! (inference.networking.k8s.io/v1) over the deployment's pods, and its endpoint picker
//! (EPP): a Deployment, Service, ServiceAccount, Role, RoleBinding and the ConfigMap with its
//! scorer profile. Typed here, since no crate carries the InferencePool type; the fields
//! are those of the inference extension's `api/v1/inferencepool_types.go`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment as K8sDeployment, DeploymentSpec as K8sDeploymentSpec,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, GRPCAction,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, Service, ServiceAccount, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition as K8sCondition, LabelSelector, ObjectMeta,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::desired::{ANNOTATION_GENERATION, LABEL_NAME, Target, track_selector_labels};

/// The EPP's ports, as the inference extension's chart serves them.
pub const EPP_GRPC_PORT: i32 = 9002;
pub const EPP_HEALTH_PORT: i32 = 9003;
pub const EPP_METRICS_PORT: i32 = 9090;
/// `app.kubernetes.io/name` of the endpoint picker's objects.
pub const ENDPOINT_PICKER: &str = "endpoint-picker";
const CONFIG_FILE: &str = "epp.yaml";

/// `InferencePool.spec`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "inference.networking.k8s.io",
    version = "v1",
    kind = "InferencePool",
    plural = "inferencepools",
    namespaced,
    status = "InferencePoolStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolSpec {
    /// The model server pods of the pool.
    pub selector: PoolSelector,
    /// The port(s) the model servers serve on.
    pub target_ports: Vec<PoolPort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker_ref: Option<EndpointPickerRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PoolSelector {
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct PoolPort {
    pub number: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPickerRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PoolPort>,
    /// `FailClose` (no picker, no request) or `FailOpen`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_mode: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct InferencePoolStatus {
    #[serde(default)]
    pub parents: Vec<PoolParentStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PoolParentStatus {
    pub parent_ref: PoolParentRef,
    #[serde(default)]
    pub conditions: Vec<K8sCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct PoolParentRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

/// Every object of InferencePool mode for one deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolObjects {
    pub pool: InferencePool,
    pub config_map: ConfigMap,
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
    pub picker: K8sDeployment,
    pub picker_service: Service,
}

/// The name of a deployment's endpoint picker objects.
pub fn picker_name(deployment: &str) -> String {
    format!("{deployment}-epp")
}

/// The objects of InferencePool mode. `labels` are the deployment's object labels; the
/// picker's pods get their own `app.kubernetes.io/name`, so the model Service and the pool
/// never select them.
pub fn pool_objects(
    t: &Target,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    image: &str,
) -> PoolObjects {
    let name = t.record.name.clone();
    let picker = picker_name(&name);
    let meta = |name: &str, labels: &BTreeMap<String, String>| ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(labels.clone()),
        annotations: Some(BTreeMap::from([(
            ANNOTATION_GENERATION.to_owned(),
            t.record.generation.to_string(),
        )])),
        ..ObjectMeta::default()
    };
    let mut picker_labels = labels.clone();
    picker_labels.insert(LABEL_NAME.into(), ENDPOINT_PICKER.into());
    let picker_selector = BTreeMap::from([
        (LABEL_NAME.to_owned(), ENDPOINT_PICKER.to_owned()),
        ("app.kubernetes.io/instance".to_owned(), picker.clone()),
    ]);
    picker_labels.extend(picker_selector.clone());

    let mut pool = InferencePool::new(
        &name,
        InferencePoolSpec {
            selector: PoolSelector {
                match_labels: track_selector_labels(t),
            },
            target_ports: vec![PoolPort {
                number: t.serving.port,
            }],
            endpoint_picker_ref: Some(EndpointPickerRef {
                group: Some(String::new()),
                kind: Some("Service".into()),
                name: picker.clone(),
                port: Some(PoolPort {
                    number: EPP_GRPC_PORT,
                }),
                failure_mode: Some("FailClose".into()),
            }),
        },
    );
    pool.metadata = meta(&name, labels);

    let (queue, kv_cache, prefix_cache) = t
        .serving
        .spec
        .routing
        .inference_pool
        .as_ref()
        .and_then(|p| p.scorers.clone())
        .unwrap_or_default()
        .resolved();
    let config_map = ConfigMap {
        metadata: meta(&picker, &picker_labels),
        data: Some(BTreeMap::from([(
            CONFIG_FILE.to_owned(),
            scorer_config(queue, kv_cache, prefix_cache),
        )])),
        ..ConfigMap::default()
    };
    let service_account = ServiceAccount {
        metadata: meta(&picker, &picker_labels),
        automount_service_account_token: Some(true),
        ..ServiceAccount::default()
    };
    // The picker reads its pool and the pods behind it; nothing else, and nothing it writes.
    let role = Role {
        metadata: meta(&picker, &picker_labels),
        rules: Some(vec![
            PolicyRule {
                api_groups: Some(vec!["inference.networking.k8s.io".into()]),
                resources: Some(vec!["inferencepools".into()]),
                verbs: vec!["get".into(), "list".into(), "watch".into()],
                ..PolicyRule::default()
            },
            PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["pods".into()]),
                verbs: vec!["get".into(), "list".into(), "watch".into()],
                ..PolicyRule::default()
            },
        ]),
    };
    let role_binding = RoleBinding {
        metadata: meta(&picker, &picker_labels),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: picker.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: picker.clone(),
            namespace: Some(namespace.to_owned()),
            ..Subject::default()
        }]),
    };
    let port = |name: &str, number: i32| ContainerPort {
        name: Some(name.into()),
        container_port: number,
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    };
    let grpc_probe = || Probe {
        grpc: Some(GRPCAction {
            port: EPP_HEALTH_PORT,
            service: Some("inference-extension".into()),
        }),
        period_seconds: Some(10),
        ..Probe::default()
    };
    let container = Container {
        name: "epp".into(),
        image: Some(image.to_owned()),
        args: Some(
            [
                "--pool-name",
                &name,
                "--pool-namespace",
                namespace,
                "--config-file",
                &format!("/config/{CONFIG_FILE}"),
                "--grpc-port",
                &EPP_GRPC_PORT.to_string(),
                "--grpc-health-port",
                &EPP_HEALTH_PORT.to_string(),
                "--metrics-port",
                &EPP_METRICS_PORT.to_string(),
                "--zap-encoder",
                "json",
            ]
            .map(str::to_owned)
            .to_vec(),
        ),
        env: Some(vec![EnvVar {
            name: "NAMESPACE".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.namespace".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        ports: Some(vec![
            port("grpc", EPP_GRPC_PORT),
            port("grpc-health", EPP_HEALTH_PORT),
            port("metrics", EPP_METRICS_PORT),
        ]),
        liveness_probe: Some(grpc_probe()),
        readiness_probe: Some(grpc_probe()),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("100m".into())),
                ("memory".to_owned(), Quantity("128Mi".into())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity("512Mi".into()),
            )])),
            ..ResourceRequirements::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "config".into(),
            mount_path: "/config".into(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        security_context: Some(super::desired::restricted_container()),
        ..Container::default()
    };
    let picker_deployment = K8sDeployment {
        metadata: meta(&picker, &picker_labels),
        spec: Some(K8sDeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(picker_selector.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(picker_labels.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(picker.clone()),
                    containers: vec![container],
                    // Requests in flight finish before the picker goes (as upstream's chart).
                    termination_grace_period_seconds: Some(130),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(crate::domain::RUN_AS_USER),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    volumes: Some(vec![Volume {
                        name: "config".into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: picker.clone(),
                            ..ConfigMapVolumeSource::default()
                        }),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..K8sDeploymentSpec::default()
        }),
        ..K8sDeployment::default()
    };
    let service_port = |name: &str, number: i32, app_protocol: Option<&str>| ServicePort {
        name: Some(name.into()),
        port: number,
        target_port: Some(IntOrString::Int(number)),
        protocol: Some("TCP".into()),
        app_protocol: app_protocol.map(str::to_owned),
        ..ServicePort::default()
    };
    let picker_service = Service {
        metadata: meta(&picker, &picker_labels),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(picker_selector),
            ports: Some(vec![
                // The Gateway speaks ext-proc (gRPC over HTTP/2) to the picker.
                service_port("grpc", EPP_GRPC_PORT, Some("http2")),
                service_port("grpc-health", EPP_HEALTH_PORT, None),
                service_port("metrics", EPP_METRICS_PORT, None),
            ]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    PoolObjects {
        pool,
        config_map,
        service_account,
        role,
        role_binding,
        picker: picker_deployment,
        picker_service,
    }
}

/// The picker's `EndpointPickerConfig`: the queue, KV-cache and prefix-cache scorers in one
/// scheduling profile with the given weights (a scorer weighted 0 is left out).
fn scorer_config(queue: i64, kv_cache: i64, prefix_cache: i64) -> String {
    let scorers = [
        ("queue-scorer", queue),
        ("kv-cache-utilization-scorer", kv_cache),
        ("prefix-cache-scorer", prefix_cache),
    ];
    let mut out = String::from(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n",
    );
    for (plugin, weight) in scorers {
        if weight > 0 {
            out.push_str(&format!("- type: {plugin}\n"));
        }
    }
    out.push_str("schedulingProfiles:\n- name: default\n  plugins:\n");
    for (plugin, weight) in scorers {
        if weight > 0 {
            out.push_str(&format!("  - pluginRef: {plugin}\n    weight: {weight}\n"));
        }
    }
    out
}
