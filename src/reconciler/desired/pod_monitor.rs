//! The PodMonitor (Prometheus Operator, `monitoring.coreos.com/v1`) that has a Prometheus
//! scrape a deployment's model-server pods, both tracks, when the serving metrics come from
//! Prometheus (`MODELPLANE_PROMETHEUS_URL`). The fields are those of the published CRD
//! (prometheus-operator v0.93.0 `monitoring.coreos.com_podmonitors.yaml`): `selector`,
//! `podMetricsEndpoints[].port` (the container port's name), `.path`, `.interval`, and
//! `podTargetLabels`, which copies the pod labels onto every series as Prometheus
//! sanitises their names (`modelplane_io_deployment_id`, `modelplane_io_track`): the
//! labels the PromQL source groups by.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::{LABEL_DEPLOYMENT_ID, LABEL_NAME, LABEL_TRACK, MODEL_SERVER, Target, metadata};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "monitoring.coreos.com",
    version = "v1",
    kind = "PodMonitor",
    plural = "podmonitors",
    namespaced,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct PodMonitorSpec {
    pub selector: LabelSelector,
    pub pod_metrics_endpoints: Vec<PodMetricsEndpoint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_target_labels: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodMetricsEndpoint {
    pub port: String,
    pub path: String,
    pub interval: String,
}

/// The PodMonitor of the record's pods, stable and canary alike (they share the record's
/// id label), scraped every `interval_secs`.
pub(super) fn pod_monitor_object(
    t: &Target,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    interval_secs: u64,
) -> PodMonitor {
    PodMonitor {
        metadata: metadata(t, namespace, labels),
        spec: PodMonitorSpec {
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([
                    (LABEL_NAME.to_owned(), MODEL_SERVER.to_owned()),
                    (LABEL_DEPLOYMENT_ID.to_owned(), t.record.id.to_string()),
                ])),
                ..LabelSelector::default()
            },
            pod_metrics_endpoints: vec![PodMetricsEndpoint {
                port: "http".into(),
                path: "/metrics".into(),
                interval: format!("{}s", interval_secs.max(1)),
            }],
            pod_target_labels: vec![LABEL_DEPLOYMENT_ID.to_owned(), LABEL_TRACK.to_owned()],
        },
    }
}
