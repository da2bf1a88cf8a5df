//! What makes the Gateway ask modelplane's key check before a request reaches a deployment
//! with `access: keys`: the HTTPRoute `ExternalAuth` filter (Gateway API GEP-1494, the
//! experimental channel) on every rule of each of its routes, with the HTTP protocol,
//! (or gRPC, `keys.protocol`), calling `modelplane-authz`: a Service without a selector in the project's namespace
//! whose EndpointSlice names the key check's addresses (the same "Services without
//! selectors" as the activator's; in the route's own namespace, so no ReferenceGrant).
//!
//! The filter's `http.path` puts `/check/{deployment id}` in front of the client's path, so
//! the check knows which deployment is asked for from the route, never from the request;
//! `allowedHeaders` adds `x-api-key` to the Authorization header the filter always sends;
//! `allowedResponseHeaders` lets only the headers naming the key and project through to
//! the model server. Without the Service (a worker that does not know the key check) the
//! Gateway cannot reach it, and the filter fails closed: nothing gets through unchecked.

use std::collections::BTreeMap;

use gateway_api::experimental::httproutes::{
    HttpRoute, HttpRouteRulesFilters, HttpRouteRulesFiltersExternalAuth,
    HttpRouteRulesFiltersExternalAuthBackendRef, HttpRouteRulesFiltersExternalAuthGrpc,
    HttpRouteRulesFiltersExternalAuthHttp, HttpRouteRulesFiltersExternalAuthProtocol,
    HttpRouteRulesFiltersType,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use uuid::Uuid;

use super::ActivatorAddress;
use super::selectorless::selectorless;
use super::{LABEL_INSTALLATION, LABEL_MANAGED_BY, LABEL_PROJECT};
use crate::domain::KEY_CHECK_SERVICE;

/// The path prefix the key check serves (`api::authz::PREFIX`).
pub const KEY_CHECK_PATH: &str = "/check";
/// The headers the key check sets for the model server (`api::authz`).
const RESPONSE_HEADERS: [&str; 3] = [
    "x-modelplane-key",
    "x-modelplane-key-id",
    "x-modelplane-project",
];

/// The key check's Service and EndpointSlice in a project's namespace, shared by its
/// deployments with `access: keys`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyCheckObjects {
    pub service: Service,
    /// Owned by `service` once it exists (the worker sets the owner).
    pub slice: EndpointSlice,
}

/// Shared by the project's deployments: only the labels that are the same for all of them.
fn shared_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| {
            [LABEL_MANAGED_BY, LABEL_INSTALLATION, LABEL_PROJECT].contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

pub(super) fn key_check_objects(
    namespace: &str,
    labels: &BTreeMap<String, String>,
    address: &ActivatorAddress,
) -> KeyCheckObjects {
    let meta = ObjectMeta {
        name: Some(KEY_CHECK_SERVICE.into()),
        namespace: Some(namespace.into()),
        labels: Some(shared_labels(labels)),
        ..ObjectMeta::default()
    };
    let (service, slice) = selectorless(meta, i32::from(address.port), address);
    KeyCheckObjects { service, slice }
}

/// Puts the key check's filter first on every rule of `route`, for deployment `id`; with
/// the gRPC protocol, the check finds the deployment from the request's host and path.
pub(super) fn guard(route: &mut HttpRoute, id: Uuid, port: u16, grpc: bool) {
    let filter = HttpRouteRulesFilters {
        r#type: HttpRouteRulesFiltersType::ExternalAuth,
        external_auth: Some(HttpRouteRulesFiltersExternalAuth {
            backend_ref: HttpRouteRulesFiltersExternalAuthBackendRef {
                group: Some(String::new()),
                kind: Some("Service".into()),
                name: KEY_CHECK_SERVICE.into(),
                namespace: None,
                port: Some(i32::from(port)),
            },
            protocol: if grpc {
                HttpRouteRulesFiltersExternalAuthProtocol::Grpc
            } else {
                HttpRouteRulesFiltersExternalAuthProtocol::Http
            },
            http: (!grpc).then(|| HttpRouteRulesFiltersExternalAuthHttp {
                path: Some(format!("{KEY_CHECK_PATH}/{id}")),
                allowed_headers: Some(vec!["x-api-key".into()]),
                allowed_response_headers: Some(
                    RESPONSE_HEADERS.iter().map(|h| (*h).to_owned()).collect(),
                ),
            }),
            // Only the headers that can hold a key (an empty list would send them all).
            grpc: grpc.then(|| HttpRouteRulesFiltersExternalAuthGrpc {
                allowed_headers: Some(vec!["authorization".into(), "x-api-key".into()]),
            }),
            forward_body: None,
        }),
        ..HttpRouteRulesFilters::default()
    };
    // A rule with no backendRefs answers 500 whoever calls; it stays filter-free so
    // that holds on every implementation (see route::refuse_adapter_admin).
    let routed = route.spec.rules.iter_mut().flatten();
    for rule in routed.filter(|r| r.backend_refs.is_some()) {
        rule.filters
            .get_or_insert_with(Vec::new)
            .insert(0, filter.clone());
    }
}
