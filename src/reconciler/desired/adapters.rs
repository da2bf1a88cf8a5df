//! LoRA adapters in the objects: what never changes while the list does (LoRA enabled, the
//! runtime adapter API allowed, a readiness gate, the claims' mounts), and the list itself
//! as an annotation on the Deployment, which the adapter loader
//! (`reconciler::adapters`) reads to load and unload them on each pod. The list is kept out
//! of the pod template: changing it must not roll the pods.

use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EnvVar, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, PodReadinessGate,
};
use serde::{Deserialize, Serialize};

use super::BuildConfig;
use super::model_source::{ModelLocation, cpu_memory, empty_dir, mount, secret_env_from, volume};
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
/// Where the fetcher puts s3:// adapters, one directory each, named after the adapter.
pub const S3_ADAPTER_MOUNT: &str = "/adapters-s3";
/// On each pod, written by the loader: the s3:// adapters to fetch, a line
/// `<name> <s3://bucket/prefix>` each. The fetcher reads it as a downward API file, which
/// the kubelet rewrites when the annotation changes (Kubernetes docs, "Expose Pod
/// Information to Containers Through Files": annotations are updated in place, unlike
/// environment variables), so a new adapter needs no new pod.
pub const ANNOTATION_POD_S3_ADAPTERS: &str = "modelplane.io/s3-adapters";
const FETCHER_LIST_DIR: &str = "/etc/modelplane/adapters";

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
    /// `org/name` (the engine downloads it) or a path under [`ADAPTER_MOUNT`] or
    /// [`S3_ADAPTER_MOUNT`].
    pub path: String,
    /// `s3://bucket/prefix` the pod's fetcher copies to `path` first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch: Option<String>,
}

/// The fetcher's list (the [`ANNOTATION_POD_S3_ADAPTERS`] value) for `adapters`.
pub fn s3_fetch_list(adapters: &[AdapterRef]) -> String {
    adapters
        .iter()
        .filter_map(|a| Some(format!("{} {}\n", a.name, a.fetch.as_ref()?)))
        .collect()
}

/// The adapters with the paths the engine loads them from.
pub fn adapter_refs(serving: &ServingSpec) -> Vec<AdapterRef> {
    serving
        .adapters
        .iter()
        .filter_map(|a| {
            let mut fetch = None;
            let path = match &a.source {
                ModelSource::HuggingFace { repo } => repo.clone(),
                ModelSource::Pvc { claim, path } if path.is_empty() => {
                    format!("{ADAPTER_MOUNT}/{claim}")
                }
                ModelSource::Pvc { claim, path } => format!("{ADAPTER_MOUNT}/{claim}/{path}"),
                ModelSource::S3 { bucket, key } => {
                    fetch = Some(format!("s3://{bucket}/{key}"));
                    format!("{S3_ADAPTER_MOUNT}/{}", a.name)
                }
                // Refused by validation.
                ModelSource::Oci { .. } => return None,
            };
            Some(AdapterRef {
                name: a.name.clone(),
                path,
                fetch,
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

/// The fetcher's loop. Each round it reads its list (a downward API file the kubelet keeps
/// up to date), copies every adapter whose directory does not hold its current source with
/// `aws s3 sync` (into a scratch directory first, moved into place whole, so the engine
/// never loads half an adapter), and removes the directories of adapters no longer
/// listed. A failed copy is tried again next round; the loader keeps offering the adapter
/// to the engine until it loads.
pub const FETCH_SCRIPT: &str = r#"list="$1"; dir="$2"
while :; do
  while read -r name source; do
    [ -n "$name" ] || continue
    [ "$(cat "$dir/$name/.source" 2>/dev/null)" = "$source" ] && continue
    rm -rf "$dir/.partial-$name"
    if aws s3 sync --only-show-errors "$source" "$dir/.partial-$name"; then
      printf '%s' "$source" > "$dir/.partial-$name/.source"
      rm -rf "$dir/$name"
      mv "$dir/.partial-$name" "$dir/$name"
      echo "fetched adapter $name from $source"
    else
      echo "could not fetch adapter $name from $source; trying again" >&2
    fi
  done < "$list"
  for d in "$dir"/*; do
    [ -d "$d" ] || continue
    listed=
    while read -r name _; do [ "$name" = "${d##*/}" ] && listed=1; done < "$list"
    [ -n "$listed" ] || { rm -rf "$d"; echo "removed adapter ${d##*/}"; }
  done
  sleep "${FETCH_INTERVAL_SECONDS:-5}"
done
"#;

/// With s3:// adapters: the fetcher (a native sidecar, so it runs beside the engine for
/// the pod's life and starts before it), its list and scratch volume, and the engine's
/// read-only view of what it fetched. Present whenever the spec has an s3:// adapter, so
/// adding or removing one more changes no template.
pub(super) fn fetch_s3(serving: &ServingSpec, config: &BuildConfig, model: &mut ModelLocation) {
    let s3: Vec<_> = serving
        .adapters
        .iter()
        .filter(|a| matches!(a.source, ModelSource::S3 { .. }))
        .collect();
    if s3.is_empty() {
        return;
    }
    let secret = s3.iter().find_map(|a| a.secret.clone());
    model.volumes.push(volume("adapters-s3", |v| {
        v.empty_dir = Some(empty_dir(None, None))
    }));
    model.volumes.push(volume("adapters-s3-list", |v| {
        v.downward_api = Some(DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: "s3".into(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!("metadata.annotations['{ANNOTATION_POD_S3_ADAPTERS}']"),
                    ..ObjectFieldSelector::default()
                }),
                ..DownwardAPIVolumeFile::default()
            }]),
            ..DownwardAPIVolumeSource::default()
        })
    }));
    model
        .mounts
        .push(mount("adapters-s3", S3_ADAPTER_MOUNT, true));
    let fetcher = Container {
        name: "fetch-adapters".into(),
        image: Some(config.s3_downloader_image.clone()),
        command: Some(vec!["/bin/sh".into(), "-c".into(), FETCH_SCRIPT.into()]),
        args: Some(vec![
            "fetch-adapters".into(),
            format!("{FETCHER_LIST_DIR}/s3"),
            S3_ADAPTER_MOUNT.into(),
        ]),
        // A native sidecar: started before the engine and kept running beside it.
        restart_policy: Some("Always".into()),
        volume_mounts: Some(vec![
            mount("adapters-s3", S3_ADAPTER_MOUNT, false),
            mount("adapters-s3-list", FETCHER_LIST_DIR, true),
        ]),
        // Counted for the pod's whole life (a sidecar's requests add to the engine's), so
        // less than the model downloader's, which runs once before it.
        resources: Some(cpu_memory(("100m", "256Mi"), ("1", "1Gi"))),
        env_from: secret.as_deref().map(secret_env_from),
        ..Container::default()
    };
    model.init_containers.insert(0, fetcher);
}
