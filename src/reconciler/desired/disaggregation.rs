//! Prefill/decode disaggregation: a deployment's pods in two roles, each its own
//! Kubernetes Deployment (`<name>-prefill`, `<name>-decode`) labelled with the role the
//! upstream endpoint picker filters by, behind one InferencePool selecting both.
//!
//! What the pods run follows llm-d's P/D setup (llm-d-inference-scheduler
//! `deploy/config/pd-epp-config.yaml` and its `pd-sidecar`):
//! - the picker runs two scheduling profiles, `prefill` (pods labelled
//!   `llm-d.ai/role: prefill`) and `decode`, and, when a prompt's uncached part is long
//!   enough (`prefix-based-pd-decider`), names the chosen prefill pod to the decode pod in
//!   the `x-prefiller-host-port` header (`disagg-headers-handler`);
//! - every decode pod runs the routing sidecar on the serving port in front of the engine:
//!   given the header it asks the prefill pod to compute the KV cache, then has its own
//!   engine decode from it; it only calls pods of the pool (`--enable-ssrf-protection`),
//!   which it watches with a ServiceAccount of its own that reads only those (only the
//!   sidecar mounts its token);
//! - vLLM in both roles moves the KV cache with its NixlConnector (`kv_both`).

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::{
    ConfigMapProjection, Container, ContainerPort, DownwardAPIProjection, DownwardAPIVolumeFile,
    EnvVar, EnvVarSource, KeyToPath, ObjectFieldSelector, Probe, ProjectedVolumeSource,
    ResourceRequirements, ServiceAccountTokenProjection, TCPSocketAction, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};

use super::{BuildConfig, LABEL_NAME, Target, generation_metadata, restricted_container};
use crate::domain::{EngineKind, ServingRole, ServingSpec};

/// The label the upstream picker's `prefill-filter` and `decode-filter` select by
/// (llm-d-inference-scheduler `filter/bylabel/roles.go`).
pub const ROLE_LABEL: &str = "llm-d.ai/role";
/// The header naming the prefill pod (`<ip>:<port>`) to a decode pod's sidecar
/// (llm-d-inference-scheduler `pkg/common/routing/common.go`).
pub const PREFILLER_HEADER: &str = "x-prefiller-host-port";
/// The name of the routing sidecar container on decode pods.
pub const ROUTING_SIDECAR: &str = "routing-sidecar";
/// The name of the engine's port on a decode pod (the serving port, `http`, is the
/// sidecar's).
const ENGINE_PORT_NAME: &str = "engine";

/// The name of a role's Kubernetes Deployment.
pub fn role_object_name(deployment: &str, role: ServingRole) -> String {
    format!("{deployment}-{}", role.as_str())
}

/// Where a decode pod's engine listens, behind the sidecar on the serving port (the
/// sidecar's own default is 8200 for vLLM).
pub fn decode_engine_port(port: i32) -> i32 {
    if port == 8200 { 8201 } else { 8200 }
}

