//! Where a model server pod gets its model: the reference the engine loads, and the
//! volumes, mounts and init container (an `s3://` copy) that put it there.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvFromSource, ImageVolumeSource,
    PersistentVolumeClaimVolumeSource, ResourceRequirements, SecretEnvSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::BuildConfig;
use crate::domain::{ModelSource, ServingSpec};

const MODEL_MOUNT: &str = "/models";

/// The reference the engine loads the model from, and how it gets there.
pub(super) struct ModelLocation {
    /// What the engine is told (`org/name`, `/models/path`, `s3://…`).
    pub(super) reference: String,
    pub(super) volumes: Vec<Volume>,
    pub(super) mounts: Vec<VolumeMount>,
    pub(super) init_containers: Vec<Container>,
}

pub(super) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

pub(super) fn volume(name: &str, with: impl FnOnce(&mut Volume)) -> Volume {
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
    cpu_memory(("500m", "512Mi"), ("2", "2Gi"))
}

/// Requests and limits of CPU and memory, each `(cpu, memory)`.
pub(super) fn cpu_memory(requests: (&str, &str), limits: (&str, &str)) -> ResourceRequirements {
    let quantities = |(cpu, memory): (&str, &str)| {
        BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity(memory.to_owned())),
        ])
    };
    ResourceRequirements {
        requests: Some(quantities(requests)),
        limits: Some(quantities(limits)),
        ..ResourceRequirements::default()
    }
}

/// Every key of the Secret `name` as the container's environment (AWS_ACCESS_KEY_ID, …).
pub(super) fn secret_env_from(name: &str) -> Vec<EnvFromSource> {
    vec![EnvFromSource {
        secret_ref: Some(SecretEnvSource {
            name: name.to_owned(),
            optional: None,
        }),
        ..EnvFromSource::default()
    }]
}

pub(super) fn empty_dir(
    medium: Option<&str>,
    size: Option<&crate::domain::Quantity>,
) -> EmptyDirVolumeSource {
    EmptyDirVolumeSource {
        medium: medium.map(str::to_owned),
        size_limit: size.map(|s| Quantity(s.as_str().to_owned())),
    }
}

pub(super) fn model_location(serving: &ServingSpec, config: &BuildConfig) -> ModelLocation {
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
        ModelSource::S3 { bucket, key } => ModelLocation {
            reference: MODEL_MOUNT.to_owned(),
            volumes: vec![volume("model", |v| {
                v.empty_dir = Some(empty_dir(None, None))
            })],
            mounts: vec![read_only_mount],
            init_containers: vec![s3_downloader(
                serving,
                config,
                format!("s3://{bucket}/{key}"),
            )],
        },
    }
}

/// The init container that copies `source` into the model volume.
fn s3_downloader(serving: &ServingSpec, config: &BuildConfig, source: String) -> Container {
    Container {
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
        env_from: serving
            .spec
            .model
            .secret_ref
            .as_ref()
            .map(|secret| secret_env_from(&secret.name)),
        ..Container::default()
    }
}

fn join_path(base: &str, rest: &str) -> String {
    if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}/{rest}")
    }
}
