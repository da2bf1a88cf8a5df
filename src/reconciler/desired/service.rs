//! The ClusterIP Service in front of a track's model server pods.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{Target, metadata, track_selector_labels};

pub(super) fn service_object(
    t: &Target,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Service {
    Service {
        metadata: metadata(t, namespace, labels),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(track_selector_labels(t)),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: t.serving.port,
                target_port: Some(IntOrString::String("http".into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
