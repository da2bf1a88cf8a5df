//! InferencePool mode: the Gateway API Inference Extension's `InferencePool`
//! (inference.networking.k8s.io/v1) over the deployment's pods, and [`PoolObjects`], the
//! pool with its endpoint picker's objects (built in `endpoint_picker`). Typed here, since
//! no crate carries the InferencePool type; the fields are those of the inference
//! extension's `api/v1/inferencepool_types.go`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as K8sCondition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::endpoint_picker::{EPP_GRPC_PORT, Picker, picker_name};
use super::{Target, generation_metadata, track_selector_labels};

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
    pub metrics_auth_role: ClusterRole,
    pub metrics_auth_binding: ClusterRoleBinding,
    pub picker: K8sDeployment,
    pub picker_service: Service,
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
    let picker = Picker::new(t, namespace, labels);
    PoolObjects {
        pool: pool_object(t, namespace, labels),
        config_map: picker.config_map(),
        service_account: picker.service_account(),
        role: picker.role(),
        role_binding: picker.role_binding(),
        metrics_auth_role: picker.metrics_auth_role(),
        metrics_auth_binding: picker.metrics_auth_binding(),
        picker: picker.deployment(image),
        picker_service: picker.service(),
    }
}

/// The pool over the track's model server pods, handing each request to the endpoint
/// picker's Service to choose one; no picker, no request (`FailClose`).
fn pool_object(t: &Target, namespace: &str, labels: &BTreeMap<String, String>) -> InferencePool {
    let name = &t.record.name;
    let mut pool = InferencePool::new(
        name,
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
                name: picker_name(name),
                port: Some(PoolPort {
                    number: EPP_GRPC_PORT,
                }),
                failure_mode: Some("FailClose".into()),
            }),
        },
    );
    pool.metadata = generation_metadata(t, name, namespace, labels);
    pool
}
