//! The PodDisruptionBudget of a deployment with several replicas.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{Target, metadata, selector};

/// At most one replica down at a time for voluntary disruptions (node drains, upgrades),
/// so a drain never takes every replica of a model at once.
pub(super) fn disruption_budget_object(
    t: &Target,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: metadata(t, namespace, labels),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(selector(t)),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}
