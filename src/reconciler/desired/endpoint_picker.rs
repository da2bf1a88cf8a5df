//! The endpoint picker (EPP) of a deployment in InferencePool mode: its Deployment and
//! Service, the ServiceAccount, Role and RoleBinding it reads its pool with, and the
//! ConfigMap with its scorer profile, all named `<deployment>-epp`; and the
//! ClusterRoleBinding (`modelplane:epp:<namespace>:<deployment>`) to the one shared
//! ClusterRole its metrics endpoint authenticates scrapers with.
//!
//! The permissions are the picker's own chart's (gateway-api-inference-extension v1.4.0,
//! the default image's release: `config/charts/inferencepool/templates/rbac.yaml` and
//! `config/charts/epplib/templates/_rbac.yaml`), less the `/metrics` non-resource rule,
//! which is for whoever scrapes it, not for the picker.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment as K8sDeployment, DeploymentSpec as K8sDeploymentSpec,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, GRPCAction,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, Service, ServiceAccount, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{LABEL_NAME, Target, generation_metadata, restricted_container};

/// The EPP's ports, as the inference extension's chart serves them.
pub const EPP_GRPC_PORT: i32 = 9002;
pub const EPP_HEALTH_PORT: i32 = 9003;
pub const EPP_METRICS_PORT: i32 = 9090;
/// `app.kubernetes.io/name` of the endpoint picker's objects.
pub const ENDPOINT_PICKER: &str = "endpoint-picker";
const CONFIG_FILE: &str = "epp.yaml";

/// The ClusterRole every picker's metrics endpoint needs: with `--metrics-endpoint-auth`
/// (on by default) it checks a scraper's token with a TokenReview and its right to
/// `/metrics` with a SubjectAccessReview, both cluster-scoped.
pub const PICKER_METRICS_AUTH_ROLE: &str = "modelplane:endpoint-picker-metrics-auth";

/// The name of a deployment's endpoint picker objects.
pub fn picker_name(deployment: &str) -> String {
    format!("{deployment}-epp")
}

/// The name of a picker's ClusterRoleBinding: cluster-wide, so the namespace is in it.
pub fn picker_cluster_binding_name(namespace: &str, deployment: &str) -> String {
    format!("modelplane:epp:{namespace}:{deployment}")
}

/// What every object of one deployment's endpoint picker shares.
pub(super) struct Picker<'a> {
    t: &'a Target<'a>,
    namespace: &'a str,
    /// The pool's name: the deployment's.
    pool: &'a str,
    /// The objects' name ([`picker_name`]).
    name: String,
    /// The deployment's object labels, with the picker's own name and instance: its pods
    /// are not model servers, so neither the model Service nor the pool selects them.
    labels: BTreeMap<String, String>,
    /// What selects the picker's pods.
    selector: BTreeMap<String, String>,
}

impl<'a> Picker<'a> {
    /// `labels`: the deployment's object labels.
    pub(super) fn new(
        t: &'a Target<'a>,
        namespace: &'a str,
        labels: &BTreeMap<String, String>,
    ) -> Self {
        let name = picker_name(&t.record.name);
        let mut picker_labels = labels.clone();
        picker_labels.insert(LABEL_NAME.into(), ENDPOINT_PICKER.into());
        let selector = BTreeMap::from([
            (LABEL_NAME.to_owned(), ENDPOINT_PICKER.to_owned()),
            ("app.kubernetes.io/instance".to_owned(), name.clone()),
        ]);
        picker_labels.extend(selector.clone());
        Picker {
            t,
            namespace,
            pool: &t.record.name,
            name,
            labels: picker_labels,
            selector,
        }
    }

    fn metadata(&self) -> ObjectMeta {
        generation_metadata(self.t, &self.name, self.namespace, &self.labels)
    }

    /// The scorer profile, from `spec.routing.inferencePool.scorers`.
    pub(super) fn config_map(&self) -> ConfigMap {
        let (queue, kv_cache, prefix_cache) = self
            .t
            .serving
            .spec
            .routing
            .inference_pool
            .as_ref()
            .and_then(|p| p.scorers.clone())
            .unwrap_or_default()
            .resolved();
        let config = match self.t.serving.roles {
            Some(_) => super::disaggregation::pd_picker_config(queue, prefix_cache),
            None => scorer_config(queue, kv_cache, prefix_cache),
        };
        ConfigMap {
            metadata: self.metadata(),
            data: Some(BTreeMap::from([(CONFIG_FILE.to_owned(), config)])),
            ..ConfigMap::default()
        }
    }

    pub(super) fn service_account(&self) -> ServiceAccount {
        ServiceAccount {
            metadata: self.metadata(),
            automount_service_account_token: Some(true),
            ..ServiceAccount::default()
        }
    }

