//! What routes a deployment that scales to zero through modelplane's activator while it has
//! no available replica: a Service without a selector, named `<name>-activator`, whose
//! EndpointSlice names the activator's addresses (Kubernetes' "Services without selectors":
//! the slice is labelled `kubernetes.io/service-name` and managed by modelplane, not by the
//! EndpointSlice controller), and the deployment's HTTPRoute sending everything to it with
//! the path rewritten to `/_activator/{deployment id}/...` so the activator knows whose
//! request it holds. Knative reaches its activator the same way (a revision's public
//! Service's endpoints are the activator's while the revision is at zero).

use std::collections::BTreeMap;
use std::net::IpAddr;

use gateway_api::experimental::httproutes::{
    HttpRoute, HttpRouteRules, HttpRouteRulesBackendRefs, HttpRouteRulesFilters,
    HttpRouteRulesFiltersType, HttpRouteRulesFiltersUrlRewrite,
    HttpRouteRulesFiltersUrlRewritePath, HttpRouteRulesFiltersUrlRewritePathType,
    HttpRouteRulesMatches, HttpRouteRulesMatchesPath, HttpRouteRulesMatchesPathType,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::route::{GatewayRef, adapter_admin_rule, route_object, route_path_prefix};
use super::selectorless::selectorless;
use super::{Target, generation_metadata};
use crate::domain::ACTIVATOR_SUFFIX;

/// Where the activator listens, as the Gateway reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivatorAddress {
    pub addresses: Vec<IpAddr>,
    pub port: u16,
}

/// The path prefix the activator serves (`api::activator::PREFIX`).
pub const ACTIVATOR_PATH: &str = "/_activator";

/// The port of the activator Service (the slice maps it to the activator's own port).
const SERVICE_PORT: i32 = 80;

/// The activator's objects for one deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivatorObjects {
    pub service: Service,
    /// Owned by `service` once it exists (the worker sets the owner), so the garbage
    /// collector removes it with the Service.
    pub slice: EndpointSlice,
    /// The deployment's route while no replica is available.
    pub route: HttpRoute,
}

/// The name of a deployment's activator Service and EndpointSlice.
pub fn activator_name(deployment: &str) -> String {
    format!("{deployment}{ACTIVATOR_SUFFIX}")
}

pub(super) fn activator_objects(
    t: &Target,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    gateway: &GatewayRef,
    address: &ActivatorAddress,
) -> ActivatorObjects {
    let name = activator_name(&t.record.name);
    let (service, slice) = selectorless(
        generation_metadata(t, &name, namespace, labels),
        SERVICE_PORT,
        address,
    );
    let mut route = route_object(t, namespace, labels, gateway, None, false);
    let prefix = route_path_prefix(t);
    let refused = adapter_admin_rule(t, None);
    route.spec.rules = Some(
        refused
            .into_iter()
            .chain([HttpRouteRules {
                matches: Some(vec![HttpRouteRulesMatches {
                    path: Some(HttpRouteRulesMatchesPath {
                        r#type: Some(HttpRouteRulesMatchesPathType::PathPrefix),
                        value: Some(prefix),
                    }),
                    ..HttpRouteRulesMatches::default()
                }]),
                backend_refs: Some(vec![HttpRouteRulesBackendRefs {
                    group: Some(String::new()),
                    kind: Some("Service".into()),
                    name,
                    port: Some(SERVICE_PORT),
                    weight: Some(1),
                    ..HttpRouteRulesBackendRefs::default()
                }]),
                filters: Some(vec![HttpRouteRulesFilters {
                    r#type: HttpRouteRulesFiltersType::UrlRewrite,
                    url_rewrite: Some(HttpRouteRulesFiltersUrlRewrite {
                        path: Some(HttpRouteRulesFiltersUrlRewritePath {
                            r#type: HttpRouteRulesFiltersUrlRewritePathType::ReplacePrefixMatch,
                            replace_prefix_match: Some(format!("{ACTIVATOR_PATH}/{}", t.record.id)),
                            ..HttpRouteRulesFiltersUrlRewritePath::default()
                        }),
                        ..HttpRouteRulesFiltersUrlRewrite::default()
                    }),
                    ..HttpRouteRulesFilters::default()
                }]),
                ..HttpRouteRules::default()
            }])
            .collect(),
    );
    ActivatorObjects {
        service,
        slice,
        route,
    }
}
