//! The HTTPRoute that attaches a deployment to its Gateway, and the Gateway it names.

use std::collections::BTreeMap;

use gateway_api::experimental::httproutes::{
    HttpRoute, HttpRouteParentRefs, HttpRouteRules, HttpRouteRulesBackendRefs,
    HttpRouteRulesFilters, HttpRouteRulesFiltersType, HttpRouteRulesFiltersUrlRewrite,
    HttpRouteRulesFiltersUrlRewritePath, HttpRouteRulesFiltersUrlRewritePathType,
    HttpRouteRulesMatches, HttpRouteRulesMatchesHeaders, HttpRouteRulesMatchesHeadersType,
    HttpRouteRulesMatchesPath, HttpRouteRulesMatchesPathType, HttpRouteSpec,
};

use super::{BuildConfig, CanaryPlan, Target, metadata};
use crate::domain::ServingSpec;

/// Where the route attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayRef {
    pub namespace: String,
    pub name: String,
    pub section: Option<String>,
}

/// The gateway a deployment routes through, if any.
pub fn gateway_of(serving: &ServingSpec, config: &BuildConfig) -> Option<GatewayRef> {
    let text = serving
        .spec
        .routing
        .gateway
        .as_deref()
        .or(config.default_gateway.as_deref())?;
    let (namespace, name, section) = crate::domain::parse_gateway_ref(text).ok()?;
    Some(GatewayRef {
        namespace,
        name,
        section,
    })
}

/// The path prefix of the route: the spec's, else `/{project}/{name}` unless a hostname is set.
pub fn route_path_prefix(t: &Target) -> String {
    crate::domain::effective_path_prefix(&t.serving.spec, &t.record.project, &t.record.name)
}

/// The route: every request under the prefix to the Service; with a canary, the ones
/// carrying its header to the canary, and the rest split by weight between the tracks.
pub(super) fn route_object(
    t: &Target,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    gateway: &GatewayRef,
    canary: Option<&CanaryPlan>,
    pool: bool,
) -> HttpRoute {
    let prefix = route_path_prefix(t);
    // The engine serves /v1/...; strip the route's prefix on the way in.
    let rewrite = (prefix != "/").then(prefix_rewrite);
    let path = HttpRouteRulesMatchesPath {
        r#type: Some(HttpRouteRulesMatchesPathType::PathPrefix),
        value: Some(prefix),
    };
    let mut rules = Vec::new();
    rules.extend(adapter_admin_rule(t, canary));
    let backends = match canary {
        // The pool's endpoint picker chooses the pod; a pool has no port of its own.
        None if pool => vec![pool_backend(t)],
        None => vec![service_backend(t, 1)],
        Some(plan) => {
            rules.push(canary_header_rule(plan, &path, rewrite.clone()));
            let weight = plan.routed_weight.clamp(0, 100);
            vec![
                service_backend(t, 100 - weight),
                service_backend(&plan.target, weight),
            ]
        }
    };
    rules.push(HttpRouteRules {
        matches: Some(vec![HttpRouteRulesMatches {
            path: Some(path),
            ..HttpRouteRulesMatches::default()
        }]),
        backend_refs: Some(backends),
        filters: rewrite,
        ..HttpRouteRules::default()
    });
    let mut route = HttpRoute::new(
        &t.record.name,
        HttpRouteSpec {
            parent_refs: Some(vec![parent_ref(gateway)]),
            rules: Some(rules),
            hostnames: t.serving.spec.routing.hostname.clone().map(|h| vec![h]),
            use_default_gateways: None,
        },
    );
    route.metadata = metadata(t, namespace, labels);
    route
}

/// The engine's runtime adapter API (vLLM's `/v1/load_lora_adapter` and
/// `/v1/unload_lora_adapter`, served once `VLLM_ALLOW_RUNTIME_LORA_UPDATING` is set) is
/// for the worker's adapter loader, which calls pods directly; through the Gateway it
/// would let any caller load or drop adapters.
pub const ADAPTER_ADMIN_PATHS: [&str; 2] = ["/v1/load_lora_adapter", "/v1/unload_lora_adapter"];

