//! Models that span nodes (`spec.nodesPerReplica` above 1): each replica is a group of a
//! `LeaderWorkerSet` (leaderworkerset.x-k8s.io/v1), one leader pod that serves the API and
//! `size - 1` workers, built from the pod template the Deployment would have had. Typed
//! here, since no crate carries the type; the fields are those of LWS v0.10's
//! `api/leaderworkerset/v1/leaderworkerset_types.go`.
//!
//! The engines form one model over the group with vLLM's multiprocessing backend across
//! nodes (`--nnodes`, `--node-rank`, `--master-addr`; workers `--headless`, serving no
//! API), as vLLM's "Parallelism and Scaling" docs describe; the rank and the leader's
//! address come from the variables LWS injects into every container of a group
//! (`LWS_WORKER_INDEX`, `LWS_LEADER_ADDRESS`), which Kubernetes expands in `args`.

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as K8sCondition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use crate::domain::{EngineKind, ServingSpec, group_object_name};

/// On every pod of a group: its index in the group, `0` for the leader (LWS's
/// `WorkerIndexLabelKey`). The Service, the pool and the PodMonitor select leaders by it.
pub const WORKER_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// On [`as_deployment`]'s view (never applied): the object it stands for is a
/// LeaderWorkerSet, so Events about it regard the set.
pub const VIEW_OF_GROUP: &str = "modelplane.io/view-of-leader-worker-set";
/// The port the leader's engine listens on for its workers (torch distributed's store).
pub const MASTER_PORT: i32 = 29500;

/// `LeaderWorkerSet.spec`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "leaderworkerset.x-k8s.io",
    version = "v1",
    kind = "LeaderWorkerSet",
    plural = "leaderworkersets",
    namespaced,
    status = "LeaderWorkerSetStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetSpec {
    /// Groups.
    pub replicas: Option<i32>,
    pub leader_worker_template: LeaderWorkerTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_strategy: Option<RolloutStrategy>,
    /// `LeaderCreated` (workers start with their leader) or `LeaderReady`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_policy: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_template: Option<PodTemplateSpec>,
    pub worker_template: PodTemplateSpec,
    /// Pods per group, the leader included.
    pub size: Option<i32>,
    /// `RecreateGroupOnPodRestart`: a failed or restarted pod recreates its whole group
    /// (an engine cannot rejoin a running model); `None` restarts only it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update_configuration: Option<RollingUpdateConfiguration>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateConfiguration {
    pub max_unavailable: IntOrString,
    pub max_surge: IntOrString,
}

/// `LeaderWorkerSet.status`: counts of groups.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetStatus {
    #[serde(default)]
    pub conditions: Vec<K8sCondition>,
    /// Groups whose pods are all ready.
    #[serde(default)]
    pub ready_replicas: Option<i32>,
    /// Groups on the current template.
    #[serde(default)]
    pub updated_replicas: Option<i32>,
    /// Groups created.
    #[serde(default)]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub hpa_pod_selector: Option<String>,
    #[serde(default)]
    pub observed_generation: Option<i64>,
}

/// The LeaderWorkerSet that stands in for `deployment` (its labels and pod template),
/// with `serving.nodes` pods per group.
pub(super) fn leader_worker_set(
    deployment: &K8sDeployment,
    serving: &ServingSpec,
) -> LeaderWorkerSet {
    let spec = deployment.spec.clone().unwrap_or_default();
    let mut metadata = deployment.metadata.clone();
    metadata.name = metadata.name.as_deref().map(group_object_name);
    let nodes = serving.nodes;
    let leader = with_role_flags(&spec.template, serving, true);
    let mut worker = with_role_flags(&spec.template, serving, false);
    if let Some(pod) = worker.spec.as_mut() {
        for c in &mut pod.containers {
            // A headless engine serves no HTTP: its probes would never pass. It lives and
            // dies with its group (RecreateGroupOnPodRestart).
            c.readiness_probe = None;
            c.startup_probe = None;
            c.liveness_probe = None;
            c.lifecycle = None;
        }
    }
    LeaderWorkerSet {
        metadata,
        spec: LeaderWorkerSetSpec {
            replicas: Some(serving.replicas),
            leader_worker_template: LeaderWorkerTemplate {
                leader_template: Some(leader),
                worker_template: worker,
                size: Some(nodes),
                restart_policy: Some("RecreateGroupOnPodRestart".into()),
            },
            // A group at a time, none extra: a spare group of GPU nodes is rarer still
            // than a spare GPU.
            rollout_strategy: Some(RolloutStrategy {
                type_: "RollingUpdate".into(),
                rolling_update_configuration: Some(RollingUpdateConfiguration {
                    max_unavailable: IntOrString::Int(1),
                    max_surge: IntOrString::Int(0),
                }),
            }),
            startup_policy: Some("LeaderCreated".into()),
        },
        status: None,
    }
}