    /// The picker reads its pool, the pods behind it, and the InferenceObjectives and
    /// InferenceModelRewrites of its namespace (it watches them when their CRDs are
    /// installed); nothing else, and nothing it writes.
    pub(super) fn role(&self) -> Role {
        let read = |group: &str, resources: &[&str]| PolicyRule {
            api_groups: Some(vec![group.into()]),
            resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..PolicyRule::default()
        };
        Role {
            metadata: self.metadata(),
            rules: Some(vec![
                read("inference.networking.k8s.io", &["inferencepools"]),
                read(
                    "inference.networking.x-k8s.io",
                    &["inferenceobjectives", "inferencemodelrewrites"],
                ),
                read("", &["pods"]),
            ]),
        }
    }

    /// The shared ClusterRole of [`PICKER_METRICS_AUTH_ROLE`]: one for every picker of the
    /// installation, so it carries no deployment's labels and outlives them.
    pub(super) fn metrics_auth_role(&self) -> ClusterRole {
        let create = |group: &str, resource: &str| PolicyRule {
            api_groups: Some(vec![group.into()]),
            resources: Some(vec![resource.into()]),
            verbs: vec!["create".into()],
            ..PolicyRule::default()
        };
        let labels = self
            .labels
            .iter()
            .filter(|(k, _)| k.as_str() == super::LABEL_MANAGED_BY)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        ClusterRole {
            metadata: ObjectMeta {
                name: Some(PICKER_METRICS_AUTH_ROLE.into()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            rules: Some(vec![
                create("authentication.k8s.io", "tokenreviews"),
                create("authorization.k8s.io", "subjectaccessreviews"),
            ]),
            ..ClusterRole::default()
        }
    }

    /// That ClusterRole, to this picker's ServiceAccount. Cluster-scoped, so no owner
    /// reference can remove it: the worker deletes it by its labels with the deployment.
    pub(super) fn metrics_auth_binding(&self) -> ClusterRoleBinding {
        let mut metadata = self.metadata();
        metadata.namespace = None;
        metadata.name = Some(picker_cluster_binding_name(
            self.namespace,
            &self.t.record.name,
        ));
        ClusterRoleBinding {
            metadata,
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "ClusterRole".into(),
                name: PICKER_METRICS_AUTH_ROLE.into(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: self.name.clone(),
                namespace: Some(self.namespace.to_owned()),
                ..Subject::default()
            }]),
        }
    }

    /// The Role, to the picker's ServiceAccount.
    pub(super) fn role_binding(&self) -> RoleBinding {
        RoleBinding {
            metadata: self.metadata(),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Role".into(),
                name: self.name.clone(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: self.name.clone(),
                namespace: Some(self.namespace.to_owned()),
                ..Subject::default()
            }]),
        }
    }

    /// One replica of the picker running `image`, with its config mounted.
    pub(super) fn deployment(&self, image: &str) -> K8sDeployment {
        K8sDeployment {
            metadata: self.metadata(),
            spec: Some(K8sDeploymentSpec {
                replicas: Some(1),
                selector: LabelSelector {
                    match_labels: Some(self.selector.clone()),
                    ..LabelSelector::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(self.labels.clone()),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        service_account_name: Some(self.name.clone()),
                        containers: vec![self.container(image)],
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
                                name: self.name.clone(),
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
        }
    }

    fn container(&self, image: &str) -> Container {
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
        Container {
            name: "epp".into(),
            image: Some(image.to_owned()),
            args: Some(self.args()),
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
            security_context: Some(restricted_container()),
            ..Container::default()
        }
    }

    fn args(&self) -> Vec<String> {
        [
            "--pool-name",
            self.pool,
            "--pool-namespace",
            self.namespace,
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
        .to_vec()
    }

    pub(super) fn service(&self) -> Service {
        let service_port = |name: &str, number: i32, app_protocol: Option<&str>| ServicePort {
            name: Some(name.into()),
            port: number,
            target_port: Some(IntOrString::Int(number)),
            protocol: Some("TCP".into()),
            app_protocol: app_protocol.map(str::to_owned),
            ..ServicePort::default()
        };
        Service {
            metadata: self.metadata(),
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".into()),
                selector: Some(self.selector.clone()),
                ports: Some(vec![
                    // The Gateway speaks ext-proc (gRPC over HTTP/2) to the picker.
                    service_port("grpc", EPP_GRPC_PORT, Some("http2")),
                    service_port("grpc-health", EPP_HEALTH_PORT, None),
                    service_port("metrics", EPP_METRICS_PORT, None),
                ]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
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
