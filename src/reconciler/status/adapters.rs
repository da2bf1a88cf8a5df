//! LoRA adapters: on how many serving pods each is loaded (from what the adapter loader
//! wrote on each pod), and the AdaptersLoaded condition.

use k8s_openapi::api::core::v1::Pod;

use super::Check;
use crate::domain::{AdapterStatus, ServingSpec};
use crate::reconciler::desired::PodAdapters;

/// The condition of a deployment with adapters.
pub const ADAPTERS_LOADED: &str = "AdaptersLoaded";

/// Serving pods: made for adapters (the gate in their template: older pods of the first
/// adapter's rollout run without LoRA), not terminating, their containers ready.
fn serving(pod: &Pod) -> bool {
    crate::reconciler::adapters::gated(pod)
        && pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "ContainersReady" && c.status == "True")
            })
}

/// Each adapter's counts, and the condition; nothing without adapters.
pub(super) fn adapters(
    serving_spec: &ServingSpec,
    pods: &[Pod],
) -> (Vec<AdapterStatus>, Option<Check>) {
    if serving_spec.adapters.is_empty() {
        return (Vec::new(), None);
    }
    let pods: Vec<(&Pod, Option<PodAdapters>)> = pods
        .iter()
        .filter(|p| serving(p))
        .map(|p| (p, PodAdapters::of(p)))
        .collect();
    let total = pods.len() as i64;
    let statuses: Vec<AdapterStatus> = serving_spec
        .adapters
        .iter()
        .map(|a| {
            let loaded = pods
                .iter()
                .filter(|(_, s)| s.as_ref().is_some_and(|s| s.loaded.contains(&a.name)))
                .count() as i64;
            let message = pods
                .iter()
                .find_map(|(pod, s)| {
                    let why = s.as_ref()?.failed.get(&a.name)?;
                    Some(format!(
                        "pod {}: {why}",
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ))
                })
                .unwrap_or_default();
            AdapterStatus {
                name: a.name.clone(),
                loaded,
                pods: total,
                message,
            }
        })
        .collect();
    let failed: Vec<String> = statuses
        .iter()
        .filter(|s| !s.message.is_empty())
        .map(|s| {
            format!(
                "adapter {} is not loaded on {} of {} pods ({})",
                s.name,
                s.pods - s.loaded,
                s.pods,
                s.message
            )
        })
        .collect();
    let loading: Vec<&str> = statuses
        .iter()
        .filter(|s| s.message.is_empty() && s.loaded < s.pods)
        .map(|s| s.name.as_str())
        .collect();
    let check = if total == 0 {
        Check::new(
            ADAPTERS_LOADED,
            false,
            "NoServingPods",
            "no serving pod to load the adapters on yet".to_owned(),
        )
    } else if !failed.is_empty() {
        Check::new(
            ADAPTERS_LOADED,
            false,
            "AdapterLoadFailed",
            failed.join("; "),
        )
    } else if !loading.is_empty() {
        Check::new(
            ADAPTERS_LOADED,
            false,
            "Loading",
            format!("loading {} on the serving pods", loading.join(", ")),
        )
    } else {
        Check::new(
            ADAPTERS_LOADED,
            true,
            "Loaded",
            format!(
                "{} adapter(s) loaded on every serving pod ({total})",
                statuses.len()
            ),
        )
    };
    (statuses, Some(check))
}