/// What one role's pods run: the role's counts, resources, arguments and environment, the
/// KV-cache connector for vLLM, and (decode) the engine on its port behind the sidecar.
pub(super) fn role_serving(serving: &ServingSpec, role: ServingRole) -> ServingSpec {
    let mut out = serving.for_role(role);
    if role == ServingRole::Decode {
        out.port = decode_engine_port(serving.port);
    }
    let args = &mut out.spec.engine.args;
    let named = args
        .iter()
        .any(|a| a == "--kv-transfer-config" || a.starts_with("--kv-transfer-config="));
    if out.spec.engine.kind == EngineKind::Vllm && !named {
        args.push("--kv-transfer-config".into());
        args.push(r#"{"kv_connector":"NixlConnector","kv_role":"kv_both"}"#.into());
    }
    out
}

/// Makes the decode role's Deployment serve through the routing sidecar: the engine's port
/// and probes are renamed `engine`, the sidecar takes `http` (the Service's and the pool's
/// port), runs as a native sidecar (an init container that keeps running, as upstream's
/// decode pods run it) and reads the pool with a ServiceAccount of its own.
pub(super) fn add_routing_sidecar(
    deployment: &mut K8sDeployment,
    serving: &ServingSpec,
    namespace: &str,
    pool: &str,
    config: &BuildConfig,
) {
    let Some(pod) = deployment
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
    else {
        return;
    };
    let engine_port = decode_engine_port(serving.port);
    if let Some(server) = pod.containers.first_mut() {
        for port in server.ports.iter_mut().flatten() {
            port.name = Some(ENGINE_PORT_NAME.into());
        }
        for probe in [
            server.startup_probe.as_mut(),
            server.readiness_probe.as_mut(),
            server.liveness_probe.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(get) = probe.http_get.as_mut() {
                get.port = IntOrString::String(ENGINE_PORT_NAME.into());
            }
        }
    }
    let sidecar = Container {
        name: ROUTING_SIDECAR.into(),
        image: Some(config.pd_sidecar_image.clone()),
        // Restarted with the pod's other containers: a native sidecar (KEP-753).
        restart_policy: Some("Always".into()),
        args: Some(vec![
            format!("--port={}", serving.port),
            format!("--vllm-port={engine_port}"),
            "--kv-connector=nixlv2".into(),
            "--secure-proxy=false".into(),
            "--enable-ssrf-protection=true".into(),
            format!("--inference-pool={namespace}/{pool}"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: serving.port,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("http".into()),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        resources: Some(ResourceRequirements {
            requests: Some(
                [("cpu", "100m"), ("memory", "128Mi")]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
                    .collect(),
            ),
            ..ResourceRequirements::default()
        }),
        security_context: Some(restricted_container()),
        // Only the sidecar holds the ServiceAccount's token (the engine never calls the API).
        volume_mounts: Some(vec![VolumeMount {
            name: SIDECAR_TOKEN.into(),
            mount_path: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    pod.init_containers
        .get_or_insert_with(Vec::new)
        .insert(0, sidecar);
    // The sidecar watches the pool and its pods to allow only them as prefill targets,
    // with a ServiceAccount that may read exactly those ([`sidecar_access`]). The pod keeps
    // `automountServiceAccountToken: false`; the sidecar alone mounts the token.
    pod.service_account_name = Some(sidecar_account_name(pool));
    pod.volumes
        .get_or_insert_with(Vec::new)
        .push(service_account_volume());
}

/// The routing sidecar's ServiceAccount, and the Role (read InferencePools and pods, as
/// upstream's `allowlist.go` watches them; nothing else) bound to it.
#[derive(Debug, Clone, PartialEq)]
pub struct SidecarAccess {
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
}

/// The name of a deployment's routing sidecar ServiceAccount, Role and RoleBinding.
pub fn sidecar_account_name(deployment: &str) -> String {
    format!("{deployment}-{ROUTING_SIDECAR}")
}

/// The sidecar's access objects, labelled as the deployment's (so they go with it).
pub(super) fn sidecar_access(
    t: &Target,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> SidecarAccess {
    let name = sidecar_account_name(&t.record.name);
    let mut labels = labels.clone();
    labels.insert(LABEL_NAME.into(), ROUTING_SIDECAR.into());
    let metadata = || generation_metadata(t, &name, namespace, &labels);
    let read = |group: &str, resource: &str| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: vec!["get".into(), "list".into(), "watch".into()],
        ..PolicyRule::default()
    };
    SidecarAccess {
        service_account: ServiceAccount {
            metadata: metadata(),
            automount_service_account_token: Some(false),
            ..ServiceAccount::default()
        },
        role: Role {
            metadata: metadata(),
            rules: Some(vec![
                read("inference.networking.k8s.io", "inferencepools"),
                read("", "pods"),
            ]),
        },
        role_binding: RoleBinding {
            metadata: metadata(),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Role".into(),
                name: name.clone(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: name.clone(),
                namespace: Some(namespace.to_owned()),
                ..Subject::default()
            }]),
        },
    }
}

/// The volume of the sidecar's ServiceAccount credentials.
const SIDECAR_TOKEN: &str = "routing-sidecar-token";

/// What the kubelet mounts for an automounted ServiceAccount (a bound token, the cluster's
/// CA and the namespace: the ServiceAccount admission plugin's projected volume), as a
/// volume only the sidecar mounts.
fn service_account_volume() -> Volume {
    Volume {
        name: SIDECAR_TOKEN.into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".into(),
                        expiration_seconds: Some(3607),
                        ..ServiceAccountTokenProjection::default()
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".into(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".into(),
                            path: "ca.crt".into(),
                            ..KeyToPath::default()
                        }]),
                        ..ConfigMapProjection::default()
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".into(),
                            field_ref: Some(ObjectFieldSelector {
                                field_path: "metadata.namespace".into(),
                                ..ObjectFieldSelector::default()
                            }),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
            ..ProjectedVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// vLLM's NixlConnector tells the other side where to fetch the KV cache from with its side
/// channel's host (`VLLM_NIXL_SIDE_CHANNEL_HOST`, default `localhost`): the prefill engine
/// answers it to the decode engine, so every role's engine announces its pod's IP.
pub(super) fn add_kv_side_channel(deployment: &mut K8sDeployment, serving: &ServingSpec) {
    if serving.spec.engine.kind != EngineKind::Vllm {
        return;
    }
    let server = deployment
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
        .and_then(|pod| pod.containers.first_mut());
    if let Some(server) = server {
        server.env.get_or_insert_with(Vec::new).push(EnvVar {
            name: "VLLM_NIXL_SIDE_CHANNEL_HOST".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "status.podIP".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        });
    }
}

/// The picker's configuration for disaggregation: upstream's P/D profile pair, scored by
/// prefix cache and queue, deciding per request by the uncached part of the prompt.
pub(super) fn pd_picker_config(queue: i64, prefix_cache: i64) -> String {
    let mut scorers = String::new();
    for (plugin, weight) in [
        ("prefix-cache-scorer", prefix_cache),
        ("queue-scorer", queue),
    ] {
        if weight > 0 {
            scorers.push_str(&format!("  - pluginRef: {plugin}\n    weight: {weight}\n"));
        }
    }
    format!(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: disagg-headers-handler
- type: prefix-cache-scorer
- type: queue-scorer
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: 16
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: prefix-based-pd-decider
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: max-score-picker
{scorers}- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
{scorers}"
    )
}