/// `template` with the engine's flags for its place in the group.
fn with_role_flags(
    template: &PodTemplateSpec,
    serving: &ServingSpec,
    leader: bool,
) -> PodTemplateSpec {
    let mut template = template.clone();
    if let Some(pod) = template.spec.as_mut()
        && let Some(server) = pod.containers.first_mut()
    {
        let args = server.args.get_or_insert_with(Vec::new);
        args.extend(group_flags(serving, leader));
    }
    template
}

/// The engine flags of a leader or a worker of a group of `serving.nodes` pods.
pub fn group_flags(serving: &ServingSpec, leader: bool) -> Vec<String> {
    if !matches!(serving.spec.engine.kind, EngineKind::Vllm | EngineKind::Sim) {
        return Vec::new();
    }
    let mut flags = vec![
        "--distributed-executor-backend".to_owned(),
        "mp".to_owned(),
        "--nnodes".to_owned(),
        serving.nodes.to_string(),
        "--node-rank".to_owned(),
        if leader {
            "0".to_owned()
        } else {
            "$(LWS_WORKER_INDEX)".to_owned()
        },
        "--master-addr".to_owned(),
        "$(LWS_LEADER_ADDRESS)".to_owned(),
        "--master-port".to_owned(),
        MASTER_PORT.to_string(),
    ];
    if !leader {
        flags.push("--headless".to_owned());
    }
    flags
}

/// The LeaderWorkerSet seen as the Deployment it stands for, so that status and the
/// rest of the pass read one shape: its name, uid and generation; groups as replicas
/// (a group is available when all its pods are ready: LWS's `readyReplicas`); its
/// conditions as the Deployment's `Available` and `Progressing`.
pub fn as_deployment(set: &LeaderWorkerSet) -> K8sDeployment {
    use k8s_openapi::api::apps::v1::{
        DeploymentCondition, DeploymentSpec as K8sDeploymentSpec, DeploymentStatus,
    };
    let status = set.status.clone().unwrap_or_default();
    let ready = status.ready_replicas.unwrap_or(0);
    let mut metadata = set.metadata.clone();
    metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(VIEW_OF_GROUP.into(), "true".into());
    K8sDeployment {
        metadata,
        spec: Some(K8sDeploymentSpec {
            replicas: set.spec.replicas,
            template: set
                .spec
                .leader_worker_template
                .leader_template
                .clone()
                .unwrap_or_default(),
            ..K8sDeploymentSpec::default()
        }),
        status: set.status.as_ref().map(|_| DeploymentStatus {
            observed_generation: status.observed_generation,
            replicas: status.replicas,
            ready_replicas: Some(ready),
            available_replicas: Some(ready),
            updated_replicas: status.updated_replicas,
            unavailable_replicas: Some((status.replicas.unwrap_or(0) - ready).max(0)),
            conditions: Some(
                status
                    .conditions
                    .iter()
                    .filter(|c| c.type_ == "Available" || c.type_ == "Progressing")
                    .map(|c| DeploymentCondition {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        reason: Some(c.reason.clone()),
                        message: Some(c.message.clone()),
                        last_transition_time: Some(c.last_transition_time.clone()),
                        last_update_time: Some(c.last_transition_time.clone()),
                    })
                    .collect(),
            ),
            ..DeploymentStatus::default()
        }),
    }
}