/// The rule refusing the adapter API when a track of this route runs an engine with it on.
pub(super) fn adapter_admin_rule(
    t: &Target,
    canary: Option<&CanaryPlan>,
) -> Option<HttpRouteRules> {
    let on = !t.serving.adapters.is_empty()
        || canary.is_some_and(|plan| !plan.target.serving.adapters.is_empty());
    on.then(|| refuse_adapter_admin(&route_path_prefix(t)))
}

/// A rule for the adapter API's paths under the route's prefix with no backendRefs: the
/// Gateway answers it 500 without reaching a pod ("HTTPRouteNoBackendRefs" in the Gateway
/// API conformance suite; HTTPRouteRule.BackendRefs in apis/v1/httproute_types.go). A
/// PathPrefix match is element-wise, so `/v1/load_lora_adapter/` is caught too, and its
/// longer prefix wins over the route's own (HTTPRouteRule precedence).
fn refuse_adapter_admin(prefix: &str) -> HttpRouteRules {
    let base = prefix.trim_end_matches('/');
    let matches = ADAPTER_ADMIN_PATHS
        .iter()
        .map(|p| HttpRouteRulesMatches {
            path: Some(HttpRouteRulesMatchesPath {
                r#type: Some(HttpRouteRulesMatchesPathType::PathPrefix),
                value: Some(format!("{base}{p}")),
            }),
            ..HttpRouteRulesMatches::default()
        })
        .collect();
    HttpRouteRules {
        matches: Some(matches),
        ..HttpRouteRules::default()
    }
}

fn parent_ref(gateway: &GatewayRef) -> HttpRouteParentRefs {
    HttpRouteParentRefs {
        group: Some("gateway.networking.k8s.io".into()),
        kind: Some("Gateway".into()),
        namespace: Some(gateway.namespace.clone()),
        name: gateway.name.clone(),
        section_name: gateway.section.clone(),
        ..HttpRouteParentRefs::default()
    }
}

/// Replaces the matched prefix with `/`.
fn prefix_rewrite() -> Vec<HttpRouteRulesFilters> {
    vec![HttpRouteRulesFilters {
        r#type: HttpRouteRulesFiltersType::UrlRewrite,
        url_rewrite: Some(HttpRouteRulesFiltersUrlRewrite {
            path: Some(HttpRouteRulesFiltersUrlRewritePath {
                r#type: HttpRouteRulesFiltersUrlRewritePathType::ReplacePrefixMatch,
                replace_prefix_match: Some("/".into()),
                ..HttpRouteRulesFiltersUrlRewritePath::default()
            }),
            ..HttpRouteRulesFiltersUrlRewrite::default()
        }),
        ..HttpRouteRulesFilters::default()
    }]
}

/// A track's Service as a weighted backend.
fn service_backend(target: &Target, weight: i32) -> HttpRouteRulesBackendRefs {
    HttpRouteRulesBackendRefs {
        group: Some(String::new()),
        kind: Some("Service".into()),
        name: target.record.name.clone(),
        port: Some(target.serving.port),
        weight: Some(weight),
        ..HttpRouteRulesBackendRefs::default()
    }
}

/// The deployment's InferencePool as the backend.
fn pool_backend(t: &Target) -> HttpRouteRulesBackendRefs {
    HttpRouteRulesBackendRefs {
        group: Some("inference.networking.k8s.io".into()),
        kind: Some("InferencePool".into()),
        name: t.record.name.clone(),
        weight: Some(1),
        ..HttpRouteRulesBackendRefs::default()
    }
}

/// The rule that sends the requests carrying the canary's header to the canary. The
/// Gateway API prefers, among equal paths, the match with more headers (HTTPRouteRule's
/// precedence), so it wins for requests carrying the header.
fn canary_header_rule(
    plan: &CanaryPlan,
    path: &HttpRouteRulesMatchesPath,
    rewrite: Option<Vec<HttpRouteRulesFilters>>,
) -> HttpRouteRules {
    HttpRouteRules {
        matches: Some(vec![HttpRouteRulesMatches {
            path: Some(path.clone()),
            headers: Some(vec![HttpRouteRulesMatchesHeaders {
                name: plan.header.name.clone(),
                r#type: Some(HttpRouteRulesMatchesHeadersType::Exact),
                value: plan.header.value.clone(),
            }]),
            ..HttpRouteRulesMatches::default()
        }]),
        backend_refs: Some(vec![service_backend(&plan.target, 1)]),
        filters: rewrite,
        ..HttpRouteRules::default()
    }
}
