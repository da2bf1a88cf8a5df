//! A Service without a selector and the EndpointSlice that names its addresses (Kubernetes'
//! "Services without selectors": the slice is labelled `kubernetes.io/service-name` and
//! managed by modelplane, not by the EndpointSlice controller): how the Gateway reaches
//! modelplane's own listeners, the activator's and the key check's.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::ActivatorAddress;

/// The Service (`meta`, one port `service_port` named `http`) and its EndpointSlice (the same
/// name, owned by the Service once the worker sets the owner) naming `address`.
pub(super) fn selectorless(
    meta: ObjectMeta,
    service_port: i32,
    address: &ActivatorAddress,
) -> (Service, EndpointSlice) {
    let name = meta.name.clone().unwrap_or_default();
    let service = Service {
        metadata: meta.clone(),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: service_port,
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    // One address family per slice: the first address's.
    let v4 = address.addresses.first().is_none_or(IpAddr::is_ipv4);
    let mut labels = meta.labels.clone().unwrap_or_default();
    labels.insert("kubernetes.io/service-name".into(), name);
    labels.insert(
        "endpointslice.kubernetes.io/managed-by".into(),
        "modelplane.io".into(),
    );
    let slice = EndpointSlice {
        metadata: ObjectMeta {
            labels: Some(labels),
            ..meta
        },
        address_type: if v4 { "IPv4" } else { "IPv6" }.into(),
        endpoints: address
            .addresses
            .iter()
            .filter(|ip| ip.is_ipv4() == v4)
            .map(|ip| Endpoint {
                addresses: vec![ip.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..EndpointConditions::default()
                }),
                ..Endpoint::default()
            })
            .collect::<Vec<_>>()
            .into(),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            port: Some(i32::from(address.port)),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
    };
    (service, slice)
}
