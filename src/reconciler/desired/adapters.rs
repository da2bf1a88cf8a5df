//! LoRA adapters in the objects: what never changes while the list does (LoRA enabled, the
//! runtime adapter API allowed, a readiness gate, the claims' mounts), and the list itself
//! as an annotation on the Deployment, which the adapter loader
//! (`reconciler::adapters`) reads to load and unload them on each pod. The list is kept out
//! of the pod template: changing it must not roll the pods.

use k8s_openapi::api::core::v1::{EnvVar, PersistentVolumeClaimVolumeSource, PodReadinessGate};
use serde::{Deserialize, Serialize};

use super::model_source::{ModelLocation, mount, volume};
use crate::domain::{EngineKind, ModelSource, ServingSpec};

/// On the Deployment: the adapters as JSON, `[{"name", "path"}]`.
pub const ANNOTATION_ADAPTERS: &str = "modelplane.io/adapters";
/// The pod condition the loader sets once a new pod has been given every adapter; the pod
/// template's readiness gate keeps the pod out of its Service and pool until then (the
/// kubelet's `generatePodReadyCondition`, kubernetes pkg/kubelet/status/generate.go).
pub const ADAPTERS_GATE: &str = "modelplane.io/adapters-loaded";
/// On each pod, written by the loader: what its engine answered ([`PodAdapters`]).
pub const ANNOTATION_POD_ADAPTERS: &str = "modelplane.io/adapters-state";
const ADAPTER_MOUNT: &str = "/adapters";

/// What the loader found and did on one pod's engine process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodAdapters {
    /// The server container's restart count when this was written: a restarted engine has
    /// lost what was loaded, and this no longer describes it.
    pub restarts: i32,
    /// Adapters of the list the engine serves.
    pub loaded: Vec<String>,
    /// The path each loaded adapter was loaded from (a changed source is loaded again).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub paths: std::collections::BTreeMap<String, String>,
    /// Adapters the engine refused to load, with its answer.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub failed: std::collections::BTreeMap<String, String>,
}

impl PodAdapters {
    /// The pod's record, when it has one that describes its current engine process.
    pub fn of(pod: &k8s_openapi::api::core::v1::Pod) -> Option<Self> {
        let state: Self = pod
            .metadata
            .annotations
            .as_ref()?
            .get(ANNOTATION_POD_ADAPTERS)
            .and_then(|v| serde_json::from_str(v).ok())?;
        (state.restarts == server_restarts(pod)).then_some(state)
    }
}

/// The restart count of the pod's model server container (its first).
pub fn server_restarts(pod: &k8s_openapi::api::core::v1::Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .map_or(0, |c| c.restart_count)
}

/// An adapter as the engine's `load_lora_adapter` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterRef {
    pub name: String,
    /// `org/name` (the engine downloads it) or a path under [`ADAPTER_MOUNT`].
    pub path: String,
}

/// The adapters with the paths the engine loads them from.
pub fn adapter_refs(serving: &ServingSpec) -> Vec<AdapterRef> {
    serving
        .adapters
        .iter()
        .filter_map(|a| {
            let path = match &a.source {
                ModelSource::HuggingFace { repo } => repo.clone(),
                ModelSource::Pvc { claim, path } if path.is_empty() => {
                    format!("{ADAPTER_MOUNT}/{claim}")
                }
                ModelSource::Pvc { claim, path } => format!("{ADAPTER_MOUNT}/{claim}/{path}"),
                // Refused by validation.
                ModelSource::S3 { .. } | ModelSource::Oci { .. } => return None,
            };
            Some(AdapterRef {
                name: a.name.clone(),
                path,
            })
        })
        .collect()
}

/// The Deployment's annotation, when there are adapters.
pub(super) fn adapters_annotation(serving: &ServingSpec) -> Option<String> {
    (!serving.adapters.is_empty())
        .then(|| serde_json::to_string(&adapter_refs(serving)).expect("serialises"))
}

/// Reads the annotation back (the loader's side); a malformed one is no list.
pub fn parse_adapters_annotation(value: &str) -> Option<Vec<AdapterRef>> {
    serde_json::from_str(value).ok()
}

/// The engine flags that enable LoRA: vLLM needs `--enable-lora` at start (and sizes its
/// LoRA memory from `--max-loras`/`--max-lora-rank`, left to `engine.args`); the simulator
/// needs none.
pub(super) fn lora_flags(serving: &ServingSpec) -> Vec<String> {
    if serving.adapters.is_empty() || serving.spec.engine.kind != EngineKind::Vllm {
        return vec![];
    }
    vec!["--enable-lora".to_owned()]
}

/// vLLM serves `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` only with this set
/// (vLLM docs, "Dynamically serving LoRA Adapters").
pub(super) fn lora_env(serving: &ServingSpec) -> Option<EnvVar> {
    (!serving.adapters.is_empty() && serving.spec.engine.kind == EngineKind::Vllm).then(|| EnvVar {
        name: crate::domain::RUNTIME_LORA_ENV.into(),
        value: Some("True".into()),
        ..EnvVar::default()
    })
}

/// The readiness gate of pods with adapters.
pub(super) fn readiness_gates(serving: &ServingSpec) -> Option<Vec<PodReadinessGate>> {
    (!serving.adapters.is_empty()).then(|| {
        vec![PodReadinessGate {
            condition_type: ADAPTERS_GATE.into(),
        }]
    })
}

/// Mounts every claim an adapter comes from, read-only, at `/adapters/<claim>` (sorted, so
/// the template changes only when the set of claims does).
pub(super) fn mount_claims(serving: &ServingSpec, model: &mut ModelLocation) {
    let claims: std::collections::BTreeSet<&str> = serving
        .adapters
        .iter()
        .filter_map(|a| match &a.source {
            ModelSource::Pvc { claim, .. } => Some(claim.as_str()),
            _ => None,
        })
        .collect();
    for (i, claim) in claims.into_iter().enumerate() {
        let name = format!("adapters-{i}");
        model.volumes.push(volume(&name, |v| {
            v.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.to_owned(),
                read_only: Some(true),
            })
        }));
        model
            .mounts
            .push(mount(&name, &format!("{ADAPTER_MOUNT}/{claim}"), true));
    }
}
